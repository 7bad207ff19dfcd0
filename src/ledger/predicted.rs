//! The ledger of a prediction alone (no GPU run): what was alive at the predicted peak, by
//! storage category, beside the estimate's terms placed on the same lines by their `TermId`
//! ([`LineId::of_term_by_category`]). Every figure is predicted; nothing is called observed.

use super::{
    Capacity, CapacityName, Checkpoint, Explained, Ledger, LedgerError, Line, LineId, LineKind,
    Provenance, SCHEMA, estimate_sum, estimate_sum_on, figure,
};
use crate::estimate::Kind;
use crate::schema::load::EstimateDoc;
use crate::schema::prediction::PredictionDoc;

/// The storage categories (`schema::trace::Category`'s words) summed on each line; what no line
/// names (inputs, collectives' buffers, the allocator's rounding) is on `OtherTensors`, so the
/// lines add up to the predicted peak allocated.
const CATEGORY_LINES: [(LineId, &[&str]); 6] = [
    (LineId::Weights, &["parameter", "buffer"]),
    (LineId::Gradients, &["gradient"]),
    (LineId::OptimizerStates, &["optimizer state"]),
    (LineId::Activations, &["activation", "temporary"]),
    (LineId::KvCache, &["kv cache"]),
    (LineId::Workspaces, &["workspace"]),
];

/// Builds the ledger of a prediction at its deciding phase (the highest predicted peak
/// reserved), with the estimate's terms beside it when given.
pub fn of_prediction(
    p: &PredictionDoc,
    estimate: Option<&EstimateDoc>,
) -> Result<Ledger, LedgerError> {
    let Some((_, phase)) = p.peak_phase() else {
        return Err(LedgerError::NothingPredicted);
    };
    let name = &phase.name;
    let at = phase.at_peak.clone().unwrap_or_default();
    let mut lines = Vec::new();
    let mut named = 0u64;
    let at_peak = || Checkpoint::PredictedPeak(name.clone());
    for (id, categories) in CATEGORY_LINES {
        let bytes: u64 = categories
            .iter()
            .filter_map(|c| at.by_category.get(*c))
            .sum();
        let estimate_figure =
            estimate.and_then(|e| estimate_sum_on(e, id, LineId::of_term_by_category));
        let present = categories.iter().any(|c| at.by_category.contains_key(*c));
        if !present && estimate_figure.is_none() {
            continue;
        }
        named += bytes;
        let basis = if id == LineId::Workspaces {
            p.target.workspaces_source.clone()
        } else {
            format!(
                "storages alive at the predicted peak: {}",
                categories.join(", ")
            )
        };
        lines.push(Line {
            // Here every category is its own part of the peak allocated, added once.
            kind: LineKind::Term,
            estimate: estimate_figure,
            predicted: present.then(|| figure(bytes, Provenance::Predicted, basis)),
            breakdown: modules(&at, categories),
            ..Line::new(id, at_peak())
        });
    }
    let total: u64 = at.by_category.values().sum();
    if total > named {
        let others: Vec<&str> = at
            .by_category
            .keys()
            .map(String::as_str)
            .filter(|c| !CATEGORY_LINES.iter().any(|(_, cs)| cs.contains(c)))
            .collect();
        lines.push(Line {
            predicted: Some(figure(
                total - named,
                Provenance::Predicted,
                format!(
                    "storages alive at the predicted peak: {}",
                    others.join(", ")
                ),
            )),
            ..Line::new(LineId::OtherTensors, at_peak())
        });
    }
    let predicted =
        |b: Option<u64>, basis: &str| b.map(|b| figure(b, Provenance::Predicted, basis));
    lines.push(Line {
        predicted: predicted(phase.peak_allocated_bytes, "allocator replay"),
        ..Line::new(LineId::PeakAllocated, Checkpoint::Peak(name.clone()))
    });
    lines.push(Line {
        predicted: predicted(phase.peak_reserved_bytes, "allocator replay"),
        ..Line::new(LineId::PeakReserved, Checkpoint::Peak(name.clone()))
    });
    lines.push(Line {
        predicted: phase
            .end_reserved_bytes
            .zip(phase.end_allocated_bytes)
            .map(|(r, a)| {
                figure(
                    r.saturating_sub(a),
                    Provenance::Predicted,
                    "at the phase's end",
                )
            }),
        ..Line::new(
            LineId::AllocatorSlack,
            Checkpoint::EndOneCheckpoint(name.clone()),
        )
    });
    lines.push(Line {
        predicted: Some(figure(
            p.target.context_bytes,
            Provenance::Predicted,
            p.target.context_source.clone(),
        )),
        ..Line::new(LineId::OutsideAllocator, Checkpoint::End(name.clone()))
    });
    if let Some(reserve) = estimate.and_then(|e| estimate_sum(e, LineId::Reserve)) {
        lines.push(Line {
            estimate: Some(reserve),
            ..Line::new(LineId::Reserve, Checkpoint::Stated)
        });
    }
    lines.push(Line {
        estimate: estimate.map(|e| {
            let assumed = e
                .terms
                .iter()
                .any(|t| t.in_total && t.kind == Kind::Assumed);
            figure(
                e.total_bytes,
                if assumed {
                    Provenance::Assumed
                } else {
                    Provenance::Calculated
                },
                "the estimate's preparation hypothesis",
            )
        }),
        predicted: predicted(
            phase.driver_view_bytes,
            "peak reserved + outside the allocator",
        ),
        ..Line::new(LineId::DriverView, Checkpoint::PredictedPeak(name.clone()))
    });
    let mut notes = vec![format!(
        "a prediction, not a measurement: predicted for {} with torch {} on data-less (fake) tensors; measure on the card to confirm",
        p.target.name,
        p.assumptions.torch_version.as_deref().unwrap_or("unknown")
    )];
    if phase.at_peak.is_none() {
        notes.push(format!(
            "the prediction holds no storages at {name}'s peak: no category to place"
        ));
    }
    let unpredictable = p
        .phases
        .iter()
        .filter(|ph| ph.status != crate::schema::prediction::PhaseStatus::Predicted)
        .count();
    if unpredictable > 0 {
        notes.push(format!(
            "{unpredictable} phase(s) could not be predicted and are not in it"
        ));
    }
    Ok(Ledger {
        schema: SCHEMA.into(),
        explained: Explained::Prediction,
        phase: name.clone(),
        phase_index: phase.index,
        device: p
            .spec
            .devices
            .first()
            .cloned()
            .unwrap_or_else(|| "cuda:0".into()),
        rank: None,
        lines,
        capacities: vec![Capacity {
            name: CapacityName::TorchTotalMemory,
            bytes: p.target.total_memory,
            source: format!(
                "the target {}: {}",
                p.target.name, p.target.total_memory_source
            ),
        }],
        diagnostics: Vec::new(),
        post_mortem: None,
        live_at_oom: None,
        largest_at_peak: Vec::new(),
        notes,
    })
}

/// The largest tensors alive at the peak in these categories, by module (the predicted parts).
fn modules(at: &crate::schema::prediction::AtPeak, categories: &[&str]) -> Vec<(String, u64)> {
    let mut by_module: std::collections::BTreeMap<String, u64> = Default::default();
    for t in at
        .top_tensors
        .iter()
        .filter(|t| categories.contains(&t.category.as_str()))
    {
        *by_module
            .entry(
                t.module
                    .clone()
                    .unwrap_or_else(|| "(outside any module)".into()),
            )
            .or_default() += t.bytes;
    }
    let mut parts: Vec<(String, u64)> = by_module
        .into_iter()
        .map(|(m, b)| (format!("module {m} (of the 10 largest tensors)"), b))
        .collect();
    parts.sort_by_key(|p| std::cmp::Reverse(p.1));
    parts.truncate(3);
    parts
}
