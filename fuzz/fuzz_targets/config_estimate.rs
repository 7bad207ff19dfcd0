//! Fuzzes config.json → architecture → estimate (inference, KV cache, full and LoRA training):
//! the first bytes choose the request, the rest is the config. It must refuse or accept, never
//! panic, never allocate in proportion to an unchecked size, never take long.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../support/config_estimate.rs"]
mod config_estimate;

use config_estimate::{KNOB_BYTES, Knobs, run};

fuzz_target!(|data: &[u8]| {
    let (knobs, config) = data.split_at(data.len().min(KNOB_BYTES));
    if let Err(inconsistency) = run(config, Knobs::from_bytes(knobs)) {
        panic!("{inconsistency}");
    }
});
