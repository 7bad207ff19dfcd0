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
