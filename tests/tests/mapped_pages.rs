//! Windows of a pages file mapped for the GPU to read ([`kfd_abi::FileWindow`]), as the restore
//! uses them: the CPU sees the file's bytes, and a window over a file that was truncated under it
//! is an error, not a `SIGBUS`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::os::fd::AsFd;

use amdgpu_plugin::criu::Settings;
use harness::workload::Spec;
use harness::{self, SimNode};
use kfd_abi::dma::PAGE_SIZE;
use kfd_abi::FileWindow;
use kfd_sim::preset::Preset;

/// A restored process's first render node, a GPU VA free in its VM, and the test's work on them.
fn with_render(test: impl FnOnce(&kfd_abi::RenderNode<kfd_sim::SimFile>, u64)) {
    let preset = Preset::by_name("mi50x1").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings::from_lookup(|_| None, false);
    let spec = Spec {
        vram: vec![1 << 20],
        gtt: Vec::new(),
        ..Spec::default()
    };
    let src = SimNode::new(&preset).unwrap();
    let target = harness::start_target(&src, &spec).unwrap();
    let (ids, _) = harness::checkpoint(&src, &target, dir.path(), &settings).unwrap();
    drop(target);
    let dst = SimNode::new(&preset).unwrap();
    let (restored, _) = harness::restore(&dst, dir.path(), &ids, &settings).unwrap();
    let render = &restored.renders[0];
    let info = render.dev_info().unwrap();
    let va = (info.virtual_address_max - (64 << 20)) & !((2 << 20) - 1);
    test(render, va);
}

#[test]
fn a_window_shows_the_file_and_a_truncated_file_is_an_error() {
    with_render(|render, va| {
        let mut file = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..3 * PAGE_SIZE)
            .map(|i| u8::try_from(i % 251).unwrap())
            .collect();
        file.write_all(&data).unwrap();

        let window = FileWindow::new(render, file.as_fd(), 0, data.len(), va).unwrap();
        assert_eq!(window.va(), va);
        assert_eq!(window.bytes(10..3 * PAGE_SIZE).unwrap(), &data[10..]);
        assert!(
            window.bytes(0..3 * PAGE_SIZE + 1).is_err(),
            "past the window"
        );

        // Another process truncates the file: its pages beyond the end are gone.
        file.set_len(PAGE_SIZE as u64).unwrap();
        assert_eq!(window.bytes(0..PAGE_SIZE).unwrap(), &data[..PAGE_SIZE]);
        let e = window.bytes(PAGE_SIZE..2 * PAGE_SIZE).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{e}");
        drop(window);

        // Windows start on a page of the file.
        assert!(FileWindow::new(render, file.as_fd(), 8, PAGE_SIZE, va).is_err());
        // The VA is free again once the window is dropped.
        FileWindow::new(render, file.as_fd(), 0, PAGE_SIZE, va).unwrap();
    });
}
