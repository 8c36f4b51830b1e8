//! The framing of every image file: an 8-byte native-endian payload length, then the payload.
//!
//! The message images (`amdgpu-kfd-<id>.img`, `amdgpu-renderD-<id>.img`,
//! `amdgpu-dmabuf_<id>.img`) hold one packed message each; [`ImageFile`] reads and writes them.
//! Nothing read from a file is trusted: the length header must agree with the file's size
//! (fstat) and stay under a cap before the payload buffer is allocated, and a message that does
//! not decode is reported with the offset of the top-level field that breaks.
//!
//! Every message image we write ends its payload with our image checksum (field 101, an
//! [`ImageChecksum`] over every payload byte before it), which upstream's readers skip as an
//! unknown field; every read checks it. An image without it (upstream's plugin writes none) reads
//! unverified ([`Integrity::Unprotected`]), unless it carries our page checksums (field 100),
//! which only a writer that also ends the image with its checksum emits.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::BorrowedFd;

use prost::Message;

use crate::checksum::{chunk_checksum, ChecksumAlgorithm};
use crate::dir;
use crate::names;
use crate::proto::{CriuDmabufNode, CriuKfd, CriuRenderNode, ImageChecksum};

/// Bytes of the length header in front of every payload.
pub(crate) const HEADER_LEN: u64 = 8;

/// Number of the top-level field that ends the payload of every message image we write: an
/// [`ImageChecksum`] of the payload bytes before its key. Upstream readers skip it.
const IMAGE_CHECKSUM_FIELD: u32 = 101;

/// Number of our pages-checksum field (`criu_kfd.pages_checksums`,
/// `criu_render_node.pages_checksums`). A payload with it was written by us, so it must end with
/// an image checksum.
const PAGES_CHECKSUMS_FIELD: u32 = 100;

/// The algorithm of the image checksums we write.
const IMAGE_CHECKSUM_ALGORITHM: ChecksumAlgorithm = ChecksumAlgorithm::Crc32c;

/// What a message image's payload said about its own integrity when it was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Integrity {
    /// The payload ends with an image checksum, and it matches the bytes before it.
    Verified,
    /// The payload has no image checksum (upstream's plugin writes none): read unverified.
    Unprotected,
}

/// How a message image's own checksum (field 101) disagrees with the image.
/// [`FrameError::Checksum`] names the file; this completes the sentence.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImageChecksumFault {
    /// The recorded checksum is not the checksum of the bytes it covers.
    #[error(
        "its payload (offsets 8 to {end}) has the checksum {computed:#010x}, but the image \
         checksum at offset {end} records {recorded:#010x}"
    )]
    Mismatch {
        /// File offset of the checksum field, where the covered bytes end.
        end: u64,
        /// The value recorded in the image.
        recorded: u64,
        /// The value of the bytes read.
        computed: u64,
    },
    /// The payload carries our pages checksums but does not end with an image checksum.
    #[error(
        "it carries this plugin's page checksums (field {field}) but its payload does not end \
         with the image checksum (field 101) that this plugin writes after them"
    )]
    Missing {
        /// The field that shows the image is ours.
        field: u32,
    },
    /// Another field follows the image checksum.
    #[error(
        "field {field} at offset {offset} follows the image checksum (field 101), which ends the \
         payload"
    )]
    NotLast {
        /// The field after it.
        field: u32,
        /// Its file offset.
        offset: u64,
    },
    /// The image checksum field does not decode, or names an algorithm we do not know.
    #[error("the image checksum (field 101) at offset {offset} is malformed: {what}")]
    Malformed {
        /// File offset of the field.
        offset: u64,
        /// What is wrong with it.
        what: String,
    },
}

/// Errors reading or writing a message image. Every message names the file and, where it
/// applies, the byte offset in that file.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The file could not be created in the image directory.
    #[error(
        "cannot create image file {file}: {source}; check that the image directory is writable"
    )]
    Create {
        /// File name in the image directory.
        file: String,
        /// The `openat(2)` error.
        source: io::Error,
    },
    /// The file could not be opened.
    #[error("cannot open image file {file}: {source}")]
    Open {
        /// File name in the image directory.
        file: String,
        /// The `openat(2)` error.
        source: io::Error,
    },
    /// A write failed.
    #[error("cannot write image file {file} at offset {offset}: {source}")]
    Write {
        /// File name in the image directory.
        file: String,
        /// Byte offset in the file where the write started.
        offset: u64,
        /// The I/O error.
        source: io::Error,
    },
    /// A read failed (including a file that shrank while it was read).
    #[error("cannot read image file {file} at offset {offset}: {source}")]
    Read {
        /// File name in the image directory.
        file: String,
        /// Byte offset in the file where the read started.
        offset: u64,
        /// The I/O error.
        source: io::Error,
    },
    /// The length header disagrees with the file.
    #[error("image file {file} {fault}")]
    Header {
        /// File name in the image directory.
        file: String,
        /// What is wrong.
        fault: HeaderFault,
    },
    /// The payload is larger than the caller's cap.
    #[error(
        "image file {file}: the length header at offset 0 announces a {header}-byte payload, \
         over the limit of {limit} bytes for this image"
    )]
    TooLarge {
        /// File name in the image directory.
        file: String,
        /// The length header's value.
        header: u64,
        /// The cap in force.
        limit: u64,
    },
    /// The payload is not a valid encoding of the expected message.
    #[error(
        "image file {file}: the {message} message does not decode: {} at offset {offset}: \
         {source}",
        match field { Some(f) => format!("field {f}"), None => "malformed field key".to_owned() }
    )]
    Decode {
        /// File name in the image directory.
        file: String,
        /// The proto message name (`criu_kfd`, ...).
        message: &'static str,
        /// Number of the top-level field that does not decode, when its key could be read.
        field: Option<u32>,
        /// Byte offset in the file of that field's key.
        offset: u64,
        /// prost's error.
        source: prost::DecodeError,
    },
    /// The image's own checksum (ours) does not hold.
    #[error("image file {file} is damaged: {fault}")]
    Checksum {
        /// File name in the image directory.
        file: String,
        /// How the checksum disagrees.
        fault: ImageChecksumFault,
    },
}

/// How a file's length header disagrees with the file, said once for every kind of image file:
/// each kind's error ([`FrameError::Header`], [`crate::pages::PagesError::Header`]) names the
/// kind and the file, and this completes the sentence ("is truncated: ...").
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderFault {
    /// The file is too short to hold the length header.
    #[error(
        "is {size} bytes long, too short for the 8-byte length header at offset 0; the image is \
         truncated"
    )]
    ShortHeader {
        /// The file's size.
        size: u64,
    },
    /// The length header promises more payload than the file holds.
    #[error(
        "is truncated: the length header at offset 0 says {header} payload bytes, but only \
         {available} bytes follow from offset 8 (the file ends at offset {})",
        available + HEADER_LEN
    )]
    Truncated {
        /// The length header's value.
        header: u64,
        /// Payload bytes present.
        available: u64,
    },
    /// Bytes follow the payload that the length header does not cover.
    #[error(
        "has {extra} unexpected bytes at offset {} after the {header}-byte payload its length \
         header announces; the image is damaged",
        header + HEADER_LEN
    )]
    TrailingData {
        /// The length header's value.
        header: u64,
        /// Bytes after the payload.
        extra: u64,
    },
}

/// Reading a length header from a file: the read fails, or the header disagrees with the file.
#[derive(Debug)]
pub(crate) enum HeaderError {
    /// `fstat` or reading the header failed (at offset 0).
    Read(io::Error),
    /// The header disagrees with the file.
    Fault(HeaderFault),
}

impl From<HeaderFault> for HeaderError {
    fn from(fault: HeaderFault) -> Self {
        Self::Fault(fault)
    }
}

/// A file's length header and the number of payload bytes that follow it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Framing {
    /// The length header's value: the payload bytes the file says it holds.
    pub(crate) header: u64,
    /// The payload bytes the file does hold.
    pub(crate) available: u64,
}

impl Framing {
    /// Reads the header at the start of `file`, after checking (fstat) that the file can hold it.
    pub(crate) fn read(file: &mut File) -> Result<Self, HeaderError> {
        let meta = file.metadata().map_err(HeaderError::Read)?;
        // A FIFO or a device has no size to check the header against, and may never end.
        dir::NotRegularFile::check(&meta).map_err(|e| HeaderError::Read(e.into()))?;
        let size = meta.len();
        if size < HEADER_LEN {
            return Err(HeaderFault::ShortHeader { size }.into());
        }
        let mut head = [0u8; 8];
        file.read_exact(&mut head).map_err(HeaderError::Read)?;
        Ok(Self {
            header: u64::from_ne_bytes(head),
            available: size - HEADER_LEN,
        })
    }

    /// Splits the header from a whole file held in memory.
    pub(crate) fn split(bytes: &[u8]) -> Result<(Self, &[u8]), HeaderFault> {
        let Some((head, payload)) = bytes.split_first_chunk::<8>() else {
            return Err(HeaderFault::ShortHeader {
                size: bytes.len() as u64,
            });
        };
        let framing = Self {
            header: u64::from_ne_bytes(*head),
            available: payload.len() as u64,
        };
        Ok((framing, payload))
    }

    /// The payload length, when exactly as many bytes follow the header as it says.
    pub(crate) fn exact(self) -> Result<u64, HeaderFault> {
        let Self { header, available } = self;
        if header > available {
            return Err(HeaderFault::Truncated { header, available });
        }
        if header < available {
            return Err(HeaderFault::TrailingData {
                header,
                extra: available - header,
            });
        }
        Ok(header)
    }
}

/// Gives the error enum `$error` of a file kind, which has a `Read { file, offset, source }`
/// and a `Header { file, fault }` variant, the function `header(file, error)` that reports a
/// [`HeaderError`] (or a [`HeaderFault`]) as one of them.
macro_rules! header_fault_into {
    ($error:ident) => {
        impl $error {
            /// Reports a fault of `file`'s length header, or a failure to read it.
            pub(crate) fn header(
                file: String,
                error: impl Into<$crate::frame::HeaderError>,
            ) -> Self {
                match error.into() {
                    $crate::frame::HeaderError::Read(source) => Self::Read {
                        file,
                        offset: 0,
                        source,
                    },
                    $crate::frame::HeaderError::Fault(fault) => Self::Header { file, fault },
                }
            }
        }
    };
}

pub(crate) use header_fault_into;

header_fault_into!(FrameError);

/// Checks a length header against the payload bytes present and the cap.
fn check_header(file: &str, framing: Framing, limit: u64) -> Result<usize, FrameError> {
    let header = framing
        .exact()
        .map_err(|fault| FrameError::header(file.to_owned(), fault))?;
    if header > limit {
        return Err(FrameError::TooLarge {
            file: file.to_owned(),
            header,
            limit,
        });
    }
    usize::try_from(header).map_err(|_| FrameError::TooLarge {
        file: file.to_owned(),
        header,
        limit: usize::MAX as u64,
    })
}

/// The image checksum field of a payload whose other bytes have the checksum `value`.
fn image_checksum(value: u64) -> ImageChecksum {
    ImageChecksum {
        algorithm: IMAGE_CHECKSUM_ALGORITHM.as_u32(),
        value,
    }
}

/// Encodes `msg` with its length header and our image checksum, as it is stored in a file.
pub fn encode_framed<M: Message>(msg: &M) -> Vec<u8> {
    let seal_len = prost::encoding::message::encoded_len(IMAGE_CHECKSUM_FIELD, &image_checksum(0));
    let len = msg.encoded_len() + seal_len;
    let mut buf = Vec::with_capacity(len + 8);
    buf.extend_from_slice(&(len as u64).to_ne_bytes());
    let header = buf.len();
    // A Vec grows as needed, so encoding into it cannot fail.
    msg.encode_raw(&mut buf);
    let value = chunk_checksum(IMAGE_CHECKSUM_ALGORITHM, &buf[header..]);
    prost::encoding::message::encode(IMAGE_CHECKSUM_FIELD, &image_checksum(value), &mut buf);
    buf
}

/// Decodes a framed message held in memory (the whole file's content), with the same checks as
/// reading it from a file. `file` names it in errors.
///
/// # Errors
/// [`FrameError::Header`], [`FrameError::TooLarge`], [`FrameError::Checksum`] or
/// [`FrameError::Decode`].
pub fn decode_framed<M: Message + Default>(
    bytes: &[u8],
    file: &str,
    message: &'static str,
    limit: u64,
) -> Result<M, FrameError> {
    let (framing, payload) =
        Framing::split(bytes).map_err(|fault| FrameError::header(file.to_owned(), fault))?;
    check_header(file, framing, limit)?;
    decode_sealed(payload, file, message).map(|(msg, _)| msg)
}

/// Checks a payload's image checksum, then decodes the bytes before it.
fn decode_sealed<M: Message + Default>(
    payload: &[u8],
    file: &str,
    message: &'static str,
) -> Result<(M, Integrity), FrameError> {
    let (body, integrity) = unseal(payload).map_err(|fault| FrameError::Checksum {
        file: file.to_owned(),
        fault,
    })?;
    let msg = decode_payload(body, file, message)?;
    if integrity == Integrity::Unprotected {
        log::debug!("{file}: no image checksum (an image of upstream's plugin): read unverified");
    }
    Ok((msg, integrity))
}

/// Finds a payload's image checksum and checks it: the payload before it, and whether it was
/// verified.
///
/// A payload that ends with a checksum field of the shape we write is judged by it alone, before
/// its fields are walked: damage can change a length so that one field swallows the ones after
/// it, the checksum included. Otherwise the top-level fields are walked to find a checksum field
/// of another shape, one that is not last, or our page checksums without one.
fn unseal(payload: &[u8]) -> Result<(&[u8], Integrity), ImageChecksumFault> {
    if let Some(seal) = tail_seal(payload) {
        return check_seal(payload, &seal);
    }
    let mut seal: Option<RawField> = None;
    let mut ours = None;
    let mut pos = 0;
    while pos < payload.len() {
        let Ok(field) = RawField::at(payload, pos) else {
            // Malformed: the decoder says where.
            return Ok((payload, Integrity::Unprotected));
        };
        if seal.is_some() {
            return Err(ImageChecksumFault::NotLast {
                field: field.number,
                offset: field.start as u64 + HEADER_LEN,
            });
        }
        if field.number == IMAGE_CHECKSUM_FIELD {
            seal = Some(field);
        } else if field.number == PAGES_CHECKSUMS_FIELD {
            ours = Some(field.number);
        }
        pos = field.end;
    }
    match (seal, ours) {
        (Some(seal), _) => check_seal(payload, &seal),
        (None, Some(field)) => Err(ImageChecksumFault::Missing { field }),
        (None, None) => Ok((payload, Integrity::Unprotected)),
    }
}

/// The checksum field at the very end of `payload`, if it has the shape we write (key, length,
/// algorithm and the value's key; the value itself is what is checked).
fn tail_seal(payload: &[u8]) -> Option<RawField> {
    let mut shape = Vec::new();
    prost::encoding::message::encode(IMAGE_CHECKSUM_FIELD, &image_checksum(0), &mut shape);
    let start = payload.len().checked_sub(shape.len())?;
    let value_len = std::mem::size_of::<u64>();
    if payload[start..payload.len() - value_len] != shape[..shape.len() - value_len] {
        return None;
    }
    RawField::at(payload, start).ok()
}

/// Checks the image checksum `seal` (the last field of `payload`) against the bytes before it.
fn check_seal<'p>(
    payload: &'p [u8],
    seal: &RawField,
) -> Result<(&'p [u8], Integrity), ImageChecksumFault> {
    let offset = seal.start as u64 + HEADER_LEN;
    let malformed = |what: String| ImageChecksumFault::Malformed { offset, what };
    if seal.wire_type != 2 {
        return Err(malformed(format!(
            "wire type {} where a message (2) is written",
            seal.wire_type
        )));
    }
    let sum = ImageChecksum::decode(&payload[seal.value..seal.end])
        .map_err(|e| malformed(e.to_string()))?;
    let algorithm = ChecksumAlgorithm::from_u32(sum.algorithm)
        .ok_or_else(|| malformed(format!("unknown checksum algorithm {}", sum.algorithm)))?;
    let body = &payload[..seal.start];
    let computed = chunk_checksum(algorithm, body);
    if computed != sum.value {
        return Err(ImageChecksumFault::Mismatch {
            end: offset,
            recorded: sum.value,
            computed,
        });
    }
    Ok((body, Integrity::Verified))
}

/// Decodes a payload; on failure, finds the top-level field that breaks to report its offset.
pub(crate) fn decode_payload<M: Message + Default>(
    payload: &[u8],
    file: &str,
    message: &'static str,
) -> Result<M, FrameError> {
    M::decode(payload).map_err(|err| {
        let (pos, field, source) = locate_error::<M>(payload).unwrap_or((0, None, err));
        FrameError::Decode {
            file: file.to_owned(),
            message,
            field,
            offset: pos as u64 + HEADER_LEN,
            source,
        }
    })
}

/// One top-level field of a payload, found by its key and length alone (not decoded).
#[derive(Clone, Copy, Debug)]
struct RawField {
    /// Payload offset of its key.
    start: usize,
    /// Field number.
    number: u32,
    /// Wire type (the key's low 3 bits).
    wire_type: u8,
    /// Payload offset of its value (for wire type 2, after the length).
    value: usize,
    /// Payload offset just past it.
    end: usize,
}

impl RawField {
    /// The field whose key is at `start`. `Err` with the field number, when the key can be read,
    /// if the field is malformed, of a wire type this schema does not use (groups), or runs past
    /// the payload.
    fn at(payload: &[u8], start: usize) -> Result<Self, Option<u32>> {
        let mut pos = start;
        let key = crate::wire::read_varint(payload, &mut pos).ok_or(None)?;
        let number = u32::try_from(key >> 3).ok();
        let wire_type = (key & 7) as u8;
        let mut value = pos;
        let end = match wire_type {
            0 => crate::wire::read_varint(payload, &mut pos).map(|_| pos),
            1 => pos.checked_add(8),
            2 => crate::wire::read_varint(payload, &mut pos)
                .and_then(|n| usize::try_from(n).ok())
                .and_then(|n| {
                    value = pos;
                    pos.checked_add(n)
                }),
            5 => pos.checked_add(4),
            // Groups (3, 4) are not used by this schema; let prost judge the rest.
            _ => None,
        };
        match (number, end.filter(|&e| e <= payload.len())) {
            (Some(number), Some(end)) => Ok(Self {
                start,
                number,
                wire_type,
                value,
                end,
            }),
            _ => Err(number),
        }
    }
}

/// Walks the top-level fields of `payload`, merging them one by one into a fresh message; returns
/// the payload offset and number of the first field that does not decode, with prost's error.
/// `None` if every field decodes on its own (then the caller keeps the original error).
fn locate_error<M: Message + Default>(
    payload: &[u8],
) -> Option<(usize, Option<u32>, prost::DecodeError)> {
    let mut msg = M::default();
    let mut pos = 0;
    while pos < payload.len() {
        let start = pos;
        let field = match RawField::at(payload, start) {
            Ok(field) => field,
            Err(number) => {
                return M::decode(&payload[start..])
                    .err()
                    .map(|e| (start, number, e))
            }
        };
        if let Err(e) = msg.merge(&payload[start..field.end]) {
            return Some((start, Some(field.number), e));
        }
        pos = field.end;
    }
    None
}

/// Writes `msg`, framed and sealed with our image checksum, to `name` in `dir` (created 0600, old
/// content truncated), in one write.
///
/// # Errors
/// [`FrameError::Create`] or [`FrameError::Write`].
pub(crate) fn write_message<M: Message>(
    dir: BorrowedFd<'_>,
    name: &str,
    msg: &M,
) -> Result<(), FrameError> {
    let buf = encode_framed(msg);
    let mut f = dir::create_at(dir, name).map_err(|source| FrameError::Create {
        file: name.to_owned(),
        source,
    })?;
    f.write_all(&buf).map_err(|source| FrameError::Write {
        file: name.to_owned(),
        offset: 0,
        source,
    })?;
    log::debug!(
        "wrote {name}: {} payload bytes",
        buf.len() as u64 - HEADER_LEN
    );
    Ok(())
}

/// Reads the framed message `name` in `dir`, refusing payloads over `limit` bytes, and checks its
/// image checksum when it has one.
///
/// The payload buffer is allocated only once the length header agrees with the file's size and
/// the cap, so a forged header cannot make us allocate.
///
/// # Errors
/// [`FrameError::Open`], [`FrameError::Read`], and the errors of [`decode_framed`].
pub(crate) fn read_message<M: Message + Default>(
    dir: BorrowedFd<'_>,
    name: &str,
    message: &'static str,
    limit: u64,
) -> Result<M, FrameError> {
    read_message_with_integrity(dir, name, message, limit).map(|(msg, _)| msg)
}

/// [`read_message`], also saying whether the image's own checksum was there to verify it.
///
/// # Errors
/// See [`read_message`].
pub(crate) fn read_message_with_integrity<M: Message + Default>(
    dir: BorrowedFd<'_>,
    name: &str,
    message: &'static str,
    limit: u64,
) -> Result<(M, Integrity), FrameError> {
    let f = dir::open_read_at(dir, name).map_err(|source| FrameError::Open {
        file: name.to_owned(),
        source,
    })?;
    read_open_message(f, name, message, limit)
}

fn read_open_message<M: Message + Default>(
    mut f: File,
    name: &str,
    message: &'static str,
    limit: u64,
) -> Result<(M, Integrity), FrameError> {
    let framing =
        Framing::read(&mut f).map_err(|fault| FrameError::header(name.to_owned(), fault))?;
    let len = check_header(name, framing, limit)?;
    let mut payload = vec![0u8; len];
    f.read_exact(&mut payload)
        .map_err(|source| FrameError::Read {
            file: name.to_owned(),
            offset: HEADER_LEN,
            source,
        })?;
    decode_sealed(&payload, name, message)
}

/// A kind of message image: its file name and message type, with typed read and write.
pub trait ImageFile {
    /// The message the file holds.
    type Message: Message + Default;
    /// The proto name of that message, for errors.
    const MESSAGE_NAME: &'static str;
    /// The payload cap [`ImageFile::read`] applies.
    const DEFAULT_LIMIT: u64;

    /// The file name for CRIU object `id`.
    fn file_name(id: u32) -> String;

    /// Writes the image of object `id` into `dir`.
    ///
    /// # Errors
    /// [`FrameError::Create`] or [`FrameError::Write`].
    fn write(dir: BorrowedFd<'_>, id: u32, msg: &Self::Message) -> Result<(), FrameError> {
        write_message(dir, &Self::file_name(id), msg)
    }

    /// Reads the image of object `id` from `dir`, with the default cap.
    ///
    /// # Errors
    /// As for [`ImageFile::read_with_limit`].
    fn read(dir: BorrowedFd<'_>, id: u32) -> Result<Self::Message, FrameError> {
        Self::read_with_limit(dir, id, Self::DEFAULT_LIMIT)
    }

    /// [`ImageFile::read`], also saying whether the image's own checksum verified it or it has
    /// none (upstream's).
    ///
    /// # Errors
    /// As for [`ImageFile::read_with_limit`].
    fn read_with_integrity(
        dir: BorrowedFd<'_>,
        id: u32,
    ) -> Result<(Self::Message, Integrity), FrameError> {
        read_message_with_integrity(
            dir,
            &Self::file_name(id),
            Self::MESSAGE_NAME,
            Self::DEFAULT_LIMIT,
        )
    }

    /// Reads the image of object `id` from `dir`, refusing payloads over `limit` bytes.
    ///
    /// The payload buffer is allocated only once the length header agrees with the file's size
    /// and the cap, so a forged header cannot make us allocate.
    ///
    /// # Errors
    /// [`FrameError::Open`], [`FrameError::Read`], and the errors of [`decode_framed`].
    fn read_with_limit(
        dir: BorrowedFd<'_>,
        id: u32,
        limit: u64,
    ) -> Result<Self::Message, FrameError> {
        read_message(dir, &Self::file_name(id), Self::MESSAGE_NAME, limit)
    }

    /// Like [`ImageFile::read`], but `Ok(None)` when the file does not exist (restore asks
    /// which kind of object an id is by the image that exists for it).
    ///
    /// # Errors
    /// As for [`ImageFile::read_with_limit`]; a missing file is not an error.
    fn try_read(dir: BorrowedFd<'_>, id: u32) -> Result<Option<Self::Message>, FrameError> {
        let name = Self::file_name(id);
        match dir::open_read_at(dir, &name) {
            Ok(f) => read_open_message(f, &name, Self::MESSAGE_NAME, Self::DEFAULT_LIMIT)
                .map(|(msg, _)| Some(msg)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(FrameError::Open { file: name, source }),
        }
    }
}

/// An [`ImageFile`] type: its doc, name, message, the message's proto name, its default cap and
/// the function of [`names`] that names its file.
macro_rules! image_file {
    ($(#[$doc:meta])* $ty:ident, $msg:ty, $proto:literal, $limit:expr, $name:path) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $ty;

        impl ImageFile for $ty {
            type Message = $msg;
            const MESSAGE_NAME: &'static str = $proto;
            const DEFAULT_LIMIT: u64 = $limit;
            fn file_name(id: u32) -> String {
                $name(id)
            }
        }
    };
}

image_file!(
    /// `amdgpu-kfd-<id>.img`: [`CriuKfd`]. Default cap 1 GiB (priv_data grows with BOs and queues).
    KfdImage, CriuKfd, "criu_kfd", 1 << 30, names::kfd_image
);
image_file!(
    /// `amdgpu-renderD-<id>.img`: [`CriuRenderNode`]. Default cap 256 MiB.
    RenderNodeImage, CriuRenderNode, "criu_render_node", 256 << 20, names::render_node_image
);
image_file!(
    /// `amdgpu-dmabuf_<id>.img`: [`CriuDmabufNode`]. Default cap 4 KiB (one small message).
    DmabufImage, CriuDmabufNode, "criu_dmabuf_node", 4 << 10, names::dmabuf_image
);
