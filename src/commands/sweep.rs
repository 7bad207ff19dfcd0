//! `iteragpu sweep`: one variable at a time, a fresh worker per trial, the frontier between
//! success and out-of-memory, grids, reference loads and repeated processes, and a fit.

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Map, Value, json};
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::time::Instant;

use crate::cards;
use crate::cli::{MeasureArgs, Search, SweepArgs};
use crate::commands::measure::{self, Prediction};
use crate::exit;
use crate::measure::result::MeasureResult;
use crate::measure::{Trial, TrialOutcome, run_trial};
use crate::sweep::fit;
use crate::sweep::plan::{self, Values};
use crate::sweep::search::{self, Bounds, Probe};
use crate::sweep::series::{
    CardFrontier, FitRecord, FrontierRecord, Limit, Series, TrialRecord, Writer,
};
use crate::units::Bytes;

/// Sets one varied dimension on a copy of the measure arguments.
fn with_value(base: &MeasureArgs, variable: &str, value: u64) -> Result<MeasureArgs> {
    let mut a = clone_args(base);
    match variable {
        "batch" => a.batch = value,
        "context" => a.context = value,
        "width" => a.width = value,
        "depth" => a.depth = value,
        "prompt-tokens" => a.prompt_tokens = value,
        "new-tokens" => a.new_tokens = value,
        "steps" => a.steps = value,
        other => bail!(
            "`{other}` cannot be varied; choose one of {}",
            plan::VARIABLES.join(", ")
        ),
    }
    Ok(a)
}

fn clone_args(a: &MeasureArgs) -> MeasureArgs {
    MeasureArgs {
        workload: a.workload,
        script: a.script.clone(),
        script_args: a.script_args.clone(),
        device: a.device.clone(),
        batch: a.batch,
        context: a.context,
        width: a.width,
        depth: a.depth,
        dtype: a.dtype,
        warmup: a.warmup,
        repeats: a.repeats,
        seed: a.seed,
        empty_cache: a.empty_cache,
        model: a.model.clone(),
        prompt_tokens: a.prompt_tokens,
        new_tokens: a.new_tokens,
        cache: a.cache,
        window: a.window,
        task: a.task,
        steps: a.steps,
        optimizer: a.optimizer,
        precision: a.precision,
        gradient_checkpointing: a.gradient_checkpointing,
        lora_rank: a.lora_rank,
        lora_targets: a.lora_targets.clone(),
        whole_loop: a.whole_loop,
        output: a.output.clone(),
        python: a.python.clone(),
        timeout: a.timeout,
        json: a.json,
    }
}

/// The spec key a varied dimension changes.
fn spec_key(variable: &str) -> String {
    variable.replace('-', "_")
}

struct Runner<'a> {
    args: &'a SweepArgs,
    limit: Option<Limit>,
    series: Series,
    writer: Writer,
    bar: ProgressBar,
    base_spec: Option<Map<String, Value>>,
}

enum Step {
    Done(bool),
    Unavailable(String),
    Stop,
}

impl Runner<'_> {
    /// Runs one trial and records it; `Done(true)` when it succeeded.
    fn trial(
        &mut self,
        args: &MeasureArgs,
        values: Map<String, Value>,
        load: Option<String>,
    ) -> Result<Step> {
        let (mut trial, prediction): (Trial, Prediction) = measure::build(args)?;
        trial.forward_output = false;
        if let Some(limit) = &self.limit {
            trial.spec["memory_limit_bytes"] = json!(limit.bytes);
        }
        self.check_identical(&trial, &values)?;
        let index = self.series.trials.len();
        let label = values
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .chain(load.clone())
            .collect::<Vec<_>>()
            .join(" ");
        let last = self.series.trials.last().map_or(String::new(), |t| {
            let status = if t.out_of_memory {
                "out-of-memory"
            } else {
                t.status.as_str()
            };
            let peak = t.peak_reserved_bytes.map_or(String::new(), |b| {
                format!(", peak reserved {:.3} GiB", Bytes(b).gib())
            });
            format!(" (last: {status}{peak})")
        });
        self.bar.set_message(format!("running {label}{last}"));
        let began = Instant::now();
        let outcome = run_trial(&trial, measure::interrupted(), Some(&self.bar))?;
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
                    status: "unavailable".into(),
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
        let ok = record.status == "ok";
        let status = record.status.clone();
        self.bar.println(format!(
            "trial {:>3} {label:<28} {:<11} peak reserved {}",
            index + 1,
            if record.out_of_memory {
                "out-of-memory".to_string()
            } else {
                status.clone()
            },
            record
                .peak_reserved_bytes
                .map_or("null".into(), |b| format!("{:.3} GiB", Bytes(b).gib()))
        ));
        self.series.trials.push(record);
        self.series.updated_at = chrono::Utc::now().to_rfc3339();
        self.writer.save(&self.series)?;
        self.bar.inc(1);
        Ok(match status.as_str() {
            "ok" | "failed" => Step::Done(ok),
            "interrupted" => Step::Stop,
            _ => Step::Done(false),
        })
    }

    /// Every option but the varied ones must be identical across trials.
    fn check_identical(&mut self, trial: &Trial, values: &Map<String, Value>) -> Result<()> {
        let mut spec = trial.spec.as_object().cloned().unwrap_or_default();
        for k in values.keys() {
            spec.remove(&spec_key(k));
        }
        if spec.remove("script_args").is_some() {
            // The script's arguments carry the varied values: compare their template instead.
            spec.insert(
                "script_args_template".into(),
                json!(self.args.measure.script_args),
            );
        }
        match &self.base_spec {
            None => {
                self.series.base = spec.clone();
                self.base_spec = Some(spec);
            }
            Some(base) if *base != spec && self.series.mode != "loads" => {
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
    let readings = || r.phases.iter().flat_map(|p| p.devices.iter());
    let last = r.phases.iter().rev().find(|p| !p.devices.is_empty());
    TrialRecord {
        index,
        values,
        load,
        status: r.status.clone(),
        out_of_memory: r.failure.as_ref().is_some_and(|f| f.out_of_memory),
        peak_allocated_bytes: readings().filter_map(|d| d.peak_allocated_bytes).max(),
        peak_reserved_bytes: readings().filter_map(|d| d.peak_reserved_bytes).max(),
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

fn one_value(variable: &str, v: u64) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(variable.to_string(), json!(v));
    m
}

fn limit(args: &SweepArgs) -> Result<Option<Limit>> {
    let method = "torch.cuda.set_per_process_memory_fraction((limit − memory outside PyTorch's allocator measured in the same process) ÷ total_memory)".to_string();
    Ok(match (&args.memory_limit, &args.card) {
        (Some(b), _) => Some(Limit {
            bytes: b.get(),
            source: format!("--memory-limit {}", b.grouped()),
            emulated: true,
            method,
        }),
        (None, Some(name)) => {
            let card = cards::find(name).map_err(anyhow::Error::msg)?;
            let (cap, source) = card.device_capacity();
            Some(Limit {
                bytes: cap.get(),
                source: format!("--card {} ({:?})", card.name, source),
                emulated: true,
                method,
            })
        }
        (None, None) => None,
    })
}

/// `total_memory` of the first device as the interpreter's PyTorch declares it.
fn device_total(m: &MeasureArgs) -> Option<u64> {
    let python = crate::python_side::interpreter(m.python.as_deref());
    let env = crate::environment::probe(&python, &m.device).ok()?;
    env.device(m.device.first()?)?.get("total_memory")?.as_u64()
}

/// The largest grid value whose predicted peak fits under `capacity` (the estimator's frontier).
fn hint(base: &MeasureArgs, variable: &str, b: Bounds, capacity: u64) -> Option<u64> {
    let fits = |v: u64| -> Option<bool> {
        let args = with_value(base, variable, v).ok()?;
        let (_, prediction) = measure::build(&args).ok()?;
        Some(prediction.max_peak_reserved()? <= capacity)
    };
    if !fits(b.lo)? {
        return Some(b.lo);
    }
    let (mut lo, mut hi) = (b.lo, b.hi);
    if fits(hi)? {
        return Some(hi);
    }
    while hi - lo > b.resolution {
        let mid = lo + (hi - lo) / 2 / b.resolution * b.resolution;
        let mid = if mid <= lo { lo + b.resolution } else { mid };
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

pub fn run(args: &SweepArgs, out: &mut dyn Write) -> Result<u8> {
    let m = &args.measure;
    let mode = match (args.vary.len(), args.search, &args.loads, args.processes) {
        (0, None, Some(_), None) => "loads",
        (0, None, None, Some(_)) => "processes",
        (1, Some(Search::Frontier), None, None) => "frontier",
        (1, None, None, None) => "list",
        (2, None, None, None) => "grid",
        (0, _, None, None) => {
            bail!("nothing to sweep: give --vary NAME=VALUES, --loads FILE or --processes N")
        }
        (2, Some(_), _, _) => bail!("--search frontier varies one dimension; give a single --vary"),
        (n, _, _, _) if n > 2 => bail!(
            "at most two --vary options (a grid); adjacent trials must differ by one variable"
        ),
        _ => bail!("combine --vary with --search frontier, or use --loads or --processes alone"),
    };
    if args.vary.len() == 2 && args.vary[0].variable == args.vary[1].variable {
        bail!(
            "--vary {} is given twice; a grid needs two different dimensions",
            args.vary[0].variable
        );
    }
    for v in &args.vary {
        match (&v.values, mode) {
            (Values::Range { .. }, "frontier") | (Values::List(_), "list" | "grid") => {}
            (Values::List(_), "frontier") => bail!(
                "--search frontier needs a range: --vary {}=LO..HI",
                v.variable
            ),
            (Values::Range { .. }, _) => bail!(
                "--vary {}=LO..HI is a range: add --search frontier, or list the values",
                v.variable
            ),
            _ => {}
        }
    }
    if m.script.is_some() {
        // A script only sees what its arguments say: each varied dimension must appear there.
        let varied: Vec<String> = match &args.loads {
            Some(_) => Vec::new(),
            None => args.vary.iter().map(|v| v.variable.clone()).collect(),
        };
        for v in varied {
            if !m
                .script_args
                .iter()
                .any(|a| a.contains(&format!("{{{v}}}")))
            {
                bail!(
                    "--vary {v} with --script: the script never receives the value; write {{{v}}} in its arguments, e.g. -- --{v} {{{v}}}"
                );
            }
        }
    }
    let limit = limit(args)?;
    // Validate the base configuration before anything runs (bad input exits 1).
    measure::build(m)?;
    let writer = Writer::new(&m.output)?;
    let now = chrono::Utc::now().to_rfc3339();
    let bar = if std::io::stderr().is_terminal() && !m.json {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{spinner} trial {k}{of} {elapsed} {msg} {prefix}")
                .expect("valid template")
                .with_key(
                    "k",
                    |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = write!(w, "{}", state.pos() + 1);
                    },
                )
                .with_key(
                    "of",
                    |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        if let Some(n) = state.len() {
                            let _ = write!(w, " of {n}");
                        }
                    },
                ),
        );
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut r = Runner {
        args,
        limit: limit.clone(),
        series: Series {
            schema: crate::sweep::series::SCHEMA.into(),
            tool_version: env!("CARGO_PKG_VERSION").into(),
            started_at: now.clone(),
            updated_at: now,
            status: "running".into(),
            mode: mode.into(),
            varied: args.vary.iter().map(|v| v.variable.clone()).collect(),
            base: Map::new(),
            identical_across_trials: true,
            protocol: if mode == "processes" {
                format!(
                    "the same configuration in {} fresh processes (not {} repeats in one process)",
                    args.processes.unwrap_or(1),
                    args.processes.unwrap_or(1)
                )
            } else {
                "fresh process per trial".into()
            },
            limit,
            trials: Vec::new(),
            frontier: None,
            fit: None,
            notes: Vec::new(),
        },
        writer,
        bar,
        base_spec: None,
    };
    let outcome = drive(&mut r, mode);
    r.bar.finish_and_clear();
    let unavailable = match outcome {
        Ok(None) => None,
        Ok(Some(reason)) => Some(reason),
        Err(e) => {
            if r.writer.written() {
                r.series.status = "aborted".into();
                r.series.notes.push(format!("aborted: {e:#}"));
                let _ = r.writer.save(&r.series);
            }
            return Err(e);
        }
    };
    if let Some(reason) = unavailable {
        eprintln!("error: nothing measured: {reason}");
        eprintln!("(no series file was written; run `iteragpu environment` for details)");
        return Ok(exit::MISSING_RUNTIME);
    }
    let interrupted = r.series.trials.iter().any(|t| t.status == "interrupted");
    r.series.status = if interrupted {
        "interrupted".into()
    } else {
        "complete".into()
    };
    if let (Some(var), "list" | "frontier") = (r.series.varied.first().cloned(), mode) {
        r.series.fit = fit_record(&r.series, &var);
    }
    r.series.updated_at = chrono::Utc::now().to_rfc3339();
    r.writer.save(&r.series)?;
    let text = if m.json {
        serde_json::to_string_pretty(&r.series)? + "\n"
    } else {
        table(&r.series, &m.output)
    };
    out.write_all(text.as_bytes())
        .context("cannot write to standard output")?;
    let broken = r.series.trials.iter().any(|t| {
        matches!(
            t.status.as_str(),
            "crashed" | "timeout" | "interrupted" | "unavailable"
        )
    });
    Ok(if broken {
        exit::WORKLOAD_FAILED
    } else {
        exit::OK
    })
}

/// Runs the trials of the mode; `Ok(Some(reason))` when PyTorch or a GPU is missing.
fn drive(r: &mut Runner, mode: &str) -> Result<Option<String>> {
    let m = &r.args.measure;
    macro_rules! step {
        ($e:expr) => {
            match $e? {
                Step::Unavailable(reason) => return Ok(Some(reason)),
                Step::Stop => return Ok(None),
                Step::Done(ok) => ok,
            }
        };
    }
    match mode {
        "list" => {
            let v = &r.args.vary[0];
            let Values::List(values) = &v.values else {
                unreachable!("checked")
            };
            r.bar.set_length(values.len() as u64);
            for value in values.clone() {
                let a = with_value(m, &v.variable, value)?;
                step!(r.trial(&a, one_value(&v.variable, value), None));
            }
        }
        "grid" => {
            let (a, b) = (&r.args.vary[0], &r.args.vary[1]);
            let (Values::List(outer), Values::List(inner)) = (&a.values, &b.values) else {
                unreachable!("checked")
            };
            let cells = plan::grid_order(outer, inner);
            r.bar.set_length(cells.len() as u64);
            let (va, vb) = (a.variable.clone(), b.variable.clone());
            for (x, y) in cells {
                let args = with_value(&with_value(m, &va, x)?, &vb, y)?;
                let mut values = one_value(&va, x);
                values.insert(vb.clone(), json!(y));
                step!(r.trial(&args, values, None));
            }
        }
        "processes" => {
            let n = r.args.processes.unwrap_or(1);
            r.bar.set_length(n);
            for i in 0..n {
                let mut values = Map::new();
                values.insert("process".into(), json!(i));
                step!(r.trial(&clone_args(m), values, None));
            }
        }
        "loads" => {
            let path = r.args.loads.clone().unwrap_or_default();
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read --loads {}", path.display()))?;
            let doc: Value = serde_json::from_str(&text).map_err(|e| {
                anyhow::anyhow!(
                    "--loads {} is not valid JSON (line {}, column {}): {e}",
                    path.display(),
                    e.line(),
                    e.column()
                )
            })?;
            let Some(loads) = doc.get("loads").and_then(Value::as_array) else {
                bail!(
                    "--loads {}: expected {{\"loads\": [{{\"name\": \"usual\", \"batch\": 1, \"context\": 512}}, …]}}",
                    path.display()
                );
            };
            r.bar.set_length(loads.len() as u64);
            for (i, load) in loads.iter().enumerate() {
                let name = load
                    .get("name")
                    .and_then(Value::as_str)
                    .map(String::from)
                    .unwrap_or_else(|| format!("load {}", i + 1));
                let mut args = clone_args(m);
                let mut values = Map::new();
                for (k, v) in load.as_object().into_iter().flatten() {
                    if k == "name" {
                        continue;
                    }
                    let key = k.replace('_', "-");
                    let Some(n) = v.as_u64().filter(|n| *n > 0) else {
                        bail!(
                            "--loads {}: `{k}` of load `{name}` must be a whole number > 0",
                            path.display()
                        );
                    };
                    args = with_value(&args, &key, n)?;
                    values.insert(key, json!(n));
                }
                step!(r.trial(&args, values, Some(name)));
            }
        }
        "frontier" => {
            let v = r.args.vary[0].clone();
            let Values::Range { lo, hi } = v.values else {
                unreachable!("checked")
            };
            let bounds = Bounds {
                lo,
                hi,
                resolution: r.args.resolution,
                max_trials: r.args.max_trials as usize,
            };
            // The capacity the peaks are compared with: the emulated limit, else the device's
            // total_memory as PyTorch declares it.
            let capacity = match &r.limit {
                Some(l) => Some(l.bytes),
                None => device_total(m),
            };
            let hint = capacity.and_then(|c| hint(m, &v.variable, bounds, c));
            let mut stop: Option<Result<Option<String>>> = None;
            let found = search::find_guided(bounds, hint, capacity, |value| {
                if stop.is_some() {
                    return Probe {
                        ok: false,
                        peak: None,
                    };
                }
                let result = with_value(m, &v.variable, value)
                    .and_then(|a| r.trial(&a, one_value(&v.variable, value), None));
                let peak = r.series.trials.last().and_then(|t| t.peak_reserved_bytes);
                let ok = match result {
                    Ok(Step::Done(ok)) => {
                        let t = r.series.trials.last();
                        // A crash or timeout is not an out-of-memory: stop searching on it.
                        if t.is_some_and(|t| !ok && t.status != "failed") {
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
                r.series.notes.push("the search stopped early: a trial crashed, timed out or was interrupted (not an out-of-memory)".into());
            }
            r.series.frontier = Some(FrontierRecord {
                variable: v.variable.clone(),
                last_success: found.last_success,
                first_failure: found.first_failure,
                resolution: r.args.resolution,
                trials: found.trials.len(),
                strategy: match (hint, capacity) {
                    (Some(_), _) => "estimate-hint, then measured-peak curve".into(),
                    (None, Some(_)) => "measured-peak curve".into(),
                    (None, None) => "grow-then-bisect".into(),
                },
                hint,
                budget_exhausted: found.budget_exhausted,
            });
        }
        _ => unreachable!("modes are checked"),
    }
    Ok(None)
}

fn fit_record(series: &Series, variable: &str) -> Option<FitRecord> {
    let points: Vec<(u64, u64)> = series
        .trials
        .iter()
        .filter(|t| t.status == "ok")
        .filter_map(|t| Some((t.values.get(variable)?.as_u64()?, t.peak_reserved_bytes?)))
        .collect();
    let f = fit::fit(&points)?;
    let overhead = series
        .trials
        .iter()
        .filter_map(|t| t.result.as_ref())
        .flat_map(|r| r.phases.iter())
        .flat_map(|p| p.driver.iter().flatten())
        .filter_map(|d| d.outside_allocator_at_end_bytes)
        .max();
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
        variable: variable.into(),
        fit: f,
        overhead_bytes: overhead,
        overhead_source: match overhead {
            Some(_) => "largest memory outside PyTorch's allocator seen by NVML in these trials".into(),
            None => "not measured (no NVML view): the card capacities are not reduced; add the CUDA context and libraries yourself".into(),
        },
        cards,
    })
}

fn table(s: &Series, path: &std::path::Path) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "iteragpu sweep ({}): {} trial(s), status {}",
        s.mode,
        s.trials.len(),
        s.status
    );
    if let Some(l) = &s.limit {
        let _ = writeln!(
            o,
            "emulated limit: {} ({}), {} — not a real card",
            Bytes(l.bytes).both(),
            l.source,
            l.method
        );
    }
    for t in &s.trials {
        let values = t
            .values
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .chain(t.load.clone())
            .collect::<Vec<_>>()
            .join(" ");
        let _ = writeln!(
            o,
            "  {:>3}  {values:<28} {:<14} peak alloc {:>10}  peak resv {:>10}  {:>7.2}s{}",
            t.index + 1,
            if t.out_of_memory {
                "out-of-memory"
            } else {
                t.status.as_str()
            },
            t.peak_allocated_bytes
                .map_or("null".into(), |b| format!("{:.3} GiB", Bytes(b).gib())),
            t.peak_reserved_bytes
                .map_or("null".into(), |b| format!("{:.3} GiB", Bytes(b).gib())),
            t.duration_s,
            t.failed_phase.as_ref().map_or(String::new(), |p| format!(
                "  (in {p}; a partial peak is not the need of a complete run)"
            ))
        );
    }
    if let Some(f) = &s.frontier {
        let _ = writeln!(
            o,
            "\nfrontier of {}: last success {}, first failure {} (resolution {}, {} trials, {}{})",
            f.variable,
            f.last_success.map_or("none".into(), |v| v.to_string()),
            f.first_failure.map_or("none".into(), |v| v.to_string()),
            f.resolution,
            f.trials,
            f.strategy,
            if f.budget_exhausted {
                ", trial budget exhausted"
            } else {
                ""
            }
        );
    }
    if let Some(fr) = &s.fit {
        let _ = writeln!(
            o,
            "\nfit of peak reserved against {}: {} over {} points (residual σ {:.3} GiB); {}",
            fr.variable,
            fr.fit.model,
            fr.fit.points,
            fr.fit.residual_std_bytes / (1u64 << 30) as f64,
            fr.overhead_source
        );
        for c in &fr.cards {
            let _ = writeln!(
                o,
                "  {:<14} {:>9.2} GiB usable → {} = {}{}",
                c.card,
                Bytes(c.usable_bytes).gib(),
                fr.variable,
                c.predicted
                    .map_or("not reached".into(), |p| format!("{p:.0}")),
                match (c.range, c.extrapolation) {
                    (Some((a, b)), true) =>
                        format!(" (range {a:.0}..{b:.0}; extrapolation, not measured)"),
                    (Some((a, b)), false) => format!(" (range {a:.0}..{b:.0})"),
                    (None, true) => " (extrapolation, not measured)".into(),
                    (None, false) => String::new(),
                }
            );
        }
    }
    for n in &s.notes {
        let _ = writeln!(o, "note: {n}");
    }
    let _ = writeln!(o, "series: {}", path.display());
    o
}
