//! The terminal table of `iteragpu predict`: one line per phase in GiB (raw bytes in the file),
//! the largest category at each peak, what was assumed and what could not be predicted.

use std::fmt::Write as _;
use std::path::Path;

use super::document::{PhaseStatus, PredictionDoc};
use crate::units::Bytes;

fn gib(v: Option<u64>) -> String {
    v.map_or("null".into(), |b| format!("{:.3}", Bytes(b).gib()))
}

pub fn table(p: &PredictionDoc, path: &Path) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "iteragpu predict: {} for {} (compute capability {}.{}) — status {} — a PREDICTION, not a measurement (GiB; raw bytes in the file)",
        p.identity.workload, p.target.name, p.target.capability.0, p.target.capability.1, p.status
    );
    let _ = writeln!(
        o,
        "\n  {:<14} {:<13} {:>11} {:>11} {:>11} {:>11} {:>12}  largest at the peak",
        "phase", "status", "start alloc", "peak alloc", "peak resv", "end alloc", "driver view"
    );
    for ph in &p.phases {
        let largest = ph
            .at_peak
            .as_ref()
            .and_then(|a| a.by_category.iter().max_by_key(|(_, b)| **b))
            .map_or(String::new(), |(c, b)| {
                format!("{c} {:.3}", Bytes(*b).gib())
            });
        let _ = writeln!(
            o,
            "  {:<14} {:<13} {:>11} {:>11} {:>11} {:>11} {:>12}  {largest}",
            ph.name,
            ph.status.as_str(),
            gib(ph.start_allocated_bytes),
            gib(ph.peak_allocated_bytes),
            gib(ph.peak_reserved_bytes),
            gib(ph.end_allocated_bytes),
            gib(ph.driver_view_bytes),
        );
        if ph.status == PhaseStatus::Unpredictable {
            for u in &ph.unpredictable {
                let _ = writeln!(
                    o,
                    "  {:<14} unpredictable: {} ({}) at {}:{}",
                    "",
                    u.op,
                    u.reason,
                    u.file.as_deref().unwrap_or("?"),
                    u.line.map_or("?".into(), |l| l.to_string())
                );
            }
            if ph.unpredictable.is_empty() {
                let _ = writeln!(
                    o,
                    "  {:<14} unpredictable: it holds what a data-dependent op produced earlier",
                    ""
                );
            }
        }
    }
    if let Some(max) = p.max_driver_view() {
        let _ = writeln!(
            o,
            "\n  highest driver's view {} ({} bytes) against {} of {} ({}): {}",
            Bytes(max).both(),
            Bytes(max).grouped(),
            Bytes(p.target.total_memory).both(),
            p.target.name,
            p.target.total_memory_source,
            if max <= p.target.total_memory {
                "predicted to fit (a measurement on the card is the proof)"
            } else {
                "predicted NOT to fit"
            }
        );
    }
    let _ = writeln!(
        o,
        "  outside PyTorch's allocator: {} ({}); workspaces: {}",
        Bytes(p.target.context_bytes).both(),
        p.target.context_source,
        p.target.workspaces_source
    );
    for r in &p.assumptions.placeholder_reads {
        let _ = writeln!(
            o,
            "  placeholder: a value read from data at {}:{} was answered {} ({} time(s))",
            r.file.as_deref().unwrap_or("?"),
            r.line.map_or("?".into(), |l| l.to_string()),
            r.answer,
            r.count
        );
    }
    if let Some(f) = &p.failure {
        let _ = writeln!(o, "  the workload stopped: {f}");
    }
    for n in &p.notes {
        let _ = writeln!(o, "  note: {n}");
    }
    let _ = writeln!(o, "  prediction: {}", path.display());
    o
}
