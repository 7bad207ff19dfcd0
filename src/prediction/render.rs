//! The terminal table of `iteragpu predict`: one line per phase in GiB (raw bytes in the file),
//! the largest category at each peak, what was assumed and what could not be predicted.

use std::fmt::Write as _;
use std::path::Path;

use crate::output::table::{Column, Table};
use crate::schema::prediction::{PhaseStatus, PredictionDoc, PredictionStatus};
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
    // An inner phase is indented two spaces per level; a phase the tool made says `(auto)`.
    let labels: Vec<String> = p
        .phases
        .iter()
        .map(|ph| {
            format!(
                "{}{}{}",
                "  ".repeat(p.depth(ph)),
                ph.name,
                if ph.automatic { " (auto)" } else { "" }
            )
        })
        .collect();
    let mut table = Table::new(vec![
        Column::left("phase").min(14),
        Column::left("status").min(13),
        Column::right("start alloc").min(11),
        Column::right("peak alloc").min(11),
        Column::right("peak resv").min(11),
        Column::right("end alloc").min(11),
        Column::right("driver view").min(12),
        Column::left("largest at the peak").gap(2),
    ])
    .indent(2);
    for (ph, label) in p.phases.iter().zip(labels) {
        let largest = ph
            .at_peak
            .as_ref()
            .and_then(|a| a.by_category.iter().max_by_key(|(_, b)| **b))
            .map_or(String::new(), |(c, b)| {
                format!("{c} {:.3}", Bytes(*b).gib())
            });
        table.row([
            label,
            ph.status.as_ref().to_string(),
            gib(ph.start_allocated_bytes),
            gib(ph.peak_allocated_bytes),
            gib(ph.peak_reserved_bytes),
            gib(ph.end_allocated_bytes),
            gib(ph.driver_view_bytes),
            largest,
        ]);
        if ph.status == PhaseStatus::Bounded {
            // The row above is the upper bound; the lower one, and the op, beneath it.
            match &ph.lower {
                Some(l) => table.row([
                    String::new(),
                    "  lower bound".into(),
                    String::new(),
                    gib(l.peak_allocated_bytes),
                    gib(l.peak_reserved_bytes),
                    gib(l.end_allocated_bytes),
                    gib(l.driver_view_bytes),
                    String::new(),
                ]),
                None => table.row([String::new(), "  lower bound: not reached".into()]),
            }
            if let Some(a) = &ph.assumed {
                table.row([
                    String::new(),
                    format!("  assumed ({}%)", a.fraction * 100.0),
                    String::new(),
                    gib(Some(a.peak_allocated_bytes)),
                    gib(Some(a.peak_reserved_bytes)),
                    String::new(),
                    String::new(),
                    "published typical share: see notes".into(),
                ]);
            }
            for u in ph.unpredictable.iter().filter(|u| u.bound.is_some()) {
                table.row([
                    String::new(),
                    format!("bounded: {}: {}", op_at(u), sizes(u)),
                ]);
            }
        }
        if ph.status == PhaseStatus::Unpredictable {
            for u in &ph.unpredictable {
                table.row([String::new(), format!("unpredictable: {}", op_at(u))]);
            }
            if ph.unpredictable.is_empty() {
                table.row([
                    String::new(),
                    "unpredictable: it holds what a data-dependent op produced earlier".into(),
                ]);
            }
        }
    }
    o.push('\n');
    o.push_str(&table.terminal());
    if let Some(oom) = &p.out_of_memory {
        out_of_memory(&mut o, p, oom);
    } else if let Some(max) = p.max_driver_view() {
        // The capacity the prediction applied (`--memory-limit` included); the card's whole
        // memory for files written before predictions applied one.
        let (limit, of) = match &p.capacity {
            Some(c) => (c.device_bytes, c.source.clone()),
            None => (
                p.target.total_memory,
                format!("{} ({})", p.target.name, p.target.total_memory_source),
            ),
        };
        let bounded = p.phases.iter().any(|ph| ph.status == PhaseStatus::Bounded);
        let _ = writeln!(
            o,
            "\n  highest driver's view {} ({} bytes) against {} ({}): {}",
            Bytes(max).both(),
            Bytes(max).grouped(),
            Bytes(limit).both(),
            of,
            if max <= limit && p.status != PredictionStatus::Complete {
                "the phases predicted fit, but not every phase was predicted (a measurement on the card is the proof)".into()
            } else if max <= limit && bounded {
                "predicted to fit whatever the data (at the largest data-dependent sizes; a measurement on the card is the proof)".into()
            } else if max <= limit {
                "predicted to fit (a measurement on the card is the proof)".into()
            } else {
                not_fit(p, limit)
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
    if let Some(managed) = p.phases.iter().filter_map(|ph| ph.peak_managed_bytes).max() {
        let _ = writeln!(
            o,
            "  unified memory (cudaMallocManaged, bitsandbytes' paged optimizer states): up to {}, \
             outside PyTorch's allocator and the figures above; on the GPU while it has room, \
             moved to the host under pressure (each phase's peak_managed_bytes in the file)",
            Bytes(managed).both()
        );
    }
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
        if p.stopped() {
            let _ = writeln!(
                o,
                "  the prediction stopped: {f} (the phases above are those predicted until then)"
            );
        } else {
            let _ = writeln!(o, "  the workload stopped: {f}");
        }
    }
    if let Some(d) = &p.failure_detail
        && let Some(frame) = &d.frame
    {
        let _ = writeln!(
            o,
            "  raised from {}:{}{} ({})",
            frame.file,
            frame.line,
            frame
                .function
                .as_deref()
                .map_or(String::new(), |f| format!(", in {f}")),
            if frame.user_code {
                "the innermost line of your code in the traceback"
            } else {
                "the innermost frame outside iteragpu: none of your code's frames is in the traceback's kept part"
            }
        );
        if let Some(code) = source_line(&d.traceback_tail, &frame.file, frame.line) {
            let _ = writeln!(o, "    {code}");
        }
    }
    if let Some(like) = &p.like {
        let from = match &like.device {
            Some(device) => format!("{} ({device})", like.file),
            None => like.file.clone(),
        };
        if like.differences.is_empty() {
            let _ = writeln!(o, "  versions match {from}: {}", like.agreed());
        } else {
            let _ = writeln!(
                o,
                "  versions differ from {from}: {} — {}",
                like.differences
                    .iter()
                    .map(|n| like.difference(n))
                    .collect::<Vec<_>>()
                    .join(", "),
                crate::schema::versions::OBSERVED
            );
        }
    }
    for n in &p.notes {
        let _ = writeln!(o, "  note: {n}");
    }
    let _ = writeln!(o, "  prediction: {}", path.display());
    // Names, notes and errors come from files and workloads: shown, never obeyed.
    crate::output::terminal_safe(&o).into_owned()
}

/// Where the simulated card runs out: the phase, the allocation (module, category, the user's
/// line), what was free of what, and the post-mortem's class and advice.
fn out_of_memory(o: &mut String, p: &PredictionDoc, oom: &crate::schema::prediction::PredictedOom) {
    let at = match (&oom.file, oom.line) {
        (Some(file), Some(line)) => format!(", at {file}:{line}"),
        (Some(file), None) => format!(", at {file}"),
        _ => String::new(),
    };
    let (device, source) = p.capacity.as_ref().map_or(
        (p.target.total_memory, p.target.total_memory_source.as_str()),
        |c| (c.device_bytes, c.source.as_str()),
    );
    let _ = writeln!(
        o,
        "\n  predicted out of memory in phase {}: a {} allocation ({} bytes; module {}, category {}{at}) with {} free of {} ({source}); later phases not reached",
        oom.phase.as_deref().unwrap_or("(outside any phase)"),
        Bytes(oom.requested_bytes).both(),
        Bytes(oom.requested_bytes).grouped(),
        oom.module.as_deref().unwrap_or("(outside any module)"),
        oom.category,
        Bytes(oom.free_bytes).both(),
        Bytes(device).both(),
    );
    let _ = writeln!(
        o,
        "  the allocator needed a {} segment; PyTorch held {} allocated and {} reserved ({} reserved but unallocated) after releasing {} of cached segments",
        Bytes(oom.segment_bytes).both(),
        Bytes(oom.allocated_bytes).both(),
        Bytes(oom.reserved_bytes).both(),
        Bytes(oom.reserved_unallocated_bytes).both(),
        Bytes(oom.released_bytes).both(),
    );
    if let (Some(reserved), Some(driver)) = (
        oom.unlimited_peak_reserved_bytes,
        oom.unlimited_driver_view_bytes,
    ) {
        let _ = writeln!(
            o,
            "  with unlimited memory the predicted phases would peak at {} reserved, a driver's view of {}: what a larger card needs (`iteragpu cards --from` reads it)",
            Bytes(reserved).both(),
            Bytes(driver).both()
        );
    }
    for line in crate::ledger::render::post_mortem(Some(&oom.post_mortem), None) {
        let _ = writeln!(o, "  {line}");
    }
}

/// The source line Python printed under the frame `file:line`, when the kept tail has it.
fn source_line<'a>(tail: &'a [String], file: &str, line: u64) -> Option<&'a str> {
    let header = format!("File \"{file}\", line {line}");
    let at = tail
        .iter()
        .position(|l| l.trim_start().starts_with(&header))?;
    // Python indents the source line two spaces deeper than its frame.
    let raw = tail.get(at + 1)?;
    let next = raw.trim();
    (raw.starts_with("    ") && !next.is_empty() && !next.starts_with(['^', '~'])).then_some(next)
}

/// An op a prediction could not follow exactly, its reason and its place: `OP (REASON) at FILE:LINE`.
/// "predicted NOT to fit", and where bounded phases decide it, whether it fits at their
/// smallest data-dependent sizes: then whether it fits depends on the data.
fn not_fit(p: &PredictionDoc, limit: u64) -> String {
    let bounded = p.phases.iter().any(|ph| ph.status == PhaseStatus::Bounded);
    // Each phase at its lower figures where it has them, else its own.
    let lowest = p
        .phases
        .iter()
        .filter(|ph| ph.status.has_figures())
        .filter_map(|ph| {
            ph.lower
                .as_ref()
                .and_then(|l| l.driver_view_bytes)
                .or(ph.driver_view_bytes)
        })
        .max();
    match lowest {
        Some(low) if bounded && low <= limit => format!(
            "predicted NOT to fit at the largest data-dependent sizes, but to fit at the smallest ({}): whether it fits depends on the data",
            Bytes(low).both()
        ),
        Some(_) if bounded => {
            "predicted NOT to fit, even at the smallest data-dependent sizes".into()
        }
        _ => "predicted NOT to fit".into(),
    }
}

/// A bounded op's outputs at both ends: `outputs 2097152×2 at the largest (the row above), 0×2 at
/// the smallest`.
fn sizes(u: &crate::schema::trace::Unpredictable) -> String {
    let shapes = |s: &[Vec<u64>]| {
        s.iter()
            .map(|d| d.iter().map(u64::to_string).collect::<Vec<_>>().join("×"))
            .collect::<Vec<_>>()
            .join(" + ")
    };
    match (u.shapes.is_empty(), u.lower_shapes.is_empty()) {
        (true, _) => "above, at its largest outputs".into(),
        (false, true) => format!(
            "outputs {} at the largest (the row above)",
            shapes(&u.shapes)
        ),
        (false, false) => format!(
            "outputs {} at the largest (the row above), {} at the smallest",
            shapes(&u.shapes),
            shapes(&u.lower_shapes)
        ),
    }
}

fn op_at(u: &crate::schema::trace::Unpredictable) -> String {
    format!(
        "{} ({}) at {}:{}",
        u.op,
        u.reason,
        u.file.as_deref().unwrap_or("?"),
        u.line.map_or("?".into(), |l| l.to_string())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(phases: serde_json::Value, status: &str) -> PredictionDoc {
        let target = crate::schema::target::Target::named(None, "native").unwrap();
        serde_json::from_value(serde_json::json!({
            "schema": "iteragpu.prediction/1", "tool_version": "t", "kind": "prediction", "status": status,
            "created_at": "", "identity": {"workload": "script", "code_hash": "x", "seed": 0, "declared": {}},
            "dimensions": {}, "target": target,
            "spec": {"workload": "script", "devices": ["cuda:0"], "seed": 0, "script": "x.py", "script_args": []},
            "assumptions": {"torch_version": null, "transformers_version": null, "allocator_model": "",
                "placeholder_reads": [], "not_modelled": []},
            "phases": phases, "failure": "stopped by SIGINT", "notes": []
        }))
        .unwrap()
    }

    fn phase(name: &str, index: u64, parent: Option<u64>, automatic: bool) -> serde_json::Value {
        serde_json::json!({"name": name, "index": index, "parent": parent, "automatic": automatic,
            "status": "predicted", "inputs": {}, "start_allocated_bytes": 0, "start_reserved_bytes": 0,
            "peak_allocated_bytes": 1u64 << 30, "peak_reserved_bytes": 1u64 << 30, "peak_tensor_bytes": 0,
            "end_allocated_bytes": 0, "end_reserved_bytes": 0, "driver_view_bytes": 1u64 << 30,
            "at_peak": null, "unpredictable": []})
    }

    /// A bounded phase over the card decides "not to fit" at the largest sizes; when its lower
    /// figures fit, the verdict says it depends on the data, and when they do not, that it
    /// does not fit even at the smallest.
    #[test]
    fn a_bounded_phase_over_the_card_fits_or_not_by_its_lower_figures() {
        let bounded = |lower_view: u64| {
            let mut ph = phase("select", 0, None, false);
            ph["status"] = "bounded".into();
            ph["driver_view_bytes"] = (3u64 << 30).into();
            ph["lower"] = serde_json::json!({"driver_view_bytes": lower_view});
            doc(serde_json::json!([ph]), "complete")
        };
        let limit = 2u64 << 30;
        assert!(not_fit(&bounded(1 << 30), limit).contains("depends on the data"));
        assert!(not_fit(&bounded(5 << 30), limit).contains("even at the smallest"));
        assert_eq!(
            not_fit(
                &doc(serde_json::json!([phase("p", 0, None, false)]), "complete"),
                0
            ),
            "predicted NOT to fit"
        );
    }

    /// Inner phases are indented two spaces per level, automatic ones say so, and every column
    /// stays aligned whatever the labels' lengths; a stopped prediction says so.
    #[test]
    fn nested_and_automatic_phases_stay_aligned() {
        let p = doc(
            serde_json::json!([
                phase("script", 0, None, true),
                phase("train", 1, Some(0), false),
                phase("a_rather_long_step_name", 2, Some(1), false),
                phase("eval", 3, None, false),
            ]),
            "interrupted",
        );
        let text = table(&p, Path::new("p.json"));
        let rows: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("phase "))
            .take(5)
            .collect();
        assert_eq!(rows.len(), 5, "{text}");
        assert!(rows[1].starts_with("  script (auto) "), "{text}");
        assert!(rows[2].starts_with("    train "), "{text}");
        assert!(
            rows[3].starts_with("      a_rather_long_step_name "),
            "{text}"
        );
        assert!(rows[4].starts_with("  eval "), "{text}");
        // The status column starts at the same place on every line.
        let at: Vec<usize> = rows
            .iter()
            .map(|r| r.find("predicted").or_else(|| r.find("status")).unwrap())
            .collect();
        assert!(at.iter().all(|x| *x == at[0]), "{text}");
        assert!(
            text.contains("the prediction stopped: stopped by SIGINT"),
            "{text}"
        );
        assert!(text.contains("not every phase was predicted"), "{text}");
    }

    /// A failure shows the user's frame and its source line; `--like` shows the differences
    /// with what was observed, or that the versions match.
    #[test]
    fn the_frame_and_the_versions_are_said() {
        use crate::schema::failure::FailureDetail;
        use crate::schema::versions::{Like, Versions};
        let mut p = doc(serde_json::json!([phase("load", 0, None, false)]), "failed");
        let detail = FailureDetail::of(&serde_json::json!({
            "type": "ValueError",
            "message": "`max_new_tokens` must be greater than 0, but is -1.",
            "traceback": include_str!("../../tests/fixtures/tracebacks/in_transformers.txt"),
        }));
        p.failure = Some(format!("ValueError: boom{}", detail.at()));
        p.failure_detail = Some(detail);
        let versions = |torch: &str, transformers: &str| Versions {
            torch: Some(torch.into()),
            transformers: Some(transformers.into()),
            peft: None,
            cuda: Some("13.0".into()),
        };
        p.like = Some(Like::compare(
            "h200.json".into(),
            None,
            "measurement",
            Some("NVIDIA H200".into()),
            &versions("2.15.0", "5.24.0"),
            &versions("2.11.0", "5.17.0"),
        ));
        let text = table(&p, Path::new("p.json"));
        assert!(
            text.contains(
                "  the workload stopped: ValueError: boom (at /tmp/tb/tf_fail.py:10)\n  raised from /tmp/tb/tf_fail.py:10, in <module> (the innermost line of your code in the traceback)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "  versions differ from h200.json (NVIDIA H200): torch 2.15.0 here vs 2.11.0 there, transformers 5.24.0 here vs 5.17.0 there — predictions made with torch 2.15/transformers 5.24"
            ),
            "{text}"
        );
        p.like = Some(Like::compare(
            "env.json".into(),
            None,
            "environment",
            None,
            &versions("2.11.0", "5.17.0"),
            &versions("2.11.0+cu130", "5.17.0"),
        ));
        let text = table(&p, Path::new("p.json"));
        assert!(
            text.contains(
                "  versions match env.json: torch 2.11.0, transformers 5.17.0, CUDA 13.0\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_source_line_under_a_frame() {
        let tail: Vec<String> = [
            "  File \"/home/u/a.py\", line 5, in build",
            "    return x @ y",
            "           ~~^~~",
            "  File \"/lib/x.py\", line 2, in f",
            "RuntimeError: no",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(source_line(&tail, "/home/u/a.py", 5), Some("return x @ y"));
        assert_eq!(source_line(&tail, "/lib/x.py", 2), None);
        assert_eq!(source_line(&tail, "/home/u/b.py", 5), None);
    }
}
