//! The bench directory's files: syncing them, dropping their page cache (the memory state every
//! phase starts from, `docs/bench.md`), what they take on the disk.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// Bytes the file system holds for `paths` (`st_blocks`).
pub(super) fn on_disk(paths: &[PathBuf]) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    paths.iter().try_fold(
        0u64,
        |sum, p| Ok(sum + std::fs::metadata(p)?.blocks() * 512),
    )
}

fn drop_cache(path: &Path) -> io::Result<()> {
    images::dir::drop_page_cache(&File::open(path)?)
}

/// Every regular file in `dir`.
pub(super) fn files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_file() {
            out.push(e.path());
        }
    }
    Ok(out)
}

/// `fsync`s every file in `dir` (and the directory): the next phase starts with nothing of
/// ours dirty in the page cache.
pub(super) fn settle(dir: &Path) -> io::Result<()> {
    for p in files(dir)? {
        File::open(&p)?.sync_all()?;
    }
    File::open(dir)?.sync_all()
}

/// Drops the page cache of `paths` (after [`settle`], so all of it can go).
pub(super) fn drop_caches(paths: &[PathBuf]) -> io::Result<()> {
    for p in paths {
        drop_cache(p)?;
    }
    Ok(())
}

/// [`settle`], then drops the page cache of every file in `dir`: the next write phase gets the
/// memory the previous one just gave back (see `docs/bench.md`).
pub(super) fn settle_and_drop(dir: &Path) -> io::Result<()> {
    settle(dir)?;
    drop_caches(&files(dir)?)
}

/// The files of the checkpoint in `dir` (all but the raw files).
pub(super) fn image_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    Ok(files(dir)?
        .into_iter()
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("raw-limit-"))
        })
        .collect())
}

/// Removes the files `paths`.
pub(super) fn remove(paths: &[PathBuf]) -> io::Result<()> {
    paths.iter().try_for_each(std::fs::remove_file)
}
