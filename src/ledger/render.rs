//! The terminal form of the gap ledger: one line per term with the estimate, the prediction and
//! the observation side by side (GiB), the checkpoint, the predicted parts, the capacities and the
//! allocator's diagnostics.

use std::fmt::Write as _;

use crate::explain::oom::PostMortem;
use crate::explain::snapshot::Allocation;
use crate::ledger::{BuiltOn, Explained, Figure, Ledger, LineId, LineKind, Provenance};
use crate::output::table::{Column, Table};
use crate::schema::history::OomSnapshot;
use crate::schema::measure::Timeline;
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
    } else if l.explained == Explained::Prediction {
        if l.built_on == BuiltOn::OutOfMemory {
            let _ = writeln!(
                o,
                "iteragpu explain: the prediction stopped at an out-of-memory in {} #{} — predicted, not measured: estimate vs what was alive at the allocation that did not fit, by storage category (built on the out-of-memory, not on a peak: it explains the failure; GiB; calc = calculated, assum = assumed, pred = predicted; bytes in --json)\n",
                l.phase, l.phase_index
            );
        } else {
            let _ = writeln!(
                o,
                "iteragpu explain: {} #{}, the highest predicted peak allocated — predicted, not measured: estimate vs prediction, by storage category at the peak (GiB; calc = calculated, assum = assumed, pred = predicted; bytes in --json)\n",
                l.phase, l.phase_index
            );
        }
    } else {
        let _ = writeln!(
            o,
            "iteragpu explain: {} #{} on {}{}, the highest peak — estimate vs prediction vs observation (GiB; calc = calculated, assum = assumed, pred = predicted, obs = observed; bytes in --json)\n",
            l.phase,
            l.phase_index,
            l.device,
            l.rank.map_or(String::new(), |k| format!(
                " (rank {k}, the highest of its job)"
            ))
        );
    }
    let predicted_only = l.explained == Explained::Prediction;
    let mut columns = vec![
        Column::left("term").min(60),
        Column::right("estimate").min(14),
        Column::right("predicted").min(14),
    ];
    if !predicted_only {
        columns.push(Column::right("observed").min(14));
    }
    columns.push(Column::left("checkpoint").gap(2));
    let mut table = Table::new(columns).indent(2);
    // The kind of the last signed line: a level right after a level adds nothing to it (the peak
    // reserved after the peak allocated) and is marked ≥, not =.
    let mut last_signed: Option<LineKind> = None;
    for line in &l.lines {
        let unsigned = line.kind == LineKind::Part
            || (line.kind == LineKind::Term && line.id == LineId::AllocatorSlack);
        let after_level = last_signed == Some(LineKind::Level);
        if !unsigned {
            last_signed = Some(line.kind);
        }
        let marker = match line.kind {
            LineKind::Level if after_level => "≥ ",
            // Reserved − allocated is inside the peak reserved (and read at the phase's end, not
            // at the peak): shown apart, never added to the level above it.
            LineKind::Term if line.id == LineId::AllocatorSlack => "  ",
            LineKind::Term => "+ ",
            LineKind::Part => "  ",
            LineKind::Level => "= ",
            LineKind::Unexplained => "? ",
        };
        let mut term = format!("{marker}{}", line.term);
        if term.chars().count() > 60 {
            term = term.chars().take(59).collect::<String>() + "…";
        }
        let mut cells = vec![term, cell(&line.estimate), cell(&line.predicted)];
        if !predicted_only {
            cells.push(cell(&line.observed));
        }
        cells.push(line.checkpoint.to_string());
        table.row(cells);
        for (what, bytes) in &line.breakdown {
            table.text(format!("      · {what}: {:.3}", Bytes(*bytes).gib()));
        }
    }
    if !l.lines.is_empty() {
        o.push_str(&table.terminal());
        let _ = writeln!(
            o,
            "  (+ lines add up to the next = level; ≥: at least the level above, nothing added; unsigned lines are inside a line above, shown apart, not added)"
        );
    }
    // The last level, the driver's view.
    let last_level = l.lines.iter().rev().find(|x| x.kind == LineKind::Level);
    if let Some((Some(est), Some(obs))) = last_level.map(|x| (&x.estimate, &x.observed)) {
        let gap = obs.bytes as i128 - est.bytes as i128;
        let _ = writeln!(
            o,
            "\n  the driver's view is {} {} the estimate ({} bytes): the lines above say where",
            Bytes(gap.unsigned_abs() as u64).both(),
            if gap >= 0 { "above" } else { "below" },
            crate::units::group_thousands(gap.unsigned_abs())
        );
    }
    if let Some((est, pred)) = l
        .lines
        .iter()
        .rev()
        .find(|x| x.kind == LineKind::Level)
        .filter(|_| l.explained == Explained::Prediction)
        .and_then(|x| x.estimate.as_ref().zip(x.predicted.as_ref()))
    {
        let gap = pred.bytes as i128 - est.bytes as i128;
        let _ = writeln!(
            o,
            "\n  the predicted driver's view is {} {} the estimate ({} bytes): the lines above say where",
            Bytes(gap.unsigned_abs() as u64).both(),
            if gap >= 0 { "above" } else { "below" },
            crate::units::group_thousands(gap.unsigned_abs())
        );
    }
    if !l.capacities.is_empty() {
        let _ = writeln!(o, "\n  capacities (not one number):");
        let mut capacities = Table::new(vec![Column::left("").min(34), Column::left("")]).indent(4);
        for c in &l.capacities {
            capacities.row([
                c.name.to_string(),
                format!("{} ({})", Bytes(c.bytes).both(), c.source),
            ]);
        }
        o.push_str(&capacities.terminal());
    }
    for d in &l.diagnostics {
        let _ = writeln!(o, "  allocator: {d}");
    }
    if !l.largest_at_peak.is_empty() {
        let _ = writeln!(
            o,
            "  the timeline at {}'s peak (allocated, from the allocator's trace):",
            l.phase
        );
        for line in largest_at_peak(&l.largest_at_peak) {
            let _ = writeln!(o, "  {line}");
        }
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
    // Names, notes and errors come from files and workloads: shown, never obeyed.
    crate::output::terminal_safe(&o).into_owned()
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
                                short_path(f.filename.as_deref().unwrap_or("?")),
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

/// `measure --timeline`: where the snapshot is and what it holds, in one or two lines.
pub fn timeline(t: &Timeline) -> Vec<String> {
    let Some(path) = &t.path else {
        return vec![format!(
            "timeline: none ({})",
            t.reason.as_deref().unwrap_or("not written")
        )];
    };
    let mut out = vec![format!(
        "timeline: {} ({}; open it in https://pytorch.org/memory_viz)",
        path.display(),
        t.bytes.map_or("size unknown".into(), |b| format!(
            "{:.1} MiB",
            b as f64 / f64::from(1u32 << 20)
        ))
    )];
    match (&t.summary, &t.summary_reason) {
        (Some(s), _) => {
            for d in &s.devices {
                let Some(trace) = &d.trace else { continue };
                out.push(format!(
                    "  cuda:{}: {} events, peak allocated {} and reserved {} in the trace{}",
                    d.device,
                    trace.entries,
                    Bytes(trace.peak_allocated_bytes).both(),
                    Bytes(trace.peak_reserved_bytes).both(),
                    if trace.history.truncated {
                        format!(
                            "; truncated: {}",
                            trace
                                .history
                                .reason
                                .as_deref()
                                .unwrap_or("its first events are missing")
                        )
                    } else {
                        String::new()
                    }
                ));
            }
        }
        (None, Some(why)) => out.push(format!("  not summarised: {why}")),
        (None, None) => {}
    }
    out
}

/// The largest allocations alive at a phase's peak, with the line of the workload that made them.
pub fn largest_at_peak(list: &[Allocation]) -> Vec<String> {
    list.iter()
        .take(5)
        .map(|a| {
            let at = a
                .user_frame
                .as_ref()
                .or(a.stack_top.first())
                .map_or("no frame recorded".to_string(), frame);
            format!("  alive at the peak: {} — {at}", Bytes(a.size_bytes).both())
        })
        .collect()
}

/// `file:line in function`, iteragpu's temporary package folder left out.
pub fn frame(f: &crate::explain::snapshot::Frame) -> String {
    format!("{}:{} in {}", short_path(&f.filename), f.line, f.name)
}

/// A file of iteragpu's embedded package without the temporary folder it was unpacked into
/// (`/tmp/iteragpu-python-XXXX/iteragpu/workloads/dense.py` → `iteragpu/workloads/dense.py`).
pub fn short_path(filename: &str) -> &str {
    match filename.find("/iteragpu-python-") {
        Some(i) => filename[i + 1..]
            .split_once('/')
            .map_or(filename, |(_, rest)| rest),
        None => filename,
    }
}
