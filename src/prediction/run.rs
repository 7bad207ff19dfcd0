//! Runs a plan's workload in a predicting worker (the same worker and workload code, on data-less
//! CUDA tensors, every GPU hidden from it) and turns its storage events into a prediction.

use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::environment::PythonEnvironment;
use crate::prediction::answers::Answers;
use crate::prediction::oom;
use crate::prediction::replay::{Replayed, TraceEvent, replay_until};
use crate::progress::Progress;
use crate::schema::events::{Event, Line};
use crate::schema::failure::FailureDetail;
use crate::schema::measure::Identity;
use crate::schema::prediction::{
    Assumptions, Capacity, DocumentKind, PhaseStatus, PlaceholderRead, PredictedPhase,
    PredictionDoc, PredictionStatus, SCHEMA,
};
use crate::schema::target::Target;
use crate::schema::trace::Domain;
use crate::signals::{Stop, StopRequest};
use crate::workload::plan::RunPlan;
use crate::workload::process::{self, Exit, StartError, WorkerCommand, WorkerRun};

/// The worker's variable for the bound its data-dependent sizes take (`predict/tracker.py`).
const BOUND_VARIABLE: &str = "ITERAGPU_PREDICT_BOUND";

/// The worker's variable that asks a symbolic trace of fields (`predict/symbolic.py`).
const SYMBOLIC_VARIABLE: &str = "ITERAGPU_PREDICT_SYMBOLIC_TRACE";

/// How a prediction ended.
pub enum Outcome {
    /// A prediction file, whatever became of the workload: its `status` says whether it ran to
    /// its end (`complete`, `partial`), raised (`failed`) or was stopped by the timeout or a
    /// signal (`timeout`, `interrupted`, `terminated`: `PredictionDoc::stopped`), with the
    /// phases predicted until then.
    Predicted(Box<PredictionDoc>),
    /// PyTorch, a C++ compiler for the shims, or a workload's package is missing, or the
    /// interpreter's torch is outside `versions::supported_torch()`.
    Unavailable(String),
}

#[derive(Clone, Default)]
struct Collected {
    events: Vec<TraceEvent>,
    environment: Option<PythonEnvironment>,
    declared: Map<String, Value>,
    unavailable: Option<String>,
    /// Why the worker's torch is refused (`versions::refuse_torch`); the worker is given up.
    refused: Option<String>,
    done: Option<(String, Option<Value>)>,
    placeholders: Vec<PlaceholderRead>,
    placeholder_types: Vec<(Option<String>, Option<u64>, String)>,
    notes: Vec<String>,
    /// Lines without the run's channel token, ignored.
    forged: u64,
    /// A symbolic trace's expressions and what it holds for (`prediction::symbolic`).
    exprs: HashMap<u64, Value>,
    domain: Option<Domain>,
    /// The script read the allocator's counters: their answers hold for this run's values only.
    queried: bool,
}

/// Predicts `plan` for `target`, within the card's whole memory (`oom::of_card`). A torch
/// outside `versions::supported_torch()` is refused as soon as the worker reports its environment:
/// the worker is killed then, before it runs anything.
pub fn predict(
    plan: &RunPlan,
    target: &Target,
    stop: &StopRequest,
    progress: &dyn Progress,
) -> Result<Outcome, StartError> {
    predict_within(plan, target, &oom::of_card(target), stop, progress)
}

/// [`predict`] within `capacity` (`oom::capacity`: the card's, or `--memory-limit`): the first
/// allocation that does not fit is a predicted out-of-memory (`PredictionDoc::out_of_memory`).
pub fn predict_within(
    plan: &RunPlan,
    target: &Target,
    capacity: &Capacity,
    stop: &StopRequest,
    progress: &dyn Progress,
) -> Result<Outcome, StartError> {
    predict_served(plan, target, capacity, stop, progress, None)
}

/// [`predict_within`] in a child of the sweep's fork server (`prediction::fork_server`) when
/// one is given and starts, else in a fresh process; the prediction is the same either way, and
/// a server that could not start is said in the notes.
pub fn predict_served(
    plan: &RunPlan,
    target: &Target,
    capacity: &Capacity,
    stop: &StopRequest,
    progress: &dyn Progress,
    server: Option<&crate::prediction::fork_server::Shared>,
) -> Result<Outcome, StartError> {
    let upper = predict_once(plan, target, capacity, stop, progress, server, None)?;
    let Outcome::Predicted(mut doc) = upper else {
        return Ok(upper);
    };
    if doc.phases.iter().any(|p| p.status == PhaseStatus::Bounded) && stop.get().is_none() {
        progress.set_stage("predicting again at the lower bound of the data-dependent sizes");
        let lower = predict_once(
            plan,
            target,
            capacity,
            stop,
            progress,
            server,
            Some("lower"),
        )?;
        let lower = match lower {
            Outcome::Predicted(d) => Ok(d),
            Outcome::Unavailable(why) => Err(why),
        };
        super::bounds::merge_lower(&mut doc, lower);
    }
    Ok(Outcome::Predicted(doc))
}

/// One run of the predicting worker; `bound` `lower` takes each data-dependent size at its
/// smallest (`ITERAGPU_PREDICT_BOUND`), else at its largest.
fn predict_once(
    plan: &RunPlan,
    target: &Target,
    capacity: &Capacity,
    stop: &StopRequest,
    progress: &dyn Progress,
    server: Option<&crate::prediction::fork_server::Shared>,
    bound: Option<&str>,
) -> Result<Outcome, StartError> {
    let worked = work(plan, target, capacity, stop, progress, server, bound, None)?;
    Ok(match worked {
        Err(outcome) => outcome,
        Ok(w) => conclude(plan, target, capacity, stop, &w, &w.c.events),
    })
}

/// What one run of the predicting worker said, collected: [`conclude`] makes the prediction of
/// it, or of another value of a symbolic trace's fields from its events made concrete
/// (`prediction::symbolic`).
#[derive(Clone)]
pub struct Worked {
    c: Collected,
    run: WorkerRun,
    hub_notes: Vec<String>,
    hub: Vec<crate::model::hub::overlay::HubServed>,
    not_served: Option<String>,
}

impl Worked {
    /// A symbolic trace's expressions, its domain (absent: no trace), and its events.
    pub fn traced(&self) -> (&HashMap<u64, Value>, Option<&Domain>, &[TraceEvent]) {
        (&self.c.exprs, self.c.domain.as_ref(), &self.c.events)
    }

    /// The script read the allocator's counters (answered for this run's values).
    pub fn queried(&self) -> bool {
        self.c.queried
    }

    /// The run was stopped by a signal to the CLI (Ctrl-C, SIGTERM).
    pub fn interrupted(&self) -> bool {
        matches!(self.run.exit, Exit::Stopped(_))
    }
}

/// Runs the predicting worker once (`symbolic`: the fields it traces symbolically and their
/// ranges, `predict/symbolic.py`); Err: an outcome without events to conclude from (a torch
/// refused, a worker that could not start).
#[allow(clippy::too_many_arguments)]
pub fn work(
    plan: &RunPlan,
    target: &Target,
    capacity: &Capacity,
    stop: &StopRequest,
    progress: &dyn Progress,
    server: Option<&crate::prediction::fork_server::Shared>,
    bound: Option<&str>,
    symbolic: Option<&str>,
) -> Result<Result<Worked, Outcome>, StartError> {
    let (forker, not_served) = match server.and_then(|s| s.get(plan)) {
        None => (None, None),
        Some(Ok(forker)) => (Some(forker), None),
        Some(Err(why)) => (
            None,
            Some(format!(
                "the fork server could not start ({why}): this prediction ran in a fresh process, importing torch itself"
            )),
        ),
    };
    let trial = plan.trial();
    let spec = predicted_spec(plan, target);
    let backend = crate::prediction::replay::backend(&target.allocator_backend);
    let pipe = process::AnswerPipe::default();
    // Hub ids in the script are served here, without their weights, into the worker's overlay
    // (removed when this function returns, whatever ended the run).
    let mut overlay = crate::model::hub::overlay::Overlay::new().map_err(StartError::Files)?;
    let cmd = WorkerCommand {
        python: plan.python.clone(),
        spec: serde_json::to_value(&spec)
            .map_err(|e| StartError::Files(std::io::Error::other(e)))?,
        timeout: Some(plan.timeout),
        // The run at the lower bound is the same workload again: its output was shown once.
        forward_output: trial.forward_output && bound.is_none(),
        progress: progress.forwarder(),
        // The predicting process never touches a GPU, even on a machine that has one.
        env: vec![
            ("CUDA_VISIBLE_DEVICES".into(), Some(String::new())),
            // The worker's standard input carries the allocator's answers (predict/memory.py).
            ("ITERAGPU_ANSWERS".into(), Some("stdin".into())),
            (
                crate::model::hub::overlay::OVERLAY_VARIABLE.into(),
                Some(overlay.path().display().to_string()),
            ),
            (BOUND_VARIABLE.into(), bound.map(str::to_string)),
            (SYMBOLIC_VARIABLE.into(), symbolic.map(str::to_string)),
        ],
        launch: process::Launch::Worker,
        abandon: Some(Arc::new(AtomicBool::new(false))),
        keep_children: trial.keep_children,
        answers: Some(pipe.clone()),
        // Checked when the plan was built (`RunPlan::for_prediction`).
        memory_cap: Some(process::predict_memory_cap().unwrap_or(process::PREDICT_MEMORY_CAP)),
        forker,
    };
    let abandon = cmd.abandon.clone();
    let mut c = Collected::default();
    // The script's own torch.cuda memory calls: the replay's model, with the same capacity.
    let mut answers = Answers::new(backend, Some(capacity.allocator_bytes));
    let run = process::run(&cmd, stop, |_, line| match line {
        Line::Event(Event::Environment(env)) => {
            // A CPU-only interpreter reports no torch here only when it could not import it,
            // which the worker says with its own `unavailable`.
            if env.torch.is_some()
                && let Some(why) = crate::schema::versions::refuse_torch(env.torch_str("version"))
            {
                c.refused = Some(why);
                if let Some(flag) = &abandon {
                    flag.store(true, Ordering::Relaxed);
                }
            }
            c.environment = Some(*env);
        }
        Line::Event(Event::Describe(map)) => c.declared.extend(map),
        Line::Event(Event::PhaseStart {
            name,
            index,
            inputs,
            parent,
            automatic,
        }) => {
            progress.set_stage(&format!("predicting phase {} ({name})", index + 1));
            c.events.push(TraceEvent::PhaseStart {
                name,
                index,
                parent,
                automatic,
                inputs,
            });
        }
        Line::Event(Event::PhaseEnd(record)) => c.events.push(TraceEvent::PhaseEnd {
            index: record.index,
            failed: !record.status.is_ok(),
            inputs: record.inputs,
        }),
        Line::Event(Event::Alloc(a)) => c.events.push(TraceEvent::Alloc(a)),
        Line::Event(Event::Free { id }) => c.events.push(TraceEvent::Free(id)),
        Line::Event(Event::Tag { id, category }) => c.events.push(TraceEvent::Tag(id, category)),
        Line::Event(Event::Unpredictable(u)) => c.events.push(TraceEvent::Unpredictable(u)),
        Line::Event(Event::EmptyCache {}) => c.events.push(TraceEvent::EmptyCache),
        Line::Event(Event::ResetPeaks {}) => c.events.push(TraceEvent::ResetPeaks),
        Line::Event(Event::ResetAccumulated {}) => c.events.push(TraceEvent::ResetAccumulated),
        Line::Event(Event::HubQuery(query)) => {
            progress.set_stage(&format!("reading {} from the Hub (no weights)", query.repo));
            pipe.send(&overlay.answer(&query));
        }
        Line::Event(Event::MemoryQuery { id }) => {
            c.queried = true;
            // A worker gone meanwhile needs no answer.
            pipe.send(&answers.answer(id, &c.events));
        }
        Line::Event(Event::Placeholder {
            file,
            line,
            dtype,
            answer,
            ..
        }) => {
            let answer =
                answer.unwrap_or_else(|| if dtype == "bool" { "False" } else { "0" }.into());
            c.placeholder_types.push((file, line, answer));
        }
        Line::Event(Event::PlaceholderCount { file, line, count }) => {
            let answer = c
                .placeholder_types
                .iter()
                .find(|(f, l, _)| *f == file && *l == line)
                .map_or_else(|| "1".to_string(), |(_, _, answer)| answer.clone());
            c.placeholders.push(PlaceholderRead {
                file,
                line,
                count,
                answer,
            });
        }
        Line::Event(Event::Note { text }) => c.notes.push(text),
        Line::Event(Event::Expr { id, tree }) => {
            c.exprs.insert(id, tree);
        }
        Line::Event(Event::Domain(domain)) => c.domain = Some(*domain),
        Line::Forged => c.forged += 1,
        Line::Event(Event::Unavailable { reason }) => c.unavailable = Some(reason),
        Line::Event(Event::Done { status, error }) => c.done = Some((status, error)),
        _ => {}
    })?;
    if let Some(why) = c.refused {
        return Ok(Err(Outcome::Unavailable(why)));
    }
    let stopped = matches!(run.exit, Exit::Timeout | Exit::Stopped(_));
    if !stopped {
        if let Some(reason) = c.unavailable {
            return Ok(Err(Outcome::Unavailable(reason)));
        }
        if c.environment.is_none() {
            return Ok(Err(Outcome::Unavailable(format!(
                "`{}` did not start iteragpu's predicting worker ({}){}",
                plan.python.display(),
                run.exit,
                run.stderr_said()
            ))));
        }
    }
    Ok(Ok(Worked {
        c,
        run,
        hub_notes: overlay.notes(),
        hub: overlay.served(),
        not_served,
    }))
}

/// The spec the predicting worker runs for `plan` on `target`: one device, the card, no
/// allocator history (fake tensors have no allocator to record), the plan's ranks.
fn predicted_spec(plan: &RunPlan, target: &Target) -> crate::schema::spec::WorkerSpec {
    let mut spec = plan.trial().spec;
    spec.devices.truncate(1);
    spec.predict = Some(target.clone());
    spec.history = None;
    spec.world_size = plan.world_size();
    spec
}

/// The prediction of `plan` from a worker's run and `events` (its own, or a symbolic trace's
/// made concrete for `plan`'s values).
pub fn conclude(
    plan: &RunPlan,
    target: &Target,
    capacity: &Capacity,
    stop: &StopRequest,
    w: &Worked,
    events: &[TraceEvent],
) -> Outcome {
    let (c, run) = (&w.c, &w.run);
    let trial = plan.trial();
    let spec = predicted_spec(plan, target);
    let backend = crate::prediction::replay::backend(&target.allocator_backend);
    // A stop request (Ctrl-C, SIGTERM) during the replay of a long run ends it at once: what was
    // replayed so far is judged as a prediction stopped there.
    let stopping = || stop.get().is_some();
    let replayed = replay_until(
        events,
        target.context_bytes,
        backend,
        Some(capacity.allocator_bytes),
        &stopping,
    );
    let mut exit = run.exit.clone();
    let mut replay_notes = Vec::new();
    if let (Some(done), Some(signal)) = (replayed.cut, stop.get()) {
        exit = Exit::Stopped(signal);
        replay_notes.push(format!(
            "{} arrived while the events were replayed: the figures cover the first {done} of {} events",
            signal.name(),
            events.len()
        ));
    }
    let judged = judge(
        replayed,
        c.done.as_ref(),
        &exit,
        &run.stderr_tail,
        plan.timeout.as_secs(),
    );
    // A larger card's need: the same events without the capacity.
    let out_of_memory = judged.refused.as_ref().map(|r| {
        let unlimited = replay_until(events, target.context_bytes, backend, None, &stopping);
        if let (Some(done), Some(signal)) = (unlimited.cut, stop.get()) {
            replay_notes.push(format!(
                "{} arrived while the events were replayed without the card's capacity: the need on a larger card covers the first {done} of {} events",
                signal.name(),
                events.len()
            ));
        }
        oom::predicted(r, capacity, target, &unlimited.phases)
    });
    let env = c.environment.as_ref();
    let torch_version = env.and_then(|e| e.torch_str("version")).map(String::from);
    let mut notes = c.notes.clone();
    if c.forged > 0 {
        notes.push(crate::schema::events::forged_note(c.forged));
    }
    if let Some(env) = env {
        notes.extend(crate::environment::tested::untested_notes(&env.libraries));
    }
    notes.extend(plan.launch_notes.iter().cloned());
    notes.extend(w.hub_notes.iter().cloned());
    notes.extend(judged.notes);
    notes.extend(replay_notes);
    notes.extend(run.left_running_notes(trial.keep_children));
    notes.extend(w.not_served.clone());
    if let Some(why) = &run.not_forked {
        notes.push(format!(
            "the fork server could not start this prediction ({why}): it ran in a fresh process"
        ));
    }
    notes.push(format!(
        "the predicting worker's own memory on the host was capped at {} (RssAnon: the data it keeps on the CPU, read every 200 ms; a file it maps is not counted); above it, iteragpu stops it and says so, never letting it take the machine's memory ({}=SIZE sets another cap)",
        crate::units::Bytes(process::predict_memory_cap().unwrap_or(process::PREDICT_MEMORY_CAP)).both(),
        process::MEMORY_CAP_ENV
    ));
    notes.push(total_memory_note(target));
    if torch_version.as_deref().is_some_and(|v| v.contains("fake")) {
        notes.push(
            "predicted with the test suite's fake torch: not a prediction of real PyTorch".into(),
        );
    }
    let hash = spec.code_hash();
    let mut phases = judged.phases;
    super::bounds::once_per_place(&mut phases);
    Outcome::Predicted(Box::new(PredictionDoc {
        schema: SCHEMA.into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        kind: DocumentKind::Prediction,
        status: judged.status,
        created_at: chrono::Utc::now().to_rfc3339(),
        identity: Identity {
            workload: trial.workload.clone(),
            code_hash: hash.code_hash,
            script_sha256: hash.script_sha256,
            seed: trial.seed,
            declared: c.declared.clone(),
        },
        dimensions: trial.dimensions.clone(),
        target: target.clone(),
        spec,
        assumptions: Assumptions {
            transformers_version: env.and_then(|e| e.transformers_version.clone()),
            peft_version: env.and_then(|e| e.peft_version.clone()),
            cuda_version: env.and_then(crate::schema::versions::cuda_version),
            torch_version,
            allocator_model: allocator_model(&target.allocator_backend),
            placeholder_reads: c.placeholders.clone(),
            not_modelled: vec![
                "attention kernels' internal workspaces (flash-attention backward's dq accumulator, cuDNN's workspace)".into(),
                "cuDNN convolution workspaces".into(),
                "memory of other processes on the card".into(),
            ],
        },
        phases,
        capacity: Some(capacity.clone()),
        out_of_memory,
        failure: judged.failure,
        failure_detail: judged.failure_detail,
        like: None,
        hub: w.hub.clone(),
        dequantized: super::dequantized::seen(events),
        notes,
    }))
}

/// What the events and the worker's end say: the phases, the file's status, the failure and the
/// notes about them.
struct Judged {
    status: PredictionStatus,
    failure: Option<String>,
    failure_detail: Option<FailureDetail>,
    phases: Vec<PredictedPhase>,
    notes: Vec<String>,
    /// The request the capacity refused.
    refused: Option<crate::prediction::replay::Refused>,
}

/// Decides from the events replayed within the card's capacity the prediction's status: `out_of_memory` when
/// a request did not fit (whatever came after it: the card never gets there), `timeout`,
/// `interrupted` or `terminated` when the CLI stopped the worker (the phases so far kept),
/// `failed` when the workload raised or the worker died, `partial` when a phase could not be
/// predicted or none was recorded, `complete` otherwise.
fn judge(
    replayed: Replayed,
    done: Option<&(String, Option<Value>)>,
    exit: &Exit,
    stderr_tail: &[String],
    timeout_s: u64,
) -> Judged {
    let mut notes = replayed.notes;
    let phases = replayed.phases;
    let refused = replayed.refused;
    let stop = match exit {
        Exit::Timeout => Some((
            PredictionStatus::Timeout,
            format!("the prediction took longer than --timeout {timeout_s} s"),
        )),
        Exit::Stopped(signal) => Some((
            match signal {
                Stop::Interrupt => PredictionStatus::Interrupted,
                Stop::Terminate(_) => PredictionStatus::Terminated,
            },
            format!("stopped by {}", signal.name()),
        )),
        _ => None,
    };
    let failure_detail = match (exit, done) {
        _ if stop.is_some() => None,
        (Exit::Code(0), Some((s, _))) if s == "ok" => None,
        (_, Some((_, Some(error)))) => Some(FailureDetail::of(error)),
        _ => None,
    };
    let failure = match (exit, done) {
        _ if stop.is_some() => stop.as_ref().map(|(_, reason)| reason.clone()),
        (Exit::Code(0), Some((s, _))) if s == "ok" => None,
        (_, Some((_, Some(_)))) => failure_detail
            .as_ref()
            // An exception without a message (`MemoryError()`) gets no empty ": ".
            .map(|d| {
                if d.message.trim().is_empty() {
                    format!("{}{}", d.kind, d.at())
                } else {
                    format!("{}: {}{}", d.kind, d.message, d.at())
                }
            }),
        (Exit::MemoryCap(cap), _) => Some(format!(
            "the predicting worker was stopped: it held more than {} of its own memory on the host (RssAnon: real data the script keeps on the CPU; data-less CUDA tensors take none). Set {}=SIZE (e.g. 16GiB) to allow more, if the machine has it",
            crate::units::Bytes(*cap).both(),
            process::MEMORY_CAP_ENV
        )),
        (exit, _) => Some(format!(
            "the predicting worker ended unexpectedly ({exit}){}",
            if stderr_tail.is_empty() {
                " and wrote nothing on its standard error: it was killed from outside (the kernel's out-of-memory killer, a container's memory limit: see `dmesg`) or it ended itself without a word (os._exit)".to_string()
            } else {
                format!(": {}", stderr_tail.join(" | "))
            }
        )),
    };
    // A bounded phase has figures (at the largest outputs): the prediction is complete.
    let all_predicted = phases
        .iter()
        .all(|p| matches!(p.status, PhaseStatus::Predicted | PhaseStatus::Bounded));
    // The workload met something a prediction cannot follow (a loop only data would end): not a
    // failure of the workload, a prediction that stops there.
    let cannot_follow = done
        .and_then(|(_, error)| error.as_ref())
        .is_some_and(|e| e["type"] == "Unpredictable");
    if cannot_follow && stop.is_none() {
        notes.push(format!(
            "the prediction stopped where it could not follow the workload ({}): what comes after was not predicted",
            failure.as_deref().unwrap_or("")
        ));
    }
    if let Some(r) = &refused {
        if r.tainted {
            notes.push("the out-of-memory comes after a data-dependent op (its output's size is an upper bound): it may not happen with the real data".into());
        }
        if let Some(f) = &failure {
            notes.push(format!(
                "the prediction went on past the out-of-memory and then stopped ({f}): on the card the workload would not get there"
            ));
        }
    }
    let status = match (&stop, &failure) {
        _ if refused.is_some() => PredictionStatus::OutOfMemory,
        (Some((status, _)), _) => *status,
        (None, Some(_)) if cannot_follow => PredictionStatus::Partial,
        (None, Some(_)) => PredictionStatus::Failed,
        (None, None) if phases.is_empty() => PredictionStatus::Partial,
        (None, None) if all_predicted => PredictionStatus::Complete,
        (None, None) => PredictionStatus::Partial,
    };
    if phases.is_empty() {
        notes.push(format!(
            "no phase was recorded: the workload made no phase ({})",
            match (&stop, &failure) {
                (Some(_), _) => "it was stopped before its first phase",
                (None, Some(_)) => "it stopped before its first phase",
                (None, None) =>
                    "nothing marked one and the worker made none around it; mark them with `with iteragpu.phase(\"name\"):`",
            }
        ));
    } else if all_predicted && failure.is_some() && refused.is_none() {
        notes.push(match &stop {
            Some(_) => {
                "every phase that started was predicted before the prediction stopped".into()
            }
            None => "every phase that started was predicted before the failure".into(),
        });
    }
    Judged {
        status,
        failure,
        failure_detail,
        phases,
        notes,
        refused,
    }
}

fn allocator_model(backend: &str) -> String {
    match backend {
        "expandable_segments" => "expandable segments approximated: 512-byte rounding, blocks always split, each pool's pages (20 MiB large, 2 MiB small) covering its highest level (one H200 reading agrees); fragmentation inside the segments not modelled".into(),
        "cudaMallocAsync" => "cudaMallocAsync approximated: requested bytes counted, the driver's pool as the highest allocated level rounded up to 32 MiB (one H200 reading agrees); fragmentation inside the pool not modelled".into(),
        _ => "PyTorch's caching allocator replayed (512-byte rounding, 2 MiB small-pool and 20 MiB large-pool segments, ≥ 10 MiB requests rounded to 2 MiB, best fit, splitting, merging; one stream)".into(),
    }
}

/// Which total the script's `get_device_properties().total_memory` and `mem_get_info()[1]`
/// were answered with: CUDA's total as public logs printed it, PyTorch's read on the card or the
/// driver's when CUDA's is unknown (the target's `total_memory_source`).
pub fn total_memory_note(target: &Target) -> String {
    format!(
        "the script's torch.cuda.get_device_properties().total_memory and torch.cuda.mem_get_info()[1] were answered with {} bytes ({}): {}",
        crate::units::Bytes(target.total_memory).grouped(),
        crate::units::Bytes(target.total_memory).both(),
        target.total_memory_source
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::allocator::Backend;
    use crate::schema::trace::{Alloc, Category};

    fn start(name: &str, index: u64) -> TraceEvent {
        TraceEvent::PhaseStart {
            name: name.into(),
            index,
            parent: None,
            automatic: false,
            inputs: Map::new(),
        }
    }

    fn end(index: u64) -> TraceEvent {
        TraceEvent::PhaseEnd {
            index,
            failed: false,
            inputs: Map::new(),
        }
    }

    fn alloc(id: u64, bytes: u64) -> TraceEvent {
        TraceEvent::Alloc(Box::new(Alloc {
            id,
            bytes,
            category: Category::Activation,
            module: None,
            shape: vec![bytes],
            dtype: "uint8".into(),
            tainted: false,
            file: None,
            line: None,
            managed: false,
            exprs: None,
        }))
    }

    fn ok() -> Option<(String, Option<Value>)> {
        Some(("ok".into(), None))
    }

    fn judged(events: &[TraceEvent], done: Option<(String, Option<Value>)>, exit: Exit) -> Judged {
        judge(
            crate::prediction::replay::replay(events, 0, Backend::Native),
            done.as_ref(),
            &exit,
            &["boom".into()],
            60,
        )
    }

    /// The timeout and each signal keep the phases predicted so far, the one running included
    /// with its partial peak, under `measure`'s words for the status.
    #[test]
    fn a_stopped_prediction_keeps_its_phases() {
        let events = [
            start("load", 0),
            alloc(0, 4 << 20),
            end(0),
            start("forward", 1),
            alloc(1, 8 << 20),
        ];
        for (exit, status, failure) in [
            (
                Exit::Timeout,
                PredictionStatus::Timeout,
                "the prediction took longer than --timeout 60 s",
            ),
            (
                Exit::Stopped(Stop::Interrupt),
                PredictionStatus::Interrupted,
                "stopped by SIGINT",
            ),
            (
                Exit::Stopped(Stop::Terminate(libc::SIGTERM)),
                PredictionStatus::Terminated,
                "stopped by SIGTERM",
            ),
            (
                Exit::Stopped(Stop::Terminate(libc::SIGHUP)),
                PredictionStatus::Terminated,
                "stopped by SIGHUP",
            ),
        ] {
            let j = judged(&events, None, exit);
            assert_eq!(j.status, status);
            assert_eq!(j.failure.as_deref(), Some(failure));
            assert_eq!(j.phases.len(), 2);
            assert_eq!(j.phases[0].status, PhaseStatus::Predicted);
            assert_eq!(j.phases[1].status, PhaseStatus::Failed);
            assert_eq!(j.phases[1].peak_allocated_bytes, Some(12 << 20));
            assert!(
                j.notes.iter().any(|n| n
                    == "phase forward did not end: its figures stop at the last event received"),
                "{:?}",
                j.notes
            );
        }
        // Stopped between two phases: every phase that started was predicted.
        let j = judged(&events[..3], None, Exit::Stopped(Stop::Interrupt));
        assert_eq!(j.status, PredictionStatus::Interrupted);
        assert!(
            j.notes
                .iter()
                .any(|n| n.contains("every phase that started")),
            "{:?}",
            j.notes
        );
    }

    /// A workload that made no phase is never `complete`.
    #[test]
    fn no_phase_is_never_complete() {
        let j = judged(&[alloc(0, 512)], ok(), Exit::Code(0));
        assert_eq!(j.status, PredictionStatus::Partial);
        assert_eq!(j.failure, None);
        assert!(
            j.notes[0].starts_with("no phase was recorded: the workload made no phase ("),
            "{:?}",
            j.notes
        );
        let j = judged(&[], None, Exit::Stopped(Stop::Interrupt));
        assert_eq!(j.status, PredictionStatus::Interrupted);
        assert!(j.notes[0].starts_with("no phase was recorded"));
        let j = judged(&[start("a", 0), end(0)], ok(), Exit::Code(0));
        assert_eq!(j.status, PredictionStatus::Complete);
        assert!(j.notes.is_empty(), "{:?}", j.notes);
    }

    /// Something the prediction cannot follow (a loop only data would end) stops it: `partial`,
    /// said, never `failed` (the workload did not fail).
    #[test]
    fn a_stop_where_the_prediction_cannot_follow_is_partial() {
        let done = Some((
            "failed".to_string(),
            Some(
                serde_json::json!({"type": "Unpredictable", "message": "a loop condition at x.py:8 depends on the data"}),
            ),
        ));
        let j = judged(
            &[start("a", 0), alloc(0, 1024), end(0)],
            done,
            Exit::Code(3),
        );
        assert_eq!(j.status, PredictionStatus::Partial);
        assert!(
            j.notes
                .iter()
                .any(|n| n.contains("could not follow the workload")),
            "{:?}",
            j.notes
        );
    }

    /// A failure after every phase ended keeps `failed` and says every phase was predicted; a
    /// failure inside a phase leaves that phase failed with its figures.
    #[test]
    fn a_failure_after_the_phases_says_they_were_predicted() {
        let error = Some((
            "failed".to_string(),
            Some(serde_json::json!({"type": "ValueError", "message": "late"})),
        ));
        let events = [start("a", 0), alloc(0, 1024), end(0)];
        let j = judged(&events, error.clone(), Exit::Code(3));
        assert_eq!(j.status, PredictionStatus::Failed);
        assert_eq!(j.failure.as_deref(), Some("ValueError: late"));
        assert_eq!(
            j.notes,
            ["every phase that started was predicted before the failure"]
        );
        let j = judged(&events[..2], error, Exit::Code(3));
        assert_eq!(j.status, PredictionStatus::Failed);
        assert_eq!(j.phases[0].status, PhaseStatus::Failed);
        assert_eq!(j.phases[0].peak_allocated_bytes, Some(1024));
        assert!(!j.notes.iter().any(|n| n.contains("every phase")));
        // A worker that died without a word.
        let j = judged(&events, None, Exit::Signal(9));
        assert_eq!(j.status, PredictionStatus::Failed);
        assert!(
            j.failure
                .unwrap()
                .contains("ended unexpectedly (killed by signal 9): boom")
        );
        let j = judge(
            crate::prediction::replay::replay(&events, 0, Backend::Native),
            None,
            &Exit::Signal(9),
            &[],
            60,
        );
        let failure = j.failure.unwrap();
        assert!(failure.contains("ended unexpectedly"));
        // Never "…(killed by signal 9): " with nothing after the colon: what is known is said.
        assert!(!failure.trim_end().ends_with(':'), "{failure}");
        assert!(
            failure.contains("wrote nothing on its standard error"),
            "{failure}"
        );
        assert!(failure.contains("out-of-memory killer"), "{failure}");
        assert_eq!(j.failure_detail, None);
    }

    /// A traceback names the user's frame: in the failure's text and in `failure_detail`; a
    /// stopped prediction has no detail.
    #[test]
    fn a_failure_keeps_the_users_frame() {
        let traceback = "Traceback (most recent call last):\n  File \"/tmp/iteragpu-python-ab/iteragpu/worker.py\", line 85, in run_workload\n    code = run_script(spec)\n  File \"/home/u/train.py\", line 7, in <module>\n    step()\n  File \"/venv/lib/python3.12/site-packages/torch/nn/modules/module.py\", line 1775, in _call_impl\n    return forward_call(*args, **kwargs)\nValueError: late\n";
        let error = Some((
            "failed".to_string(),
            Some(
                serde_json::json!({"type": "ValueError", "message": "late", "traceback": traceback}),
            ),
        ));
        let j = judged(&[start("a", 0), end(0)], error.clone(), Exit::Code(3));
        assert_eq!(
            j.failure.as_deref(),
            Some("ValueError: late (at /home/u/train.py:7)")
        );
        let detail = j.failure_detail.unwrap();
        let frame = detail.frame.unwrap();
        assert_eq!((frame.file.as_str(), frame.line), ("/home/u/train.py", 7));
        assert_eq!(detail.traceback_tail.len(), 8);
        let j = judged(&[start("a", 0)], error, Exit::Timeout);
        assert_eq!(j.failure_detail, None);
    }
}
