//! What runs a sweep's cells: one trait, a measuring implementation (`measured`: a fresh worker
//! per trial, on the GPU) and a predicting one (`predicted`: a prediction for a card, on the
//! CPU; beside a measured frontier, its hint). A runner turns one cell into one trial record; the
//! driver owns the order, the parallelism, the stops and the failures.

pub(crate) mod measured;
pub(crate) mod one_trace;
pub(crate) mod predicted;
pub(crate) mod slurm;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use anyhow::Result;

use crate::progress::Progress;
use crate::schema::series::{Devices, PointKind, TrialRecord, TrialStatus};
use crate::signals::Stop;
use crate::sweep::plan::{Cell, SweepPlan};

/// What a runner made of one cell.
pub enum Ran {
    /// The trial's record (the driver numbers and times it).
    Trial(Box<TrialRecord>),
    /// PyTorch, a GPU or what the runner needs is missing: why.
    Unavailable(String),
}

/// Runs a sweep's cells, one call per cell; shared by the driver's threads.
pub trait Runner: Sync {
    /// Whether its trials are measured or predicted (the series' kind and its wording).
    fn kind(&self) -> PointKind;

    /// Runs one cell to its end; `progress` (a terminal display, if any) shows the phase.
    fn run(&self, cell: &Cell, progress: &dyn Progress) -> Result<Ran>;

    /// A signal asked iteragpu to stop (checked before each cell starts).
    fn stop_requested(&self) -> Option<Stop>;

    /// `None`: one cell after the other, each recorded before the next starts; `Some(n)`: up to
    /// `n` cells at once, recorded in order as they end.
    fn parallelism(&self) -> Option<usize> {
        None
    }

    /// Runs independent cells (a list's or a grid's, a frontier search's round) up to
    /// `parallelism()` at once, calling `done(i, ran, duration_s)` as each ends (any order, `i`
    /// its index in `cells`); starts no new cell once `done` returns false or a stop is requested.
    /// A cell already started still reports through `done`. The default: a pool of threads each
    /// calling [`Runner::run`], `done` called on the calling thread.
    fn run_many(
        &self,
        cells: &[&Cell],
        progress: &dyn Progress,
        done: &mut dyn FnMut(usize, Result<Ran>, f64) -> bool,
    ) {
        in_threads(self, cells, progress, done);
    }

    /// `total_memory` of `device` as the interpreter's PyTorch declares it, if it can tell.
    fn device_total(&self, _python: &Path, _device: &str) -> Option<u64> {
        None
    }

    /// The GPUs its trials run on, one trial per GPU at a time (`sweep --gpus`); `None`: the
    /// devices the plan names.
    fn devices(&self) -> Option<Devices> {
        None
    }

    /// How its trials run, as the series' `protocol` says.
    fn protocol(&self, plan: &SweepPlan) -> String;
}

/// [`Runner::run_many`]'s default: `runner.parallelism()` threads (one when `None`) take the
/// cells in order, each through `runner.run`; their results come back over a channel to `done`,
/// on the calling thread.
pub(crate) fn in_threads<R: Runner + ?Sized>(
    runner: &R,
    cells: &[&Cell],
    progress: &dyn Progress,
    done: &mut dyn FnMut(usize, Result<Ran>, f64) -> bool,
) {
    let workers = runner.parallelism().unwrap_or(1).min(cells.len()).max(1);
    let next = AtomicUsize::new(0);
    let cancel = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<(usize, Result<Ran>, f64)>();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let tx = tx.clone();
            let (next, cancel) = (&next, &cancel);
            scope.spawn(move || {
                loop {
                    if cancel.load(Ordering::Relaxed) || runner.stop_requested().is_some() {
                        break;
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(cell) = cells.get(i) else { break };
                    let began = Instant::now();
                    let ran = runner.run(cell, progress);
                    if tx.send((i, ran, began.elapsed().as_secs_f64())).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        for (i, ran, duration_s) in rx {
            if !done(i, ran, duration_s) {
                cancel.store(true, Ordering::Relaxed);
            }
        }
    });
}

/// A record of `cell` with no figure yet.
pub(crate) fn blank(kind: PointKind, cell: &Cell, status: TrialStatus) -> TrialRecord {
    TrialRecord {
        index: 0,
        kind,
        values: cell.values.clone(),
        load: cell.load.clone(),
        status,
        out_of_memory: false,
        peak_allocated_bytes: None,
        peak_reserved_bytes: None,
        end_allocated_bytes: None,
        end_reserved_bytes: None,
        failed_phase: None,
        error: None,
        duration_s: 0.0,
        result: None,
        prediction: None,
        gpu: None,
    }
}
