//! `compare`'s content: several runs side by side in one unit, and a warning for every condition that differs besides
//! the variable under study: such runs are not called comparable. A run is measured or predicted
//! (`schema::view::RunDoc`); a prediction beside a measurement of the same workload gets its
//! error phase by phase.

use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::output::table::{Column, Table};
use crate::schema::load::{self, InputError, Loaded, MEASURE, PREDICTION};
use crate::schema::measure::{MeasureResult, PhaseCheck};
use crate::schema::prediction::{PhaseStatus, PredictionDoc};
use crate::schema::view::{Origin, RunDoc};
use crate::units::Bytes;

/// One run, one phase, one device.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub run: String,
    /// `measured` or `predicted`: a predicted row's figures were never read on a GPU.
    pub origin: Origin,
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

/// A prediction beside a measurement of the same workload: the error on each phase both hold
/// (the n-th phase of a name predicted against the n-th measured; first device).
#[derive(Clone, Debug, Serialize)]
pub struct PredictionErrors {
    pub predicted_run: String,
    pub measured_run: String,
    /// The card predicted for, and the GPU measured on, as each file names it.
    pub predicted_for: String,
    pub measured_on: Option<String>,
    pub phases: Vec<PhaseError>,
    /// The measured phases the prediction has no figure to set against: not reached after a
    /// predicted out-of-memory, the out-of-memory's own phase (its figures stop before the
    /// failing allocation), unpredictable or failed. A gap with its reason, never an error.
    pub gaps: Vec<PhaseGap>,
}

/// A measured phase without a predicted figure to compare, and why.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseGap {
    pub phase: String,
    /// The measured phase's index.
    pub index: u64,
    /// The predicted phase's status (`out_of_memory`, `not_reached`, `unpredictable`, `failed`).
    pub predicted_status: PhaseStatus,
    pub measured_peak_reserved_bytes: Option<u64>,
    pub reason: String,
}

/// A prediction that ran out of the simulated card's memory: where, and the phases it never
/// reached (their rows have no figure: a gap, not 0).
#[derive(Clone, Debug, Serialize)]
pub struct PredictedStop {
    pub run: String,
    pub phase: Option<String>,
    pub phase_index: Option<u64>,
    pub requested_bytes: u64,
    pub module: Option<String>,
    pub not_reached: Vec<String>,
}

/// One phase predicted and measured; errors are measured − predicted (positive: the prediction
/// was short), the percentage of the measured figure (`null` when nothing was measured).
#[derive(Clone, Debug, Serialize)]
pub struct PhaseError {
    pub phase: String,
    /// The measured phase's index.
    pub index: u64,
    pub predicted_peak_allocated_bytes: u64,
    pub measured_peak_allocated_bytes: Option<u64>,
    pub error_allocated_bytes: Option<i128>,
    pub error_allocated_pct: Option<f64>,
    pub predicted_peak_reserved_bytes: u64,
    pub measured_peak_reserved_bytes: Option<u64>,
    pub error_reserved_bytes: Option<i128>,
    pub error_reserved_pct: Option<f64>,
    /// A bounded phase: the predicted figures above are its upper bound, these its lower.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_lower_peak_allocated_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_lower_peak_reserved_bytes: Option<u64>,
    /// A bounded phase measured: whether its measured peak allocated lies between the bounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub within_bounds: Option<bool>,
}

impl PhaseError {
    fn of(c: PhaseCheck) -> PhaseError {
        let error = |p: u64, m: Option<u64>| m.map(|m| i128::from(m) - i128::from(p));
        PhaseError {
            error_allocated_bytes: error(
                c.predicted_peak_allocated_bytes,
                c.observed_peak_allocated_bytes,
            ),
            error_reserved_bytes: error(
                c.predicted_peak_reserved_bytes,
                c.observed_peak_reserved_bytes,
            ),
            phase: c.phase,
            index: c.index,
            predicted_peak_allocated_bytes: c.predicted_peak_allocated_bytes,
            measured_peak_allocated_bytes: c.observed_peak_allocated_bytes,
            error_allocated_pct: c.error_allocated_pct,
            predicted_peak_reserved_bytes: c.predicted_peak_reserved_bytes,
            measured_peak_reserved_bytes: c.observed_peak_reserved_bytes,
            error_reserved_pct: c.error_reserved_pct,
            within_bounds: c
                .predicted_lower_peak_allocated_bytes
                .zip(c.observed_peak_allocated_bytes)
                .map(|(lo, m)| (lo..=c.predicted_peak_allocated_bytes).contains(&m)),
            predicted_lower_peak_allocated_bytes: c.predicted_lower_peak_allocated_bytes,
            predicted_lower_peak_reserved_bytes: c.predicted_lower_peak_reserved_bytes,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub runs: Vec<String>,
    pub rows: Vec<Row>,
    /// Each prediction against each measurement of the same workload given with it.
    pub prediction_errors: Vec<PredictionErrors>,
    /// Each prediction that ran out of the simulated card's memory.
    pub out_of_memory: Vec<PredictedStop>,
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
    c.insert("phases", r.scope.phases.join(","));
    c
}

/// A prediction's conditions, under the keys a measurement has them: the torch it ran, the
/// allocator backend it modelled, the workload and its phases. The others (the backend's
/// versions, the policies, the device) are a measurement's alone and compared between
/// measurements only.
fn predicted_conditions(p: &PredictionDoc) -> BTreeMap<&'static str, String> {
    let quoted = |v: Option<&str>| v.map_or("null".to_string(), |v| Value::from(v).to_string());
    let mut c = BTreeMap::new();
    c.insert(
        "PyTorch version",
        quoted(p.assumptions.torch_version.as_deref()),
    );
    c.insert(
        "allocator backend",
        quoted(Some(&p.target.allocator_backend)),
    );
    c.insert("workload", p.identity.workload.clone());
    // A measurement lists each phase once (its scope), however often it ran.
    let mut seen = std::collections::HashSet::new();
    let mut phases: Vec<&str> = Vec::new();
    for ph in &p.phases {
        if seen.insert(ph.name.as_str()) {
            phases.push(&ph.name);
        }
    }
    c.insert("phases", phases.join(","));
    c
}

fn conditions_of(run: RunDoc) -> BTreeMap<&'static str, String> {
    match run {
        RunDoc::Measured(r) => conditions(r),
        RunDoc::Predicted(p) => predicted_conditions(p),
    }
}

/// Compares runs, measured or predicted.
pub fn compare(inputs: &[Loaded]) -> Result<Comparison, InputError> {
    let mut results: Vec<(&Loaded, RunDoc)> = Vec::new();
    for l in inputs {
        match RunDoc::of(&l.doc) {
            Some(run) => results.push((l, run)),
            None => {
                return Err(l.wrong(
                    &format!("{MEASURE} or {PREDICTION}"),
                    "compare reads measure results and predictions; a series already holds its trials side by side",
                ));
            }
        }
    }
    let name = |l: &Loaded| l.path.display().to_string();
    let mut warnings = Vec::new();
    // Conditions besides the dimensions; a measurement and a prediction on the keys both have.
    let first = conditions_of(results[0].1);
    for (l, r) in &results[1..] {
        for (key, value) in conditions_of(*r) {
            let Some(theirs) = first.get(key) else {
                continue;
            };
            if *theirs != value {
                warnings.push(format!(
                    "{key} differs: {} has {theirs}, {} has {value}",
                    name(results[0].0),
                    name(l)
                ));
            }
        }
    }
    let prediction_errors = prediction_errors(&results, &mut warnings);
    // Dimensions: one may differ (the variable under study).
    let mut keys: Vec<&String> = results
        .iter()
        .flat_map(|(_, r)| r.dimensions().keys())
        .collect();
    keys.sort();
    keys.dedup();
    let differing: Vec<&String> = keys
        .into_iter()
        .filter(|k| {
            let v0 = results[0].1.dimensions().get(*k);
            results.iter().any(|(_, r)| r.dimensions().get(*k) != v0)
        })
        .collect();
    let variable = (differing.len() == 1).then(|| differing[0].clone());
    if differing.len() > 1 {
        let describe = |k: &String| {
            let values: Vec<String> = results
                .iter()
                .map(|(_, r)| {
                    r.dimensions()
                        .get(k)
                        .map_or("null".into(), Value::to_string)
                })
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
    for (l, run) in &results {
        // A measurement's stored predictions by phase index: one lookup per row, not a search.
        let checks: std::collections::HashMap<u64, &PhaseCheck> = match run {
            RunDoc::Measured(r) => {
                let mut by_index = std::collections::HashMap::new();
                for c in &r.predictions {
                    by_index.entry(c.index).or_insert(c);
                }
                by_index
            }
            RunDoc::Predicted(_) => Default::default(),
        };
        for p in run.phases() {
            let stored = |field: fn(&PhaseCheck) -> u64| match run {
                RunDoc::Measured(r) => predicted(r, &checks, p.index, p.device, field),
                RunDoc::Predicted(_) => None,
            };
            rows.push(Row {
                run: name(l),
                origin: run.origin(),
                phase: p.name.to_string(),
                index: p.index,
                device: p.device.to_string(),
                status: p.status,
                start_allocated_bytes: p.start_allocated_bytes,
                start_reserved_bytes: p.start_reserved_bytes,
                peak_allocated_bytes: p.peak_allocated_bytes,
                peak_reserved_bytes: p.peak_reserved_bytes,
                end_allocated_bytes: p.end_allocated_bytes,
                end_reserved_bytes: p.end_reserved_bytes,
                predicted_peak_allocated_bytes: stored(|c| c.predicted_peak_allocated_bytes),
                predicted_peak_reserved_bytes: stored(|c| c.predicted_peak_reserved_bytes),
            });
        }
    }
    let out_of_memory = results
        .iter()
        .filter_map(|(l, run)| {
            let RunDoc::Predicted(p) = run else {
                return None;
            };
            let oom = p.out_of_memory.as_ref()?;
            Some(PredictedStop {
                run: name(l),
                phase: oom.phase.clone(),
                phase_index: oom.phase_index,
                requested_bytes: oom.requested_bytes,
                module: oom.module.clone(),
                not_reached: p
                    .phases
                    .iter()
                    .filter(|ph| ph.status == PhaseStatus::NotReached)
                    .map(|ph| ph.name.clone())
                    .collect(),
            })
        })
        .collect();
    Ok(Comparison {
        runs: results.iter().map(|(l, _)| name(l)).collect(),
        rows,
        prediction_errors,
        out_of_memory,
        variable,
        comparable: warnings.is_empty(),
        warnings,
    })
}

/// The stored prediction of a phase (first device only: predictions follow one device).
fn predicted(
    r: &MeasureResult,
    checks: &std::collections::HashMap<u64, &PhaseCheck>,
    index: u64,
    device: &str,
    field: fn(&PhaseCheck) -> u64,
) -> Option<u64> {
    if r.scope.devices.first().map(String::as_str) != Some(device) {
        return None;
    }
    checks.get(&index).map(|c| field(c))
}

/// Each prediction against each measurement given with it, in either order: the phases matched
/// as `schema::check` matches them. A prediction of another workload or other dimensions is not
/// set against the measurement; a warning says why.
fn prediction_errors(
    results: &[(&Loaded, RunDoc)],
    warnings: &mut Vec<String>,
) -> Vec<PredictionErrors> {
    let mut out = Vec::new();
    for (pl, p) in results {
        let RunDoc::Predicted(p) = p else { continue };
        for (ml, m) in results {
            let RunDoc::Measured(m) = m else { continue };
            let only_predicted = p
                .dimensions
                .iter()
                .find(|(k, _)| !m.dimensions.contains_key(*k));
            let same = load::check_prediction_of(m, p, pl).map_err(|e| e.to_string());
            let same = same.and_then(|()| match only_predicted {
                Some((k, v)) => Err(format!(
                    "the prediction has {k} = {v} and the measurement no {k}: predict with the measure's options"
                )),
                None => Ok(()),
            });
            if let Err(why) = same {
                warnings.push(format!(
                    "no prediction error between {} and {}: {why}",
                    pl.path.display(),
                    ml.path.display()
                ));
                continue;
            }
            let mut checked = MeasureResult::clone(m);
            checked.predictions.clear();
            crate::schema::check::predictions(&mut checked, p, 0);
            out.push(PredictionErrors {
                predicted_run: pl.path.display().to_string(),
                measured_run: ml.path.display().to_string(),
                predicted_for: p.target.name.clone(),
                measured_on: RunDoc::Measured(m).card().map(String::from),
                phases: checked
                    .predictions
                    .into_iter()
                    .map(PhaseError::of)
                    .collect(),
                gaps: gaps(m, p),
            });
        }
    }
    out
}

/// The measured phases whose predicted twin (matched as `schema::check` matches them: the n-th
/// of a name) has no figure to set against them, each with its reason.
fn gaps(m: &MeasureResult, p: &PredictionDoc) -> Vec<PhaseGap> {
    let twins = crate::schema::check::nth_of_name(
        m.phases.iter().map(|p| p.name.as_str()),
        p.phases.iter().map(|p| p.name.as_str()),
    );
    let mut out = Vec::new();
    for (phase, twin) in m.phases.iter().zip(twins) {
        let Some(k) = twin else {
            continue;
        };
        let status = p.phases[k].status;
        let oom = p.out_of_memory.as_ref();
        let oom_phase = oom
            .and_then(|o| o.phase.as_deref())
            .unwrap_or("(outside any phase)");
        let reason = match status {
            PhaseStatus::Predicted | PhaseStatus::Bounded => continue,
            PhaseStatus::NotReached => format!(
                "not reached: the prediction ran out of memory in {oom_phase} before it — no predicted figure, a gap, not an error"
            ),
            PhaseStatus::OutOfMemory => format!(
                "predicted out of memory here{}: the predicted figures stop before the allocation that did not fit — not a peak, no error computed",
                oom.map_or(String::new(), |o| format!(
                    " (a {} allocation, module {})",
                    Bytes(o.requested_bytes).both(),
                    o.module.as_deref().unwrap_or("(outside any module)")
                ))
            ),
            PhaseStatus::Unpredictable => {
                "unpredictable: something in it depends on data — no predicted figure".into()
            }
            PhaseStatus::Failed => {
                "the workload failed in it in the prediction: its figures stop there, no error computed"
                    .into()
            }
        };
        out.push(PhaseGap {
            phase: phase.name.clone(),
            index: phase.index,
            predicted_status: status,
            measured_peak_reserved_bytes: phase.devices.first().and_then(|d| d.peak_reserved_bytes),
            reason,
        });
    }
    out
}

/// RFC 4180 quoting: only fields with commas, quotes or line breaks are quoted. A field that a
/// spreadsheet would run as a formula (it begins with `=`, `+`, `-`, `@`, a tab or a carriage
/// return: a phase name such as `=HYPERLINK(…)`) is prefixed with `'` and quoted, as OWASP's CSV
/// injection guidance says.
fn field(s: &str) -> String {
    let s = &*crate::output::terminal_safe(s);
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
        "run,phase,index,device,status,start_allocated_bytes,start_reserved_bytes,peak_allocated_bytes,peak_reserved_bytes,end_allocated_bytes,end_reserved_bytes,predicted_peak_allocated_bytes,predicted_peak_reserved_bytes,origin\n",
    );
    let n = |v: Option<u64>| v.map_or(String::new(), |x| x.to_string());
    for r in &c.rows {
        o.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
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
            n(r.predicted_peak_reserved_bytes),
            r.origin
        ));
    }
    o
}

/// The terminal table: one line per run, phase and device, in GiB; then the variable under study,
/// the warnings and the verdict.
pub fn table(c: &Comparison) -> String {
    let mut o = String::new();
    let gib = |v: Option<u64>| v.map_or("null".into(), |b| format!("{:.3}", Bytes(b).gib()));
    let mut runs = Table::new(vec![
        Column::left("run").min(32),
        Column::left("source").min(9),
        Column::left("phase").min(16),
        Column::left("device").min(7),
        Column::left("status").min(11),
        Column::right("peak alloc").min(12),
        Column::right("peak resv").min(12),
        Column::right("end alloc").min(12),
        Column::right("end resv").min(12),
        Column::right("predicted").min(12),
        Column::left("(GiB)").gap(3),
    ]);
    for r in &c.rows {
        runs.row([
            r.run.clone(),
            r.origin.to_string(),
            r.phase.clone(),
            r.device.clone(),
            r.status.clone(),
            gib(r.peak_allocated_bytes),
            gib(r.peak_reserved_bytes),
            gib(r.end_allocated_bytes),
            gib(r.end_reserved_bytes),
            r.predicted_peak_reserved_bytes
                .map_or("—".into(), |b| format!("{:.3}", Bytes(b).gib())),
            String::new(),
        ]);
    }
    o.push_str(&runs.terminal());
    for stop in &c.out_of_memory {
        let _ = writeln!(
            o,
            "\n{}: predicted out of memory in {} (a {} allocation, module {}); {}",
            stop.run,
            stop.phase.as_deref().unwrap_or("(outside any phase)"),
            Bytes(stop.requested_bytes).both(),
            stop.module.as_deref().unwrap_or("(outside any module)"),
            if stop.not_reached.is_empty() {
                "no later phase".to_string()
            } else {
                format!(
                    "not reached: {} — no figure (a gap, not 0)",
                    stop.not_reached.join(", ")
                )
            }
        );
    }
    for e in &c.prediction_errors {
        errors_table(&mut o, e);
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

/// A prediction against a measurement, phase by phase: both figures, the error in bytes and in
/// per cent of the measured figure.
fn errors_table(o: &mut String, e: &PredictionErrors) {
    let _ = writeln!(
        o,
        "\npredicted, not measured: {} (for {}) against the measurement {} (on {}); error = measured − predicted, % of measured",
        e.predicted_run,
        e.predicted_for,
        e.measured_run,
        e.measured_on.as_deref().unwrap_or("an unnamed GPU")
    );
    let gaps = |o: &mut String| {
        let mut gaps = Table::new(vec![Column::left("").min(16), Column::left("")]).indent(2);
        for g in &e.gaps {
            gaps.row([g.phase.clone(), g.reason.clone()]);
        }
        o.push_str(&gaps.terminal());
    };
    if e.phases.is_empty() {
        let _ = writeln!(
            o,
            "  no phase is both predicted and measured: nothing to set side by side"
        );
        gaps(o);
        return;
    }
    let mut phases = Table::new(vec![
        Column::left("phase").min(16),
        Column::right("pred alloc").min(12),
        Column::right("meas alloc").min(12),
        Column::right("error alloc").min(22),
        Column::right("pred resv").min(12),
        Column::right("meas resv").min(12),
        Column::right("error resv").min(22),
        Column::left("(GiB; error in bytes)").gap(3),
    ])
    .indent(2);
    let gib = |v: Option<u64>| v.map_or("null".into(), |b| format!("{:.3}", Bytes(b).gib()));
    let error = |b: Option<i128>, pct: Option<f64>| match (b, pct) {
        (Some(b), Some(pct)) => format!(
            "{} ({}{:.1}%)",
            signed(b),
            if pct < 0.0 { "−" } else { "+" },
            pct.abs()
        ),
        (Some(b), None) => signed(b),
        _ => "null".into(),
    };
    for p in &e.phases {
        phases.row([
            p.phase.clone(),
            gib(Some(p.predicted_peak_allocated_bytes)),
            gib(p.measured_peak_allocated_bytes),
            error(p.error_allocated_bytes, p.error_allocated_pct),
            gib(Some(p.predicted_peak_reserved_bytes)),
            gib(p.measured_peak_reserved_bytes),
            error(p.error_reserved_bytes, p.error_reserved_pct),
            String::new(),
        ]);
        // A bounded phase: the row above is its upper bound; its lower bound beneath it.
        if let Some(lo) = p.predicted_lower_peak_allocated_bytes {
            phases.row([
                "  lower bound".into(),
                gib(Some(lo)),
                String::new(),
                String::new(),
                gib(p.predicted_lower_peak_reserved_bytes),
                String::new(),
                String::new(),
                match p.within_bounds {
                    Some(true) => "measured between the bounds".into(),
                    Some(false) => "measured OUTSIDE the bounds".into(),
                    None => String::new(),
                },
            ]);
        }
    }
    o.push_str(&phases.terminal());
    gaps(o);
}

/// Bytes with their sign and thousands grouped (`+1,048,576`, `−2,097,152`).
fn signed(b: i128) -> String {
    format!(
        "{}{}",
        if b < 0 { "−" } else { "+" },
        crate::units::group_thousands(b.unsigned_abs())
    )
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

    #[test]
    fn csv_shows_control_and_bidi_characters_escaped() {
        let f = field("a\u{1b}[2J\u{1b}]0;t\u{7}b\u{202e}c\u{2066}d");
        assert_eq!(f, "a\\x1b[2J\\x1b]0;t\\x07b\\u{202e}c\\u{2066}d");
    }
}
