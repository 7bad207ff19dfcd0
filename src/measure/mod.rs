//! The phase protocol run in a fresh PyTorch process, with the driver's view beside it.
//!
//! The worker (Python) applies the protocol and emits events; this side builds the result as the
//! events arrive, so a worker that dies mid-phase still leaves every completed phase, the phase it
//! died in, its exit status or signal, and the last values seen.

pub mod compare;
pub mod events;
pub mod result;
pub mod runner;
pub mod sampler;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::environment::{DriverView, PythonEnvironment, nvml};
use events::{DriverPhase, Event, Line, PhaseRecord};
use result::{Failure, Identity, MeasureResult, Policies, RunEnvironment, Scope, WorkerInfo};
use runner::{Exit, WorkerCommand};
use sampler::Sampler;

/// Everything needed to run one trial.
#[derive(Clone, Debug)]
pub struct Trial {
    pub workload: String,
    /// The worker's specification (devices, dimensions, dtype, policies).
    pub spec: Value,
    pub devices: Vec<String>,
    pub dimensions: Map<String, Value>,
    pub seed: Option<u64>,
    /// Phases the workload runs, in order (documentation of the scope).
    pub scope_phases: Vec<String>,
    pub first_pass: String,
    pub policies: Policies,
    pub python: PathBuf,
    pub timeout: Option<Duration>,
    pub forward_output: bool,
}

/// How a trial ended.
#[derive(Debug)]
pub enum TrialOutcome {
    /// PyTorch or a GPU is missing: nothing was measured.
    Unavailable {
        reason: String,
        environment: Option<Box<PythonEnvironment>>,
    },
    Measured(Box<MeasureResult>),
}

/// CUDA device → NVML index, honouring CUDA_VISIBLE_DEVICES (indices or UUIDs).
pub fn nvml_indices(devices: &[String], driver: Option<&DriverView>) -> Vec<Option<u32>> {
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    devices
        .iter()
        .map(|d| {
            let index = crate::environment::device_index(d).unwrap_or(0);
            match &visible {
                None => Some(index as u32),
                Some(list) => {
                    let entry = list.split(',').nth(index)?.trim().to_string();
                    if let Ok(n) = entry.parse::<u32>() {
                        return Some(n);
                    }
                    driver?
                        .gpus
                        .iter()
                        .find(|g| g.uuid.as_deref().is_some_and(|u| u.starts_with(&entry)))
                        .map(|g| g.index)
                }
            }
        })
        .collect()
}

#[derive(Default)]
struct Progress {
    pid: Option<u32>,
    environment: Option<PythonEnvironment>,
    declared: Map<String, Value>,
    phases: Vec<PhaseRecord>,
    current: Option<(String, u64)>,
    unavailable: Option<String>,
    done: Option<(String, Option<Value>)>,
    unknown: Vec<Value>,
    garbage: u64,
}

/// Runs one trial in a fresh worker; `progress` (a terminal display, if any) shows the phase.
pub fn run_trial(
    trial: &Trial,
    interrupted: &AtomicBool,
    progress: Option<&indicatif::ProgressBar>,
) -> Result<TrialOutcome, runner::StartError> {
    let started_at = chrono::Utc::now().to_rfc3339();
    let (nvml, driver_reason) = match nvml::open() {
        Ok(n) => (Some(Arc::new(n)), None),
        Err(reason) => (None, Some(reason)),
    };
    let driver = nvml.as_deref().map(nvml::read);
    let indices = nvml_indices(&trial.devices, driver.as_ref());
    let mut sampler: Option<Sampler> = None;
    let mut p = Progress::default();
    let cmd = WorkerCommand {
        python: trial.python.clone(),
        spec: trial.spec.clone(),
        timeout: trial.timeout,
        forward_output: trial.forward_output,
        progress: progress.cloned(),
    };
    let run = runner::run(&cmd, interrupted, |line| match line {
        Line::Event(Event::Hello { pid, .. }) => {
            p.pid = Some(pid);
            if let Some(nvml) = &nvml {
                let known: Vec<u32> = indices.iter().flatten().copied().collect();
                if known.len() == indices.len() {
                    sampler = Some(Sampler::start(Arc::clone(nvml), known, pid));
                }
            }
        }
        Line::Event(Event::Environment(env)) => p.environment = Some(*env),
        Line::Event(Event::Describe(map)) => p.declared.extend(map),
        Line::Event(Event::PhaseStart { name, index }) => {
            if let Some(s) = &sampler {
                s.enter(index);
            }
            if let Some(bar) = progress {
                bar.set_prefix(format!("phase {} ({name})", index + 1));
            }
            p.current = Some((name, index));
        }
        Line::Event(Event::PhaseEnd(mut record)) => {
            record.driver = Some(driver_phase(
                sampler.as_ref(),
                &record,
                &trial.devices,
                &indices,
                &driver_reason,
            ));
            p.current = None;
            p.phases.push(*record);
        }
        Line::Event(Event::Unavailable { reason }) => p.unavailable = Some(reason),
        Line::Event(Event::Done { status, error }) => p.done = Some((status, error)),
        Line::Unknown(value) => p.unknown.push(value),
        Line::Garbage(_) => p.garbage += 1,
    })?;
    // A phase the worker never finished keeps the driver's view of it (peaks seen while it ran).
    let unfinished_driver = p.current.as_ref().map(|(name, index)| {
        let probe = PhaseRecord {
            name: name.clone(),
            index: *index,
            inputs: Map::new(),
            status: String::new(),
            duration_s: None,
            devices: Vec::new(),
            error: None,
            driver: None,
            note: None,
        };
        driver_phase(
            sampler.as_ref(),
            &probe,
            &trial.devices,
            &indices,
            &driver_reason,
        )
    });
    let (_, interval) = match sampler {
        Some(s) => s.finish(),
        None => (Vec::new(), None),
    };

    if let Some(reason) = p.unavailable.clone() {
        return Ok(TrialOutcome::Unavailable {
            reason,
            environment: p.environment.map(Box::new),
        });
    }
    if p.pid.is_none() && p.phases.is_empty() && p.current.is_none() {
        // The worker never said hello: the interpreter is not a working Python with this package.
        return Ok(TrialOutcome::Unavailable {
            reason: format!(
                "`{}` did not start iteragpu's worker ({:?}){}; give a Python 3 interpreter with --python or ITERAGPU_PYTHON",
                trial.python.display(),
                run.exit,
                if run.stderr_tail.is_empty() {
                    String::new()
                } else {
                    format!(": {}", run.stderr_tail.join(" | "))
                }
            ),
            environment: None,
        });
    }
    if run.exit == Exit::Code(2) && p.phases.is_empty() {
        return Ok(TrialOutcome::Unavailable {
            reason: format!(
                "the worker exited with status 2 before measuring anything: {}",
                run.stderr_tail.join(" | ")
            ),
            environment: p.environment.map(Box::new),
        });
    }
    let status = match (&run.exit, &p.done) {
        (Exit::Timeout, _) => "timeout",
        (Exit::Interrupted, _) => "interrupted",
        (Exit::Signal(_), _) => "crashed",
        (Exit::Code(0), Some((s, _))) if s == "ok" => "ok",
        (Exit::Code(3), Some(_)) => "failed",
        _ => "crashed",
    };
    let mut notes = Vec::new();
    if let Some((name, index)) = p.current.take() {
        p.phases.push(PhaseRecord {
            name: name.clone(),
            index,
            inputs: Map::new(),
            status: status.to_string(),
            duration_s: None,
            devices: Vec::new(),
            error: None,
            driver: unfinished_driver,
            note: Some(format!(
                "the worker ended ({status}) during this phase: no PyTorch end readings; `driver` holds the peaks NVML saw while it ran"
            )),
        });
    }
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
    let failure = (status != "ok").then(|| failure_of(&p, status));
    let warm_summary = result::warm_summary(&p.phases, &trial.devices);
    let result = MeasureResult {
        schema: result::SCHEMA.to_string(),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        status: status.to_string(),
        started_at,
        ended_at: chrono::Utc::now().to_rfc3339(),
        identity: Identity {
            workload: trial.workload.clone(),
            code_hash: crate::python_side::code_hash(),
            seed: trial.seed,
            declared: p.declared,
        },
        dimensions: trial.dimensions.clone(),
        environment: RunEnvironment {
            python: p.environment,
            driver,
            driver_reason,
            nvml_indices: indices,
            nvml_sample_interval_ms: interval,
        },
        scope: Scope {
            phases: trial.scope_phases.clone(),
            first_pass: trial.first_pass.clone(),
            devices: trial.devices.clone(),
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
            stderr_tail: run.stderr_tail,
        },
        predictions: Vec::new(),
        kv_cache: Vec::new(),
        unknown_events: p.unknown,
        notes,
    };
    Ok(TrialOutcome::Measured(Box::new(result)))
}

fn failure_of(p: &Progress, status: &str) -> Failure {
    let last = p.phases.last();
    let phase_error = last.and_then(|ph| ph.error.clone());
    let done_error = p.done.as_ref().and_then(|(_, e)| e.clone());
    Failure {
        phase: last.map(|ph| ph.name.clone()),
        error_type: phase_error
            .as_ref()
            .map(|e| e.kind.clone())
            .or_else(|| {
                done_error
                    .as_ref()
                    .and_then(|e| e["type"].as_str().map(String::from))
            })
            .or_else(|| (status != "failed").then(|| status.to_string())),
        message: phase_error.as_ref().map(|e| e.message.clone()).or_else(|| {
            done_error
                .as_ref()
                .and_then(|e| e["message"].as_str().map(String::from))
        }),
        out_of_memory: phase_error.as_ref().is_some_and(|e| e.out_of_memory),
        caution: "a partial peak before a failure is not the memory need of a complete run".into(),
    }
}

fn driver_phase(
    sampler: Option<&Sampler>,
    record: &PhaseRecord,
    devices: &[String],
    indices: &[Option<u32>],
    driver_reason: &Option<String>,
) -> Vec<DriverPhase> {
    let Some(s) = sampler else {
        let reason = driver_reason.clone().unwrap_or_else(|| {
            "a CUDA device could not be matched to an NVML device (CUDA_VISIBLE_DEVICES)".into()
        });
        return devices
            .iter()
            .zip(indices)
            .map(|(d, i)| DriverPhase {
                device: d.clone(),
                nvml_index: *i,
                samples: 0,
                peak_device_used_bytes: None,
                peak_process_used_bytes: None,
                process_used_at_end_bytes: None,
                outside_allocator_at_end_bytes: None,
                reason: Some(reason.clone()),
            })
            .collect();
    };
    let (peaks, now) = s.leave(record.index);
    devices
        .iter()
        .enumerate()
        .map(|(k, d)| {
            let peak = peaks.get(k).copied().unwrap_or_default();
            let at_end = now.get(k).copied().flatten();
            let reserved = record.devices.get(k).and_then(|r| r.end_reserved_bytes);
            let outside = match (at_end, reserved) {
                (Some(a), Some(r)) if a >= r => Some(a - r),
                _ => None,
            };
            DriverPhase {
                device: d.clone(),
                nvml_index: s.indices().get(k).copied(),
                samples: peak.samples,
                peak_device_used_bytes: peak.device_used,
                peak_process_used_bytes: peak.process_used,
                process_used_at_end_bytes: at_end,
                outside_allocator_at_end_bytes: outside,
                reason: match (at_end, reserved, outside) {
                    (None, _, _) => Some("NVML did not report this process's memory on this device".into()),
                    (Some(_), None, _) => Some("end_reserved_bytes was not read".into()),
                    (Some(_), Some(_), None) => Some("the driver's reading was below reserved: levels changed between the two readings".into()),
                    _ => None,
                },
            }
        })
        .collect()
}
