//! `compare`'s content: several runs side by side in one unit, and a warning for every condition that differs besides
//! the variable under study: such runs are not called comparable.

use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::schema::load::{InputError, InputFile, Loaded, MEASURE};
use crate::schema::measure::MeasureResult;
use crate::units::Bytes;

/// One run, one phase, one device.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub run: String,
    pub phase: String,
    pub index: u64,
    pub device: String,
    pub status: String,
    pub start_allocated_bytes: Option<u64>,
    pub start_reserved_bytes: Option<u64>,
    pub peak_allocated_bytes: Option<u64>,
    pub peak_reserved_bytes: Option<u64>,
    pub end_allocated_bytes: Option<u64>,
    pub end_reserved_bytes: Option<u64>,
    /// The prediction stored with the run for this phase (first device), when there is one.
    pub predicted_peak_allocated_bytes: Option<u64>,
    pub predicted_peak_reserved_bytes: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub runs: Vec<String>,
    pub rows: Vec<Row>,
    /// The one dimension that differs, when exactly one does.
    pub variable: Option<String>,
    pub warnings: Vec<String>,
    pub comparable: bool,
}

fn conditions(r: &MeasureResult) -> BTreeMap<&'static str, String> {
    let py = r.environment.python.as_ref();
    let torch = py.and_then(|p| p.torch.as_ref());
    let t = |k: &str| {
        torch
            .and_then(|t| t.get(k))
            .map_or("null".to_string(), |v| v.to_string())
    };
    let gpu = py
        .zip(r.scope.devices.first())
        .and_then(|(p, d)| p.device(d))
        .and_then(|d| d.get("name"))
        .map_or("null".to_string(), |v| v.to_string());
    let mut c = BTreeMap::new();
    c.insert("PyTorch version", t("version"));
    c.insert(
        "backend (CUDA/HIP)",
        format!(
            "{} {} {}",
            t("backend"),
            t("cuda_version"),
            t("hip_version")
        ),
    );
    c.insert("allocator backend", t("allocator_backend"));
    c.insert(
        "allocator settings",
        py.map_or("null".into(), |p| p.settings.to_string()),
    );
    c.insert("empty-cache policy", r.policies.empty_cache.to_string());
    c.insert(
        "process policy",
        format!("{} / {}", r.policies.process, r.policies.protocol),
    );
    c.insert("device", format!("{gpu} on {}", r.scope.devices.join(",")));
    c.insert("workload", r.identity.workload.clone());
    c.insert("phases measured", r.scope.phases.join(","));
    c
}

/// Compares measure results.
pub fn compare(inputs: &[Loaded]) -> Result<Comparison, InputError> {
    let mut results: Vec<(&Loaded, &MeasureResult)> = Vec::new();
    for l in inputs {
        match &l.doc {
            InputFile::Measure(r) => results.push((l, r)),
            _ => {
                return Err(l.wrong(
                    MEASURE,
                    "compare reads measure results; a series already holds its trials side by side",
                ));
            }
        }
    }
    let name = |l: &Loaded| l.path.display().to_string();
    let mut warnings = Vec::new();
    // Conditions besides the dimensions.
    let first = conditions(results[0].1);
    for (l, r) in &results[1..] {
        for (key, value) in conditions(r) {
            if first.get(key) != Some(&value) {
                warnings.push(format!(
                    "{key} differs: {} has {}, {} has {value}",
                    name(results[0].0),
                    first.get(key).map_or("null", String::as_str),
                    name(l)
                ));
            }
        }
    }
    // Dimensions: one may differ (the variable under study).
    let mut keys: Vec<&String> = results
        .iter()
        .flat_map(|(_, r)| r.dimensions.keys())
        .collect();
    keys.sort();
    keys.dedup();
    let differing: Vec<&String> = keys
        .into_iter()
        .filter(|k| {
            let v0 = results[0].1.dimensions.get(*k);
            results.iter().any(|(_, r)| r.dimensions.get(*k) != v0)
        })
        .collect();
    let variable = (differing.len() == 1).then(|| differing[0].clone());
    if differing.len() > 1 {
        let describe = |k: &String| {
            let values: Vec<String> = results
                .iter()
                .map(|(_, r)| r.dimensions.get(k).map_or("null".into(), Value::to_string))
                .collect();
            format!("{k} ({})", values.join(" / "))
        };
        warnings.push(format!(
            "more than one dimension differs: {} — change one variable at a time",
            differing
                .iter()
                .map(|k| describe(k))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let mut rows = Vec::new();
    for (l, r) in &results {
        for p in &r.phases {
            for d in &p.devices {
                rows.push(Row {
                    run: name(l),
                    phase: p.name.clone(),
                    index: p.index,
                    device: d.device.clone(),
                    status: p.status.to_string(),
                    start_allocated_bytes: d.start_allocated_bytes,
                    start_reserved_bytes: d.start_reserved_bytes,
                    peak_allocated_bytes: d.peak_allocated_bytes,
                    peak_reserved_bytes: d.peak_reserved_bytes,
                    end_allocated_bytes: d.end_allocated_bytes,
                    end_reserved_bytes: d.end_reserved_bytes,
                    predicted_peak_allocated_bytes: predicted(r, p, &d.device, |c| {
                        c.predicted_peak_allocated_bytes
                    }),
                    predicted_peak_reserved_bytes: predicted(r, p, &d.device, |c| {
                        c.predicted_peak_reserved_bytes
                    }),
                });
            }
        }
    }
    Ok(Comparison {
        runs: results.iter().map(|(l, _)| name(l)).collect(),
        rows,
        variable,
        comparable: warnings.is_empty(),
        warnings,
    })
}

/// The stored prediction of a phase (first device only: predictions follow one device).
fn predicted(
    r: &MeasureResult,
    phase: &crate::schema::events::PhaseRecord,
    device: &str,
    field: fn(&crate::schema::measure::PhaseCheck) -> u64,
) -> Option<u64> {
    if r.scope.devices.first().map(String::as_str) != Some(device) {
        return None;
    }
    r.predictions
        .iter()
        .find(|c| c.index == phase.index)
        .map(field)
}

/// RFC 4180 quoting: only fields with commas, quotes or line breaks are quoted. A field that a
/// spreadsheet would run as a formula (it begins with `=`, `+`, `-`, `@`, a tab or a carriage
/// return: a phase name such as `=HYPERLINK(…)`) is prefixed with `'` and quoted, as OWASP's CSV
/// injection guidance says.
fn field(s: &str) -> String {
    if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        return format!("\"'{}\"", s.replace('"', "\"\""));
    }
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// One row per run and phase (and device), raw bytes; empty cells for values not read.
pub fn csv(c: &Comparison) -> String {
    let mut o = String::from(
        "run,phase,index,device,status,start_allocated_bytes,start_reserved_bytes,peak_allocated_bytes,peak_reserved_bytes,end_allocated_bytes,end_reserved_bytes,predicted_peak_allocated_bytes,predicted_peak_reserved_bytes\n",
    );
    let n = |v: Option<u64>| v.map_or(String::new(), |x| x.to_string());
    for r in &c.rows {
        o.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            field(&r.run),
            field(&r.phase),
            r.index,
            field(&r.device),
            field(&r.status),
            n(r.start_allocated_bytes),
            n(r.start_reserved_bytes),
            n(r.peak_allocated_bytes),
            n(r.peak_reserved_bytes),
            n(r.end_allocated_bytes),
            n(r.end_reserved_bytes),
            n(r.predicted_peak_allocated_bytes),
            n(r.predicted_peak_reserved_bytes)
        ));
    }
    o
}

/// The terminal table: one line per run, phase and device, in GiB; then the variable under study,
/// the warnings and the verdict.
pub fn table(c: &Comparison) -> String {
    let mut o = String::new();
    let gib = |v: Option<u64>| v.map_or("null".into(), |b| format!("{:.3}", Bytes(b).gib()));
    let _ = writeln!(
        o,
        "{:<32} {:<16} {:<7} {:<8} {:>12} {:>12} {:>12} {:>12} {:>12}   (GiB)",
        "run",
        "phase",
        "device",
        "status",
        "peak alloc",
        "peak resv",
        "end alloc",
        "end resv",
        "predicted"
    );
    for r in &c.rows {
        let _ = writeln!(
            o,
            "{:<32} {:<16} {:<7} {:<8} {:>12} {:>12} {:>12} {:>12} {:>12}",
            r.run,
            r.phase,
            r.device,
            r.status,
            gib(r.peak_allocated_bytes),
            gib(r.peak_reserved_bytes),
            gib(r.end_allocated_bytes),
            gib(r.end_reserved_bytes),
            r.predicted_peak_reserved_bytes
                .map_or("—".into(), |b| format!("{:.3}", Bytes(b).gib()))
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
    // Names, notes and errors come from files and workloads: shown, never obeyed.
    crate::output::terminal_safe(&o).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_only_when_needed() {
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        // Formulas are never cells a spreadsheet runs.
        assert_eq!(
            field("=HYPERLINK(\"http://x\",\"y\")"),
            "\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\""
        );
        for start in ["+1", "-1", "@SUM(A1)", "\tx"] {
            assert!(field(start).starts_with("\"'"), "{start}");
        }
    }
}
