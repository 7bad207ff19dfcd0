//! Runs a sweep plan through a [`Runner`]: its cells one after the other (each recorded, and
//! the series rewritten, before the next starts) or in parallel (recorded in order as they end);
//! the stop rules (a crash, a timeout or an interruption is not an out-of-memory; a signal ends
//! the sweep between trials), the identical-conditions check, the frontier search with its
//! optional predicted hint, and the fit. Pure orchestration: with mock runners it is unit-tested
//! without Python.

use anyhow::{Result, bail};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use crate::cards;
use crate::progress::{NoProgress, Progress};
use crate::schema::dimensions::Variable;
use crate::schema::fit;
use crate::schema::series::{
    CardFrontier, FitRecord, FrontierRecord, PointKind, Series, SeriesStatus, SweepMode,
    TrialRecord, TrialStatus, Writer,
};
use crate::signals::Stop;
use crate::sweep::plan::{Cell, Cells, SweepPlan};
use crate::sweep::runner::predicted::deciding;
use crate::sweep::runner::{Ran, Runner, blank};
use crate::sweep::search::{self, Bounds, Probe};
use crate::units::Bytes;

/// How a sweep ended.
pub enum Finish {
    /// The series as written (complete, interrupted or terminated), and, when the requested path
    /// could not be written, why and where the series is instead.
    Done {
        series: Box<Series>,
        moved: Option<(crate::output::OutputError, std::path::PathBuf)>,
    },
    /// PyTorch or a GPU is missing: the first trial measured (or predicted) nothing, no file was
    /// written.
    Unavailable(String),
}

/// What a trial told the driver.
enum Step {
    Done,
    Unavailable(String),
    Stop,
}

struct Sweep<'a> {
    plan: &'a SweepPlan,
    runner: &'a dyn Runner,
    series: Series,
    writer: Writer,
    progress: &'a dyn Progress,
    base_spec: Option<Map<String, Value>>,
    /// A stop signal seen before a trial started.
    stopped_between: Option<Stop>,
}

/// Runs every trial of `plan` through `runner`, writing the series through `writer` after each
/// one; `hint` predicts where a frontier lies before the search starts (`None`: no hint).
pub fn run(
    plan: &SweepPlan,
    runner: &dyn Runner,
    hint: Option<&dyn Runner>,
    writer: Writer,
    progress: &dyn Progress,
) -> Result<Finish> {
    let mut sweep = Sweep {
        plan,
        runner,
        series: new_series(plan, runner),
        writer,
        progress,
        base_spec: None,
        stopped_between: None,
    };
    if let Some(limit) = &plan.limit
        && limit.emulated
        && let Some(device) = plan.base.devices.first()
        && let Some(total) = runner.device_total(&plan.base.python, device)
        && limit.bytes > total
    {
        bail!(
            "{} is more than {device} has ({} as PyTorch declares it): an emulated card must be smaller than the real one",
            limit.source,
            Bytes(total).both()
        );
    }
    let driven = sweep.drive(hint);
    conclude(driven, sweep.series, sweep.writer, sweep.stopped_between)
}

/// How a sweep ends: a failure saves what was already written as aborted; otherwise the status
/// from the stop (between trials, or inside one), the fit of a list or frontier, and the series
/// saved a last time.
fn conclude(
    driven: Result<Option<String>>,
    mut series: Series,
    mut writer: Writer,
    stopped_between: Option<Stop>,
) -> Result<Finish> {
    let unavailable = match driven {
        Ok(u) => u,
        Err(e) => {
            if writer.written() {
                series.status = SeriesStatus::Aborted;
                series.notes.push(format!("aborted: {e:#}"));
                let _ = writer.save(&series);
            }
            return Err(e);
        }
    };
    if let Some(reason) = unavailable {
        return Ok(Finish::Unavailable(reason));
    }
    let stopped = stopped_between.or_else(|| {
        series.trials.iter().find_map(|t| match t.status {
            TrialStatus::Interrupted => Some(Stop::Interrupt),
            TrialStatus::Terminated => Some(Stop::Terminate(libc::SIGTERM)),
            _ => None,
        })
    });
    series.status = match stopped {
        Some(Stop::Interrupt) => SeriesStatus::Interrupted,
        Some(Stop::Terminate(_)) => SeriesStatus::Terminated,
        None => SeriesStatus::Complete,
    };
    if let (Some(var), SweepMode::List | SweepMode::Frontier) =
        (series.varied.first().copied(), series.mode)
    {
        series.fit = fit_record(&series, var);
    }
    series.updated_at = chrono::Utc::now().to_rfc3339();
    writer.save(&series)?;
    Ok(Finish::Done {
        moved: writer.take_moved(),
        series: Box::new(series),
    })
}

/// A series about to run `plan` through `runner`: its header, no trial yet.
fn new_series(plan: &SweepPlan, runner: &dyn Runner) -> Series {
    let now = chrono::Utc::now().to_rfc3339();
    let devices = runner.devices();
    Series {
        schema: crate::schema::series::SCHEMA.into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        started_at: now.clone(),
        updated_at: now,
        status: SeriesStatus::Running,
        mode: plan.mode,
        kind: runner.kind(),
        target: plan.target.as_ref().map(|(t, _)| t.clone()),
        varied: plan.vary.iter().map(|v| v.variable).collect(),
        alloc_confs: plan.alloc_confs.clone(),
        base: Map::new(),
        identical_across_trials: true,
        protocol: runner.protocol(plan),
        limit: plan.limit.clone(),
        notes: devices
            .as_ref()
            .filter(|d| d.mixed)
            .map(|d| {
                format!(
                    "trials ran on GPUs of different models ({}, --allow-mixed): each peak is its own GPU's (the CUDA context, the libraries' workspaces and the capacity differ by model), and the frontier and the fit mix them",
                    d.models
                )
            })
            .into_iter()
            // `-- COMMAND`: what its launcher was resolved to.
            .chain(plan.base.launch_notes.iter().cloned())
            .collect(),
        devices,
        trials: Vec::new(),
        frontier: None,
        fit: None,
    }
}

/// Whether the series failed as a workload: a trial crashed, timed out, was stopped, found PyTorch
/// missing, or failed for a reason other than out-of-memory (only an out-of-memory at a known load
/// is a finding). The command turns it into exit status 3.
pub fn failed(series: &Series) -> bool {
    let stopped = matches!(
        series.status,
        SeriesStatus::Interrupted | SeriesStatus::Terminated
    );
    stopped || series.trials.iter().any(TrialRecord::is_broken)
}

/// "batch=4 long": a trial's values and load, as the terminal names it.
fn label(values: &Map<String, Value>, load: Option<&str>) -> String {
    values
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .chain(load.map(str::to_string))
        .collect::<Vec<_>>()
        .join(" ")
}

impl Sweep<'_> {
    /// Runs the cells of the mode; `Ok(Some(reason))` when PyTorch or a GPU is missing.
    fn drive(&mut self, hint: Option<&dyn Runner>) -> Result<Option<String>> {
        if self.plan.mode == SweepMode::Frontier {
            return self.frontier(hint);
        }
        let cells = self.plan.cells()?;
        match self.runner.parallelism() {
            None => self.in_sequence(cells),
            Some(n) => self.in_parallel(cells, n),
        }
    }

    /// One cell after the other; a trial that was stopped ends the sweep.
    fn in_sequence(&mut self, cells: Cells) -> Result<Option<String>> {
        self.progress.set_length(cells.len() as u64);
        for cell in cells {
            match self.trial(&cell?, None)? {
                Step::Unavailable(reason) => return Ok(Some(reason)),
                Step::Stop => break,
                Step::Done => {}
            }
        }
        Ok(None)
    }

    /// Up to `parallelism` cells at a time, recorded in order as they complete; predicted, a
    /// configuration already predicted is not predicted again (a prediction is deterministic).
    fn in_parallel(&mut self, cells: Cells, parallelism: usize) -> Result<Option<String>> {
        // Every cell planned first; the first of each configuration found by a hash of its
        // specification's text: one pass, O(n) (a search per trial was O(n²): 20,000 values took
        // 11 s to plan). A stop signal is seen while planning, too.
        let once = self.runner.kind() == PointKind::Predicted;
        let mut planned: Vec<Cell> = Vec::with_capacity(cells.len());
        let mut first_seen: HashMap<String, usize> = HashMap::with_capacity(cells.len());
        let mut first_of: Vec<usize> = Vec::with_capacity(cells.len());
        for (i, cell) in cells.enumerate() {
            if i % 256 == 0
                && let Some(signal) = self.runner.stop_requested()
            {
                self.stopped_between = Some(signal);
                self.series.notes.push(format!(
                    "stopped by {} while the trials were planned: nothing was {}",
                    signal.name(),
                    match self.runner.kind() {
                        PointKind::Measured => "measured",
                        PointKind::Predicted => "predicted",
                    }
                ));
                return Ok(None);
            }
            let cell = cell?;
            let spec = cell.trial().spec.to_map();
            self.check_identical(&spec, &cell.values)?;
            let first = match once {
                true => *first_seen.entry(serde_json::to_string(&spec)?).or_insert(i),
                false => i,
            };
            first_of.push(first);
            planned.push(cell);
        }
        let cells = planned;
        let unique: Vec<usize> = (0..cells.len()).filter(|&i| first_of[i] == i).collect();
        let workers = parallelism.min(unique.len()).max(1);
        // The workers' own output (transformers' warnings) goes above the progress line, never
        // into it.
        let shown: std::sync::Arc<dyn Progress> = self
            .progress
            .forwarder()
            .unwrap_or_else(|| std::sync::Arc::new(NoProgress));
        self.progress.set_length(cells.len() as u64);
        self.progress.set_message(&format!(
            "{} {} trial(s), {workers} at a time",
            self.verb(),
            unique.len()
        ));
        let runner = self.runner;
        let todo: Vec<&Cell> = unique.iter().map(|&i| &cells[i]).collect();
        let mut arrived: BTreeMap<usize, (Result<Ran>, f64)> = BTreeMap::new();
        let mut recorded = 0;
        let mut outcome: Result<Option<String>> = Ok(None);
        runner.run_many(&todo, &*shown, &mut |k, ran, duration_s| {
            if outcome.is_err() || matches!(outcome, Ok(Some(_))) {
                return false;
            }
            arrived.insert(unique[k], (ran, duration_s));
            // Record every trial whose turn has come: its own, or the one of the identical
            // configuration before it.
            while recorded < cells.len() {
                let j = recorded;
                let step = if first_of[j] == j {
                    let Some((ran, duration_s)) = arrived.remove(&j) else {
                        break;
                    };
                    ran.and_then(|ran| self.record(&cells[j], ran, duration_s))
                } else {
                    self.reuse(&cells[j], first_of[j])
                };
                recorded += 1;
                let ended = match step {
                    Ok(Step::Unavailable(reason)) => Ok(Some(reason)),
                    Ok(_) => continue,
                    Err(e) => Err(e),
                };
                outcome = ended;
                return false;
            }
            true
        });
        if outcome.is_ok()
            && self.series.trials.len() < cells.len()
            && let Some(signal) = self.runner.stop_requested()
        {
            self.stop_before(signal);
        }
        outcome
    }

    /// The search over the range, one trial after the other, guided by the peaks (their curve
    /// reaches the capacity) and by the hint's predictions, if any.
    fn frontier(&mut self, hint: Option<&dyn Runner>) -> Result<Option<String>> {
        let plan = self.plan;
        let kind = self.runner.kind();
        let Some((variable, bounds)) = plan.bounds() else {
            bail!("internal: a frontier without a range")
        };
        // The capacity the peaks are compared with: a predicted card's less the memory outside
        // the allocator the predictions assume, the emulated limit, else the device's
        // total_memory as PyTorch declares it.
        let capacity = match (&plan.limit, &plan.target) {
            (Some(l), Some((t, _))) => Some(l.bytes.saturating_sub(t.context_bytes)),
            (Some(l), None) => Some(l.bytes),
            (None, _) => self.runner.device_total(
                &plan.base.python,
                plan.base.devices.first().map_or("cuda:0", String::as_str),
            ),
        };
        let (hint, predictions) = match (hint, capacity) {
            (Some(h), Some(c)) if !plan.no_prediction => predict_hint(h, plan, variable, bounds, c),
            _ => (None, 0),
        };
        // A search stops when it has closed the frontier: its trial count is not known ahead,
        // only its bound (the guided bisection costs at most twice a bisection's steps), so the
        // display says that bound, never "of N" as if N were planned. Measured on k GPUs
        // (`--gpus`), each round tries k values at once; predicted, k cores do (the values tried
        // then depend on the machine, the frontier does not).
        let k = self.runner.parallelism().unwrap_or(1).max(1);
        let rounds_bound = search::round_bound(&bounds, k);
        let at_most = (k * rounds_bound).min(bounds.max_trials);
        let mut ended: Option<Result<Option<String>>> = None;
        let mut round = 0;
        let (found, rounds) = search::find_rounds(bounds, hint, capacity, k, |values| {
            if k == 1 {
                let step = plan
                    .cell_at(variable, values[0])
                    .and_then(|cell| self.trial(&cell, Some(at_most)));
                return vec![self.probe(step, &mut ended)];
            }
            round += 1;
            self.round(values, variable, (round, rounds_bound, at_most), &mut ended)
        });
        if let Some(ended) = ended {
            if let Some(reason) = ended? {
                return Ok(Some(reason));
            }
            match kind {
                PointKind::Measured => self.series.notes.push("the search stopped early: a trial crashed, timed out, was stopped or failed for a reason other than out-of-memory".into()),
                PointKind::Predicted if self.stopped_between.is_none() => self.series.notes.push("the search stopped early: a prediction was unpredictable, failed or was stopped (its trial says why); the frontier is where the search stood".into()),
                PointKind::Predicted => {}
            }
        }
        let trials = self.series.trials.len();
        let deciding = found.first_failure.and_then(|v| {
            let t = self.series.trials.iter().find(|t| {
                t.out_of_memory && t.values.get(variable.name()).and_then(Value::as_u64) == Some(v)
            })?;
            deciding(t.prediction.as_deref()?, v, plan.limit.as_ref()?.bytes)
        });
        self.series.frontier = Some(FrontierRecord {
            variable,
            last_success: found.last_success,
            first_failure: found.first_failure,
            resolution: bounds.resolution,
            trials,
            strategy: match (kind, hint, capacity, k) {
                (PointKind::Predicted, _, _, 1) => {
                    "predicted-peak curve: bisection guided by the predicted peaks".into()
                }
                (PointKind::Predicted, _, _, k) => format!(
                    "predicted-peak curve alternating with equal splits, {k} predictions at once; {trials} trial(s) in {rounds} round(s) (at most {at_most} in {rounds_bound})"
                ),
                (_, Some(_), _, 1) => format!(
                    "prediction hint ({predictions} prediction(s) of the workload), then measured-peak curve"
                ),
                (_, None, Some(_), 1) => "measured-peak curve".into(),
                (_, None, None, 1) => "grow-then-bisect".into(),
                (_, hint, capacity, k) => format!(
                    "{k}-ary search, {k} trials at once: {}{}; {trials} trial(s) in {rounds} round(s) (at most {at_most} in {rounds_bound})",
                    match hint {
                        Some(_) => format!(
                            "prediction hint ({predictions} prediction(s) of the workload), then "
                        ),
                        None => String::new(),
                    },
                    match capacity {
                        Some(_) => "measured-peak curve alternating with equal splits",
                        None => "equal splits of the values left",
                    }
                ),
            },
            hint,
            predictions: match kind {
                PointKind::Predicted => predictions + trials,
                PointKind::Measured => predictions,
            },
            budget_exhausted: found.budget_exhausted,
            deciding,
        });
        Ok(None)
    }

    /// What a recorded trial tells the search (`None`: it ends it, `ended` says how).
    fn probe(
        &mut self,
        step: Result<Step>,
        ended: &mut Option<Result<Option<String>>>,
    ) -> Option<Probe> {
        let stop = match step {
            Ok(Step::Done) => None,
            Ok(Step::Unavailable(reason)) => Some(Ok(Some(reason))),
            Ok(Step::Stop) => Some(Ok(None)),
            Err(e) => Some(Err(e)),
        };
        let last = self.series.trials.last();
        // Only a success or an out-of-memory places the frontier: anything else stops the
        // search, the trial saying why.
        let places = last.is_some_and(|t| {
            t.status == TrialStatus::Ok || (t.status == TrialStatus::Failed && t.out_of_memory)
        });
        if let Some(this) = stop.or_else(|| (!places).then_some(Ok(None))) {
            if ended.is_none() {
                *ended = Some(this);
            }
            return None;
        }
        let ok = last?.status.is_ok();
        Some(Probe {
            ok,
            peak: last.and_then(|t| t.peak_reserved_bytes).filter(|_| ok),
        })
    }

    /// One round of a k-ary search: its values run at once through the runner's `run_many`,
    /// recorded in the order of the values; `(round, of at most, trials at most)` for the display.
    fn round(
        &mut self,
        values: &[u64],
        variable: Variable,
        (round, rounds_bound, at_most): (usize, usize, usize),
        ended: &mut Option<Result<Option<String>>>,
    ) -> Vec<Option<Probe>> {
        if let Some(signal) = self.runner.stop_requested() {
            self.stop_before(signal);
            *ended = Some(Ok(None));
            return Vec::new();
        }
        let mut cells = Vec::with_capacity(values.len());
        for &v in values {
            let cell = self.plan.cell_at(variable, v).and_then(|cell| {
                self.check_identical(&cell.trial().spec.to_map(), &cell.values)?;
                Ok(cell)
            });
            match cell {
                Ok(cell) => cells.push(cell),
                Err(e) => {
                    *ended = Some(Err(e));
                    return Vec::new();
                }
            }
        }
        self.progress.set_message(&format!(
            "{} {}={} (round {round} of at most {rounds_bound}, {} at once; at most {at_most} trials)",
            self.verb(),
            variable.name(),
            values
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(","),
            values.len()
        ));
        let shown: std::sync::Arc<dyn Progress> = self
            .progress
            .forwarder()
            .unwrap_or_else(|| std::sync::Arc::new(NoProgress));
        let refs: Vec<&Cell> = cells.iter().collect();
        let mut results: Vec<Option<(Result<Ran>, f64)>> = (0..cells.len()).map(|_| None).collect();
        self.runner
            .run_many(&refs, &*shown, &mut |i, ran, duration_s| {
                results[i] = Some((ran, duration_s));
                true
            });
        let mut probes = Vec::with_capacity(cells.len());
        for (cell, result) in cells.iter().zip(results) {
            let probe = match result {
                // Not started: a stop was asked for.
                None => None,
                Some(_) if matches!(ended, Some(Err(_)) | Some(Ok(Some(_)))) => None,
                Some((ran, duration_s)) => {
                    let step = ran.and_then(|ran| self.record(cell, ran, duration_s));
                    self.probe(step, ended)
                }
            };
            probes.push(probe);
        }
        if probes.iter().any(Option::is_none)
            && ended.is_none()
            && let Some(signal) = self.runner.stop_requested()
        {
            self.stop_before(signal);
            *ended = Some(Ok(None));
        }
        probes
    }

    fn verb(&self) -> &'static str {
        match self.runner.kind() {
            PointKind::Measured => "running",
            PointKind::Predicted => "predicting",
        }
    }

    /// Runs one cell and records it, unless a signal came first; `at_most`: a search's bound.
    fn trial(&mut self, cell: &Cell, at_most: Option<usize>) -> Result<Step> {
        if let Some(signal) = self.runner.stop_requested() {
            self.stop_before(signal);
            return Ok(Step::Stop);
        }
        self.check_identical(&cell.trial().spec.to_map(), &cell.values)?;
        let label = label(&cell.values, cell.load.as_deref());
        let after = match (self.runner.kind(), self.series.trials.last(), at_most) {
            (PointKind::Measured, Some(t), _) => {
                let peak = t.peak_reserved_bytes.map_or(String::new(), |b| {
                    format!(", peak reserved {:.3} GiB", Bytes(b).gib())
                });
                format!(" (last: {}{peak})", crate::sweep::render::status_label(t))
            }
            (PointKind::Predicted, _, Some(n)) => format!(" (a bisection: at most {n} trials)"),
            _ => String::new(),
        };
        self.progress
            .set_message(&format!("{} {label}{after}", self.verb()));
        let began = Instant::now();
        let ran = self.runner.run(cell, self.progress)?;
        self.record(cell, ran, began.elapsed().as_secs_f64())
    }

    /// Records what the runner made of `cell`; `Unavailable` when PyTorch (or what the runner
    /// needs) is missing at the first trial: nothing is written then.
    fn record(&mut self, cell: &Cell, ran: Ran, duration_s: f64) -> Result<Step> {
        let mut record = match ran {
            Ran::Unavailable(reason) if self.series.trials.is_empty() => {
                return Ok(Step::Unavailable(reason));
            }
            Ran::Unavailable(reason) => {
                let mut t = blank(self.runner.kind(), cell, TrialStatus::Unavailable);
                t.error = Some(reason);
                t
            }
            Ran::Trial(t) => *t,
        };
        record.index = self.series.trials.len();
        // A runner that timed the trial itself (a Slurm task, a kept trial) keeps its time.
        if record.duration_s == 0.0 {
            record.duration_s = duration_s;
        }
        let status = record.status;
        self.push(record)?;
        Ok(match status {
            TrialStatus::Interrupted | TrialStatus::Terminated => Step::Stop,
            _ => Step::Done,
        })
    }

    /// Records `cell` with the prediction of the identical trial `first` (predicted once).
    fn reuse(&mut self, cell: &Cell, first: usize) -> Result<Step> {
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
        Ok(Step::Done)
    }

    /// Prints, appends and saves one trial.
    fn push(&mut self, record: TrialRecord) -> Result<()> {
        let label = label(&record.values, record.load.as_deref());
        let (width, what) = match record.kind {
            PointKind::Measured => (11, "peak reserved"),
            PointKind::Predicted => (22, "predicted peak reserved"),
        };
        self.progress.println(&format!(
            "trial {:>3} {label:<28} {:<width$} {what} {}",
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

    /// A stop signal seen before trial N started: the sweep ends there, said in a note.
    fn stop_before(&mut self, signal: Stop) {
        self.stopped_between = Some(signal);
        self.series.notes.push(format!(
            "stopped by {} before trial {}",
            signal.name(),
            self.series.trials.len() + 1
        ));
    }

    /// Every option but the varied ones must be identical across measured trials; the first
    /// trial's are the series' `base`.
    fn check_identical(
        &mut self,
        spec: &Map<String, Value>,
        values: &Map<String, Value>,
    ) -> Result<()> {
        let mut spec = spec.clone();
        for k in values.keys() {
            spec.remove(&k.replace('-', "_"));
        }
        self.plan.base.record_given_lengths(&mut spec, values);
        if values.contains_key(Variable::Resolution.name()) {
            // A resolution is the images' height and width.
            spec.remove("height");
            spec.remove("width");
        }
        if spec.remove("script_args").is_some() {
            // The script's arguments carry the varied values: compare their template instead.
            spec.insert(
                "script_args_template".into(),
                json!(self.plan.script_args_template),
            );
        }
        match &self.base_spec {
            None => {
                self.series.base = spec.clone();
                self.base_spec = Some(spec);
            }
            // Predicted trials are not held to it (they never were).
            Some(base)
                if *base != spec
                    && self.series.mode != SweepMode::Loads
                    && self.runner.kind() == PointKind::Measured =>
            {
                self.series.identical_across_trials = false;
                let differ: Vec<&str> = base
                    .keys()
                    .chain(spec.keys())
                    .filter(|k| base.get(*k) != spec.get(*k))
                    .map(String::as_str)
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect();
                bail!(
                    "internal: a trial differs from the first in more than the varied dimension: {}",
                    differ.join(", ")
                );
            }
            Some(_) => {}
        }
        Ok(())
    }
}

/// Where the predicted peak reaches `capacity`: the workload is predicted at the range's ends
/// and middle (three predictions, fewer when the first already says), a curve is fitted through
/// them and solved, snapped to the grid. Returns the hint and how many predictions it took.
fn predict_hint(
    runner: &dyn Runner,
    plan: &SweepPlan,
    variable: Variable,
    b: Bounds,
    capacity: u64,
) -> (Option<u64>, usize) {
    let mut points: Vec<(u64, u64)> = Vec::new();
    let mut count = 0;
    let mid = search::grid_midpoint(&b, b.lo, b.hi).unwrap_or(b.lo);
    for v in [b.lo, b.hi, mid] {
        if points.iter().any(|p| p.0 == v) {
            continue;
        }
        let Ok(cell) = plan.cell_at(variable, v) else {
            continue;
        };
        count += 1;
        // A prediction stopped by a signal or the timeout holds only its first phases.
        let peak = match runner.run(&cell, &NoProgress) {
            Ok(Ran::Trial(t)) => t
                .prediction
                .filter(|doc| !doc.stopped())
                .and_then(|doc| doc.max_peak_reserved()),
            _ => None,
        };
        let Some(peak) = peak else {
            return (None, count);
        };
        points.push((v, peak));
        match (v == b.lo, v == b.hi, peak <= capacity) {
            (true, _, false) => return (Some(b.lo), count),
            (_, true, true) => return (Some(b.hi), count),
            _ => {}
        }
    }
    let Some(f) = fit::fit(&points) else {
        return (None, count);
    };
    let hint = f.solve(capacity as f64).map(|x| {
        let x = (x.max(b.lo as f64) as u64).min(b.hi);
        b.lo + (x - b.lo) / b.resolution.max(1) * b.resolution.max(1)
    });
    (hint, count)
}

pub(crate) fn fit_record(series: &Series, variable: Variable) -> Option<FitRecord> {
    let points: Vec<(u64, u64)> = series
        .trials
        .iter()
        .filter(|t| t.status.is_ok())
        .filter_map(|t| {
            Some((
                t.values.get(variable.name())?.as_u64()?,
                t.peak_reserved_bytes?,
            ))
        })
        .collect();
    let f = fit::fit(&points)?;
    // Predicted peaks are held against the target's memory outside the allocator, as assumed by
    // the prediction; measured ones against NVML's reading.
    let (overhead, predicted_outside) = match &series.target {
        Some(t) => (Some(t.context_bytes), Some(t.context_source.clone())),
        None => (series.max_outside_allocator(), None),
    };
    let cards = cards::catalog()
        .into_iter()
        .map(|card| {
            let (cap, source) = card.device_capacity();
            let usable = cap.get().saturating_sub(overhead.unwrap_or(0));
            let (predicted, range, withheld) = match f.frontier(usable as f64) {
                Ok((x, range)) => (Some(x), Some(range), None),
                // A predicted series' values were predicted, not measured.
                Err(why) if series.kind == PointKind::Predicted => (
                    None,
                    None,
                    Some(
                        why.replace("largest value measured", "largest value predicted")
                            .replace("measure closer to it", "predict values closer to it"),
                    ),
                ),
                Err(why) => (None, None, Some(why)),
            };
            CardFrontier {
                card: card.name,
                capacity_bytes: cap.get(),
                capacity_source: source.label().into(),
                usable_bytes: usable,
                predicted,
                range,
                extrapolation: predicted.is_none_or(|p| p < f.x_min as f64 || p > f.x_max as f64),
                withheld,
            }
        })
        .collect();
    Some(FitRecord {
        variable,
        fit: f,
        overhead_bytes: overhead,
        overhead_source: match (overhead, predicted_outside) {
            (_, Some(source)) => format!("memory outside PyTorch's allocator of the predicted card ({source})"),
            (Some(_), None) => "largest memory outside PyTorch's allocator seen by NVML in these trials".into(),
            (None, None) => "not measured (no NVML view): the card capacities are not reduced; add the CUDA context and libraries yourself".into(),
        },
        cards,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::sweep::plan_of;
    use crate::measure::trial::mock::{MockRunner, Outcome};
    use crate::schema::spec::{WorkerSpec, WorkloadSpec};
    use crate::sweep::runner::measured::Measured;

    fn plan(args: &[&str], output: &std::path::Path) -> SweepPlan {
        let mut argv = args.to_vec();
        argv.extend(["--output", output.to_str().unwrap()]);
        plan_of(&argv).unwrap()
    }

    fn dense(spec: &WorkerSpec) -> &crate::schema::spec::DenseSpec {
        match &spec.workload {
            WorkloadSpec::Dense(d) => d,
            other => panic!("not dense: {other:?}"),
        }
    }

    /// Runs `args` with `decide`; returns the series on disk, the mock and the finish.
    fn sweep<F: FnMut(&WorkerSpec) -> Outcome + Send>(
        args: &[&str],
        mock: &MockRunner<F>,
    ) -> (tempfile::TempDir, std::path::PathBuf, Result<Finish>) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("series.json");
        let p = plan(args, &out);
        let finish = run(
            &p,
            &Measured::new(mock),
            None,
            Writer::new(&out).unwrap(),
            &crate::progress::NoProgress,
        );
        (dir, out, finish)
    }

    fn on_disk(path: &std::path::Path) -> Series {
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    #[test]
    fn a_list_runs_each_value_in_order_and_fits_the_peaks() {
        let mock = MockRunner::new(|s| Outcome::Ok {
            peak: 1_000_000 * dense(s).batch,
        });
        let (_d, out, finish) = sweep(&["--vary", "batch=1,2,4,8"], &mock);
        let Finish::Done { series, .. } = finish.unwrap() else {
            panic!("unavailable")
        };
        let batches: Vec<u64> = mock.specs().iter().map(|s| dense(s).batch).collect();
        assert_eq!(batches, [1, 2, 4, 8]);
        assert_eq!(series.status, SeriesStatus::Complete);
        assert_eq!(series.trials.len(), 4);
        assert!(series.identical_across_trials);
        assert!(!series.base.contains_key("batch"), "{:?}", series.base);
        assert_eq!(series.base["width"], 64);
        let fit = series.fit.as_ref().unwrap();
        assert_eq!(fit.variable, Variable::Batch);
        assert!((fit.fit.predict(16.0) - 16e6).abs() < 1.0);
        assert!(!failed(&series));
        assert_eq!(on_disk(&out).trials.len(), 4, "the file holds every trial");
    }

    /// A resolution is the images' height and width, and a VLM's request count derives its
    /// lengths: neither is "more than the varied dimension" (measured sweeps were refused).
    #[test]
    fn a_resolution_or_a_request_count_differs_only_in_what_it_derives() {
        let fixture = |m: &str| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/models")
                .join(m)
                .display()
                .to_string()
        };
        let (vit, vlm) = (
            fixture("vit-base-defaults"),
            fixture("qwen2-vl-2b-instruct"),
        );
        for (args, derived) in [
            (
                [
                    "--workload",
                    "vision",
                    "--model",
                    &vit,
                    "--vary",
                    "resolution=224,384",
                ],
                ["height", "width"],
            ),
            (
                [
                    "--workload",
                    "vlm",
                    "--model",
                    &vlm,
                    "--vary",
                    "requests=1,2",
                ],
                ["prompt_lengths", "output_lengths"],
            ),
        ] {
            let mock = MockRunner::new(|_| Outcome::Ok { peak: 1_000_000 });
            let (_d, _out, finish) = sweep(&args, &mock);
            let Ok(Finish::Done { series, .. }) = finish else {
                panic!("{args:?}: the sweep did not run")
            };
            assert_eq!(series.trials.len(), 2, "{args:?}");
            assert!(series.identical_across_trials, "{args:?}");
            for key in derived {
                assert!(!series.base.contains_key(key), "{args:?}: {key}");
            }
        }
    }

    fn two_gpus(second: &str) -> crate::schema::series::Devices {
        let gpu = |visible: &str, name: &str| crate::schema::series::Gpu {
            visible: visible.into(),
            nvml_index: visible.parse().ok(),
            name: Some(name.into()),
            uuid: Some(format!("GPU-{visible}")),
            total_memory: Some(16 << 30),
            source: "NVML".into(),
        };
        crate::measure::gpus::devices(vec![gpu("0", "NVIDIA H200"), gpu("1", second)], true)
            .unwrap()
    }

    #[test]
    fn on_two_gpus_a_list_runs_two_trials_at_once_each_alone_on_its_gpu() {
        let mut mock = MockRunner::new(|s| Outcome::Ok {
            peak: dense(s).batch << 20,
        });
        mock.hold = std::time::Duration::from_millis(150);
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("series.json");
        let p = plan(&["--vary", "batch=1,2,3,4", "--gpus", "0,1"], &out);
        let Finish::Done { series, .. } = run(
            &p,
            &Measured::on_gpus(&mock, two_gpus("NVIDIA H200")),
            None,
            Writer::new(&out).unwrap(),
            &crate::progress::NoProgress,
        )
        .unwrap() else {
            panic!("unavailable")
        };
        let seen = mock.seen();
        assert_eq!(seen.len(), 4);
        assert!(seen.iter().all(|s| s.at_once <= 2), "never more than two");
        assert!(seen.iter().any(|s| s.at_once == 2), "two at once");
        let gpus: std::collections::BTreeSet<_> =
            seen.iter().map(|s| s.visible.clone().unwrap()).collect();
        assert_eq!(gpus.into_iter().collect::<Vec<_>>(), ["0", "1"]);
        let devices = series.devices.as_ref().unwrap();
        assert_eq!(
            (devices.models.as_str(), devices.mixed),
            ("2 × NVIDIA H200", false)
        );
        assert_eq!(values_of(&series), [1, 2, 3, 4], "recorded in order");
        for t in &series.trials {
            let gpu = t.gpu.as_ref().expect("each trial names its GPU");
            assert!(["0", "1"].contains(&gpu.visible.as_str()));
            assert_eq!(gpu.name.as_deref(), Some("NVIDIA H200"));
        }
        assert!(
            series.protocol.contains("up to 2 at once"),
            "{}",
            series.protocol
        );
        assert!(series.notes.is_empty(), "{:?}", series.notes);
        let table = super::super::render::table(&series, &out);
        assert!(
            table.contains("trials ran on 2 × NVIDIA H200 (0,1)"),
            "{table}"
        );

        // Mixed models, allowed: said in the series and its table.
        let mock = MockRunner::new(|_| Outcome::Ok { peak: 1 << 20 });
        let out = dir.path().join("mixed.json");
        let p = plan(
            &["--vary", "batch=1,2", "--gpus", "0,1", "--allow-mixed"],
            &out,
        );
        let Finish::Done { series, .. } = run(
            &p,
            &Measured::on_gpus(&mock, two_gpus("NVIDIA A100")),
            None,
            Writer::new(&out).unwrap(),
            &crate::progress::NoProgress,
        )
        .unwrap() else {
            panic!("unavailable")
        };
        assert!(series.devices.as_ref().unwrap().mixed);
        assert!(
            series.notes[0].contains("different models"),
            "{:?}",
            series.notes
        );
        assert!(super::super::render::table(&series, &out).contains("DIFFERENT MODELS"));
    }

    fn gpus(n: usize) -> crate::schema::series::Devices {
        let gpus = (0..n)
            .map(|i| crate::schema::series::Gpu {
                visible: i.to_string(),
                nvml_index: Some(i as u32),
                name: Some("NVIDIA H200".into()),
                uuid: None,
                total_memory: Some(1 << 40),
                source: "NVML".into(),
            })
            .collect();
        crate::measure::gpus::devices(gpus, false).unwrap()
    }

    #[test]
    fn on_k_gpus_the_frontier_runs_k_trials_a_round_and_closes_within_the_bound() {
        let peak = |c: u64| 10_000_000 + 1_000_000 * c;
        for k in [2, 4, 8] {
            let mock = MockRunner::new(|s| {
                let p = peak(dense(s).context);
                if s.memory_limit_bytes.is_some_and(|l| p > l) {
                    Outcome::OutOfMemory { peak: p }
                } else {
                    Outcome::Ok { peak: p }
                }
            });
            let dir = tempfile::tempdir().unwrap();
            let out = dir.path().join("series.json");
            let gpus_arg = (0..k).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
            let p = plan(
                &[
                    "--vary",
                    "context=1..1000",
                    "--search",
                    "frontier",
                    "--memory-limit",
                    "300000000",
                    "--gpus",
                    &gpus_arg,
                ],
                &out,
            );
            let Finish::Done { series, .. } = run(
                &p,
                &Measured::on_gpus(&mock, gpus(k)),
                None,
                Writer::new(&out).unwrap(),
                &crate::progress::NoProgress,
            )
            .unwrap() else {
                panic!("unavailable")
            };
            let f = series.frontier.as_ref().unwrap();
            assert_eq!(
                (f.last_success, f.first_failure),
                (Some(290), Some(291)),
                "k={k}"
            );
            let bound = search::round_bound(&p.bounds().unwrap().1, k);
            assert!(
                f.strategy.starts_with(&format!("{k}-ary search")),
                "{}",
                f.strategy
            );
            assert!(
                f.strategy.contains(&format!("in {bound})")),
                "{}",
                f.strategy
            );
            assert!(
                series.trials.len() <= k * bound,
                "k={k}: {}",
                series.trials.len()
            );
            assert!(mock.seen().iter().all(|s| s.at_once <= k));
            assert!(series.trials.iter().all(|t| t.gpu.is_some()));
            assert_eq!(series.status, SeriesStatus::Complete);
        }
    }

    #[test]
    fn on_k_gpus_a_crash_ends_the_frontier_after_its_round() {
        let mock = MockRunner::new(|s| {
            if dense(s).context > 100 {
                Outcome::Crash
            } else {
                Outcome::Ok {
                    peak: dense(s).context << 20,
                }
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("series.json");
        let p = plan(
            &[
                "--vary",
                "context=1..1000",
                "--search",
                "frontier",
                "--gpus",
                "0,1,2,3",
            ],
            &out,
        );
        let Finish::Done { series, .. } = run(
            &p,
            &Measured::on_gpus(&mock, gpus(4)),
            None,
            Writer::new(&out).unwrap(),
            &crate::progress::NoProgress,
        )
        .unwrap() else {
            panic!("unavailable")
        };
        // The first round (1 and 2 for the curve's slope, two values above 100) crashes: no
        // other round runs.
        let statuses: Vec<TrialStatus> = series.trials.iter().map(|t| t.status).collect();
        assert_eq!(
            statuses,
            [
                TrialStatus::Ok,
                TrialStatus::Ok,
                TrialStatus::Crashed,
                TrialStatus::Crashed
            ]
        );
        assert!(series.notes.iter().any(|n| n.contains("stopped early")));
        let f = series.frontier.as_ref().unwrap();
        assert_eq!(f.first_failure, None, "a crash places no frontier");
        assert!(failed(&series));
    }

    #[test]
    fn gpus_refuse_what_gives_a_trial_more_than_its_gpu() {
        let refused = |args: &[&str]| {
            let mut argv = args.to_vec();
            argv.extend(["--output", "/tmp/never-written.json"]);
            plan_of(&argv).unwrap_err().to_string()
        };
        let list = ["--vary", "batch=1,2", "--gpus", "0,1"];
        fn with<'a>(list: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
            [list, extra].concat()
        }
        assert!(refused(&with(&list, &["--device", "cuda:1"])).contains("drop --device"));
        assert!(refused(&with(&list, &["--predict", "--card", "L4"])).contains("--predict"));
        assert!(refused(&with(&list, &["--nproc-per-node", "2"])).contains("torchrun"));
        assert!(refused(&["--vary", "batch=1,2", "--allow-mixed"]).contains("--gpus"));
        assert!(refused(&["--vary", "batch=1", "--gpus", "0,0"]).contains("twice"));
        plan_of(
            &[
                &with(&list, &["--device", "cuda:0"])[..],
                &["--output", "/tmp/x.json"],
            ]
            .concat(),
        )
        .expect("cuda:0 is what each trial sees");
    }

    fn values_of(series: &Series) -> Vec<u64> {
        series
            .trials
            .iter()
            .map(|t| t.values["batch"].as_u64().unwrap())
            .collect()
    }

    #[test]
    fn the_series_is_rewritten_after_every_trial() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("series.json");
        let seen = std::sync::Mutex::new(Vec::new());
        let mock = MockRunner::new(|_| {
            // What is on disk when the next trial starts.
            seen.lock().unwrap().push(if out.exists() {
                Some(on_disk(&out).trials.len())
            } else {
                None
            });
            Outcome::Ok { peak: 1 << 20 }
        });
        let p = plan(&["--vary", "batch=1,2,3"], &out);
        run(
            &p,
            &Measured::new(&mock),
            None,
            Writer::new(&out).unwrap(),
            &crate::progress::NoProgress,
        )
        .unwrap();
        assert_eq!(*seen.lock().unwrap(), [None, Some(1), Some(2)]);
        assert_eq!(on_disk(&out).status, SeriesStatus::Complete);
    }

    #[test]
    fn out_of_memory_is_a_finding_and_the_frontier_closes_within_the_resolution() {
        // peak = 10 MB + 1 MB per context unit: the limit of 300 MB is reached at 290.
        let peak = |c: u64| 10_000_000 + 1_000_000 * c;
        let mock = MockRunner::new(|s| {
            let p = peak(dense(s).context);
            if s.memory_limit_bytes.is_some_and(|l| p > l) {
                Outcome::OutOfMemory { peak: p }
            } else {
                Outcome::Ok { peak: p }
            }
        });
        let (_d, _out, finish) = sweep(
            &[
                "--vary",
                "context=1..1000",
                "--search",
                "frontier",
                "--memory-limit",
                "300000000",
            ],
            &mock,
        );
        let Finish::Done { series, .. } = finish.unwrap() else {
            panic!()
        };
        let f = series.frontier.as_ref().unwrap();
        assert_eq!((f.last_success, f.first_failure), (Some(290), Some(291)));
        assert_eq!(f.trials, series.trials.len());
        assert!(series.trials.iter().any(|t| t.out_of_memory));
        assert!(
            mock.specs()
                .iter()
                .all(|s| s.memory_limit_bytes == Some(300_000_000)),
            "every trial runs under the emulated limit"
        );
        assert_eq!(series.status, SeriesStatus::Complete);
        assert!(!failed(&series));
    }

    #[test]
    fn a_crash_or_a_timeout_stops_the_frontier_search_and_is_not_an_out_of_memory() {
        for (broken, status) in [
            (Outcome::Crash, TrialStatus::Crashed),
            (Outcome::Timeout, TrialStatus::Timeout),
        ] {
            let mut mock = MockRunner::new(|s| {
                if dense(s).context > 100 {
                    broken
                } else {
                    Outcome::Ok {
                        peak: dense(s).context << 20,
                    }
                }
            });
            mock.device_total = Some(1 << 40);
            let (_d, _out, finish) = sweep(
                &["--vary", "context=1..1000", "--search", "frontier"],
                &mock,
            );
            let Finish::Done { series, .. } = finish.unwrap() else {
                panic!()
            };
            let broken_trials = series.trials.iter().filter(|t| t.status == status).count();
            assert_eq!(broken_trials, 1, "the search stops at the first {status}");
            assert_eq!(series.trials.last().unwrap().status, status);
            assert!(!series.trials.last().unwrap().out_of_memory);
            assert!(series.notes.iter().any(|n| n.contains("stopped early")));
            let f = series.frontier.as_ref().unwrap();
            assert_eq!(f.first_failure, None, "a {status} places no frontier");
            assert_eq!(f.trials, series.trials.len());
            assert!(failed(&series));
        }
    }

    #[test]
    fn an_interruption_stops_the_sweep_and_keeps_the_finished_trials() {
        let mock = MockRunner::new(|s| match dense(s).batch {
            4 => Outcome::Interrupted,
            b => Outcome::Ok { peak: b << 20 },
        });
        let (_d, out, finish) = sweep(&["--vary", "batch=1,2,4,8"], &mock);
        let Finish::Done { series, .. } = finish.unwrap() else {
            panic!()
        };
        assert_eq!(mock.specs().len(), 3, "batch 8 never ran");
        assert_eq!(series.status, SeriesStatus::Interrupted);
        assert_eq!(on_disk(&out).status, SeriesStatus::Interrupted);
        assert_eq!(on_disk(&out).trials.len(), 3);
        assert!(failed(&series));
    }

    #[test]
    fn a_failure_other_than_out_of_memory_fails_the_sweep() {
        let mock = MockRunner::new(|s| match dense(s).batch {
            1 => Outcome::Ok { peak: 1 << 20 },
            _ => Outcome::Error,
        });
        let (_d, _out, finish) = sweep(&["--vary", "batch=1,2"], &mock);
        let Finish::Done { series, .. } = finish.unwrap() else {
            panic!()
        };
        assert_eq!(series.trials[1].status, TrialStatus::Failed);
        assert!(!series.trials[1].out_of_memory);
        assert!(series.trials[1].is_broken());
        assert!(failed(&series));
        let table = super::super::render::table(&series, std::path::Path::new("s.json"));
        assert!(table.contains("mock: ValueError"), "{table}");
    }

    #[test]
    fn a_limit_above_the_device_is_refused_before_any_trial() {
        let mut mock = MockRunner::new(|_| Outcome::Ok { peak: 1 });
        mock.device_total = Some(4 << 30);
        let (_d, out, finish) = sweep(&["--vary", "batch=1,2", "--memory-limit", "8GiB"], &mock);
        let err = finish.err().expect("refused").to_string();
        assert!(err.contains("more than cuda:0 has"), "{err}");
        assert!(mock.specs().is_empty() && !out.exists());
    }

    #[test]
    fn a_signal_between_trials_closes_the_series() {
        for (stop, status) in [
            (Stop::Interrupt, SeriesStatus::Interrupted),
            (Stop::Terminate(libc::SIGHUP), SeriesStatus::Terminated),
        ] {
            let mut mock = MockRunner::new(|_| Outcome::Ok { peak: 1 << 20 });
            mock.stop_after = Some((2, stop));
            let (_d, out, finish) = sweep(&["--vary", "batch=1,2,4,8"], &mock);
            let Finish::Done { series, .. } = finish.unwrap() else {
                panic!()
            };
            assert_eq!(mock.specs().len(), 2, "no trial starts after the signal");
            assert_eq!(series.status, status);
            let disk = on_disk(&out);
            assert_eq!((disk.status, disk.trials.len()), (status, 2));
            assert!(disk.notes.iter().any(|n| n.contains(stop.name())));
            assert!(failed(&series));
        }
    }

    #[test]
    fn missing_pytorch_at_the_first_trial_writes_nothing() {
        let mock = MockRunner::new(|_| Outcome::Unavailable);
        let (_d, out, finish) = sweep(&["--vary", "batch=1,2"], &mock);
        assert!(matches!(finish.unwrap(), Finish::Unavailable(r) if r.contains("no GPU")));
        assert!(!out.exists());
        assert_eq!(mock.specs().len(), 1);
    }

    #[test]
    fn missing_pytorch_later_is_recorded_and_fails_the_sweep() {
        let mock = MockRunner::new(|s| match dense(s).batch {
            1 => Outcome::Ok { peak: 1 << 20 },
            _ => Outcome::Unavailable,
        });
        let (_d, _out, finish) = sweep(&["--vary", "batch=1,2"], &mock);
        let Finish::Done { series, .. } = finish.unwrap() else {
            panic!()
        };
        assert_eq!(series.trials[1].status, TrialStatus::Unavailable);
        assert!(failed(&series));
    }

    #[test]
    fn a_grid_walks_one_variable_at_a_time_and_loads_set_their_values() {
        let mock = MockRunner::new(|_| Outcome::Ok { peak: 1 << 20 });
        let (_d, _out, finish) = sweep(&["--vary", "batch=1,2", "--vary", "context=8,16"], &mock);
        assert!(matches!(finish.unwrap(), Finish::Done { .. }));
        let cells: Vec<(u64, u64)> = mock
            .specs()
            .iter()
            .map(|s| (dense(s).batch, dense(s).context))
            .collect();
        assert_eq!(cells, [(1, 8), (1, 16), (2, 16), (2, 8)]);

        let dir = tempfile::tempdir().unwrap();
        let loads = dir.path().join("loads.json");
        std::fs::write(
            &loads,
            r#"{"loads": [{"name": "short", "batch": 1, "context": 8}, {"name": "long", "batch": 4, "context": 512}]}"#,
        )
        .unwrap();
        let mock = MockRunner::new(|_| Outcome::Ok { peak: 1 << 20 });
        let (_d, _out, finish) = sweep(&["--loads", loads.to_str().unwrap()], &mock);
        let Finish::Done { series, .. } = finish.unwrap() else {
            panic!()
        };
        let cells: Vec<(u64, u64)> = mock
            .specs()
            .iter()
            .map(|s| (dense(s).batch, dense(s).context))
            .collect();
        assert_eq!(cells, [(1, 8), (4, 512)]);
        assert_eq!(series.trials[1].load.as_deref(), Some("long"));
        assert_eq!(series.mode, SweepMode::Loads);
    }

    #[test]
    fn processes_run_the_same_spec_in_fresh_workers() {
        let mock = MockRunner::new(|_| Outcome::Ok { peak: 1 << 20 });
        let (_d, _out, finish) = sweep(&["--processes", "3"], &mock);
        let Finish::Done { series, .. } = finish.unwrap() else {
            panic!()
        };
        assert_eq!(mock.specs().len(), 3);
        assert!(mock.specs().windows(2).all(|w| w[0] == w[1]));
        assert!(series.protocol.contains("3 fresh processes"));
    }

    #[test]
    fn allocator_settings_are_compared_in_fresh_trials_at_each_value() {
        use crate::schema::alloc_conf::AllocConf;
        // Expandable segments reserve 10% less in this mock.
        let mut calls = 0u64;
        let mock = MockRunner::new(|s| {
            calls += 1;
            let peak = 1_000_000 * dense(s).batch;
            Outcome::Ok {
                peak: if calls > 2 { peak / 10 * 9 } else { peak },
            }
        });
        let (_d, out, finish) = sweep(
            &[
                "--vary",
                "alloc_conf=default,expandable_segments",
                "--vary",
                "batch=1,2",
            ],
            &mock,
        );
        let Finish::Done { series, .. } = finish.unwrap() else {
            panic!()
        };
        let (e, d) = (
            Some(AllocConf::ExpandableSegments),
            Some(AllocConf::Default),
        );
        assert_eq!(mock.alloc_confs(), [d, d, e, e]);
        let batches: Vec<u64> = mock.specs().iter().map(|s| dense(s).batch).collect();
        assert_eq!(batches, [1, 2, 2, 1], "neighbours differ by one variable");
        assert_eq!(series.mode, SweepMode::AllocConf);
        assert!(series.identical_across_trials);
        assert!(series.fit.is_none(), "no fit across two allocators");
        let rows = series.alloc_conf_rows();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].value, Some((Variable::Batch, 1)));
        assert!((rows[1].change(1).unwrap() + 0.1).abs() < 1e-9);
        let on_disk = on_disk(&out);
        assert_eq!(
            on_disk.alloc_confs,
            [AllocConf::Default, AllocConf::ExpandableSegments]
        );
        assert_eq!(
            on_disk.trials[2].values["alloc-conf"],
            "expandable_segments"
        );
        let table = super::super::render::table(&series, &out);
        assert!(table.contains("allocator settings compared"), "{table}");
        assert!(table.contains("(-10.0%)"), "{table}");

        // The settings alone: one trial each.
        let mock = MockRunner::new(|_| Outcome::Ok { peak: 1 << 20 });
        let (_d, _out, finish) = sweep(&["--vary", "alloc_conf=default,cudaMallocAsync"], &mock);
        assert!(matches!(finish.unwrap(), Finish::Done { .. }));
        assert_eq!(
            mock.alloc_confs(),
            [Some(AllocConf::Default), Some(AllocConf::CudaMallocAsync)]
        );
    }

    #[test]
    fn an_allocator_a_b_refuses_what_it_cannot_compare() {
        let refused = |args: &[&str]| {
            let mut argv = args.to_vec();
            argv.extend(["--output", "/tmp/never-written.json"]);
            plan_of(&argv).unwrap_err().to_string()
        };
        let ab = "alloc_conf=default,expandable_segments";
        assert!(refused(&["--vary", ab, "--alloc-conf", "default"]).contains("both set"));
        assert!(
            refused(&["--vary", ab, "--vary", "batch=1..8", "--search", "frontier"])
                .contains("--alloc-conf SETTING")
        );
        assert!(
            refused(&[
                "--vary",
                ab,
                "--vary",
                "batch=1,2",
                "--vary",
                "context=8,16"
            ])
            .contains("at most one listed dimension")
        );
    }
}
