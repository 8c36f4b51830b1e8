//! The dump's side of one GPU's copy: the copiers fill staging buffers from the BOs, the writer
//! puts them in stream order and writes them to the pages file.
//!
//! With direct I/O the writer works in two stages: it checksums a buffer and finds its zero
//! pages ([`PagesWriter::prepare_direct`]) and hands the write to a thread of its own
//! ([`DirectWrites`]), so the disk writes one buffer while the next is checksummed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};

use images::pages::{DirectRuns, DirectWrites};
use images::PagesWriter;
use kfd_abi::{RenderNode, Transport, UserptrBuffer};

use super::{
    copy_range, guard, overlap, prepare, BoSource, CopyError, Full, Progress, Ring, Staging,
};

/// Copies the BOs of one GPU into `writer`, in order. Returns the bytes written.
pub(crate) fn dump_gpu<T: Transport>(
    render: &RenderNode<T>,
    bos: &[BoSource<'_>],
    staging: Staging,
    progress: &Progress,
    writer: &mut PagesWriter,
) -> Result<u64, CopyError> {
    let (total, mut dma) = prepare(render, bos)?;
    let Ring {
        full_tx,
        full_rx,
        empty_tx,
        empty_rx,
    } = Ring::new(dma.staging(staging)?);
    // Set by a copier that failed: the others stop taking buffers and the writer stops writing.
    let stop = AtomicBool::new(false);
    let stop = &stop;
    let write = move || write_in_order(writer, full_rx, empty_tx, total, stop);
    // The next stream position to copy, taken together with an empty buffer.
    let claim = Mutex::new((empty_rx, 0u64));
    let lanes: Vec<_> = dma
        .queues
        .iter_mut()
        .map(|q| (q, full_tx.clone()))
        .collect();
    // The copiers' clones are the only senders left: the writer's loop ends once they all return.
    drop(full_tx);
    let imported = &dma.imported;
    overlap("writer", write, lanes, |(queue, full_tx)| loop {
        let (buf, pos, len) = {
            let mut c = guard(&claim);
            let (empty_rx, next) = &mut *c;
            if *next >= total || stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            let buf = empty_rx
                .recv()
                .map_err(|_| CopyError::ThreadGone("writer"))?;
            let (pos, len) = (*next, staging.piece(total, *next));
            *next += len as u64;
            (buf, pos, len)
        };
        let full = Full::new(buf, pos, len);
        if stop.load(Ordering::Relaxed) {
            let _ = full_tx.send(full);
            return Ok(());
        }
        let (staging_va, len) = (full.buf.va() + full.off as u64, len as u64);
        if let Err(e) = copy_range(queue, imported, pos, len, staging_va, true, &[]) {
            stop.store(true, Ordering::Relaxed);
            let _ = full_tx.send(full);
            return Err(e);
        }
        progress.add(len);
        full_tx
            .send(full)
            .map_err(|_| CopyError::ThreadGone("writer"))?;
    })
    .map(|()| total)
}

/// The writer: takes the buffers as the copiers fill them and writes them to `writer` in stream
/// order ([`in_order`]); with direct I/O, checksums them here and writes them on a thread of its
/// own ([`write_out`]). Every buffer goes back to `empty_tx` once written.
fn write_in_order<'r, T: Transport>(
    writer: &mut PagesWriter,
    full_rx: mpsc::Receiver<Full<UserptrBuffer<'r, T>>>,
    empty_tx: mpsc::SyncSender<UserptrBuffer<'r, T>>,
    total: u64,
    stop: &AtomicBool,
) -> Result<(), CopyError> {
    let Some(disk) = writer.direct_writes()? else {
        return in_order(full_rx, &empty_tx, total, stop, |buf, off, len| {
            writer.write_chunk(&buf.as_slice()[off..off + len])?;
            // The copiers may all be done already; a closed channel is fine here.
            let _ = empty_tx.send(buf);
            Ok(())
        });
    };
    std::thread::scope(|s| {
        let (out_tx, out_rx) = mpsc::channel();
        let back = empty_tx.clone();
        let out = s.spawn(move || write_out(&disk, out_rx, &back, stop));
        // A direct writer takes the whole buffer: congruent with the file, one page larger than
        // the data (the page before the data, the last page's rest). `out_tx` goes with the
        // closure: the writing thread ends once `in_order` returns.
        let taken = in_order(full_rx, &empty_tx, total, stop, move |mut buf, _, len| {
            let runs = writer.prepare_direct(buf.as_mut_slice(), len)?;
            out_tx
                .send((buf, runs))
                .map_err(|_| CopyError::ThreadGone("direct writer"))
        });
        let written = out
            .join()
            .unwrap_or(Err(CopyError::ThreadGone("direct writer")));
        // The write's own error explains a writer that stopped because of it.
        written.and(taken)
    })
}

/// Hands the buffers from `full_rx` to `take(buf, off, len)` in stream order: they come back
/// from the copiers in any order, and the early ones wait aside. Once `stop` is set (a copier
/// or the disk failed), every buffer goes back to `empty_tx` untaken, so no copier waits for
/// ever for an empty one; the loop ends when the copiers are all gone.
fn in_order<B>(
    full_rx: mpsc::Receiver<Full<B>>,
    empty_tx: &mpsc::SyncSender<B>,
    total: u64,
    stop: &AtomicBool,
    mut take: impl FnMut(B, usize, usize) -> Result<(), CopyError>,
) -> Result<(), CopyError> {
    let mut next = 0u64;
    let mut early: BTreeMap<u64, Full<B>> = BTreeMap::new();
    for full in full_rx {
        if stop.load(Ordering::Relaxed) {
            for f in std::iter::once(full).chain(std::mem::take(&mut early).into_values()) {
                let _ = empty_tx.send(f.buf);
            }
            continue;
        }
        early.insert(full.pos, full);
        while let Some(Full { buf, off, len, .. }) = early.remove(&next) {
            take(buf, off, len)?;
            next += len as u64;
        }
    }
    if next < total {
        return Err(CopyError::ThreadGone("SDMA copier"));
    }
    Ok(())
}

/// The direct writes' thread: writes each buffer's runs and sends the buffer back to `back`.
/// After a failed write it sets `stop` and only sends the buffers back.
fn write_out<'r, T: Transport>(
    disk: &DirectWrites,
    out_rx: mpsc::Receiver<(UserptrBuffer<'r, T>, DirectRuns)>,
    back: &mpsc::SyncSender<UserptrBuffer<'r, T>>,
    stop: &AtomicBool,
) -> Result<(), CopyError> {
    let mut failed = None;
    for (buf, runs) in out_rx {
        if failed.is_none() {
            if let Err(e) = disk.write(buf.as_slice(), &runs) {
                stop.store(true, Ordering::Relaxed);
                failed = Some(e);
            }
        }
        let _ = back.send(buf);
    }
    failed.map_or(Ok(()), |e| Err(e.into()))
}
