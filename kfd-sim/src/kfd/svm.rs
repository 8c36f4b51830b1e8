//! The SVM ioctl (`kfd_svm.c`): setting and getting the attributes of shared virtual memory
//! ranges, split and merged at their borders.

use std::mem::{offset_of, size_of};

use kfd_abi::Errno;
use kfd_sys as sys;

use super::KfdCall;
use crate::host::access_ok;
use crate::host::{lock, Vma};
use crate::state::process::{KfdProcess, ProcState};
use crate::state::svm_range::{SvmAccess, SvmRange};
use crate::uaccess::{get_u32, get_u64, put_u32, IoctlResult};

/// Byte offsets in `kfd_ioctl_svm_args`, whose attributes follow it in the ioctl buffer.
const START: usize = offset_of!(sys::kfd_ioctl_svm_args, start_addr);
const SIZE: usize = offset_of!(sys::kfd_ioctl_svm_args, size);
const SVM_HDR: usize = offset_of!(sys::kfd_ioctl_svm_args, attrs);
/// One `kfd_ioctl_svm_attribute`, and the offsets of its fields.
const SVM_ATTR: usize = size_of::<sys::kfd_ioctl_svm_attribute>();
const ATTR_TYPE: usize = offset_of!(sys::kfd_ioctl_svm_attribute, type_);
const ATTR_VALUE: usize = offset_of!(sys::kfd_ioctl_svm_attribute, value);
const SVM_UNDEFINED: u32 = sys::KFD_IOCTL_SVM_LOCATION_UNDEFINED;
const SVM_DEFAULT_FLAGS: u32 =
    sys::KFD_IOCTL_SVM_FLAG_HOST_ACCESS | sys::KFD_IOCTL_SVM_FLAG_COHERENT;

/// A range with default attributes.
pub(super) fn svm_default(st: &ProcState, start: u64, end: u64) -> SvmRange {
    let access = if st.xnack {
        SvmAccess::Access
    } else {
        SvmAccess::None
    };
    SvmRange {
        start,
        size: end - start,
        preferred: SVM_UNDEFINED,
        prefetch: SVM_UNDEFINED,
        flags: SVM_DEFAULT_FLAGS,
        granularity: 9,
        access: vec![access; st.pdds.len()],
    }
}

/// `svm_range_is_valid`: every page of the range is in a VMA of the caller that is no device
/// mapping (a hole or a device VMA anywhere is `EFAULT`: the walk from `find_vma` on), and no BO
/// is mapped in a GPU VM there (`EADDRINUSE`).
fn svm_range_valid(call: &KfdCall<'_>, st: &ProcState, start: u64, end: u64) -> Result<(), Errno> {
    let vmas = call.client.vmas()?;
    let mut at = start;
    while at < end {
        // find_vma: the first VMA that ends above `at`.
        let vma = vmas.iter().find(|v| v.end > at).ok_or(Errno::EFAULT)?;
        if at < vma.start || vma.device {
            return Err(Errno::EFAULT);
        }
        at = end.min(vma.end);
    }
    for pdd in &st.pdds {
        if let Some(drm) = &pdd.drm {
            let vm = lock(&drm.vm);
            if vm
                .mappings()
                .any(|(va, m)| va < end && start < va.saturating_add(m.size))
            {
                return Err(Errno::EADDRINUSE);
            }
        }
    }
    Ok(())
}

/// Applies SET_ATTR attributes to `[start, end)`, splitting existing ranges at the borders.
pub(super) fn svm_apply(st: &mut ProcState, start: u64, end: u64, attrs: &[(u32, u32)]) {
    let old = std::mem::take(&mut st.svm);
    let mut keep = Vec::new();
    let mut inside = Vec::new();
    for r in old {
        if r.end() <= start || r.start >= end {
            keep.push(r);
            continue;
        }
        if r.start < start {
            keep.push(SvmRange {
                size: start - r.start,
                ..r.clone()
            });
        }
        if r.end() > end {
            keep.push(SvmRange {
                start: end,
                size: r.end() - end,
                ..r.clone()
            });
        }
        let s = r.start.max(start);
        let e = r.end().min(end);
        inside.push(SvmRange {
            start: s,
            size: e - s,
            ..r
        });
    }
    // Gaps become new ranges with default attributes.
    inside.sort_by_key(|r| r.start);
    let mut cursor = start;
    let mut gaps = Vec::new();
    for r in &inside {
        if r.start > cursor {
            gaps.push(svm_default(st, cursor, r.start));
        }
        cursor = r.end();
    }
    if cursor < end {
        gaps.push(svm_default(st, cursor, end));
    }
    inside.extend(gaps);
    for r in &mut inside {
        for &(ty, value) in attrs {
            match ty {
                sys::KFD_IOCTL_SVM_ATTR_PREFERRED_LOC => r.preferred = value,
                sys::KFD_IOCTL_SVM_ATTR_PREFETCH_LOC => r.prefetch = value,
                sys::KFD_IOCTL_SVM_ATTR_ACCESS
                | sys::KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE
                | sys::KFD_IOCTL_SVM_ATTR_NO_ACCESS => {
                    if let Some(slot) = st.pdd_by_user_id(value).and_then(|i| r.access.get_mut(i)) {
                        *slot = match ty {
                            sys::KFD_IOCTL_SVM_ATTR_ACCESS => SvmAccess::Access,
                            sys::KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE => SvmAccess::InPlace,
                            _ => SvmAccess::None,
                        };
                    }
                }
                sys::KFD_IOCTL_SVM_ATTR_SET_FLAGS => r.flags |= value,
                sys::KFD_IOCTL_SVM_ATTR_CLR_FLAGS => r.flags &= !value,
                sys::KFD_IOCTL_SVM_ATTR_GRANULARITY => r.granularity = value.min(0x3f),
                _ => {}
            }
        }
    }
    keep.extend(inside);
    keep.sort_by_key(|r| r.start);
    st.svm = keep;
}

/// `svm_range_unmap_from_cpu`, as the MMU notifier calls it for an `MMU_NOTIFY_UNMAP` of
/// `[start, end)` (bytes) in the process's address space: the unmapped part of every SVM range
/// goes (a range across a border is split there, each part keeping its attributes; its GPU
/// mappings of the part go with it). Nothing else of the process changes: BOs, userptr BOs
/// included, stay as they are. Returns whether any range changed.
pub(crate) fn unmap_from_cpu(process: &KfdProcess, start: u64, end: u64) -> bool {
    if start >= end {
        return false;
    }
    let mut st = process.lock();
    let changed = unmap_ranges(&mut st.svm, start, end);
    if changed {
        log::debug!(
            "kfd: pid {}: unmap of {start:#x}..{end:#x} dropped that part of its SVM ranges",
            process.pid
        );
    }
    changed
}

/// Removes `[start, end)` from `ranges` (kept in address order), splitting at the borders.
fn unmap_ranges(ranges: &mut Vec<SvmRange>, start: u64, end: u64) -> bool {
    if !ranges.iter().any(|r| r.start < end && start < r.end()) {
        return false;
    }
    let old = std::mem::take(ranges);
    for r in old {
        if r.end() <= start || r.start >= end {
            ranges.push(r);
            continue;
        }
        if r.start < start {
            ranges.push(SvmRange {
                size: start - r.start,
                ..r.clone()
            });
        }
        if r.end() > end {
            ranges.push(SvmRange {
                start: end,
                size: r.end() - end,
                ..r
            });
        }
    }
    true
}

/// The fallback when unmaps went unrecorded: every part of an SVM range that no VMA of
/// `vmas` (the process's mappings, in address order) covers any more is dropped, as the unmaps
/// that made those holes would have dropped it. A range whose address was mapped again since
/// cannot be told from one that never went, and stays. Returns whether any range changed.
pub(crate) fn unmap_outside(process: &KfdProcess, vmas: &[Vma]) -> bool {
    let changed = cut_to_vmas(&mut process.lock().svm, vmas);
    if changed {
        log::debug!(
            "kfd: pid {}: SVM ranges cut to the process's mappings",
            process.pid
        );
    }
    changed
}

/// Removes from `ranges` every part outside `vmas` (in address order).
fn cut_to_vmas(ranges: &mut Vec<SvmRange>, vmas: &[Vma]) -> bool {
    let Some(lo) = ranges.first().map(|r| r.start) else {
        return false;
    };
    let hi = ranges.iter().map(SvmRange::end).max().unwrap_or(lo);
    let mut changed = false;
    let mut at = lo;
    for v in vmas.iter().filter(|v| v.end > lo && v.start < hi) {
        if v.start > at {
            changed |= unmap_ranges(ranges, at, v.start);
        }
        at = at.max(v.end);
    }
    if at < hi {
        changed |= unmap_ranges(ranges, at, hi);
    }
    changed
}

fn svm_location_ok(st: &ProcState, v: u32) -> bool {
    v == sys::KFD_IOCTL_SVM_LOCATION_SYSMEM || v == SVM_UNDEFINED || st.pdd_by_user_id(v).is_some()
}

/// `kfd_ioctl_svm_validate` (6.1.y stable): the caller's size (`_IOC_SIZE` of its request code,
/// not the buffer the kernel rounds up to its own struct) must hold the header and every
/// attribute `nattr` announces; `EINVAL` otherwise, before anything else is looked at.
pub(super) fn validate(kdata: &[u8], usize_: usize) -> Result<(), Errno> {
    let nattr = u64::from(get_u32(kdata, offset_of!(sys::kfd_ioctl_svm_args, nattr)));
    let expected = nattr * SVM_ATTR as u64 + SVM_HDR as u64;
    if (usize_ as u64) < expected {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// `kfd_ioctl_svm`: start and size page-aligned and not zero (`EINVAL`), then `svm_ioctl` on
/// pages. The arguments are copied back unchanged.
pub(super) fn svm(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    let (start_addr, size) = (get_u64(kdata, START), get_u64(kdata, SIZE));
    if start_addr % 4096 != 0 || size % 4096 != 0 || start_addr == 0 || size == 0 {
        return Err(Errno::EINVAL);
    }
    let start = start_addr >> 12;
    let npages = size >> 12;
    let op = get_u32(kdata, offset_of!(sys::kfd_ioctl_svm_args, op));
    let nattr = get_u32(kdata, offset_of!(sys::kfd_ioctl_svm_args, nattr)) as usize;
    // The attributes travel in the ioctl buffer; `validate` checked that the caller's size holds
    // them, which this repeats against the buffer so that no read can pass its end.
    let attr_end = nattr
        .checked_mul(SVM_ATTR)
        .and_then(|n| n.checked_add(SVM_HDR));
    let Some(attr_end) = attr_end.filter(|&e| e <= kdata.len()) else {
        return Err(Errno::EINVAL);
    };
    let attrs: Vec<(u32, u32)> = (SVM_HDR..attr_end)
        .step_by(SVM_ATTR)
        .map(|off| {
            (
                get_u32(kdata, off + ATTR_TYPE),
                get_u32(kdata, off + ATTR_VALUE),
            )
        })
        .collect();
    svm_op(call, start, npages, op, &attrs, kdata)
}

fn svm_op(
    call: &KfdCall<'_>,
    start_p: u64,
    npages: u64,
    op: u32,
    attrs: &[(u32, u32)],
    kdata: &mut [u8],
) -> IoctlResult {
    let start = start_p << 12;
    let end = start_p
        .checked_add(npages)
        .and_then(|e| e.checked_mul(4096))
        .ok_or(Errno::EINVAL)?;
    if npages == 0 || !access_ok(start, npages << 12) {
        return Err(Errno::EINVAL);
    }
    let mut st = call.process.lock();
    match op {
        sys::KFD_IOCTL_SVM_OP_SET_ATTR => {
            for &(ty, v) in attrs {
                let ok = match ty {
                    sys::KFD_IOCTL_SVM_ATTR_PREFERRED_LOC => svm_location_ok(&st, v),
                    // A prefetch goes somewhere: system memory or a GPU, not UNDEFINED.
                    sys::KFD_IOCTL_SVM_ATTR_PREFETCH_LOC => {
                        v == sys::KFD_IOCTL_SVM_LOCATION_SYSMEM || st.pdd_by_user_id(v).is_some()
                    }
                    sys::KFD_IOCTL_SVM_ATTR_ACCESS
                    | sys::KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE
                    | sys::KFD_IOCTL_SVM_ATTR_NO_ACCESS => st.pdd_by_user_id(v).is_some(),
                    sys::KFD_IOCTL_SVM_ATTR_SET_FLAGS
                    | sys::KFD_IOCTL_SVM_ATTR_CLR_FLAGS
                    | sys::KFD_IOCTL_SVM_ATTR_GRANULARITY => true,
                    _ => false,
                };
                if !ok {
                    return Err(Errno::EINVAL);
                }
            }
            svm_range_valid(call, &st, start, end)?;
            svm_apply(&mut st, start, end, attrs);
            st.svm_mem = Some(call.client.process_memory());
            Ok(0)
        }
        sys::KFD_IOCTL_SVM_OP_GET_ATTR => {
            // svm_range_get_attr: the range first, then the attribute types; ACCESS_IN_PLACE and
            // NO_ACCESS are answers, not questions (EINVAL as input).
            svm_range_valid(call, &st, start, end)?;
            for &(ty, _) in attrs {
                let ok = matches!(
                    ty,
                    sys::KFD_IOCTL_SVM_ATTR_PREFERRED_LOC
                        | sys::KFD_IOCTL_SVM_ATTR_PREFETCH_LOC
                        | sys::KFD_IOCTL_SVM_ATTR_ACCESS
                        | sys::KFD_IOCTL_SVM_ATTR_SET_FLAGS
                        | sys::KFD_IOCTL_SVM_ATTR_CLR_FLAGS
                        | sys::KFD_IOCTL_SVM_ATTR_GRANULARITY
                );
                if !ok {
                    return Err(Errno::EINVAL);
                }
            }
            let found: Vec<&SvmRange> = st
                .svm
                .iter()
                .filter(|r| r.start < end && start < r.end())
                .collect();
            let default = svm_default(&st, start, end);
            let ranges: Vec<&SvmRange> = if found.is_empty() {
                vec![&default]
            } else {
                found
            };
            let first = ranges.first().copied().unwrap_or(&default);
            let same = |f: fn(&SvmRange) -> u32| {
                let v = f(first);
                if ranges.iter().all(|r| f(r) == v) {
                    v
                } else {
                    SVM_UNDEFINED
                }
            };
            let location = same(|r| r.preferred);
            let prefetch = same(|r| r.prefetch);
            let flags_and = ranges.iter().fold(u32::MAX, |acc, r| acc & r.flags);
            let flags_or = ranges.iter().fold(0, |acc, r| acc | r.flags);
            let granularity = ranges.iter().map(|r| r.granularity).min().unwrap_or(9);
            let mut out = Vec::with_capacity(attrs.len());
            for &(ty, v) in attrs {
                let (ty, v) = match ty {
                    sys::KFD_IOCTL_SVM_ATTR_PREFERRED_LOC => (ty, location),
                    sys::KFD_IOCTL_SVM_ATTR_PREFETCH_LOC => (ty, prefetch),
                    sys::KFD_IOCTL_SVM_ATTR_ACCESS => {
                        let gi = st.pdd_by_user_id(v).ok_or(Errno::EINVAL)?;
                        let all =
                            |a: SvmAccess| ranges.iter().all(|r| r.access.get(gi) == Some(&a));
                        let t = if all(SvmAccess::InPlace) {
                            sys::KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE
                        } else if ranges
                            .iter()
                            .all(|r| r.access.get(gi).is_some_and(|&a| a != SvmAccess::None))
                        {
                            sys::KFD_IOCTL_SVM_ATTR_ACCESS
                        } else {
                            sys::KFD_IOCTL_SVM_ATTR_NO_ACCESS
                        };
                        (t, v)
                    }
                    sys::KFD_IOCTL_SVM_ATTR_SET_FLAGS => (ty, flags_and),
                    sys::KFD_IOCTL_SVM_ATTR_CLR_FLAGS => (ty, !flags_or),
                    _ => (ty, granularity),
                };
                out.push((ty, v));
            }
            for (i, (ty, v)) in out.into_iter().enumerate() {
                put_u32(kdata, SVM_HDR + i * SVM_ATTR + ATTR_TYPE, ty);
                put_u32(kdata, SVM_HDR + i * SVM_ATTR + ATTR_VALUE, v);
            }
            Ok(0)
        }
        _ => Err(Errno::EINVAL),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const P: u64 = 4096;

    /// A range of `[start, end)` pages with a preferred location that tells it apart.
    fn range(start: u64, end: u64, preferred: u32) -> SvmRange {
        SvmRange {
            start: start * P,
            size: (end - start) * P,
            preferred,
            prefetch: SVM_UNDEFINED,
            flags: SVM_DEFAULT_FLAGS,
            granularity: 9,
            access: vec![SvmAccess::None; 2],
        }
    }

    /// What is left, as `(first page, end page, preferred)`.
    fn left(ranges: &[SvmRange]) -> Vec<(u64, u64, u32)> {
        ranges
            .iter()
            .map(|r| (r.start / P, r.end() / P, r.preferred))
            .collect()
    }

    #[rstest]
    #[case::the_middle_splits(2, 4, true, vec![(0, 2, 1), (4, 8, 1), (10, 12, 2)])]
    #[case::a_border_of_each(6, 11, true, vec![(0, 6, 1), (11, 12, 2)])]
    #[case::a_whole_range(0, 8, true, vec![(10, 12, 2)])]
    #[case::both_and_the_gap(0, 12, true, vec![])]
    #[case::the_gap_only(8, 10, false, vec![(0, 8, 1), (10, 12, 2)])]
    #[case::beyond_every_range(12, 20, false, vec![(0, 8, 1), (10, 12, 2)])]
    fn an_unmap_removes_its_part_of_every_range(
        #[case] start: u64,
        #[case] end: u64,
        #[case] changed: bool,
        #[case] want: Vec<(u64, u64, u32)>,
    ) {
        let mut ranges = vec![range(0, 8, 1), range(10, 12, 2)];
        assert_eq!(unmap_ranges(&mut ranges, start * P, end * P), changed);
        assert_eq!(left(&ranges), want);
    }

    #[test]
    fn lost_unmaps_cut_the_ranges_to_the_mappings() {
        let vma = |start: u64, end: u64| Vma {
            start: start * P,
            end: end * P,
            device: false,
        };
        let mut ranges = vec![range(0, 8, 1), range(10, 12, 2), range(20, 22, 3)];
        // Holes at pages 2..3 and 6..11; page 20.. is mapped beyond the last range's end.
        let vmas = [vma(0, 2), vma(3, 6), vma(11, 12), vma(20, 30)];
        assert!(cut_to_vmas(&mut ranges, &vmas));
        assert_eq!(
            left(&ranges),
            vec![(0, 2, 1), (3, 6, 1), (11, 12, 2), (20, 22, 3)]
        );
        assert!(!cut_to_vmas(&mut ranges, &vmas), "nothing more to cut");
        assert!(cut_to_vmas(&mut ranges, &[]), "no mappings: nothing stays");
        assert!(ranges.is_empty());
    }
}
