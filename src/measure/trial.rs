//! One trial = one fresh worker process. A [`TrialRunner`] runs a [`Trial`] and returns what it
//! measured: [`ProcessRunner`] starts the worker (its lifetime is `worker_process`'s) and builds
//! the result as the events arrive, so a worker that dies mid-phase still leaves every completed
//! phase, the phase it died in, its exit status or signal, and the last values seen. Tests of the
//! sweep use a mock runner that starts no process.

use std::path::Path;
use std::sync::Arc;

use crate::environment::nvml;
use crate::measure::build::{DriverSide, Ended, Origin, Source, TrialOutcome, build};
use crate::measure::driver_view::nvml_indices;
use crate::progress::Progress as ProgressDisplay;
use crate::schema::measure::RunStatus;
use crate::signals::{Stop, StopRequest};
use crate::workload::plan::Trial;
use crate::workload::process::{self, Exit, Launch, StartError, WorkerCommand};

/// Runs trials (hyperfine's `Executor`): the process runner for real, a mock in tests.
/// Shared by a sweep's threads: trials on different GPUs run at once.
pub trait TrialRunner: Sync {
    /// Runs one trial to its end; `progress` (a terminal display, if any) shows the phase.
    fn run(
        &self,
        trial: &Trial,
        progress: &dyn ProgressDisplay,
    ) -> Result<TrialOutcome, StartError>;

    /// `total_memory` of `device` as the interpreter's PyTorch declares it, if it can tell.
    fn device_total(&self, python: &Path, device: &str) -> Option<u64>;

    /// A signal asked iteragpu to stop (checked between trials).
    fn stop_requested(&self) -> Option<Stop>;
}

/// Runs each trial in a fresh `python -m iteragpu.worker` process, with NVML sampled beside it;
/// several at once from several threads (each trial its own process and sampler).
pub struct ProcessRunner {
    stop: &'static StopRequest,
}

impl ProcessRunner {
    /// `stop` is set by the signal handlers; the runner then stops the worker's whole group.
    pub fn new(stop: &'static StopRequest) -> ProcessRunner {
        ProcessRunner { stop }
    }
}

impl TrialRunner for ProcessRunner {
    fn run(
        &self,
        trial: &Trial,
        progress: &dyn ProgressDisplay,
    ) -> Result<TrialOutcome, StartError> {
        run_in_process(trial, self.stop, progress)
    }

    fn device_total(&self, python: &Path, device: &str) -> Option<u64> {
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
    let indices = nvml_indices(
        &trial.devices,
        trial.visible_devices.as_deref(),
        view.as_ref(),
    );
    let side = DriverSide {
        nvml,
        reason,
        view,
        indices,
    };
    let origin = Origin::of(trial);
    // At an out-of-memory the worker dumps the allocator's snapshot into a private folder; the
    // CLI summarises each dump as its event arrives, and the folder goes with the run.
    let mut spec = trial.spec.clone();
    let oom_dir = match &mut spec.history {
        Some(history) => {
            let dir = crate::python_side::private_dir("oom").map_err(StartError::Files)?;
            history.oom_dir = Some(dir.path().to_path_buf());
            Some(dir)
        }
        None => None,
    };
    let oom_path = oom_dir.as_ref().map(|d| d.path().to_path_buf());
    let mut sources: Vec<Source> = Vec::new();
    let mut dones = 0usize;
    let cmd = WorkerCommand {
        python: trial.python.clone(),
        spec: serde_json::to_value(&spec)
            .map_err(|e| StartError::Files(std::io::Error::other(e)))?,
        timeout: trial.timeout,
        forward_output: trial.forward_output,
        progress: progress.forwarder(),
        env: trial
            .alloc_conf
            .map(crate::schema::alloc_conf::AllocConf::environment)
            .unwrap_or_default()
            .into_iter()
            .chain(
                trial
                    .visible_devices
                    .clone()
                    .map(|v| ("CUDA_VISIBLE_DEVICES".to_string(), Some(v))),
            )
            .collect(),
        launch: match &trial.torchrun {
            None => Launch::Worker,
            Some(t) => Launch::Torchrun(t.clone()),
        },
        abandon: None,
        keep_children: trial.keep_children,
        answers: None,
        memory_cap: process::measure_memory_cap(),
        forker: None,
    };
    let run = process::run(&cmd, stop, |source, line| {
        while sources.len() <= source {
            sources.push(Source {
                oom_dir: oom_path.clone(),
                ..Source::default()
            });
        }
        sources[source].on_line(line, &origin, &side, progress, &mut dones);
    })?;
    let mut interval = None;
    for p in &mut sources {
        interval = interval.or(p.stop_sampling(&origin, &side));
    }
    let ended = Ended {
        started_at,
        run,
        interval,
    };
    match &trial.torchrun {
        None => {
            let p = sources.pop().unwrap_or_default();
            one_worker(p, trial, &origin, &side, &ended)
        }
        Some(t) => crate::measure::ranks::combine(sources, t, trial, &side, &ended),
    }
}

/// The result of one plain worker (or one rank, which `ranks` then gathers).
fn one_worker(
    p: Source,
    trial: &Trial,
    origin: &Origin,
    side: &DriverSide,
    ended: &Ended,
) -> Result<TrialOutcome, StartError> {
    let run = &ended.run;
    let stopped = run.stopped();
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
                run.stderr_said()
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
        p, status, stopped, origin, side, ended,
    ))))
}

/// A runner that starts no process: each trial's outcome is decided by a function of its spec,
/// so the sweep's modes, stop rules and series are tested without Python.
#[cfg(test)]
pub(crate) mod mock {
    use super::*;
    use crate::schema::events::PhaseRecord;
    use crate::schema::events::{DeviceReading, PhaseError};
    use crate::schema::measure::{
        Failure, Identity, MeasureResult, RunEnvironment, Scope, WorkerInfo,
    };
    use crate::schema::spec::WorkerSpec;
    use serde_json::Map;

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

    /// What a mock trial saw: its spec, allocator setting and `CUDA_VISIBLE_DEVICES`, and how
    /// many trials ran at once while it did.
    #[derive(Clone, Debug)]
    pub struct Seen {
        pub spec: WorkerSpec,
        pub alloc_conf: Option<crate::schema::alloc_conf::AllocConf>,
        pub visible: Option<String>,
        pub at_once: usize,
    }

    pub struct MockRunner<F: FnMut(&WorkerSpec) -> Outcome> {
        decide: std::sync::Mutex<F>,
        pub device_total: Option<u64>,
        /// A stop signal that "arrives" once this many trials have run.
        pub stop_after: Option<(usize, Stop)>,
        /// How long each trial lasts (concurrent trials overlap for that long).
        pub hold: std::time::Duration,
        seen: std::sync::Mutex<Vec<Seen>>,
        running: std::sync::Mutex<Vec<Option<String>>>,
    }

    impl<F: FnMut(&WorkerSpec) -> Outcome> MockRunner<F> {
        pub fn new(decide: F) -> Self {
            MockRunner {
                decide: std::sync::Mutex::new(decide),
                device_total: None,
                stop_after: None,
                hold: std::time::Duration::ZERO,
                seen: Default::default(),
                running: Default::default(),
            }
        }

        /// Every trial run, in the order they started.
        pub fn seen(&self) -> Vec<Seen> {
            self.seen.lock().unwrap().clone()
        }

        /// Every spec run, in the order they started.
        pub fn specs(&self) -> Vec<WorkerSpec> {
            self.seen().into_iter().map(|s| s.spec).collect()
        }

        /// The allocator setting of every trial run, in order.
        pub fn alloc_confs(&self) -> Vec<Option<crate::schema::alloc_conf::AllocConf>> {
            self.seen().into_iter().map(|s| s.alloc_conf).collect()
        }
    }

    impl<F: FnMut(&WorkerSpec) -> Outcome + Send> TrialRunner for MockRunner<F> {
        fn run(
            &self,
            trial: &Trial,
            _progress: &dyn crate::progress::Progress,
        ) -> Result<TrialOutcome, StartError> {
            let visible = trial.visible_devices.clone();
            let trials_so_far = {
                let mut running = self.running.lock().unwrap();
                assert!(
                    visible.is_none() || !running.contains(&visible),
                    "two trials at once on GPU {visible:?}"
                );
                running.push(visible.clone());
                let mut seen = self.seen.lock().unwrap();
                seen.push(Seen {
                    spec: trial.spec.clone(),
                    alloc_conf: trial.alloc_conf,
                    visible: visible.clone(),
                    at_once: running.len(),
                });
                seen.len()
            };
            let outcome = (self.decide.lock().unwrap_or_else(|e| e.into_inner()))(&trial.spec);
            std::thread::sleep(self.hold);
            {
                let mut running = self.running.lock().unwrap();
                if let Some(k) = running.iter().position(|v| *v == visible) {
                    running.remove(k);
                }
            }
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
                schema: crate::schema::measure::SCHEMA.into(),
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
                    pid: Some(trials_so_far as u32),
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

        fn device_total(&self, _python: &Path, _device: &str) -> Option<u64> {
            self.device_total
        }

        fn stop_requested(&self) -> Option<Stop> {
            let ran = self.seen.lock().unwrap().len();
            self.stop_after.filter(|(n, _)| ran >= *n).map(|(_, s)| s)
        }
    }
}
