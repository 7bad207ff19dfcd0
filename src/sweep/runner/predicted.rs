//! The predicting runner: each cell a prediction (`prediction::run`, the worker `predict` uses:
//! the workload's own code on data-less CUDA tensors, on the CPU), held against a card's
//! capacity: it fits when its highest predicted driver's view (peak reserved + the memory outside
//! PyTorch's allocator) is at most the capacity. `sweep --predict` runs every trial through it,
//! up to [`parallelism`] at once; a measured frontier asks it for its hint.

use anyhow::{Result, bail};
use std::sync::Mutex;

use crate::prediction::fork_server::{self, Shared};
use crate::prediction::oom;
use crate::prediction::run::{Outcome, predict_served};
use crate::progress::Progress;
use crate::schema::prediction::{PhaseStatus, PredictedPhase, PredictionDoc, PredictionStatus};
use crate::schema::series::{
    Deciding, DecidingAllocation, PointKind, SweepMode, TrialRecord, TrialStatus,
};
use crate::schema::target::Target;
use crate::signals::{Stop, StopRequest};
use crate::sweep::plan::{Cell, SweepPlan};
use crate::sweep::runner::one_trace::{Ask, OneTrace};
use crate::sweep::runner::{Ran, Runner, blank};
use crate::units::Bytes;
use crate::workload::plan::RunPlan;
use crate::workload::process::{StartError, available_memory};

/// At most this many predictions at once: each is a Python process importing torch (a few
/// hundred MB and one core).
const MAX_PARALLEL: usize = 8;

/// The memory one prediction is expected to take, to size the parallelism: a Llama-3-8B
/// prediction's worker peaked at 0.8 GB resident (measured with `/usr/bin/time -v` on torch
/// 2.15), a Llama-3-70B one at 0.81 GiB (VmHWM), rounded up for larger configs. Not the cap: each
/// worker is stopped above `process::predict_memory_cap()` (4 GiB of its own resident memory by
/// default), so a larger one fails, said, rather than take the others' memory.
const WORKER_MEMORY: u64 = 3 << 29; // 1.5 GiB

/// How many predictions run at once: the cores, at most [`MAX_PARALLEL`], and no more than the
/// available memory holds at [`WORKER_MEMORY`] each (at least one).
pub fn parallelism() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let memory = available_memory().map_or(usize::MAX, |bytes| {
        usize::try_from(bytes / WORKER_MEMORY).unwrap_or(usize::MAX)
    });
    cores.min(MAX_PARALLEL).min(memory).max(1)
}

/// The variable that sets how many predictions a predicted sweep runs at once (`1`: one after
/// the other, a frontier's trials then the same on every machine).
pub const JOBS_ENV: &str = "ITERAGPU_PREDICT_JOBS";

/// [`JOBS_ENV`] when it is set to a count from 1 to 64, else [`parallelism`]. A value that is
/// not such a count is an error naming it and the fix.
pub fn jobs() -> Result<usize> {
    match std::env::var(JOBS_ENV) {
        Err(_) => Ok(parallelism()),
        Ok(text) => match text.trim().parse::<usize>() {
            Ok(n) if (1..=64).contains(&n) => Ok(n),
            _ => bail!(
                "{JOBS_ENV}={:?} is not a count of predictions at once: give a whole number from 1 to 64 (1: one after the other), or unset it (this machine then runs {} at once)",
                crate::output::terminal_safe(&text),
                parallelism()
            ),
        },
    }
}

/// How one plan is predicted: the worker for a card (a mock in tests).
pub type Predict<'a> =
    Box<dyn Fn(&RunPlan, &dyn Progress) -> Result<Outcome, StartError> + Sync + 'a>;

/// Predicts each cell and holds it against a capacity.
pub struct Predicted<'a> {
    predict: Predict<'a>,
    /// The capacity each trial is held against (the hint's: none, it reads the peak alone).
    capacity: u64,
    stop: &'static StopRequest,
    /// Predictions at once: a grid's cells, a frontier's values a round.
    jobs: usize,
    /// What the protocol says of the symbolic traces (`one_trace`), when the sweep makes them.
    traced: Option<String>,
}

impl<'a> Predicted<'a> {
    pub fn new(predict: Predict<'a>, capacity: u64, stop: &'static StopRequest) -> Predicted<'a> {
        Predicted {
            predict,
            capacity,
            stop,
            jobs: parallelism(),
            traced: None,
        }
    }

    /// `sweep --predict`: the simulated card of the plan, its first allocation over the
    /// capacity a predicted out-of-memory, later phases not reached.
    pub fn for_card(plan: &SweepPlan, stop: &'static StopRequest) -> Result<Predicted<'static>> {
        let (Some((target, applied)), Some(limit)) = (&plan.target, &plan.limit) else {
            bail!("internal: a predicted sweep without a target card and a capacity");
        };
        let (target, applied) = (target.clone(), applied.clone());
        // One fork server for the sweep: torch imported once (`prediction::fork_server`).
        let server = Shared::default();
        // One symbolic trace per configuration where the varied dimensions allow it.
        let traces = OneTrace::new(&plan.base, &plan.vary, plan.resolution)?;
        let traced = traces.as_ref().map(OneTrace::protocol);
        let predict: Predict = Box::new(move |plan, progress| {
            let ask = Ask {
                plan,
                target: &target,
                capacity: &applied,
                stop,
                progress,
                server: Some(&server),
            };
            if let Some(outcome) = traces.as_ref().and_then(|t| t.predict(&ask)) {
                return outcome;
            }
            predict_served(plan, &target, &applied, stop, progress, Some(&server))
        });
        Ok(Predicted {
            jobs: jobs()?,
            traced,
            ..Predicted::new(predict, limit.bytes, stop)
        })
    }

    /// The measured frontier's hint: each cell predicted for the card of its first device, read
    /// once per allocator backend.
    pub fn for_device(stop: &'static StopRequest) -> Predicted<'static> {
        let read: Mutex<Option<(String, Result<Target, String>)>> = Mutex::new(None);
        let server = Shared::default();
        let predict: Predict = Box::new(move |plan, progress| {
            let Some(device) = plan.devices.first() else {
                return Ok(Outcome::Unavailable("no device to predict for".into()));
            };
            let backend = plan.allocator_backend();
            let target = {
                let mut read = read.lock().unwrap_or_else(|e| e.into_inner());
                if read.as_ref().is_none_or(|(b, _)| *b != backend) {
                    let target = Target::of_device(&plan.python, device, &backend, Some(stop));
                    *read = Some((backend, target.map_err(|e| e.to_string())));
                }
                read.as_ref().map(|(_, t)| t.clone())
            };
            match target {
                Some(Ok(target)) => predict_served(
                    plan,
                    &target,
                    &oom::of_card(&target),
                    stop,
                    progress,
                    Some(&server),
                ),
                Some(Err(why)) => Ok(Outcome::Unavailable(why)),
                None => Ok(Outcome::Unavailable("no card read".into())),
            }
        });
        Predicted::new(predict, u64::MAX, stop)
    }
}

impl Runner for Predicted<'_> {
    fn kind(&self) -> PointKind {
        PointKind::Predicted
    }

    fn run(&self, cell: &Cell, progress: &dyn Progress) -> Result<Ran> {
        Ok(match (self.predict)(&cell.plan, progress)? {
            Outcome::Unavailable(reason) => Ran::Unavailable(reason),
            Outcome::Predicted(doc) => Ran::Trial(Box::new(summarize(cell, doc, self.capacity))),
        })
    }

    fn stop_requested(&self) -> Option<Stop> {
        self.stop.get()
    }

    fn parallelism(&self) -> Option<usize> {
        Some(self.jobs)
    }

    fn protocol(&self, plan: &SweepPlan) -> String {
        let bounded = "; a phase bounded by a data-dependent size is read at its upper figures (the largest sizes), so a fit holds whatever the data";
        let how = match plan.mode {
            SweepMode::Frontier => format!(
                "each trial predicted in {} on data-less CUDA tensors (no GPU); the frontier search guided by the predicted peaks, {}",
                worker(),
                match self.jobs {
                    1 => "one prediction after the other".to_string(),
                    k => format!(
                        "in rounds of up to {k} predictions at once (the cores; which values are tried depends on it, the frontier does not; {JOBS_ENV}=1 tries them one after the other)"
                    ),
                }
            ),
            _ => format!(
                "each trial predicted in {} on data-less CUDA tensors (no GPU), up to {} at a time (the cores, at most {MAX_PARALLEL}, and 1.5 GiB of available memory each, the expected peak; each worker stopped above {} of its own resident memory); identical configurations predicted once",
                worker(),
                self.jobs,
                Bytes(
                    crate::workload::process::predict_memory_cap()
                        .unwrap_or(crate::workload::process::PREDICT_MEMORY_CAP)
                )
                .both()
            ),
        };
        how + self.traced.as_deref().unwrap_or("") + bounded
    }
}

/// Where each trial is predicted, as the protocol says.
fn worker() -> &'static str {
    if fork_server::enabled() {
        "a CPU process forked from one Python that imported torch and the workload's libraries once (a fresh process where that server cannot start, said in the trial's notes)"
    } else {
        "a fresh CPU process"
    }
}

/// A predicted trial: fits (`ok`), predicted not to fit (`failed`, `out_of_memory`, the phase
/// that decides), a gap (`unpredictable`: no figure, the reason), or the prediction's own failure
/// or stop.
fn summarize(cell: &Cell, doc: Box<PredictionDoc>, capacity: u64) -> TrialRecord {
    let predicted: Vec<&PredictedPhase> = doc
        .phases
        .iter()
        .filter(|p| p.status.has_figures())
        .collect();
    let over = first_over(&doc, capacity);
    if let Some(oom) = &doc.out_of_memory {
        // The simulated card's out-of-memory: the allocation that did not fit decides; the
        // figures are the whole run's need (the same events replayed without the capacity).
        let mut t = blank(PointKind::Predicted, cell, TrialStatus::Failed);
        t.out_of_memory = true;
        t.failed_phase = oom.phase.clone();
        t.peak_reserved_bytes = oom.unlimited_peak_reserved_bytes;
        t.error = Some(format!(
            "predicted not to fit: out of memory in {} at an allocation of {} ({}{}{}); the whole run needs {} (driver's view) against {}",
            oom.phase.as_deref().unwrap_or("no phase"),
            Bytes(oom.requested_bytes).both(),
            oom.category,
            oom.module
                .as_deref()
                .map_or(String::new(), |m| format!(", {m}")),
            match (&oom.file, oom.line) {
                (Some(f), Some(l)) => format!(", {f}:{l}"),
                _ => String::new(),
            },
            oom.unlimited_driver_view_bytes
                .map_or("an unknown amount".into(), |b| Bytes(b).both()),
            Bytes(capacity).both()
        ));
        t.prediction = Some(doc);
        return t;
    }
    let status = match (doc.status, &over) {
        (PredictionStatus::Timeout, _) => TrialStatus::Timeout,
        (PredictionStatus::Interrupted, _) => TrialStatus::Interrupted,
        (PredictionStatus::Terminated, _) => TrialStatus::Terminated,
        // An out-of-memory without its record (not written by this CLI): it does not fit.
        (PredictionStatus::OutOfMemory, _) => TrialStatus::Failed,
        // A phase over the capacity decides, whatever came after it.
        (_, Some(_)) => TrialStatus::Failed,
        (PredictionStatus::Failed, None) => TrialStatus::Failed,
        (PredictionStatus::Partial, None) => TrialStatus::Unpredictable,
        (PredictionStatus::Complete, None) => TrialStatus::Ok,
    };
    let mut t = blank(PointKind::Predicted, cell, status);
    if status == TrialStatus::Unpredictable {
        // A gap: no figure at all, the reason instead.
        t.error = Some(unpredictable_reason(&doc));
        t.prediction = Some(doc);
        return t;
    }
    t.peak_allocated_bytes = predicted
        .iter()
        .filter_map(|p| p.peak_allocated_bytes)
        .max();
    t.peak_reserved_bytes = doc.max_peak_reserved();
    let last = predicted.last();
    t.end_allocated_bytes = last.and_then(|p| p.end_allocated_bytes);
    t.end_reserved_bytes = last.and_then(|p| p.end_reserved_bytes);
    match over {
        Some(p) => {
            t.out_of_memory = true;
            t.failed_phase = Some(p.name.clone());
            t.error = Some(format!(
                "predicted not to fit: {} needs {} (driver's view) > {} (capacity)",
                p.name,
                Bytes(p.driver_view_bytes.unwrap_or(0)).both(),
                Bytes(capacity).both()
            ));
        }
        None if status != TrialStatus::Ok => {
            t.failed_phase = doc
                .phases
                .iter()
                .find(|p| p.status == PhaseStatus::Failed)
                .map(|p| p.name.clone());
            t.error = Some(
                doc.failure
                    .clone()
                    .unwrap_or_else(|| format!("the prediction ended {}", doc.status)),
            );
        }
        None => {}
    }
    t.prediction = Some(doc);
    t
}

/// Why a partial prediction cannot say whether it fits: its unpredictable phases and their ops.
fn unpredictable_reason(doc: &PredictionDoc) -> String {
    let phases: Vec<String> = doc
        .phases
        .iter()
        .filter(|p| !p.status.has_figures())
        .map(|p| match p.unpredictable.first() {
            Some(u) => format!("{} ({}: {})", p.name, u.op, u.reason),
            None => format!("{} ({})", p.name, p.status),
        })
        .collect();
    if phases.is_empty() {
        "unpredictable: the prediction recorded no phase".into()
    } else {
        format!(
            "unpredictable: {} cannot be predicted, and no predicted phase exceeds the capacity",
            phases.join(", ")
        )
    }
}

/// The phase that decides: the first predicted phase (in the order they started) whose driver's
/// view exceeds `capacity`, and within it the innermost phase that does too.
fn first_over(doc: &PredictionDoc, capacity: u64) -> Option<&PredictedPhase> {
    let over = |p: &&PredictedPhase| {
        p.status.has_figures() && p.driver_view_bytes.is_some_and(|b| b > capacity)
    };
    let mut chosen = doc.phases.iter().find(over)?;
    while let Some(inner) = doc
        .phases
        .iter()
        .filter(|p| p.parent == Some(chosen.index))
        .find(over)
    {
        chosen = inner;
    }
    Some(chosen)
}

/// What decides at `value`, the first value predicted not to fit: the simulated card's
/// out-of-memory (its phase and allocation), else the first phase over the capacity.
pub(crate) fn deciding(doc: &PredictionDoc, value: u64, capacity: u64) -> Option<Deciding> {
    if let Some(oom) = &doc.out_of_memory {
        return Some(Deciding {
            value,
            phase: oom.phase.clone().unwrap_or_default(),
            driver_view_bytes: oom.unlimited_driver_view_bytes,
            capacity_bytes: capacity,
            allocation: Some(DecidingAllocation {
                bytes: oom.requested_bytes,
                shape: oom.shape.clone(),
                dtype: oom.dtype.clone(),
                category: oom.category.to_string(),
                module: oom.module.clone(),
                file: oom.file.clone(),
                line: oom.line,
            }),
            largest_at_peak: None,
        });
    }
    let p = first_over(doc, capacity)?;
    Some(Deciding {
        value,
        phase: p.name.clone(),
        driver_view_bytes: p.driver_view_bytes,
        capacity_bytes: capacity,
        allocation: None,
        largest_at_peak: p
            .at_peak
            .as_ref()
            .and_then(|a| a.top_tensors.first().cloned()),
    })
}

/// The predicted sweep with a mock predictor: no process, documents made from a committed
/// prediction with the peaks each test asks for.
#[cfg(test)]
mod tests {

    use super::*;
    use crate::commands::sweep::plan_of;
    use crate::progress::NoProgress;
    use crate::schema::series::{Series, Writer};
    use crate::schema::spec::{WorkerSpec, WorkloadSpec};
    use crate::schema::trace::Unpredictable;
    use crate::sweep::driver::{Finish, run};
    use serde_json::json;

    #[test]
    fn the_available_memory_bounds_the_parallel_predictions() {
        use crate::workload::process::parse_mem_available;
        let meminfo =
            "MemTotal:       24576000 kB\nMemFree:  100 kB\nMemAvailable:    3145728 kB\n";
        assert_eq!(parse_mem_available(meminfo), Some(3 << 30));
        assert_eq!(parse_mem_available("MemTotal: 1 kB\n"), None);
        assert_eq!(parse_mem_available("MemAvailable: lots kB\n"), None);
        // 3 GiB available holds two 1.5 GiB workers; the bound never goes below one.
        assert_eq!((3u64 << 30) / WORKER_MEMORY, 2);
        assert!(parallelism() >= 1);
    }

    /// What the mock answers for one worker spec.
    enum Mock {
        /// Every phase predicted, this peak reserved (the driver's view adds the context).
        Peak(u64),
        /// The `cold_forward` phase is unpredictable.
        Gap,
        Unavailable,
    }

    struct MockPredictor<F: Fn(&WorkerSpec) -> Mock + Sync> {
        decide: F,
        specs: Mutex<Vec<WorkerSpec>>,
    }

    impl<F: Fn(&WorkerSpec) -> Mock + Sync> MockPredictor<F> {
        fn new(decide: F) -> Self {
            MockPredictor {
                decide,
                specs: Mutex::new(Vec::new()),
            }
        }
    }

    fn fixture() -> PredictionDoc {
        serde_json::from_slice(&std::fs::read("tests/fixtures/fiche/prediction.json").unwrap())
            .unwrap()
    }

    impl<F: Fn(&WorkerSpec) -> Mock + Sync> MockPredictor<F> {
        /// The predicting runner with this mock for its worker, held against the plan's capacity.
        fn runner(&self, plan: &SweepPlan) -> Predicted<'_> {
            let capacity = plan.limit.as_ref().unwrap().bytes;
            // One at a time, as ITERAGPU_PREDICT_JOBS=1: a frontier's trials then the same on
            // every machine (`runner_with` sets another count).
            self.runner_with(capacity, 1)
        }

        fn runner_with(&self, capacity: u64, jobs: usize) -> Predicted<'_> {
            static NEVER: StopRequest = StopRequest::never();
            Predicted {
                jobs,
                ..Predicted::new(Box::new(|p, _| self.predict(p)), capacity, &NEVER)
            }
        }

        fn predict(&self, plan: &RunPlan) -> Result<Outcome, StartError> {
            let spec = plan.worker_spec();
            self.specs.lock().unwrap().push(spec.clone());
            let mut doc = fixture();
            match (self.decide)(&spec) {
                Mock::Peak(peak) => {
                    for p in &mut doc.phases {
                        p.peak_reserved_bytes = Some(peak);
                        p.driver_view_bytes = Some(peak + doc.target.context_bytes);
                    }
                }
                Mock::Gap => {
                    doc.status = PredictionStatus::Partial;
                    let p = &mut doc.phases[2];
                    p.status = PhaseStatus::Unpredictable;
                    p.peak_reserved_bytes = None;
                    p.unpredictable.push(Unpredictable::op(
                        "aten::nonzero",
                        "its output's size depends on data",
                        None,
                    ));
                }
                Mock::Unavailable => return Ok(Outcome::Unavailable("no torch here".into())),
            }
            Ok(Outcome::Predicted(Box::new(doc)))
        }
    }

    fn dense(spec: &WorkerSpec) -> &crate::schema::spec::DenseSpec {
        match &spec.workload {
            WorkloadSpec::Dense(d) => d,
            other => panic!("not dense: {other:?}"),
        }
    }

    const CONTEXT: u64 = 641_728_512;

    fn sweep<F: Fn(&WorkerSpec) -> Mock + Sync>(
        args: &[&str],
        mock: &MockPredictor<F>,
    ) -> (tempfile::TempDir, std::path::PathBuf, Result<Finish>) {
        sweep_with_jobs(args, mock, 1)
    }

    /// [`sweep`] with `jobs` predictions at once.
    fn sweep_with_jobs<F: Fn(&WorkerSpec) -> Mock + Sync>(
        args: &[&str],
        mock: &MockPredictor<F>,
        jobs: usize,
    ) -> (tempfile::TempDir, std::path::PathBuf, Result<Finish>) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("series.json");
        let mut argv = vec!["--predict"];
        argv.extend(args);
        argv.extend(["--output", out.to_str().unwrap()]);
        let plan = plan_of(&argv).unwrap();
        let runner = mock.runner_with(plan.limit.as_ref().unwrap().bytes, jobs);
        let finish = run(
            &plan,
            &runner,
            None,
            Writer::new(&out).unwrap(),
            &NoProgress,
        );
        (dir, out, finish)
    }

    fn done(finish: Result<Finish>) -> Box<Series> {
        match finish.unwrap() {
            Finish::Done { series, .. } => series,
            Finish::Unavailable(r) => panic!("unavailable: {r}"),
        }
    }

    /// docs/predict.md's requests frontier: the trials cycle `--prompt-lengths 256,500` over their
    /// own count, and the series' base records the list as given, not the first trial's `[256]`.
    #[test]
    fn a_requests_frontier_records_the_lengths_as_given() {
        let requests = |s: &WorkerSpec| match &s.workload {
            WorkloadSpec::CausalLm(c) => c.requests.as_ref().map_or(0, |r| r.requests),
            _ => panic!("causal-lm expected"),
        };
        let mock = MockPredictor::new(|s| Mock::Peak(40_000_000 * requests(s)));
        let (_d, _out, finish) = sweep(
            &[
                "--workload",
                "causal-lm",
                "--model",
                "tests/fixtures/tiny/llama",
                "--prompt-lengths",
                "256,500",
                "--output-lengths",
                "8",
                "--vary",
                "requests=1..16",
                "--search",
                "frontier",
                "--memory-limit",
                "684720128",
            ],
            &mock,
        );
        let series = done(finish);
        assert_eq!(
            series.base["prompt_lengths"],
            json!([256, 500]),
            "{:?}",
            series.base
        );
        assert_eq!(series.base["output_lengths"], json!([8]));
        assert!(!series.base.contains_key("requests"));
        // The trials themselves cycle the list over their own count.
        let specs = mock.specs.lock().unwrap();
        assert!(
            specs.iter().any(|s| requests(s) > 1),
            "{} trials",
            specs.len()
        );
        for spec in specs.iter() {
            let WorkloadSpec::CausalLm(c) = &spec.workload else {
                unreachable!()
            };
            let cycled: Vec<u64> = (0..requests(spec))
                .map(|i| [256, 500][i as usize % 2])
                .collect();
            assert_eq!(c.requests.as_ref().unwrap().prompt_lengths, cycled);
        }
    }

    /// A grid past the bound is refused before a cell is planned (a 1000 × 1000 grid took 4.5 GB
    /// and ignored signals), naming the count, the bound and the fix.
    #[test]
    fn a_grid_past_the_bound_is_refused_before_planning() {
        let values = (1..=1000)
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let (batch, context) = (format!("batch={values}"), format!("context={values}"));
        let argv = [
            "--predict",
            "--card",
            "L4",
            "--output",
            "x.json",
            "--vary",
            &batch,
            "--vary",
            &context,
        ];
        let err = plan_of(&argv).unwrap_err().to_string();
        assert!(err.contains("1,000,000 trials"), "{err}");
        assert!(err.contains("above the 100,000"), "{err}");
        assert!(err.contains("--search frontier"), "{err}");
    }

    /// A display that keeps what it was told.
    #[derive(Default)]
    struct Recorded {
        lengths: Mutex<Vec<u64>>,
        messages: Mutex<Vec<String>>,
    }

    impl Progress for Recorded {
        fn set_length(&self, steps: u64) {
            self.lengths.lock().unwrap().push(steps);
        }
        fn set_message(&self, text: &str) {
            self.messages.lock().unwrap().push(text.to_string());
        }
    }

    /// A search's trial count is not planned: the display never says "trial 1 of 24" for a
    /// search that runs a few; it says the bisection's bound.
    #[test]
    fn a_frontier_says_its_bound_not_a_planned_count() {
        let mock = MockPredictor::new(|s| Mock::Peak(10_000_000 * dense(s).context));
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("series.json");
        let argv = [
            "--predict",
            "--vary",
            "context=1..1000",
            "--search",
            "frontier",
            "--memory-limit",
            "2000000000",
            "--output",
            out.to_str().unwrap(),
        ];
        let plan = plan_of(&argv).unwrap();
        let shown = Recorded::default();
        let writer = Writer::new(&out).unwrap();
        let series = done(run(&plan, &mock.runner(&plan), None, writer, &shown));
        assert_eq!(*shown.lengths.lock().unwrap(), Vec::<u64>::new());
        let messages = shown.messages.lock().unwrap();
        assert!(!messages.is_empty());
        // 1..1000 at resolution 1: 10 halvings, at most twice that (guided) and two more.
        assert!(
            messages.iter().all(|m| m.contains("at most 22 trials")),
            "{messages:?}"
        );
        assert!(series.trials.len() <= 22);
    }

    /// A predicted series' fit table says what it withholds in a prediction's words: the values
    /// were predicted, not measured.
    #[test]
    fn a_predicted_fit_is_worded_for_predictions() {
        let mock = MockPredictor::new(|s| Mock::Peak(100_000_000 * dense(s).batch));
        let (_d, out, finish) = sweep(&["--vary", "batch=1,2,3", "--card", "L4"], &mock);
        let series = done(finish);
        let fit = series.fit.as_ref().expect("a fit over three points");
        let withheld: Vec<&str> = fit
            .cards
            .iter()
            .filter_map(|c| c.withheld.as_deref())
            .collect();
        assert!(!withheld.is_empty());
        for w in withheld {
            assert!(w.contains("largest value predicted (3)"), "{w}");
            assert!(!w.contains("measure"), "{w}");
        }
        let table = crate::sweep::render::table(&series, &out);
        assert!(!table.contains("= none"), "{table}");
        assert!(table.contains("batch not placed by the fit"), "{table}");
    }

    /// A dimension is fixed or varied, never both: the fixed flag and the --vary are named.
    #[test]
    fn a_dimension_fixed_and_varied_is_refused() {
        for (args, says) in [
            (
                vec![
                    "--workload",
                    "causal-lm",
                    "--model",
                    "tests/fixtures/tiny/llama",
                    "--requests",
                    "2",
                    "--vary",
                    "requests=1,2",
                ],
                "--requests is fixed and --vary requests=1,2 varies it: each trial would take the varied value; drop --requests or the --vary",
            ),
            (
                vec![
                    "--batch",
                    "2",
                    "--vary",
                    "batch=1..8",
                    "--search",
                    "frontier",
                ],
                "--batch is fixed and --vary batch=1..8 varies it",
            ),
        ] {
            let mut argv = vec!["--predict", "--card", "L4", "--output", "x.json"];
            argv.extend(args);
            let err = plan_of(&argv).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        }
    }

    /// With k predictions at once, a frontier tries its values in rounds and ends at the same
    /// frontier, decided by the same value and phase, as one prediction after the other.
    #[test]
    fn a_predicted_frontier_in_rounds_ends_where_one_after_the_other_does() {
        let mock = MockPredictor::new(|s| Mock::Peak(10_000_000 * dense(s).context));
        let mut ends = Vec::new();
        for jobs in [1, 2, 3] {
            let args = [
                "--vary",
                "context=1..1000",
                "--search",
                "frontier",
                "--memory-limit",
                "2000000000",
            ];
            let series = done(sweep_with_jobs(&args, &mock, jobs).2);
            let f = series.frontier.clone().unwrap();
            let d = f.deciding.clone().expect("what decides");
            let said = match jobs {
                1 => "one prediction after the other".to_string(),
                k => format!("rounds of up to {k} predictions at once"),
            };
            assert!(series.protocol.contains(&said), "{}", series.protocol);
            if jobs > 1 {
                assert!(
                    f.strategy.contains(&format!("{jobs} predictions at once")),
                    "{}",
                    f.strategy
                );
            }
            ends.push((
                f.last_success,
                f.first_failure,
                d.value,
                d.phase,
                d.driver_view_bytes,
            ));
        }
        assert!(ends.windows(2).all(|w| w[0] == w[1]), "{ends:?}");
    }

    #[test]
    fn a_predicted_frontier_ends_at_the_capacity_with_the_deciding_phase() {
        // Peak reserved 10 MB per context unit; 2 GB of capacity less the context fits 135 units.
        let mock = MockPredictor::new(|s| Mock::Peak(10_000_000 * dense(s).context));
        let (_d, out, finish) = sweep(
            &[
                "--vary",
                "context=1..1000",
                "--search",
                "frontier",
                "--memory-limit",
                "2000000000",
            ],
            &mock,
        );
        let series = done(finish);
        let fits = (2_000_000_000 - CONTEXT) / 10_000_000;
        let f = series.frontier.as_ref().unwrap();
        assert_eq!(
            (f.last_success, f.first_failure),
            (Some(fits), Some(fits + 1))
        );
        let d = f.deciding.as_ref().expect("what decides");
        assert_eq!(d.value, fits + 1);
        assert_eq!(d.phase, "model_load", "the first phase over the capacity");
        assert_eq!(d.driver_view_bytes, Some(10_000_000 * (fits + 1) + CONTEXT));
        assert_eq!(d.capacity_bytes, 2_000_000_000);
        assert!(d.largest_at_peak.is_some());
        assert_eq!(series.kind, PointKind::Predicted);
        assert!(series.trials.iter().all(|t| t.kind == PointKind::Predicted));
        assert!(
            series.trials.iter().all(|t| t.result.is_none()),
            "never a measurement"
        );
        assert!(series.trials.iter().all(|t| t.prediction.is_some()));
        let no = series.trials.iter().find(|t| t.out_of_memory).unwrap();
        assert_eq!(no.status, TrialStatus::Failed);
        assert!(no.error.as_ref().unwrap().contains("predicted not to fit"));
        assert!(!series.limit.as_ref().unwrap().emulated);
        assert!(series.protocol.contains("one prediction after the other"));
        assert!(
            f.trials <= 12,
            "the predicted peaks guide the search: {}",
            f.trials
        );
        assert!(!crate::sweep::driver::failed(&series));
        let on_disk: Series = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        assert_eq!(on_disk.kind, PointKind::Predicted);
        let table = crate::sweep::render::table(&series, &out);
        assert!(table.contains("PREDICTED for H200"), "{table}");
        assert!(
            table.contains(&format!(
                "largest predicted to fit {fits}, first predicted not to fit {}",
                fits + 1
            )),
            "{table}"
        );
        assert!(table.contains("in model_load"), "{table}");
    }

    #[test]
    fn a_list_and_a_grid_are_recorded_in_order_and_identical_trials_predicted_once() {
        let mock = MockPredictor::new(|s| Mock::Peak(1_000_000 * dense(s).batch));
        let (_d, _out, finish) = sweep(&["--vary", "batch=1,2,4,8", "--card", "L4"], &mock);
        let series = done(finish);
        let batches: Vec<u64> = series
            .trials
            .iter()
            .map(|t| t.values["batch"].as_u64().unwrap())
            .collect();
        assert_eq!(
            batches,
            [1, 2, 4, 8],
            "recorded in order, whatever order they ended in"
        );
        assert_eq!(mock.specs.lock().unwrap().len(), 4);
        assert!(series.trials.iter().all(|t| t.status == TrialStatus::Ok));
        assert_eq!(series.trials[3].peak_reserved_bytes, Some(8_000_000));
        assert!(
            series
                .fit
                .as_ref()
                .unwrap()
                .overhead_source
                .contains("predicted card")
        );
        assert_eq!(
            series.limit.as_ref().unwrap().bytes,
            crate::cards::find("L4").unwrap().device_capacity().0.get()
        );
        assert!(!series.base.contains_key("batch"));

        let mock = MockPredictor::new(|_| Mock::Peak(1 << 20));
        let (_d, _out, finish) = sweep(
            &[
                "--vary",
                "batch=1,2",
                "--vary",
                "context=8,16",
                "--card",
                "L4",
            ],
            &mock,
        );
        let series = done(finish);
        let cells: Vec<(u64, u64)> = series
            .trials
            .iter()
            .map(|t| {
                (
                    t.values["batch"].as_u64().unwrap(),
                    t.values["context"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(cells, [(1, 8), (1, 16), (2, 16), (2, 8)]);
        assert_eq!(series.mode, SweepMode::Grid);

        // Two loads of one configuration: predicted once, the second says it reuses the first.
        let dir = tempfile::tempdir().unwrap();
        let loads = dir.path().join("loads.json");
        std::fs::write(
            &loads,
            r#"{"loads": [{"name": "a", "batch": 2}, {"name": "b", "batch": 2}, {"name": "c", "batch": 4}]}"#,
        )
        .unwrap();
        let mock = MockPredictor::new(|s| Mock::Peak(1_000_000 * dense(s).batch));
        let (_d, _out, finish) =
            sweep(&["--loads", loads.to_str().unwrap(), "--card", "L4"], &mock);
        let series = done(finish);
        assert_eq!(
            mock.specs.lock().unwrap().len(),
            2,
            "batch 2 predicted once"
        );
        assert_eq!(series.trials.len(), 3);
        assert_eq!(series.trials[1].load.as_deref(), Some("b"));
        assert_eq!(series.trials[1].peak_reserved_bytes, Some(2_000_000));
        assert!(series.notes.iter().any(|n| n.contains("reused")));
    }

    #[test]
    fn an_unpredictable_trial_is_a_gap_with_its_reason_never_a_zero() {
        let mock = MockPredictor::new(|s| match dense(s).batch {
            2 => Mock::Gap,
            b => Mock::Peak(1_000_000 * b),
        });
        let (_d, out, finish) = sweep(&["--vary", "batch=1,2,4", "--card", "L4"], &mock);
        let series = done(finish);
        let gap = &series.trials[1];
        assert_eq!(gap.status, TrialStatus::Unpredictable);
        assert_eq!(gap.peak_reserved_bytes, None);
        assert_eq!(gap.peak_allocated_bytes, None);
        assert!(
            gap.error.as_ref().unwrap().contains("aten::nonzero"),
            "{:?}",
            gap.error
        );
        assert!(!gap.is_broken(), "a gap is said, not a failure");
        assert_eq!(series.trials[2].status, TrialStatus::Ok, "the list goes on");
        let table = crate::sweep::render::table(&series, &out);
        assert!(table.contains("unpredictable: cold_forward"), "{table}");

        // The frontier search cannot place a bound past a gap: it stops and says so.
        let mock = MockPredictor::new(|s| match dense(s).context {
            c if c > 100 => Mock::Gap,
            c => Mock::Peak(1_000_000 * c),
        });
        let (_d, _out, finish) = sweep(
            &[
                "--vary",
                "context=1..1000",
                "--search",
                "frontier",
                "--card",
                "L4",
            ],
            &mock,
        );
        let series = done(finish);
        assert_eq!(
            series.trials.last().unwrap().status,
            TrialStatus::Unpredictable
        );
        assert!(series.notes.iter().any(|n| n.contains("stopped early")));
        assert_eq!(series.frontier.as_ref().unwrap().first_failure, None);
    }

    #[test]
    fn missing_pytorch_at_the_first_prediction_writes_nothing() {
        let mock = MockPredictor::new(|_| Mock::Unavailable);
        let (_d, out, finish) = sweep(&["--vary", "batch=1,2", "--card", "L4"], &mock);
        assert!(matches!(finish.unwrap(), Finish::Unavailable(r) if r.contains("no torch")));
        assert!(!out.exists());
    }

    #[test]
    fn predict_refuses_what_it_cannot_do_with_the_fix() {
        let refused = |args: &[&str]| {
            let mut argv = vec!["--predict", "--output", "/tmp/never-written.json"];
            argv.extend(args);
            plan_of(&argv).unwrap_err().to_string()
        };
        let e = refused(&["--vary", "batch=1,2"]);
        assert!(
            e.contains("--card NAME") && e.contains("--memory-limit BYTES"),
            "{e}"
        );
        let e = refused(&["--processes", "3", "--card", "L4"]);
        assert!(e.contains("deterministic"), "{e}");
        let e = refused(&[
            "--vary",
            "alloc_conf=default,expandable_segments",
            "--card",
            "L4",
        ]);
        assert!(e.contains("--alloc-conf SETTING"), "{e}");
        let e = refused(&[
            "--vary",
            "batch=1..8",
            "--search",
            "frontier",
            "--card",
            "L4",
            "--no-prediction",
        ]);
        assert!(e.contains("drop --no-prediction"), "{e}");
        let e = refused(&[
            "--vary",
            "batch=1,2",
            "--card",
            "L4",
            "--device",
            "cuda:0,cuda:1",
        ]);
        assert!(e.contains("one device"), "{e}");
    }
}
