//! PyTorch's own diagnostics, read: the out-of-memory message and its post-mortem (`oom`), and
//! the allocator's memory snapshot (`snapshot`, a streaming pickle reader). Neither knows
//! iteragpu's documents; the gap ledger that explains a peak is `crate::ledger`.

pub mod oom;
pub mod snapshot;
