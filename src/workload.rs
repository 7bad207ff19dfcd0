//! One workload plan, two runners: `measure` runs it on a GPU, `prediction` on fake CUDA tensors.
//!
//! The plan (validated once) and the worker process (its group, timeout, signals and event
//! stream) are shared here, so neither runner imports the other.

mod kinds;
pub mod launch;
mod options;
pub mod plan;
pub mod process;
