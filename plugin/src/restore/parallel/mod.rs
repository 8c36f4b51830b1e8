//! Restoring buffer contents from criu's master process while the restored tasks go on
//! restoring (criu's development branch, which calls RESTORE_INIT and POST_FORKING).
//!
//! # The path
//!
//! - RESTORE_INIT (criu's master, before it forks the tasks): a `SOCK_SEQPACKET` socket pair. The
//!   master keeps one end ([`Hub`]); the other ([`TaskEnd`]) reaches the restored tasks through
//!   criu's fd store (`fdstore_add` here, `fdstore_get` in the task): criu closes every fd a task
//!   inherited before it restores the task's files, except its service fds, and the store is one
//!   of them. Outside criu (the in-process harness) the tasks share the end directly.
//! - RESTORE_EXT_FILE (the task): after `CRIU_OP(RESTORE)` created the BOs, the task sends the
//!   dma-bufs of the BOs with contents, their indices in the image, the image id and the GPU map
//!   (image GPU id to this node's render minor) as one or more [`Part`]s, and returns without
//!   copying anything. The fds it gets from the store and the dma-bufs are closed before the hook
//!   returns, so they never take a number one of the task's own files needs.
//! - POST_FORKING (the master, after the tasks were forked): a receiver thread starts. Each
//!   complete job (every part of an image) is checked against the image and filled in a thread of
//!   its own, through the copy engine, per GPU from that GPU's own pages file in its own order, as
//!   the in-task path does.
//! - RESUME_DEVICES_LATE (the master): takes what is still in the socket, waits for every fill of
//!   the restore (not only those of the pid it resumes: a task's queues may use a buffer another
//!   task created, and criu resumes them one by one), and fails if any fill, part or job failed.
//!   criu's development branch only logs a failing RESUME_DEVICES_LATE, so the plugin also kills
//!   the task it was asked to resume: criu's next step on that task (setting its registers before
//!   detaching) fails, and criu kills the tree and reports the restore failed. No task has run a
//!   single instruction of its own by then, and its queues were never started.
//!
//! # Wire format
//!
//! One message per part, native byte order (both ends are the same binary on the same machine):
//! a [`HEADER_BYTES`]-byte header (magic, image id, pid, buffers in the job, index of the first
//! buffer of this part, buffers in this part, GPU map entries, zero), then the GPU map (pairs of
//! image GPU id and render minor; in the first part only), then one image BO index per buffer;
//! the buffers' dma-bufs travel as `SCM_RIGHTS`, one per index, in the same order. A part has at
//! most [`MAX_FDS_PER_PART`] fds (the kernel's limit per message is 253).

mod socket;
mod wire;
mod workers;

pub(crate) use socket::{send_message, socket_pair, TaskEnd};
pub(crate) use wire::{parts, Job};
pub(crate) use workers::{Filler, Hub};

#[cfg(test)]
mod tests {
    use super::socket::*;
    use super::wire::*;
    use super::workers::*;
    use rstest::rstest;
    use std::collections::BTreeMap;
    use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
    use std::sync::Arc;

    fn fds(n: usize) -> Vec<OwnedFd> {
        (0..n)
            .map(|_| OwnedFd::from(std::fs::File::open("/dev/null").unwrap()))
            .collect()
    }

    fn part(first: u32, total: u32, bos: Vec<u32>) -> Part {
        Part {
            image: 7,
            pid: 100,
            total,
            first,
            gpus: if first == 0 {
                vec![(0x1111, 128), (0x2222, 129)]
            } else {
                Vec::new()
            },
            bos,
        }
    }

    #[test]
    fn a_part_decodes_to_itself() {
        let p = part(0, 3, vec![0, 2, 5]);
        assert_eq!(Part::decode(&p.encode(), 3), Ok(p));
    }

    fn header(words: [u32; 8]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    #[rstest]
    #[case::empty(
        Vec::new(),
        0,
        "a message of 0 bytes is shorter than the 32-byte header"
    )]
    #[case::short(vec![0; 31], 0, "a message of 31 bytes is shorter than the 32-byte header")]
    #[case::magic(header([1, 7, 1, 1, 0, 1, 0, 0]), 0, "not the parallel-restore magic")]
    #[case::missing_indices(
        header([MAGIC, 7, 1, 2, 0, 2, 0, 0]), 2,
        "image 7: a message of 32 bytes, but its counts (0 GPUs, 2 buffers) need 40"
    )]
    #[case::too_many_buffers(
        header([MAGIC, 7, 1, 1000, 0, 999, 0, 0]), 0, "a part of 999 buffers (at most 250)"
    )]
    #[case::too_many_gpus(header([MAGIC, 7, 1, 1, 0, 1, 4096, 0]), 1, "a GPU map of 4096 GPUs")]
    fn bad_headers_are_refused(
        #[case] bytes: Vec<u8>,
        #[case] nfds: usize,
        #[case] expected: &str,
    ) {
        let e = Part::decode(&bytes, nfds).unwrap_err();
        assert!(e.to_string().contains(expected), "{e}");
    }

    #[rstest]
    #[case::fewer_fds(part(0, 3, vec![0, 1, 2]), 2, "image 7: a part of 3 buffers carries 2 fds")]
    #[case::more_fds(part(0, 1, vec![0]), 2, "image 7: a part of 1 buffers carries 2 fds")]
    #[case::beyond_the_job(part(0, 2, vec![0, 1, 2]), 3, "buffers 0..3 of a job of 2")]
    #[case::empty_part(part(0, 0, vec![]), 0, "a part without buffers")]
    #[case::no_map_first(Part { gpus: vec![], ..part(0, 1, vec![0]) }, 1, "0 GPU map entries")]
    #[case::map_later(
        Part { gpus: vec![(1, 128)], ..part(1, 2, vec![1]) }, 1, "1 GPU map entries"
    )]
    fn counts_that_disagree_are_refused(
        #[case] p: Part,
        #[case] nfds: usize,
        #[case] expected: &str,
    ) {
        let e = Part::decode(&p.encode(), nfds).unwrap_err();
        assert!(e.to_string().contains(expected), "{e}");
    }

    #[test]
    fn a_job_is_assembled_from_its_parts_in_order() {
        let mut a = Assembler::default();
        assert!(a.add(part(0, 3, vec![4, 5]), fds(2)).unwrap().is_none());
        assert_eq!(a.incomplete(), vec![(7, 2, 3)]);
        let job = a.add(part(2, 3, vec![9]), fds(1)).unwrap().unwrap();
        assert_eq!(job.bos.iter().map(|b| b.0).collect::<Vec<_>>(), [4, 5, 9]);
        assert_eq!(job.gpus, BTreeMap::from([(0x1111, 128), (0x2222, 129)]));
        assert!(a.incomplete().is_empty());
        let e = a.add(part(0, 1, vec![1]), fds(1)).unwrap_err();
        assert!(e.to_string().contains("after its job was complete"), "{e}");
    }

    #[rstest]
    #[case::later_part_first(vec![part(1, 2, vec![1])], "came before the first")]
    #[case::gap(vec![part(0, 4, vec![0]), part(2, 4, vec![2])], "a part at buffer 2 of a job of 4 after 1")]
    #[case::total_changes(vec![part(0, 4, vec![0]), part(1, 5, vec![1])], "of a job of 5 after 1 of 4")]
    #[case::gpu_twice(
        vec![Part { gpus: vec![(1, 128), (1, 129)], ..part(0, 1, vec![0]) }],
        "GPU 0x1 is twice"
    )]
    fn parts_out_of_sequence_are_refused(#[case] parts: Vec<Part>, #[case] expected: &str) {
        let mut a = Assembler::default();
        let n = parts.len();
        let mut last = None;
        for (i, p) in parts.into_iter().enumerate() {
            let k = p.bos.len();
            let r = a.add(p, fds(k));
            if i + 1 == n {
                last = Some(r);
            } else {
                r.unwrap();
            }
        }
        let e = last.unwrap().unwrap_err();
        assert!(e.to_string().contains(expected), "{e}");
    }

    #[test]
    fn a_large_job_is_split_below_the_kernels_fd_limit() {
        let bos: Vec<u32> = (0..600).collect();
        let ps = parts(3, 9, &[(1, 128)], &bos);
        assert_eq!(
            ps.iter()
                .map(|p| (p.first, p.bos.len(), p.gpus.len()))
                .collect::<Vec<_>>(),
            [(0, 250, 1), (250, 250, 0), (500, 100, 0)]
        );
        let mut a = Assembler::default();
        let mut job = None;
        for p in ps {
            let bytes = p.encode();
            let p = Part::decode(&bytes, p.bos.len()).unwrap();
            let k = p.bos.len();
            job = a.add(p, fds(k)).unwrap();
        }
        assert_eq!(job.unwrap().bos.len(), 600);
    }

    #[test]
    fn messages_and_fds_cross_the_socket() {
        let (master, task) = socket_pair().unwrap();
        assert!(
            recv_message(master.as_fd()).unwrap().is_none(),
            "nothing yet"
        );
        let p = part(0, 2, vec![3, 8]);
        let files = fds(2);
        let borrowed: Vec<BorrowedFd<'_>> = files.iter().map(AsFd::as_fd).collect();
        send_message(task.as_fd(), &p.encode(), &borrowed).unwrap();
        let m = recv_message(master.as_fd()).unwrap().unwrap();
        assert!(!m.truncated);
        assert_eq!(m.fds.len(), 2);
        assert_eq!(Part::decode(&m.bytes, m.fds.len()), Ok(p));
    }

    #[test]
    fn garbage_from_a_task_fails_the_wait_with_its_reason() {
        let (master, task) = socket_pair().unwrap();
        let filler: Arc<Filler> = Arc::new(|job: Job| Ok(job.bos.len() as u64));
        let hub = Arc::new(Hub::new(master, TaskEnd::Inherited(task), 1, filler));
        let sock = hub.task_end.socket().unwrap();
        send_message(sock.as_fd(), b"short", &[]).unwrap();
        let good = part(0, 1, vec![0]);
        let one = fds(1);
        send_message(sock.as_fd(), &good.encode(), &[one[0].as_fd()]).unwrap();
        let e = hub.wait().unwrap_err();
        assert!(e.contains("a message of 5 bytes is shorter"), "{e}");
        hub.shut_down();
    }

    #[test]
    fn a_complete_job_is_filled_and_counted() {
        let (master, task) = socket_pair().unwrap();
        let filler: Arc<Filler> = Arc::new(|job: Job| Ok(100 * job.bos.len() as u64));
        let hub = Arc::new(Hub::new(master, TaskEnd::Inherited(task), 1, filler));
        hub.start().unwrap();
        let sock = hub.task_end.socket().unwrap();
        let bos: Vec<u32> = (0..300).collect();
        let files = fds(300);
        for p in parts(5, 2, &[(1, 128)], &bos) {
            let start = p.first as usize;
            let these: Vec<BorrowedFd<'_>> = files[start..start + p.bos.len()]
                .iter()
                .map(AsFd::as_fd)
                .collect();
            send_message(sock.as_fd(), &p.encode(), &these).unwrap();
        }
        assert_eq!(
            hub.wait(),
            Ok(Summary {
                jobs: 1,
                bytes: 30_000
            })
        );
        hub.shut_down();
    }

    #[test]
    fn a_fill_that_panics_fails_the_wait_instead_of_hanging_it() {
        let (master, task) = socket_pair().unwrap();
        let filler: Arc<Filler> = Arc::new(|job: Job| {
            if job.image == 7 {
                panic!("injected: image {} cannot be filled", job.image);
            }
            Ok(1)
        });
        let hub = Arc::new(Hub::new(master, TaskEnd::Inherited(task), 1, filler));
        hub.start().unwrap();
        let sock = hub.task_end.socket().unwrap();
        let one = fds(1);
        send_message(
            sock.as_fd(),
            &part(0, 1, vec![0]).encode(),
            &[one[0].as_fd()],
        )
        .unwrap();
        let e = hub.wait().unwrap_err();
        assert!(
            e.contains(
                "image 7 (pid 100): the fill thread panicked (injected: image 7 cannot be filled)"
            ),
            "{e}"
        );
        // The hub is idle again: shutting down waits for nothing.
        hub.shut_down();
    }

    #[test]
    fn the_receiver_ends_when_every_task_end_is_closed() {
        let (master, task) = socket_pair().unwrap();
        let filler: Arc<Filler> = Arc::new(|job: Job| Ok(job.bos.len() as u64));
        let sock = task.try_clone().unwrap();
        drop(task);
        let (spare, _) = socket_pair().unwrap();
        let hub = Arc::new(Hub::new(master, TaskEnd::Inherited(spare), 1, filler));
        hub.start().unwrap();
        let one = fds(1);
        send_message(
            sock.as_fd(),
            &part(0, 1, vec![0]).encode(),
            &[one[0].as_fd()],
        )
        .unwrap();
        drop(sock);
        // The receiver takes what was queued and stops by itself (no stop flag: a receiver
        // that went on would hang the test here).
        let receiver = lock(&hub.worker).take().unwrap();
        receiver.join().unwrap();
        assert_eq!(hub.wait(), Ok(Summary { jobs: 1, bytes: 1 }));
    }

    #[test]
    fn an_incomplete_job_fails_the_wait() {
        let (master, task) = socket_pair().unwrap();
        let filler: Arc<Filler> = Arc::new(|_| Ok(0));
        let hub = Arc::new(Hub::new(master, TaskEnd::Inherited(task), 1, filler));
        let sock = hub.task_end.socket().unwrap();
        let one = fds(1);
        send_message(
            sock.as_fd(),
            &part(0, 2, vec![0]).encode(),
            &[one[0].as_fd()],
        )
        .unwrap();
        assert_eq!(
            hub.wait(),
            Err("image 7: 1 of the job's 2 buffers arrived".to_owned())
        );
    }
}
