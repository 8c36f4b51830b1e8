//! A full CRIU_OP cycle in process: a process with BOs on two GPUs, queues, events and an SVM
//! range is checkpointed by its ptrace parent, restored into a fresh process on a machine whose
//! GPUs have other ids, resumed, and checkpointed again: VAs, IDR handles, queue ids, event ids
//! and signaled states, and the contents read through the dma-bufs all match.

#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)] // test helpers, like the tests themselves, panic on failure

mod common;

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::FileExt;

use common::criu::*;
use common::*;
use kfd_abi::criu::{Checkpoint, RestoreDevice};
use kfd_abi::kfd::QueueDesc;
use kfd_abi::{AllocFlags, Errno, GpuId, Kfd, QueueType, WaitResult};
use kfd_sim::criu::{
    BO_PRIV_SIZE, DEVICE_PRIV_SIZE, EVENT_PRIV_SIZE, PROCESS_PRIV_SIZE, QUEUE_PRIV_SIZE,
    SVM_PRIV_SIZE,
};
use kfd_sim::{Machine, Preset, SimFile};

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

/// What the private data says: BO idr handles, queue ids, (event id, signaled), SVM ranges.
#[derive(Debug, PartialEq, Eq)]
struct Objects {
    idrs: Vec<u32>,
    queues: Vec<u32>,
    events: Vec<(u32, u32)>,
    svm: Vec<(u64, u64)>,
}

fn parse(c: &Checkpoint) -> Objects {
    let p = &c.priv_data;
    assert_eq!(u32_at(p, 0), 1, "priv_data version");
    let ndev = c.devices.len();
    let mut off = PROCESS_PRIV_SIZE + DEVICE_PRIV_SIZE * ndev;
    let mut idrs = Vec::new();
    for _ in &c.bos {
        idrs.push(u32_at(p, off + 8));
        off += BO_PRIV_SIZE;
    }
    let (mut queues, mut events, mut svm) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..c.num_objects {
        match u32_at(p, off) {
            0 => {
                queues.push(u32_at(p, off + 76));
                let extra = u32_at(p, off + 108) as usize + u32_at(p, off + 112) as usize;
                off += QUEUE_PRIV_SIZE + extra;
            }
            1 => {
                events.push((u32_at(p, off + 16), u32_at(p, off + 28)));
                off += EVENT_PRIV_SIZE;
            }
            2 => {
                svm.push((u64_at(p, off + 8), u64_at(p, off + 16)));
                off += SVM_PRIV_SIZE + 8 * (4 + ndev);
            }
            t => panic!("object type {t}"),
        }
    }
    assert_eq!(off, p.len(), "records fill priv_data exactly");
    Objects {
        idrs,
        queues,
        events,
        svm,
    }
}

fn pattern(i: usize, len: u64) -> Vec<u8> {
    (0..len).map(|j| (j as usize * 7 + i * 31) as u8).collect()
}

/// What a BO holds after the pattern pass: the pattern if its dma-buf was writable, else zeros.
fn expected(i: usize, b: &kfd_abi::criu::BoBucket) -> Vec<u8> {
    if b.alloc_flags.contains(AllocFlags::WRITABLE) {
        pattern(i, b.size)
    } else {
        vec![0; b.size as usize]
    }
}

#[test]
fn checkpoint_restore_onto_other_gpu_ids_and_checkpoint_again() {
    let src = source();
    let e = &src.env;
    let old_ids: Vec<u32> = e.gpus.iter().map(|g| g.get()).collect();

    // A first dump gives dma-bufs that alias the BOs' memory: fill each with a pattern.
    let (_criu, ck) = criu_view(&e.kfd, &e.proc);
    let info = ck.criu_process_info().unwrap();
    assert_eq!(info.pid, e.proc.pid());
    assert_eq!(
        (info.num_devices, info.num_bos, info.num_objects),
        (2, 6, 3 + 3 + 1)
    );
    let first = ck.criu_checkpoint(&info).unwrap();
    for (i, b) in first.bos.iter().enumerate() {
        let Some(fd) = &b.dmabuf else { continue };
        if b.alloc_flags.contains(AllocFlags::WRITABLE) {
            write_dmabuf(fd, &pattern(i, b.size));
        } else {
            let ro = File::from(fd.try_clone().unwrap());
            assert!(
                ro.write_at(b"x", 0).is_err(),
                "dma-buf of a read-only BO is read-only"
            );
        }
    }
    drop(first);
    ck.criu_unpause().unwrap();

    // The real dump.
    let info = ck.criu_process_info().unwrap();
    let c = ck.criu_checkpoint(&info).unwrap();
    ck.criu_unpause().unwrap();
    assert_eq!(c.priv_data.len() as u64, info.priv_data_size);
    let want = parse(&c);
    assert_eq!(want.idrs, [0, 1, 2, 0, 1, 2], "IDR order per device");
    assert_eq!(want.queues, [0, 1, 2]);
    assert_eq!(want.events, [(0, 1), (1, 0), (1 << 30, 0)]);
    assert_eq!(want.svm.len(), 1);
    for (i, b) in c.bos.iter().enumerate() {
        assert_eq!(b.dmabuf.is_some(), b.alloc_flags.has_contents());
        if let Some(fd) = &b.dmabuf {
            assert_eq!(read_dmabuf(fd, b.size), expected(i, b), "BO {i} contents");
        }
    }
    let doorbell = c
        .bos
        .iter()
        .find(|b| b.alloc_flags.contains(AllocFlags::DOORBELL))
        .unwrap();
    assert_eq!(doorbell.offset, (3 << 62) | (u64::from(old_ids[0]) << 46));

    // Restore into a fresh process on a machine whose GPUs have other ids.
    let RestoredElsewhere {
        machine: mb,
        process: r,
        kfd: rk,
        renders: _renders,
        bos: restored,
    } = restore_on_other_gpu_ids(&c);
    assert_eq!(restored.len(), c.bos.len());
    for (i, (b, rb)) in c.bos.iter().zip(&restored).enumerate() {
        assert_eq!(rb.dmabuf.is_some(), b.alloc_flags.has_contents());
        if let Some(fd) = &rb.dmabuf {
            write_dmabuf(fd, &read_dmabuf(c.bos[i].dmabuf.as_ref().unwrap(), b.size));
        }
        if b.alloc_flags.contains(AllocFlags::DOORBELL) {
            assert_eq!(
                rb.restored_offset,
                (3 << 62) | (0x3a01u64 << 46),
                "new actual gpu id"
            );
        }
        if b.alloc_flags.has_contents() {
            assert!(rb.restored_offset >= 1 << 32);
        }
    }
    // Queues stay evicted until RESUME, which criu issues by pid from its own /dev/kfd.
    let criu_b = mb.spawn_process();
    let kb = Kfd::new(criu_b.open_kfd().unwrap(), "/dev/kfd (criu)");
    kb.criu_resume(r.pid()).unwrap();
    assert_eq!(
        errno(kb.criu_resume(r.pid())),
        Some(Errno::EINVAL),
        "a second RESUME"
    );

    // The restored process keeps its old gpu ids and its events' states; the apertures name
    // the GPUs by their actual ids, as the driver's (`pdd->dev->id`).
    assert_eq!(
        mb.process_gpus(r.pid()).unwrap(),
        [(old_ids[0], 0x3a01), (old_ids[1], 0x3a02)]
    );
    let aps = rk.get_process_apertures_new().unwrap();
    assert_eq!(
        aps.iter().map(|a| a.gpu_id).collect::<Vec<_>>(),
        [0x3a01, 0x3a02]
    );
    assert_eq!(rk.get_process_apertures().unwrap(), aps);
    assert_eq!(
        rk.wait_events(&[src.events[0]], false, 0).unwrap(),
        WaitResult::Complete
    );
    assert_eq!(
        rk.wait_events(&[src.events[1]], false, 0).unwrap(),
        WaitResult::Timeout
    );
    // The node-change event is not restored: the driver recreates signal, debug, memory and HW
    // exception events only, and consumes the records of the others.
    assert_eq!(
        errno(rk.wait_events(&[src.events[2]], false, 0)),
        Some(Errno::EINVAL),
        "node-change event after restore"
    );

    // Dump the restored process again: the same objects but that event, the same contents.
    let (_criu2, kr) = criu_view(&rk, &r);
    let info2 = kr.criu_process_info().unwrap();
    assert_eq!(
        (info2.num_devices, info2.num_bos, info2.num_objects),
        (info.num_devices, info.num_bos, info.num_objects - 1)
    );
    let c2 = kr.criu_checkpoint(&info2).unwrap();
    kr.criu_unpause().unwrap();
    let mut want2 = parse(&c);
    assert_eq!(want2.events.pop(), Some((1 << 30, 0)));
    assert_eq!(parse(&c2), want2);
    let ids = |c: &Checkpoint| {
        c.devices
            .iter()
            .map(|d| (d.user_gpu_id, d.actual_gpu_id))
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&c2), [(old_ids[0], 0x3a01), (old_ids[1], 0x3a02)]);
    for (i, (a, b)) in c.bos.iter().zip(&c2.bos).enumerate() {
        assert_eq!(
            (a.addr, a.size, a.gpu_id, a.alloc_flags),
            (b.addr, b.size, b.gpu_id, b.alloc_flags),
            "BO {i}"
        );
        if let (Some(x), Some(y)) = (&a.dmabuf, &b.dmabuf) {
            assert_eq!(
                read_dmabuf(y, b.size),
                read_dmabuf(x, a.size),
                "BO {i} contents after restore"
            );
        }
    }
    // New allocations on an old id land on the new GPU, with the next IDR handle.
    let h = rk
        .alloc_memory(VA + 256 * MIB, MIB, GpuId::new(old_ids[0]).unwrap(), VRAM_W)
        .unwrap();
    assert_eq!((h.handle.gpu_id(), h.handle.idr()), (old_ids[0], 3));
    assert_eq!(mb.vram_used(0x3a01), Some(5 * MIB));
}

/// A process with GPUs but no BOs (6.1.y stable restores it: the BO array may be NULL when
/// there are none; 6.1.0 refused `num_bos` 0): its events come back.
#[test]
fn a_process_without_bos_is_restored() {
    let e = env(Preset::mi210x2());
    let ev = e
        .kfd
        .create_event(kfd_abi::EventType::Signal, false, None)
        .unwrap()
        .event_id;
    e.kfd.set_event(ev).unwrap();
    let (_criu, ck) = criu_view(&e.kfd, &e.proc);
    let info = ck.criu_process_info().unwrap();
    assert_eq!((info.num_bos, info.num_objects), (0, 1));
    let c = ck.criu_checkpoint(&info).unwrap();
    ck.criu_unpause().unwrap();

    let m = Machine::new(&Preset::mi210x2()).unwrap();
    let r = m.spawn_process();
    let rk = Kfd::new(r.open_kfd().unwrap(), "/dev/kfd (restored)");
    let renders: Vec<SimFile> = m
        .render_minors()
        .into_iter()
        .map(|x| r.open_render(x).unwrap())
        .collect();
    let mut devices: Vec<kfd_sys::kfd_criu_device_bucket> = restore_devices(&c, &m, &renders)
        .iter()
        .map(|d| kfd_sys::kfd_criu_device_bucket {
            user_gpu_id: d.user_gpu_id.get(),
            actual_gpu_id: d.actual_gpu_id.get(),
            drm_fd: u32::try_from(d.drm.as_raw_fd()).unwrap(),
            pad: 0,
        })
        .collect();
    let mut priv_data = c.priv_data.clone();
    let mut a = kfd_sys::kfd_ioctl_criu_args {
        devices: devices.as_mut_ptr() as u64,
        bos: 0,
        priv_data: priv_data.as_mut_ptr() as u64,
        priv_data_size: priv_data.len() as u64,
        num_devices: devices.len() as u32,
        num_bos: 0,
        num_objects: c.num_objects,
        pid: 0,
        op: kfd_sys::KFD_CRIU_OP_RESTORE,
    };
    assert_eq!(
        raw(rk.transport(), kfd_abi::ioctl::kfd::CRIU_OP, &mut a),
        Ok(0)
    );
    let criu = m.spawn_process();
    Kfd::new(criu.open_kfd().unwrap(), "/dev/kfd (criu)")
        .criu_resume(r.pid())
        .unwrap();
    assert_eq!(
        rk.wait_events(&[ev], false, 0).unwrap(),
        WaitResult::Complete
    );
}

/// A device bucket naming a GPU whose VM the restoring process already took (ACQUIRE_VM) is
/// refused before it changes anything: the process still knows that GPU by its own id, not by
/// the bucket's (6.1.y checks the pdd's render file before it records the user gpu id).
#[test]
fn a_device_bucket_for_a_gpu_with_a_vm_changes_nothing() {
    let (_src, c) = dump();
    let m = Machine::new(&Preset::mi210x2()).unwrap();
    let r = m.spawn_process();
    let rk = Kfd::new(r.open_kfd().unwrap(), "/dev/kfd (restoring)");
    let renders: Vec<SimFile> = m
        .render_minors()
        .into_iter()
        .map(|x| r.open_render(x).unwrap())
        .collect();
    let local = gpu(m.gpu_ids()[0]);
    rk.acquire_vm(local, renders[0].as_fd()).unwrap();
    let mut devices = restore_devices(&c, &m, &renders);
    devices[0].user_gpu_id = gpu(0x7777);
    assert_eq!(
        errno(rk.criu_restore(&devices, &restore_bos(&c), &c.priv_data, c.num_objects)),
        Some(Errno::EINVAL)
    );
    assert!(
        rk.available_memory(local).is_ok(),
        "still known by its own id"
    );
    assert_eq!(
        errno(rk.available_memory(gpu(0x7777))),
        Some(Errno::EINVAL),
        "not by the bucket's"
    );
}

/// A restore of `c` into a fresh process on `m`, with the private data changed by `edit`.
fn restore_edited(c: &Checkpoint, m: &Machine, edit: impl FnOnce(&mut Vec<u8>)) -> Option<Errno> {
    let r = m.spawn_process();
    let rk = Kfd::new(r.open_kfd().unwrap(), "/dev/kfd");
    let renders: Vec<SimFile> = m
        .render_minors()
        .into_iter()
        .map(|x| r.open_render(x).unwrap())
        .collect();
    let mut p = c.priv_data.clone();
    edit(&mut p);
    let devices: Vec<RestoreDevice<'_>> = c
        .devices
        .iter()
        .zip(m.gpu_ids().into_iter().cycle())
        .zip(renders.iter().cycle())
        .map(|((d, new), r)| RestoreDevice {
            user_gpu_id: gpu(d.user_gpu_id),
            actual_gpu_id: gpu(new),
            drm: r.as_fd(),
        })
        .collect();
    rk.criu_restore(&devices, &restore_bos(c), &p, c.num_objects)
        .err()
        .and_then(|e| e.errno())
}

#[test]
fn malformed_private_data_is_refused_with_the_kernels_errno() {
    let (_src, c) = dump();
    let m = Machine::new(&Preset::mi210x2()).unwrap();
    let bo0 = PROCESS_PRIV_SIZE + 2 * DEVICE_PRIV_SIZE;
    let objects = bo0 + c.bos.len() * BO_PRIV_SIZE;
    assert_eq!(
        restore_edited(&c, &m, |p| p[0] = 2),
        Some(Errno::EINVAL),
        "version 2"
    );
    let mi100 = Machine::new(&Preset::mi100x4()).unwrap();
    assert_eq!(
        restore_edited(&c, &mi100, |p| p[4] = 1),
        Some(Errno::EPERM),
        "xnack where a GPU lacks it"
    );
    assert_eq!(
        restore_edited(&c, &m, |p| p[4] = 1),
        None,
        "xnack on gfx90a"
    );
    assert_eq!(
        restore_edited(&c, &m, |p| p.truncate(objects + 10)),
        Some(Errno::EINVAL),
        "truncated"
    );
    assert_eq!(
        restore_edited(&c, &m, |p| p.extend_from_slice(&[0; 8])),
        Some(Errno::EINVAL),
        "trailing bytes"
    );
    assert_eq!(
        restore_edited(&c, &m, |p| p[objects] = 9),
        Some(Errno::EINVAL),
        "unknown object type"
    );
    let idr1 = bo0 + BO_PRIV_SIZE + 8;
    assert_eq!(
        restore_edited(&c, &m, |p| p[idr1] = 0),
        Some(Errno::ENOMEM),
        "IDR handle taken"
    );
    let q1_id = objects + QUEUE_PRIV_SIZE + 0x800 + 0x2000 + 76;
    assert_eq!(
        restore_edited(&c, &m, |p| p[q1_id] = 0),
        Some(Errno::ENOSPC),
        "queue id in use"
    );
    assert_eq!(
        restore_edited(&c, &m, |p| p[objects + 77] = 0x10),
        Some(Errno::EINVAL),
        "queue id >= 1024"
    );
    let mqd_size = objects + 112;
    assert_eq!(
        restore_edited(&c, &m, |p| p[mqd_size + 3] = 0x7f),
        Some(Errno::EINVAL),
        "MQD past the end"
    );
}

#[test]
fn restore_checks_devices_and_slots() {
    let (_src, c) = dump();
    let m = Machine::new(&Preset::mi210x2()).unwrap();
    assert_eq!(restore_edited(&c, &m, |_| {}), None, "plain restore works");
    // An SDMA slot held by another process is EBUSY.
    let m = Machine::new(&Preset::mi210x2()).unwrap();
    let other = env_on(m.clone());
    // SAFETY: never dereferenced.
    unsafe {
        other
            .kfd
            .create_queue(&QueueDesc::new(other.gpus[1], QueueType::Sdma))
    }
    .unwrap();
    assert_eq!(restore_edited(&c, &m, |_| {}), Some(Errno::EBUSY));
    // Fewer GPUs than the image: EINVAL.
    let m = Machine::new(&Preset::mi50x1()).unwrap();
    assert_eq!(restore_edited(&c, &m, |_| {}), Some(Errno::EINVAL));
    // An unknown actual gpu id: EINVAL.
    let m = Machine::new(&Preset::mi210x2()).unwrap();
    let r = m.spawn_process();
    let rk = Kfd::new(r.open_kfd().unwrap(), "/dev/kfd");
    let render = r.open_render(m.render_minors()[0]).unwrap();
    let devs: Vec<RestoreDevice<'_>> = c
        .devices
        .iter()
        .map(|d| RestoreDevice {
            user_gpu_id: gpu(d.user_gpu_id),
            actual_gpu_id: gpu(0x4321),
            drm: render.as_fd(),
        })
        .collect();
    assert_eq!(
        errno(rk.criu_restore(&devs, &restore_bos(&c), &c.priv_data, c.num_objects)),
        Some(Errno::EINVAL)
    );
}
