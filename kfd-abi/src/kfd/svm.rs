//! Shared virtual memory on `/dev/kfd`: the attributes of SVM ranges and the XNACK mode
//! (whether GPU page faults are retried).

use std::ffi::c_void;
use std::mem::size_of;

use kfd_sys as sys;

use crate::error::{IoctlError, Result};
use crate::handle::DeviceFile;
use crate::ioctl::kfd::req;
use crate::transport::Transport;

use super::Kfd;

/// One SVM attribute (`KFD_IOCTL_SVM_ATTR_*` type and value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SvmAttribute {
    /// `KFD_IOCTL_SVM_ATTR_*`.
    pub ty: u32,
    /// The value (a gpu id, flags or a granularity).
    pub value: u32,
}

/// `KFD_IOCTL_SVM_OP_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum SvmOp {
    /// Set attributes on a range.
    SetAttr = sys::KFD_IOCTL_SVM_OP_SET_ATTR,
    /// Get attributes of a range.
    GetAttr = sys::KFD_IOCTL_SVM_OP_GET_ATTR,
}

/// Largest attribute count one SVM call carries (the size field of the request code is 14 bits).
pub(crate) const SVM_MAX_ATTRS: usize = (0x3fff - size_of::<sys::kfd_ioctl_svm_args>()) / 8;

impl<T: Transport> Kfd<T> {
    fn svm(&self, op: SvmOp, start: u64, size: u64, attrs: &mut [SvmAttribute]) -> Result<()> {
        if attrs.len() > SVM_MAX_ATTRS {
            return Err(IoctlError::InvalidArgument {
                ioctl: "SVM".into(),
                what: format!("{} attributes (at most {SVM_MAX_ATTRS})", attrs.len()),
            });
        }
        // Header (24 bytes) then the attributes, in u64 words to keep the 8-byte alignment.
        let mut buf = vec![0u64; 3 + attrs.len()];
        buf[0] = start;
        buf[1] = size;
        #[allow(clippy::cast_possible_truncation)] // bounded by SVM_MAX_ATTRS
        let nattr = attrs.len() as u32;
        buf[2] = u64::from(op as u32) | (u64::from(nattr) << 32);
        for (w, at) in buf[3..].iter_mut().zip(attrs.iter()) {
            *w = u64::from(at.ty) | (u64::from(at.value) << 32);
        }
        let code = req::SVM.with_size(buf.len() * 8);
        // SAFETY: `buf` holds the whole variable-size argument whose size `code` encodes; the SVM
        // ioctl dereferences no pointer inside it.
        unsafe { self.issue("SVM".into(), code, buf.as_mut_ptr().cast::<c_void>()) }?;
        for (w, at) in buf[3..].iter().zip(attrs.iter_mut()) {
            #[allow(clippy::cast_possible_truncation)] // splitting a u64 into its halves
            {
                at.ty = *w as u32;
                at.value = (*w >> 32) as u32;
            }
        }
        Ok(())
    }

    /// Sets SVM attributes on `start..start + size` (`SVM`, `SET_ATTR`).
    pub fn svm_set_attr(&self, start: u64, size: u64, attrs: &[SvmAttribute]) -> Result<()> {
        self.svm(SvmOp::SetAttr, start, size, &mut attrs.to_vec())
    }

    /// Reads SVM attributes of `start..start + size` into `attrs` (`SVM`, `GET_ATTR`): the caller
    /// names the attribute types, the driver fills the values.
    pub fn svm_get_attr(&self, start: u64, size: u64, attrs: &mut [SvmAttribute]) -> Result<()> {
        self.svm(SvmOp::GetAttr, start, size, attrs)
    }

    /// Sets the XNACK mode (`SET_XNACK_MODE`); returns the mode now in force.
    pub fn set_xnack_mode(&self, enabled: bool) -> Result<bool> {
        let mut a = sys::kfd_ioctl_set_xnack_mode_args {
            xnack_enabled: i32::from(enabled),
        };
        self.read_write(req::SET_XNACK_MODE, &mut a)?;
        Ok(a.xnack_enabled != 0)
    }

    /// Queries the XNACK mode (`SET_XNACK_MODE` with -1).
    pub fn xnack_mode(&self) -> Result<bool> {
        let mut a = sys::kfd_ioctl_set_xnack_mode_args { xnack_enabled: -1 };
        self.read_write(req::SET_XNACK_MODE, &mut a)?;
        Ok(a.xnack_enabled != 0)
    }
}
