//! Predicted vs observed: predictions matched to the phases that really ran, and the cache's real
//! size next to the estimate's KV term.

use serde::{Deserialize, Serialize};

use super::hand_replay::PhasePrediction;
use crate::measure::events::PhaseRecord;
use crate::measure::result::MeasureResult;

/// Predicted vs observed for one phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseCheck {
    pub phase: String,
    pub index: u64,
    pub predicted_peak_allocated_bytes: u64,
    pub observed_peak_allocated_bytes: Option<u64>,
    /// (observed − predicted) ÷ observed × 100.
    pub error_allocated_pct: Option<f64>,
    pub predicted_peak_reserved_bytes: u64,
    pub observed_peak_reserved_bytes: Option<u64>,
    pub error_reserved_pct: Option<f64>,
    pub basis: String,
}

/// (observed − predicted) ÷ observed × 100; `None` without an observation.
pub fn error_pct(predicted: u64, observed: Option<u64>) -> Option<f64> {
    observed
        .filter(|o| *o > 0)
        .map(|o| (o as f64 - predicted as f64) / o as f64 * 100.0)
}

/// Observed KV-cache bytes next to the estimate for the same load.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CacheCheck {
    pub phase: String,
    pub index: u64,
    pub tokens: u64,
    pub estimated_bytes: u64,
    /// Sum of the storage of every tensor the cache object holds (each storage counted once).
    pub observed_bytes: Option<u64>,
    /// observed − estimated.
    pub difference_bytes: Option<i64>,
    /// (observed − estimated) ÷ estimated × 100.
    pub difference_pct: Option<f64>,
    pub basis: String,
}

/// Matches predictions to observed phases in order (the n-th `warm_forward` predicted with the
/// n-th observed one). A phase without a prediction, or that failed, is left out.
pub fn predictions(result: &mut MeasureResult, predicted: &[PhasePrediction], device: usize) {
    let mut used = vec![false; predicted.len()];
    for phase in &result.phases {
        let Some(k) = (0..predicted.len()).find(|k| !used[*k] && predicted[*k].phase == phase.name)
        else {
            continue;
        };
        used[k] = true;
        if !phase.status.is_ok() {
            continue;
        }
        let p = &predicted[k];
        let observed = phase.devices.get(device);
        let alloc = observed.and_then(|d| d.peak_allocated_bytes);
        let resv = observed.and_then(|d| d.peak_reserved_bytes);
        result.predictions.push(PhaseCheck {
            phase: phase.name.clone(),
            index: phase.index,
            predicted_peak_allocated_bytes: p.peak_allocated_bytes,
            observed_peak_allocated_bytes: alloc,
            error_allocated_pct: error_pct(p.peak_allocated_bytes, alloc),
            predicted_peak_reserved_bytes: p.peak_reserved_bytes,
            observed_peak_reserved_bytes: resv,
            error_reserved_pct: error_pct(p.peak_reserved_bytes, resv),
            basis: p.basis.clone(),
        });
    }
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
