//! Runs a plan's workload in a predicting worker (the same worker and workload code, on data-less
//! CUDA tensors, every GPU hidden from it) and turns its storage events into a prediction.

use indicatif::ProgressBar;
use serde_json::{Map, Value};

use super::document::{Assumptions, PhaseStatus, PlaceholderRead, PredictionDoc, SCHEMA};
use super::replay::{TraceEvent, replay};
use super::target::Target;
use crate::environment::PythonEnvironment;
use crate::measure::events::{Event, Line};
use crate::measure::plan::MeasurePlan;
use crate::measure::result::Identity;
use crate::measure::worker_process::{self, Exit, StartError, WorkerCommand};
use crate::signals::StopRequest;

/// How a prediction ended.
pub enum Outcome {
    Predicted(Box<PredictionDoc>),
    /// PyTorch, a C++ compiler for the shims, or a workload's package is missing.
    Unavailable(String),
    /// Stopped by a signal or the timeout before the workload ended: nothing is claimed.
    Stopped(String),
}

#[derive(Default)]
struct Collected {
    events: Vec<TraceEvent>,
    environment: Option<PythonEnvironment>,
    declared: Map<String, Value>,
    unavailable: Option<String>,
    done: Option<(String, Option<Value>)>,
    placeholders: Vec<PlaceholderRead>,
    placeholder_types: Vec<(Option<String>, Option<u64>, String)>,
    notes: Vec<String>,
}

/// Predicts `plan` for `target`.
pub fn predict(
    plan: &MeasurePlan,
    target: &Target,
    stop: &StopRequest,
    progress: Option<&ProgressBar>,
) -> Result<Outcome, StartError> {
    let trial = plan.trial();
    let mut spec = trial.spec.clone();
    spec.devices.truncate(1);
    spec.predict = Some(target.clone());
    // Fake tensors have no allocator to record.
    spec.history = None;
    spec.world_size = plan.world_size();
    let cmd = WorkerCommand {
        python: plan.python.clone(),
        spec: serde_json::to_value(&spec)
            .map_err(|e| StartError::Files(std::io::Error::other(e)))?,
        timeout: Some(plan.timeout),
        forward_output: trial.forward_output,
        progress: progress.cloned(),
        // The predicting process never touches a GPU, even on a machine that has one.
        env: vec![("CUDA_VISIBLE_DEVICES".into(), Some(String::new()))],
        launch: worker_process::Launch::Worker,
    };
    let mut c = Collected::default();
    let run = worker_process::run(&cmd, stop, |_, line| match line {
        Line::Event(Event::Environment(env)) => c.environment = Some(*env),
        Line::Event(Event::Describe(map)) => c.declared.extend(map),
        Line::Event(Event::PhaseStart { name, index }) => {
            if let Some(bar) = progress {
                bar.set_prefix(format!("predicting phase {} ({name})", index + 1));
            }
            c.events.push(TraceEvent::PhaseStart { name, index });
        }
        Line::Event(Event::PhaseEnd(record)) => c.events.push(TraceEvent::PhaseEnd {
            failed: !record.status.is_ok(),
            inputs: record.inputs,
        }),
        Line::Event(Event::Alloc(a)) => c.events.push(TraceEvent::Alloc(a)),
        Line::Event(Event::Free { id }) => c.events.push(TraceEvent::Free(id)),
        Line::Event(Event::Tag { id, category }) => c.events.push(TraceEvent::Tag(id, category)),
        Line::Event(Event::Unpredictable(u)) => c.events.push(TraceEvent::Unpredictable(u)),
        Line::Event(Event::Placeholder {
            file, line, dtype, ..
        }) => c.placeholder_types.push((file, line, dtype)),
        Line::Event(Event::PlaceholderCount { file, line, count }) => {
            let answer = c
                .placeholder_types
                .iter()
                .find(|(f, l, _)| *f == file && *l == line)
                .map_or("0", |(_, _, d)| if d == "bool" { "False" } else { "0" })
                .to_string();
            c.placeholders.push(PlaceholderRead {
                file,
                line,
                count,
                answer,
            });
        }
        Line::Event(Event::Note { text }) => c.notes.push(text),
        Line::Event(Event::Unavailable { reason }) => c.unavailable = Some(reason),
        Line::Event(Event::Done { status, error }) => c.done = Some((status, error)),
        _ => {}
    })?;
    if let Exit::Stopped(signal) = run.exit {
        return Ok(Outcome::Stopped(format!("stopped by {}", signal.name())));
    }
    if run.exit == Exit::Timeout {
        return Ok(Outcome::Stopped(format!(
            "the prediction took longer than --timeout {} s",
            plan.timeout.as_secs()
        )));
    }
    if let Some(reason) = c.unavailable {
        return Ok(Outcome::Unavailable(reason));
    }
    if c.environment.is_none() {
        return Ok(Outcome::Unavailable(format!(
            "`{}` did not start iteragpu's predicting worker ({}){}",
            plan.python.display(),
            run.exit,
            if run.stderr_tail.is_empty() {
                String::new()
            } else {
                format!(": {}", run.stderr_tail.join(" | "))
            }
        )));
    }
    let mut phases = replay(
        &c.events,
        target.context_bytes,
        super::replay::backend(&target.allocator_backend),
    );
    let failure = match (&run.exit, &c.done) {
        (Exit::Code(0), Some((s, _))) if s == "ok" => None,
        (_, Some((_, Some(error)))) => Some(format!(
            "{}: {}",
            error["type"].as_str().unwrap_or("error"),
            error["message"].as_str().unwrap_or("")
        )),
        (exit, _) => Some(format!(
            "the predicting worker ended unexpectedly ({exit}): {}",
            run.stderr_tail.join(" | ")
        )),
    };
    // A phase that never ended (the worker died in it) is not predicted.
    let opened = c
        .events
        .iter()
        .filter(|e| matches!(e, TraceEvent::PhaseStart { .. }))
        .count();
    if opened > phases.len()
        && let Some(TraceEvent::PhaseStart { name, index }) = c
            .events
            .iter()
            .rev()
            .find(|e| matches!(e, TraceEvent::PhaseStart { .. }))
    {
        phases.push(super::document::PredictedPhase {
            name: name.clone(),
            index: *index,
            status: PhaseStatus::Failed,
            inputs: Map::new(),
            start_allocated_bytes: None,
            start_reserved_bytes: None,
            peak_allocated_bytes: None,
            peak_reserved_bytes: None,
            peak_tensor_bytes: None,
            end_allocated_bytes: None,
            end_reserved_bytes: None,
            driver_view_bytes: None,
            at_peak: None,
            unpredictable: Vec::new(),
        });
    }
    let all_predicted = phases.iter().all(|p| p.status == PhaseStatus::Predicted);
    let status = match (&failure, all_predicted) {
        (Some(_), _) => "failed",
        (None, true) => "complete",
        (None, false) => "partial",
    };
    let torch_version = c
        .environment
        .as_ref()
        .and_then(|e| e.torch_str("version"))
        .map(String::from);
    let mut notes = c.notes;
    if torch_version.as_deref().is_some_and(|v| v.contains("fake")) {
        notes.push(
            "predicted with the test suite's fake torch: not a prediction of real PyTorch".into(),
        );
    }
    Ok(Outcome::Predicted(Box::new(PredictionDoc {
        schema: SCHEMA.into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        kind: "prediction".into(),
        status: status.into(),
        created_at: chrono::Utc::now().to_rfc3339(),
        identity: Identity {
            workload: trial.workload.clone(),
            code_hash: crate::python_side::code_hash(),
            seed: trial.seed,
            declared: c.declared,
        },
        dimensions: trial.dimensions.clone(),
        target: target.clone(),
        spec,
        assumptions: Assumptions {
            transformers_version: c
                .environment
                .as_ref()
                .and_then(|e| e.transformers_version.clone()),
            torch_version,
            allocator_model: allocator_model(&target.allocator_backend),
            placeholder_reads: c.placeholders,
            not_modelled: vec![
                "attention kernels' internal workspaces (flash-attention backward's dq accumulator, cuDNN's workspace)".into(),
                "cuDNN convolution workspaces".into(),
                "memory of other processes on the card".into(),
            ],
        },
        phases,
        failure,
        notes,
    })))
}

fn allocator_model(backend: &str) -> String {
    match backend {
        "expandable_segments" => "expandable segments approximated: 512-byte rounding, blocks always split, each pool's pages (20 MiB large, 2 MiB small) covering its highest level (one H200 reading agrees); fragmentation inside the segments not modelled".into(),
        "cudaMallocAsync" => "cudaMallocAsync approximated: requested bytes counted, the driver's pool as the highest allocated level rounded up to 32 MiB (one H200 reading agrees); fragmentation inside the pool not modelled".into(),
        _ => "PyTorch's caching allocator replayed (512-byte rounding, 2 MiB small-pool and 20 MiB large-pool segments, ≥ 10 MiB requests rounded to 2 MiB, best fit, splitting, merging; one stream)".into(),
    }
}
