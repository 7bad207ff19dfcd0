//! Decisions from measurements: sweeps that change one variable at a time (each trial a fresh
//! process), the success / out-of-memory frontier, grids, reference loads, repeated processes, and
//! a fit of the peak against the varied dimension.
//!
//! `vary` parses what varies; `plan` validates a whole sweep; `driver` runs it through a trial
//! runner; `predicted` predicts each trial instead (`--predict`, no GPU); `search` picks the frontier's next trial; `fit` models the peak; `series` is the file;
//! `render` the terminal table.

pub(crate) mod driver;
pub(crate) mod hint;
pub(crate) mod plan;
pub(crate) mod predicted;
pub(crate) mod render;
pub mod search;
pub(crate) mod vary;
