//! `sweep --resume SERIES.json`: a series run again, its finished trials kept. A trial that ended
//! ok, out of memory or unpredictable (a finding) is kept as it was; any other (failed, crashed,
//! timed out, cancelled by Slurm or a signal, PyTorch missing) runs again. The same driver runs
//! the sweep, so a frontier search walks the same cells and reaches the kept ones first; the
//! result is a new series, never the old file.

use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::progress::Progress;
use crate::schema::series::{Series, TrialRecord};
use crate::signals::Stop;
use crate::sweep::plan::{Cell, SweepPlan};
use crate::sweep::runner::{Ran, Runner};

/// The series at `path`, checked to be the one `plan` (and a runner of `runner`'s kind) would
/// write.
pub fn read(path: &Path, plan: &SweepPlan, runner: &dyn Runner) -> Result<Series> {
    let bytes = std::fs::read(path).with_context(|| format!("--resume {}", path.display()))?;
    let series: Series = serde_json::from_slice(&bytes).with_context(|| {
        format!(
            "--resume {}: not a series (iteragpu.series/1)",
            path.display()
        )
    })?;
    let varied: Vec<_> = plan.vary.iter().map(|v| v.variable).collect();
    if series.mode != plan.mode || series.varied != varied || series.kind != runner.kind() {
        bail!(
            "--resume {}: that series is a {} {} sweep of {:?}, this one a {} {} sweep of {:?}; resume with the arguments it was run with",
            path.display(),
            series.kind,
            series.mode,
            series.varied.iter().map(|v| v.name()).collect::<Vec<_>>(),
            runner.kind(),
            plan.mode,
            varied.iter().map(|v| v.name()).collect::<Vec<_>>(),
        );
    }
    Ok(series)
}

/// A runner that answers the kept trials itself and runs the others through `inner`.
pub struct Resumed<'a> {
    inner: &'a dyn Runner,
    kept: Vec<TrialRecord>,
}

impl<'a> Resumed<'a> {
    pub fn new(inner: &'a dyn Runner, series: Series) -> Resumed<'a> {
        Resumed {
            inner,
            kept: series
                .trials
                .into_iter()
                .filter(|t| !t.is_broken())
                .collect(),
        }
    }

    /// How many trials the old series gives.
    pub fn kept(&self) -> usize {
        self.kept.len()
    }

    fn kept_for(&self, cell: &Cell) -> Option<&TrialRecord> {
        self.kept
            .iter()
            .find(|t| t.values == cell.values && t.load == cell.load)
    }
}

impl Runner for Resumed<'_> {
    fn kind(&self) -> crate::schema::series::PointKind {
        self.inner.kind()
    }

    fn run(&self, cell: &Cell, progress: &dyn Progress) -> Result<Ran> {
        match self.kept_for(cell) {
            // Kept with its own duration (the driver keeps a runner's).
            Some(t) => Ok(Ran::Trial(Box::new(t.clone()))),
            None => self.inner.run(cell, progress),
        }
    }

    /// The kept cells answered at once, the others run together through `inner`.
    fn run_many(
        &self,
        cells: &[&Cell],
        progress: &dyn Progress,
        done: &mut dyn FnMut(usize, Result<Ran>, f64) -> bool,
    ) {
        let mut rest: Vec<usize> = Vec::new();
        for (i, cell) in cells.iter().enumerate() {
            match self.kept_for(cell) {
                Some(t) => {
                    if !done(i, Ok(Ran::Trial(Box::new(t.clone()))), 0.0) {
                        return;
                    }
                }
                None => rest.push(i),
            }
        }
        let todo: Vec<&Cell> = rest.iter().map(|&i| cells[i]).collect();
        self.inner.run_many(&todo, progress, &mut |k, ran, secs| {
            done(rest[k], ran, secs)
        });
    }

    fn stop_requested(&self) -> Option<Stop> {
        self.inner.stop_requested()
    }

    fn parallelism(&self) -> Option<usize> {
        self.inner.parallelism()
    }

    fn device_total(&self, python: &Path, device: &str) -> Option<u64> {
        self.inner.device_total(python, device)
    }

    fn protocol(&self, plan: &SweepPlan) -> String {
        self.inner.protocol(plan)
    }
}
