//! Bounded phases: an op whose output size depends on data the prediction does not know
//! (`nonzero`, a boolean mask, `masked_select`, LLM.int8's outlier columns) is taken at the
//! largest size its inputs' shapes allow, and the phases holding its outputs are `bounded`, with
//! those figures (what a verdict, `cards`, `sweep` and `report` read). The same workload is then
//! predicted again with every such op at its smallest size; each bounded phase gets that run's
//! figures as `lower`. A phase the second run does not reach keeps its upper figures alone, said.

use crate::schema::prediction::{
    AssumedFigures, LowerFigures, PhaseStatus, PredictedPhase, PredictionDoc,
};

/// LLM.int8's typical share of outlier columns: "more than 99.9% of values are multiplied in
/// 8-bit" (Dettmers et al., LLM.int8(), arXiv:2208.07339, abstract), so at most 0.1% go through
/// the 16-bit matmul.
const INT8_OUTLIER_SHARE: f64 = 0.001;

/// bitsandbytes' ops whose outputs grow with LLM.int8's outlier columns (`quantized.py`'s
/// `LARGEST`/`SMALLEST`).
fn is_int8_outlier_op(op: &str) -> bool {
    op.starts_with("bitsandbytes.int8_")
}

/// Fills each bounded phase of `doc` (the run at the largest sizes) with its figures in `lower`
/// (the run at the smallest, or why it could not run), matched by index and name; says what was bounded, by which ops,
/// and what could not be matched.
pub fn merge_lower(doc: &mut PredictionDoc, lower: Result<Box<PredictionDoc>, String>) {
    let lower_doc = match lower {
        Ok(d) => Some(d),
        Err(why) => {
            doc.notes.push(format!(
                "the prediction at the lower bound could not run ({why}): the bounded phases have their upper figures only"
            ));
            None
        }
    };
    let mut unmatched = Vec::new();
    let bounded = doc
        .phases
        .iter()
        .filter(|p| p.status == PhaseStatus::Bounded)
        .count();
    for p in doc
        .phases
        .iter_mut()
        .filter(|p| p.status == PhaseStatus::Bounded)
    {
        let twin = lower_doc.as_ref().and_then(|d| {
            d.phases.iter().find(|q| {
                q.index == p.index && q.name == p.name && q.peak_allocated_bytes.is_some()
            })
        });
        // Each bounded op's shapes at the smallest, from the same op at the same place.
        if let Some(q) = lower_doc.as_ref().and_then(|d| {
            d.phases
                .iter()
                .find(|q| q.index == p.index && q.name == p.name)
        }) {
            for u in p.unpredictable.iter_mut().filter(|u| u.bound.is_some()) {
                if let Some(l) = q
                    .unpredictable
                    .iter()
                    .find(|l| l.op == u.op && l.file == u.file && l.line == u.line)
                {
                    u.lower_shapes = l.shapes.clone();
                }
            }
        }
        match twin {
            Some(q) => {
                p.lower = Some(LowerFigures {
                    peak_allocated_bytes: q.peak_allocated_bytes,
                    peak_reserved_bytes: q.peak_reserved_bytes,
                    end_allocated_bytes: q.end_allocated_bytes,
                    end_reserved_bytes: q.end_reserved_bytes,
                    driver_view_bytes: q.driver_view_bytes,
                })
            }
            None => unmatched.push(p.name.clone()),
        }
    }
    // Each op once, with its place and its outputs at both ends where known.
    let mut ops: Vec<String> = Vec::new();
    for p in doc
        .phases
        .iter()
        .filter(|p| p.status == PhaseStatus::Bounded)
    {
        for u in p.unpredictable.iter().filter(|u| u.bound.is_some()) {
            let mut at = match (&u.file, u.line) {
                (Some(f), Some(l)) => format!("{} at {f}:{l}", u.op),
                _ => u.op.clone(),
            };
            if !u.shapes.is_empty() && !u.lower_shapes.is_empty() {
                at.push_str(&format!(
                    ": {:?} at the largest, {:?} at the smallest",
                    u.shapes, u.lower_shapes
                ));
            }
            if !ops.contains(&at) {
                ops.push(at);
            }
        }
    }
    doc.notes.push(format!(
        "{bounded} phase(s) bounded: an op's output size depends on data the prediction does not know ({}); their figures are at the largest outputs the inputs' shapes allow (what the verdict reads: it holds whatever the data), `lower` at the smallest (the same workload predicted again)",
        ops.join(", ")
    ));
    // A phase may be bounded by what an earlier one made: its ops are then the document's.
    let only_int8 = doc
        .phases
        .iter()
        .flat_map(|p| &p.unpredictable)
        .filter(|u| u.bound.is_some())
        .all(|u| is_int8_outlier_op(&u.op));
    let mut assumed = 0;
    for p in doc.phases.iter_mut() {
        p.assumed = assumed_int8(p, only_int8);
        assumed += usize::from(p.assumed.is_some());
    }
    if assumed > 0 {
        doc.notes.push(format!(
            "{assumed} bounded phase(s) also have an assumed figure at LLM.int8's published share of outlier columns (0.1%: \"more than 99.9% of values are multiplied in 8-bit\", arXiv:2208.07339), interpolated between the two bounds; assumed, not predicted"
        ));
    }
    if let Some(d) = &lower_doc
        && let Some(failure) = &d.failure
    {
        doc.notes.push(format!(
            "the prediction at the lower bound stopped: {failure}"
        ));
    }
    if !unmatched.is_empty() && lower_doc.is_some() {
        doc.notes.push(format!(
            "the prediction at the lower bound did not reach {} with figures (its control flow followed the smaller sizes elsewhere, or it stopped): upper figures only there",
            unmatched.join(", ")
        ));
    }
}

/// Each phase's data-dependent ops once per op, place and bound: the same op at the same line
/// runs in every layer and at every generated token (19,200 times in one decode), and saying it
/// once is what tells the user where to look.
pub fn once_per_place(phases: &mut [PredictedPhase]) {
    for p in phases {
        let mut seen = std::collections::HashSet::new();
        p.unpredictable
            .retain(|u| seen.insert((u.op.clone(), u.file.clone(), u.line, u.bound.clone())));
    }
}

/// A bounded phase whose only data-dependent ops are LLM.int8's outlier columns: its peaks at
/// the published share, on the straight line from the lower to the upper figures. Every storage
/// the outliers make grows linearly with their count, so the peak allocated (the highest sum of
/// live storages) is a maximum of linear functions of it, convex: the line lies on or above it,
/// and the figure is not below a replay at that count (allocator rounding aside). Reserved is
/// taken the same way, rounded up to the allocator's 2 MiB segments.
/// `only_int8`: every bounded op of the document is one of LLM.int8's.
fn assumed_int8(p: &PredictedPhase, only_int8: bool) -> Option<AssumedFigures> {
    let lower = p.lower.as_ref()?;
    if p.status != PhaseStatus::Bounded || !only_int8 {
        return None;
    }
    let between = |lo: Option<u64>, hi: Option<u64>, grain: u64| -> Option<u64> {
        let (lo, hi) = (lo?, hi?);
        let hi = hi.max(lo);
        let at = lo as f64 + (hi - lo) as f64 * INT8_OUTLIER_SHARE;
        Some(((at.ceil() as u64).div_ceil(grain) * grain).clamp(lo, hi))
    };
    Some(AssumedFigures {
        peak_allocated_bytes: between(lower.peak_allocated_bytes, p.peak_allocated_bytes, 512)?,
        peak_reserved_bytes: between(
            lower.peak_reserved_bytes,
            p.peak_reserved_bytes,
            2 << 20,
        )?,
        fraction: INT8_OUTLIER_SHARE,
        basis: "LLM.int8's outlier columns at 0.1% of each layer's input columns (arXiv:2208.07339: \"more than 99.9% of values are multiplied in 8-bit\"), interpolated between the bounds (the peak is convex in the outlier count: not below a replay at that count)".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(phases: serde_json::Value) -> PredictionDoc {
        let target = crate::schema::target::Target::named(None, "native").unwrap();
        serde_json::from_value(serde_json::json!({
            "schema": "iteragpu.prediction/1", "tool_version": "t", "kind": "prediction", "status": "complete",
            "created_at": "", "identity": {"workload": "script", "code_hash": "x", "seed": 0, "declared": {}},
            "dimensions": {}, "target": target,
            "spec": {"workload": "script", "devices": ["cuda:0"], "seed": 0, "script": "x.py", "script_args": []},
            "assumptions": {"torch_version": null, "transformers_version": null, "allocator_model": "",
                "placeholder_reads": [], "not_modelled": []},
            "phases": phases, "failure": null, "notes": []
        }))
        .unwrap()
    }

    fn phase(name: &str, index: u64, status: &str, peak: Option<u64>) -> serde_json::Value {
        let bound = if status == "bounded" {
            serde_json::json!([{"op": "aten.nonzero.default", "file": "s.py", "line": 5,
                "reason": "its output size depends on the data", "bound": "upper"}])
        } else {
            serde_json::json!([])
        };
        serde_json::json!({"name": name, "index": index, "parent": null, "automatic": false,
            "status": status, "inputs": {}, "start_allocated_bytes": 0, "start_reserved_bytes": 0,
            "peak_allocated_bytes": peak, "peak_reserved_bytes": peak, "peak_tensor_bytes": 0,
            "end_allocated_bytes": peak, "end_reserved_bytes": peak, "driver_view_bytes": peak,
            "at_peak": null, "unpredictable": bound})
    }

    /// Each bounded phase gets the lower run's figures of the phase of the same index and name;
    /// one the lower run did not reach is said, and the ops are named once.
    #[test]
    fn bounded_phases_get_the_lower_runs_figures_matched_by_index_and_name() {
        let mut upper = doc(serde_json::json!([
            phase("load", 0, "predicted", Some(100)),
            phase("select", 1, "bounded", Some(900)),
            phase("after", 2, "bounded", Some(800)),
        ]));
        let lower = doc(serde_json::json!([
            phase("load", 0, "predicted", Some(100)),
            phase("select", 1, "bounded", Some(300)),
            phase("elsewhere", 2, "predicted", Some(200)),
        ]));
        merge_lower(&mut upper, Ok(Box::new(lower)));
        assert_eq!(upper.phases[0].lower, None);
        assert_eq!(
            upper.phases[1].lower.as_ref().unwrap().peak_allocated_bytes,
            Some(300)
        );
        assert_eq!(upper.phases[2].lower, None);
        let notes = upper.notes.join("\n");
        assert_eq!(
            notes.matches("aten.nonzero.default at s.py:5").count(),
            1,
            "{notes}"
        );
        assert!(notes.contains("2 phase(s) bounded"), "{notes}");
        assert!(notes.contains("did not reach after"), "{notes}");
        // A lower run that could not start: the upper figures alone, said.
        let mut alone = doc(serde_json::json!([phase("select", 0, "bounded", Some(9))]));
        merge_lower(&mut alone, Err("no torch".into()));
        assert!(
            alone
                .notes
                .iter()
                .any(|n| n.contains("could not run (no torch)"))
        );
    }

    /// Phases bounded by LLM.int8's outlier columns alone get the assumed figure at 0.1% of the
    /// way from the lower to the upper figures (a phase bounded by what an earlier one made
    /// too); where `nonzero` bounds a phase as well, none gets one.
    #[test]
    fn int8_outliers_get_an_assumed_figure_at_the_published_share() {
        let int8 = |name: &str, index: u64, peak: u64| {
            let mut p = phase(name, index, "bounded", Some(peak));
            p["unpredictable"][0]["op"] = "bitsandbytes.int8_vectorwise_quant.default".into();
            p
        };
        let mut carried = phase("after", 1, "bounded", Some(2_000_000_000));
        carried["unpredictable"] = serde_json::json!([]);
        let base = 1_000_000_000u64;
        let mut upper = doc(serde_json::json!([
            int8("decode", 0, base + (100 << 20)),
            carried
        ]));
        let lower = || {
            doc(serde_json::json!([
                phase("decode", 0, "bounded", Some(base)),
                phase("after", 1, "bounded", Some(2_000_000_000)),
                phase("select", 2, "bounded", Some(300)),
            ]))
        };
        merge_lower(&mut upper, Ok(Box::new(lower())));
        let a = upper.phases[0].assumed.as_ref().expect("an assumed figure");
        // 0.1% of 100 MiB above the lower peak, rounded up to 512 bytes.
        assert_eq!(a.peak_allocated_bytes, base + 104_960);
        // Reserved: the same share, rounded up to a 2 MiB segment.
        assert_eq!(
            a.peak_reserved_bytes,
            (base + 104_858).div_ceil(2 << 20) * (2 << 20)
        );
        assert!(a.basis.contains("arXiv:2208.07339"));
        assert!(upper.phases[1].assumed.is_some());
        assert!(upper.notes.iter().any(|n| n.contains("assumed figure")));
        let mut mixed = doc(serde_json::json!([
            int8("decode", 0, base + (100 << 20)),
            phase("select", 2, "bounded", Some(900))
        ]));
        merge_lower(&mut mixed, Ok(Box::new(lower())));
        assert!(mixed.phases.iter().all(|p| p.assumed.is_none()));
    }

    /// The same op at the same place is said once per phase; another place or bound stays.
    #[test]
    fn an_op_is_said_once_per_place_and_bound() {
        let mut d = doc(serde_json::json!([phase("decode", 0, "bounded", Some(9))]));
        let u = d.phases[0].unpredictable[0].clone();
        let mut elsewhere = u.clone();
        elsewhere.line = Some(6);
        let mut lower = u.clone();
        lower.bound = Some("lower".into());
        d.phases[0].unpredictable = vec![u.clone(), elsewhere, u.clone(), lower, u];
        once_per_place(&mut d.phases);
        assert_eq!(d.phases[0].unpredictable.len(), 3);
    }
}
