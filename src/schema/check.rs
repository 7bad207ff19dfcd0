//! Predicted vs observed: predictions matched to the phases that really ran, and the cache's real
//! size next to the estimate's KV term.

use crate::schema::events::PhaseRecord;
use crate::schema::measure::{CacheCheck, MeasureResult, PhaseCheck};
use crate::schema::prediction::PredictionDoc;

/// (observed − predicted) ÷ observed × 100; `None` without an observation.
pub fn error_pct(predicted: u64, observed: Option<u64>) -> Option<f64> {
    observed
        .filter(|o| *o > 0)
        .map(|o| (o as f64 - predicted as f64) / o as f64 * 100.0)
}

/// Matches a prediction's phases to the observed ones in order (the n-th `warm_forward`
/// predicted with the n-th observed one). A phase not predicted (unpredictable, failed) or not
/// completed on the GPU is left out.
pub fn predictions(result: &mut MeasureResult, prediction: &PredictionDoc, device: usize) {
    let predicted = &prediction.phases;
    let twins = nth_of_name(
        result.phases.iter().map(|p| p.name.as_str()),
        predicted.iter().map(|p| p.name.as_str()),
    );
    for (phase, twin) in result.phases.iter().zip(twins) {
        let Some(k) = twin else {
            continue;
        };
        let p = &predicted[k];
        // A failed phase's figures stop where it failed: not a prediction of the whole phase.
        if !p.status.has_figures() {
            continue;
        }
        let (Some(p_alloc), Some(p_resv)) = (p.peak_allocated_bytes, p.peak_reserved_bytes) else {
            continue;
        };
        if !phase.status.is_ok() {
            continue;
        }
        let observed = phase.devices.get(device);
        let alloc = observed.and_then(|d| d.peak_allocated_bytes);
        let resv = observed.and_then(|d| d.peak_reserved_bytes);
        result.predictions.push(PhaseCheck {
            phase: phase.name.clone(),
            index: phase.index,
            predicted_peak_allocated_bytes: p_alloc,
            observed_peak_allocated_bytes: alloc,
            error_allocated_pct: error_pct(p_alloc, alloc),
            predicted_peak_reserved_bytes: p_resv,
            observed_peak_reserved_bytes: resv,
            error_reserved_pct: error_pct(p_resv, resv),
            basis: format!(
                "the workload's own code on data-less CUDA tensors for {}, replayed through the caching-allocator model",
                prediction.target.name
            ),
            predicted_lower_peak_allocated_bytes: p
                .lower
                .as_ref()
                .and_then(|l| l.peak_allocated_bytes),
            predicted_lower_peak_reserved_bytes: p.lower.as_ref().and_then(|l| l.peak_reserved_bytes),
        });
    }
}

/// For each name of `ours`, the index in `theirs` of its twin: the n-th phase of a name is matched
/// with the n-th of that name on the other side (`None`: the other side has fewer). One pass over
/// each side with a map of queues, O(n log n) (a search per phase was quadratic: 100,000 phases
/// took 80 s to compare).
pub fn nth_of_name<'a>(
    ours: impl Iterator<Item = &'a str>,
    theirs: impl Iterator<Item = &'a str>,
) -> Vec<Option<usize>> {
    let mut queues: std::collections::HashMap<&str, std::collections::VecDeque<usize>> =
        std::collections::HashMap::new();
    for (k, name) in theirs.enumerate() {
        queues.entry(name).or_default().push_back(k);
    }
    ours.map(|name| queues.get_mut(name).and_then(|q| q.pop_front()))
        .collect()
}

/// The estimate's KV bytes for a phase that recorded `cache_bytes`.
pub struct CacheEstimate {
    pub phase: String,
    pub tokens: u64,
    pub bytes: u64,
    pub basis: String,
}

pub fn kv_cache(result: &mut MeasureResult, estimates: &[CacheEstimate]) {
    for phase in &result.phases {
        let Some(est) = estimates.iter().find(|e| e.phase == phase.name) else {
            continue;
        };
        let observed = observed_cache(phase);
        let difference = observed.map(|o| o as i64 - est.bytes as i64);
        result.kv_cache.push(CacheCheck {
            phase: phase.name.clone(),
            index: phase.index,
            tokens: est.tokens,
            estimated_bytes: est.bytes,
            observed_bytes: observed,
            difference_bytes: difference,
            difference_pct: difference
                .filter(|_| est.bytes > 0)
                .map(|d| d as f64 / est.bytes as f64 * 100.0),
            basis: est.basis.clone(),
        });
    }
}

fn observed_cache(phase: &PhaseRecord) -> Option<u64> {
    phase
        .inputs
        .get("cache_bytes")
        .and_then(serde_json::Value::as_u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The n-th phase of a name meets the n-th of that name on the other side, whatever the
    /// order of the other names; one left over meets none.
    #[test]
    fn the_nth_of_a_name_meets_the_nth() {
        let ours = ["a", "b", "a", "c", "a"];
        let theirs = ["b", "a", "x", "a"];
        assert_eq!(
            nth_of_name(ours.into_iter(), theirs.into_iter()),
            [Some(1), Some(0), Some(3), None, None]
        );
        // 100,000 phases of 1,000 names match in one pass (a search per phase took 80 s).
        let names: Vec<String> = (0..100_000).map(|i| format!("step{}", i % 1000)).collect();
        let twins = nth_of_name(
            names.iter().map(String::as_str),
            names.iter().map(String::as_str),
        );
        assert!(twins.iter().enumerate().all(|(i, t)| *t == Some(i)));
    }

    /// The phases of a prediction meet the observed ones in order, by name; a phase with no
    /// predicted figure or that failed on the GPU is left out.
    #[test]
    fn predicted_and_observed_phases_are_matched_in_order() {
        let phase = |name: &str, alloc: Option<u64>| {
            serde_json::json!({"name": name, "index": 0, "status": if alloc.is_some() {"predicted"} else {"unpredictable"},
                "inputs": {}, "start_allocated_bytes": null, "start_reserved_bytes": null,
                "peak_allocated_bytes": alloc, "peak_reserved_bytes": alloc.map(|a| a + 1000),
                "peak_tensor_bytes": alloc, "end_allocated_bytes": null, "end_reserved_bytes": null,
                "driver_view_bytes": null, "at_peak": null, "unpredictable": []})
        };
        // A phase that failed in the prediction keeps the figures reached until it failed.
        let mut failed = phase("late", Some(300));
        failed["status"] = "failed".into();
        let target = crate::schema::target::Target::named(None, "native").unwrap();
        let doc: PredictionDoc = serde_json::from_value(serde_json::json!({
            "schema": "iteragpu.prediction/1", "tool_version": "t", "kind": "prediction", "status": "partial",
            "created_at": "", "identity": {"workload": "dense", "code_hash": "x", "seed": 0, "declared": {}},
            "dimensions": {}, "target": target,
            "spec": {"workload": "script", "devices": ["cuda:0"], "seed": 0, "script": "x.py", "script_args": []},
            "assumptions": {"torch_version": null, "transformers_version": null, "allocator_model": "",
                "placeholder_reads": [], "not_modelled": []},
            "phases": [phase("warm", Some(100)), phase("warm", Some(200)), phase("odd", None), failed],
            "failure": null, "notes": []
        }))
        .unwrap();
        let observed = |name: &str, peak: u64, status: &str| {
            serde_json::json!({"name": name, "index": 0, "status": status, "duration_s": 0.1,
                "devices": [{"device": "cuda:0", "start_allocated_bytes": 0, "start_reserved_bytes": 0,
                "peak_allocated_bytes": peak, "peak_reserved_bytes": peak, "end_allocated_bytes": 0,
                "end_reserved_bytes": 0, "mem_get_info": null}], "error": null})
        };
        let mut result: MeasureResult = serde_json::from_value(serde_json::json!({
            "schema": "iteragpu.measure/1", "tool_version": "t", "status": "ok", "started_at": "", "ended_at": "",
            "identity": {"workload": "dense", "code_hash": "x", "seed": 0, "declared": {}}, "dimensions": {},
            "environment": {"python": null, "driver": null, "driver_reason": null, "nvml_indices": [],
                "nvml_sample_interval_ms": null},
            "scope": {"phases": [], "first_pass": "", "devices": ["cuda:0"]},
            "policies": {"process": "fresh", "warmup": 0, "repeats": 0, "empty_cache": "never",
                "protocol": "per-phase", "timeout_s": null},
            "phases": [observed("warm", 100, "ok"), observed("warm", 250, "ok"), observed("odd", 5, "ok"),
                observed("late", 400, "ok")],
            "warm_summary": [], "failure": null,
            "worker": {"pid": 1, "exit_code": 0, "signal": null, "stderr_tail": []},
            "unknown_events": [], "notes": []
        }))
        .unwrap();
        predictions(&mut result, &doc, 0);
        assert_eq!(
            result.predictions.len(),
            2,
            "the unpredictable and the failed phases are left out"
        );
        assert_eq!(result.predictions[0].error_allocated_pct, Some(0.0));
        assert_eq!(result.predictions[1].predicted_peak_allocated_bytes, 200);
        assert_eq!(result.predictions[1].error_allocated_pct, Some(20.0));
    }
}
