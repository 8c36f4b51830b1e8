//! The load-time hook-set choice, end to end: a small C library stands in for criu's exports
//! (`cr_plugin_ctl` sized for N hooks, `print_on_level` recording what it is given), is loaded
//! RTLD_GLOBAL, and then the built plugin is `dlopen`ed so that its constructor sees it.
//!
//! A constructor runs once per process, so each scenario runs in a child process: the rstest
//! cases re-run this test binary with only `fake_host_child` selected and the scenario in the
//! environment.

mod support;

use std::ffi::{c_char, c_int, CStr};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use rstest::rstest;
use support::{
    build_c_library, load_plugin, open, symbol, FdIdHook, IdHook, IdRetryHook, UpdateVmaHook,
    VmaHook, VoidHook,
};

const FAKE_CRIU_C: &str = r#"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct list_head { struct list_head *next, *prev; };

#ifdef HOOKS
struct list_head cr_plugin_ctl[1 + HOOKS];
#endif

#ifdef INVENTORY
/* criu 4.1's plugin inventory. LISTED: the plugin names inventory.img lists, comma-separated
 * ("" for an image that lists none); NO_LIST: an image from criu < 4.1, which has no list. */
char fake_added[256];
int fake_adds;
int fake_checks;
int fake_claimed;

int add_inventory_plugin(const char *name)
{
	fake_adds++;
	strncat(fake_added, name, sizeof(fake_added) - strlen(fake_added) - 2);
	strcat(fake_added, ",");
	return 0;
}

_Bool check_and_remove_inventory_plugin(const char *name, size_t n)
{
	const char *listed = LISTED;
	const char *p = listed;

	fake_checks++;
#ifdef NO_LIST
	return 1;
#endif
	while (*p) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (len == n && strncmp(p, name, n) == 0) {
			fake_claimed++;
			return 1;
		}
		p += len + (end ? 1 : 0);
	}
	return 0;
}
#endif

char fake_log[1 << 16];
unsigned long fake_log_len;
int fake_bad_format;

void print_on_level(unsigned int level, const char *fmt, ...)
{
	va_list args;
	int n;

	if (strcmp(fmt, "%s") != 0)
		fake_bad_format++;
	if (fake_log_len >= sizeof(fake_log) - 1)
		return;
	n = snprintf(fake_log + fake_log_len, sizeof(fake_log) - fake_log_len, "<%u>", level);
	if (n > 0)
		fake_log_len += n;
	if (fake_log_len >= sizeof(fake_log) - 1) {
		fake_log_len = sizeof(fake_log) - 1;
		return;
	}
	va_start(args, fmt);
	n = vsnprintf(fake_log + fake_log_len, sizeof(fake_log) - fake_log_len, fmt, args);
	va_end(args);
	if (n > 0)
		fake_log_len += n;
	if (fake_log_len >= sizeof(fake_log))
		fake_log_len = sizeof(fake_log) - 1;
}
"#;

const CHILD: &str = "fake_host_child";
const MARKER: &str = "fake-criu scenario checked";

/// Builds the stand-in for criu's exports; `hooks: None` leaves out `cr_plugin_ctl`.
fn build_fake_criu(name: &str, hooks: Option<u32>) -> PathBuf {
    let defines: Vec<String> = hooks.map(|h| format!("HOOKS={h}")).into_iter().collect();
    build_c_library(&format!("fake-criu-{name}"), FAKE_CRIU_C, &defines)
}

/// What the fake criu's inventory.img says.
#[derive(Clone, Copy, Debug)]
enum Listing {
    /// criu 3.17: no inventory functions at all.
    NoInventory,
    /// criu 4.1+ restoring an image made by criu < 4.1: no plugin list (every plugin enabled).
    NoList,
    /// criu 4.1+ with an image whose list holds these names.
    Lists(&'static str),
}

/// A fake criu 4.1 (12 hooks) with the inventory functions of `listing`.
fn build_fake_criu_4_1(name: &str, listing: Listing) -> PathBuf {
    let mut defines = vec!["HOOKS=12".to_string()];
    match listing {
        Listing::NoInventory => {}
        Listing::NoList => {
            defines.extend(["INVENTORY".into(), "NO_LIST".into(), r#"LISTED="""#.into()])
        }
        Listing::Lists(names) => {
            defines.extend(["INVENTORY".into(), format!("LISTED=\"{names}\"")])
        }
    }
    build_c_library(&format!("fake-criu-{name}"), FAKE_CRIU_C, &defines)
}

/// Hook ids filled in every scenario.
const ALWAYS: [usize; 5] = [2, 3, 7, 8, 9];

#[rstest]
#[case::no_criu("no_criu", None, 10, &[], false)]
#[case::criu_without_hook_table("no_table", Some(None), 10, &[], false)]
#[case::criu_3_17("criu_3_17", Some(Some(10)), 10, &[], false)]
#[case::criu_4_1("criu_4_1", Some(Some(12)), 12, &[], false)]
#[case::criu_4_2("criu_4_2", Some(Some(13)), 13, &[12], false)]
#[case::criu_dev("criu_dev", Some(Some(15)), 15, &[12, 13, 14], true)]
#[case::criu_later("criu_later", Some(Some(17)), 15, &[12, 13, 14], true)]
fn host_scenarios(
    #[case] name: &str,
    #[case] fake: Option<Option<u32>>,
    #[case] max_hooks: u32,
    #[case] extra_slots: &[usize],
    #[case] retry: bool,
) {
    let mut slots: Vec<usize> = ALWAYS.to_vec();
    slots.extend_from_slice(extra_slots);
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = Command::new(exe);
    child
        .args(["--exact", CHILD, "--nocapture", "--test-threads=1"])
        .env("FAKE_CRIU_SCENARIO", name)
        .env("EXPECT_MAX_HOOKS", max_hooks.to_string())
        .env(
            "EXPECT_SLOTS",
            slots
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
        )
        .env("EXPECT_RETRY", if retry { "1" } else { "0" });
    if let Some(hooks) = fake {
        child.env("FAKE_CRIU_LIB", build_fake_criu(name, hooks));
    }
    let out = child.output().expect("run the child test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.contains(MARKER),
        "scenario {name} failed:\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
}

fn env_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} not set"))
}

/// The child side: does nothing unless started by `host_scenarios`.
#[test]
fn fake_host_child() {
    let Ok(scenario) = std::env::var("FAKE_CRIU_SCENARIO") else {
        return;
    };
    let max_hooks: u32 = env_var("EXPECT_MAX_HOOKS").parse().expect("number");
    let slots: Vec<usize> = env_var("EXPECT_SLOTS")
        .split(',')
        .map(|s| s.parse().expect("number"))
        .collect();
    let retry = env_var("EXPECT_RETRY") == "1";

    // criu's exports first (criu is the main program: its symbols are global), then the plugin.
    let fake = std::env::var_os("FAKE_CRIU_LIB")
        .map(|lib| open(Path::new(&lib), libc::RTLD_NOW | libc::RTLD_GLOBAL));
    let d = load_plugin();

    assert_eq!(d.name(), "amdgpu_plugin", "{scenario}");
    assert_eq!(d.version, 0x200, "{scenario}");
    assert_eq!(d.max_hooks, max_hooks, "{scenario}: max_hooks");
    assert_eq!(d.filled(), slots, "{scenario}: filled slots");

    let dev_null = std::fs::File::open("/dev/null").expect("open /dev/null");
    let fd = dev_null.as_raw_fd();
    // SAFETY: every hook is called with the C signature criu uses for it in this scenario.
    unsafe {
        assert_eq!(d.init.expect("init")(0), 0);
        let dump: FdIdHook = d.hook(2);
        assert_eq!(dump(fd, 1), -libc::ENOTSUP);
        // Without an image directory restoring fails (the engine's answer); what matters here is
        // the calling convention: the two-argument form clears `retry_needed`.
        if retry {
            let restore: IdRetryHook = d.hook(3);
            let mut retry_needed = true;
            assert!(restore(1, &mut retry_needed) < 0);
            assert!(!retry_needed, "retry_needed must be cleared");
        } else {
            let restore: IdHook = d.hook(3);
            assert!(restore(1) < 0);
        }
        for id in [12, 13] {
            if slots.contains(&id) {
                let hook: VoidHook = d.hook(id);
                assert!(hook() <= 0, "hook {id}");
            }
        }
        if slots.contains(&14) {
            let hook: IdHook = d.hook(14);
            assert!(hook(1) <= 0);
        }
        // An error line, to see level 1 in criu's log.
        let update: UpdateVmaHook = d.hook(8);
        let r = update(
            c"/dev/kfd".as_ptr(),
            0,
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        assert_eq!(r, -libc::EINVAL);
        d.exit.expect("exit")(0, 0);
    }

    if let Some(fake) = fake {
        let log_ptr = symbol(fake, c"fake_log").cast::<c_char>();
        let bad_format = symbol(fake, c"fake_bad_format").cast::<c_int>();
        // SAFETY: the fake's NUL-terminated log buffer and its int counter; no hook runs now.
        let (log, bad) = unsafe {
            (
                CStr::from_ptr(log_ptr).to_string_lossy().into_owned(),
                *bad_format,
            )
        };
        assert_eq!(bad, 0, "print_on_level must always get the format \"%s\"");
        assert!(
            log.contains("<3>amdgpu_plugin: criu has "),
            "{scenario}: no info line in {log:?}"
        );
        assert!(
            log.contains("<1>amdgpu_plugin: UPDATE_VMA_MAP: criu passed a null pointer"),
            "{scenario}: no error line in {log:?}"
        );
        assert!(log.ends_with('\n'), "lines end with a newline: {log:?}");
    }
    eprintln!("{MARKER}: {scenario}");
}

const INVENTORY_CHILD: &str = "fake_inventory_child";

/// criu 4.1's plugin inventory through the real `.so`: a dump records `amdgpu_plugin` once, as
/// soon as it handles a GPU object, and never for other objects; a restore claims its entry in
/// `init`, and stays out of a restore whose images do not list it (every hook "not ours").
#[rstest]
#[case::criu_3_17_has_no_inventory("inv_none", Listing::NoInventory, true)]
#[case::image_from_criu_before_4_1("inv_nolist", Listing::NoList, true)]
#[case::image_lists_the_plugin("inv_listed", Listing::Lists("cuda_plugin,amdgpu_plugin"), true)]
#[case::image_lists_other_plugins("inv_other", Listing::Lists("cuda_plugin"), false)]
#[case::image_lists_no_plugin("inv_empty", Listing::Lists(""), false)]
fn inventory_scenarios(#[case] name: &str, #[case] listing: Listing, #[case] enabled: bool) {
    let exe = std::env::current_exe().expect("current_exe");
    let out = Command::new(exe)
        .args([
            "--exact",
            INVENTORY_CHILD,
            "--nocapture",
            "--test-threads=1",
        ])
        .env("FAKE_CRIU_SCENARIO", name)
        .env("FAKE_CRIU_LIB", build_fake_criu_4_1(name, listing))
        .env(
            "EXPECT_INVENTORY",
            if matches!(listing, Listing::NoInventory) {
                "0"
            } else {
                "1"
            },
        )
        .env("EXPECT_ENABLED", if enabled { "1" } else { "0" })
        .output()
        .expect("run the child test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.contains(MARKER),
        "scenario {name} failed:\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
}

/// A `struct stat` of a character device `major:minor`.
fn char_stat(major: u32, minor: u32) -> libc::stat {
    // SAFETY: `stat` is plain old data; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    st.st_mode = libc::S_IFCHR | 0o600;
    st.st_rdev = libc::makedev(major, minor);
    st
}

/// The child side of `inventory_scenarios`.
#[test]
fn fake_inventory_child() {
    let Ok(scenario) = std::env::var("FAKE_CRIU_SCENARIO") else {
        return;
    };
    let has_inventory = env_var("EXPECT_INVENTORY") == "1";
    let enabled = env_var("EXPECT_ENABLED") == "1";
    let fake = open(
        Path::new(&env_var("FAKE_CRIU_LIB")),
        libc::RTLD_NOW | libc::RTLD_GLOBAL,
    );
    let d = load_plugin();
    let int = |name: &CStr| -> c_int {
        if !has_inventory {
            return 0;
        }
        // SAFETY: the fake's int counters; no hook runs while they are read.
        unsafe { *symbol(fake, name).cast::<c_int>() }
    };
    let added = || -> String {
        if !has_inventory {
            return String::new();
        }
        // SAFETY: the fake's NUL-terminated buffer; no hook runs while it is read.
        unsafe { CStr::from_ptr(symbol(fake, c"fake_added").cast::<c_char>()) }
            .to_string_lossy()
            .into_owned()
    };
    let render = char_stat(226, 128);
    let dev_null = std::fs::File::open("/dev/null").expect("open /dev/null");
    let null_stat = {
        // SAFETY: fstat fills the zeroed struct for an open fd.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::fstat(dev_null.as_raw_fd(), &mut st) }, 0);
        st
    };
    let fd = dev_null.as_raw_fd();

    // SAFETY: every hook is called with the C signature criu 4.1 uses for it.
    unsafe {
        let init = d.init.expect("init");
        let exit = d.exit.expect("exit");
        let vma: VmaHook = d.hook(7);
        let update: UpdateVmaHook = d.hook(8);

        // Dump: nothing is recorded for objects that are not ours...
        assert_eq!(init(0), 0);
        assert_eq!(vma(fd, &null_stat), -libc::ENOTSUP, "{scenario}");
        let dump: FdIdHook = d.hook(2);
        assert_eq!(dump(fd, 1), -libc::ENOTSUP, "{scenario}");
        assert_eq!(
            int(c"fake_adds"),
            0,
            "{scenario}: recorded for a foreign object"
        );
        // ...and the plugin is recorded once, at its first GPU object.
        assert_eq!(vma(fd, &render), 0, "{scenario}");
        assert_eq!(vma(fd, &render), 0, "{scenario}");
        if has_inventory {
            assert_eq!(int(c"fake_adds"), 1, "{scenario}: recorded once per dump");
            assert_eq!(added(), "amdgpu_plugin,", "{scenario}");
        }
        exit(0, 0);
        assert_eq!(int(c"fake_checks"), 0, "{scenario}: a dump claims nothing");

        // Restore: the entry is claimed in init; unlisted, every hook is "not ours".
        assert_eq!(init(2), 0);
        assert_eq!(int(c"fake_checks"), i32::from(has_inventory), "{scenario}");
        let mut pgoff = 0u64;
        let mut plugin_fd = -1;
        let r = update(
            c"/dev/dri/renderD128".as_ptr(),
            0x7f00_0000_0000,
            0x1_0000_0000,
            &mut pgoff,
            &mut plugin_fd,
        );
        // Enabled, a VMA that matches nothing restored is left as criu has it (0).
        assert_eq!(r, if enabled { 0 } else { -libc::ENOTSUP }, "{scenario}");
        let resume: IdHook = d.hook(9);
        assert_eq!(
            resume(1),
            -libc::ENOTSUP,
            "{scenario}: nothing was restored"
        );
        exit(2, 0);
        if has_inventory {
            assert_eq!(
                int(c"fake_adds"),
                1,
                "{scenario}: a restore records nothing"
            );
        }
    }

    // SAFETY: the fake's NUL-terminated log buffer; no hook runs now.
    let log = unsafe { CStr::from_ptr(symbol(fake, c"fake_log").cast::<c_char>()) }
        .to_string_lossy()
        .into_owned();
    assert_eq!(
        log.contains("does not list amdgpu_plugin: staying out of this restore"),
        !enabled,
        "{scenario}: {log:?}"
    );
    eprintln!("{MARKER}: {scenario}");
}
