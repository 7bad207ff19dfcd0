//! Fuzzes the memory-snapshot reader (`explain::snapshot::summarize`, what `measure --timeline`
//! runs on the file the workload's PyTorch wrote) on arbitrary bytes: it must refuse or
//! summarise, never panic, abort or take long, and keep the summary within its bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../support/snapshot_summary.rs"]
mod snapshot_summary;

fuzz_target!(|data: &[u8]| {
    if let Err(inconsistency) = snapshot_summary::run(data) {
        panic!("{inconsistency}");
    }
});
