//! `iteragpu compare`: runs side by side in one unit, warnings for every differing condition.

use anyhow::Result;
use std::fmt::Write as _;
use std::io::Write;

use crate::cli::CompareArgs;
use crate::report::{compare, inputs};
use crate::units::Bytes;
use crate::{exit, output};

pub fn run(args: &CompareArgs, out: &mut dyn Write) -> Result<u8> {
    if let Some(csv) = &args.csv {
        output::check_new(csv)?;
    }
    let loaded = args
        .files
        .iter()
        .map(|p| inputs::load(p))
        .collect::<Result<Vec<_>, _>>()?;
    let c = compare::compare(&loaded)?;
    if let Some(csv) = &args.csv {
        output::write_new(csv, compare::csv(&c).as_bytes())?;
    }
    let text = if args.json {
        serde_json::to_string_pretty(&c)? + "\n"
    } else {
        let mut o = String::new();
        let gib = |v: Option<u64>| v.map_or("null".into(), |b| format!("{:.3}", Bytes(b).gib()));
        let _ = writeln!(
            o,
            "{:<32} {:<16} {:<7} {:<8} {:>12} {:>12} {:>12} {:>12}   (GiB)",
            "run", "phase", "device", "status", "peak alloc", "peak resv", "end alloc", "end resv"
        );
        for r in &c.rows {
            let _ = writeln!(
                o,
                "{:<32} {:<16} {:<7} {:<8} {:>12} {:>12} {:>12} {:>12}",
                r.run,
                r.phase,
                r.device,
                r.status,
                gib(r.peak_allocated_bytes),
                gib(r.peak_reserved_bytes),
                gib(r.end_allocated_bytes),
                gib(r.end_reserved_bytes)
            );
        }
        if let Some(v) = &c.variable {
            let _ = writeln!(o, "\nvariable under study: {v}");
        }
        for w in &c.warnings {
            let _ = writeln!(o, "warning: {w}");
        }
        let _ = writeln!(
            o,
            "{}",
            if c.comparable {
                "these runs are comparable: only the variable under study differs".to_string()
            } else {
                format!(
                    "these runs are NOT comparable: {} condition(s) differ besides the variable under study",
                    c.warnings.len()
                )
            }
        );
        o
    };
    out.write_all(text.as_bytes())?;
    Ok(exit::OK)
}
