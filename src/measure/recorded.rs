//! The result of a notebook's standalone `iteragpu.Recorder`. It records the events a worker
//! emits, its `hello` saying what the CLI would otherwise know itself (when it started, its code,
//! its devices); `iteragpu from-events` folds them here through [`build`], the measurement's own
//! builder, so the notebook's document and the CLI's cannot drift apart.

use anyhow::{Context, Result, bail};
use serde_json::Map;
use std::io::BufRead;

use crate::measure::build::{DriverSide, Ended, Origin, Source, build};
use crate::progress::NoProgress;
use crate::python_side::CodeHash;
use crate::schema::events::{self, Event, Line};
use crate::schema::measure::{MeasureResult, Policies, RunStatus, WorkerInfo};
use crate::schema::spec::EmptyCache;
use crate::workload::process::{Exit, WorkerRun};

/// Why a notebook's result has no driver's view: no CLI sampled NVML beside it.
pub const NO_NVML: &str = "recorded by iteragpu.Recorder without the CLI: no NVML view";

/// The declared identity's keys that are also the run's dimensions: a notebook has no plan to
/// say them, only what it declared with `describe`.
const DIMENSIONS: [&str; 6] = [
    "batch",
    "context",
    "prompt_tokens",
    "new_tokens",
    "resolution",
    "requests",
];

/// Builds the `iteragpu.measure/1` document from a Recorder's events (JSON Lines).
pub fn build_result(events: impl BufRead) -> Result<MeasureResult> {
    let mut lines = Vec::new();
    for line in events.lines() {
        let line = line.context("cannot read the events")?;
        if !line.trim().is_empty() {
            lines.push(events::parse(&line));
        }
    }
    let Some((pid, notebook)) = lines.iter().find_map(|line| match line {
        Line::Event(Event::Hello {
            pid,
            notebook: Some(n),
            ..
        }) => Some((*pid, n.clone())),
        _ => None,
    }) else {
        bail!(
            "these events do not start with a notebook Recorder's `hello`: only the events of `iteragpu.Recorder(output=...)` are built here (a worker's result is built by the `measure` that started it)"
        );
    };
    // The notebook has no plan: its scope is the phases it recorded, in the order they began.
    let mut begun: Vec<(u64, String)> = lines
        .iter()
        .filter_map(|line| match line {
            Line::Event(Event::PhaseStart { name, index, .. }) => Some((*index, name.clone())),
            _ => None,
        })
        .collect();
    begun.sort();
    let scope_phases: Vec<String> = begun.into_iter().map(|(_, name)| name).collect();
    let origin = Origin {
        workload: "notebook".into(),
        code: CodeHash {
            code_hash: notebook.code_hash.clone(),
            script_sha256: None,
        },
        devices: notebook.devices.clone(),
        dimensions: Map::new(),
        seed: None,
        first_pass: scope_phases.first().cloned().unwrap_or_default(),
        scope_phases,
        policies: Policies {
            process: "same process as the caller".into(),
            warmup: 0,
            repeats: 0,
            empty_cache: EmptyCache::Never,
            protocol: "per-phase".into(),
            timeout_s: None,
        },
        keep_children: false,
    };
    let side = DriverSide {
        nvml: None,
        reason: Some(NO_NVML.into()),
        view: None,
        indices: vec![None; notebook.devices.len()],
    };
    let mut source = Source::default();
    source
        .notes
        .push("recorded in the caller's process (notebook): not a fresh process per run".into());
    let mut dones = 0;
    for line in lines {
        source.on_line(line, &origin, &side, &NoProgress, &mut dones);
    }
    if notebook.code_hash != crate::python_side::code_hash() {
        source.notes.push(format!(
            "the notebook's iteragpu package is not the one iteragpu {} carries: the result was built by another version than the one that recorded",
            env!("CARGO_PKG_VERSION")
        ));
    }
    // A notebook that never said `done` stopped before `save()` (a kernel that died): its open
    // phases are kept as crashed, as a worker's.
    let status = match &source.done {
        Some((status, _)) if status == "ok" => RunStatus::Ok,
        Some(_) => RunStatus::Failed,
        None => RunStatus::Crashed,
    };
    let ended = Ended {
        started_at: notebook.started_at.clone(),
        run: WorkerRun {
            exit: Exit::Code(0),
            pid,
            stderr_tail: Vec::new(),
            closed: Vec::new(),
            left_running: Vec::new(),
            not_forked: None,
        },
        interval: None,
    };
    let mut result = build(source, status, None, &origin, &side, &ended);
    result.dimensions = result
        .identity
        .declared
        .iter()
        .filter(|(key, _)| DIMENSIONS.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    // The caller's process records; it has not exited, and its output is the notebook's own.
    result.worker = WorkerInfo {
        pid: Some(pid),
        exit_code: None,
        signal: None,
        stderr_tail: Vec::new(),
    };
    Ok(result)
}
