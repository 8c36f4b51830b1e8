//! Moving ioctl data between a caller and the simulator, for every device file in one place: the
//! kernel's ioctl buffer (`kdata`: copied in, read and written by field or as a whole struct,
//! copied out) and `copy_from_user` of what its pointers point to, all through the [`Client`].
//!
//! Every access is checked: a field past the end of the buffer reads as zero and is not written,
//! a bad user address is an errno, so no caller input can panic the simulator.

use kfd_abi::Errno;

use crate::client::Client;
use crate::host::Pod;

/// What an ioctl handler returns: the ioctl's return value, or its errno.
pub(crate) type IoctlResult = Result<i32, Errno>;

/// The ioctl's kernel buffer: `size` zeroed bytes, of which the first `copy_in` are copied from
/// the caller's `arg` (`EFAULT` if that fails).
pub(crate) fn copy_in_kdata(
    client: &dyn Client,
    arg: u64,
    copy_in: usize,
    size: usize,
) -> Result<Vec<u8>, Errno> {
    let mut kdata = vec![0u8; size.max(copy_in)];
    if copy_in > 0 {
        client
            .read_user(arg, &mut kdata[..copy_in])
            .map_err(|_| Errno::EFAULT)?;
    }
    Ok(kdata)
}

/// Runs `f` on the argument struct decoded from the kernel buffer and stores it back (also on
/// error: the driver copies its buffer out whatever the result).
pub(crate) fn with_args<T: Pod>(
    kdata: &mut [u8],
    f: impl FnOnce(&mut T) -> IoctlResult,
) -> IoctlResult {
    let mut a = T::read_from(kdata).ok_or(Errno::EINVAL)?;
    let r = f(&mut a);
    a.write_to(kdata);
    r
}

/// The `N` bytes at byte `off` of a buffer, if it has them.
fn field<const N: usize>(kdata: &[u8], off: usize) -> Option<[u8; N]> {
    kdata.get(off..off.checked_add(N)?)?.try_into().ok()
}

fn field_mut<const N: usize>(kdata: &mut [u8], off: usize) -> Option<&mut [u8; N]> {
    kdata.get_mut(off..off.checked_add(N)?)?.try_into().ok()
}

/// The little-endian `u32` at byte `off` of a buffer (0 past its end).
pub(crate) fn get_u32(kdata: &[u8], off: usize) -> u32 {
    field(kdata, off).map_or(0, u32::from_le_bytes)
}

/// The little-endian `u64` at byte `off` of a buffer (0 past its end).
pub(crate) fn get_u64(kdata: &[u8], off: usize) -> u64 {
    field(kdata, off).map_or(0, u64::from_le_bytes)
}

/// Stores `v` little-endian at byte `off` of a buffer (nothing past its end).
pub(crate) fn put_u32(kdata: &mut [u8], off: usize, v: u32) {
    if let Some(b) = field_mut::<4>(kdata, off) {
        *b = v.to_le_bytes();
    }
}

/// Stores `v` little-endian at byte `off` of a buffer (nothing past its end).
pub(crate) fn put_u64(kdata: &mut [u8], off: usize, v: u64) {
    if let Some(b) = field_mut::<8>(kdata, off) {
        *b = v.to_le_bytes();
    }
}

/// The bytes of a plain-data struct, as `copy_to_user` sends them.
pub(crate) fn struct_bytes<T: Pod>(v: &T) -> Vec<u8> {
    let mut b = vec![0u8; std::mem::size_of::<T>()];
    v.write_to(&mut b);
    b
}

/// An fd number as the kernel reads it from a `u32` field.
pub(crate) fn fd_from_field(v: u32) -> i32 {
    i32::from_ne_bytes(v.to_ne_bytes())
}

/// An installed fd number as the kernel stores it in a `u32` field.
pub(crate) fn fd_to_field(fd: i32) -> u32 {
    u32::from_ne_bytes(fd.to_ne_bytes())
}

/// `copy_from_user` of `len` bytes, read in chunks so that a huge length over unmapped memory
/// fails fast without a huge allocation.
pub(crate) fn copy_from_user(client: &dyn Client, addr: u64, len: u64) -> Result<Vec<u8>, Errno> {
    const CHUNK: u64 = 1 << 16;
    let mut out = Vec::new();
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(CHUNK);
        let at = addr.checked_add(done).ok_or(Errno::EFAULT)?;
        let start = out.len();
        out.resize(start + usize::try_from(n).map_err(|_| Errno::ENOMEM)?, 0);
        client.read_user(at, &mut out[start..])?;
        done += n;
    }
    Ok(out)
}

/// `copy_to_user` of `bytes` at the caller's `addr` (`EFAULT` if that fails; nothing to copy never
/// fails). The ioctl's kernel buffer goes back to the caller this way too.
pub(crate) fn copy_to_user(client: &dyn Client, addr: u64, bytes: &[u8]) -> Result<(), Errno> {
    if bytes.is_empty() {
        return Ok(());
    }
    client.write_user(addr, bytes).map_err(|_| Errno::EFAULT)
}

/// `copy_from_user` of one plain-data struct.
pub(crate) fn copy_struct_from_user<T: Pod>(client: &dyn Client, addr: u64) -> Result<T, Errno> {
    let mut b = vec![0u8; std::mem::size_of::<T>()];
    client.read_user(addr, &mut b)?;
    T::read_from(&b).ok_or(Errno::EFAULT)
}

/// `EFAULT` unless the caller's bytes at `first` and `last` are both readable: the simulator's
/// stand-in for the driver's walk over the VMAs (or pinning of the pages) of `[first, last]`.
pub(crate) fn check_user_range(client: &dyn Client, first: u64, last: u64) -> Result<(), Errno> {
    let mut probe = [0u8; 1];
    for at in [first, last] {
        client
            .read_user(at, &mut probe)
            .map_err(|_| Errno::EFAULT)?;
    }
    Ok(())
}

/// A request code spelled as the C macros that make it (`_IOWR('K', 0x2a, 24)`): the name of a
/// request that no table of the simulated kernel names.
pub(crate) fn spell_request(cmd: u32) -> String {
    use kfd_abi::ioctl::{self, Dir};
    let macro_ = match ioctl::dir(cmd) {
        Dir::None => "_IO",
        Dir::Write => "_IOW",
        Dir::Read => "_IOR",
        Dir::ReadWrite => "_IOWR",
    };
    let ty = ioctl::ty(cmd);
    let ty = if ty.is_ascii_graphic() {
        format!("'{}'", char::from(ty))
    } else {
        format!("{ty:#04x}")
    };
    let nr = ioctl::nr(cmd);
    match ioctl::dir(cmd) {
        Dir::None => format!("{macro_}({ty}, {nr:#04x})"),
        _ => format!("{macro_}({ty}, {nr:#04x}, {} bytes)", ioctl::size(cmd)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_past_the_end_read_as_zero_and_are_not_written() {
        let mut k = [0u8; 10];
        put_u64(&mut k, 0, 0x1122_3344_5566_7788);
        put_u32(&mut k, 8, 0xdead_beef);
        put_u64(&mut k, 4, u64::MAX);
        assert_eq!(get_u64(&k, 0), 0x1122_3344_5566_7788);
        assert_eq!(get_u32(&k, 4), 0x1122_3344);
        assert_eq!(
            (get_u32(&k, 8), get_u64(&k, 4), get_u32(&k, usize::MAX - 2)),
            (0, 0, 0)
        );
    }

    #[test]
    fn fd_fields_carry_negative_numbers_unchanged() {
        assert_eq!(fd_from_field(fd_to_field(-1)), -1);
        assert_eq!(fd_to_field(-1), 0xffff_ffff);
        assert_eq!(fd_from_field(7), 7);
    }
}
