use super::*;

fn phase(
    name: &str,
    index: u64,
    start: u64,
    peak: u64,
    end: u64,
    resv: (u64, u64),
) -> serde_json::Value {
    serde_json::json!({"name": name, "index": index, "status": "ok", "duration_s": 0.1, "inputs": {},
        "devices": [{"device": "cuda:0", "start_allocated_bytes": start, "start_reserved_bytes": resv.0,
            "peak_allocated_bytes": peak, "peak_reserved_bytes": resv.1, "end_allocated_bytes": end,
            "end_reserved_bytes": resv.1, "mem_get_info": null,
            "allocator": {"active_bytes_current": end, "active_bytes_peak": peak,
                "inactive_split_bytes_current": 1000, "inactive_split_bytes_peak": 600 << 20,
                "requested_bytes_current": end - 512, "requested_bytes_peak": peak,
                "segments_current": 3, "segments_peak": 4,
                "num_alloc_retries": if name == "forward" { 2 } else { 0 }, "num_ooms": 0}}],
        "error": null,
        "driver": [{"device": "cuda:0", "nvml_index": 0, "samples": 10, "peak_device_used_bytes": null,
            "peak_process_used_bytes": resv.1 + (700 << 20), "process_used_at_end_bytes": resv.1 + (600 << 20),
            "outside_allocator_at_end_bytes": 600u64 << 20, "reason": null}]})
}

#[test]
fn the_ledger_reads_each_term_at_its_checkpoint_and_keeps_the_rest_unexplained() {
    let gib = 1u64 << 30;
    let r: MeasureResult = serde_json::from_value(serde_json::json!({
        "schema": "iteragpu.measure/1", "tool_version": "t", "status": "ok", "started_at": "", "ended_at": "",
        "identity": {"workload": "dense", "code_hash": "x", "seed": 0, "declared": {}}, "dimensions": {},
        "environment": {"python": {"python": {}, "settings": {}, "transformers_version": null, "peft_version": null,
            "torch": {"devices": [{"index": 0, "name": "NVIDIA H200", "total_memory": 150_109_880_320u64}]},
            "can_measure": true, "reason": null},
            "driver": {"driver_version": "580", "cuda_driver_version": "13", "gpus": [{"index": 0, "name": "NVIDIA H200",
                "uuid": null, "total_bytes": 150_754_820_096u64, "used_bytes": null, "free_bytes": null,
                "compute_capability": "9.0", "processes": []}]},
            "driver_reason": null, "nvml_indices": [0], "nvml_sample_interval_ms": 5.0},
        "scope": {"phases": [], "first_pass": "", "devices": ["cuda:0"]},
        "policies": {"process": "fresh", "warmup": 0, "repeats": 0, "empty_cache": "never", "protocol": "per-phase", "timeout_s": null},
        "phases": [phase("model_load", 0, 0, 4 * gib, 4 * gib, (0, 5 * gib)),
                   phase("forward", 1, 4 * gib + (1 << 20), 7 * gib, 5 * gib, (5 * gib, 8 * gib))],
        "warm_summary": [], "failure": null,
        "worker": {"pid": 1, "exit_code": 0, "signal": null, "stderr_tail": []},
        "unknown_events": [], "notes": []
    })).unwrap();
    let l = of_result(&r, None, None).unwrap();
    assert_eq!(l.phase, "forward");
    let find = |id: LineId| l.lines.iter().find(|x| x.id == id).unwrap();
    assert_eq!(
        find(LineId::Weights).observed.as_ref().unwrap().bytes,
        4 * gib
    );
    assert_eq!(
        find(LineId::HeldAtStart).observed.as_ref().unwrap().bytes,
        1 << 20
    );
    assert_eq!(
        find(LineId::Growth).observed.as_ref().unwrap().bytes,
        3 * gib - (1 << 20)
    );
    assert_eq!(
        find(LineId::AllocatorSlack)
            .observed
            .as_ref()
            .unwrap()
            .bytes,
        3 * gib
    );
    assert_eq!(
        find(LineId::OutsideAllocator)
            .observed
            .as_ref()
            .unwrap()
            .bytes,
        600 << 20
    );
    assert_eq!(
        find(LineId::Growth).checkpoint.to_string(),
        "peak of forward − its start"
    );
    // Driver's peak 8 GiB + 700 MiB; peak reserved 8 GiB + outside 600 MiB: 100 MiB unexplained.
    let u = find(LineId::Unexplained);
    assert_eq!(u.kind, LineKind::Unexplained);
    assert_eq!(u.observed.as_ref().unwrap().bytes, 100 << 20);
    let names: Vec<String> = l.capacities.iter().map(|c| c.name.to_string()).collect();
    assert_eq!(names[..2], ["PyTorch's total_memory", "NVML's total"]);
    assert!(names[2].starts_with("the vendor's label"));
    assert!(
        l.diagnostics
            .iter()
            .any(|d| d.to_string().contains("2 allocation retries")),
        "{:?}",
        l.diagnostics
    );
    assert!(
        l.diagnostics
            .iter()
            .any(|d| d.to_string().contains("fragmentation")),
        "{:?}",
        l.diagnostics
    );
}

/// A checkpoint is written as English words and read back from them.
#[test]
fn checkpoints_are_words_read_back() {
    let p = || "warm_forward".to_string();
    for (c, text) in [
        (Checkpoint::Start(p()), "start of warm_forward"),
        (Checkpoint::End(p()), "end of warm_forward"),
        (Checkpoint::Peak(p()), "peak of warm_forward"),
        (
            Checkpoint::PeakMinusStart(p()),
            "peak of warm_forward − its start",
        ),
        (
            Checkpoint::PredictedPeak(p()),
            "predicted peak of warm_forward",
        ),
        (
            Checkpoint::PredictedOom(p()),
            "predicted out of memory in warm_forward",
        ),
        (
            Checkpoint::EndOneCheckpoint(p()),
            "end of warm_forward (one checkpoint)",
        ),
        (
            Checkpoint::PeakSampled(p()),
            "peak of warm_forward (sampled)",
        ),
        (Checkpoint::Stated, "stated"),
    ] {
        assert_eq!(serde_json::to_value(&c).unwrap(), text);
        assert_eq!(
            serde_json::from_value::<Checkpoint>(text.into()).unwrap(),
            c
        );
    }
    assert!(serde_json::from_value::<Checkpoint>("somewhere".into()).is_err());
}

/// Each estimate term is compared on the line its id says, whatever its English name.
#[test]
fn estimate_terms_are_summed_on_their_line_by_id() {
    let e: EstimateDoc = serde_json::from_value(serde_json::json!({
        "schema": "iteragpu.estimate/1", "total_bytes": 0, "left_out": [],
        "terms": [
            {"id": "weights", "dtype": "bf16", "name": "w", "bytes": 10, "kind": "calculated", "formula": "", "in_total": true},
            {"id": "allocator_segments", "name": "s", "bytes": 1, "kind": "assumed", "formula": "", "in_total": true},
            {"id": "stored_weights", "name": "x", "bytes": 100, "kind": "calculated", "formula": "", "in_total": false},
            {"id": "gradients", "dtype": "fp32", "name": "g", "bytes": 20, "kind": "calculated", "formula": "", "in_total": true},
            {"id": "optimizer_states", "optimizer": "adamw", "name": "o", "bytes": 40, "kind": "calculated", "formula": "", "in_total": true},
            {"id": "activations", "name": "a", "bytes": 5, "kind": "assumed", "formula": "", "in_total": true},
            {"id": "nccl_buffers", "name": "n", "bytes": 7, "kind": "assumed", "formula": "", "in_total": true}
        ]
    }))
    .unwrap();
    let weights = estimate_sum(&e, LineId::Weights).unwrap();
    assert_eq!(weights.bytes, 11);
    assert_eq!(weights.provenance, Provenance::Assumed);
    assert_eq!(weights.basis, "w + s");
    assert_eq!(estimate_sum(&e, LineId::HeldAtStart).unwrap().bytes, 60);
    assert_eq!(
        estimate_sum(&e, LineId::HeldAtStart).unwrap().provenance,
        Provenance::Calculated
    );
    assert_eq!(estimate_sum(&e, LineId::Growth).unwrap().bytes, 5);
    assert_eq!(estimate_sum(&e, LineId::KvCache), None);
}

#[test]
fn a_failed_run_has_no_ledger() {
    let r: MeasureResult = serde_json::from_value(serde_json::json!({
        "schema": "iteragpu.measure/1", "tool_version": "t", "status": "failed", "started_at": "", "ended_at": "",
        "identity": {"workload": "dense", "code_hash": "x", "seed": 0, "declared": {}}, "dimensions": {},
        "environment": {"python": null, "driver": null, "driver_reason": null, "nvml_indices": [], "nvml_sample_interval_ms": null},
        "scope": {"phases": [], "first_pass": "", "devices": ["cuda:0"]},
        "policies": {"process": "fresh", "warmup": 0, "repeats": 0, "empty_cache": "never", "protocol": "per-phase", "timeout_s": null},
        "phases": [], "warm_summary": [], "failure": null,
        "worker": {"pid": 1, "exit_code": 3, "signal": null, "stderr_tail": []},
        "unknown_events": [], "notes": []
    })).unwrap();
    assert!(
        of_result(&r, None, None)
            .unwrap_err()
            .to_string()
            .contains("partial peak")
    );
}

/// A capacity's name is written as English words and read back from them.
#[test]
fn capacity_names_are_words_read_back() {
    for (name, text) in [
        (CapacityName::TorchTotalMemory, "PyTorch's total_memory"),
        (CapacityName::NvmlTotal, "NVML's total"),
        (
            CapacityName::VendorLabel("80 GB HBM3".into()),
            "the vendor's label (80 GB HBM3)",
        ),
    ] {
        assert_eq!(String::from(name.clone()), text);
        assert_eq!(CapacityName::try_from(text.to_string()), Ok(name));
    }
    assert!(CapacityName::try_from("the card".to_string()).is_err());
}

/// The optimizer step's foreach temporaries are a prediction's `temporary` storages, on the
/// activations' line beside them; the measured ledger counts them in the phase's growth.
#[test]
fn the_optimizer_steps_temporaries_sit_with_the_transients() {
    let id = TermId::OptimizerStepTemporaries {
        optimizer: crate::estimate::Optimizer::Adamw,
    };
    assert_eq!(LineId::of_term_by_category(&id), Some(LineId::Activations));
    assert_eq!(LineId::of_term(&id), Some(LineId::Growth));
}
