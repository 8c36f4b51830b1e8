//! The bodies of the `images` and `pages` targets: the image decoders and the pages-file reader
//! of the `images` crate, through its public API.
//!
//! Each body must never panic, whatever the input: every malformed input is an `Err`.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::os::fd::FromRawFd;

use images::checksum::{chunk_checksum, ChecksumAlgorithm};
use images::frame::{decode_framed, encode_framed};
use images::proto::{CriuDmabufNode, CriuKfd, CriuRenderNode, PagesChecksums};
use images::{PagesFile, PagesReader};
use prost::Message;

/// Payload cap used by the decoder target.
const LIMIT: u64 = 1 << 20;

fn decode_one<M: Message + Default + PartialEq>(data: &[u8], message: &'static str) {
    if let Ok(m) = decode_framed::<M>(data, "fuzz.img", message, LIMIT) {
        // What decodes re-encodes to something that decodes to the same value.
        let again = encode_framed(&m);
        let back = decode_framed::<M>(&again, "fuzz.img", message, u64::MAX);
        assert!(
            back.is_ok_and(|b| b == m),
            "re-encoded {message} does not round-trip"
        );
    }
}

/// Decodes `data` as a framed image of each message type.
pub fn decode_images(data: &[u8]) {
    decode_one::<CriuKfd>(data, "criu_kfd");
    decode_one::<CriuRenderNode>(data, "criu_render_node");
    decode_one::<CriuDmabufNode>(data, "criu_dmabuf_node");
    // The bytes as a payload (what follows the 8-byte header), under a header that fits it.
    let mut framed = (data.len() as u64).to_ne_bytes().to_vec();
    framed.extend_from_slice(data);
    let _ = decode_framed::<CriuKfd>(&framed, "fuzz.img", "criu_kfd", u64::MAX);
}

fn memfd(content: &[u8]) -> std::io::Result<File> {
    // SAFETY: the name is a NUL-terminated literal; memfd_create takes no other pointer.
    let fd = unsafe { libc::memfd_create(c"images-fuzz".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: memfd_create just returned this fd to us; nothing else owns it.
    let mut f = unsafe { File::from_raw_fd(fd) };
    f.write_all(content)?;
    f.seek(SeekFrom::Start(0))?;
    Ok(f)
}

/// Reads `data` as a pages file. The first bytes choose the reader's parameters:
/// `[flags][chunk size: u16 LE][n][n x u64 LE checksums]`, the rest is the file.
/// flags bit 0: expect the header's own value (else the file's payload size); bit 1: with a
/// checksum list; bit 2: the list is computed from the payload (else taken from the input);
/// bits 3..5: read buffer size class; bit 6: unknown algorithm.
pub fn pages_reader(data: &[u8]) {
    let [flags, c0, c1, n, rest @ ..] = data else {
        return;
    };
    let chunk_size = u32::from(u16::from_le_bytes([*c0, *c1]));
    let n = usize::from(*n).min(rest.len() / 8);
    let (sums_raw, file) = rest.split_at(n * 8);
    let header = file
        .first_chunk::<8>()
        .map_or(0, |h| u64::from_ne_bytes(*h));
    let payload = file.get(8..).unwrap_or_default();
    let expected = if flags & 1 != 0 {
        header
    } else {
        payload.len() as u64
    };
    let which = PagesFile::Kfd { id: 1, gpu_id: 2 };
    let computed = flags & 4 != 0 && chunk_size > 0;
    let chunk_sums = if computed {
        payload
            .chunks(usize::try_from(chunk_size).unwrap_or(1))
            .map(|c| chunk_checksum(ChecksumAlgorithm::Crc32c, c))
            .collect()
    } else {
        sums_raw
            .chunks_exact(8)
            .filter_map(|c| c.try_into().ok().map(u64::from_le_bytes))
            .collect()
    };
    let sums = PagesChecksums {
        file_key: 2,
        total_size: expected,
        chunk_size,
        algorithm: if flags & 64 != 0 {
            7
        } else {
            ChecksumAlgorithm::Crc32c.as_u32()
        },
        chunk_sums,
    };
    let Ok(f) = memfd(file) else { return };
    let with_sums = flags & 2 != 0;
    let Ok(mut reader) = PagesReader::from_file(f, which, expected, with_sums.then_some(&sums))
    else {
        return;
    };
    // Opened: the header matched and the file holds exactly the payload.
    assert_eq!(reader.len(), payload.len() as u64);
    let mut buf = vec![0u8; [1, 7, 64, 512, 4096, 65536, 3, 1000][usize::from(flags >> 3 & 7)]];
    let mut out = Vec::with_capacity(payload.len());
    loop {
        match reader.read_chunk(&mut buf) {
            Ok(0) => break,
            Ok(k) => out.extend_from_slice(&buf[..k]),
            Err(_) => {
                // Only a checksum can fail here, and never a correct one.
                assert!(
                    with_sums && !(computed && flags & 64 == 0),
                    "unexpected read error"
                );
                return;
            }
        }
    }
    assert_eq!(out, payload);
}

/// An input of [`pages_reader`]: `flags`, `chunk` size, no listed checksums, then a pages file
/// of `payload` (its length header, then the bytes).
pub fn pages_input(flags: u8, chunk: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![flags];
    v.extend_from_slice(&chunk.to_le_bytes());
    v.push(0);
    v.extend_from_slice(&(payload.len() as u64).to_ne_bytes());
    v.extend_from_slice(payload);
    v
}
