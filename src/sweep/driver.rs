//! Runs a sweep plan through a [`TrialRunner`]: each trial a fresh worker, recorded in the series
//! and the series rewritten after each one; the stop rules (a crash, a timeout or an interruption
//! is not an out-of-memory), the identical-conditions check, the frontier search and the fit.
//! Pure orchestration: with a mock runner it is unit-tested without Python.

use anyhow::{Result, bail};
use indicatif::ProgressBar;
use serde_json::{Map, Value, json};
use std::time::Instant;

use super::fit;
use super::plan::SweepPlan;
use super::search::{self, Bounds, Probe};
use super::series::{
    CardFrontier, FitRecord, FrontierRecord, Series, SeriesStatus, SweepMode, TrialRecord,
    TrialStatus, Writer,
};
use super::vary::{Values, grid_order};
use crate::cards;
use crate::exit;
use crate::measure::dimensions::Variable;
use crate::measure::plan::MeasurePlan;
use crate::measure::result::MeasureResult;
use crate::measure::trial::{TrialOutcome, TrialRunner};
use crate::prediction;
use crate::units::Bytes;

/// How a sweep ended.
pub enum Finish {
    /// The series as written (complete or interrupted).
    Done(Box<Series>),
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
    bar: &'a ProgressBar,
    base_spec: Option<Map<String, Value>>,
}

/// Runs every trial of `plan`, writing the series through `writer` after each one.
pub fn run(
    plan: &SweepPlan,
    runner: &mut dyn TrialRunner,
    writer: Writer,
    bar: &ProgressBar,
) -> Result<Finish> {
    let now = chrono::Utc::now().to_rfc3339();
    let mut sweep = Sweep {
        plan,
        runner,
        series: Series {
            schema: super::series::SCHEMA.into(),
            tool_version: env!("CARGO_PKG_VERSION").into(),
            started_at: now.clone(),
            updated_at: now,
            status: SeriesStatus::Running,
            mode: plan.mode,
            varied: plan.vary.iter().map(|v| v.variable).collect(),
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
        },
        writer,
        bar,
        base_spec: None,
    };
    let unavailable = match sweep.drive() {
        Ok(u) => u,
        Err(e) => {
            if sweep.writer.written() {
                sweep.series.status = SeriesStatus::Aborted;
                sweep.series.notes.push(format!("aborted: {e:#}"));
                let _ = sweep.writer.save(&sweep.series);
            }
            return Err(e);
        }
    };
    if let Some(reason) = unavailable {
        return Ok(Finish::Unavailable(reason));
    }
    let s = &mut sweep.series;
    s.status = if s
        .trials
        .iter()
        .any(|t| t.status == TrialStatus::Interrupted)
    {
        SeriesStatus::Interrupted
    } else {
        SeriesStatus::Complete
    };
    if let (Some(var), SweepMode::List | SweepMode::Frontier) = (s.varied.first().copied(), s.mode)
    {
        s.fit = fit_record(s, var);
    }
    s.updated_at = chrono::Utc::now().to_rfc3339();
    sweep.writer.save(&sweep.series)?;
    Ok(Finish::Done(Box::new(sweep.series)))
}

/// 3 when a trial crashed, timed out, was interrupted or found PyTorch missing; else 0 (an
/// out-of-memory is a finding).
pub fn exit_status(series: &Series) -> u8 {
    let broken = series.trials.iter().any(|t| {
        matches!(
            t.status,
            TrialStatus::Crashed
                | TrialStatus::Timeout
                | TrialStatus::Interrupted
                | TrialStatus::Unavailable
        )
    });
    if broken {
        exit::WORKLOAD_FAILED
    } else {
        exit::OK
    }
}

fn one_value(variable: Variable, v: u64) -> Map<String, Value> {
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
                self.bar.set_length(values.len() as u64);
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
                self.bar.set_length(cells.len() as u64);
                for (x, y) in cells {
                    let p = base.with(a.variable, x)?.with(b.variable, y)?;
                    let mut values = one_value(a.variable, x);
                    values.insert(b.variable.name().to_string(), json!(y));
                    step!(self.trial(&p, values, None));
                }
            }
            SweepMode::Processes => {
                self.bar.set_length(plan.processes);
                for i in 0..plan.processes {
                    let mut values = Map::new();
                    values.insert("process".into(), json!(i));
                    step!(self.trial(base, values, None));
                }
            }
            SweepMode::Loads => {
                self.bar.set_length(plan.loads.len() as u64);
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
        let hint = capacity.and_then(|c| hint(&plan.base, variable, bounds, c));
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
                    // A crash or timeout is not an out-of-memory: stop searching on it.
                    if last.is_some_and(|t| !ok && t.status != TrialStatus::Failed) {
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
            self.series.notes.push("the search stopped early: a trial crashed, timed out or was interrupted (not an out-of-memory)".into());
        }
        self.series.frontier = Some(FrontierRecord {
            variable,
            last_success: found.last_success,
            first_failure: found.first_failure,
            resolution: bounds.resolution,
            trials: found.trials.len(),
            strategy: match (hint, capacity) {
                (Some(_), _) => "estimate-hint, then measured-peak curve".into(),
                (None, Some(_)) => "measured-peak curve".into(),
                (None, None) => "grow-then-bisect".into(),
            },
            hint,
            budget_exhausted: found.budget_exhausted,
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
        let prediction = prediction::for_plan(plan)?;
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
            format!(" (last: {}{peak})", super::render::status_label(t))
        });
        self.bar.set_message(format!("running {label}{last}"));
        let began = Instant::now();
        let outcome = self.runner.run(&trial, Some(self.bar))?;
        let duration_s = began.elapsed().as_secs_f64();
        let record = match outcome {
            TrialOutcome::Unavailable { reason, .. } => {
                if self.series.trials.is_empty() {
                    return Ok(Step::Unavailable(reason));
                }
                TrialRecord {
                    index,
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
                }
            }
            TrialOutcome::Measured(mut result) => {
                prediction.attach(&mut result);
                summarize(index, values, load, *result, duration_s)
            }
        };
        let status = record.status;
        self.bar.println(format!(
            "trial {:>3} {label:<28} {:<11} peak reserved {}",
            index + 1,
            super::render::status_label(&record),
            record
                .peak_reserved_bytes
                .map_or("null".into(), |b| format!("{:.3} GiB", Bytes(b).gib()))
        ));
        self.series.trials.push(record);
        self.series.updated_at = chrono::Utc::now().to_rfc3339();
        self.writer.save(&self.series)?;
        self.bar.inc(1);
        Ok(match status {
            TrialStatus::Ok | TrialStatus::Failed => Step::Done(status.is_ok()),
            TrialStatus::Interrupted => Step::Stop,
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
    }
}

/// The largest grid value whose predicted peak fits under `capacity` (the estimator's frontier).
fn hint(base: &MeasurePlan, variable: Variable, b: Bounds, capacity: u64) -> Option<u64> {
    let fits = |v: u64| -> Option<bool> {
        let plan = base.with(variable, v).ok()?;
        let prediction = prediction::for_plan(&plan).ok()?;
        Some(prediction.max_peak_reserved()? <= capacity)
    };
    if !fits(b.lo)? {
        return Some(b.lo);
    }
    let (mut lo, mut hi) = (b.lo, b.hi);
    if fits(hi)? {
        return Some(hi);
    }
    while let Some(mid) = search::grid_midpoint(&b, lo, hi) {
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

fn fit_record(series: &Series, variable: Variable) -> Option<FitRecord> {
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
    let overhead = series.max_outside_allocator();
    let cards = cards::catalog()
        .into_iter()
        .map(|card| {
            let (cap, source) = card.device_capacity();
            let usable = cap.get().saturating_sub(overhead.unwrap_or(0));
            let predicted = f.solve(usable as f64);
            let spread = 2.0 * f.residual_std_bytes;
            let range = match (
                f.solve(usable as f64 - spread),
                f.solve(usable as f64 + spread),
            ) {
                (Some(a), Some(b)) => Some((a, b)),
                _ => None,
            };
            CardFrontier {
                card: card.name,
                capacity_bytes: cap.get(),
                capacity_source: format!("{source:?}"),
                usable_bytes: usable,
                predicted,
                range,
                extrapolation: predicted.is_none_or(|p| p < f.x_min as f64 || p > f.x_max as f64),
            }
        })
        .collect();
    Some(FitRecord {
        variable,
        fit: f,
        overhead_bytes: overhead,
        overhead_source: match overhead {
            Some(_) => "largest memory outside PyTorch's allocator seen by NVML in these trials".into(),
            None => "not measured (no NVML view): the card capacities are not reduced; add the CUDA context and libraries yourself".into(),
        },
        cards,
    })
}
