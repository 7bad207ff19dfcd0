//! `iteragpu measure`: the guide's dense workload (more workloads come with the same protocol).

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::cli::{EmptyCache, MeasureArgs};
use crate::measure::result::{MeasureResult, Policies};
use crate::measure::{Trial, TrialOutcome, run_trial};
use crate::units::Bytes;
use crate::{exit, output, python_side};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Ctrl-C sets a flag; the runner then stops the worker's whole process group and keeps results.
pub fn interrupted() -> &'static AtomicBool {
    let _ = ctrlc::set_handler(|| INTERRUPTED.store(true, Ordering::SeqCst));
    &INTERRUPTED
}

fn dense_trial(args: &MeasureArgs) -> Result<Trial> {
    let mut seen = std::collections::BTreeSet::new();
    for d in &args.device {
        if !seen.insert(d) {
            bail!("device {d} is listed twice in --device; list each device once");
        }
    }
    if !args.dtype.torch_name().starts_with("float") && args.dtype.torch_name() != "bfloat16" {
        bail!(
            "--dtype {} is not a floating-point dtype; the dense network needs float32, float16 or bfloat16",
            args.dtype
        );
    }
    if args.depth < args.device.len() as u64 {
        bail!(
            "--depth {} is smaller than the {} devices given: each device needs at least one block",
            args.depth,
            args.device.len()
        );
    }
    let empty_cache = match args.empty_cache {
        EmptyCache::Never => "never",
        EmptyCache::BetweenRepeats => "between-repeats",
    };
    let spec = json!({
        "workload": "dense",
        "devices": args.device,
        "batch": args.batch,
        "context": args.context,
        "width": args.width,
        "depth": args.depth,
        "dtype": args.dtype.torch_name(),
        "warmup": args.warmup,
        "repeats": args.repeats,
        "seed": args.seed,
        "empty_cache": empty_cache,
    });
    let mut dimensions = Map::new();
    for key in ["batch", "context", "width", "depth", "dtype"] {
        dimensions.insert(key.to_string(), spec[key].clone());
    }
    Ok(Trial {
        workload: "dense".into(),
        spec,
        devices: args.device.clone(),
        dimensions,
        seed: Some(args.seed),
        scope_phases: [
            "model_load",
            "inputs",
            "cold_forward",
            "warmup",
            "warm_forward",
        ]
        .map(String::from)
        .to_vec(),
        first_pass: "cold_forward".into(),
        policies: Policies {
            process: "fresh".into(),
            warmup: args.warmup,
            repeats: args.repeats,
            empty_cache: empty_cache.into(),
            protocol: "per-phase".into(),
            timeout_s: Some(args.timeout),
        },
        python: python_side::interpreter(args.python.as_deref()),
        timeout: Some(Duration::from_secs(args.timeout)),
        forward_output: true,
    })
}

pub fn run(args: &MeasureArgs, out: &mut dyn Write) -> Result<u8> {
    let trial = dense_trial(args)?;
    output::check_new(&args.output)?;
    let outcome = match run_trial(&trial, interrupted()) {
        Ok(o) => o,
        Err(e @ crate::measure::runner::StartError::Interpreter { .. }) => {
            eprintln!("error: {e}");
            return Ok(exit::MISSING_RUNTIME);
        }
        Err(e) => return Err(e.into()),
    };
    let result = match outcome {
        TrialOutcome::Unavailable { reason, .. } => {
            eprintln!("error: nothing measured: {reason}");
            eprintln!("(no result file was written; run `iteragpu environment` for details)");
            return Ok(exit::MISSING_RUNTIME);
        }
        TrialOutcome::Measured(result) => result,
    };
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
