//! `iteragpu measure`: the guide's dense workload (more workloads come with the same protocol).

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::cli::{CacheKind, EmptyCache, MeasureArgs, Task, Workload};
use crate::dtype::Dtype;
use crate::estimate::phases::{self, CausalLmSpec, DenseSpec, PhasePrediction};
use crate::estimate::{CacheStrategy, KvRequest, Optimizer, Precision, kv_cache};
use crate::measure::compare::{self, CacheEstimate};
use crate::measure::result::{MeasureResult, Policies};
use crate::measure::{Trial, TrialOutcome, run_trial};
use crate::model::{Architecture, Config, ModelError};
use crate::units::Bytes;
use crate::{exit, output, python_side};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Ctrl-C sets a flag; the runner then stops the worker's whole process group and keeps results.
pub fn interrupted() -> &'static AtomicBool {
    let _ = ctrlc::set_handler(|| INTERRUPTED.store(true, Ordering::SeqCst));
    &INTERRUPTED
}

/// What to compare the observations with once the run is over.
pub enum Prediction {
    None,
    Phases(Vec<PhasePrediction>),
    CausalLm {
        phases: Vec<PhasePrediction>,
        caches: Vec<CacheEstimate>,
    },
}

impl Prediction {
    /// The highest predicted peak reserved over all phases (for a sweep's hint).
    pub fn max_peak_reserved(&self) -> Option<u64> {
        let phases = match self {
            Prediction::None => return None,
            Prediction::Phases(p) | Prediction::CausalLm { phases: p, .. } => p,
        };
        phases.iter().map(|p| p.peak_reserved_bytes).max()
    }

    /// Attaches the comparisons to a finished result.
    pub fn attach(&self, result: &mut MeasureResult) {
        match self {
            Prediction::None => {}
            Prediction::Phases(p) => compare::predictions(result, p, 0),
            Prediction::CausalLm { phases, caches } => {
                compare::predictions(result, phases, 0);
                compare::kv_cache(result, caches);
            }
        }
    }
}

fn check_devices(args: &MeasureArgs) -> Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    for d in &args.device {
        if !seen.insert(d) {
            bail!("device {d} is listed twice in --device; list each device once");
        }
    }
    Ok(())
}

/// The dtype of the weights: training precision decides; else --dtype; else the default.
fn weights_dtype(args: &MeasureArgs, default: Dtype) -> Result<Dtype> {
    if args.task == Task::Train {
        let by_precision = match args.precision {
            Precision::Fp32 | Precision::Bf16Mixed => Dtype::Float32,
            Precision::Bf16 => Dtype::Bfloat16,
            Precision::Fp16Mixed => {
                bail!("--precision fp16-mixed is not measured yet; use fp32, bf16-mixed or bf16")
            }
        };
        if let Some(d) = args.dtype
            && d != by_precision
        {
            bail!(
                "--dtype {d} contradicts --precision {:?}, which keeps the weights in {by_precision}; drop --dtype",
                args.precision
            );
        }
        return Ok(by_precision);
    }
    let d = args.dtype.unwrap_or(default);
    if !matches!(
        d,
        Dtype::Float32 | Dtype::Float16 | Dtype::Bfloat16 | Dtype::Float64
    ) {
        bail!(
            "--dtype {d} is not a floating-point dtype for weights; use float32, float16 or bfloat16"
        );
    }
    Ok(d)
}

fn policies(args: &MeasureArgs, warmup: u64, repeats: u64) -> Policies {
    Policies {
        process: "fresh".into(),
        warmup,
        repeats,
        empty_cache: match args.empty_cache {
            EmptyCache::Never => "never".into(),
            EmptyCache::BetweenRepeats => "between-repeats".into(),
        },
        protocol: if args.whole_loop {
            "whole-loop".into()
        } else {
            "per-phase".into()
        },
        timeout_s: Some(args.timeout),
    }
}

/// The phases a built-in workload runs, in order: loading and inputs, then the inference phases,
/// the training steps, or the whole loop (training adds evaluation and export).
fn scope_phases(args: &MeasureArgs, inference: &[&str]) -> Vec<String> {
    let mut phases = vec!["model_load".to_string(), "inputs".to_string()];
    let train = args.task == Task::Train;
    if args.whole_loop {
        phases.push("whole_loop".into());
    } else if train {
        for _ in 0..args.steps {
            phases.extend(
                ["forward", "loss", "backward", "optimizer_step", "zero_grad"].map(String::from),
            );
        }
    } else {
        phases.extend(inference.iter().map(|p| p.to_string()));
    }
    if train {
        phases.extend(["evaluation", "export"].map(String::from));
    }
    phases
}

fn train_fields(args: &MeasureArgs, spec: &mut Value) -> Result<()> {
    if args.task != Task::Train {
        if args.gradient_checkpointing || args.lora_rank.is_some() {
            bail!(
                "--gradient-checkpointing and --lora-rank apply to --task train; add --task train"
            );
        }
        return Ok(());
    }
    let optimizer = match args.optimizer {
        Optimizer::Adamw => "adamw",
        Optimizer::Sgd => "sgd",
        other => bail!(
            "--optimizer {other:?} is estimated but not measured yet; measure with adamw or sgd"
        ),
    };
    let precision = match args.precision {
        Precision::Fp32 => "fp32",
        Precision::Bf16Mixed => "bf16-mixed",
        Precision::Bf16 => "bf16",
        Precision::Fp16Mixed => {
            bail!("--precision fp16-mixed is not measured yet; use fp32, bf16-mixed or bf16")
        }
    };
    spec["task"] = json!("train");
    spec["steps"] = json!(args.steps);
    spec["optimizer"] = json!(optimizer);
    spec["precision"] = json!(precision);
    spec["gradient_checkpointing"] = json!(args.gradient_checkpointing);
    Ok(())
}

/// The training settings, recorded with the dimensions so runs can be compared.
fn training_dimensions(spec: &Value, dimensions: &mut Map<String, Value>) {
    for key in [
        "task",
        "steps",
        "optimizer",
        "precision",
        "gradient_checkpointing",
    ] {
        if let Some(v) = spec.get(key) {
            dimensions.insert(key.to_string(), v.clone());
        }
    }
}

/// Replaces `{batch}`, `{context}`, `{width}`, `{depth}`, `{prompt-tokens}`, `{new-tokens}` and
/// `{steps}` in a script argument with this run's values.
pub fn substitute(arg: &str, args: &MeasureArgs) -> String {
    let values = [
        ("batch", args.batch),
        ("context", args.context),
        ("width", args.width),
        ("depth", args.depth),
        ("prompt-tokens", args.prompt_tokens),
        ("new-tokens", args.new_tokens),
        ("steps", args.steps),
    ];
    values.iter().fold(arg.to_string(), |acc, (k, v)| {
        acc.replace(&format!("{{{k}}}"), &v.to_string())
    })
}

/// The trial a `measure` invocation describes, and its predictions.
pub fn build(args: &MeasureArgs) -> Result<(Trial, Prediction)> {
    check_devices(args)?;
    let python = python_side::interpreter(args.python.as_deref());
    let mut dimensions = Map::new();
    if let Some(script) = &args.script {
        if !script.is_file() {
            bail!(
                "--script {}: no such file; give the path of your Python script",
                script.display()
            );
        }
        let path = std::fs::canonicalize(script)?;
        // `{batch}`, `{context}`, … in the script's arguments take this run's values, so a sweep
        // can hand its varied dimension to the script.
        let script_args: Vec<String> = args
            .script_args
            .iter()
            .map(|a| substitute(a, args))
            .collect();
        let spec = json!({
            "workload": "script",
            "script": path,
            "script_args": script_args,
            "devices": args.device,
            "seed": args.seed,
        });
        let trial = Trial {
            workload: "script".into(),
            spec,
            devices: args.device.clone(),
            dimensions,
            seed: None,
            scope_phases: Vec::new(),
            first_pass: "the script's first phase".into(),
            policies: policies(args, 0, 0),
            python,
            timeout: Some(Duration::from_secs(args.timeout)),
            forward_output: true,
        };
        return Ok((trial, Prediction::None));
    }
    if !args.script_args.is_empty() {
        bail!("arguments after `--` are for --script; give --script PATH or drop them");
    }
    match args.workload {
        Workload::Dense => {
            if args.model.is_some() {
                bail!("--model applies to --workload causal-lm");
            }
            if args.lora_rank.is_some() {
                bail!(
                    "--lora-rank applies to --workload causal-lm (the dense network has no LoRA targets)"
                );
            }
            if args.depth < args.device.len() as u64 {
                bail!(
                    "--depth {} is smaller than the {} devices given: each device needs at least one block",
                    args.depth,
                    args.device.len()
                );
            }
            let dtype = weights_dtype(args, Dtype::Float32)?;
            let mut spec = json!({
                "workload": "dense",
                "devices": args.device,
                "batch": args.batch,
                "context": args.context,
                "width": args.width,
                "depth": args.depth,
                "dtype": dtype.torch_name(),
                "warmup": args.warmup,
                "repeats": args.repeats,
                "seed": args.seed,
                "empty_cache": policies(args, 0, 0).empty_cache,
                "whole_loop": args.whole_loop,
            });
            train_fields(args, &mut spec)?;
            for key in ["batch", "context", "width", "depth", "dtype"] {
                dimensions.insert(key.to_string(), spec[key].clone());
            }
            training_dimensions(&spec, &mut dimensions);
            let train = args.task == Task::Train;
            let scope = scope_phases(args, &["cold_forward", "warmup", "warm_forward"]);
            let prediction =
                if args.device.len() == 1 && !args.whole_loop && !args.gradient_checkpointing {
                    Prediction::Phases(phases::dense(&DenseSpec {
                        batch: args.batch,
                        context: args.context,
                        width: args.width,
                        depth: args.depth,
                        element_bytes: dtype.bytes(),
                        warmup: args.warmup,
                        repeats: args.repeats,
                        train_steps: train.then_some(args.steps),
                        adamw: args.optimizer == Optimizer::Adamw,
                    }))
                } else {
                    Prediction::None
                };
            let trial = Trial {
                workload: "dense".into(),
                spec,
                devices: args.device.clone(),
                dimensions,
                seed: Some(args.seed),
                scope_phases: scope,
                first_pass: if train {
                    "forward (step 0)".into()
                } else {
                    "cold_forward".into()
                },
                policies: policies(
                    args,
                    if train { 0 } else { args.warmup },
                    if train { args.steps } else { args.repeats },
                ),
                python,
                timeout: Some(Duration::from_secs(args.timeout)),
                forward_output: true,
            };
            Ok((trial, prediction))
        }
        Workload::CausalLm => causal_lm(args, python, dimensions),
    }
}

fn causal_lm(
    args: &MeasureArgs,
    python: std::path::PathBuf,
    mut dimensions: Map<String, Value>,
) -> Result<(Trial, Prediction)> {
    let Some(model) = &args.model else {
        bail!("--workload causal-lm needs --model PATH (a config.json or a folder holding one)");
    };
    if args.device.len() > 1 {
        bail!(
            "--workload causal-lm runs on one device; splitting a language model over several GPUs is for you to measure with --script"
        );
    }
    let config_path = if model.is_dir() {
        model.join("config.json")
    } else {
        model.clone()
    };
    let config = Config::load(&config_path)?;
    let arch = match Architecture::from_config(&config) {
        Ok(a) => Some(a),
        Err(ModelError::UnknownFamily { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let default = arch
        .as_ref()
        .and_then(|a| a.config_dtype)
        .unwrap_or(Dtype::Bfloat16);
    let dtype = weights_dtype(args, default)?;
    let train = args.task == Task::Train;
    if args.window.is_some() && args.cache != CacheKind::Sliding {
        bail!("--window applies to --cache sliding; add --cache sliding or drop --window");
    }
    let cache = match args.cache {
        CacheKind::Dynamic => "dynamic",
        CacheKind::Static => "static",
        CacheKind::Sliding => "sliding",
        CacheKind::Quantized => "quantized",
        CacheKind::Offloaded => "offloaded",
    };
    let mut spec = json!({
        "workload": "causal-lm",
        "model_config": std::fs::canonicalize(&config_path)?,
        "devices": args.device,
        "batch": args.batch,
        "context": args.context,
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens,
        "cache": cache,
        "window": args.window,
        "dtype": dtype.torch_name(),
        "seed": args.seed,
        "whole_loop": args.whole_loop,
        "lora_rank": args.lora_rank,
        "lora_targets": args.lora_targets,
    });
    train_fields(args, &mut spec)?;
    let keys: &[&str] = if train {
        &["batch", "context", "dtype"]
    } else {
        &["batch", "prompt_tokens", "new_tokens", "cache", "dtype"]
    };
    for key in keys {
        dimensions.insert(key.to_string(), spec[key].clone());
    }
    dimensions.insert("model".into(), json!(config_path.display().to_string()));
    training_dimensions(&spec, &mut dimensions);
    let scope = scope_phases(args, &["prefill", "decode", "prefill_warm", "decode_warm"]);
    let prediction = match (&arch, train && !args.whole_loop) {
        (Some(arch), true) => {
            let lora_trainable = args.lora_rank.map(|rank| {
                arch.groups
                    .iter()
                    .filter(|g| args.lora_targets.iter().any(|t| g.module() == t))
                    .filter_map(|g| {
                        g.linear_dims()
                            .map(|(i, o)| rank * (i + o) * g.linear_count())
                    })
                    .sum()
            });
            return Ok((
                causal_lm_trial(args, python, dimensions, spec, scope, train),
                Prediction::Phases(phases::causal_lm_training(
                    arch,
                    &phases::CausalLmTrainSpec {
                        batch: args.batch,
                        context: args.context,
                        steps: args.steps,
                        param_bytes: dtype.bytes(),
                        mixed: args.precision == Precision::Bf16Mixed,
                        adamw: args.optimizer == Optimizer::Adamw,
                        lora_trainable,
                        gradient_checkpointing: args.gradient_checkpointing,
                    },
                )),
            ));
        }
        _ => match (&arch, train || args.whole_loop) {
            (Some(arch), false) => {
                let kv = |tokens: u64, windows: bool| -> Result<u64> {
                    let mut layout = arch.kv.clone();
                    if !windows {
                        for l in &mut layout.layers {
                            l.window = None;
                        }
                    }
                    let strategy = match args.cache {
                        CacheKind::Dynamic => CacheStrategy::Dynamic,
                        CacheKind::Static => CacheStrategy::Static {
                            max_cache_len: args.prompt_tokens + args.new_tokens,
                        },
                        CacheKind::Sliding => CacheStrategy::Sliding {
                            window: match (windows, args.window.or(arch.kv.window())) {
                                (true, Some(w)) => w,
                                _ => u64::MAX,
                            },
                        },
                        CacheKind::Quantized => CacheStrategy::Quantized {
                            bits: 4,
                            group_size: 64,
                            residual: 128,
                        },
                        CacheKind::Offloaded => CacheStrategy::Offloaded,
                    };
                    let req = KvRequest {
                        layout,
                        tokens,
                        sequences: args.batch,
                        element_bytes: dtype.bytes(),
                        strategy,
                        prompt_tokens: Some(args.prompt_tokens),
                    };
                    Ok(kv_cache::terms(&req, &mut Vec::new())?[0].bytes.get())
                };
                let total = args.prompt_tokens + args.new_tokens;
                // Right after the prefill a sliding layer still holds the whole prompt (a view of the
                // tensor built from it); after a decoding step it holds min(tokens, window).
                let prefill_windows = args.cache == CacheKind::Static;
                let after_prefill = kv(args.prompt_tokens, prefill_windows)?;
                let after_decode = kv(total, true)?;
                let basis = format!(
                    "estimate's KV term, --cache {cache}, {} bytes per value",
                    dtype.bytes()
                );
                let caches = ["", "_warm"]
                    .iter()
                    .flat_map(|suffix| {
                        [
                            CacheEstimate {
                                phase: format!("prefill{suffix}"),
                                tokens: args.prompt_tokens,
                                bytes: after_prefill,
                                basis: basis.clone(),
                            },
                            CacheEstimate {
                                phase: format!("decode{suffix}"),
                                tokens: total,
                                bytes: after_decode,
                                basis: basis.clone(),
                            },
                        ]
                    })
                    .collect();
                let phases = phases::causal_lm(
                    arch,
                    &CausalLmSpec {
                        batch: args.batch,
                        prompt_tokens: args.prompt_tokens,
                        new_tokens: args.new_tokens,
                        element_bytes: dtype.bytes(),
                        kv_after_prefill: after_prefill,
                        kv_after_decode: after_decode,
                        static_cache: args.cache == CacheKind::Static,
                    },
                );
                Prediction::CausalLm { phases, caches }
            }
            _ => Prediction::None,
        },
    };
    Ok((
        causal_lm_trial(args, python, dimensions, spec, scope, train),
        prediction,
    ))
}

fn causal_lm_trial(
    args: &MeasureArgs,
    python: std::path::PathBuf,
    dimensions: Map<String, Value>,
    spec: Value,
    scope: Vec<String>,
    train: bool,
) -> Trial {
    Trial {
        workload: "causal-lm".into(),
        spec,
        devices: args.device.clone(),
        dimensions,
        seed: Some(args.seed),
        scope_phases: scope,
        first_pass: if train {
            "forward (step 0)".into()
        } else {
            "prefill".into()
        },
        policies: policies(args, 0, if train { args.steps } else { 1 }),
        python,
        timeout: Some(Duration::from_secs(args.timeout)),
        forward_output: true,
    }
}

pub fn run(args: &MeasureArgs, out: &mut dyn Write) -> Result<u8> {
    let (trial, prediction) = build(args)?;
    output::check_new(&args.output)?;
    // A spinner with the current phase, only on a terminal and never with --json.
    let bar = (std::io::stderr().is_terminal() && !args.json).then(|| {
        let bar =
            indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {elapsed} {prefix}")
                .expect("valid template"),
        );
        bar.set_prefix("starting the worker");
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    });
    let outcome = run_trial(&trial, interrupted(), bar.as_ref());
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let outcome = match outcome {
        Ok(o) => o,
        Err(e @ crate::measure::runner::StartError::Interpreter { .. }) => {
            eprintln!("error: {e}");
            return Ok(exit::MISSING_RUNTIME);
        }
        Err(e) => return Err(e.into()),
    };
    let mut result = match outcome {
        TrialOutcome::Unavailable { reason, .. } => {
            eprintln!("error: nothing measured: {reason}");
            eprintln!("(no result file was written; run `iteragpu environment` for details)");
            return Ok(exit::MISSING_RUNTIME);
        }
        TrialOutcome::Measured(result) => result,
    };
    prediction.attach(&mut result);
    let path = write_result(&args.output, &result)?;
    let text = if args.json {
        serde_json::to_string_pretty(&*result)? + "\n"
    } else {
        table(&result, &path)
    };
    out.write_all(text.as_bytes())
        .context("cannot write to standard output")?;
    Ok(if result.status == "ok" {
        exit::OK
    } else {
        exit::WORKLOAD_FAILED
    })
}

/// Writes the result with create-new semantics; if the path appeared meanwhile, a sibling name is
/// used so the measurement is not lost.
pub fn write_result(path: &Path, result: &MeasureResult) -> Result<std::path::PathBuf> {
    let bytes = serde_json::to_vec_pretty(result)?;
    match output::write_new(path, &bytes) {
        Ok(()) => Ok(path.to_path_buf()),
        Err(output::OutputError::Exists(_)) => {
            let stem = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "result".into());
            let other = path.with_file_name(format!("{stem}-{}.json", std::process::id()));
            output::write_new(&other, &bytes)?;
            eprintln!(
                "warning: {} appeared during the run; the result was written to {}",
                path.display(),
                other.display()
            );
            Ok(other)
        }
        Err(e) => Err(e.into()),
    }
}

fn gib(v: Option<u64>) -> String {
    v.map_or("null".into(), |b| format!("{:.3}", Bytes(b).gib()))
}

/// The human summary: one line per phase and device, in GiB; raw bytes are in the file.
pub fn table(r: &MeasureResult, path: &Path) -> String {
    let mut o = String::new();
    let declared = &r.identity.declared;
    let _ = writeln!(
        o,
        "iteragpu measure: {} {} on {} — status {} (counters in GiB; raw bytes in the result file)",
        r.identity.workload,
        declared
            .get("architecture")
            .and_then(Value::as_str)
            .unwrap_or(""),
        r.scope.devices.join(", "),
        r.status
    );
    let _ = writeln!(
        o,
        "\n  {:<14} {:<7} {:<7} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>9}",
        "phase",
        "device",
        "status",
        "start alloc",
        "peak alloc",
        "end alloc",
        "start resv",
        "peak resv",
        "end resv",
        "seconds"
    );
    for p in &r.phases {
        if p.devices.is_empty() {
            let _ = writeln!(
                o,
                "  {:<14} {:<7} {:<7} {}",
                p.name,
                "",
                p.status,
                p.note.as_deref().unwrap_or("no readings")
            );
        }
        for d in &p.devices {
            let _ = writeln!(
                o,
                "  {:<14} {:<7} {:<7} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>9}",
                p.name,
                d.device,
                p.status,
                gib(d.start_allocated_bytes),
                gib(d.peak_allocated_bytes),
                gib(d.end_allocated_bytes),
                gib(d.start_reserved_bytes),
                gib(d.peak_reserved_bytes),
                gib(d.end_reserved_bytes),
                p.duration_s.map_or("null".into(), |s| format!("{s:.4}"))
            );
        }
        for drv in p.driver.iter().flatten() {
            if let (Some(proc_peak), outside) = (
                drv.peak_process_used_bytes,
                drv.outside_allocator_at_end_bytes,
            ) {
                let _ = writeln!(
                    o,
                    "  {:<14} {:<7} driver: process peak {} GiB over {} samples{}",
                    "",
                    drv.device,
                    gib(Some(proc_peak)),
                    drv.samples,
                    outside.map_or(String::new(), |b| format!(
                        "; outside PyTorch's allocator at the end: {} GiB (CUDA context, libraries; not a leak by itself)",
                        gib(Some(b))
                    ))
                );
            }
        }
    }
    for w in &r.warm_summary {
        if let Some(s) = &w.peak_reserved_bytes {
            let _ = writeln!(
                o,
                "\n  warm_forward on {} over {} repeats: peak reserved min {} / median {} / max {} bytes",
                w.device,
                w.repeats,
                Bytes(s.min as u64).grouped(),
                Bytes(s.median as u64).grouped(),
                Bytes(s.max as u64).grouped()
            );
        }
    }
    if !r.predictions.is_empty() {
        let _ = writeln!(
            o,
            "\n  estimated vs observed (first device):\n  {:<14} {:>16} {:>16} {:>8} {:>16} {:>16} {:>8}",
            "phase",
            "predicted alloc",
            "observed alloc",
            "error",
            "predicted resv",
            "observed resv",
            "error"
        );
        for c in &r.predictions {
            let pct = |v: Option<f64>| v.map_or("null".into(), |p| format!("{p:+.1}%"));
            let b = |v: Option<u64>| v.map_or("null".into(), |x| Bytes(x).grouped());
            let _ = writeln!(
                o,
                "  {:<14} {:>16} {:>16} {:>8} {:>16} {:>16} {:>8}",
                c.phase,
                Bytes(c.predicted_peak_allocated_bytes).grouped(),
                b(c.observed_peak_allocated_bytes),
                pct(c.error_allocated_pct),
                Bytes(c.predicted_peak_reserved_bytes).grouped(),
                b(c.observed_peak_reserved_bytes),
                pct(c.error_reserved_pct)
            );
        }
    }
    for c in &r.kv_cache {
        let _ = writeln!(
            o,
            "  KV cache after {}: observed {} bytes, estimated {} bytes ({})",
            c.phase,
            c.observed_bytes
                .map_or("null".into(), |b| Bytes(b).grouped()),
            Bytes(c.estimated_bytes).grouped(),
            c.difference_pct
                .map_or("no difference computed".into(), |p| format!("{p:+.2}%"))
        );
    }
    if let Some(f) = &r.failure {
        let _ = writeln!(
            o,
            "\n  failure in {}: {} {}\n  {}",
            f.phase.as_deref().unwrap_or("(before any phase)"),
            f.error_type.as_deref().unwrap_or(""),
            f.message.as_deref().unwrap_or(""),
            f.caution
        );
    }
    if r.environment.driver.is_none() {
        let _ = writeln!(
            o,
            "\n  driver's view: {}",
            r.environment
                .driver_reason
                .as_deref()
                .unwrap_or("unavailable")
        );
    }
    for note in &r.notes {
        let _ = writeln!(o, "  note: {note}");
    }
    let _ = writeln!(
        o,
        "\n  reserved − allocated is only meaningful from two readings of one checkpoint (start or end), never peak − peak.\n  result: {}",
        path.display()
    );
    o
}
