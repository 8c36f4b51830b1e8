#!/usr/bin/perl
# A minimal CUSE server (perl-base is on every Debian system): registers the character device
# /dev/NAME and answers open, read (with a fixed line) and release; anything else gets ENOSYS.
# Usage: cuse-hello.pl NAME. It only shows that the guest can serve devices from userspace; the
# real server is kfd-simd. Structures: <linux/fuse.h>.
use strict;
use warnings;
use Fcntl qw(O_RDWR);

my $name = shift // die "usage: $0 NAME\n";
my $greeting = "hello from cuse\n";

use constant {
    FUSE_OPEN => 14, FUSE_READ => 15, FUSE_RELEASE => 18, CUSE_INIT => 4096,
    ENOSYS => 38, IN_HEADER_LEN => 40,
};

sysopen(my $cuse, '/dev/cuse', O_RDWR) or die "open /dev/cuse: $!\n";
$| = 1;

# fuse_out_header {u32 len; i32 error; u64 unique} then the payload.
sub reply {
    my ($unique, $error, $payload) = @_;
    $payload //= '';
    my $msg = pack('Ll<Q', 16 + length($payload), $error, $unique) . $payload;
    syswrite($cuse, $msg) == length($msg) or die "reply: $!\n";
}

while (1) {
    # The kernel wants a read buffer of at least 8 KiB plus max_write.
    my $n = sysread($cuse, my $req, 1 << 17);
    die "read /dev/cuse: $!\n" unless defined $n;
    exit 0 if $n == 0;
    # fuse_in_header {u32 len, opcode; u64 unique, nodeid; u32 uid, gid, pid; u16 extlen, pad}
    my ($len, $opcode, $unique) = unpack('LLQ', $req);
    my $body = substr($req, IN_HEADER_LEN);
    if ($opcode == CUSE_INIT) {
        # cuse_init_out {u32 major, minor, unused, flags, max_read, max_write, dev_major,
        # dev_minor, spare[10]} then the NUL-separated info strings; major 0: a dynamic number.
        my $out = pack('L8 x40', 7, 31, 0, 0, 65536, 65536, 0, 0) . "DEVNAME=$name\0";
        reply($unique, 0, $out);
        print "registered /dev/$name\n";
    } elsif ($opcode == FUSE_OPEN) {
        reply($unique, 0, pack('QLL', 1, 0, 0));    # fuse_open_out {u64 fh; u32 flags, pad}
    } elsif ($opcode == FUSE_READ) {
        my (undef, undef, $size) = unpack('QQL', $body);   # fuse_read_in {fh, offset, size, ...}
        reply($unique, 0, substr($greeting, 0, $size));
        print "read of $size bytes\n";
    } elsif ($opcode == FUSE_RELEASE) {
        reply($unique, 0);
    } else {
        reply($unique, -ENOSYS);
    }
}
