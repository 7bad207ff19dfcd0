//! The terminal table of `iteragpu sweep`.

use std::fmt::Write as _;

use crate::output::table::{Column, Table};
use crate::schema::series::{PointKind, Series, TrialRecord, TrialStatus};
use crate::units::Bytes;

/// `out-of-memory` for a trial that ran out of memory, else its status.
pub fn status_label(t: &TrialRecord) -> &'static str {
    match (t.kind, t.out_of_memory, t.status) {
        (PointKind::Predicted, true, _) => "predicted not to fit",
        (PointKind::Predicted, false, TrialStatus::Ok) => "predicted to fit",
        (PointKind::Measured, true, _) => "out-of-memory",
        (_, false, status) => status.into(),
    }
}

/// The terminal summary: one line per trial, the frontier, the fit and the notes.
pub fn table(s: &Series, path: &std::path::Path) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "iteragpu sweep ({}): {} trial(s), status {}",
        s.mode,
        s.trials.len(),
        s.status
    );
    if let Some(t) = &s.target {
        let _ = writeln!(
            o,
            "PREDICTED for {} (compute capability {}.{}), not measured: each trial ran on data-less tensors on the CPU; outside PyTorch's allocator {} ({})",
            t.name,
            t.capability.0,
            t.capability.1,
            Bytes(t.context_bytes).both(),
            t.context_source
        );
    }
    if let Some(l) = s.limit.as_ref().filter(|l| !l.emulated) {
        let _ = writeln!(
            o,
            "capacity: {} ({}); {}",
            Bytes(l.bytes).both(),
            l.source,
            l.method
        );
    }
    if let Some(l) = s.limit.as_ref().filter(|l| l.emulated) {
        let _ = writeln!(
            o,
            "emulated limit: {} ({}), {} — not a real card",
            Bytes(l.bytes).both(),
            l.source,
            l.method
        );
    }
    if let Some(d) = &s.devices {
        let _ = writeln!(
            o,
            "GPUs: trials ran on {} ({}), one trial per GPU at a time{}",
            d.models,
            d.gpus
                .iter()
                .map(|g| g.visible.as_str())
                .collect::<Vec<_>>()
                .join(","),
            if d.mixed {
                " — DIFFERENT MODELS (--allow-mixed): each peak is its own GPU's"
            } else {
                ""
            }
        );
    }
    let gib = |v: Option<u64>| v.map_or("null".into(), |b| format!("{:.3} GiB", Bytes(b).gib()));
    let mut trials = Table::new(vec![
        Column::right("").min(3),
        Column::left("").min(28).gap(2),
        Column::left("").min(14),
        Column::left(""),
        Column::right("").min(10),
        Column::left("").gap(2),
        Column::right("").min(10),
        Column::right("").min(8).gap(2),
        Column::left("").gap(0),
    ])
    .indent(2);
    for t in &s.trials {
        let values = t
            .values
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .chain(t.load.clone())
            .collect::<Vec<_>>()
            .join(" ");
        trials.row([
            (t.index + 1).to_string(),
            values,
            status_label(t).to_string(),
            "peak alloc".into(),
            gib(t.peak_allocated_bytes),
            "peak resv".into(),
            gib(t.peak_reserved_bytes),
            format!("{:.2}s", t.duration_s),
            match (&t.failed_phase, t.kind) {
                (None, _) => String::new(),
                (Some(p), PointKind::Predicted) if t.out_of_memory => {
                    format!("  (decided in {p}; the whole run's predicted peak)")
                }
                (Some(p), _) => {
                    format!("  (in {p}; a partial peak is not the need of a complete run)")
                }
            },
        ]);
        if (t.is_broken() || t.status == TrialStatus::Unpredictable)
            && let Some(e) = &t.error
        {
            trials.text(format!("       {e}"));
        }
        if let Some(pm) = t
            .result
            .as_ref()
            .and_then(|r| r.failure.as_ref())
            .and_then(|f| f.post_mortem.as_ref())
        {
            trials.text(format!(
                "       out-of-memory: {} — {}",
                pm.diagnosis.class.label(),
                pm.diagnosis.reason
            ));
        }
    }
    o.push_str(&trials.terminal());
    let broken = s.trials.iter().filter(|t| t.is_broken()).count();
    if broken > 0 {
        let _ = writeln!(
            o,
            "\nthe sweep failed: {broken} trial(s) ended for a reason other than out-of-memory (an out-of-memory at a known load is a finding; this is not)"
        );
    }
    if !s.alloc_confs.is_empty() {
        alloc_conf_table(&mut o, s);
    }
    if let Some(f) = s.frontier.as_ref().filter(|_| s.predicted()) {
        let _ = writeln!(
            o,
            "\npredicted frontier of {}: largest predicted to fit {}, first predicted not to fit {} (resolution {}, {} predictions, {}{})",
            f.variable,
            f.last_success.map_or("none".into(), |v| v.to_string()),
            f.first_failure.map_or("none".into(), |v| v.to_string()),
            f.resolution,
            f.trials,
            f.strategy,
            if f.budget_exhausted {
                ", trial budget exhausted"
            } else {
                ""
            }
        );
        if let Some(d) = &f.deciding {
            let need = d
                .driver_view_bytes
                .map_or("null".into(), |b| Bytes(b).both());
            let what = match &d.allocation {
                Some(a) => format!(
                    "out of memory at an allocation of {} {} {:?} {} ({}{}); the whole run needs {need} (driver's view) against {}",
                    Bytes(a.bytes).both(),
                    a.dtype,
                    a.shape,
                    a.category,
                    a.module.as_deref().unwrap_or("no module"),
                    match (&a.file, a.line) {
                        (Some(f), Some(l)) => format!(", {f}:{l}"),
                        _ => String::new(),
                    },
                    Bytes(d.capacity_bytes).both()
                ),
                None => format!(
                    "driver's view {need} > capacity {}{}",
                    Bytes(d.capacity_bytes).both(),
                    d.largest_at_peak
                        .as_ref()
                        .map_or(String::new(), |a| format!(
                            "; largest allocation alive at its peak: {} {} {:?} {} ({})",
                            Bytes(a.bytes).both(),
                            a.dtype,
                            a.shape,
                            a.category,
                            a.module.as_deref().unwrap_or("no module")
                        ))
                ),
            };
            let _ = writeln!(
                o,
                "  decided at {}={} in {}: {what}",
                f.variable, d.value, d.phase
            );
        }
    }
    if let Some(f) = s.frontier.as_ref().filter(|_| !s.predicted()) {
        let _ = writeln!(
            o,
            "\nfrontier of {}: last success {}, first failure {} (resolution {}, {} trials, {}{})",
            f.variable,
            f.last_success.map_or("none".into(), |v| v.to_string()),
            f.first_failure.map_or("none".into(), |v| v.to_string()),
            f.resolution,
            f.trials,
            f.strategy,
            if f.budget_exhausted {
                ", trial budget exhausted"
            } else {
                ""
            }
        );
    }
    if let Some(fr) = &s.fit {
        let _ = writeln!(
            o,
            "\nfit of {} peak reserved against {}: {} over {} points (residual σ {:.3} GiB); {}",
            s.kind,
            fr.variable,
            fr.fit.model,
            fr.fit.points,
            fr.fit.residual_std_bytes / (1u64 << 30) as f64,
            fr.overhead_source
        );
        let mut cards = Table::new(vec![
            Column::left("").min(14),
            Column::right("").min(13),
            Column::left(""),
        ])
        .indent(2);
        for c in &fr.cards {
            cards.row([
                c.card.clone(),
                format!("{:.2} GiB", Bytes(c.usable_bytes).gib()),
                format!(
                    "usable → {}{}",
                    // No value is not "nothing fits": the fit is not carried that far.
                    c.predicted.map_or_else(
                        || format!(
                            "{} not placed by the fit: {}",
                            fr.variable,
                            c.withheld.as_deref().unwrap_or("not reached")
                        ),
                        |p| format!("{} = {p:.0}", fr.variable)
                    ),
                    match (c.range, c.extrapolation) {
                        (Some((a, b)), true) =>
                            format!(" (range {a:.0}..{b:.0}; extrapolation, not {})", s.kind),
                        (Some((a, b)), false) => format!(" (range {a:.0}..{b:.0})"),
                        (None, true) => format!(" (extrapolation, not {})", s.kind),
                        (None, false) => String::new(),
                    }
                ),
            ]);
        }
        o.push_str(&cards.terminal());
    }
    for n in &s.notes {
        let _ = writeln!(o, "note: {n}");
    }
    for n in bounded_trials(s) {
        let _ = writeln!(o, "note: {n}");
    }
    let _ = writeln!(o, "series: {}", path.display());
    // Names, notes and errors come from files and workloads: shown, never obeyed.
    crate::output::terminal_safe(&o).into_owned()
}

/// Each predicted trial with bounded phases (sizes that depend on data the prediction did not
/// know): the frontier and the fit read their upper figures; the lower ones are in the trial's
/// prediction.
fn bounded_trials(s: &Series) -> Vec<String> {
    use crate::schema::prediction::PhaseStatus;
    s.trials
        .iter()
        .filter_map(|t| {
            let doc = t.prediction.as_ref()?;
            let bounded: Vec<_> = doc
                .phases
                .iter()
                .filter(|p| p.status == PhaseStatus::Bounded)
                .collect();
            let lowest = bounded
                .iter()
                .filter_map(|p| p.lower.as_ref()?.peak_allocated_bytes)
                .max();
            if bounded.is_empty() {
                return None;
            }
            let mut ops: Vec<&str> = bounded
                .iter()
                .flat_map(|p| &p.unpredictable)
                .filter(|u| u.bound.is_some())
                .map(|u| u.op.as_str())
                .collect();
            ops.sort_unstable();
            ops.dedup();
            Some(format!(
                "trial {}: {} phase(s) bounded ({}): read at their upper figures (the largest data-dependent sizes), so its verdict holds whatever the data; at the smallest its highest peak allocated is {}",
                t.index,
                bounded.len(),
                ops.join(", "),
                lowest.map_or("not predicted (the run at the lower bound did not reach them)".into(), |b| Bytes(b).both())
            ))
        })
        .collect()
}

/// The allocator A/B: each setting's peak reserved at each value, and its change against the
/// first setting.
fn alloc_conf_table(o: &mut String, s: &Series) {
    let _ = writeln!(
        o,
        "\nallocator settings compared (peak reserved; change against {}, complete trials only):",
        s.alloc_confs[0]
    );
    let mut columns = vec![Column::left(s.varied.first().map_or("", |v| v.name())).min(16)];
    columns.extend(
        s.alloc_confs
            .iter()
            .map(|a| Column::right(a.name()).min(28)),
    );
    let mut table = Table::new(columns).indent(2);
    for row in s.alloc_conf_rows() {
        let mut cells = vec![row.value.map_or(String::new(), |(_, v)| v.to_string())];
        for (k, t) in row.trials.iter().enumerate() {
            cells.push(match t {
                None => "not run".to_string(),
                Some(t) if !t.status.is_ok() => status_label(t).to_string(),
                Some(t) => {
                    let peak = t
                        .peak_reserved_bytes
                        .map_or("null".into(), |b| format!("{:.3} GiB", Bytes(b).gib()));
                    match (k, row.change(k)) {
                        (0, _) | (_, None) => peak,
                        (_, Some(c)) => format!("{peak} ({:+.1}%)", c * 100.0),
                    }
                }
            });
        }
        table.row(cells);
    }
    o.push_str(&table.terminal());
}
