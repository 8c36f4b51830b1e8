//! Integration tests across the workspace, and what they share: the backend switch between the
//! simulator and hardware ([`backend`]), platforms as a test changes them ([`view`]), and a
//! transport and a platform that fail on demand, to inject a driver error at every step of a
//! dump or a restore.

use std::ffi::c_void;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use amdgpu_plugin::copy::Staging;
use amdgpu_plugin::criu::Settings;
use kfd_abi::transport::Forward;
use kfd_abi::{Errno, Platform, Transport};

pub mod backend;
pub mod view;

pub use view::{View, Viewed};

/// Which ioctl to fail: the `fail_at`-th one (counting from 1) issued through any transport of
/// the plan's platform; 0 never fails.
#[derive(Debug, Default)]
pub struct FaultPlan {
    fail_at: AtomicU64,
    seen: AtomicU64,
    failed: Mutex<Option<Failed>>,
}

/// The ioctl a plan failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failed {
    /// Its request code.
    pub request: u32,
    /// For `CRIU_OP`, the operation.
    pub criu_op: Option<u32>,
}

impl Failed {
    /// Whether it was `CRIU_OP(UNPAUSE)` (which no error path can make up for).
    pub fn is_unpause(&self) -> bool {
        self.criu_op == Some(kfd_sys::KFD_CRIU_OP_UNPAUSE)
    }
}

impl Failed {
    /// Whether the ioctl is one that cleanup also issues (unmapping, closing a GEM handle,
    /// freeing a context): its failure there is logged, not fatal.
    pub fn may_be_cleanup(&self) -> bool {
        use kfd_abi::ioctl::drm;
        [drm::AMDGPU_GEM_VA, drm::GEM_CLOSE, drm::AMDGPU_CTX].contains(&self.request)
    }
}

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.criu_op {
            Some(op) => write!(f, "{}", kfd_abi::CriuOp::from(op).ioctl_name()),
            None => f.write_str(kfd_abi::ioctl::name(self.request)),
        }
    }
}

impl FaultPlan {
    /// A plan that fails the `n`-th ioctl with `EIO`.
    pub fn fail_at(n: u64) -> Arc<Self> {
        let p = Self::default();
        p.fail_at.store(n, Ordering::SeqCst);
        Arc::new(p)
    }

    /// The ioctl that was failed, if one was.
    pub fn failed(&self) -> Option<Failed> {
        *self
            .failed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Ioctls seen so far.
    pub fn seen(&self) -> u64 {
        self.seen.load(Ordering::SeqCst)
    }

    fn check(&self, request: u32, criu_op: impl FnOnce() -> Option<u32>) -> Result<(), Errno> {
        let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.fail_at.load(Ordering::SeqCst) {
            let failed = Failed {
                request,
                criu_op: criu_op(),
            };
            *self
                .failed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(failed);
            return Err(Errno::EIO);
        }
        Ok(())
    }
}

/// A transport that forwards to `T` and fails where its plan says.
#[derive(Debug)]
pub struct Faulty<T> {
    inner: T,
    plan: Arc<FaultPlan>,
}

impl<T: AsFd> AsFd for Faulty<T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

impl<T: Transport> Forward for Faulty<T> {
    type Inner = T;

    fn inner(&self) -> &T {
        &self.inner
    }

    unsafe fn before_ioctl(&self, request: u32, arg: *mut c_void) -> Result<(), Errno> {
        self.plan.check(request, || {
            (request == kfd_abi::ioctl::kfd::CRIU_OP).then(|| {
                // SAFETY: the caller guarantees `arg` is a valid argument of `request`, which for
                // CRIU_OP is a `kfd_ioctl_criu_args`.
                unsafe { (*arg.cast::<kfd_sys::kfd_ioctl_criu_args>()).op }
            })
        })
    }

    fn dup(&self) -> io::Result<Self> {
        Ok(Self {
            inner: self.inner.try_clone()?,
            plan: Arc::clone(&self.plan),
        })
    }
}

/// The view of a platform whose device files fail where the plan says.
#[derive(Debug)]
pub struct Faults {
    plan: Arc<FaultPlan>,
}

impl<P: Platform> View<P> for Faults {
    type Device = Faulty<P::Device>;

    fn device(&self, inner: P::Device) -> Faulty<P::Device> {
        Faulty {
            inner,
            plan: Arc::clone(&self.plan),
        }
    }
}

/// A platform whose device files fail where the plan says.
pub type FaultyPlatform<P> = Viewed<P, Faults>;

impl<P> FaultyPlatform<P> {
    /// Wraps `inner`.
    pub fn new(inner: P, plan: Arc<FaultPlan>) -> Self {
        Self {
            inner,
            view: Faults { plan },
        }
    }
}

/// The plugin's settings with no environment (every variable unset), staging through `buffers`
/// buffers of `buffer_size` bytes.
pub fn staged_settings(buffer_size: usize, buffers: usize) -> Settings {
    let mut s = Settings::from_lookup(|_| None, false);
    s.staging = Staging {
        buffer_size,
        buffers,
    };
    s
}

/// The number of open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
}
