//! The built plugin inside a real criu process, when criu is installed (Debian bookworm: 3.17.1).
//!
//! Running `criu dump` needs kernel features a test machine may lack, so this runs
//! `criu --version` with a small preloaded C library whose constructor (before criu's `main`)
//! turns on criu's log at a chosen level, `dlopen`s the plugin as criu does, and reports its
//! descriptor and the result of a few hooks. The plugin's own constructor then sees the real
//! criu's exports: its hook table and `print_on_level`.
//!
//! Without a criu binary the test says so on stderr and passes; `fake_criu.rs` covers the same
//! decisions with a stand-in.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::{build_c_library, plugin_path};

const INSPECT_C: &str = r#"
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct desc {
	const char *name;
	int (*init)(int);
	void (*exit)(int, int);
	unsigned int version, max_hooks;
	void *hooks[15];
};

__attribute__((constructor)) static void inspect(void)
{
	int (*log_init)(const char *) = dlsym(RTLD_DEFAULT, "log_init");
	void (*set_level)(unsigned int) = dlsym(RTLD_DEFAULT, "log_set_loglevel");
	int (*update)(const char *, uint64_t, uint64_t, uint64_t *, int *);
	struct desc *d;
	void *h;
	int i;

	if (!log_init || !set_level || log_init(NULL)) {
		fprintf(stderr, "INSPECT no criu log\n");
		exit(3);
	}
	set_level(atoi(getenv("CRIU_LOGLEVEL")));
	h = dlopen(getenv("PLUGIN"), RTLD_LAZY);
	if (!h) {
		fprintf(stderr, "INSPECT dlopen: %s\n", dlerror());
		exit(2);
	}
	d = dlsym(h, "CR_PLUGIN_DESC");
	fprintf(stderr, "INSPECT version=%#x max_hooks=%u slots=", d->version, d->max_hooks);
	for (i = 0; i < 15; i++)
		if (d->hooks[i])
			fprintf(stderr, "%d,", i);
	fprintf(stderr, "\n");
	fprintf(stderr, "INSPECT init=%d\n", d->init(0));
	update = (int (*)(const char *, uint64_t, uint64_t, uint64_t *, int *))d->hooks[8];
	fprintf(stderr, "INSPECT update=%d\n", update("/dev/kfd", 0, 0, NULL, NULL));
	d->exit(0, 0);
	exit(0);
}
"#;

fn criu() -> Option<PathBuf> {
    ["/usr/sbin/criu", "/usr/local/sbin/criu", "/usr/bin/criu"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

fn run(criu: &Path, inspect: &Path, loglevel: u32) -> String {
    let out = Command::new(criu)
        .arg("--version")
        .env("LD_PRELOAD", inspect)
        .env("PLUGIN", plugin_path())
        .env("CRIU_LOGLEVEL", loglevel.to_string())
        .output()
        .expect("run criu");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "criu with the inspector failed:\n{stderr}"
    );
    stderr
}

/// The number after `prefix` in `text`.
fn number_after(text: &str, prefix: &str) -> u32 {
    let start = text
        .find(prefix)
        .unwrap_or_else(|| panic!("{prefix:?} in {text}"))
        + prefix.len();
    text[start..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("number after {prefix:?} in {text}"))
}

#[test]
fn loads_into_the_installed_criu() {
    let Some(criu) = criu() else {
        eprintln!("no criu binary installed: skipped");
        return;
    };
    let inspect = build_c_library("inspect-criu", INSPECT_C, &[]);

    // criu's LOG_DEBUG: our info line reaches criu's log.
    let out = run(&criu, &inspect, 4);
    let hooks = number_after(&out, "amdgpu_plugin: criu has ");
    assert!(
        out.contains(&format!("criu has {hooks} hooks (HookTable)")),
        "the hook table of a real criu is measured:\n{out}"
    );
    let max_hooks = number_after(&out, "INSPECT version=0x200 max_hooks=");
    assert_eq!(max_hooks, hooks.min(15), "{out}");
    assert!(out.contains("slots=2,3,7,8,9,"), "{out}");
    assert!(out.contains("INSPECT init=0"), "{out}");
    assert!(
        out.contains(&format!("INSPECT update={}", -libc::EINVAL)),
        "{out}"
    );
    assert!(
        out.contains("amdgpu_plugin: UPDATE_VMA_MAP: criu passed a null pointer"),
        "{out}"
    );

    // criu's LOG_ERROR: criu's own filter drops our info line and keeps the error, so the lines
    // went through criu's print_on_level (our stderr fallback does not filter).
    let out = run(&criu, &inspect, 1);
    assert!(!out.contains("amdgpu_plugin: criu has"), "{out}");
    assert!(
        out.contains("amdgpu_plugin: UPDATE_VMA_MAP: criu passed a null pointer"),
        "{out}"
    );
}
