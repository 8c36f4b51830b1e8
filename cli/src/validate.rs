//! The one validation of an image directory that `inspect` and `check` share: what a restore
//! refuses whatever node it runs on. Both commands report every problem found here, and count it
//! in their verdict, so that a directory gets one verdict from both.
//!
//! - [`kfd`]: a KFD image's counts agree with its lists (`num_of_gpus`, `num_of_bos`), every BO
//!   is on a GPU of the image, and the driver's private data is long enough for what the image
//!   says it holds (the restore hands it to the driver, which refuses it short).
//! - [`shared_buffers`]: every buffer that a dma-buf image or a render-node image imports is
//!   created by an image of the directory (the restore waits for it, then refuses).
//!
//! The pages files (lengths, checksum lists, contents) are judged by the `images` readers, the
//! GPU mapping by `topology`: those are the same code for both commands already.

use std::collections::BTreeSet;

use images::proto::{CriuKfd, CriuRenderNode};
use images::{pages, DmabufImage, ImageFile, KfdImage, PagesFile, PagesReader, RenderNodeImage};

use crate::check::ImageProblem;
use crate::imagedir::{ImageDir, ImageName};
use crate::{count, hex_id};

/// Bytes of the driver's process record, the smallest part of its private data.
const PROCESS_RECORD: u64 = 8;
/// Bytes of a device record.
const DEVICE_RECORD: u64 = 8;
/// Bytes a BO record holds at the least (its user address; the rest depends on the kernel).
const BO_RECORD_MIN: u64 = 8;
/// Bytes an object record holds at the least (its type).
const OBJECT_RECORD_MIN: u64 = 4;

/// The problems of KFD image `id`, decoded as `msg`, that a restore refuses on any node.
#[must_use]
pub(crate) fn kfd(id: u32, msg: &CriuKfd) -> Vec<ImageProblem> {
    let file = KfdImage::file_name(id);
    let mut problems = Vec::new();
    let mut say = |message: String| {
        problems.push(ImageProblem {
            file: file.clone(),
            message,
        });
    };
    let gpus = msg.device_entries.iter().filter(|d| d.gpu_id != 0).count();
    if u64::from(msg.num_of_gpus) != gpus as u64 {
        say(format!(
            "num_of_gpus is {} but the image lists {}",
            msg.num_of_gpus,
            count(gpus, "GPU entry", "GPU entries")
        ));
    }
    if msg.num_of_bos != msg.bo_entries.len() as u64 {
        say(format!(
            "num_of_bos is {} but the image lists {}",
            msg.num_of_bos,
            count(msg.bo_entries.len(), "BO entry", "BO entries")
        ));
    }
    let mut strays: Vec<u32> = msg
        .bo_entries
        .iter()
        .map(|b| b.gpu_id)
        .filter(|&g| g == 0 || !msg.device_entries.iter().any(|d| d.gpu_id == g))
        .collect();
    strays.sort_unstable();
    strays.dedup();
    for g in strays {
        let n = msg.bo_entries.iter().filter(|b| b.gpu_id == g).count();
        say(format!(
            "{} on GPU {}, which has no device entry",
            count(n, "BO is", "BOs are"),
            hex_id(g)
        ));
    }
    // The counts as the image states them: the driver walks the data by them.
    let least = PROCESS_RECORD
        .saturating_add(u64::from(msg.num_of_gpus).saturating_mul(DEVICE_RECORD))
        .saturating_add(msg.num_of_bos.saturating_mul(BO_RECORD_MIN))
        .saturating_add(u64::from(msg.num_of_objects).saturating_mul(OBJECT_RECORD_MIN));
    let has_state = msg.num_of_bos != 0 || msg.num_of_objects != 0;
    let held = msg.priv_data.len() as u64;
    if has_state && held < least {
        say(format!(
            "the driver's private data holds {} but a process record, {}, {} and {} take at \
             least {least}",
            count(usize::try_from(held).unwrap_or(usize::MAX), "byte", "bytes"),
            count(
                usize::try_from(msg.num_of_gpus).unwrap_or(usize::MAX),
                "device record",
                "device records"
            ),
            count(
                usize::try_from(msg.num_of_bos).unwrap_or(usize::MAX),
                "BO record",
                "BO records"
            ),
            count(
                usize::try_from(msg.num_of_objects).unwrap_or(usize::MAX),
                "object (queue, event or SVM range)",
                "objects (queues, events, SVM ranges)"
            ),
        ));
    }
    problems
}

/// The pages files of render-node image `id` (decoded as `msg`) that a restore would refuse:
/// missing, of the wrong length, or (read to the end) with a chunk whose checksum fails. A BO
/// with neither a pages file nor a checksum list had no contents saved. A file without checksums
/// is opened as the restore opens it, its length header not trusted (criu-dev leaves it unset):
/// the rules `inspect` applies to each row of its pages table.
#[must_use]
pub(crate) fn render_pages(dir: &ImageDir, id: u32, msg: &CriuRenderNode) -> Vec<ImageProblem> {
    let mut problems = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    for (i, bo) in msg.bo_entries.iter().enumerate() {
        let Ok(index) = u32::try_from(i) else { break };
        let which = PagesFile::Drm {
            id,
            minor: msg.drm_render_minor,
            index,
        };
        let sums = pages::find_checksums(&msg.pages_checksums, index);
        let present = dir
            .size_of(ImageName::DrmPages {
                id,
                minor: msg.drm_render_minor,
                index,
            })
            .is_some();
        if !present && sums.is_none() {
            continue;
        }
        let opened = match sums {
            None => PagesReader::open_ignoring_header(dir.fd(), which, bo.size),
            Some(_) => PagesReader::open(dir.fd(), which, bo.size, sums),
        };
        let read = opened.and_then(|mut reader| loop {
            if reader.read_chunk(&mut buf)? == 0 {
                break Ok(());
            }
        });
        if let Err(e) = read {
            problems.push(ImageProblem {
                file: which.file_name(),
                message: e.to_string(),
            });
        }
    }
    problems
}

/// The files of `dir` that import a shared buffer (named by its GEM handle) that no image of the
/// directory creates: dma-buf images, and render-node images with such an imported buffer.
#[must_use]
pub(crate) fn shared_buffers(dir: &ImageDir) -> Vec<ImageProblem> {
    let mut created = BTreeSet::new();
    let mut needed: Vec<(String, u32)> = Vec::new();
    for e in &dir.entries {
        match e.name {
            ImageName::Kfd { id } => {
                if let Ok(msg) = KfdImage::read(dir.fd(), id) {
                    created.extend(
                        msg.bo_entries
                            .iter()
                            .map(|b| b.handle)
                            .filter(|&h| h != u32::MAX),
                    );
                }
            }
            ImageName::Render { id } => {
                if let Ok(msg) = RenderNodeImage::read(dir.fd(), id) {
                    for b in &msg.bo_entries {
                        if b.is_import == 0 {
                            created.insert(b.handle);
                        } else {
                            needed.push((e.name.file_name(), b.handle));
                        }
                    }
                }
            }
            ImageName::Dmabuf { id } => {
                if let Ok(msg) = DmabufImage::read(dir.fd(), id) {
                    needed.push((e.name.file_name(), msg.gem_handle));
                }
            }
            ImageName::KfdPages { .. } | ImageName::DrmPages { .. } => {}
        }
    }
    let mut problems: Vec<ImageProblem> = Vec::new();
    for (file, handle) in needed.into_iter().filter(|(_, h)| !created.contains(h)) {
        let message = format!(
            "it imports the buffer shared as GEM handle {handle}, which no image of the \
             directory creates (its image is missing)"
        );
        match problems.iter_mut().find(|p| p.file == file) {
            Some(p) if !p.message.contains(&message) => {
                p.message.push_str("; ");
                p.message.push_str(&message);
            }
            Some(_) => {}
            None => problems.push(ImageProblem { file, message }),
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use images::proto::{KfdBoEntry, KfdDeviceEntry};

    use super::*;

    fn image(num_of_gpus: u32, gpus: &[u32], bos: &[u32], priv_data: usize) -> CriuKfd {
        CriuKfd {
            num_of_gpus,
            device_entries: gpus
                .iter()
                .map(|&gpu_id| KfdDeviceEntry {
                    gpu_id,
                    ..Default::default()
                })
                .collect(),
            num_of_bos: bos.len() as u64,
            bo_entries: bos
                .iter()
                .map(|&gpu_id| KfdBoEntry {
                    gpu_id,
                    ..Default::default()
                })
                .collect(),
            priv_data: vec![0; priv_data],
            ..Default::default()
        }
    }

    fn messages(msg: &CriuKfd) -> Vec<String> {
        kfd(7, msg).into_iter().map(|p| p.message).collect()
    }

    #[test]
    fn a_consistent_image_has_no_problem() {
        assert!(messages(&image(2, &[0, 1, 2], &[1, 2], 8 + 16 + 16)).is_empty());
    }

    #[test]
    fn counts_that_contradict_the_lists_are_named() {
        assert_eq!(
            messages(&image(1_000_000, &[0, 1, 2], &[], 0)),
            ["num_of_gpus is 1000000 but the image lists 2 GPU entries"]
        );
        let mut msg = image(1, &[1], &[1], 1 << 10);
        msg.num_of_bos = 3;
        assert_eq!(
            messages(&msg),
            ["num_of_bos is 3 but the image lists 1 BO entry"]
        );
    }

    #[test]
    fn bos_of_no_gpu_and_short_private_data_are_named() {
        assert_eq!(
            messages(&image(1, &[1], &[1, 9, 9], 1 << 10)),
            ["2 BOs are on GPU 0x0009, which has no device entry"]
        );
        let mut msg = image(1, &[1], &[1], 20);
        msg.num_of_objects = 3;
        assert_eq!(
            messages(&msg),
            [
                "the driver's private data holds 20 bytes but a process record, 1 device record, \
                 1 BO record and 3 objects (queues, events, SVM ranges) take at least 36"
            ]
        );
    }
}
