//! The typed layer over a real file descriptor, and over a recording transport that plays the
//! driver, to check how arguments are laid out.

#![allow(clippy::unwrap_used)]

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use kfd_abi::criu::ProcessInfo;
use kfd_abi::ioctl::{self, kfd as codes};
use kfd_abi::kfd::SvmAttribute;
use kfd_abi::{Errno, FdTransport, GpuId, Kfd, Transport};
use kfd_sys as sys;

#[test]
fn a_file_that_is_not_kfd_fails_with_a_readable_error() {
    let kfd = Kfd::open(Path::new("/dev/null")).unwrap();
    let err = kfd.get_version().unwrap_err();
    assert_eq!(err.errno(), Some(Errno::ENOTTY));
    assert_eq!(
        err.to_string(),
        "GET_VERSION on /dev/null failed: ENOTTY (not a device that understands this ioctl)"
    );
}

#[test]
fn opening_a_missing_node_names_the_path() {
    let err = Kfd::open(Path::new("/nonexistent/kfd")).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("cannot open /nonexistent/kfd: "),
        "{err}"
    );
}

/// A transport that answers ioctls with a closure.
struct Fake {
    fd: OwnedFd,
    answer: Box<dyn Fn(u32, *mut c_void) -> Result<i32, Errno> + Send + Sync>,
}

impl std::fmt::Debug for Fake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fake")
    }
}

impl AsFd for Fake {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Transport for Fake {
    unsafe fn ioctl(&self, request: u32, arg: *mut c_void) -> Result<i32, Errno> {
        (self.answer)(request, arg)
    }

    unsafe fn adopt_fd(&self, raw: RawFd) -> io::Result<OwnedFd> {
        // SAFETY: the fake "driver" below installs real fds it opened for this purpose.
        Ok(unsafe { OwnedFd::from_raw_fd(raw) })
    }

    fn try_clone(&self) -> io::Result<Self> {
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }
}

fn fake(
    answer: impl Fn(u32, *mut c_void) -> Result<i32, Errno> + Send + Sync + 'static,
) -> Kfd<Fake> {
    let fd = FdTransport::open(Path::new("/dev/null")).unwrap().into_fd();
    Kfd::new(
        Fake {
            fd,
            answer: Box::new(answer),
        },
        "fake",
    )
}

#[test]
fn svm_encodes_the_attribute_count_in_the_request_size() {
    let kfd = fake(|req, arg| {
        assert_eq!(ioctl::nr(req), ioctl::nr(codes::SVM));
        assert_eq!(ioctl::size(req), 24 + 8 * 3);
        // SAFETY: the request size says the buffer holds 48 bytes.
        let words = unsafe { std::slice::from_raw_parts_mut(arg.cast::<u32>(), 12) };
        assert_eq!(words[4], sys::KFD_IOCTL_SVM_OP_GET_ATTR);
        assert_eq!(words[5], 3);
        for (i, w) in words[6..].chunks_mut(2).enumerate() {
            w[1] = 100 + u32::try_from(i).unwrap(); // the driver fills in values
        }
        Ok(0)
    });
    let mut attrs = [
        SvmAttribute { ty: 0, value: 0 },
        SvmAttribute { ty: 2, value: 0 },
        SvmAttribute { ty: 7, value: 0 },
    ];
    kfd.svm_get_attr(0x1000, 0x2000, &mut attrs).unwrap();
    assert_eq!(
        attrs.map(|a| (a.ty, a.value)),
        [(0, 100), (2, 101), (7, 102)]
    );
}

#[test]
fn checkpoint_adopts_every_installed_dmabuf_and_skips_invalid_ones() {
    let kfd = fake(|req, arg| {
        assert_eq!(req, codes::CRIU_OP);
        // SAFETY: CRIU_OP's argument is a criu_args.
        let a = unsafe { &mut *arg.cast::<sys::kfd_ioctl_criu_args>() };
        assert_eq!(a.op, sys::KFD_CRIU_OP_CHECKPOINT);
        // SAFETY: the typed layer sized the arrays with the counts it passes.
        let bos = unsafe {
            std::slice::from_raw_parts_mut(
                a.bos as *mut sys::kfd_criu_bo_bucket,
                a.num_bos as usize,
            )
        };
        for (i, b) in bos.iter_mut().enumerate() {
            b.addr = 0x1000 * (i as u64 + 1);
            b.alloc_flags = if i == 0 {
                sys::KFD_IOC_ALLOC_MEM_FLAGS_VRAM
            } else {
                sys::KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL
            };
            b.dmabuf_fd = if i == 0 {
                // SAFETY: plain libc call; the "driver" installs a new fd.
                u32::try_from(unsafe { libc::dup(0) }).unwrap()
            } else {
                sys::KFD_INVALID_FD
            };
        }
        Ok(0)
    });
    let info = ProcessInfo {
        pid: 1,
        num_devices: 1,
        num_bos: 2,
        num_objects: 0,
        priv_data_size: 8,
    };
    let ck = kfd.criu_checkpoint(&info).unwrap();
    assert_eq!(ck.bos.len(), 2);
    assert!(ck.bos[0].dmabuf.is_some());
    assert!(ck.bos[1].dmabuf.is_none());
    assert_eq!(ck.priv_data.len(), 8);
}

#[test]
fn acquire_vm_passes_the_render_fd_number() {
    let kfd = fake(|req, arg| {
        assert_eq!(req, codes::ACQUIRE_VM);
        // SAFETY: ACQUIRE_VM's argument.
        let a = unsafe { &*arg.cast::<sys::kfd_ioctl_acquire_vm_args>() };
        assert_eq!(a.gpu_id, 0x1234);
        if a.drm_fd == 0 {
            Ok(0)
        } else {
            Err(Errno::EINVAL)
        }
    });
    // SAFETY: fd 0 is open for the life of the test process.
    let stdin = unsafe { BorrowedFd::borrow_raw(0) };
    kfd.acquire_vm(GpuId::new(0x1234).unwrap(), stdin).unwrap();
}
