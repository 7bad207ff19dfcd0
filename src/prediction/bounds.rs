//! Bounded phases: an op whose output size depends on data the prediction does not know
//! (`nonzero`, a boolean mask, `masked_select`, LLM.int8's outlier columns) is taken at the
//! largest size its inputs' shapes allow, and the phases holding its outputs are `bounded`, with
//! those figures (what a verdict, `cards`, `sweep` and `report` read). The same workload is then
//! predicted again with every such op at its smallest size; each bounded phase gets that run's
//! figures as `lower`. A phase the second run does not reach keeps its upper figures alone, said.

use crate::schema::prediction::{LowerFigures, PhaseStatus, PredictionDoc};

/// Fills each bounded phase of `doc` (the run at the largest sizes) with its figures in `lower`
/// (the run at the smallest, or why it could not run), matched by index and name; says what was bounded, by which ops,
/// and what could not be matched.
pub fn merge_lower(doc: &mut PredictionDoc, lower: Result<Box<PredictionDoc>, String>) {
    let mut ops: Vec<String> = Vec::new();
    for p in doc
        .phases
        .iter()
        .filter(|p| p.status == PhaseStatus::Bounded)
    {
        for u in &p.unpredictable {
            let at = match (&u.file, u.line) {
                (Some(f), Some(l)) => format!("{} at {f}:{l}", u.op),
                _ => u.op.clone(),
            };
            if !ops.contains(&at) {
                ops.push(at);
            }
        }
    }
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
    doc.notes.push(format!(
        "{bounded} phase(s) bounded: an op's output size depends on data the prediction does not know ({}); their figures are at the largest outputs the inputs' shapes allow (what the verdict reads: it holds whatever the data), `lower` at the smallest (the same workload predicted again)",
        ops.join(", ")
    ));
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
}
