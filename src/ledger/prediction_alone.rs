//! The ledger of a prediction alone (no GPU run): what was alive at the predicted peak, by
//! storage category, beside the estimate's terms placed on the same lines by their `TermId`
//! ([`LineId::of_term_by_category`]). Every figure is predicted; nothing is called observed.

use super::{
    BuiltOn, Capacity, CapacityName, Checkpoint, Explained, Figure, Ledger, LedgerError, Line,
    LineId, LineKind, Provenance, SCHEMA, estimate_sum, estimate_sum_on, figure,
};
use crate::estimate::Kind;
use crate::schema::load::EstimateDoc;
use crate::schema::prediction::{AtPeak, PredictedOom, PredictionDoc};
use crate::units::Bytes;

/// The storage categories (`schema::trace::Category`'s words) summed on each line; what no line
/// names (inputs, collectives' buffers, the allocator's rounding) is on `OtherTensors`, so the
/// lines add up to the predicted peak allocated.
const CATEGORY_LINES: [(LineId, &[&str]); 6] = [
    (LineId::Weights, &["parameter", "buffer"]),
    (LineId::Gradients, &["gradient"]),
    (LineId::OptimizerStates, &["optimizer state"]),
    (
        LineId::Activations,
        &["activation", "temporary", "dequantized weight"],
    ),
    (LineId::KvCache, &["kv cache"]),
    (LineId::Workspaces, &["workspace"]),
];

/// Builds the ledger of a prediction, with the estimate's terms beside it when given: at its
/// deciding phase (the highest predicted peak allocated), or, when the simulated card ran out of
/// memory, at the allocation that did not fit: what was alive then explains the failure, where
/// the peaks of the phases that ran before it do not.
pub fn of_prediction(
    p: &PredictionDoc,
    estimate: Option<&EstimateDoc>,
) -> Result<Ledger, LedgerError> {
    if let Some(oom) = &p.out_of_memory {
        return Ok(at_out_of_memory(p, oom, estimate));
    }
    let Some((_, phase)) = p.peak_phase() else {
        return Err(LedgerError::NothingPredicted);
    };
    let name = &phase.name;
    let at = phase.at_peak.clone().unwrap_or_default();
    let at_peak = || Checkpoint::PredictedPeak(name.clone());
    let mut lines = category_lines(p, &at, estimate, at_peak, "the predicted peak");
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
    lines.push(outside(p, Checkpoint::End(name.clone())));
    reserve(&mut lines, estimate);
    lines.push(Line {
        estimate: estimate.map(estimate_total),
        predicted: predicted(
            phase.driver_view_bytes,
            "peak reserved + outside the allocator",
        ),
        ..Line::new(LineId::DriverView, Checkpoint::PredictedPeak(name.clone()))
    });
    let mut notes = vec![not_measured(p)];
    notes.extend(bounded_note(phase));
    if phase.at_peak.is_none() {
        notes.push(format!(
            "the prediction holds no storages at {name}'s peak: no category to place"
        ));
    }
    let unpredictable = p
        .phases
        .iter()
        .filter(|ph| !ph.status.has_figures())
        .count();
    if unpredictable > 0 {
        notes.push(format!(
            "{unpredictable} phase(s) could not be predicted and are not in it"
        ));
    }
    Ok(Ledger {
        built_on: BuiltOn::Peak,
        out_of_memory: None,
        phase: name.clone(),
        phase_index: phase.index,
        lines,
        post_mortem: None,
        notes,
        ..frame(p)
    })
}

/// A bounded deciding phase: its lines are at the upper bound (the largest data-dependent
/// sizes); its figures at the lower bound, and at an assumed typical size where one is
/// published, said beside them.
fn bounded_note(phase: &crate::schema::prediction::PredictedPhase) -> Option<String> {
    if phase.status != crate::schema::prediction::PhaseStatus::Bounded {
        return None;
    }
    let ops: Vec<&str> = phase
        .unpredictable
        .iter()
        .filter(|u| u.bound.is_some())
        .map(|u| u.op.as_str())
        .collect();
    let both = |a: Option<u64>| {
        a.map_or("not reached".into(), |b| {
            format!("{b} bytes ({})", Bytes(b).both())
        })
    };
    let mut note = format!(
        "{} is bounded{}: the lines above are at the largest data-dependent sizes (what holds whatever the data); at the smallest, peak allocated {} and peak reserved {}",
        phase.name,
        if ops.is_empty() {
            String::new()
        } else {
            format!(" by {}", ops.join(", "))
        },
        both(phase.lower.as_ref().and_then(|l| l.peak_allocated_bytes)),
        both(phase.lower.as_ref().and_then(|l| l.peak_reserved_bytes)),
    );
    if let Some(a) = &phase.assumed {
        note.push_str(&format!(
            "; assumed at {}% ({}): peak allocated {}, peak reserved {}",
            a.fraction * 100.0,
            a.basis,
            both(Some(a.peak_allocated_bytes)),
            both(Some(a.peak_reserved_bytes))
        ));
    }
    Some(note)
}

/// The ledger at a predicted out-of-memory: the categories alive when the allocation failed,
/// PyTorch's allocated and reserved then (after it released its cache), the post-mortem, and
/// what the whole workload needs with unlimited memory.
fn at_out_of_memory(
    p: &PredictionDoc,
    oom: &PredictedOom,
    estimate: Option<&EstimateDoc>,
) -> Ledger {
    let name = oom
        .phase
        .clone()
        .unwrap_or_else(|| "(outside any phase)".into());
    let at_oom = || Checkpoint::PredictedOom(name.clone());
    let mut lines = category_lines(
        p,
        &oom.alive,
        estimate,
        at_oom,
        "the allocation that did not fit",
    );
    let replay = |b: u64| {
        Some(figure(
            b,
            Provenance::Predicted,
            "allocator replay, after it released its cached segments",
        ))
    };
    lines.push(Line {
        predicted: replay(oom.allocated_bytes),
        ..Line::new(LineId::PeakAllocated, at_oom())
    });
    lines.push(Line {
        predicted: replay(oom.reserved_bytes),
        ..Line::new(LineId::PeakReserved, at_oom())
    });
    lines.push(Line {
        predicted: replay(oom.reserved_unallocated_bytes),
        ..Line::new(LineId::AllocatorSlack, at_oom())
    });
    lines.push(outside(p, at_oom()));
    reserve(&mut lines, estimate);
    lines.push(Line {
        estimate: estimate.map(estimate_total),
        predicted: Some(figure(
            oom.reserved_bytes.saturating_add(p.target.context_bytes),
            Provenance::Predicted,
            "reserved + outside the allocator",
        )),
        ..Line::new(LineId::DriverView, at_oom())
    });
    for line in &mut lines {
        line.term = line.id.english_at_oom().into();
    }
    let (device, source) = p.capacity.as_ref().map_or(
        (p.target.total_memory, p.target.total_memory_source.clone()),
        |c| (c.device_bytes, c.source.clone()),
    );
    let mut notes = vec![
        format!(
            "the prediction stopped at an out-of-memory in {name}: the lines are what was alive when a {} allocation ({} bytes; module {}, category {}{}) did not fit {} ({source}); the phases after it were not reached",
            Bytes(oom.requested_bytes).both(),
            Bytes(oom.requested_bytes).grouped(),
            oom.module.as_deref().unwrap_or("(outside any module)"),
            oom.category,
            match (&oom.file, oom.line) {
                (Some(f), Some(l)) => format!(", at {f}:{l}"),
                (Some(f), None) => format!(", at {f}"),
                _ => String::new(),
            },
            Bytes(device).both(),
        ),
        format!(
            "the allocation itself is in no line (it was never made): it needed a {} segment with {} free",
            Bytes(oom.segment_bytes).both(),
            Bytes(oom.free_bytes).both()
        ),
    ];
    if let (Some(reserved), Some(driver)) = (
        oom.unlimited_peak_reserved_bytes,
        oom.unlimited_driver_view_bytes,
    ) {
        notes.push(format!(
            "with unlimited memory the workload would peak at {} reserved, a driver's view of {}: what a card that holds it needs",
            Bytes(reserved).both(),
            Bytes(driver).both()
        ));
    }
    notes.push(not_measured(p));
    Ledger {
        built_on: BuiltOn::OutOfMemory,
        out_of_memory: Some(oom.clone()),
        phase: name,
        phase_index: oom.phase_index.unwrap_or(0),
        lines,
        post_mortem: Some(oom.post_mortem.clone()),
        notes,
        ..frame(p)
    }
}

/// One line per category alive at `at` (read at `checkpoint`), the estimate's terms on the same
/// lines; what no line names on `OtherTensors`, so the lines add up to the allocated bytes.
fn category_lines(
    p: &PredictionDoc,
    at: &AtPeak,
    estimate: Option<&EstimateDoc>,
    checkpoint: impl Fn() -> Checkpoint,
    moment: &str,
) -> Vec<Line> {
    let mut lines = Vec::new();
    let mut named = 0u64;
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
            format!("storages alive at {moment}: {}", categories.join(", "))
        };
        lines.push(Line {
            // Here every category is its own part of the allocated bytes, added once.
            kind: LineKind::Term,
            estimate: estimate_figure,
            predicted: present.then(|| figure(bytes, Provenance::Predicted, basis)),
            breakdown: modules(at, categories),
            ..Line::new(id, checkpoint())
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
                format!("storages alive at {moment}: {}", others.join(", ")),
            )),
            ..Line::new(LineId::OtherTensors, checkpoint())
        });
    }
    lines
}

/// The memory outside PyTorch's allocator, as the target states it.
fn outside(p: &PredictionDoc, checkpoint: Checkpoint) -> Line {
    Line {
        predicted: Some(figure(
            p.target.context_bytes,
            Provenance::Predicted,
            p.target.context_source.clone(),
        )),
        ..Line::new(LineId::OutsideAllocator, checkpoint)
    }
}

/// The estimate's stated reserve, when it has one.
fn reserve(lines: &mut Vec<Line>, estimate: Option<&EstimateDoc>) {
    if let Some(reserve) = estimate.and_then(|e| estimate_sum(e, LineId::Reserve)) {
        lines.push(Line {
            estimate: Some(reserve),
            ..Line::new(LineId::Reserve, Checkpoint::Stated)
        });
    }
}

/// The estimate's total, assumed when one of its counted terms is.
fn estimate_total(e: &EstimateDoc) -> Figure {
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
}

fn not_measured(p: &PredictionDoc) -> String {
    format!(
        "a prediction, not a measurement: predicted for {} with torch {} on data-less (fake) tensors; measure on the card to confirm",
        p.target.name,
        p.assumptions.torch_version.as_deref().unwrap_or("unknown")
    )
}

/// What every ledger of a prediction holds whatever it is built on: the device and the target's
/// capacity; no diagnostic, nothing observed.
fn frame(p: &PredictionDoc) -> Ledger {
    Ledger {
        schema: SCHEMA.into(),
        explained: Explained::Prediction,
        built_on: BuiltOn::Peak,
        out_of_memory: None,
        phase: String::new(),
        phase_index: 0,
        device: p
            .spec
            .devices
            .first()
            .cloned()
            .unwrap_or_else(|| "cuda:0".into()),
        rank: None,
        lines: Vec::new(),
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
        notes: Vec::new(),
    }
}

/// The largest tensors alive at the peak in these categories, by module (the predicted parts).
fn modules(at: &AtPeak, categories: &[&str]) -> Vec<(String, u64)> {
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
