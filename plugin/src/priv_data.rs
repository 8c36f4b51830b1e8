//! The driver's private CRIU data where a restore must change it: onto a node where the
//! restoring process has more GPUs than the image.
//!
//! The 6.1 driver's `CRIU_OP(RESTORE)` takes one device bucket per GPU of the restoring process
//! (`num_devices` must equal its number of per-device records, which `open("/dev/kfd")` made for
//! every GPU the process's device cgroup allows), and reads, from the private data, one record
//! per device and, in each SVM range record, one access attribute per device. An image holds
//! those for the GPUs the checkpointed process had. For the restoring process's other GPUs this
//! module inserts what the driver would have written for a GPU the range was never given: a zero
//! (reserved) device record, and a `NO_ACCESS` attribute naming the GPU by the id the restore
//! gives it.
//!
//! Layout (kernel version 1, as the 6.1 driver writes it; native endian): an 8-byte process
//! record; one 8-byte record per device; one 80-byte record per BO; then the objects, each
//! starting with a `u32` type: queues (a 120-byte header with `ctl_stack_size` at 108 and
//! `mqd_size` at 112, then the MQD and the control stack), events (64 bytes), SVM ranges (a
//! 24-byte header, then `4 + devices` attributes of 8 bytes: `{u32 type, u32 value}`).

/// Bytes of the process record.
const PROCESS_RECORD: usize = 8;
/// Bytes of a device record (a reserved `u64`, zero).
const DEVICE_RECORD: usize = 8;
/// Bytes of a BO record with 6.1's 16 `mapped_gpuids`.
const BO_RECORD: usize = 8 + 4 + 4 * 16;
/// Bytes of a queue record's header, and where its variable parts' sizes are.
const QUEUE_HEADER: usize = 120;
const QUEUE_CTL_STACK_SIZE: usize = 108;
const QUEUE_MQD_SIZE: usize = 112;
/// Bytes of an event record.
const EVENT_RECORD: usize = 64;
/// Bytes of an SVM range record's header, and its attributes before the per-device ones.
const SVM_HEADER: usize = 24;
const SVM_COMMON_ATTRS: usize = 4;
/// Bytes of an SVM attribute.
const SVM_ATTR: usize = 8;
/// Object types.
const OBJECT_QUEUE: u32 = 0;
const OBJECT_EVENT: u32 = 1;
const OBJECT_SVM_RANGE: u32 = 2;
/// `KFD_IOCTL_SVM_ATTR_NO_ACCESS` (`<linux/kfd_ioctl.h>`).
const SVM_ATTR_NO_ACCESS: u32 = 4;

/// The private data does not have the layout this module knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the driver's private data in the image does not have the 6.1 layout ({what}); it can only \
     be restored onto exactly the GPUs it was taken with"
)]
pub struct PrivDataError {
    /// Where the walk failed.
    pub what: String,
}

fn short(what: String) -> PrivDataError {
    PrivDataError { what }
}

fn u32_at(data: &[u8], at: usize) -> Result<u32, PrivDataError> {
    at.checked_add(4)
        .and_then(|end| data.get(at..end))
        .and_then(|b| b.try_into().ok())
        .map(u32::from_ne_bytes)
        .ok_or_else(|| short(format!("{} bytes end before offset {}", data.len(), at + 4)))
}

/// `priv_data`, taken with `image_devices` GPUs, `num_bos` BOs and `num_objects` objects,
/// rewritten for a restore with those GPUs plus `extra_user_ids` (the ids the restore gives
/// the restoring process's other GPUs, in the order of their device buckets after the image's).
///
/// # Errors
///
/// [`PrivDataError`] when the data does not walk exactly to its end with that layout.
pub(crate) fn for_more_devices(
    priv_data: &[u8],
    image_devices: usize,
    num_bos: usize,
    num_objects: u32,
    extra_user_ids: &[u32],
) -> Result<Vec<u8>, PrivDataError> {
    let extra = extra_user_ids.len();
    let fixed = image_devices
        .checked_mul(DEVICE_RECORD)
        .and_then(|d| num_bos.checked_mul(BO_RECORD)?.checked_add(d))
        .and_then(|n| n.checked_add(PROCESS_RECORD))
        .filter(|&n| n <= priv_data.len())
        .ok_or_else(|| {
            short(format!(
                "{} bytes hold no process record, {image_devices} device records and {num_bos} \
                 BO records",
                priv_data.len()
            ))
        })?;
    let mut out = Vec::with_capacity(priv_data.len() + extra * (DEVICE_RECORD + SVM_ATTR));
    let devices_end = PROCESS_RECORD + image_devices * DEVICE_RECORD;
    out.extend_from_slice(&priv_data[..devices_end]);
    out.resize(out.len() + extra * DEVICE_RECORD, 0);
    out.extend_from_slice(&priv_data[devices_end..fixed]);

    let svm_attrs = (SVM_COMMON_ATTRS + image_devices) * SVM_ATTR;
    let mut at = fixed;
    for i in 0..num_objects {
        let len = match u32_at(priv_data, at)? {
            OBJECT_QUEUE => {
                let mqd = u32_at(priv_data, at + QUEUE_MQD_SIZE)? as usize;
                let ctl = u32_at(priv_data, at + QUEUE_CTL_STACK_SIZE)? as usize;
                QUEUE_HEADER + mqd + ctl
            }
            OBJECT_EVENT => EVENT_RECORD,
            OBJECT_SVM_RANGE => SVM_HEADER + svm_attrs,
            other => return Err(short(format!("object {i} has type {other}"))),
        };
        let record = at
            .checked_add(len)
            .and_then(|end| priv_data.get(at..end))
            .ok_or_else(|| short(format!("object {i} runs past the end")))?;
        out.extend_from_slice(record);
        if u32_at(record, 0)? == OBJECT_SVM_RANGE {
            for &id in extra_user_ids {
                out.extend_from_slice(&SVM_ATTR_NO_ACCESS.to_ne_bytes());
                out.extend_from_slice(&id.to_ne_bytes());
            }
        }
        at += len;
    }
    if at != priv_data.len() {
        return Err(short(format!(
            "{} bytes follow the last object",
            priv_data.len() - at
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32s(values: &[u32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_ne_bytes()).collect()
    }

    /// Private data of 2 devices, 1 BO, a queue (MQD 16, control stack 8), an event and an SVM
    /// range whose two device attributes are ACCESS (2) of 0x11 and 0x22.
    fn sample() -> Vec<u8> {
        let mut d = u32s(&[1, 0]); // version 1, xnack off
        d.extend(vec![0u8; 2 * DEVICE_RECORD]);
        d.extend(vec![0xb0; BO_RECORD]);
        let mut queue = vec![0x90; QUEUE_HEADER];
        queue[..4].copy_from_slice(&OBJECT_QUEUE.to_ne_bytes());
        queue[QUEUE_CTL_STACK_SIZE..QUEUE_CTL_STACK_SIZE + 4].copy_from_slice(&8u32.to_ne_bytes());
        queue[QUEUE_MQD_SIZE..QUEUE_MQD_SIZE + 4].copy_from_slice(&16u32.to_ne_bytes());
        d.extend(queue);
        d.extend(vec![0x91; 16 + 8]);
        let mut event = vec![0xe0; EVENT_RECORD];
        event[..4].copy_from_slice(&OBJECT_EVENT.to_ne_bytes());
        d.extend(event);
        let mut svm = vec![0u8; SVM_HEADER];
        svm[..4].copy_from_slice(&OBJECT_SVM_RANGE.to_ne_bytes());
        d.extend(svm);
        d.extend(u32s(&[0, 0, 1, 0, 5, 0, 7, 0, 2, 0x11, 2, 0x22]));
        d
    }

    #[test]
    fn extra_devices_get_a_zero_record_and_no_access_to_every_svm_range() {
        let before = sample();
        let after = for_more_devices(&before, 2, 1, 3, &[0x33, 0x44]).unwrap();
        assert_eq!(after.len(), before.len() + 2 * DEVICE_RECORD + 2 * SVM_ATTR);
        // Process record, then four zero device records, then the BO record unchanged.
        assert_eq!(after[..8], before[..8]);
        assert!(after[8..8 + 4 * DEVICE_RECORD].iter().all(|&b| b == 0));
        let bo = 8 + 4 * DEVICE_RECORD;
        assert_eq!(
            after[bo..bo + BO_RECORD],
            before[8 + 16..8 + 16 + BO_RECORD]
        );
        // Queue and event unchanged; the SVM range ends with the two new attributes.
        let tail = &after[after.len() - 4 * SVM_ATTR..];
        assert_eq!(tail, u32s(&[2, 0x11, 2, 0x22, 4, 0x33, 4, 0x44]).as_slice());
    }

    #[test]
    fn no_extra_device_changes_nothing() {
        let before = sample();
        assert_eq!(for_more_devices(&before, 2, 1, 3, &[]).unwrap(), before);
    }

    #[rstest::rstest]
    #[case::wrong_device_count(3, 1, 3)]
    #[case::wrong_bo_count(2, 2, 3)]
    #[case::too_few_objects(2, 1, 2)]
    #[case::too_many_objects(2, 1, 4)]
    fn data_that_does_not_walk_to_its_end_is_refused(
        #[case] devices: usize,
        #[case] bos: usize,
        #[case] objects: u32,
    ) {
        let err = for_more_devices(&sample(), devices, bos, objects, &[0x33]).unwrap_err();
        assert!(err.to_string().contains("6.1 layout"), "{err}");
    }

    #[test]
    fn an_unknown_object_type_is_refused() {
        let mut d = sample();
        let queue = 8 + 2 * DEVICE_RECORD + BO_RECORD;
        d[queue..queue + 4].copy_from_slice(&9u32.to_ne_bytes());
        let err = for_more_devices(&d, 2, 1, 3, &[0x33]).unwrap_err();
        assert!(err.what.contains("type 9"), "{err}");
    }
}
