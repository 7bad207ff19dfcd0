//! What the fiche asserts, from small hand-built documents.

use serde_json::{Value, json};

use super::*;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// A completed phase read on `cuda:0`; `driver` is NVML's process peak, when sampled.
fn phase(name: &str, index: u64, status: &str, reserved: u64, driver: Option<u64>) -> Value {
    json!({"name": name, "index": index, "status": status, "duration_s": 0.1, "inputs": {},
        "devices": [{"device": "cuda:0", "start_allocated_bytes": 0, "start_reserved_bytes": 0,
            "peak_allocated_bytes": reserved - MIB, "peak_reserved_bytes": reserved,
            "end_allocated_bytes": reserved / 2, "end_reserved_bytes": reserved, "mem_get_info": null}],
        "error": null,
        "driver": driver.map(|d| json!([{"device": "cuda:0", "nvml_index": 0, "samples": 10,
            "peak_device_used_bytes": null, "peak_process_used_bytes": d,
            "process_used_at_end_bytes": d, "outside_allocator_at_end_bytes": d - reserved,
            "reason": null}]))})
}

/// A result on an H200; `nvml_total` and `torch_total` are the two capacities it may have read.
fn result(
    status: &str,
    phases: Vec<Value>,
    nvml_total: Option<u64>,
    torch_total: Option<u64>,
) -> Value {
    let driver = nvml_total.map(|t| {
        json!({"driver_version": "580", "cuda_driver_version": "13", "gpus": [{"index": 0,
            "name": "NVIDIA H200", "uuid": null, "total_bytes": t, "used_bytes": null,
            "free_bytes": null, "compute_capability": "9.0", "processes": []}]})
    });
    json!({
        "schema": "iteragpu.measure/1", "tool_version": "t", "status": status,
        "started_at": "", "ended_at": "",
        "identity": {"workload": "dense", "code_hash": "x", "seed": 0, "declared": {}},
        "dimensions": {"batch": 2},
        "environment": {"python": {"python": {}, "settings": {}, "transformers_version": null,
            "peft_version": null,
            "torch": {"version": "2.11.0", "devices": [{"index": 0, "name": "NVIDIA H200",
                "total_memory": torch_total}]},
            "can_measure": true, "reason": null},
            "driver": driver, "driver_reason": null, "nvml_indices": [0],
            "nvml_sample_interval_ms": 5.0},
        "scope": {"phases": ["model_load", "forward", "evaluation"], "first_pass": "",
            "devices": ["cuda:0"]},
        "policies": {"process": "fresh", "warmup": 0, "repeats": 0, "empty_cache": "never",
            "protocol": "per-phase", "timeout_s": null},
        "phases": phases, "warm_summary": [], "failure": null,
        "worker": {"pid": 1, "exit_code": 0, "signal": null, "stderr_tail": []},
        "unknown_events": [], "notes": []
    })
}

fn parse<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("a valid hand-built document")
}

fn completed_run() -> MeasureResult {
    parse(result(
        "ok",
        vec![
            phase("model_load", 0, "ok", 4 * GIB, Some(5 * GIB)),
            phase("forward", 1, "ok", 8 * GIB, Some(9 * GIB)),
            // The cache keeps what it reserved: the same peak later is not the phase that matters.
            phase("forward", 2, "ok", 8 * GIB, Some(9 * GIB)),
        ],
        Some(140 * GIB),
        Some(139 * GIB),
    ))
}

#[test]
fn a_measured_run_compares_the_drivers_view_with_nvmls_total() {
    let r = completed_run();
    let f = Facts::new(&r, None, None);
    let peak = f.peak.expect("a completed phase with a reading");
    assert_eq!(
        (peak.position, peak.phase.name.as_str(), peak.reserved_bytes),
        (1, "forward", 8 * GIB),
        "the first phase to reach the highest peak"
    );
    assert_eq!(f.driver_peak, Some(9 * GIB));
    assert_eq!(
        f.capacity,
        Some(Capacity {
            counter: CapacityCounter::Nvml,
            bytes: 140 * GIB
        })
    );
    assert_eq!(
        f.need,
        Some(Need {
            counter: NeedCounter::DriverView,
            bytes: 9 * GIB
        })
    );
    assert_eq!(f.margin, Some(i128::from(131 * GIB)));
    assert_eq!(f.workload, "dense");
    assert!(!f.fake_torch);
    assert_eq!(f.stopped, None);
    assert!(f.validated.is_none());
    assert_eq!(f.assumed_terms, None, "no estimate attached");
    assert_eq!(f.not_measured, ["export"]);
    assert_eq!(f.variations_covered, None);
}

#[test]
fn the_fiche_and_the_ledger_explain_the_same_phase() {
    let r = completed_run();
    let f = Facts::new(&r, None, None);
    let l = f.ledger.as_ref().expect("a completed run has a ledger");
    let peak = f.peak.unwrap();
    assert_eq!(
        (l.phase.as_str(), l.phase_index),
        (peak.phase.name.as_str(), peak.phase.index)
    );
    // The largest term of the gap is the ledger's own term line with the largest observation.
    let (id, bytes) = f.largest_gap_term.expect("observed terms");
    let largest = l
        .lines
        .iter()
        .filter(|x| x.kind == LineKind::Term)
        .filter_map(|x| x.observed.as_ref().map(|o| o.bytes))
        .max();
    assert_eq!(Some(bytes), largest);
    assert_eq!(
        l.lines.iter().find(|x| x.id == id).unwrap().kind,
        LineKind::Term
    );
}

#[test]
fn an_out_of_memory_run_stops_with_its_class_and_its_partial_peak_is_no_need() {
    let message = "CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of 0.06 GiB of which 62.00 MiB is free. Of the allocated memory 0.02 MiB is allocated by PyTorch, and 1.98 MiB is reserved by PyTorch but unallocated.";
    let mut v = result(
        "failed",
        vec![
            phase("model_load", 0, "ok", GIB, None),
            phase("forward", 1, "failed", 70 * GIB, None),
        ],
        None,
        Some(80 * GIB),
    );
    v["failure"] = json!({"phase": "forward", "error_type": "OutOfMemoryError",
        "message": message, "out_of_memory": true,
        "post_mortem": crate::explain::oom::diagnose(message), "caution": ""});
    let r: MeasureResult = parse(v);
    let f = Facts::new(&r, None, None);
    assert_eq!(
        f.stopped,
        Some(Stopped {
            phase: Some("forward"),
            class: Some(OomClass::Capacity)
        })
    );
    let peak = f.peak.unwrap();
    assert_eq!(
        (peak.phase.name.as_str(), peak.reserved_bytes),
        ("model_load", GIB),
        "the failed phase's 70 GiB is partial"
    );
    // No driver's view: PyTorch's total against the peak reserved.
    assert_eq!(
        f.capacity,
        Some(Capacity {
            counter: CapacityCounter::TorchTotalMemory,
            bytes: 80 * GIB
        })
    );
    assert_eq!(
        f.need,
        Some(Need {
            counter: NeedCounter::PeakReserved,
            bytes: GIB
        })
    );
    assert_eq!(f.margin, Some(i128::from(79 * GIB)));
}

#[test]
fn a_card_shorter_than_the_need_has_a_negative_margin() {
    let r: MeasureResult = parse(result(
        "ok",
        vec![phase("forward", 0, "ok", 8 * GIB, Some(9 * GIB))],
        Some(8 * GIB),
        None,
    ));
    assert_eq!(Facts::new(&r, None, None).margin, Some(-i128::from(GIB)));
}

#[test]
fn a_missing_capacity_is_none_never_zero() {
    let r: MeasureResult = parse(result(
        "ok",
        vec![phase("forward", 0, "ok", 8 * GIB, None)],
        None,
        None,
    ));
    let f = Facts::new(&r, None, None);
    assert_eq!(f.capacity, None);
    assert_eq!(f.margin, None);
    assert_eq!(
        f.need,
        Some(Need {
            counter: NeedCounter::PeakReserved,
            bytes: 8 * GIB
        })
    );
}

#[test]
fn a_run_without_a_completed_reading_has_no_peak_no_need_and_no_margin() {
    let mut failed = phase("model_load", 0, "crashed", GIB, None);
    failed["devices"] = json!([]);
    let r: MeasureResult = parse(result("crashed", vec![failed], Some(140 * GIB), None));
    let f = Facts::new(&r, None, None);
    assert!(f.peak.is_none());
    assert_eq!((f.need, f.margin), (None, None));
    assert_eq!(
        f.stopped,
        Some(Stopped {
            phase: None,
            class: None
        })
    );
    assert!(f.ledger.is_none(), "nothing to reconcile");
}

#[test]
fn a_prediction_alone_is_never_the_peak_or_the_need() {
    // The prediction of the frozen fixture, stored in a run whose only phase crashed unread.
    let stored: Value = serde_json::from_str(include_str!(
        "../../../../tests/fixtures/fiche/predicted.json"
    ))
    .unwrap();
    let mut crashed = phase("model_load", 0, "crashed", GIB, None);
    crashed["devices"] = json!([]);
    let mut v = result("crashed", vec![crashed], Some(140 * GIB), None);
    v["prediction"] = stored["prediction"].clone();
    let r: MeasureResult = parse(v);
    assert!(r.prediction.is_some());
    let f = Facts::new(&r, None, None);
    assert!(f.peak.is_none());
    assert_eq!((f.driver_peak, f.need, f.margin), (None, None, None));
    assert_eq!(f.largest_gap_term, None);
}

fn series(frontier: Option<(Option<u64>, Option<u64>)>, trials: &[(u64, &str)]) -> Series {
    parse(json!({
        "schema": "iteragpu.series/1", "tool_version": "t", "started_at": "", "updated_at": "",
        "status": "complete", "mode": if frontier.is_some() { "frontier" } else { "list" },
        "varied": ["batch"], "base": {}, "identical_across_trials": true, "protocol": "per-phase",
        "limit": null,
        "trials": trials.iter().enumerate().map(|(k, (batch, status))| json!({
            "index": k, "values": {"batch": batch}, "load": null, "status": status,
            "out_of_memory": *status != "ok", "peak_allocated_bytes": null,
            "peak_reserved_bytes": null, "end_allocated_bytes": null, "end_reserved_bytes": null,
            "failed_phase": null, "error": null, "duration_s": 1.0, "result": null})).collect::<Vec<_>>(),
        "frontier": frontier.map(|(last_success, first_failure)| json!({"variable": "batch",
            "last_success": last_success, "first_failure": first_failure, "resolution": 1,
            "trials": trials.len(), "strategy": "bisection", "hint": null,
            "budget_exhausted": false})),
        "fit": null, "notes": []
    }))
}

#[test]
fn a_series_with_a_frontier_validates_its_largest_completed_load() {
    let r = completed_run();
    let s = series(
        Some((Some(12), Some(16))),
        &[(8, "ok"), (16, "failed"), (12, "ok")],
    );
    let f = Facts::new(&r, Some(&s), None);
    let v = f.validated.expect("a series attached");
    assert_eq!((v.variable, v.largest), ("batch", Some(12)));
    let frontier = v.frontier.expect("a frontier search");
    assert_eq!(
        (frontier.last_success, frontier.first_failure),
        (Some(12), Some(16))
    );
    assert_eq!(f.variations_covered.as_deref(), Some("batch"));
}

#[test]
fn a_series_where_nothing_completed_validates_nothing() {
    let r = completed_run();
    let s = series(None, &[(64, "failed")]);
    let v = Facts::new(&r, Some(&s), None).validated.unwrap();
    assert_eq!(v.largest, None);
    assert!(v.frontier.is_none());
}

#[test]
fn the_estimates_assumed_terms_are_counted() {
    let r = completed_run();
    let e: EstimateDoc = serde_json::from_str(include_str!(
        "../../../../tests/fixtures/fiche/estimate.json"
    ))
    .unwrap();
    let f = Facts::new(&r, None, Some(&e));
    let assumed = e.terms.iter().filter(|t| t.kind == Kind::Assumed).count();
    assert!(assumed > 0, "the fixture assumes a reserve");
    assert_eq!(f.assumed_terms, Some(assumed));
}

#[test]
fn the_cards_drawn_against_a_series_are_near_its_peak() {
    let r = completed_run();
    let mut s = series(None, &[(8, "ok"), (16, "ok")]);
    s.trials[1].peak_reserved_bytes = Some(20 * GIB);
    let cards = Facts::new(&r, Some(&s), None).validated.unwrap().cards;
    assert!(!cards.is_empty());
    for (name, bytes) in &cards {
        assert!(
            (10 * GIB..=80 * GIB).contains(bytes),
            "{name}: {bytes} is not near 20 GiB"
        );
    }
    // Nothing near a tiny peak: the smallest card of the catalog, unless a limit is drawn.
    s.trials[1].peak_reserved_bytes = Some(MIB);
    let smallest = crate::cards::catalog()
        .into_iter()
        .map(|c| c.device_capacity().0.get())
        .min();
    let cards = Facts::new(&r, Some(&s), None).validated.unwrap().cards;
    assert_eq!(
        cards.iter().map(|c| c.1).collect::<Vec<_>>(),
        Vec::from_iter(smallest)
    );
}
