//! Fuzzes the safetensors header reader on arbitrary files: it must refuse or accept, never panic,
//! and never allocate more than the header cap.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::io::Cursor;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let _ = iteragpu::model::safetensors::scan_reader(Path::new("fuzz.safetensors"), Cursor::new(data), data.len() as u64);
    if data.len() > 8 {
        let _ = iteragpu::model::safetensors::parse_header(&data[8..]);
    }
});
