//! Framed message images (criu_kfd, criu_render_node, criu_dmabuf_node) from arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| images::fuzz::decode_images(data));
