//! The framing of every image file: an 8-byte native-endian payload length, then the payload.
//!
//! The message images (`amdgpu-kfd-<id>.img`, `amdgpu-renderD-<id>.img`,
//! `amdgpu-dmabuf_<id>.img`) hold one packed message each; [`ImageFile`] reads and writes them.
//! Nothing read from a file is trusted: the length header must agree with the file's size
//! (fstat) and stay under a cap before the payload buffer is allocated, and a message that does
//! not decode is reported with the offset of the top-level field that breaks.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::BorrowedFd;

use prost::Message;

use crate::dir;
use crate::names;
use crate::proto::{CriuDmabufNode, CriuKfd, CriuRenderNode};

/// Bytes of the length header in front of every payload.
pub(crate) const HEADER_LEN: u64 = 8;

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
        let size = file.metadata().map_err(HeaderError::Read)?.len();
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

/// Encodes `msg` with its length header, as it is stored in a file.
pub fn encode_framed<M: Message>(msg: &M) -> Vec<u8> {
    let len = msg.encoded_len();
    let mut buf = Vec::with_capacity(len + 8);
    buf.extend_from_slice(&(len as u64).to_ne_bytes());
    // A Vec grows as needed, so encoding into it cannot fail.
    msg.encode_raw(&mut buf);
    buf
}

/// Decodes a framed message held in memory (the whole file's content), with the same checks as
/// reading it from a file. `file` names it in errors.
///
/// # Errors
/// [`FrameError::Header`], [`FrameError::TooLarge`] or [`FrameError::Decode`].
pub fn decode_framed<M: Message + Default>(
    bytes: &[u8],
    file: &str,
    message: &'static str,
    limit: u64,
) -> Result<M, FrameError> {
    let (framing, payload) =
        Framing::split(bytes).map_err(|fault| FrameError::header(file.to_owned(), fault))?;
    check_header(file, framing, limit)?;
    decode_payload(payload, file, message)
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
        let whole = |field| {
            M::decode(&payload[start..])
                .err()
                .map(|e| (start, field, e))
        };
        let Some(key) = crate::wire::read_varint(payload, &mut pos) else {
            return whole(None);
        };
        let field = u32::try_from(key >> 3).ok();
        let end = match key & 7 {
            0 => crate::wire::read_varint(payload, &mut pos).map(|_| pos),
            1 => pos.checked_add(8),
            2 => crate::wire::read_varint(payload, &mut pos)
                .and_then(|n| usize::try_from(n).ok())
                .and_then(|n| pos.checked_add(n)),
            5 => pos.checked_add(4),
            // Groups (3, 4) are not used by this schema; let prost judge the rest.
            _ => None,
        };
        let Some(end) = end.filter(|&e| e <= payload.len()) else {
            return whole(field);
        };
        if let Err(e) = msg.merge(&payload[start..end]) {
            return Some((start, field, e));
        }
        pos = end;
    }
    None
}

/// Writes `msg`, framed, to `name` in `dir` (created 0600, old content truncated), in one write.
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

/// Reads the framed message `name` in `dir`, refusing payloads over `limit` bytes.
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
) -> Result<M, FrameError> {
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
    decode_payload(&payload, name, message)
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
            Ok(f) => read_open_message(f, &name, Self::MESSAGE_NAME, Self::DEFAULT_LIMIT).map(Some),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(FrameError::Open { file: name, source }),
        }
    }
}

/// `amdgpu-kfd-<id>.img`: [`CriuKfd`]. Default cap 1 GiB (priv_data grows with BOs and queues).
#[derive(Debug, Clone, Copy)]
pub struct KfdImage;

impl ImageFile for KfdImage {
    type Message = CriuKfd;
    const MESSAGE_NAME: &'static str = "criu_kfd";
    const DEFAULT_LIMIT: u64 = 1 << 30;
    fn file_name(id: u32) -> String {
        names::kfd_image(id)
    }
}

/// `amdgpu-renderD-<id>.img`: [`CriuRenderNode`]. Default cap 256 MiB.
#[derive(Debug, Clone, Copy)]
pub struct RenderNodeImage;

impl ImageFile for RenderNodeImage {
    type Message = CriuRenderNode;
    const MESSAGE_NAME: &'static str = "criu_render_node";
    const DEFAULT_LIMIT: u64 = 256 << 20;
    fn file_name(id: u32) -> String {
        names::render_node_image(id)
    }
}

/// `amdgpu-dmabuf_<id>.img`: [`CriuDmabufNode`]. Default cap 4 KiB (one small message).
#[derive(Debug, Clone, Copy)]
pub struct DmabufImage;

impl ImageFile for DmabufImage {
    type Message = CriuDmabufNode;
    const MESSAGE_NAME: &'static str = "criu_dmabuf_node";
    const DEFAULT_LIMIT: u64 = 4 << 10;
    fn file_name(id: u32) -> String {
        names::dmabuf_image(id)
    }
}
