//! Decisions from measurements: sweeps that change one variable at a time (each trial a fresh
//! process), the success / out-of-memory frontier, grids, reference loads, repeated processes, and
//! a fit of the peak against the varied dimension.

pub mod fit;
pub mod plan;
pub mod search;
pub mod series;
