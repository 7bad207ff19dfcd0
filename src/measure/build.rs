//! Where a measurement's result is built: what each event source (a worker, or one rank) said,
//! folded into the `iteragpu.measure/1` document with its status decided. `trial` feeds it as the
//! events arrive, so a worker that dies keeps every completed phase; `ranks` gathers one per rank.

use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::environment::PythonEnvironment;
use crate::explain::snapshot::{self, SummaryOptions};
use crate::measure::driver_view::driver_phase;
use crate::measure::sampler::Sampler;
use crate::progress::Progress as ProgressDisplay;
use crate::python_side::CodeHash;
use crate::schema::events::{Event, Line, NotebookHello, PhaseRecord, RankHello};
use crate::schema::history::{LiveSummary, OomDump, OomSnapshot};
use crate::schema::measure::{
    Failure, Identity, MeasureResult, Policies, RunEnvironment, RunStatus, Scope,
};
use crate::signals::Stop;
use crate::workload::plan::Trial;
use crate::workload::process;

/// What a result says of its run beyond the events: the CLI's [`Trial`] for a worker it started,
/// or what a notebook's Recorder said of itself (`measure::recorded`).
pub(crate) struct Origin {
    pub(crate) workload: String,
    pub(crate) code: CodeHash,
    pub(crate) devices: Vec<String>,
    pub(crate) dimensions: Map<String, Value>,
    pub(crate) seed: Option<u64>,
    pub(crate) scope_phases: Vec<String>,
    pub(crate) first_pass: String,
    pub(crate) policies: Policies,
    pub(crate) keep_children: bool,
}

impl Origin {
    pub(crate) fn of(trial: &Trial) -> Origin {
        Origin {
            workload: trial.workload.clone(),
            code: trial.spec.code_hash(),
            devices: trial.devices.clone(),
            dimensions: trial.dimensions.clone(),
            seed: trial.seed,
            scope_phases: trial.scope_phases.clone(),
            first_pass: trial.first_pass.clone(),
            policies: trial.policies.clone(),
            keep_children: trial.keep_children,
        }
    }
}

/// How a trial ended.
#[derive(Debug)]
pub enum TrialOutcome {
    /// PyTorch or a GPU is missing: nothing was measured.
    Unavailable {
        reason: String,
    },
    Measured(Box<MeasureResult>),
}

/// What one event source (a worker, or one rank) has said so far.
#[derive(Default)]
pub(crate) struct Source {
    pub(crate) pid: Option<u32>,
    pub(crate) rank: Option<RankHello>,
    /// A notebook's Recorder, standing in for the CLI (`measure::recorded`).
    pub(crate) notebook: Option<NotebookHello>,
    pub(crate) environment: Option<PythonEnvironment>,
    pub(crate) declared: Map<String, Value>,
    pub(crate) phases: Vec<PhaseRecord>,
    /// The phases open now, innermost last (markers nest).
    pub(crate) current: Vec<(String, u64)>,
    pub(crate) unavailable: Option<String>,
    pub(crate) done: Option<(String, Option<Value>)>,
    /// The order in which the sources said `done` (a rank that failed first is the cause).
    pub(crate) done_order: Option<usize>,
    pub(crate) unknown: Vec<Value>,
    pub(crate) garbage: u64,
    /// Lines without the run's channel token, ignored.
    pub(crate) forged: u64,
    pub(crate) notes: Vec<String>,
    pub(crate) history: Option<crate::schema::history::HistoryStatus>,
    pub(crate) oom_snapshots: Vec<crate::schema::history::OomSnapshot>,
    pub(crate) oom_snapshots_dropped: u64,
    /// The folder the worker dumps its snapshots into at an out-of-memory (`HistorySpec::oom_dir`).
    pub(crate) oom_dir: Option<PathBuf>,
    pub(crate) snapshot: Option<(Option<String>, Option<String>)>,
    pub(crate) sampler: Option<Sampler>,
    /// The phase the sampler is in when the worker ends mid-phase (NVML's peaks of it).
    pub(crate) unfinished_driver: Option<Vec<crate::schema::events::DriverPhase>>,
}

/// The driver's side of a run: NVML, or why not, and which NVML device each CUDA device is.
pub(crate) struct DriverSide {
    pub(crate) nvml: Option<Arc<nvml_wrapper::Nvml>>,
    pub(crate) reason: Option<String>,
    pub(crate) view: Option<crate::environment::DriverView>,
    pub(crate) indices: Vec<Option<u32>>,
}

impl Source {
    /// The devices this source records, and their NVML indices: all of the trial's for a plain
    /// worker, its own `devices[LOCAL_RANK]` for a rank.
    fn devices(&self, origin: &Origin, side: &DriverSide) -> (Vec<String>, Vec<Option<u32>>) {
        match &self.rank {
            None => (origin.devices.clone(), side.indices.clone()),
            Some(r) => {
                let k = r.local_rank as usize;
                (
                    vec![r.device.clone()],
                    vec![side.indices.get(k).copied().flatten()],
                )
            }
        }
    }

    pub(crate) fn on_line(
        &mut self,
        line: Line,
        origin: &Origin,
        side: &DriverSide,
        progress: &dyn ProgressDisplay,
        dones: &mut usize,
    ) {
        match line {
            Line::Event(Event::Hello {
                pid,
                rank,
                notebook,
                ..
            }) => {
                self.pid = Some(pid);
                self.rank = rank;
                self.notebook = notebook;
                let (_, indices) = self.devices(origin, side);
                if let Some(nvml) = &side.nvml {
                    let known: Vec<u32> = indices.iter().flatten().copied().collect();
                    if known.len() == indices.len() {
                        self.sampler = Some(Sampler::start(Arc::clone(nvml), known, pid));
                    }
                }
            }
            Line::Event(Event::Environment(env)) => self.environment = Some(*env),
            Line::Event(Event::Describe(map)) => self.declared.extend(map),
            Line::Event(Event::PhaseStart { name, index, .. }) => {
                if let Some(s) = &self.sampler {
                    s.enter(index);
                }
                if self.rank.as_ref().is_none_or(|r| r.local_rank == 0) {
                    progress.set_stage(&format!("phase {} ({name})", index + 1));
                }
                self.current.push((name, index));
            }
            Line::Event(Event::PhaseEnd(mut record)) => {
                let (devices, indices) = self.devices(origin, side);
                record.driver = Some(driver_phase(
                    self.sampler.as_ref(),
                    &record,
                    &devices,
                    &indices,
                    &side.reason,
                ));
                self.current.retain(|(_, open)| *open != record.index);
                self.phases.push(*record);
            }
            Line::Event(Event::Unavailable { reason }) => self.unavailable = Some(reason),
            Line::Event(Event::Done { status, error }) => {
                self.done = Some((status, error));
                self.done_order = Some(*dones);
                *dones += 1;
            }
            Line::Event(Event::Note { text }) => self.notes.push(text),
            Line::Event(Event::History(status)) => self.history = Some(status),
            Line::Event(Event::OomSnapshot(dump)) => {
                let observed = live_at_oom(*dump, self.oom_dir.as_deref());
                if crate::schema::history::keep(&mut self.oom_snapshots, observed) {
                    self.oom_snapshots_dropped += 1;
                }
            }
            Line::Event(Event::Snapshot { path, reason }) => self.snapshot = Some((path, reason)),
            // Storage events belong to predictions; a measuring worker does not send them.
            Line::Event(
                Event::Alloc(_)
                | Event::Free { .. }
                | Event::Tag { .. }
                | Event::Unpredictable(_)
                | Event::EmptyCache {}
                | Event::ResetPeaks {}
                | Event::ResetAccumulated {}
                | Event::Expr { .. }
                | Event::Domain(_)
                | Event::MemoryQuery { .. }
                | Event::HubQuery(_)
                | Event::Placeholder { .. }
                | Event::PlaceholderCount { .. },
            ) => {}
            Line::Unknown(value) => self.unknown.push(value),
            Line::Garbage(_) => self.garbage += 1,
            Line::Forged => self.forged += 1,
        }
    }

    /// The worker ended: NVML's view of the phase it never finished, and the sampler's interval.
    pub(crate) fn stop_sampling(&mut self, origin: &Origin, side: &DriverSide) -> Option<f64> {
        if let Some((name, index)) = self.current.last() {
            let probe = PhaseRecord {
                parent: None,
                name: name.clone(),
                index: *index,
                inputs: Map::new(),
                status: RunStatus::Crashed,
                duration_s: None,
                started_at_unix_us: None,
                ended_at_unix_us: None,
                devices: Vec::new(),
                error: None,
                driver: None,
                note: None,
            };
            let (devices, indices) = self.devices(origin, side);
            self.unfinished_driver = Some(driver_phase(
                self.sampler.as_ref(),
                &probe,
                &devices,
                &indices,
                &side.reason,
            ));
        }
        self.sampler.take().and_then(|s| s.finish().1)
    }
}

/// The live blocks at an out-of-memory, summarised by the snapshot reader from the pickle the
/// worker dumped, which is then removed (a workload that retries after each out-of-memory would
/// fill the disk otherwise). Only a file in `folder`, the one the CLI gave, is read or removed.
fn live_at_oom(dump: OomDump, folder: Option<&Path>) -> OomSnapshot {
    let live = match &dump.snapshot {
        None => Err(dump
            .reason
            .clone()
            .unwrap_or_else(|| "the worker dumped no snapshot".into())),
        Some(path) if folder.is_none_or(|f| path.parent() != Some(f)) => Err(format!(
            "the worker named a snapshot outside the folder the CLI gave it ({}): not read",
            path.display()
        )),
        Some(path) => {
            let read = snapshot::summarize_file(path, &SummaryOptions::default());
            let _ = std::fs::remove_file(path);
            match (read, dump.device_index()) {
                (Ok(summary), Some(device)) => Ok(LiveSummary::of_device(&summary, device)),
                (Ok(_), None) => Err(format!("not a CUDA device: {}", dump.device)),
                (Err(e), _) => Err(e.to_string()),
            }
        }
    };
    dump.observed(live)
}

/// How a run ended, beside its events.
pub(crate) struct Ended {
    pub started_at: String,
    pub run: process::WorkerRun,
    pub interval: Option<f64>,
}

/// The result file of one source, its status decided.
pub(crate) fn build(
    mut p: Source,
    status: RunStatus,
    stopped: Option<Stop>,
    origin: &Origin,
    side: &DriverSide,
    ended: &Ended,
) -> MeasureResult {
    let run = &ended.run;
    let (devices, indices) = p.devices(origin, side);
    let mut notes = std::mem::take(&mut p.notes);
    notes.extend(run.left_running_notes(origin.keep_children));
    if let Some(signal) = stopped
        && p.pid.is_none()
    {
        notes.push(format!(
            "{} arrived while the worker was starting: nothing was measured",
            signal.name()
        ));
    }
    // The phases the worker died in, innermost first (the driver's peaks are the innermost's).
    while let Some((name, index)) = p.current.pop() {
        p.phases.push(PhaseRecord {
            parent: p.current.last().map(|(_, i)| *i),
            name: name.clone(),
            index,
            inputs: Map::new(),
            status,
            duration_s: None,
            started_at_unix_us: None,
            ended_at_unix_us: None,
            devices: Vec::new(),
            error: None,
            driver: p.unfinished_driver.take(),
            note: Some(format!(
                "the worker ended ({status}) during this phase: no PyTorch end readings; `driver` holds the peaks NVML saw while it ran"
            )),
        });
    }
    // Nested phases end inner first: the file lists them in the order they began.
    p.phases.sort_by_key(|r| r.index);
    if p.forged > 0 {
        notes.push(crate::schema::events::forged_note(p.forged));
    }
    if p.garbage > 0 {
        notes.push(format!(
            "{} line(s) on the event channel were not JSON and were ignored",
            p.garbage
        ));
    }
    if let Some(env) = &p.environment {
        notes.extend(crate::environment::tested::untested_notes(&env.libraries));
    }
    if let Some(env) = &p.environment
        && env.allocator_backend() == Some("cudaMallocAsync")
    {
        notes.push("allocator backend cudaMallocAsync: max_memory_reserved may combine the highest levels of two pools and be an upper bound of the simultaneous peak".into());
    }
    if let Some(env) = &p.environment
        && env.torch_str("version").is_some_and(|v| v.contains("fake"))
    {
        notes.push("measured with the test suite's fake torch: not a GPU measurement".into());
    }
    if p.oom_snapshots_dropped > 0 {
        notes.push(format!(
            "{} more out-of-memory snapshot(s) were taken and not kept (the first {} and the latest are)",
            p.oom_snapshots_dropped,
            crate::schema::history::MAX_OOM_SNAPSHOTS - 1
        ));
    }
    let failure = (!status.is_ok()).then(|| failure_of(&p, status, stopped, run));
    let timeline = p
        .snapshot
        .take()
        .map(|(path, reason)| crate::schema::measure::Timeline {
            path: path.map(std::path::PathBuf::from),
            reason,
            bytes: None,
            sha256: None,
            summary: None,
            summary_reason: None,
        });
    let warm_summary = crate::schema::measure::warm_summary(&p.phases, &devices);
    MeasureResult {
        schema: crate::schema::measure::SCHEMA.to_string(),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        status,
        stop_signal: stopped.map(|s| s.name().to_string()),
        started_at: ended.started_at.clone(),
        ended_at: chrono::Utc::now().to_rfc3339(),
        identity: Identity {
            workload: origin.workload.clone(),
            code_hash: origin.code.code_hash.clone(),
            script_sha256: origin.code.script_sha256.clone(),
            seed: origin.seed,
            declared: p.declared,
        },
        dimensions: origin.dimensions.clone(),
        environment: RunEnvironment {
            python: p.environment,
            driver: side.view.clone(),
            driver_reason: side.reason.clone(),
            nvml_indices: indices,
            nvml_sample_interval_ms: ended.interval,
        },
        scope: Scope {
            phases: origin.scope_phases.clone(),
            first_pass: origin.first_pass.clone(),
            devices,
            rank: p.rank.as_ref().map(|r| r.rank),
        },
        policies: origin.policies.clone(),
        phases: p.phases,
        warm_summary,
        failure,
        worker: run.info(p.pid),
        predictions: Vec::new(),
        prediction: None,
        kv_cache: Vec::new(),
        history: p.history,
        oom_snapshots: p.oom_snapshots,
        timeline,
        distributed: None,
        unknown_events: p.unknown,
        notes,
    }
}

/// Why a worker that reported no error ended: the cap the user set, or how it ended and the
/// last lines it wrote (never an empty message).
fn ended_without_a_word(run: &crate::workload::process::WorkerRun) -> Option<String> {
    use crate::workload::process::{Exit, MEMORY_CAP_ENV};
    match run.exit {
        Exit::Code(0) | Exit::Timeout | Exit::Stopped(_) => None,
        Exit::MemoryCap(_) => Some(format!(
            "the worker was {}: the cap {MEMORY_CAP_ENV} sets; give a larger size, or unset it (a measuring worker has no cap of its own)",
            run.exit
        )),
        _ if run.stderr_tail.is_empty() => Some(format!(
            "the worker ended unexpectedly ({}) and wrote nothing on its standard error: it was killed from outside (the kernel's out-of-memory killer, a container's memory limit: see `dmesg`) or ended itself without a word (os._exit)",
            run.exit
        )),
        _ => Some(format!(
            "the worker ended unexpectedly ({}){}",
            run.exit,
            run.stderr_said()
        )),
    }
}

fn failure_of(
    p: &Source,
    status: RunStatus,
    stopped: Option<Stop>,
    run: &crate::workload::process::WorkerRun,
) -> Failure {
    let last = p.phases.last();
    let phase_error = last.and_then(|ph| ph.error.clone());
    let done_error = p.done.as_ref().and_then(|(_, e)| e.clone());
    Failure {
        rank: p.rank.as_ref().map(|r| r.rank),
        phase: last.map(|ph| ph.name.clone()),
        error_type: phase_error
            .as_ref()
            .map(|e| e.kind.clone())
            .or_else(|| {
                done_error
                    .as_ref()
                    .and_then(|e| e["type"].as_str().map(String::from))
            })
            .or_else(|| (status != RunStatus::Failed).then(|| status.to_string())),
        message: phase_error
            .as_ref()
            .map(|e| e.message.clone())
            .or_else(|| {
                done_error
                    .as_ref()
                    .and_then(|e| e["message"].as_str().map(String::from))
            })
            .or_else(|| {
                stopped.map(|s| {
                    format!(
                        "stopped by {} sent to iteragpu{}",
                        s.name(),
                        match last {
                            _ if p.pid.is_none() => " while the worker was starting".to_string(),
                            Some(ph) => format!(" during {}", ph.name),
                            None => " before the first phase".to_string(),
                        }
                    )
                })
            })
            // A rank's own end is worded from torchrun's summary (measure::ranks); the run's
            // exit there is torchrun's, not the rank's.
            .or_else(|| {
                p.rank
                    .is_none()
                    .then(|| ended_without_a_word(run))
                    .flatten()
            }),
        out_of_memory: phase_error.as_ref().is_some_and(|e| e.out_of_memory),
        post_mortem: phase_error
            .as_ref()
            .map(|e| e.message.as_str())
            .or_else(|| done_error.as_ref().and_then(|e| e["message"].as_str()))
            .and_then(crate::explain::oom::diagnose),
        caution: "a partial peak before a failure is not the memory need of a complete run".into(),
    }
}
