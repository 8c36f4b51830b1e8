//! A FIFO, a device or a directory where an image file belongs is refused by name and kind, at
//! once: opened non-blocking, never read. (A FIFO without a writer made `inspect` and `check`
//! block forever.)
#![allow(clippy::unwrap_used)]

mod common;

use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;

use common::*;
use images::pages::{kfd_pages_len, verify_pages_file};
use images::{ImageFile, KfdImage, PagesFile, PagesReader, RenderNodeImage};
use rstest::rstest;

const KFD: &str = "amdgpu-kfd-1.img";
const RENDER: &str = "amdgpu-renderD-2.img";
const PAGES: &str = "amdgpu-pages-1-c1a5.img";
const WHICH: PagesFile = PagesFile::Kfd {
    id: 1,
    gpu_id: 0xc1a5,
};

#[derive(Debug, Clone, Copy)]
enum Special {
    /// A FIFO that this test holds open for reading and writing, so that a blocking open of it
    /// returns (before the fix, the readers then took it for a 0-byte file).
    Fifo,
    /// A symlink to /dev/null.
    CharDevice,
    Directory,
}

/// Puts `special` at every image name of `d`; returns what keeps FIFOs alive.
fn place(d: &Dir, special: Special) -> Vec<File> {
    let mut held = Vec::new();
    for name in [KFD, RENDER, PAGES] {
        let path = d.path(name);
        match special {
            Special::Fifo => {
                let c = CString::new(path.clone().into_os_string().into_encoded_bytes()).unwrap();
                // SAFETY: `c` is a NUL-terminated string that outlives the call.
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
                held.push(
                    std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .custom_flags(libc::O_NONBLOCK)
                        .open(&path)
                        .unwrap(),
                );
            }
            Special::CharDevice => std::os::unix::fs::symlink("/dev/null", &path).unwrap(),
            Special::Directory => std::fs::create_dir(&path).unwrap(),
        }
    }
    held
}

#[rstest]
#[case::fifo(Special::Fifo, "a FIFO")]
#[case::char_device(Special::CharDevice, "a character device")]
#[case::directory(Special::Directory, "a directory")]
fn every_reader_refuses_a_special_file_by_name(#[case] special: Special, #[case] kind: &str) {
    let d = dir();
    let _held = place(&d, special);
    let expect = |e: &dyn std::fmt::Display, name: &str| {
        let s = e.to_string();
        assert!(
            s.contains(name) && s.contains(&format!("it is {kind}, not a regular file")),
            "{s}"
        );
    };
    expect(&KfdImage::read(d.fd.as_fd(), 1).unwrap_err(), KFD);
    expect(&KfdImage::try_read(d.fd.as_fd(), 1).unwrap_err(), KFD);
    expect(&RenderNodeImage::read(d.fd.as_fd(), 2).unwrap_err(), RENDER);
    let bos = sample_kfd().bo_entries;
    let len = kfd_pages_len(&bos, 0xc1a5);
    expect(
        &PagesReader::open(d.fd.as_fd(), WHICH, len, None).unwrap_err(),
        PAGES,
    );
    expect(
        &verify_pages_file(d.fd.as_fd(), WHICH, len, None, 1 << 16).unwrap_err(),
        PAGES,
    );
}

/// A reader given an open special file (`PagesReader::from_file`) refuses it as well.
#[test]
fn a_pages_reader_of_an_open_fifo_refuses_it() {
    let d = dir();
    let held = place(&d, Special::Fifo);
    let e = PagesReader::from_file(held[2].try_clone().unwrap(), WHICH, 0, None).unwrap_err();
    assert!(e.to_string().contains("it is a FIFO"), "{e}");
}
