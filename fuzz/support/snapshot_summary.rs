//! A memory snapshot's summary, on whatever bytes: shared by the fuzz target `snapshot_summary`
//! and the proptest in tests/integration/snapshot.rs, so both run the same code. The reader must
//! refuse or summarise, never panic or abort, never take long, and a summary must stay within its
//! bounds (every string at most `MAX_STRING_CHARS` characters, the whole at most
//! `MAX_SUMMARY_BYTES` as the result writes it) and come back unchanged from its JSON.

use iteragpu::explain::snapshot::{
    MAX_STRING_CHARS, MAX_SUMMARY_BYTES, PhaseBound, SnapshotSummary, SummaryOptions, summarize,
};

/// The options a measurement gives: a bound and two phases' wall-clock bounds, from the first
/// byte (so that the fuzzer reaches the code that uses them).
fn options(knob: u8) -> SummaryOptions {
    SummaryOptions {
        max_entries: (knob & 1 == 1).then_some(u64::from(knob >> 1)),
        phase_bounds: if knob & 2 == 2 {
            vec![
                PhaseBound {
                    index: 0,
                    name: "model_load".into(),
                    start_us: 0,
                    end_us: 1000,
                },
                PhaseBound {
                    index: 1,
                    name: "forward".into(),
                    start_us: 500,
                    end_us: i64::MAX,
                },
            ]
        } else {
            Vec::new()
        },
    }
}

fn check_string(s: &str, what: &str) -> Result<(), String> {
    let n = s.chars().count();
    if n > MAX_STRING_CHARS {
        return Err(format!("{what} of {n} characters"));
    }
    Ok(())
}

/// Summarises `data` (its first byte chooses the options); an inconsistency is an `Err`.
pub fn run(data: &[u8]) -> Result<(), String> {
    let (knob, pickle) = match data.split_first() {
        Some((k, rest)) => (*k, rest),
        None => (0, data),
    };
    let Ok(summary) = summarize(pickle, &options(knob)) else {
        return Ok(());
    };
    for f in &summary.frames {
        check_string(&f.filename, "a filename")?;
        check_string(&f.name, "a function name")?;
    }
    for a in summary.allocations() {
        if let Some(p) = &a.phase {
            check_string(p, "an allocation's phase")?;
        }
        for f in a.user_frame.iter().chain(&a.stack_top) {
            if !summary.frames.contains(f) {
                return Err(format!("a frame not in the table: {f:?}"));
            }
        }
    }
    for d in &summary.devices {
        if let Some(t) = &d.trace {
            for p in &t.phases {
                check_string(&p.name, "a phase name")?;
            }
            for name in t.actions.keys() {
                check_string(name, "an action")?;
            }
        }
    }
    let json = serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?;
    if json.len() as u64 > MAX_SUMMARY_BYTES {
        return Err(format!("a summary of {} bytes", json.len()));
    }
    let mut back: SnapshotSummary = serde_json::from_str(&json).map_err(|e| e.to_string())?;
    // The allocator settings' floats may come back one unit in the last place away (serde_json
    // parses floats quickly, not exactly, without its `float_roundtrip` feature): their keys are
    // compared, and everything else exactly.
    let keys = |s: &SnapshotSummary| {
        s.allocator_settings
            .as_ref()
            .map(|m| m.keys().cloned().collect::<Vec<_>>())
    };
    if keys(&back) != keys(&summary) {
        return Err("the allocator settings changed through their JSON".into());
    }
    back.allocator_settings
        .clone_from(&summary.allocator_settings);
    if back != summary {
        return Err("the summary changed through its JSON".into());
    }
    Ok(())
}
