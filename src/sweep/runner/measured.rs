//! The measuring runner: each cell a fresh worker through `measure::trial::TrialRunner`, its
//! result summarized into the trial record (the result itself kept in it). With `sweep --gpus`
//! it runs up to one trial per GPU at once, each worker started with `CUDA_VISIBLE_DEVICES` set to
//! a GPU no other trial holds (a pool of free GPUs), and records that GPU in the trial.

use std::path::Path;
use std::sync::{Condvar, Mutex};

use anyhow::Result;

use crate::measure::build::TrialOutcome;
use crate::measure::trial::TrialRunner;
use crate::progress::Progress;
use crate::schema::measure::MeasureResult;
use crate::schema::series::{Devices, Gpu, PointKind, SweepMode, TrialRecord};
use crate::signals::Stop;
use crate::sweep::plan::{Cell, SweepPlan};
use crate::sweep::runner::{Ran, Runner};

/// Measures each cell with a [`TrialRunner`] (the process runner; a mock in tests): one at a
/// time on the `--device`, or one per GPU at once with `--gpus`.
pub struct Measured<'a> {
    runner: &'a dyn TrialRunner,
    gpus: Option<Pool>,
}

/// The GPUs of `--gpus` and which of them no trial holds.
struct Pool {
    devices: Devices,
    free: Mutex<Vec<usize>>,
    freed: Condvar,
}

/// A GPU held by one trial, back in the pool when dropped (a panicking trial included).
struct Held<'p> {
    pool: &'p Pool,
    k: usize,
}

impl Pool {
    fn new(devices: Devices) -> Pool {
        let free = (0..devices.gpus.len()).rev().collect();
        Pool {
            devices,
            free: Mutex::new(free),
            freed: Condvar::new(),
        }
    }

    /// A free GPU, waiting for one (the driver starts at most one trial per GPU, so it waits
    /// only if a caller starts more).
    fn take(&self) -> Held<'_> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(k) = free.pop() {
                return Held { pool: self, k };
            }
            free = self.freed.wait(free).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Held<'_> {
    fn gpu(&self) -> &Gpu {
        &self.pool.devices.gpus[self.k]
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut free = self.pool.free.lock().unwrap_or_else(|e| e.into_inner());
        free.push(self.k);
        self.pool.freed.notify_one();
    }
}

impl<'a> Measured<'a> {
    /// Trials one after the other, on the devices the plan names.
    pub fn new(runner: &'a dyn TrialRunner) -> Measured<'a> {
        Measured { runner, gpus: None }
    }

    /// Trials in parallel over `devices` (`sweep --gpus`), never two on one GPU.
    pub fn on_gpus(runner: &'a dyn TrialRunner, devices: Devices) -> Measured<'a> {
        Measured {
            runner,
            gpus: Some(Pool::new(devices)),
        }
    }
}

impl Runner for Measured<'_> {
    fn kind(&self) -> PointKind {
        PointKind::Measured
    }

    fn run(&self, cell: &Cell, progress: &dyn Progress) -> Result<Ran> {
        let kv_estimates = crate::prediction::kv_estimates(&cell.plan)?;
        let mut trial = cell.trial();
        let held = self.gpus.as_ref().map(Pool::take);
        let gpu = held.as_ref().map(|h| h.gpu().clone());
        trial.visible_devices = gpu.as_ref().map(|g| g.visible.clone());
        let outcome = self.runner.run(&trial, progress)?;
        drop(held);
        Ok(match outcome {
            TrialOutcome::Unavailable { reason } => Ran::Unavailable(match &gpu {
                Some(g) => format!("on GPU {}: {reason}", g.visible),
                None => reason,
            }),
            TrialOutcome::Measured(mut result) => {
                crate::schema::check::kv_cache(&mut result, &kv_estimates);
                let mut record = summarize(cell, *result);
                record.gpu = gpu;
                Ran::Trial(Box::new(record))
            }
        })
    }

    fn stop_requested(&self) -> Option<Stop> {
        self.runner.stop_requested()
    }

    fn parallelism(&self) -> Option<usize> {
        self.gpus
            .as_ref()
            .map(|p| p.devices.gpus.len())
            .filter(|&n| n > 1)
    }

    fn device_total(&self, python: &Path, device: &str) -> Option<u64> {
        match &self.gpus {
            // The smallest of them, as PyTorch declared it when the GPUs were named.
            Some(pool) => pool
                .devices
                .gpus
                .iter()
                .map(|g| g.total_memory)
                .collect::<Option<Vec<u64>>>()?
                .into_iter()
                .min(),
            None => self.runner.device_total(python, device),
        }
    }

    fn devices(&self) -> Option<Devices> {
        self.gpus.as_ref().map(|p| p.devices.clone())
    }

    fn protocol(&self, plan: &SweepPlan) -> String {
        let each = if plan.mode == SweepMode::Processes {
            format!(
                "the same configuration in {} fresh processes (not {} repeats in one process)",
                plan.processes, plan.processes
            )
        } else {
            "fresh process per trial".into()
        };
        match &self.gpus {
            None => each,
            Some(pool) => format!(
                "{each}, up to {} at once, each alone on its GPU (CUDA_VISIBLE_DEVICES): {}",
                pool.devices.gpus.len(),
                pool.devices.models
            ),
        }
    }
}

fn summarize(cell: &Cell, r: MeasureResult) -> TrialRecord {
    let last = r.phases.iter().rev().find(|p| !p.devices.is_empty());
    TrialRecord {
        index: 0,
        kind: PointKind::Measured,
        values: cell.values.clone(),
        load: cell.load.clone(),
        status: r.status.into(),
        out_of_memory: r.failure.as_ref().is_some_and(|f| f.out_of_memory),
        peak_allocated_bytes: r.max_peak_allocated(),
        peak_reserved_bytes: r.max_peak_reserved(),
        end_allocated_bytes: last.and_then(|p| p.devices[0].end_allocated_bytes),
        end_reserved_bytes: last.and_then(|p| p.devices[0].end_reserved_bytes),
        failed_phase: r.failure.as_ref().and_then(|f| f.phase.clone()),
        error: r.failure.as_ref().map(|f| {
            format!(
                "{} {}",
                f.error_type.as_deref().unwrap_or(""),
                f.message.as_deref().unwrap_or("")
            )
            .trim()
            .to_string()
        }),
        duration_s: 0.0,
        result: Some(r),
        prediction: None,
        gpu: None,
    }
}
