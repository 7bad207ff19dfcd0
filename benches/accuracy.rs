//! Accuracy of the predictions against GPU measurements: for every result committed under
//! docs/measurements/ that holds a prediction (`measure` runs one for the measured card after the
//! measurement), each phase's predicted peak next to the measured one. Prints the median and worst
//! error of peak allocated and peak reserved and the share of predictions at or above the
//! observation. Targets (issue 11): allocated median ≤ 1%, worst ≤ 3%; reserved median ≤ 3%,
//! worst ≤ 8%; ≥ 95% at or above. Run with `cargo bench --bench accuracy`.

use std::path::{Path, PathBuf};

use iteragpu::schema::measure::MeasureResult;
use iteragpu::schema::measure::PhaseCheck;

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "json") {
            out.push(p);
        }
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/measurements");
    let mut paths = Vec::new();
    files(&root, &mut paths);
    paths.sort();
    let mut rows: Vec<(String, PhaseCheck)> = Vec::new();
    for path in &paths {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        let Ok(r) = serde_json::from_str::<MeasureResult>(&text) else {
            continue;
        };
        let fake = r
            .environment
            .python
            .as_ref()
            .and_then(|p| p.torch_str("version"))
            .is_some_and(|v| v.contains("fake"));
        if fake || r.prediction.is_none() {
            continue;
        }
        let name = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        rows.extend(r.predictions.iter().cloned().map(|c| (name.clone(), c)));
    }
    if rows.is_empty() {
        println!(
            "no GPU result with a prediction under {} yet: nothing to score",
            root.display()
        );
        return;
    }
    println!(
        "{:<44} {:<16} {:>15} {:>15} {:>9} {:>15} {:>15} {:>9}",
        "result", "phase", "pred alloc", "meas alloc", "err", "pred resv", "meas resv", "err"
    );
    let fmt = |v: Option<f64>| v.map_or("n/a".into(), |p| format!("{p:+.2}%"));
    for (name, c) in &rows {
        println!(
            "{:<44} {:<16} {:>15} {:>15} {:>9} {:>15} {:>15} {:>9}",
            name,
            c.phase,
            c.predicted_peak_allocated_bytes,
            c.observed_peak_allocated_bytes
                .map_or("n/a".into(), |v| v.to_string()),
            fmt(c.error_allocated_pct),
            c.predicted_peak_reserved_bytes,
            c.observed_peak_reserved_bytes
                .map_or("n/a".into(), |v| v.to_string()),
            fmt(c.error_reserved_pct),
        );
    }
    let alloc: Vec<f64> = rows
        .iter()
        .filter_map(|(_, c)| c.error_allocated_pct.map(f64::abs))
        .collect();
    let resv: Vec<f64> = rows
        .iter()
        .filter_map(|(_, c)| c.error_reserved_pct.map(f64::abs))
        .collect();
    // The error is (observed − predicted) ÷ observed: ≤ 0 means predicted at or above.
    let at_or_above = rows
        .iter()
        .filter(|(_, c)| c.error_allocated_pct.is_some_and(|e| e <= 0.0))
        .count();
    let worst = |v: &[f64]| v.iter().copied().fold(0.0f64, f64::max);
    println!(
        "\n{} phase(s): peak allocated median {} worst {:.2}% (targets 1% / 3%); peak reserved median {} worst {:.2}% (targets 3% / 8%); {:.1}% predicted at or above the observation (target 95%)",
        rows.len(),
        median(alloc.clone()).map_or("n/a".into(), |m| format!("{m:.2}%")),
        worst(&alloc),
        median(resv.clone()).map_or("n/a".into(), |m| format!("{m:.2}%")),
        worst(&resv),
        100.0 * at_or_above as f64 / rows.len() as f64
    );
}
