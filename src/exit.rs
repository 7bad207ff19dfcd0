//! Exit statuses, as documented in the README: what a script calling iteragpu can rely on.

/// Success (a sweep that found out-of-memory frontiers also succeeded: those are findings).
pub const OK: u8 = 0;
/// Bad input or an internal error: nothing was run, nothing was overwritten.
pub const BAD_INPUT: u8 = 1;
/// PyTorch or a GPU is missing: nothing was measured and no result file was written.
pub const MISSING_RUNTIME: u8 = 2;
/// The workload failed, crashed, timed out or was interrupted: the results so far are kept.
pub const WORKLOAD_FAILED: u8 = 3;
