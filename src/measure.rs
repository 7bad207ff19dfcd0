//! The phase protocol run in a fresh PyTorch process, with the driver's view beside it.
//!
//! `plan` validates a request once; `spec` is what the worker receives; `trial` runs it (the
//! process's lifetime is `worker_process`'s) and builds the `result` from the `events` as they
//! arrive, with NVML's view (`sampler`, `driver_view`); `gpus` names the GPUs a sweep spreads its
//! trials over; `recorded` builds a notebook Recorder's events through the same builder; `render`
//! draws the terminal table.

pub mod build;
pub(crate) mod driver_view;
pub mod gpus;
pub mod ranks;
pub mod recorded;
pub(crate) mod render;
pub(crate) mod sampler;
pub(crate) mod timeline;
pub(crate) mod trial;
