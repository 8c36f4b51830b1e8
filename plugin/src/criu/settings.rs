//! The plugin's settings: what criu's environment asks of it, read once at `init`.

use crate::copy::{DirectIo, Reading, Staging};
use crate::dump::DumpOptions;
use crate::restore::RestoreOptions;

/// Turns on write-behind of the pages files at dump ([`Settings::write_behind`]).
const WRITE_BEHIND_ENV: &str = "AMDGPU_CR_WRITE_BEHIND";

/// Turns off restoring from mappings of the pages files ([`Settings::map_pages`]).
const MAP_PAGES_ENV: &str = "AMDGPU_CR_MAP_PAGES";

/// Chooses which pages files restores read with direct I/O ([`Settings::direct_io`]).
const DIRECT_IO_ENV: &str = "AMDGPU_CR_DIRECT_IO";

/// Turns on the parallel restore from criu's master ([`Settings::parallel_restore`]).
pub const PARALLEL_RESTORE_ENV: &str = "AMDGPU_CR_PARALLEL_RESTORE";

/// The settings that come from the environment (read once, at `init`).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Staging geometry (`KFD_MAX_BUFFER_SIZE` caps the buffer size).
    pub staging: Staging,
    /// `KFD_*_CHECK`.
    pub checks: topology::CheckOptions,
    /// Whether the host criu calls DUMP_DEVICES_LATE (the dumped queues are unpaused there; else
    /// in the exit hook).
    pub dump_devices_late: bool,
    /// Whether dumps write per-chunk checksums of the pages files.
    pub checksums: bool,
    /// Counts the bytes dumps and restores copy (for progress displays).
    pub progress: crate::copy::Progress,
    /// `AMDGPU_CR_WRITE_BEHIND`: dumps start writing the pages files to the disk as they go.
    pub write_behind: bool,
    /// `AMDGPU_CR_MAP_PAGES` (default on): restores have the GPU copy straight out of read-only
    /// mappings of the pages files (see `copy::restore_gpu`); off, they read them into
    /// staging buffers.
    pub map_pages: bool,
    /// `AMDGPU_CR_DIRECT_IO` (default: files mostly not in the page cache; `1`: every file, `0`:
    /// none): restores read those pages files with direct I/O into staging buffers; dumps with
    /// write-behind (by default; every dump with `1`) write them with direct I/O.
    pub direct_io: DirectIo,
    /// `AMDGPU_CR_PARALLEL_RESTORE` (default off): under a criu that calls RESTORE_INIT and
    /// POST_FORKING, the restored tasks hand their BOs to criu's master, which writes their
    /// contents while the tasks go on restoring (see `crate::restore::parallel`). Other criu
    /// versions restore contents in the task whatever it says.
    pub parallel_restore: bool,
}

impl Settings {
    /// How a restore goes under these settings; `handoff`: criu's master fills the contents
    /// (the parallel restore).
    pub(crate) fn restore_options(
        self,
        handoff: Option<std::sync::Arc<crate::restore::parallel::Hub>>,
    ) -> RestoreOptions {
        RestoreOptions {
            staging: self.staging,
            reading: self.reading(),
            checks: self.checks,
            progress: self.progress,
            handoff,
        }
    }

    /// How a dump goes under these settings.
    pub(crate) fn dump_options(&self) -> DumpOptions {
        DumpOptions {
            staging: self.staging,
            checksums: self.checksums,
            progress: self.progress.clone(),
            write_behind: self.write_behind,
            direct: self.direct_io.at_dump(self.write_behind),
        }
    }

    /// How restores read the pages files.
    pub(crate) fn reading(&self) -> Reading {
        Reading {
            map_pages: self.map_pages,
            direct: self.direct_io,
        }
    }

    /// From the process environment.
    pub fn from_env(dump_devices_late: bool) -> Self {
        Self::from_lookup(|k| std::env::var(k).ok(), dump_devices_late)
    }

    /// From a lookup function (tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>, dump_devices_late: bool) -> Self {
        let max = match topology::options::max_buffer_size_from_lookup(&lookup) {
            Ok(v) => v,
            Err(e) => {
                log::warn!("{e}; using the default staging size");
                None
            }
        };
        Self {
            staging: Staging::capped(max),
            checks: topology::CheckOptions::from_lookup(&lookup),
            dump_devices_late,
            checksums: true,
            progress: crate::copy::Progress::default(),
            write_behind: lookup(WRITE_BEHIND_ENV).is_some_and(|v| {
                topology::options::parse_bool(&v).unwrap_or_else(|| {
                    log::warn!("ignoring {WRITE_BEHIND_ENV}={v:?}: expected 0, 1, NO or YES");
                    false
                })
            }),
            map_pages: lookup(MAP_PAGES_ENV).is_none_or(|v| {
                topology::options::parse_bool(&v).unwrap_or_else(|| {
                    log::warn!("ignoring {MAP_PAGES_ENV}={v:?}: expected 0, 1, NO or YES");
                    true
                })
            }),
            direct_io: lookup(DIRECT_IO_ENV).map_or(DirectIo::Cold, |v| {
                if v.eq_ignore_ascii_case("cold") {
                    return DirectIo::Cold;
                }
                match topology::options::parse_bool(&v) {
                    Some(true) => DirectIo::Always,
                    Some(false) => DirectIo::Never,
                    None => {
                        log::warn!(
                            "ignoring {DIRECT_IO_ENV}={v:?}: expected 0, 1, NO, YES or COLD"
                        );
                        DirectIo::Cold
                    }
                }
            }),
            parallel_restore: lookup(PARALLEL_RESTORE_ENV).is_some_and(|v| {
                topology::options::parse_bool(&v).unwrap_or_else(|| {
                    log::warn!("ignoring {PARALLEL_RESTORE_ENV}={v:?}: expected 0, 1, NO or YES");
                    false
                })
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The settings of an environment that holds `value` (or nothing) under `env` alone.
    fn settings_with(env: &str, value: Option<&str>) -> Settings {
        Settings::from_lookup(
            |k| (k == env).then(|| value.map(String::from)).flatten(),
            false,
        )
    }

    #[rstest::rstest]
    #[case::unset(None, false)]
    #[case::on(Some("1"), true)]
    #[case::yes(Some("YES"), true)]
    #[case::off(Some("0"), false)]
    #[case::garbage_is_ignored(Some("sometimes"), false)]
    fn write_behind_comes_from_the_environment(#[case] value: Option<&str>, #[case] on: bool) {
        let s = settings_with(WRITE_BEHIND_ENV, value);
        assert_eq!(s.write_behind, on);
    }

    #[rstest::rstest]
    #[case::unset(None, true)]
    #[case::on(Some("yes"), true)]
    #[case::off(Some("0"), false)]
    #[case::no(Some("NO"), false)]
    #[case::garbage_is_ignored(Some("rarely"), true)]
    fn mapping_the_pages_files_comes_from_the_environment(
        #[case] value: Option<&str>,
        #[case] on: bool,
    ) {
        let s = settings_with(MAP_PAGES_ENV, value);
        assert_eq!(s.map_pages, on);
    }

    #[rstest::rstest]
    #[case::unset(None, false)]
    #[case::on(Some("1"), true)]
    #[case::yes(Some("yes"), true)]
    #[case::off(Some("0"), false)]
    #[case::garbage_is_ignored(Some("fast"), false)]
    fn the_parallel_restore_comes_from_the_environment(
        #[case] value: Option<&str>,
        #[case] on: bool,
    ) {
        let s = settings_with(PARALLEL_RESTORE_ENV, value);
        assert_eq!(s.parallel_restore, on);
    }

    #[rstest::rstest]
    #[case::unset(None, DirectIo::Cold)]
    #[case::cold(Some("cold"), DirectIo::Cold)]
    #[case::on(Some("1"), DirectIo::Always)]
    #[case::yes(Some("YES"), DirectIo::Always)]
    #[case::off(Some("0"), DirectIo::Never)]
    #[case::garbage_is_ignored(Some("sometimes"), DirectIo::Cold)]
    fn direct_io_comes_from_the_environment(#[case] value: Option<&str>, #[case] want: DirectIo) {
        let s = settings_with(DIRECT_IO_ENV, value);
        assert_eq!(s.direct_io, want);
    }
}
