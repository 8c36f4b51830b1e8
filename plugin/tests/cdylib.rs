//! The built `libamdgpu_plugin.so`, loaded with `dlopen` in a process without criu: the
//! descriptor criu 3.17 accepts, and hooks that answer "not ours" for non-GPU files and cope
//! with null pointers.

mod support;

use std::ffi::c_int;
use std::os::fd::AsRawFd;

use support::{load_plugin, Desc, FdIdHook, IdHook, UpdateVmaHook, VmaHook, SLOTS};

const DUMP_EXT_FILE: usize = 2;
const RESTORE_EXT_FILE: usize = 3;
const HANDLE_DEVICE_VMA: usize = 7;
const UPDATE_VMA_MAP: usize = 8;
const RESUME_DEVICES_LATE: usize = 9;

#[test]
fn descriptor_is_one_criu_3_17_accepts() {
    let d: &Desc = load_plugin();
    assert_eq!(d.name(), "amdgpu_plugin");
    assert_eq!(d.version, 0x200);
    // criu 3.17 has 10 hooks and refuses more; without criu we declare exactly its set.
    assert_eq!(d.max_hooks, 10);
    assert!(d.init.is_some());
    assert!(d.exit.is_some());
    assert_eq!(
        d.filled(),
        [
            DUMP_EXT_FILE,
            RESTORE_EXT_FILE,
            HANDLE_DEVICE_VMA,
            UPDATE_VMA_MAP,
            RESUME_DEVICES_LATE
        ]
    );
    assert_eq!(d.hooks.len(), SLOTS);
}

#[test]
fn hooks_say_not_ours_for_non_gpu_objects() {
    let d = load_plugin();
    let init = d.init.expect("init");
    let exit = d.exit.expect("exit");
    let dev_null = std::fs::File::open("/dev/null").expect("open /dev/null");
    let fd = dev_null.as_raw_fd();
    // SAFETY: a zeroed `struct stat` is a valid value for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat of an open fd into a valid buffer.
    assert_eq!(unsafe { libc::fstat(fd, &mut st) }, 0);

    // SAFETY: each hook is called with its C signature and valid arguments, as criu would.
    unsafe {
        assert_eq!(init(0), 0);

        let dump: FdIdHook = d.hook(DUMP_EXT_FILE);
        assert_eq!(dump(fd, 0x11), -libc::ENOTSUP);

        let vma: VmaHook = d.hook(HANDLE_DEVICE_VMA);
        assert_eq!(vma(fd, &st), -libc::ENOTSUP);
        assert_eq!(vma(fd, std::ptr::null()), -libc::EINVAL);

        // Without criu there is no image directory: an error (the engine's), never an fd.
        let restore: IdHook = d.hook(RESTORE_EXT_FILE);
        assert!(restore(0x11) < 0);

        let update: UpdateVmaHook = d.hook(UPDATE_VMA_MAP);
        let null_outputs = update(
            c"/dev/null".as_ptr(),
            0x1000,
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        assert_eq!(null_outputs, -libc::EINVAL);
        let (mut pgoff, mut plugin_fd): (u64, c_int) = (7, 7);
        let r = update(c"/dev/null".as_ptr(), 0x1000, 0, &mut pgoff, &mut plugin_fd);
        assert_eq!(r, -libc::ENOTSUP);
        assert_eq!(
            (pgoff, plugin_fd),
            (7, 7),
            "outputs untouched when not ours"
        );

        let resume: IdHook = d.hook(RESUME_DEVICES_LATE);
        assert_eq!(resume(libc::getpid()), -libc::ENOTSUP);

        exit(0, 0);
    }
}
