//! Fuzzes the serving planner (`estimate --serve`) with every value of a model and a request from
//! the whole `u64` range: it must refuse or plan sanely, never panic, never wrap.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../support/serving_plan.rs"]
mod serving_plan;

fuzz_target!(|data: &[u8]| {
    if let Err(inconsistency) = serving_plan::run(data) {
        panic!("{inconsistency}");
    }
});
