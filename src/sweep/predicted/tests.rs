//! The predicted sweep with a mock predictor: no process, documents made from a committed
//! prediction with the peaks each test asks for.

use super::*;
use crate::commands::sweep::plan_of;
use crate::schema::spec::{WorkerSpec, WorkloadSpec};
use crate::schema::trace::Unpredictable;
use std::sync::Mutex;

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
    serde_json::from_slice(&std::fs::read("tests/fixtures/fiche/prediction.json").unwrap()).unwrap()
}

impl<F: Fn(&WorkerSpec) -> Mock + Sync> Predictor for MockPredictor<F> {
    fn predict(&self, plan: &MeasurePlan, _: &dyn Progress) -> Result<Outcome, StartError> {
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
                p.unpredictable.push(Unpredictable {
                    op: "aten::nonzero".into(),
                    file: None,
                    line: None,
                    reason: "its output's size depends on data".into(),
                });
            }
            Mock::Unavailable => return Ok(Outcome::Unavailable("no torch here".into())),
        }
        Ok(Outcome::Predicted(Box::new(doc)))
    }

    fn stop_requested(&self) -> Option<Stop> {
        None
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
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("series.json");
    let mut argv = vec!["--predict"];
    argv.extend(args);
    argv.extend(["--output", out.to_str().unwrap()]);
    let plan = plan_of(&argv).unwrap();
    let finish = run(&plan, mock, Writer::new(&out).unwrap(), &NoProgress);
    (dir, out, finish)
}

fn done(finish: Result<Finish>) -> Box<Series> {
    match finish.unwrap() {
        Finish::Done { series, .. } => series,
        Finish::Unavailable(r) => panic!("unavailable: {r}"),
    }
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
    assert_eq!(d.driver_view_bytes, 10_000_000 * (fits + 1) + CONTEXT);
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
    assert!(table.contains("by model_load"), "{table}");
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
    let (_d, _out, finish) = sweep(&["--loads", loads.to_str().unwrap(), "--card", "L4"], &mock);
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
