//! Fuzzes the out-of-memory message parser and classifier (`explain::oom::parse`, `classify`,
//! `diagnose`) on arbitrary text: never a panic, never a slow message, the same post-mortem
//! whichever way it is made, and unchanged through JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../support/oom_message.rs"]
mod oom_message;

fuzz_target!(|data: &[u8]| {
    if let Err(inconsistency) = oom_message::run(data) {
        panic!("{inconsistency}");
    }
});
