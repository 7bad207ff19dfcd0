//! Why the peak exceeds the estimate: the gap ledger from the estimate to the driver's view and
//! the card's capacity, term by term (`ledger`); the out-of-memory post-mortem (`oom`); the
//! allocation timeline read from PyTorch's memory snapshot (`snapshot`).

pub mod ledger;
pub mod oom;
pub mod render;
pub mod snapshot;
