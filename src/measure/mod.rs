//! The phase protocol run in a fresh PyTorch process, with the driver's view beside it.
//!
//! `plan` validates a request once; `spec` is what the worker receives; `trial` runs it (the
//! process's lifetime is `worker_process`'s) and builds the `result` from the `events` as they
//! arrive, with NVML's view (`sampler`, `driver_view`); `render` draws the terminal table.

pub(crate) mod alloc_conf;
pub(crate) mod dimensions;
pub(crate) mod driver_view;
pub mod events;
pub mod history;
pub(crate) mod plan;
pub mod ranks;
pub(crate) mod render;
pub mod result;
pub(crate) mod sampler;
pub mod spec;
pub(crate) mod timeline;
pub(crate) mod torchrun;
pub(crate) mod trial;
pub(crate) mod worker_process;

/// The built-in workloads' phase names, for the tests that run the Python workloads against them.
pub use plan::scope_phases;
