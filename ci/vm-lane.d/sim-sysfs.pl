#!/usr/bin/perl
# Mounts kfd-simd's sysfs slice over the guest's /sys, merged with the real sysfs (kfd.inc,
# mount_sim_sysfs, says what and why). One process doing the mount(2) calls itself: in the guest
# every exec from the 9p root is slow, and the merge takes some hundreds of mounts and links.
# Usage: sim-sysfs.pl SIM REAL TOP...: for each TOP (devices, class, ...), a tmpfs over /sys/TOP
# holding REAL/TOP's entries (directories and files bound back, links copied) and SIM/TOP's
# entries that REAL/TOP lacks (bound or copied); a directory in both is merged one level down; a
# link or file in both stays REAL's. x86-64 (the lane's guest): mount is system call 165.
use strict;
use warnings;

use constant { SYS_MOUNT => 165, MS_BIND => 4096 };

my ($sim, $real, @tops) = @ARGV;
die "usage: $0 SIM REAL TOP...\n" unless defined $real && @tops;
my $mounts = 0;

sub do_mount {
    my ($src, $dst, $type, $flags, $data) = @_;
    syscall(SYS_MOUNT, $src, $dst, $type, $flags, $data) == 0
        or die "mount $src on $dst: $!\n";
    $mounts++;
}

sub entries {
    my ($dir) = @_;
    opendir(my $dh, $dir) or die "opendir $dir: $!\n";
    my @names = grep { $_ ne '.' && $_ ne '..' } readdir($dh);
    closedir($dh);
    return @names;
}

sub is_dir { my ($p) = @_; return !-l $p && -d $p }

# Puts what $from is at $to (an absent path in the tmpfs): a link's copy, or a bind mount.
sub place {
    my ($from, $to) = @_;
    if (-l $from) {
        my $target = readlink($from) // die "readlink $from: $!\n";
        symlink($target, $to) or die "symlink $to: $!\n";
    } elsif (-d $from) {
        mkdir($to) or die "mkdir $to: $!\n";
        do_mount($from, $to, 'none', MS_BIND, '');
    } else {
        open(my $fh, '>', $to) or die "create $to: $!\n";
        close($fh);
        do_mount($from, $to, 'none', MS_BIND, '');
    }
}

sub merge {
    my ($target, $r, $s) = @_;
    do_mount('kfd-sim-sysfs', $target, 'tmpfs', 0, 'mode=0755');
    my %real = map { $_ => 1 } entries($r);
    for my $name (sort keys %real) {
        if (is_dir("$s/$name") && is_dir("$r/$name")) {
            mkdir("$target/$name") or die "mkdir $target/$name: $!\n";
            merge("$target/$name", "$r/$name", "$s/$name");
        } else {
            place("$r/$name", "$target/$name");
        }
    }
    for my $name (sort(entries($s))) {
        place("$s/$name", "$target/$name") unless $real{$name};
    }
}

for my $top (@tops) {
    next unless -d "$sim/$top";
    merge("/sys/$top", "$real/$top", "$sim/$top");
}
print "sim-sysfs: $mounts mounts\n";
