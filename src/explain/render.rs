//! The terminal form of the gap ledger: one line per term with the estimate, the prediction and
//! the observation side by side (GiB), the checkpoint, the predicted parts, the capacities and the
//! allocator's diagnostics.

use std::fmt::Write as _;

use super::ledger::{Figure, Ledger, LineKind, Provenance};
use super::oom::PostMortem;
use crate::measure::history::OomSnapshot;
use crate::units::Bytes;

fn cell(f: &Option<Figure>) -> String {
    match f {
        None => "—".into(),
        Some(f) => format!(
            "{:.3} {}",
            Bytes(f.bytes).gib(),
            match f.provenance {
                Provenance::Calculated => "calc",
                Provenance::Assumed => "assum",
                Provenance::Predicted => "pred",
                Provenance::Observed => "obs",
            }
        ),
    }
}

pub fn table(l: &Ledger) -> String {
    let mut o = String::new();
    if l.lines.is_empty() {
        let _ = writeln!(
            o,
            "iteragpu explain: the run failed in {} #{} on {} before any phase completed — no peak to reconcile\n",
            l.phase, l.phase_index, l.device
        );
    } else {
        let _ = writeln!(
            o,
            "iteragpu explain: {} #{} on {}, the highest peak — estimate vs prediction vs observation (GiB; calc = calculated, assum = assumed, pred = predicted, obs = observed; bytes in --json)\n",
            l.phase, l.phase_index, l.device
        );
        let _ = writeln!(
            o,
            "  {:<60} {:>14} {:>14} {:>14}  checkpoint",
            "term", "estimate", "predicted", "observed"
        );
    }
    for line in &l.lines {
        let marker = match line.kind {
            LineKind::Term => "+ ",
            LineKind::Part => "  ",
            LineKind::Level => "= ",
            LineKind::Unexplained => "? ",
        };
        let mut term = format!("{marker}{}", line.term);
        if term.chars().count() > 60 {
            term = term.chars().take(59).collect::<String>() + "…";
        }
        let _ = writeln!(
            o,
            "  {term:<60} {:>14} {:>14} {:>14}  {}",
            cell(&line.estimate),
            cell(&line.predicted),
            cell(&line.observed),
            line.checkpoint
        );
        for (what, bytes) in &line.breakdown {
            let _ = writeln!(o, "      · {what}: {:.3}", Bytes(*bytes).gib());
        }
    }
    if let (Some(est), Some(obs)) = (
        l.lines
            .iter()
            .rev()
            .find(|x| x.kind == LineKind::Level)
            .and_then(|x| x.estimate.as_ref()),
        l.lines
            .iter()
            .rev()
            .find(|x| x.kind == LineKind::Level)
            .and_then(|x| x.observed.as_ref()),
    ) {
        let gap = obs.bytes as i128 - est.bytes as i128;
        let _ = writeln!(
            o,
            "\n  the driver's view is {} {} the estimate ({} bytes): the lines above say where",
            Bytes(gap.unsigned_abs() as u64).both(),
            if gap >= 0 { "above" } else { "below" },
            crate::units::group_thousands(gap.unsigned_abs())
        );
    }
    if !l.capacities.is_empty() {
        let _ = writeln!(o, "\n  capacities (not one number):");
        for c in &l.capacities {
            let _ = writeln!(
                o,
                "    {:<34} {} ({})",
                c.name,
                Bytes(c.bytes).both(),
                c.source
            );
        }
    }
    for d in &l.diagnostics {
        let _ = writeln!(o, "  allocator: {d}");
    }
    for line in post_mortem(l.post_mortem.as_ref(), l.live_at_oom.as_ref()) {
        let _ = writeln!(o, "  {line}");
    }
    for n in &l.notes {
        let _ = writeln!(o, "  note: {n}");
    }
    let _ = writeln!(
        o,
        "  reading rules: reserved − allocated only from one checkpoint; the growth inside a phase is what was alive at its peak beyond its start, not the volume of its temporaries."
    );
    o
}

/// The out-of-memory post-mortem as lines of text: the class and its reason, what to try, and
/// the largest allocations alive when PyTorch's observer saw the failure.
pub fn post_mortem(pm: Option<&PostMortem>, live: Option<&OomSnapshot>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(pm) = pm {
        let d = &pm.diagnosis;
        out.push(format!(
            "out-of-memory post-mortem: {} — {}",
            d.class.label(),
            d.reason
        ));
        out.extend(d.advice.iter().map(|a| format!("try: {a}")));
    }
    if let Some(s) = live {
        match &s.live {
            Some(l) => {
                out.push(format!(
                    "at the out-of-memory on {} (PyTorch's observer, before it raised): {} requested; {} live in {} segment(s) of {} reserved; largest free block {}",
                    s.device,
                    Bytes(s.requested_bytes).both(),
                    Bytes(l.live_bytes).both(),
                    l.segments,
                    Bytes(l.reserved_bytes).both(),
                    Bytes(l.largest_free_block).both()
                ));
                for b in l.largest_live.iter().take(5) {
                    let at = b
                        .frames
                        .first()
                        .map_or("no frame recorded".to_string(), |f| {
                            format!(
                                "{}:{} in {}",
                                f.filename.as_deref().unwrap_or("?"),
                                f.line.map_or("?".into(), |l| l.to_string()),
                                f.name.as_deref().unwrap_or("?")
                            )
                        });
                    out.push(format!("  live {} — {at}", Bytes(b.bytes).both()));
                }
            }
            None => out.push(format!(
                "at the out-of-memory on {}: no snapshot ({})",
                s.device,
                s.reason.as_deref().unwrap_or("not taken")
            )),
        }
    }
    out
}
