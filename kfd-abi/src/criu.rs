//! `CRIU_OP`: the checkpoint/restore state machine of amdkfd as a typed API.
//!
//! Dump: [`Kfd::criu_process_info`] (pauses the queues) -> [`Kfd::criu_checkpoint`] -> read the
//! VRAM/GTT contents through the returned dma-bufs -> [`Kfd::criu_unpause`].
//! Restore, in the restored process: [`Kfd::criu_restore`] -> write contents through the returned
//! dma-bufs -> fix up the VMAs -> [`Kfd::criu_resume`] (from any process, with the pid).

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use kfd_sys as sys;

use crate::error::{bad_reply, IoctlError, Result};
use crate::handle::DeviceFile;
use crate::ioctl::kfd::req;
use crate::kfd::Kfd;
use crate::transport::Transport;
use crate::types::{AllocFlags, CriuOp, GpuId};

/// `KFD_INVALID_FD`: a bucket without a dma-buf.
pub(crate) const INVALID_FD: u32 = sys::KFD_INVALID_FD;

/// Largest private-data blob accepted from the driver or an image (1 GiB): far above what any
/// process needs (a queue's state is a few hundred KiB) and small enough to allocate.
pub(crate) const MAX_PRIV_DATA: u64 = 1 << 30;
/// Largest BO count accepted (the kernel's per-process limit is far lower in practice).
pub(crate) const MAX_BOS: u32 = 1 << 22;
/// Largest device count accepted.
pub(crate) const MAX_DEVICES: u32 = 1 << 10;

/// What `PROCESS_INFO` reports; the process's queues are paused from then on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessInfo {
    /// The process's pid in its own pid namespace.
    pub pid: u32,
    /// GPUs the process has opened (per-device records).
    pub num_devices: u32,
    /// BOs above the GPUVM base.
    pub num_bos: u32,
    /// Queues, events and SVM ranges.
    pub num_objects: u32,
    /// Size of the private data blob.
    pub priv_data_size: u64,
}

/// A device bucket: one GPU of the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceBucket {
    /// The id the process uses (its original id, also after a restore onto other GPUs).
    pub user_gpu_id: u32,
    /// The id of the physical GPU now.
    pub actual_gpu_id: u32,
}

/// A BO bucket of a checkpoint.
#[derive(Debug)]
pub struct BoBucket {
    /// GPU virtual address.
    pub addr: u64,
    /// Size in bytes.
    pub size: u64,
    /// The mmap offset (render-node offset, or the doorbell/MMIO offset on `/dev/kfd`).
    pub offset: u64,
    /// The GPU (its user id).
    pub gpu_id: u32,
    /// KFD allocation flags.
    pub alloc_flags: AllocFlags,
    /// A dma-buf of the contents, for VRAM and GTT BOs.
    pub dmabuf: Option<OwnedFd>,
}

/// Everything `CHECKPOINT` returns.
#[derive(Debug)]
pub struct Checkpoint {
    /// One bucket per GPU of the process.
    pub devices: Vec<DeviceBucket>,
    /// One bucket per BO, grouped by device.
    pub bos: Vec<BoBucket>,
    /// The driver's private data (kernel layout, opaque here).
    pub priv_data: Vec<u8>,
    /// Number of queue/event/SVM objects in `priv_data`.
    pub num_objects: u32,
}

/// A device to restore: the old id mapped onto a local GPU, with the render-node file whose VM
/// the restored process will use.
#[derive(Clone, Copy, Debug)]
pub struct RestoreDevice<'fd> {
    /// The id in the image (what the process keeps using).
    pub user_gpu_id: GpuId,
    /// The local GPU.
    pub actual_gpu_id: GpuId,
    /// A render node of the local GPU, opened by the restored process.
    pub drm: BorrowedFd<'fd>,
}

/// A BO to restore, as recorded at checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestoreBo {
    /// GPU virtual address.
    pub addr: u64,
    /// Size.
    pub size: u64,
    /// The old mmap offset.
    pub offset: u64,
    /// The GPU (user id).
    pub gpu_id: u32,
    /// KFD allocation flags.
    pub alloc_flags: AllocFlags,
}

impl From<&BoBucket> for RestoreBo {
    /// The BO as `CHECKPOINT` recorded it.
    fn from(b: &BoBucket) -> Self {
        Self {
            addr: b.addr,
            size: b.size,
            offset: b.offset,
            gpu_id: b.gpu_id,
            alloc_flags: b.alloc_flags,
        }
    }
}

/// A BO after `RESTORE`.
#[derive(Debug)]
pub struct RestoredBo {
    /// The new mmap offset, for the VMA fix-up.
    pub restored_offset: u64,
    /// A writable dma-buf of the contents, for VRAM and GTT BOs.
    pub dmabuf: Option<OwnedFd>,
}

fn criu_args(op: CriuOp) -> sys::kfd_ioctl_criu_args {
    sys::kfd_ioctl_criu_args {
        op: op.into(),
        ..Default::default()
    }
}

impl<T: Transport> Kfd<T> {
    fn criu(&self, op: CriuOp, args: &mut sys::kfd_ioctl_criu_args) -> Result<()> {
        // SAFETY: the callers point the array fields of `args` at buffers of the counts they
        // declare, which stay alive for the call.
        unsafe { self.call_named(op.ioctl_name(), req::CRIU_OP, args) }
    }

    /// Adopts the dma-buf fd of every bucket that has one (`fds` in bucket order), all of them
    /// before the first failure is reported, so that none of the installed fds leaks.
    fn adopt_dmabufs(
        &self,
        what: &'static str,
        fds: impl Iterator<Item = u32>,
    ) -> Result<Vec<Option<OwnedFd>>> {
        let mut out = Vec::with_capacity(fds.size_hint().0);
        let mut first_err = None;
        for raw in fds {
            if raw == INVALID_FD {
                out.push(None);
                continue;
            }
            match self.adopt(what, raw) {
                Ok(fd) => out.push(Some(fd)),
                Err(e) => {
                    first_err.get_or_insert(e);
                    out.push(None);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Pauses the process's queues and reports its counts (`CRIU_OP(PROCESS_INFO)`), on the
    /// target's `/dev/kfd` fd (criu's dup of it), by the target's ptrace parent.
    ///
    /// Each successful call evicts the queues once more: pair it with [`Kfd::criu_unpause`].
    ///
    /// # Errors
    ///
    /// `ENODEV` the process has no GPUs, `EOPNOTSUPP` a queue type that cannot be checkpointed,
    /// `EACCES` no CAP_CHECKPOINT_RESTORE.
    pub fn criu_process_info(&self) -> Result<ProcessInfo> {
        let mut a = criu_args(CriuOp::ProcessInfo);
        self.criu(CriuOp::ProcessInfo, &mut a)?;
        let info = ProcessInfo {
            pid: a.pid,
            num_devices: a.num_devices,
            num_bos: a.num_bos,
            num_objects: a.num_objects,
            priv_data_size: a.priv_data_size,
        };
        let name = CriuOp::ProcessInfo.ioctl_name();
        if info.num_devices > MAX_DEVICES
            || info.num_bos > MAX_BOS
            || info.priv_data_size > MAX_PRIV_DATA
        {
            return Err(bad_reply(
                name,
                self.label(),
                format!("implausible counts {info:?}"),
            ));
        }
        Ok(info)
    }

    /// Saves the process's device, BO and private state (`CRIU_OP(CHECKPOINT)`), with the counts
    /// of the preceding [`Kfd::criu_process_info`]. VRAM and GTT buckets come with a dma-buf.
    ///
    /// # Errors
    ///
    /// `EINVAL` not paused, or counts changed since `PROCESS_INFO`.
    pub fn criu_checkpoint(&self, info: &ProcessInfo) -> Result<Checkpoint> {
        let name = CriuOp::Checkpoint.ioctl_name();
        let priv_size = usize::try_from(info.priv_data_size)
            .ok()
            .filter(|&n| n as u64 <= MAX_PRIV_DATA)
            .ok_or_else(|| IoctlError::InvalidArgument {
                ioctl: name.clone(),
                what: format!("private data of {} bytes", info.priv_data_size),
            })?;
        let mut devices = vec![sys::kfd_criu_device_bucket::default(); info.num_devices as usize];
        let mut bos = vec![sys::kfd_criu_bo_bucket::default(); info.num_bos as usize];
        let mut priv_data = vec![0u8; priv_size];
        let mut a = sys::kfd_ioctl_criu_args {
            devices: devices.as_mut_ptr() as u64,
            bos: bos.as_mut_ptr() as u64,
            priv_data: priv_data.as_mut_ptr() as u64,
            priv_data_size: info.priv_data_size,
            num_devices: info.num_devices,
            num_bos: info.num_bos,
            num_objects: info.num_objects,
            pid: 0,
            op: CriuOp::Checkpoint.into(),
        };
        self.criu(CriuOp::Checkpoint, &mut a)?;

        // Adopt every installed fd first, so that none leaks if a later check fails.
        let dmabufs = self.adopt_dmabufs(
            "adopting a CHECKPOINT dma-buf",
            bos.iter().map(|b| b.dmabuf_fd),
        )?;
        let out: Vec<BoBucket> = bos
            .iter()
            .zip(dmabufs)
            .map(|(b, dmabuf)| BoBucket {
                addr: b.addr,
                size: b.size,
                offset: b.offset,
                gpu_id: b.gpu_id,
                alloc_flags: AllocFlags::from_bits_retain(b.alloc_flags),
                dmabuf,
            })
            .collect();
        if let Some(b) = out
            .iter()
            .find(|b| b.alloc_flags.has_contents() && b.dmabuf.is_none())
        {
            return Err(bad_reply(
                name,
                self.label(),
                format!("no dma-buf for the BO at {:#x}", b.addr),
            ));
        }
        Ok(Checkpoint {
            devices: devices
                .iter()
                .map(|d| DeviceBucket {
                    user_gpu_id: d.user_gpu_id,
                    actual_gpu_id: d.actual_gpu_id,
                })
                .collect(),
            bos: out,
            priv_data,
            num_objects: info.num_objects,
        })
    }

    /// Restarts the queues paused by `PROCESS_INFO` (`CRIU_OP(UNPAUSE)`).
    pub fn criu_unpause(&self) -> Result<()> {
        let mut a = criu_args(CriuOp::Unpause);
        self.criu(CriuOp::Unpause, &mut a)
    }

    /// Recreates a checkpointed process's KFD state in the calling process
    /// (`CRIU_OP(RESTORE)`), on a `/dev/kfd` it opened itself, before any `ACQUIRE_VM`.
    /// Returns, per BO in order, the new mmap offset and a writable dma-buf for VRAM/GTT BOs.
    ///
    /// # Errors
    ///
    /// `EINVAL` mismatched device count, unknown GPU, bad private data; `ENOMEM` an IDR handle
    /// already taken; `ENOSPC`/`EBUSY` queue or SDMA slots taken.
    pub fn criu_restore(
        &self,
        devices: &[RestoreDevice<'_>],
        bos: &[RestoreBo],
        priv_data: &[u8],
        num_objects: u32,
    ) -> Result<Vec<RestoredBo>> {
        let name = CriuOp::Restore.ioctl_name();
        let too_many = |what: &str, n: usize| IoctlError::InvalidArgument {
            ioctl: name.clone(),
            what: format!("{n} {what}"),
        };
        let num_devices =
            u32::try_from(devices.len()).map_err(|_| too_many("devices", devices.len()))?;
        let num_bos = u32::try_from(bos.len()).map_err(|_| too_many("BOs", bos.len()))?;
        let mut dev_buckets: Vec<sys::kfd_criu_device_bucket> = devices
            .iter()
            .map(|d| sys::kfd_criu_device_bucket {
                user_gpu_id: d.user_gpu_id.get(),
                actual_gpu_id: d.actual_gpu_id.get(),
                drm_fd: u32::try_from(d.drm.as_raw_fd()).unwrap_or(INVALID_FD),
                pad: 0,
            })
            .collect();
        let mut bo_buckets: Vec<sys::kfd_criu_bo_bucket> = bos
            .iter()
            .map(|b| sys::kfd_criu_bo_bucket {
                addr: b.addr,
                size: b.size,
                offset: b.offset,
                restored_offset: 0,
                gpu_id: b.gpu_id,
                alloc_flags: b.alloc_flags.bits(),
                dmabuf_fd: INVALID_FD,
                pad: 0,
            })
            .collect();
        // The driver reads but never writes private data; it takes a mutable pointer all the same.
        let mut priv_copy = priv_data.to_vec();
        let mut a = sys::kfd_ioctl_criu_args {
            devices: dev_buckets.as_mut_ptr() as u64,
            bos: bo_buckets.as_mut_ptr() as u64,
            priv_data: priv_copy.as_mut_ptr() as u64,
            priv_data_size: priv_copy.len() as u64,
            num_devices,
            num_bos,
            num_objects,
            pid: 0,
            op: CriuOp::Restore.into(),
        };
        self.criu(CriuOp::Restore, &mut a)?;

        let dmabufs = self.adopt_dmabufs(
            "adopting a RESTORE dma-buf",
            bo_buckets.iter().map(|b| b.dmabuf_fd),
        )?;
        Ok(bo_buckets
            .iter()
            .zip(dmabufs)
            .map(|(b, dmabuf)| RestoredBo {
                restored_offset: b.restored_offset,
                dmabuf,
            })
            .collect())
    }

    /// Starts the queues of the restored process `pid` (`CRIU_OP(RESUME)`), once its VMAs are
    /// in place. Any process may call it.
    ///
    /// # Errors
    ///
    /// `ESRCH` no KFD process with that pid, `EINVAL` it was not restored.
    pub fn criu_resume(&self, pid: u32) -> Result<()> {
        let mut a = criu_args(CriuOp::Resume);
        a.pid = pid;
        self.criu(CriuOp::Resume, &mut a)
    }
}
