//! Runs a sweep plan through a [`TrialRunner`]: each trial a fresh worker, recorded in the series
//! and the series rewritten after each one; the stop rules (a crash, a timeout or an interruption
//! is not an out-of-memory), the identical-conditions check, the frontier search and the fit.
//! Pure orchestration: with a mock runner it is unit-tested without Python.

use anyhow::{Result, bail};
use serde_json::{Map, Value, json};
use std::time::Instant;

use crate::cards;
use crate::measure::build::TrialOutcome;
use crate::measure::trial::TrialRunner;
use crate::prediction;
use crate::progress::Progress;
use crate::schema::alloc_conf::ALLOC_CONF;
use crate::schema::dimensions::Variable;
use crate::schema::fit;
use crate::schema::measure::MeasureResult;
use crate::schema::series::{
    CardFrontier, FitRecord, FrontierRecord, PointKind, Series, SeriesStatus, SweepMode,
    TrialRecord, TrialStatus, Writer,
};
use crate::signals::Stop;
use crate::sweep::plan::SweepPlan;
use crate::sweep::search::{self, Bounds, Probe};
use crate::sweep::vary::{Values, Vary, grid_order};
use crate::units::Bytes;
use crate::workload::plan::MeasurePlan;

/// How a sweep ended.
pub enum Finish {
    /// The series as written (complete, interrupted or terminated), and, when the requested path
    /// could not be written, why and where the series is instead.
    Done {
        series: Box<Series>,
        moved: Option<(crate::output::OutputError, std::path::PathBuf)>,
    },
    /// PyTorch or a GPU is missing: the first trial measured nothing, no file was written.
    Unavailable(String),
}

/// What a trial told the driver.
enum Step {
    Done(bool),
    Unavailable(String),
    Stop,
}

struct Sweep<'a> {
    plan: &'a SweepPlan,
    runner: &'a mut dyn TrialRunner,
    series: Series,
    writer: Writer,
    progress: &'a dyn Progress,
    base_spec: Option<Map<String, Value>>,
    /// A stop signal seen between two trials.
    stopped_between: Option<Stop>,
}

/// Runs every trial of `plan`, writing the series through `writer` after each one.
pub fn run(
    plan: &SweepPlan,
    runner: &mut dyn TrialRunner,
    writer: Writer,
    progress: &dyn Progress,
) -> Result<Finish> {
    let mut sweep = Sweep {
        plan,
        runner,
        series: new_series(plan),
        writer,
        progress,
        base_spec: None,
        stopped_between: None,
    };
    if let Some(limit) = &plan.limit
        && let Some(device) = plan.base.devices.first()
        && let Some(total) = sweep.runner.device_total(&plan.base.python, device)
        && limit.bytes > total
    {
        bail!(
            "{} is more than {device} has ({} as PyTorch declares it): an emulated card must be smaller than the real one",
            limit.source,
            Bytes(total).both()
        );
    }
    let driven = sweep.drive();
    conclude(driven, sweep.series, sweep.writer, sweep.stopped_between)
}

/// How a sweep ends, measured or predicted: a failure saves what was already written as aborted;
/// otherwise the status from the stop (between trials, or inside one), the fit of a list or
/// frontier, and the series saved a last time.
pub(crate) fn conclude(
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

/// A series about to run `plan`: its header, no trial yet.
pub(crate) fn new_series(plan: &SweepPlan) -> Series {
    let now = chrono::Utc::now().to_rfc3339();
    Series {
        schema: crate::schema::series::SCHEMA.into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        started_at: now.clone(),
        updated_at: now,
        status: SeriesStatus::Running,
        mode: plan.mode,
        kind: PointKind::Measured,
        target: None,
        varied: plan.vary.iter().map(|v| v.variable).collect(),
        alloc_confs: plan.alloc_confs.clone(),
        base: Map::new(),
        identical_across_trials: true,
        protocol: if plan.mode == SweepMode::Processes {
            format!(
                "the same configuration in {} fresh processes (not {} repeats in one process)",
                plan.processes, plan.processes
            )
        } else {
            "fresh process per trial".into()
        },
        limit: plan.limit.clone(),
        trials: Vec::new(),
        frontier: None,
        fit: None,
        notes: Vec::new(),
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

pub(crate) fn one_value(variable: Variable, v: u64) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(variable.name().to_string(), json!(v));
    m
}

impl Sweep<'_> {
    /// Runs the trials of the mode; `Ok(Some(reason))` when PyTorch or a GPU is missing.
    fn drive(&mut self) -> Result<Option<String>> {
        macro_rules! step {
            ($e:expr) => {
                match $e? {
                    Step::Unavailable(reason) => return Ok(Some(reason)),
                    Step::Stop => return Ok(None),
                    Step::Done(ok) => ok,
                }
            };
        }
        let plan = self.plan;
        let base = &plan.base;
        match plan.mode {
            SweepMode::List => {
                let v = &plan.vary[0];
                let Values::List(values) = &v.values else {
                    bail!("internal: a list sweep without a list")
                };
                self.progress.set_length(values.len() as u64);
                for &value in values {
                    let p = base.with(v.variable, value)?;
                    step!(self.trial(&p, one_value(v.variable, value), None));
                }
            }
            SweepMode::Grid => {
                let (a, b) = (&plan.vary[0], &plan.vary[1]);
                let (Values::List(outer), Values::List(inner)) = (&a.values, &b.values) else {
                    bail!("internal: a grid without two lists")
                };
                let cells = grid_order(outer, inner);
                self.progress.set_length(cells.len() as u64);
                for (x, y) in cells {
                    let p = base.with(a.variable, x)?.with(b.variable, y)?;
                    let mut values = one_value(a.variable, x);
                    values.insert(b.variable.name().to_string(), json!(y));
                    step!(self.trial(&p, values, None));
                }
            }
            SweepMode::Processes => {
                self.progress.set_length(plan.processes);
                for i in 0..plan.processes {
                    let mut values = Map::new();
                    values.insert("process".into(), json!(i));
                    step!(self.trial(base, values, None));
                }
            }
            SweepMode::Loads => {
                self.progress.set_length(plan.loads.len() as u64);
                for load in &plan.loads {
                    let mut p = base.clone();
                    let mut values = Map::new();
                    for &(variable, n) in &load.values {
                        p = p.with(variable, n)?;
                        values.insert(variable.name().to_string(), json!(n));
                    }
                    step!(self.trial(&p, values, Some(load.name.clone())));
                }
            }
            SweepMode::AllocConf => {
                // The settings outside, the listed values inside, walked so that neighbours
                // differ by one of the two.
                let settings: Vec<u64> = (0..plan.alloc_confs.len() as u64).collect();
                let (variable, list) = match plan.vary.first() {
                    Some(Vary {
                        variable,
                        values: Values::List(list),
                    }) => (Some(*variable), list.clone()),
                    Some(_) => bail!("internal: an allocator A/B over a range"),
                    None => (None, vec![0]),
                };
                let cells = grid_order(&settings, &list);
                self.progress.set_length(cells.len() as u64);
                for (s, x) in cells {
                    let setting = plan.alloc_confs[s as usize];
                    let mut p = base.with_alloc_conf(setting);
                    let mut values = Map::new();
                    values.insert(ALLOC_CONF.into(), json!(setting.name()));
                    if let Some(variable) = variable {
                        p = p.with(variable, x)?;
                        values.insert(variable.name().to_string(), json!(x));
                    }
                    step!(self.trial(&p, values, None));
                }
            }
            SweepMode::Frontier => return self.frontier(),
        }
        Ok(None)
    }

    fn frontier(&mut self) -> Result<Option<String>> {
        let plan = self.plan;
        let Some((variable, bounds)) = plan.bounds() else {
            bail!("internal: a frontier without a range")
        };
        // The capacity the peaks are compared with: the emulated limit, else the device's
        // total_memory as PyTorch declares it.
        let capacity = match &plan.limit {
            Some(l) => Some(l.bytes),
            None => self.runner.device_total(
                &plan.base.python,
                plan.base.devices.first().map_or("cuda:0", String::as_str),
            ),
        };
        let (hint, predictions) = match capacity {
            Some(c) if !plan.no_prediction => hint(self.runner, &plan.base, variable, bounds, c),
            _ => (None, 0),
        };
        let mut stop: Option<Result<Option<String>>> = None;
        let found = search::find_guided(bounds, hint, capacity, |value| {
            if stop.is_some() {
                return Probe {
                    ok: false,
                    peak: None,
                };
            }
            let result = plan
                .base
                .with(variable, value)
                .and_then(|p| self.trial(&p, one_value(variable, value), None));
            let last = self.series.trials.last();
            let peak = last.and_then(|t| t.peak_reserved_bytes);
            let ok = match result {
                Ok(Step::Done(ok)) => {
                    // Only an out-of-memory tells where the frontier is: stop on anything else.
                    if last.is_some_and(TrialRecord::is_broken) {
                        stop = Some(Ok(None));
                    }
                    ok
                }
                Ok(Step::Unavailable(reason)) => {
                    stop = Some(Ok(Some(reason)));
                    false
                }
                Ok(Step::Stop) => {
                    stop = Some(Ok(None));
                    false
                }
                Err(e) => {
                    stop = Some(Err(e));
                    false
                }
            };
            Probe {
                ok,
                peak: if ok { peak } else { None },
            }
        });
        if let Some(s) = stop {
            let s = s?;
            if s.is_some() {
                return Ok(s);
            }
            self.series.notes.push("the search stopped early: a trial crashed, timed out, was stopped or failed for a reason other than out-of-memory".into());
        }
        self.series.frontier = Some(FrontierRecord {
            variable,
            last_success: found.last_success,
            first_failure: found.first_failure,
            resolution: bounds.resolution,
            trials: found.trials.len(),
            strategy: match (hint, capacity) {
                (Some(_), _) => format!(
                    "prediction hint ({predictions} prediction(s) of the workload), then measured-peak curve"
                ),
                (None, Some(_)) => "measured-peak curve".into(),
                (None, None) => "grow-then-bisect".into(),
            },
            hint,
            predictions,
            budget_exhausted: found.budget_exhausted,
            deciding: None,
        });
        Ok(None)
    }

    /// Runs one trial and records it; `Done(true)` when it succeeded.
    fn trial(
        &mut self,
        plan: &MeasurePlan,
        values: Map<String, Value>,
        load: Option<String>,
    ) -> Result<Step> {
        if let Some(signal) = self.runner.stop_requested() {
            self.stopped_between = Some(signal);
            self.series.notes.push(format!(
                "stopped by {} before trial {}",
                signal.name(),
                self.series.trials.len() + 1
            ));
            return Ok(Step::Stop);
        }
        let kv_estimates = prediction::kv_estimates(plan)?;
        let mut trial = plan.trial();
        trial.forward_output = false;
        if let Some(limit) = &self.plan.limit {
            trial.spec.memory_limit_bytes = Some(limit.bytes);
        }
        self.check_identical(&trial.spec.to_map(), &values)?;
        let index = self.series.trials.len();
        let label = values
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .chain(load.clone())
            .collect::<Vec<_>>()
            .join(" ");
        let last = self.series.trials.last().map_or(String::new(), |t| {
            let peak = t.peak_reserved_bytes.map_or(String::new(), |b| {
                format!(", peak reserved {:.3} GiB", Bytes(b).gib())
            });
            format!(" (last: {}{peak})", crate::sweep::render::status_label(t))
        });
        self.progress.set_message(&format!("running {label}{last}"));
        let began = Instant::now();
        let outcome = self.runner.run(&trial, self.progress)?;
        let duration_s = began.elapsed().as_secs_f64();
        let record = match outcome {
            TrialOutcome::Unavailable { reason } => {
                if self.series.trials.is_empty() {
                    return Ok(Step::Unavailable(reason));
                }
                TrialRecord {
                    index,
                    kind: PointKind::Measured,
                    values,
                    load,
                    status: TrialStatus::Unavailable,
                    out_of_memory: false,
                    peak_allocated_bytes: None,
                    peak_reserved_bytes: None,
                    end_allocated_bytes: None,
                    end_reserved_bytes: None,
                    failed_phase: None,
                    error: Some(reason),
                    duration_s,
                    result: None,
                    prediction: None,
                }
            }
            TrialOutcome::Measured(mut result) => {
                crate::schema::check::kv_cache(&mut result, &kv_estimates);
                summarize(index, values, load, *result, duration_s)
            }
        };
        let status = record.status;
        self.progress.println(&format!(
            "trial {:>3} {label:<28} {:<11} peak reserved {}",
            index + 1,
            crate::sweep::render::status_label(&record),
            record
                .peak_reserved_bytes
                .map_or("null".into(), |b| format!("{:.3} GiB", Bytes(b).gib()))
        ));
        self.series.trials.push(record);
        self.series.updated_at = chrono::Utc::now().to_rfc3339();
        self.writer.save(&self.series)?;
        self.progress.inc();
        Ok(match status {
            TrialStatus::Ok | TrialStatus::Failed => Step::Done(status.is_ok()),
            TrialStatus::Interrupted | TrialStatus::Terminated => Step::Stop,
            _ => Step::Done(false),
        })
    }

    /// Every option but the varied ones must be identical across trials.
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
            Some(base) if *base != spec && self.series.mode != SweepMode::Loads => {
                self.series.identical_across_trials = false;
                bail!("internal: a trial differs from the first in more than the varied dimension");
            }
            Some(_) => {}
        }
        Ok(())
    }
}

fn summarize(
    index: usize,
    values: Map<String, Value>,
    load: Option<String>,
    r: MeasureResult,
    duration_s: f64,
) -> TrialRecord {
    let last = r.phases.iter().rev().find(|p| !p.devices.is_empty());
    TrialRecord {
        index,
        kind: PointKind::Measured,
        values,
        load,
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
        duration_s,
        result: Some(r),
        prediction: None,
    }
}

/// Where the predicted peak reaches `capacity`: the workload is predicted at the range's ends
/// and middle (three predictions, fewer when the first already says), a curve is fitted through
/// them and solved, snapped to the grid. Returns the hint and how many predictions it took.
fn hint(
    runner: &mut dyn TrialRunner,
    base: &MeasurePlan,
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
        let Ok(plan) = base.with(variable, v) else {
            continue;
        };
        count += 1;
        let Some(peak) = runner.predicted_peak(&plan) else {
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
    fn sweep<F: FnMut(&WorkerSpec) -> Outcome>(
        args: &[&str],
        mock: &mut MockRunner<F>,
    ) -> (tempfile::TempDir, std::path::PathBuf, Result<Finish>) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("series.json");
        let p = plan(args, &out);
        let finish = run(
            &p,
            mock,
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
        let mut mock = MockRunner::new(|s| Outcome::Ok {
            peak: 1_000_000 * dense(s).batch,
        });
        let (_d, out, finish) = sweep(&["--vary", "batch=1,2,4,8"], &mut mock);
        let Finish::Done { series, .. } = finish.unwrap() else {
            panic!("unavailable")
        };
        let batches: Vec<u64> = mock.specs.iter().map(|s| dense(s).batch).collect();
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

    #[test]
    fn the_series_is_rewritten_after_every_trial() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("series.json");
        let seen = std::cell::RefCell::new(Vec::new());
        let mut mock = MockRunner::new(|_| {
            // What is on disk when the next trial starts.
            seen.borrow_mut().push(if out.exists() {
                Some(on_disk(&out).trials.len())
            } else {
                None
            });
            Outcome::Ok { peak: 1 << 20 }
        });
        let p = plan(&["--vary", "batch=1,2,3"], &out);
        run(
            &p,
            &mut mock,
            Writer::new(&out).unwrap(),
            &crate::progress::NoProgress,
        )
        .unwrap();
        assert_eq!(*seen.borrow(), [None, Some(1), Some(2)]);
        assert_eq!(on_disk(&out).status, SeriesStatus::Complete);
    }

    #[test]
    fn out_of_memory_is_a_finding_and_the_frontier_closes_within_the_resolution() {
        // peak = 10 MB + 1 MB per context unit: the limit of 300 MB is reached at 290.
        let peak = |c: u64| 10_000_000 + 1_000_000 * c;
        let mut mock = MockRunner::new(|s| {
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
            &mut mock,
        );
        let Finish::Done { series, .. } = finish.unwrap() else {
            panic!()
        };
        let f = series.frontier.as_ref().unwrap();
        assert_eq!((f.last_success, f.first_failure), (Some(290), Some(291)));
        assert_eq!(f.trials, series.trials.len());
        assert!(series.trials.iter().any(|t| t.out_of_memory));
        assert!(
            mock.specs
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
                &mut mock,
            );
            let Finish::Done { series, .. } = finish.unwrap() else {
                panic!()
            };
            let broken_trials = series.trials.iter().filter(|t| t.status == status).count();
            assert_eq!(broken_trials, 1, "the search stops at the first {status}");
            assert_eq!(series.trials.last().unwrap().status, status);
            assert!(!series.trials.last().unwrap().out_of_memory);
            assert!(series.notes.iter().any(|n| n.contains("stopped early")));
            assert!(failed(&series));
        }
    }

    #[test]
    fn an_interruption_stops_the_sweep_and_keeps_the_finished_trials() {
        let mut mock = MockRunner::new(|s| match dense(s).batch {
            4 => Outcome::Interrupted,
            b => Outcome::Ok { peak: b << 20 },
        });
        let (_d, out, finish) = sweep(&["--vary", "batch=1,2,4,8"], &mut mock);
        let Finish::Done { series, .. } = finish.unwrap() else {
            panic!()
        };
        assert_eq!(mock.specs.len(), 3, "batch 8 never ran");
        assert_eq!(series.status, SeriesStatus::Interrupted);
        assert_eq!(on_disk(&out).status, SeriesStatus::Interrupted);
        assert_eq!(on_disk(&out).trials.len(), 3);
        assert!(failed(&series));
    }

    #[test]
    fn a_failure_other_than_out_of_memory_fails_the_sweep() {
        let mut mock = MockRunner::new(|s| match dense(s).batch {
            1 => Outcome::Ok { peak: 1 << 20 },
            _ => Outcome::Error,
        });
        let (_d, _out, finish) = sweep(&["--vary", "batch=1,2"], &mut mock);
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
        let (_d, out, finish) = sweep(
            &["--vary", "batch=1,2", "--memory-limit", "8GiB"],
            &mut mock,
        );
        let err = finish.err().expect("refused").to_string();
        assert!(err.contains("more than cuda:0 has"), "{err}");
        assert!(mock.specs.is_empty() && !out.exists());
    }

    #[test]
    fn a_signal_between_trials_closes_the_series() {
        for (stop, status) in [
            (Stop::Interrupt, SeriesStatus::Interrupted),
            (Stop::Terminate(libc::SIGHUP), SeriesStatus::Terminated),
        ] {
            let mut mock = MockRunner::new(|_| Outcome::Ok { peak: 1 << 20 });
            mock.stop_after = Some((2, stop));
            let (_d, out, finish) = sweep(&["--vary", "batch=1,2,4,8"], &mut mock);
            let Finish::Done { series, .. } = finish.unwrap() else {
                panic!()
            };
            assert_eq!(mock.specs.len(), 2, "no trial starts after the signal");
            assert_eq!(series.status, status);
            let disk = on_disk(&out);
            assert_eq!((disk.status, disk.trials.len()), (status, 2));
            assert!(disk.notes.iter().any(|n| n.contains(stop.name())));
            assert!(failed(&series));
        }
    }

    #[test]
    fn missing_pytorch_at_the_first_trial_writes_nothing() {
        let mut mock = MockRunner::new(|_| Outcome::Unavailable);
        let (_d, out, finish) = sweep(&["--vary", "batch=1,2"], &mut mock);
        assert!(matches!(finish.unwrap(), Finish::Unavailable(r) if r.contains("no GPU")));
        assert!(!out.exists());
        assert_eq!(mock.specs.len(), 1);
    }

    #[test]
    fn missing_pytorch_later_is_recorded_and_fails_the_sweep() {
        let mut mock = MockRunner::new(|s| match dense(s).batch {
            1 => Outcome::Ok { peak: 1 << 20 },
            _ => Outcome::Unavailable,
        });
        let (_d, _out, finish) = sweep(&["--vary", "batch=1,2"], &mut mock);
        let Finish::Done { series, .. } = finish.unwrap() else {
            panic!()
        };
        assert_eq!(series.trials[1].status, TrialStatus::Unavailable);
        assert!(failed(&series));
    }

    #[test]
    fn a_grid_walks_one_variable_at_a_time_and_loads_set_their_values() {
        let mut mock = MockRunner::new(|_| Outcome::Ok { peak: 1 << 20 });
        let (_d, _out, finish) = sweep(
            &["--vary", "batch=1,2", "--vary", "context=8,16"],
            &mut mock,
        );
        assert!(matches!(finish.unwrap(), Finish::Done { .. }));
        let cells: Vec<(u64, u64)> = mock
            .specs
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
        let mut mock = MockRunner::new(|_| Outcome::Ok { peak: 1 << 20 });
        let (_d, _out, finish) = sweep(&["--loads", loads.to_str().unwrap()], &mut mock);
        let Finish::Done { series, .. } = finish.unwrap() else {
            panic!()
        };
        let cells: Vec<(u64, u64)> = mock
            .specs
            .iter()
            .map(|s| (dense(s).batch, dense(s).context))
            .collect();
        assert_eq!(cells, [(1, 8), (4, 512)]);
        assert_eq!(series.trials[1].load.as_deref(), Some("long"));
        assert_eq!(series.mode, SweepMode::Loads);
    }

    #[test]
    fn processes_run_the_same_spec_in_fresh_workers() {
        let mut mock = MockRunner::new(|_| Outcome::Ok { peak: 1 << 20 });
        let (_d, _out, finish) = sweep(&["--processes", "3"], &mut mock);
        let Finish::Done { series, .. } = finish.unwrap() else {
            panic!()
        };
        assert_eq!(mock.specs.len(), 3);
        assert!(mock.specs.windows(2).all(|w| w[0] == w[1]));
        assert!(series.protocol.contains("3 fresh processes"));
    }

    #[test]
    fn allocator_settings_are_compared_in_fresh_trials_at_each_value() {
        use crate::schema::alloc_conf::AllocConf;
        // Expandable segments reserve 10% less in this mock.
        let mut calls = 0u64;
        let mut mock = MockRunner::new(|s| {
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
            &mut mock,
        );
        let Finish::Done { series, .. } = finish.unwrap() else {
            panic!()
        };
        let (e, d) = (
            Some(AllocConf::ExpandableSegments),
            Some(AllocConf::Default),
        );
        assert_eq!(mock.alloc_confs, [d, d, e, e]);
        let batches: Vec<u64> = mock.specs.iter().map(|s| dense(s).batch).collect();
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
        let mut mock = MockRunner::new(|_| Outcome::Ok { peak: 1 << 20 });
        let (_d, _out, finish) =
            sweep(&["--vary", "alloc_conf=default,cudaMallocAsync"], &mut mock);
        assert!(matches!(finish.unwrap(), Finish::Done { .. }));
        assert_eq!(
            mock.alloc_confs,
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
