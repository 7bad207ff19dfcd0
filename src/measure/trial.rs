//! One trial = one fresh worker process. A [`TrialRunner`] runs a [`Trial`] and returns what it
//! measured: [`ProcessRunner`] starts the worker (its lifetime is `worker_process`'s) and builds
//! the result as the events arrive, so a worker that dies mid-phase still leaves every completed
//! phase, the phase it died in, its exit status or signal, and the last values seen. Tests of the
//! sweep use a mock runner that starts no process.

use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::driver_view::{driver_phase, nvml_indices};
use super::events::{Event, Line, PhaseRecord, RankHello};
use super::result::{
    self, Failure, Identity, MeasureResult, Policies, RunEnvironment, RunStatus, Scope, WorkerInfo,
};
use super::sampler::Sampler;
use super::spec::WorkerSpec;
use super::worker_process::{self, Exit, Launch, StartError, WorkerCommand};
use crate::environment::{PythonEnvironment, nvml};
use crate::progress::{NoProgress, Progress as ProgressDisplay};
use crate::signals::{Stop, StopRequest};

/// Everything needed to run one trial.
#[derive(Clone, Debug)]
pub struct Trial {
    pub workload: String,
    /// What the worker runs.
    pub spec: WorkerSpec,
    pub devices: Vec<String>,
    /// The requested dimensions, recorded in the result.
    pub dimensions: Map<String, Value>,
    pub seed: Option<u64>,
    /// Phases the workload runs, in order (documentation of the scope).
    pub scope_phases: Vec<String>,
    pub first_pass: String,
    pub policies: Policies,
    pub python: PathBuf,
    pub timeout: Option<Duration>,
    /// Forward the workload's own output to our stderr (a sweep keeps its terminal quiet).
    pub forward_output: bool,
    /// Name, but do not end, the processes the workload leaves running (`--keep-children`).
    pub keep_children: bool,
    /// The allocator setting the worker starts with (`None`: the environment's).
    pub alloc_conf: Option<super::alloc_conf::AllocConf>,
    /// `--nproc-per-node`: one worker per local rank under torchrun.
    pub torchrun: Option<super::torchrun::Torchrun>,
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

/// Runs trials (hyperfine's `Executor`): the process runner for real, a mock in tests.
pub trait TrialRunner {
    /// Runs one trial to its end; `progress` (a terminal display, if any) shows the phase.
    fn run(
        &mut self,
        trial: &Trial,
        progress: &dyn ProgressDisplay,
    ) -> Result<TrialOutcome, StartError>;

    /// `total_memory` of `device` as the interpreter's PyTorch declares it, if it can tell.
    fn device_total(&mut self, python: &Path, device: &str) -> Option<u64>;

    /// A signal asked iteragpu to stop (checked between trials).
    fn stop_requested(&self) -> Option<Stop>;

    /// The highest predicted peak reserved of `plan` on the first device of this machine (the
    /// frontier's hint); `None` when it cannot be predicted.
    fn predicted_peak(&mut self, plan: &super::plan::MeasurePlan) -> Option<u64>;
}

/// Runs each trial in a fresh `python -m iteragpu.worker` process, with NVML sampled beside it.
pub struct ProcessRunner {
    stop: &'static StopRequest,
    /// The card predictions are made for, read from the first device for one allocator backend.
    target: Option<(String, Option<crate::prediction::target::Target>)>,
}

impl ProcessRunner {
    /// `stop` is set by the signal handlers; the runner then stops the worker's whole group.
    pub fn new(stop: &'static StopRequest) -> ProcessRunner {
        ProcessRunner { stop, target: None }
    }
}

impl TrialRunner for ProcessRunner {
    fn run(
        &mut self,
        trial: &Trial,
        progress: &dyn ProgressDisplay,
    ) -> Result<TrialOutcome, StartError> {
        run_in_process(trial, self.stop, progress)
    }

    fn device_total(&mut self, python: &Path, device: &str) -> Option<u64> {
        let env = crate::environment::probe(
            python,
            &[device.to_string()],
            crate::environment::PROBE_TIMEOUT,
            Some(self.stop),
        )
        .ok()?;
        env.device(device)?.get("total_memory")?.as_u64()
    }

    fn stop_requested(&self) -> Option<Stop> {
        self.stop.get()
    }

    fn predicted_peak(&mut self, plan: &super::plan::MeasurePlan) -> Option<u64> {
        let device = plan.devices.first()?;
        let backend = plan.allocator_backend();
        if self.target.as_ref().is_none_or(|(b, _)| *b != backend) {
            let target = crate::prediction::target::Target::of_device(
                &plan.python,
                device,
                &backend,
                Some(self.stop),
            )
            .ok();
            self.target = Some((backend, target));
        }
        let target = self.target.clone().and_then(|(_, t)| t)?;
        match crate::prediction::run::predict(plan, &target, self.stop, &NoProgress).ok()? {
            // A prediction stopped by a signal or the timeout holds only its first phases.
            crate::prediction::run::Outcome::Predicted(doc) if !doc.stopped() => {
                doc.max_peak_reserved()
            }
            _ => None,
        }
    }
}

/// What one event source (a worker, or one rank) has said so far.
#[derive(Default)]
pub(crate) struct Progress {
    pub(crate) pid: Option<u32>,
    pub(crate) rank: Option<RankHello>,
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
    pub(crate) notes: Vec<String>,
    pub(crate) history: Option<super::history::HistoryStatus>,
    pub(crate) oom_snapshots: Vec<super::history::OomSnapshot>,
    pub(crate) oom_snapshots_dropped: u64,
    pub(crate) snapshot: Option<(Option<String>, Option<String>)>,
    pub(crate) sampler: Option<Sampler>,
    /// The phase the sampler is in when the worker ends mid-phase (NVML's peaks of it).
    pub(crate) unfinished_driver: Option<Vec<super::events::DriverPhase>>,
}

/// The driver's side of a run: NVML, or why not, and which NVML device each CUDA device is.
pub(crate) struct DriverSide {
    pub(crate) nvml: Option<Arc<nvml_wrapper::Nvml>>,
    pub(crate) reason: Option<String>,
    pub(crate) view: Option<crate::environment::DriverView>,
    pub(crate) indices: Vec<Option<u32>>,
}

impl Progress {
    /// The devices this source records, and their NVML indices: all of the trial's for a plain
    /// worker, its own `devices[LOCAL_RANK]` for a rank.
    fn devices(&self, trial: &Trial, side: &DriverSide) -> (Vec<String>, Vec<Option<u32>>) {
        match &self.rank {
            None => (trial.devices.clone(), side.indices.clone()),
            Some(r) => {
                let k = r.local_rank as usize;
                (
                    vec![r.device.clone()],
                    vec![side.indices.get(k).copied().flatten()],
                )
            }
        }
    }

    fn on_line(
        &mut self,
        line: Line,
        trial: &Trial,
        side: &DriverSide,
        progress: &dyn ProgressDisplay,
        dones: &mut usize,
    ) {
        match line {
            Line::Event(Event::Hello { pid, rank, .. }) => {
                self.pid = Some(pid);
                self.rank = rank;
                let (_, indices) = self.devices(trial, side);
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
                let (devices, indices) = self.devices(trial, side);
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
            Line::Event(Event::OomSnapshot(s)) => {
                if super::history::keep(&mut self.oom_snapshots, *s) {
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
                | Event::Placeholder { .. }
                | Event::PlaceholderCount { .. },
            ) => {}
            Line::Unknown(value) => self.unknown.push(value),
            Line::Garbage(_) => self.garbage += 1,
        }
    }

    /// The worker ended: NVML's view of the phase it never finished, and the sampler's interval.
    fn stop_sampling(&mut self, trial: &Trial, side: &DriverSide) -> Option<f64> {
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
            let (devices, indices) = self.devices(trial, side);
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

/// Runs one trial in a fresh worker (or one fresh worker per rank under torchrun); `progress`
/// (a terminal display, if any) shows the phase.
fn run_in_process(
    trial: &Trial,
    stop: &StopRequest,
    progress: &dyn ProgressDisplay,
) -> Result<TrialOutcome, StartError> {
    let started_at = chrono::Utc::now().to_rfc3339();
    let (nvml, reason) = match nvml::open() {
        Ok(n) => (Some(Arc::new(n)), None),
        Err(reason) => (None, Some(reason)),
    };
    let view = nvml.as_deref().map(nvml::read);
    let indices = nvml_indices(&trial.devices, view.as_ref());
    let side = DriverSide {
        nvml,
        reason,
        view,
        indices,
    };
    let mut sources: Vec<Progress> = Vec::new();
    let mut dones = 0usize;
    let cmd = WorkerCommand {
        python: trial.python.clone(),
        spec: serde_json::to_value(&trial.spec)
            .map_err(|e| StartError::Files(std::io::Error::other(e)))?,
        timeout: trial.timeout,
        forward_output: trial.forward_output,
        progress: progress.forwarder(),
        env: trial
            .alloc_conf
            .map(super::alloc_conf::AllocConf::environment)
            .unwrap_or_default(),
        launch: match &trial.torchrun {
            None => Launch::Worker,
            Some(t) => Launch::Torchrun(t.clone()),
        },
        abandon: None,
        keep_children: trial.keep_children,
    };
    let run = worker_process::run(&cmd, stop, |source, line| {
        while sources.len() <= source {
            sources.push(Progress::default());
        }
        sources[source].on_line(line, trial, &side, progress, &mut dones);
    })?;
    let mut interval = None;
    for p in &mut sources {
        interval = interval.or(p.stop_sampling(trial, &side));
    }
    let ended = Ended {
        started_at,
        run,
        interval,
    };
    match &trial.torchrun {
        None => {
            let p = sources.pop().unwrap_or_default();
            one_worker(p, trial, &side, &ended)
        }
        Some(t) => super::ranks::combine(sources, t, trial, &side, &ended),
    }
}

/// How a run ended, beside its events.
pub(crate) struct Ended {
    pub started_at: String,
    pub run: worker_process::WorkerRun,
    pub interval: Option<f64>,
}

/// The result of one plain worker (or one rank, which `ranks` then gathers).
fn one_worker(
    p: Progress,
    trial: &Trial,
    side: &DriverSide,
    ended: &Ended,
) -> Result<TrialOutcome, StartError> {
    let run = &ended.run;
    let stopped = match run.exit {
        Exit::Stopped(signal) => Some(signal),
        _ => None,
    };
    if let Some(reason) = p.unavailable.clone()
        && stopped.is_none()
    {
        return Ok(TrialOutcome::Unavailable { reason });
    }
    if p.pid.is_none() && p.phases.is_empty() && p.current.is_empty() && stopped.is_none() {
        // The worker never said hello: the interpreter is not a working Python with this package.
        return Ok(TrialOutcome::Unavailable {
            reason: format!(
                "`{}` did not start iteragpu's worker ({}){}; give a Python 3 interpreter with --python or ITERAGPU_PYTHON",
                trial.python.display(),
                run.exit,
                if run.stderr_tail.is_empty() {
                    String::new()
                } else {
                    format!(": {}", run.stderr_tail.join(" | "))
                }
            ),
        });
    }
    if run.exit == Exit::Code(2) && p.phases.is_empty() && stopped.is_none() {
        return Ok(TrialOutcome::Unavailable {
            reason: format!(
                "the worker exited with status 2 before measuring anything: {}",
                run.stderr_tail.join(" | ")
            ),
        });
    }
    let status = match (&run.exit, &p.done) {
        (Exit::Timeout, _) => RunStatus::Timeout,
        (Exit::Stopped(Stop::Interrupt), _) => RunStatus::Interrupted,
        (Exit::Stopped(Stop::Terminate(_)), _) => RunStatus::Terminated,
        (Exit::Signal(_), _) => RunStatus::Crashed,
        (Exit::Code(0), Some((s, _))) if s == "ok" => RunStatus::Ok,
        (Exit::Code(3), Some(_)) => RunStatus::Failed,
        _ => RunStatus::Crashed,
    };
    Ok(TrialOutcome::Measured(Box::new(build(
        p, status, stopped, trial, side, ended,
    ))))
}

/// The result file of one source, its status decided.
pub(crate) fn build(
    mut p: Progress,
    status: RunStatus,
    stopped: Option<Stop>,
    trial: &Trial,
    side: &DriverSide,
    ended: &Ended,
) -> MeasureResult {
    let run = &ended.run;
    let (devices, indices) = p.devices(trial, side);
    let mut notes = std::mem::take(&mut p.notes);
    notes.extend(run.left_running_notes(trial.keep_children));
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
    if p.garbage > 0 {
        notes.push(format!(
            "{} line(s) on the event channel were not JSON and were ignored",
            p.garbage
        ));
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
            super::history::MAX_OOM_SNAPSHOTS - 1
        ));
    }
    let failure = (!status.is_ok()).then(|| failure_of(&p, status, stopped));
    let timeline = p.snapshot.take().map(|(path, reason)| result::Timeline {
        path: path.map(std::path::PathBuf::from),
        reason,
        bytes: None,
        sha256: None,
        summary: None,
        summary_reason: None,
    });
    let warm_summary = result::warm_summary(&p.phases, &devices);
    let hash = trial.spec.code_hash();
    MeasureResult {
        schema: result::SCHEMA.to_string(),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        status,
        stop_signal: stopped.map(|s| s.name().to_string()),
        started_at: ended.started_at.clone(),
        ended_at: chrono::Utc::now().to_rfc3339(),
        identity: Identity {
            workload: trial.workload.clone(),
            code_hash: hash.code_hash,
            script_sha256: hash.script_sha256,
            seed: trial.seed,
            declared: p.declared,
        },
        dimensions: trial.dimensions.clone(),
        environment: RunEnvironment {
            python: p.environment,
            driver: side.view.clone(),
            driver_reason: side.reason.clone(),
            nvml_indices: indices,
            nvml_sample_interval_ms: ended.interval,
        },
        scope: Scope {
            phases: trial.scope_phases.clone(),
            first_pass: trial.first_pass.clone(),
            devices,
            rank: p.rank.as_ref().map(|r| r.rank),
        },
        policies: trial.policies.clone(),
        phases: p.phases,
        warm_summary,
        failure,
        worker: WorkerInfo {
            pid: p.pid.or(Some(run.pid)),
            exit_code: match run.exit {
                Exit::Code(c) => Some(c),
                _ => None,
            },
            signal: match run.exit {
                Exit::Signal(s) => Some(s),
                _ => None,
            },
            stderr_tail: run.stderr_tail.clone(),
        },
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

fn failure_of(p: &Progress, status: RunStatus, stopped: Option<Stop>) -> Failure {
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

/// A runner that starts no process: each trial's outcome is decided by a function of its spec,
/// so the sweep's modes, stop rules and series are tested without Python.
#[cfg(test)]
pub(crate) mod mock {
    use super::*;
    use crate::measure::events::{DeviceReading, PhaseError};

    /// What the mock worker does with a trial.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Outcome {
        /// Completes with this peak (allocated = reserved).
        Ok {
            peak: u64,
        },
        /// Runs out of memory in its phase after reaching this peak.
        OutOfMemory {
            peak: u64,
        },
        /// Raises an exception that is not an out-of-memory.
        Error,
        Crash,
        Timeout,
        Interrupted,
        /// PyTorch or a GPU is missing.
        Unavailable,
    }

    pub struct MockRunner<F: FnMut(&WorkerSpec) -> Outcome> {
        pub decide: F,
        pub device_total: Option<u64>,
        /// A stop signal that "arrives" once this many trials have run.
        pub stop_after: Option<(usize, Stop)>,
        /// Predicted peaks: a function of the plan's spec (None: cannot predict).
        pub predict: Option<fn(&WorkerSpec) -> u64>,
        /// How many predictions were asked for.
        pub predictions: usize,
        /// Every spec run, in order.
        pub specs: Vec<WorkerSpec>,
        /// The allocator setting of every trial run, in order.
        pub alloc_confs: Vec<Option<crate::measure::alloc_conf::AllocConf>>,
    }

    impl<F: FnMut(&WorkerSpec) -> Outcome> MockRunner<F> {
        pub fn new(decide: F) -> Self {
            MockRunner {
                decide,
                device_total: None,
                stop_after: None,
                predict: None,
                predictions: 0,
                specs: Vec::new(),
                alloc_confs: Vec::new(),
            }
        }
    }

    impl<F: FnMut(&WorkerSpec) -> Outcome> TrialRunner for MockRunner<F> {
        fn run(
            &mut self,
            trial: &Trial,
            _progress: &dyn crate::progress::Progress,
        ) -> Result<TrialOutcome, StartError> {
            self.specs.push(trial.spec.clone());
            self.alloc_confs.push(trial.alloc_conf);
            let outcome = (self.decide)(&trial.spec);
            let (status, peak, error) = match outcome {
                Outcome::Unavailable => {
                    return Ok(TrialOutcome::Unavailable {
                        reason: "mock: no GPU".into(),
                    });
                }
                Outcome::Ok { peak } => (RunStatus::Ok, Some(peak), None),
                Outcome::OutOfMemory { peak } => (
                    RunStatus::Failed,
                    Some(peak),
                    Some(PhaseError {
                        kind: "OutOfMemoryError".into(),
                        message: "mock: CUDA out of memory".into(),
                        out_of_memory: true,
                    }),
                ),
                Outcome::Error => (
                    RunStatus::Failed,
                    Some(1 << 20),
                    Some(PhaseError {
                        kind: "ValueError".into(),
                        message: "mock: ValueError".into(),
                        out_of_memory: false,
                    }),
                ),
                Outcome::Crash => (RunStatus::Crashed, None, None),
                Outcome::Timeout => (RunStatus::Timeout, None, None),
                Outcome::Interrupted => (RunStatus::Interrupted, None, None),
            };
            let phase_status = if error.is_some() {
                RunStatus::Failed
            } else {
                status
            };
            let phase = PhaseRecord {
                parent: None,
                started_at_unix_us: None,
                ended_at_unix_us: None,
                name: "work".into(),
                index: 0,
                inputs: Map::new(),
                status: phase_status,
                duration_s: Some(0.01),
                devices: trial
                    .devices
                    .iter()
                    .map(|d| DeviceReading {
                        device: d.clone(),
                        start_allocated_bytes: Some(0),
                        start_reserved_bytes: Some(0),
                        peak_allocated_bytes: peak,
                        peak_reserved_bytes: peak,
                        end_allocated_bytes: peak.map(|_| 0),
                        end_reserved_bytes: peak,
                        mem_get_info: None,
                        allocator: None,
                        null_reasons: Default::default(),
                    })
                    .collect(),
                error: error.clone(),
                driver: None,
                note: None,
            };
            let failure = (!status.is_ok()).then(|| Failure {
                phase: Some("work".into()),
                error_type: error.as_ref().map(|e| e.kind.clone()),
                message: error.as_ref().map(|e| e.message.clone()),
                out_of_memory: error.as_ref().is_some_and(|e| e.out_of_memory),
                rank: None,
                post_mortem: None,
                caution: "a partial peak before a failure is not the memory need of a complete run"
                    .into(),
            });
            Ok(TrialOutcome::Measured(Box::new(MeasureResult {
                schema: result::SCHEMA.into(),
                tool_version: "mock".into(),
                status,
                stop_signal: None,
                started_at: String::new(),
                ended_at: String::new(),
                identity: Identity {
                    workload: trial.workload.clone(),
                    code_hash: "mock".into(),
                    script_sha256: None,
                    seed: trial.seed,
                    declared: Map::new(),
                },
                dimensions: trial.dimensions.clone(),
                environment: RunEnvironment {
                    python: None,
                    driver: None,
                    driver_reason: Some("mock".into()),
                    nvml_indices: Vec::new(),
                    nvml_sample_interval_ms: None,
                },
                scope: Scope {
                    phases: trial.scope_phases.clone(),
                    first_pass: trial.first_pass.clone(),
                    devices: trial.devices.clone(),
                    rank: None,
                },
                policies: trial.policies.clone(),
                phases: vec![phase],
                warm_summary: Vec::new(),
                failure,
                worker: WorkerInfo {
                    pid: Some(self.specs.len() as u32),
                    exit_code: None,
                    signal: None,
                    stderr_tail: Vec::new(),
                },
                predictions: Vec::new(),
                prediction: None,
                kv_cache: Vec::new(),
                history: None,
                oom_snapshots: Vec::new(),
                timeline: None,
                distributed: None,
                unknown_events: Vec::new(),
                notes: Vec::new(),
            })))
        }

        fn device_total(&mut self, _python: &Path, _device: &str) -> Option<u64> {
            self.device_total
        }

        fn stop_requested(&self) -> Option<Stop> {
            self.stop_after
                .filter(|(n, _)| self.specs.len() >= *n)
                .map(|(_, s)| s)
        }

        fn predicted_peak(&mut self, plan: &crate::measure::plan::MeasurePlan) -> Option<u64> {
            self.predictions += 1;
            self.predict.map(|f| f(&plan.worker_spec()))
        }
    }
}
