//! Decisions from measurements: sweeps that change one variable at a time (each trial a fresh
//! process), the success / out-of-memory frontier, grids, reference loads, repeated processes, and
//! a fit of the peak against the varied dimension.
//!
//! `vary` parses what varies; `plan` validates a whole sweep and enumerates its cells; `runner`
//! runs one cell (measured, or predicted with `--predict`, no GPU); `driver` runs the cells in
//! sequence or in parallel, stops, searches the frontier and fits; `search` picks the frontier's
//! next trial; `render` the terminal table.

pub(crate) mod driver;
pub(crate) mod plan;
pub(crate) mod render;
pub(crate) mod resume;
pub(crate) mod runner;
pub mod search;
pub(crate) mod vary;
