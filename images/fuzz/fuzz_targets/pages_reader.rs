//! Pages files (length header, payload, optional checksum list) from arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| images::fuzz::pages_reader(data));
