//! The terminal table of `iteragpu measure`: one line per phase and device in GiB (raw bytes are
//! in the result file), the driver's view, the prediction next to the observation, the failure.

use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;

use crate::output::table::{Column, Table};
use crate::schema::measure::MeasureResult;
use crate::units::Bytes;

fn gib(v: Option<u64>) -> String {
    v.map_or("null".into(), |b| format!("{:.3}", Bytes(b).gib()))
}

/// The human summary: one line per phase and device, in GiB; raw bytes are in the file.
pub fn table(r: &MeasureResult, path: &Path) -> String {
    let mut o = String::new();
    let declared = &r.identity.declared;
    let _ = writeln!(
        o,
        "iteragpu measure: {} {} on {}{} — status {} (counters in GiB; raw bytes in the result file)",
        r.identity.workload,
        declared
            .get("architecture")
            .and_then(Value::as_str)
            .unwrap_or(""),
        r.scope.devices.join(", "),
        match (r.scope.rank, &r.distributed) {
            (Some(k), Some(d)) => format!(" (rank {k} of {})", d.world_size),
            _ => String::new(),
        },
        r.status
    );
    let mut phases = Table::new(vec![
        Column::left("phase").min(14),
        Column::left("device").min(7),
        Column::left("status").min(7),
        Column::right("start alloc").min(11),
        Column::right("peak alloc").min(11),
        Column::right("end alloc").min(11),
        Column::right("start resv").min(11),
        Column::right("peak resv").min(11),
        Column::right("end resv").min(11),
        Column::right("seconds").min(9),
    ])
    .indent(2);
    for p in &r.phases {
        if p.devices.is_empty() {
            phases.row([
                p.name.clone(),
                String::new(),
                p.status.to_string(),
                p.note.clone().unwrap_or_else(|| "no readings".into()),
            ]);
        }
        for d in &p.devices {
            phases.row([
                p.name.clone(),
                d.device.clone(),
                p.status.to_string(),
                gib(d.start_allocated_bytes),
                gib(d.peak_allocated_bytes),
                gib(d.end_allocated_bytes),
                gib(d.start_reserved_bytes),
                gib(d.peak_reserved_bytes),
                gib(d.end_reserved_bytes),
                p.duration_s.map_or("null".into(), |s| format!("{s:.4}")),
            ]);
        }
        for drv in p.driver.iter().flatten() {
            if let (Some(proc_peak), outside) = (
                drv.peak_process_used_bytes,
                drv.outside_allocator_at_end_bytes,
            ) {
                phases.row([
                    String::new(),
                    drv.device.clone(),
                    format!(
                        "driver: process peak {} GiB over {} samples{}",
                        gib(Some(proc_peak)),
                        drv.samples,
                        outside.map_or(String::new(), |b| format!(
                            "; outside PyTorch's allocator at the end: {} GiB (CUDA context, libraries; not a leak by itself)",
                            gib(Some(b))
                        ))
                    ),
                ]);
            }
        }
    }
    o.push('\n');
    o.push_str(&phases.terminal());
    if let Some(d) = &r.distributed {
        ranks(&mut o, d);
    }
    for w in &r.warm_summary {
        if let Some(s) = &w.peak_reserved_bytes {
            let _ = writeln!(
                o,
                "\n  warm_forward on {} over {} repeats: peak reserved min {} / median {} / max {} bytes",
                w.device,
                w.repeats,
                Bytes(s.min as u64).grouped(),
                Bytes(s.median as u64).grouped(),
                Bytes(s.max as u64).grouped()
            );
        }
    }
    if !r.predictions.is_empty() {
        o.push_str(
            "\n  predicted vs observed (first device; the prediction ran after the measurement, on the CPU):\n",
        );
        let mut table = Table::new(vec![
            Column::left("phase").min(14),
            Column::right("predicted alloc").min(16),
            Column::right("observed alloc").min(16),
            Column::right("error").min(8),
            Column::right("predicted resv").min(16),
            Column::right("observed resv").min(16),
            Column::right("error").min(8),
        ])
        .indent(2);
        let pct = |v: Option<f64>| v.map_or("null".into(), |p| format!("{p:+.1}%"));
        let b = |v: Option<u64>| v.map_or("null".into(), |x| Bytes(x).grouped());
        for c in &r.predictions {
            table.row([
                c.phase.clone(),
                Bytes(c.predicted_peak_allocated_bytes).grouped(),
                b(c.observed_peak_allocated_bytes),
                pct(c.error_allocated_pct),
                Bytes(c.predicted_peak_reserved_bytes).grouped(),
                b(c.observed_peak_reserved_bytes),
                pct(c.error_reserved_pct),
            ]);
        }
        o.push_str(&table.terminal());
    }
    for c in &r.kv_cache {
        let _ = writeln!(
            o,
            "  KV cache after {}: observed {} bytes, estimated {} bytes ({})",
            c.phase,
            c.observed_bytes
                .map_or("null".into(), |b| Bytes(b).grouped()),
            Bytes(c.estimated_bytes).grouped(),
            c.difference_pct
                .map_or("no difference computed".into(), |p| format!("{p:+.2}%"))
        );
    }
    if let Some(t) = &r.timeline {
        let _ = writeln!(o);
        for line in crate::ledger::render::timeline(t) {
            let _ = writeln!(o, "  {line}");
        }
    }
    if let Some(f) = &r.failure {
        let _ = writeln!(
            o,
            "\n  failure in {}: {} {}\n  {}",
            f.phase.as_deref().unwrap_or("(before any phase)"),
            f.error_type.as_deref().unwrap_or(""),
            f.message.as_deref().unwrap_or(""),
            f.caution
        );
        let live = r.oom_snapshots.last();
        for line in crate::ledger::render::post_mortem(f.post_mortem.as_ref(), live) {
            let _ = writeln!(o, "  {line}");
        }
    }
    if r.environment.driver.is_none() {
        let _ = writeln!(
            o,
            "\n  driver's view: {}",
            r.environment
                .driver_reason
                .as_deref()
                .unwrap_or("unavailable")
        );
    }
    for note in &r.notes {
        let _ = writeln!(o, "  note: {note}");
    }
    let _ = writeln!(
        o,
        "\n  reserved − allocated is only meaningful from two readings of one checkpoint (start or end), never peak − peak.\n  result: {}",
        path.display()
    );
    // Names, notes and errors come from files and workloads: shown, never obeyed.
    crate::output::terminal_safe(&o).into_owned()
}

/// The ranks of this node side by side: each on its own device, never added together.
fn ranks(o: &mut String, d: &crate::schema::measure::Distributed) {
    let _ = writeln!(
        o,
        "\n  ranks of this node under torchrun (world size {}, node {} of {}; each read on its own device, never added together):",
        d.world_size, d.torchrun.node_rank, d.torchrun.nnodes
    );
    let mut table = Table::new(vec![
        Column::right("rank").min(5),
        Column::right("local").min(5),
        Column::left("device").min(8),
        Column::left("status").min(11),
        Column::right("peak alloc").min(11),
        Column::right("peak resv").min(11),
        Column::right("outside alloc").min(15),
        Column::left("phases").gap(2),
    ])
    .indent(2);
    for k in &d.ranks {
        table.row([
            k.rank.to_string(),
            k.local_rank.to_string(),
            k.device.clone(),
            k.status.to_string(),
            gib(k.peak_allocated()),
            gib(k.peak_reserved()),
            gib(k.outside_allocator()),
            k.phases.len().to_string(),
        ]);
        if let Some(why) = &k.stopped_because {
            table.row([String::new(), format!("stopped: {why}")]);
        }
    }
    o.push_str(&table.terminal());
    if let Some(i) = &d.imbalance {
        let _ = writeln!(
            o,
            "  highest peak reserved: rank {} ({} GiB); lowest: rank {} ({} GiB); spread {} GiB",
            i.max_rank,
            gib(Some(i.max_peak_reserved_bytes)),
            i.min_rank,
            gib(Some(i.min_peak_reserved_bytes)),
            gib(Some(i.spread_bytes))
        );
    }
}
