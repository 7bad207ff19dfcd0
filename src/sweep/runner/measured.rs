//! The measuring runner: each cell a fresh worker through `measure::trial::TrialRunner`, its
//! result summarized into the trial record (the result itself kept in it).

use std::path::Path;
use std::sync::Mutex;

use anyhow::Result;

use crate::measure::build::TrialOutcome;
use crate::measure::trial::TrialRunner;
use crate::progress::Progress;
use crate::schema::measure::MeasureResult;
use crate::schema::series::{PointKind, SweepMode, TrialRecord};
use crate::signals::Stop;
use crate::sweep::plan::{Cell, SweepPlan};
use crate::sweep::runner::{Ran, Runner};

/// Measures each cell with a [`TrialRunner`] (the process runner; a mock in tests), one at a time.
pub struct Measured<'a> {
    runner: Mutex<&'a mut (dyn TrialRunner + Send)>,
}

impl<'a> Measured<'a> {
    pub fn new(runner: &'a mut (dyn TrialRunner + Send)) -> Measured<'a> {
        Measured {
            runner: Mutex::new(runner),
        }
    }

    fn runner(&self) -> std::sync::MutexGuard<'_, &'a mut (dyn TrialRunner + Send)> {
        // A poisoned lock is a panic already on its way up.
        self.runner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Runner for Measured<'_> {
    fn kind(&self) -> PointKind {
        PointKind::Measured
    }

    fn run(&self, cell: &Cell, progress: &dyn Progress) -> Result<Ran> {
        let kv_estimates = crate::prediction::kv_estimates(&cell.plan)?;
        Ok(match self.runner().run(&cell.trial(), progress)? {
            TrialOutcome::Unavailable { reason } => Ran::Unavailable(reason),
            TrialOutcome::Measured(mut result) => {
                crate::schema::check::kv_cache(&mut result, &kv_estimates);
                Ran::Trial(Box::new(summarize(cell, *result)))
            }
        })
    }

    fn stop_requested(&self) -> Option<Stop> {
        self.runner().stop_requested()
    }

    fn device_total(&self, python: &Path, device: &str) -> Option<u64> {
        self.runner().device_total(python, device)
    }

    fn protocol(&self, plan: &SweepPlan) -> String {
        if plan.mode == SweepMode::Processes {
            format!(
                "the same configuration in {} fresh processes (not {} repeats in one process)",
                plan.processes, plan.processes
            )
        } else {
            "fresh process per trial".into()
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
    }
}
