//! `sweep --predict`: every trial a prediction (`prediction::run::predict`, the worker `predict`
//! uses: the workload's own code on data-less CUDA tensors, on the CPU), held against a card's
//! capacity: it fits when its highest predicted driver's view (peak reserved + the memory outside
//! PyTorch's allocator) is at most the capacity.
//!
//! Lists, grids and loads predict their trials in parallel, each in its own process, up to the
//! cores ([`parallelism`]), and identical configurations once (a prediction is deterministic);
//! they are recorded in order, the series rewritten after each. The frontier search is a
//! bisection: each trial decides the next, so it predicts one after the other.

use anyhow::{Result, bail};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use crate::prediction::run::Outcome;
use crate::progress::{NoProgress, Progress};
use crate::schema::prediction::{
    Capacity, PhaseStatus, PredictedPhase, PredictionDoc, PredictionStatus,
};
use crate::schema::series::{
    Deciding, DecidingAllocation, FrontierRecord, PointKind, Series, SweepMode, TrialRecord,
    TrialStatus, Writer,
};
use crate::schema::target::Target;
use crate::signals::{Stop, StopRequest};
use crate::sweep::driver::{Finish, conclude, new_series, one_value};
use crate::sweep::plan::SweepPlan;
use crate::sweep::search;
use crate::sweep::vary::{Values, grid_order};
use crate::units::Bytes;
use crate::workload::plan::MeasurePlan;
use crate::workload::process::{StartError, available_memory};

/// At most this many predictions at once: each is a Python process importing torch (a few
/// hundred MB and one core).
const MAX_PARALLEL: usize = 8;

/// The memory one prediction is expected to take, to size the parallelism: a Llama-3-8B
/// prediction's worker peaked at 0.8 GB resident (measured with `/usr/bin/time -v` on torch
/// 2.15), a Llama-3-70B one at 0.81 GiB (VmHWM), rounded up for larger configs. Not the cap: each
/// worker is stopped above `process::predict_memory_cap()` (4 GiB of its own resident memory by
/// default), so a larger one fails, said, rather than take the others' memory.
const WORKER_MEMORY: u64 = 3 << 29; // 1.5 GiB

/// How many predictions run at once: the cores, at most [`MAX_PARALLEL`], and no more than the
/// available memory holds at [`WORKER_MEMORY`] each (at least one).
pub fn parallelism() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let memory = available_memory().map_or(usize::MAX, |bytes| {
        usize::try_from(bytes / WORKER_MEMORY).unwrap_or(usize::MAX)
    });
    cores.min(MAX_PARALLEL).min(memory).max(1)
}

/// Predicts one plan; shared by the threads of a list or a grid.
pub trait Predictor: Sync {
    fn predict(&self, plan: &MeasurePlan, progress: &dyn Progress) -> Result<Outcome, StartError>;
    /// A signal asked iteragpu to stop (checked before each prediction starts).
    fn stop_requested(&self) -> Option<Stop>;
}

/// The predicting worker, for a target card.
pub struct WorkerPredictor {
    target: Target,
    capacity: Capacity,
    stop: &'static StopRequest,
}

impl WorkerPredictor {
    pub fn new(target: Target, capacity: Capacity, stop: &'static StopRequest) -> WorkerPredictor {
        WorkerPredictor {
            target,
            capacity,
            stop,
        }
    }
}

impl Predictor for WorkerPredictor {
    fn predict(&self, plan: &MeasurePlan, progress: &dyn Progress) -> Result<Outcome, StartError> {
        // The simulated card: the first allocation over the capacity is a predicted
        // out-of-memory, later phases not reached.
        crate::prediction::run::predict_within(
            plan,
            &self.target,
            &self.capacity,
            self.stop,
            progress,
        )
    }

    fn stop_requested(&self) -> Option<Stop> {
        self.stop.get()
    }
}

/// A stop signal seen while the trials were planned.
#[derive(Debug, thiserror::Error)]
#[error("stopped by {} while the trials were planned", .0.name())]
struct Stopped(Stop);

/// One trial to predict: its plan, its varied values and its load's name.
struct Cell {
    plan: MeasurePlan,
    values: Map<String, Value>,
    load: Option<String>,
}

struct Sweep<'a> {
    plan: &'a SweepPlan,
    predictor: &'a dyn Predictor,
    series: Series,
    writer: Writer,
    progress: &'a dyn Progress,
    /// The capacity the predicted driver's view is held against.
    capacity: u64,
    /// A stop signal seen before every trial was predicted.
    stopped: Option<Stop>,
}

/// Predicts every trial of `plan`, writing the series through `writer` after each one.
pub fn run(
    plan: &SweepPlan,
    predictor: &dyn Predictor,
    writer: Writer,
    progress: &dyn Progress,
) -> Result<Finish> {
    let (Some((target, _)), Some(limit)) = (&plan.target, &plan.limit) else {
        bail!("internal: a predicted sweep without a target card and a capacity");
    };
    let mut series = new_series(plan);
    series.kind = PointKind::Predicted;
    series.target = Some(target.clone());
    series.protocol = match plan.mode {
        SweepMode::Frontier => "each trial predicted in a fresh CPU process on data-less CUDA tensors (no GPU); the frontier search is a bisection, so one prediction after the other".into(),
        _ => format!(
            "each trial predicted in a fresh CPU process on data-less CUDA tensors (no GPU), up to {} at a time (the cores, at most {MAX_PARALLEL}, and 1.5 GiB of available memory each, the expected peak; each worker stopped above {} of its own resident memory); identical configurations predicted once",
            parallelism(),
            Bytes(
                crate::workload::process::predict_memory_cap()
                    .unwrap_or(crate::workload::process::PREDICT_MEMORY_CAP)
            )
            .both()
        ),
    };
    let mut sweep = Sweep {
        plan,
        predictor,
        series,
        writer,
        progress,
        capacity: limit.bytes,
        stopped: None,
    };
    let driven = sweep.drive();
    conclude(driven, sweep.series, sweep.writer, sweep.stopped)
}

impl Sweep<'_> {
    /// Predicts the trials of the mode; `Ok(Some(reason))` when PyTorch is missing.
    fn drive(&mut self) -> Result<Option<String>> {
        let plan = self.plan;
        let base = &plan.base;
        let cells: Result<Vec<Cell>> = match plan.mode {
            SweepMode::List => {
                let v = &plan.vary[0];
                let Values::List(values) = &v.values else {
                    bail!("internal: a list sweep without a list")
                };
                let stop = self.predictor;
                values
                    .iter()
                    .enumerate()
                    .map(|(i, &value)| {
                        if i % 256 == 0
                            && let Some(signal) = stop.stop_requested()
                        {
                            bail!(Stopped(signal));
                        }
                        Ok(Cell {
                            plan: base.with(v.variable, value)?,
                            values: one_value(v.variable, value),
                            load: None,
                        })
                    })
                    .collect::<Result<_>>()
            }
            SweepMode::Grid => {
                let (a, b) = (&plan.vary[0], &plan.vary[1]);
                let (Values::List(outer), Values::List(inner)) = (&a.values, &b.values) else {
                    bail!("internal: a grid without two lists")
                };
                let stop = self.predictor;
                grid_order(outer, inner)
                    .into_iter()
                    .enumerate()
                    .map(|(i, (x, y))| {
                        if i % 256 == 0
                            && let Some(signal) = stop.stop_requested()
                        {
                            bail!(Stopped(signal));
                        }
                        let mut values = one_value(a.variable, x);
                        values.insert(b.variable.name().to_string(), json!(y));
                        Ok(Cell {
                            plan: base.with(a.variable, x)?.with(b.variable, y)?,
                            values,
                            load: None,
                        })
                    })
                    .collect::<Result<_>>()
            }
            SweepMode::Loads => plan
                .loads
                .iter()
                .map(|load| {
                    let mut p = base.clone();
                    let mut values = Map::new();
                    for &(variable, n) in &load.values {
                        p = p.with(variable, n)?;
                        values.insert(variable.name().to_string(), json!(n));
                    }
                    Ok(Cell {
                        plan: p,
                        values,
                        load: Some(load.name.clone()),
                    })
                })
                .collect::<Result<_>>(),
            SweepMode::Frontier => return self.frontier(),
            SweepMode::Processes | SweepMode::AllocConf => {
                bail!("internal: {} is refused with --predict", plan.mode)
            }
        };
        let cells: Vec<Cell> = match cells {
            Ok(cells) => cells,
            Err(e) => match e.downcast_ref::<Stopped>() {
                Some(Stopped(signal)) => return Ok(self.stop_while_planning(*signal)),
                None => return Err(e),
            },
        };
        self.in_parallel(&cells)
    }

    /// Predicts `cells` up to [`parallelism`] at a time and records them in order as they
    /// complete; a configuration already predicted is not predicted again.
    fn in_parallel(&mut self, cells: &[Cell]) -> Result<Option<String>> {
        // The first trial of each configuration, by a hash of its specification's text: one
        // pass, O(n) (a search per trial was O(n²): 20,000 values took 11 s to plan). A stop
        // signal is seen between trials while planning, too.
        let mut first_seen: std::collections::HashMap<String, usize> =
            std::collections::HashMap::with_capacity(cells.len());
        let mut first_of: Vec<usize> = Vec::with_capacity(cells.len());
        for (i, c) in cells.iter().enumerate() {
            if i % 256 == 0
                && let Some(signal) = self.predictor.stop_requested()
            {
                return Ok(self.stop_while_planning(signal));
            }
            let key = serde_json::to_string(&c.plan.trial().spec.to_map())?;
            first_of.push(*first_seen.entry(key).or_insert(i));
        }
        let unique: Vec<usize> = (0..cells.len()).filter(|&i| first_of[i] == i).collect();
        let workers = parallelism().min(unique.len()).max(1);
        // The workers' own output (transformers' warnings) goes above the progress line, never
        // into it.
        let shown: std::sync::Arc<dyn Progress> = self
            .progress
            .forwarder()
            .unwrap_or_else(|| std::sync::Arc::new(NoProgress));
        self.progress.set_length(cells.len() as u64);
        self.progress.set_message(&format!(
            "predicting {} trial(s), {workers} at a time",
            unique.len()
        ));
        let next = AtomicUsize::new(0);
        let cancel = AtomicBool::new(false);
        let predictor = self.predictor;
        let (tx, rx) = mpsc::channel::<(usize, Result<Outcome, StartError>, f64)>();
        let mut outcome: Result<Option<String>> = Ok(None);
        std::thread::scope(|scope| {
            for _ in 0..workers {
                let tx = tx.clone();
                let (next, cancel, unique, shown) = (&next, &cancel, &unique, &shown);
                scope.spawn(move || {
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        if k >= unique.len()
                            || cancel.load(Ordering::Relaxed)
                            || predictor.stop_requested().is_some()
                        {
                            break;
                        }
                        let i = unique[k];
                        let began = Instant::now();
                        let predicted = predictor.predict(&cells[i].plan, &**shown);
                        if tx
                            .send((i, predicted, began.elapsed().as_secs_f64()))
                            .is_err()
                        {
                            break;
                        }
                    }
                });
            }
            drop(tx);
            let mut arrived: BTreeMap<usize, (Result<Outcome, StartError>, f64)> = BTreeMap::new();
            let mut recorded = 0;
            for (i, predicted, duration_s) in rx {
                if outcome.is_err() || matches!(outcome, Ok(Some(_))) {
                    continue;
                }
                arrived.insert(i, (predicted, duration_s));
                // Record every trial whose turn has come: its own prediction, or the one of the
                // identical configuration before it.
                while recorded < cells.len() {
                    let j = recorded;
                    let step = if first_of[j] == j {
                        let Some((predicted, duration_s)) = arrived.remove(&j) else {
                            break;
                        };
                        self.record(&cells[j], predicted, duration_s)
                    } else {
                        self.reuse(&cells[j], first_of[j])
                    };
                    recorded += 1;
                    match step {
                        Ok(None) => {}
                        Ok(Some(reason)) => {
                            outcome = Ok(Some(reason));
                            cancel.store(true, Ordering::Relaxed);
                            break;
                        }
                        Err(e) => {
                            outcome = Err(e);
                            cancel.store(true, Ordering::Relaxed);
                            break;
                        }
                    }
                }
            }
        });
        if outcome.is_ok()
            && self.series.trials.len() < cells.len()
            && let Some(signal) = self.predictor.stop_requested()
        {
            self.stopped = Some(signal);
            self.series.notes.push(format!(
                "stopped by {} before trial {}",
                signal.name(),
                self.series.trials.len() + 1
            ));
        }
        outcome
    }

    /// A stop signal seen while the trials were planned: nothing was predicted, said in a note.
    fn stop_while_planning(&mut self, signal: Stop) -> Option<String> {
        self.stopped = Some(signal);
        self.series.notes.push(format!(
            "stopped by {} while the trials were planned: nothing was predicted",
            signal.name()
        ));
        None
    }

    /// The bisection over the range, one prediction after the other, guided by the predicted
    /// peaks (their curve reaches the capacity less the memory outside the allocator).
    fn frontier(&mut self) -> Result<Option<String>> {
        let plan = self.plan;
        let Some((variable, bounds)) = plan.bounds() else {
            bail!("internal: a frontier without a range")
        };
        let outside = plan.target.as_ref().map_or(0, |(t, _)| t.context_bytes);
        let for_peaks = self.capacity.saturating_sub(outside);
        // A search stops when it has closed the frontier: its trial count is not known ahead,
        // only its bound (the guided bisection costs at most twice a bisection's steps), so the
        // display says "trial k" and that bound, never "of N" as if N were planned.
        let steps = (bounds.hi.saturating_sub(bounds.lo) / bounds.resolution.max(1))
            .max(1)
            .ilog2() as usize
            + 1;
        let at_most = (2 * steps + 2).min(bounds.max_trials);
        let mut stop: Option<Result<Option<String>>> = None;
        let found = search::find_guided(bounds, None, Some(for_peaks), |value| {
            let no = search::Probe {
                ok: false,
                peak: None,
            };
            if stop.is_some() {
                return no;
            }
            if let Some(signal) = self.predictor.stop_requested() {
                self.stopped = Some(signal);
                self.series.notes.push(format!(
                    "stopped by {} before trial {}",
                    signal.name(),
                    self.series.trials.len() + 1
                ));
                stop = Some(Ok(None));
                return no;
            }
            let step = plan.base.with(variable, value).and_then(|p| {
                let cell = Cell {
                    plan: p,
                    values: one_value(variable, value),
                    load: None,
                };
                let began = Instant::now();
                self.progress.set_message(&format!(
                    "predicting {variable}={value} (a bisection: at most {at_most} trials)"
                ));
                let predicted = self.predictor.predict(&cell.plan, self.progress);
                self.record(&cell, predicted, began.elapsed().as_secs_f64())
            });
            match step {
                Ok(Some(reason)) => {
                    stop = Some(Ok(Some(reason)));
                    return no;
                }
                Err(e) => {
                    stop = Some(Err(e));
                    return no;
                }
                Ok(None) => {}
            }
            let Some(last) = self.series.trials.last() else {
                return no;
            };
            let ok = last.status.is_ok();
            // Only a prediction that says "does not fit" places the frontier: a gap or a failure
            // stops the search, with the trial saying why.
            if !ok && !last.out_of_memory {
                stop = Some(Ok(None));
            }
            search::Probe {
                ok,
                peak: if ok { last.peak_reserved_bytes } else { None },
            }
        });
        if let Some(s) = stop {
            let s = s?;
            if s.is_some() {
                return Ok(s);
            }
            if self.stopped.is_none() {
                self.series.notes.push("the search stopped early: a prediction was unpredictable, failed or was stopped (its trial says why); the frontier is where the search stood".into());
            }
        }
        // The bounds from the trials themselves: once the search stopped, its later probes were
        // not predictions and place nothing.
        let value_of = |t: &TrialRecord| t.values.get(variable.name()).and_then(Value::as_u64);
        let first_failure = self
            .series
            .trials
            .iter()
            .filter(|t| t.out_of_memory)
            .filter_map(value_of)
            .min();
        let last_success = self
            .series
            .trials
            .iter()
            .filter(|t| t.status.is_ok())
            .filter_map(value_of)
            .filter(|v| first_failure.is_none_or(|f| *v < f))
            .max();
        let deciding = first_failure.and_then(|v| {
            let t = self.series.trials.iter().find(|t| {
                t.out_of_memory && t.values.get(variable.name()).and_then(Value::as_u64) == Some(v)
            })?;
            deciding(t.prediction.as_deref()?, v, self.capacity)
        });
        self.series.frontier = Some(FrontierRecord {
            variable,
            last_success,
            first_failure,
            resolution: bounds.resolution,
            trials: self.series.trials.len(),
            strategy: "predicted-peak curve: bisection guided by the predicted peaks".into(),
            hint: None,
            predictions: self.series.trials.len(),
            budget_exhausted: found.budget_exhausted,
            deciding,
        });
        Ok(None)
    }

    /// Records the trial of `cell` from its prediction; `Ok(Some(reason))` when PyTorch (or what
    /// the prediction needs) is missing at the first trial: nothing is written then.
    fn record(
        &mut self,
        cell: &Cell,
        predicted: Result<Outcome, StartError>,
        duration_s: f64,
    ) -> Result<Option<String>> {
        let index = self.series.trials.len();
        let mut record = match predicted? {
            Outcome::Unavailable(reason) => {
                if self.series.trials.is_empty() {
                    return Ok(Some(reason));
                }
                let mut t = blank(index, cell, TrialStatus::Unavailable);
                t.error = Some(reason);
                t
            }
            Outcome::Predicted(doc) => summarize(index, cell, doc, self.capacity),
        };
        record.duration_s = duration_s;
        if index == 0 {
            self.series.base = base_of(&cell.plan, &cell.values, &self.plan.script_args_template);
        }
        self.push(record)?;
        Ok(None)
    }

    /// Records `cell` with the prediction of the identical trial `first` (predicted once).
    fn reuse(&mut self, cell: &Cell, first: usize) -> Result<Option<String>> {
        let Some(earlier) = self.series.trials.get(first) else {
            bail!("internal: trial {} reuses a trial not recorded", first + 1)
        };
        let mut t = earlier.clone();
        t.index = self.series.trials.len();
        t.values = cell.values.clone();
        t.load = cell.load.clone();
        t.duration_s = 0.0;
        let note = format!(
            "trial {} is the configuration of trial {}: its prediction is reused (a prediction is deterministic)",
            t.index + 1,
            first + 1
        );
        self.series.notes.push(note);
        self.push(t)?;
        Ok(None)
    }

    fn push(&mut self, record: TrialRecord) -> Result<()> {
        let label = record
            .values
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .chain(record.load.clone())
            .collect::<Vec<_>>()
            .join(" ");
        self.progress.println(&format!(
            "trial {:>3} {label:<28} {:<22} predicted peak reserved {}",
            record.index + 1,
            crate::sweep::render::status_label(&record),
            record
                .peak_reserved_bytes
                .map_or("null".into(), |b| format!("{:.3} GiB", Bytes(b).gib()))
        ));
        self.series.trials.push(record);
        self.series.updated_at = chrono::Utc::now().to_rfc3339();
        self.writer.save(&self.series)?;
        self.progress.inc();
        Ok(())
    }
}

/// The worker specification every trial shares: the first trial's, its varied keys removed.
fn base_of(
    plan: &MeasurePlan,
    values: &Map<String, Value>,
    template: &[String],
) -> Map<String, Value> {
    let mut spec = plan.trial().spec.to_map();
    for k in values.keys() {
        spec.remove(&k.replace('-', "_"));
    }
    plan.record_given_lengths(&mut spec, values);
    if spec.remove("script_args").is_some() {
        spec.insert("script_args_template".into(), json!(template));
    }
    spec
}

fn blank(index: usize, cell: &Cell, status: TrialStatus) -> TrialRecord {
    TrialRecord {
        index,
        kind: PointKind::Predicted,
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
    }
}

/// A predicted trial: fits (`ok`), predicted not to fit (`failed`, `out_of_memory`, the phase
/// that decides), a gap (`unpredictable`: no figure, the reason), or the prediction's own failure
/// or stop.
fn summarize(index: usize, cell: &Cell, doc: Box<PredictionDoc>, capacity: u64) -> TrialRecord {
    let predicted: Vec<&PredictedPhase> = doc
        .phases
        .iter()
        .filter(|p| p.status == PhaseStatus::Predicted)
        .collect();
    let over = first_over(&doc, capacity);
    if let Some(oom) = &doc.out_of_memory {
        // The simulated card's out-of-memory: the allocation that did not fit decides; the
        // figures are the whole run's need (the same events replayed without the capacity).
        let mut t = blank(index, cell, TrialStatus::Failed);
        t.out_of_memory = true;
        t.failed_phase = oom.phase.clone();
        t.peak_reserved_bytes = oom.unlimited_peak_reserved_bytes;
        t.error = Some(format!(
            "predicted not to fit: out of memory in {} at an allocation of {} ({}{}{}); the whole run needs {} (driver's view) against {}",
            oom.phase.as_deref().unwrap_or("no phase"),
            Bytes(oom.requested_bytes).both(),
            oom.category,
            oom.module
                .as_deref()
                .map_or(String::new(), |m| format!(", {m}")),
            match (&oom.file, oom.line) {
                (Some(f), Some(l)) => format!(", {f}:{l}"),
                _ => String::new(),
            },
            oom.unlimited_driver_view_bytes
                .map_or("an unknown amount".into(), |b| Bytes(b).both()),
            Bytes(capacity).both()
        ));
        t.prediction = Some(doc);
        return t;
    }
    let status = match (doc.status, &over) {
        (PredictionStatus::Timeout, _) => TrialStatus::Timeout,
        (PredictionStatus::Interrupted, _) => TrialStatus::Interrupted,
        (PredictionStatus::Terminated, _) => TrialStatus::Terminated,
        // An out-of-memory without its record (not written by this CLI): it does not fit.
        (PredictionStatus::OutOfMemory, _) => TrialStatus::Failed,
        // A phase over the capacity decides, whatever came after it.
        (_, Some(_)) => TrialStatus::Failed,
        (PredictionStatus::Failed, None) => TrialStatus::Failed,
        (PredictionStatus::Partial, None) => TrialStatus::Unpredictable,
        (PredictionStatus::Complete, None) => TrialStatus::Ok,
    };
    let mut t = blank(index, cell, status);
    if status == TrialStatus::Unpredictable {
        // A gap: no figure at all, the reason instead.
        t.error = Some(unpredictable_reason(&doc));
        t.prediction = Some(doc);
        return t;
    }
    t.peak_allocated_bytes = predicted
        .iter()
        .filter_map(|p| p.peak_allocated_bytes)
        .max();
    t.peak_reserved_bytes = doc.max_peak_reserved();
    let last = predicted.last();
    t.end_allocated_bytes = last.and_then(|p| p.end_allocated_bytes);
    t.end_reserved_bytes = last.and_then(|p| p.end_reserved_bytes);
    match over {
        Some(p) => {
            t.out_of_memory = true;
            t.failed_phase = Some(p.name.clone());
            t.error = Some(format!(
                "predicted not to fit: {} needs {} (driver's view) > {} (capacity)",
                p.name,
                Bytes(p.driver_view_bytes.unwrap_or(0)).both(),
                Bytes(capacity).both()
            ));
        }
        None if status != TrialStatus::Ok => {
            t.failed_phase = doc
                .phases
                .iter()
                .find(|p| p.status == PhaseStatus::Failed)
                .map(|p| p.name.clone());
            t.error = Some(
                doc.failure
                    .clone()
                    .unwrap_or_else(|| format!("the prediction ended {}", doc.status)),
            );
        }
        None => {}
    }
    t.prediction = Some(doc);
    t
}

/// Why a partial prediction cannot say whether it fits: its unpredictable phases and their ops.
fn unpredictable_reason(doc: &PredictionDoc) -> String {
    let phases: Vec<String> = doc
        .phases
        .iter()
        .filter(|p| p.status != PhaseStatus::Predicted)
        .map(|p| match p.unpredictable.first() {
            Some(u) => format!("{} ({}: {})", p.name, u.op, u.reason),
            None => format!("{} ({})", p.name, p.status),
        })
        .collect();
    if phases.is_empty() {
        "unpredictable: the prediction recorded no phase".into()
    } else {
        format!(
            "unpredictable: {} cannot be predicted, and no predicted phase exceeds the capacity",
            phases.join(", ")
        )
    }
}

/// The phase that decides: the first predicted phase (in the order they started) whose driver's
/// view exceeds `capacity`, and within it the innermost phase that does too.
fn first_over(doc: &PredictionDoc, capacity: u64) -> Option<&PredictedPhase> {
    let over = |p: &&PredictedPhase| {
        p.status == PhaseStatus::Predicted && p.driver_view_bytes.is_some_and(|b| b > capacity)
    };
    let mut chosen = doc.phases.iter().find(over)?;
    while let Some(inner) = doc
        .phases
        .iter()
        .filter(|p| p.parent == Some(chosen.index))
        .find(over)
    {
        chosen = inner;
    }
    Some(chosen)
}

/// What decides at `value`, the first value predicted not to fit: the simulated card's
/// out-of-memory (its phase and allocation), else the first phase over the capacity.
fn deciding(doc: &PredictionDoc, value: u64, capacity: u64) -> Option<Deciding> {
    if let Some(oom) = &doc.out_of_memory {
        return Some(Deciding {
            value,
            phase: oom.phase.clone().unwrap_or_default(),
            driver_view_bytes: oom.unlimited_driver_view_bytes,
            capacity_bytes: capacity,
            allocation: Some(DecidingAllocation {
                bytes: oom.requested_bytes,
                shape: oom.shape.clone(),
                dtype: oom.dtype.clone(),
                category: oom.category.to_string(),
                module: oom.module.clone(),
                file: oom.file.clone(),
                line: oom.line,
            }),
            largest_at_peak: None,
        });
    }
    let p = first_over(doc, capacity)?;
    Some(Deciding {
        value,
        phase: p.name.clone(),
        driver_view_bytes: p.driver_view_bytes,
        capacity_bytes: capacity,
        allocation: None,
        largest_at_peak: p
            .at_peak
            .as_ref()
            .and_then(|a| a.top_tensors.first().cloned()),
    })
}

/// The predicted sweep with a mock predictor: no process, documents made from a committed
/// prediction with the peaks each test asks for.
#[cfg(test)]
mod tests {

    use super::*;
    use crate::commands::sweep::plan_of;
    use crate::schema::spec::{WorkerSpec, WorkloadSpec};
    use crate::schema::trace::Unpredictable;
    use std::sync::Mutex;

    #[test]
    fn the_available_memory_bounds_the_parallel_predictions() {
        use crate::workload::process::parse_mem_available;
        let meminfo =
            "MemTotal:       24576000 kB\nMemFree:  100 kB\nMemAvailable:    3145728 kB\n";
        assert_eq!(parse_mem_available(meminfo), Some(3 << 30));
        assert_eq!(parse_mem_available("MemTotal: 1 kB\n"), None);
        assert_eq!(parse_mem_available("MemAvailable: lots kB\n"), None);
        // 3 GiB available holds two 1.5 GiB workers; the bound never goes below one.
        assert_eq!((3u64 << 30) / WORKER_MEMORY, 2);
        assert!(parallelism() >= 1);
    }

    /// What the mock answers for one worker spec.
    enum Mock {
        /// Every phase predicted, this peak reserved (the driver's view adds the context).
        Peak(u64),
        /// The `cold_forward` phase is unpredictable.
        Gap,
        Unavailable,
    }

    struct MockPredictor<F: Fn(&WorkerSpec) -> Mock + Sync> {
        decide: F,
        specs: Mutex<Vec<WorkerSpec>>,
    }

    impl<F: Fn(&WorkerSpec) -> Mock + Sync> MockPredictor<F> {
        fn new(decide: F) -> Self {
            MockPredictor {
                decide,
                specs: Mutex::new(Vec::new()),
            }
        }
    }

    fn fixture() -> PredictionDoc {
        serde_json::from_slice(&std::fs::read("tests/fixtures/fiche/prediction.json").unwrap())
            .unwrap()
    }

    impl<F: Fn(&WorkerSpec) -> Mock + Sync> Predictor for MockPredictor<F> {
        fn predict(&self, plan: &MeasurePlan, _: &dyn Progress) -> Result<Outcome, StartError> {
            let spec = plan.worker_spec();
            self.specs.lock().unwrap().push(spec.clone());
            let mut doc = fixture();
            match (self.decide)(&spec) {
                Mock::Peak(peak) => {
                    for p in &mut doc.phases {
                        p.peak_reserved_bytes = Some(peak);
                        p.driver_view_bytes = Some(peak + doc.target.context_bytes);
                    }
                }
                Mock::Gap => {
                    doc.status = PredictionStatus::Partial;
                    let p = &mut doc.phases[2];
                    p.status = PhaseStatus::Unpredictable;
                    p.peak_reserved_bytes = None;
                    p.unpredictable.push(Unpredictable {
                        op: "aten::nonzero".into(),
                        file: None,
                        line: None,
                        reason: "its output's size depends on data".into(),
                    });
                }
                Mock::Unavailable => return Ok(Outcome::Unavailable("no torch here".into())),
            }
            Ok(Outcome::Predicted(Box::new(doc)))
        }

        fn stop_requested(&self) -> Option<Stop> {
            None
        }
    }

    fn dense(spec: &WorkerSpec) -> &crate::schema::spec::DenseSpec {
        match &spec.workload {
            WorkloadSpec::Dense(d) => d,
            other => panic!("not dense: {other:?}"),
        }
    }

    const CONTEXT: u64 = 641_728_512;

    fn sweep<F: Fn(&WorkerSpec) -> Mock + Sync>(
        args: &[&str],
        mock: &MockPredictor<F>,
    ) -> (tempfile::TempDir, std::path::PathBuf, Result<Finish>) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("series.json");
        let mut argv = vec!["--predict"];
        argv.extend(args);
        argv.extend(["--output", out.to_str().unwrap()]);
        let plan = plan_of(&argv).unwrap();
        let finish = run(&plan, mock, Writer::new(&out).unwrap(), &NoProgress);
        (dir, out, finish)
    }

    fn done(finish: Result<Finish>) -> Box<Series> {
        match finish.unwrap() {
            Finish::Done { series, .. } => series,
            Finish::Unavailable(r) => panic!("unavailable: {r}"),
        }
    }

    /// docs/predict.md's requests frontier: the trials cycle `--prompt-lengths 256,500` over their
    /// own count, and the series' base records the list as given, not the first trial's `[256]`.
    #[test]
    fn a_requests_frontier_records_the_lengths_as_given() {
        let requests = |s: &WorkerSpec| match &s.workload {
            WorkloadSpec::CausalLm(c) => c.requests.as_ref().map_or(0, |r| r.requests),
            _ => panic!("causal-lm expected"),
        };
        let mock = MockPredictor::new(|s| Mock::Peak(40_000_000 * requests(s)));
        let (_d, _out, finish) = sweep(
            &[
                "--workload",
                "causal-lm",
                "--model",
                "tests/fixtures/tiny/llama",
                "--prompt-lengths",
                "256,500",
                "--output-lengths",
                "8",
                "--vary",
                "requests=1..16",
                "--search",
                "frontier",
                "--memory-limit",
                "684720128",
            ],
            &mock,
        );
        let series = done(finish);
        assert_eq!(
            series.base["prompt_lengths"],
            json!([256, 500]),
            "{:?}",
            series.base
        );
        assert_eq!(series.base["output_lengths"], json!([8]));
        assert!(!series.base.contains_key("requests"));
        // The trials themselves cycle the list over their own count.
        let specs = mock.specs.lock().unwrap();
        assert!(
            specs.iter().any(|s| requests(s) > 1),
            "{} trials",
            specs.len()
        );
        for spec in specs.iter() {
            let WorkloadSpec::CausalLm(c) = &spec.workload else {
                unreachable!()
            };
            let cycled: Vec<u64> = (0..requests(spec))
                .map(|i| [256, 500][i as usize % 2])
                .collect();
            assert_eq!(c.requests.as_ref().unwrap().prompt_lengths, cycled);
        }
    }

    /// A grid past the bound is refused before a cell is planned (a 1000 × 1000 grid took 4.5 GB
    /// and ignored signals), naming the count, the bound and the fix.
    #[test]
    fn a_grid_past_the_bound_is_refused_before_planning() {
        let values = (1..=1000)
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let (batch, context) = (format!("batch={values}"), format!("context={values}"));
        let argv = [
            "--predict",
            "--card",
            "L4",
            "--output",
            "x.json",
            "--vary",
            &batch,
            "--vary",
            &context,
        ];
        let err = plan_of(&argv).unwrap_err().to_string();
        assert!(err.contains("1,000,000 trials"), "{err}");
        assert!(err.contains("above the 100,000"), "{err}");
        assert!(err.contains("--search frontier"), "{err}");
    }

    /// A display that keeps what it was told.
    #[derive(Default)]
    struct Recorded {
        lengths: Mutex<Vec<u64>>,
        messages: Mutex<Vec<String>>,
    }

    impl Progress for Recorded {
        fn set_length(&self, steps: u64) {
            self.lengths.lock().unwrap().push(steps);
        }
        fn set_message(&self, text: &str) {
            self.messages.lock().unwrap().push(text.to_string());
        }
    }

    /// A search's trial count is not planned: the display never says "trial 1 of 24" for a
    /// search that runs a few; it says the bisection's bound.
    #[test]
    fn a_frontier_says_its_bound_not_a_planned_count() {
        let mock = MockPredictor::new(|s| Mock::Peak(10_000_000 * dense(s).context));
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("series.json");
        let argv = [
            "--predict",
            "--vary",
            "context=1..1000",
            "--search",
            "frontier",
            "--memory-limit",
            "2000000000",
            "--output",
            out.to_str().unwrap(),
        ];
        let plan = plan_of(&argv).unwrap();
        let shown = Recorded::default();
        let series = done(run(&plan, &mock, Writer::new(&out).unwrap(), &shown));
        assert_eq!(*shown.lengths.lock().unwrap(), Vec::<u64>::new());
        let messages = shown.messages.lock().unwrap();
        assert!(!messages.is_empty());
        // 1..1000 at resolution 1: 10 halvings, at most twice that (guided) and two more.
        assert!(
            messages.iter().all(|m| m.contains("at most 22 trials")),
            "{messages:?}"
        );
        assert!(series.trials.len() <= 22);
    }

    /// A predicted series' fit table says what it withholds in a prediction's words: the values
    /// were predicted, not measured.
    #[test]
    fn a_predicted_fit_is_worded_for_predictions() {
        let mock = MockPredictor::new(|s| Mock::Peak(100_000_000 * dense(s).batch));
        let (_d, out, finish) = sweep(&["--vary", "batch=1,2,3", "--card", "L4"], &mock);
        let series = done(finish);
        let fit = series.fit.as_ref().expect("a fit over three points");
        let withheld: Vec<&str> = fit
            .cards
            .iter()
            .filter_map(|c| c.withheld.as_deref())
            .collect();
        assert!(!withheld.is_empty());
        for w in withheld {
            assert!(w.contains("largest value predicted (3)"), "{w}");
            assert!(!w.contains("measure"), "{w}");
        }
        let table = crate::sweep::render::table(&series, &out);
        assert!(!table.contains("= none"), "{table}");
        assert!(table.contains("batch not placed by the fit"), "{table}");
    }

    /// A dimension is fixed or varied, never both: the fixed flag and the --vary are named.
    #[test]
    fn a_dimension_fixed_and_varied_is_refused() {
        for (args, says) in [
            (
                vec![
                    "--workload",
                    "causal-lm",
                    "--model",
                    "tests/fixtures/tiny/llama",
                    "--requests",
                    "2",
                    "--vary",
                    "requests=1,2",
                ],
                "--requests is fixed and --vary requests=1,2 varies it: each trial would take the varied value; drop --requests or the --vary",
            ),
            (
                vec![
                    "--batch",
                    "2",
                    "--vary",
                    "batch=1..8",
                    "--search",
                    "frontier",
                ],
                "--batch is fixed and --vary batch=1..8 varies it",
            ),
        ] {
            let mut argv = vec!["--predict", "--card", "L4", "--output", "x.json"];
            argv.extend(args);
            let err = plan_of(&argv).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        }
    }

    #[test]
    fn a_predicted_frontier_ends_at_the_capacity_with_the_deciding_phase() {
        // Peak reserved 10 MB per context unit; 2 GB of capacity less the context fits 135 units.
        let mock = MockPredictor::new(|s| Mock::Peak(10_000_000 * dense(s).context));
        let (_d, out, finish) = sweep(
            &[
                "--vary",
                "context=1..1000",
                "--search",
                "frontier",
                "--memory-limit",
                "2000000000",
            ],
            &mock,
        );
        let series = done(finish);
        let fits = (2_000_000_000 - CONTEXT) / 10_000_000;
        let f = series.frontier.as_ref().unwrap();
        assert_eq!(
            (f.last_success, f.first_failure),
            (Some(fits), Some(fits + 1))
        );
        let d = f.deciding.as_ref().expect("what decides");
        assert_eq!(d.value, fits + 1);
        assert_eq!(d.phase, "model_load", "the first phase over the capacity");
        assert_eq!(d.driver_view_bytes, Some(10_000_000 * (fits + 1) + CONTEXT));
        assert_eq!(d.capacity_bytes, 2_000_000_000);
        assert!(d.largest_at_peak.is_some());
        assert_eq!(series.kind, PointKind::Predicted);
        assert!(series.trials.iter().all(|t| t.kind == PointKind::Predicted));
        assert!(
            series.trials.iter().all(|t| t.result.is_none()),
            "never a measurement"
        );
        assert!(series.trials.iter().all(|t| t.prediction.is_some()));
        let no = series.trials.iter().find(|t| t.out_of_memory).unwrap();
        assert_eq!(no.status, TrialStatus::Failed);
        assert!(no.error.as_ref().unwrap().contains("predicted not to fit"));
        assert!(!series.limit.as_ref().unwrap().emulated);
        assert!(series.protocol.contains("one prediction after the other"));
        assert!(
            f.trials <= 12,
            "the predicted peaks guide the search: {}",
            f.trials
        );
        assert!(!crate::sweep::driver::failed(&series));
        let on_disk: Series = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        assert_eq!(on_disk.kind, PointKind::Predicted);
        let table = crate::sweep::render::table(&series, &out);
        assert!(table.contains("PREDICTED for H200"), "{table}");
        assert!(
            table.contains(&format!(
                "largest predicted to fit {fits}, first predicted not to fit {}",
                fits + 1
            )),
            "{table}"
        );
        assert!(table.contains("in model_load"), "{table}");
    }

    #[test]
    fn a_list_and_a_grid_are_recorded_in_order_and_identical_trials_predicted_once() {
        let mock = MockPredictor::new(|s| Mock::Peak(1_000_000 * dense(s).batch));
        let (_d, _out, finish) = sweep(&["--vary", "batch=1,2,4,8", "--card", "L4"], &mock);
        let series = done(finish);
        let batches: Vec<u64> = series
            .trials
            .iter()
            .map(|t| t.values["batch"].as_u64().unwrap())
            .collect();
        assert_eq!(
            batches,
            [1, 2, 4, 8],
            "recorded in order, whatever order they ended in"
        );
        assert_eq!(mock.specs.lock().unwrap().len(), 4);
        assert!(series.trials.iter().all(|t| t.status == TrialStatus::Ok));
        assert_eq!(series.trials[3].peak_reserved_bytes, Some(8_000_000));
        assert!(
            series
                .fit
                .as_ref()
                .unwrap()
                .overhead_source
                .contains("predicted card")
        );
        assert_eq!(
            series.limit.as_ref().unwrap().bytes,
            crate::cards::find("L4").unwrap().device_capacity().0.get()
        );
        assert!(!series.base.contains_key("batch"));

        let mock = MockPredictor::new(|_| Mock::Peak(1 << 20));
        let (_d, _out, finish) = sweep(
            &[
                "--vary",
                "batch=1,2",
                "--vary",
                "context=8,16",
                "--card",
                "L4",
            ],
            &mock,
        );
        let series = done(finish);
        let cells: Vec<(u64, u64)> = series
            .trials
            .iter()
            .map(|t| {
                (
                    t.values["batch"].as_u64().unwrap(),
                    t.values["context"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(cells, [(1, 8), (1, 16), (2, 16), (2, 8)]);
        assert_eq!(series.mode, SweepMode::Grid);

        // Two loads of one configuration: predicted once, the second says it reuses the first.
        let dir = tempfile::tempdir().unwrap();
        let loads = dir.path().join("loads.json");
        std::fs::write(
            &loads,
            r#"{"loads": [{"name": "a", "batch": 2}, {"name": "b", "batch": 2}, {"name": "c", "batch": 4}]}"#,
        )
        .unwrap();
        let mock = MockPredictor::new(|s| Mock::Peak(1_000_000 * dense(s).batch));
        let (_d, _out, finish) =
            sweep(&["--loads", loads.to_str().unwrap(), "--card", "L4"], &mock);
        let series = done(finish);
        assert_eq!(
            mock.specs.lock().unwrap().len(),
            2,
            "batch 2 predicted once"
        );
        assert_eq!(series.trials.len(), 3);
        assert_eq!(series.trials[1].load.as_deref(), Some("b"));
        assert_eq!(series.trials[1].peak_reserved_bytes, Some(2_000_000));
        assert!(series.notes.iter().any(|n| n.contains("reused")));
    }

    #[test]
    fn an_unpredictable_trial_is_a_gap_with_its_reason_never_a_zero() {
        let mock = MockPredictor::new(|s| match dense(s).batch {
            2 => Mock::Gap,
            b => Mock::Peak(1_000_000 * b),
        });
        let (_d, out, finish) = sweep(&["--vary", "batch=1,2,4", "--card", "L4"], &mock);
        let series = done(finish);
        let gap = &series.trials[1];
        assert_eq!(gap.status, TrialStatus::Unpredictable);
        assert_eq!(gap.peak_reserved_bytes, None);
        assert_eq!(gap.peak_allocated_bytes, None);
        assert!(
            gap.error.as_ref().unwrap().contains("aten::nonzero"),
            "{:?}",
            gap.error
        );
        assert!(!gap.is_broken(), "a gap is said, not a failure");
        assert_eq!(series.trials[2].status, TrialStatus::Ok, "the list goes on");
        let table = crate::sweep::render::table(&series, &out);
        assert!(table.contains("unpredictable: cold_forward"), "{table}");

        // The frontier search cannot place a bound past a gap: it stops and says so.
        let mock = MockPredictor::new(|s| match dense(s).context {
            c if c > 100 => Mock::Gap,
            c => Mock::Peak(1_000_000 * c),
        });
        let (_d, _out, finish) = sweep(
            &[
                "--vary",
                "context=1..1000",
                "--search",
                "frontier",
                "--card",
                "L4",
            ],
            &mock,
        );
        let series = done(finish);
        assert_eq!(
            series.trials.last().unwrap().status,
            TrialStatus::Unpredictable
        );
        assert!(series.notes.iter().any(|n| n.contains("stopped early")));
        assert_eq!(series.frontier.as_ref().unwrap().first_failure, None);
    }

    #[test]
    fn missing_pytorch_at_the_first_prediction_writes_nothing() {
        let mock = MockPredictor::new(|_| Mock::Unavailable);
        let (_d, out, finish) = sweep(&["--vary", "batch=1,2", "--card", "L4"], &mock);
        assert!(matches!(finish.unwrap(), Finish::Unavailable(r) if r.contains("no torch")));
        assert!(!out.exists());
    }

    #[test]
    fn predict_refuses_what_it_cannot_do_with_the_fix() {
        let refused = |args: &[&str]| {
            let mut argv = vec!["--predict", "--output", "/tmp/never-written.json"];
            argv.extend(args);
            plan_of(&argv).unwrap_err().to_string()
        };
        let e = refused(&["--vary", "batch=1,2"]);
        assert!(
            e.contains("--card NAME") && e.contains("--memory-limit BYTES"),
            "{e}"
        );
        let e = refused(&["--processes", "3", "--card", "L4"]);
        assert!(e.contains("deterministic"), "{e}");
        let e = refused(&[
            "--vary",
            "alloc_conf=default,expandable_segments",
            "--card",
            "L4",
        ]);
        assert!(e.contains("--alloc-conf SETTING"), "{e}");
        let e = refused(&[
            "--vary",
            "batch=1..8",
            "--search",
            "frontier",
            "--card",
            "L4",
            "--no-prediction",
        ]);
        assert!(e.contains("drop --no-prediction"), "{e}");
        let e = refused(&[
            "--vary",
            "batch=1,2",
            "--card",
            "L4",
            "--device",
            "cuda:0,cuda:1",
        ]);
        assert!(e.contains("one device"), "{e}");
    }
}
