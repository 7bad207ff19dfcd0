//! Benchmark of the estimate's accuracy: for every GPU result committed under docs/measurements/,
//! the predicted peak next to the measured one and the error, phase by phase. Dense results are
//! predicted again with the current model (so improvements are re-scored against old
//! recordings); other workloads use the predictions stored at measurement time.
//! Target: under 5% on every recorded case. Run with `cargo bench --bench accuracy`.

use std::path::{Path, PathBuf};

use iteragpu::measure::result::MeasureResult;
use iteragpu::prediction::check::{PhaseCheck, error_pct};
use iteragpu::prediction::hand_replay::{self as phases, DenseSpec};

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

fn dense_predictions(r: &MeasureResult) -> Option<Vec<phases::PhasePrediction>> {
    let d = &r.dimensions;
    let get = |k: &str| d.get(k).and_then(serde_json::Value::as_u64);
    let dtype: iteragpu::dtype::Dtype = d.get("dtype")?.as_str()?.parse().ok()?;
    let train_steps = (d.get("task").and_then(|v| v.as_str()) == Some("train"))
        .then(|| get("steps"))
        .flatten();
    if d.get("gradient_checkpointing").and_then(|v| v.as_bool()) == Some(true) {
        return None;
    }
    Some(phases::dense(&DenseSpec {
        batch: get("batch")?,
        context: get("context")?,
        width: get("width")?,
        depth: get("depth")?,
        element_bytes: dtype.bytes(),
        warmup: r.policies.warmup,
        repeats: r.policies.repeats,
        train_steps,
        adamw: d.get("optimizer").and_then(|v| v.as_str()) != Some("sgd"),
    }))
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
        if r.environment
            .python
            .as_ref()
            .and_then(|p| p.torch_str("version"))
            .is_some_and(|v| v.contains("fake"))
        {
            continue;
        }
        let name = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        let comparisons = match (
            r.identity.workload.as_str(),
            r.policies.protocol.as_str(),
            dense_predictions(&r),
        ) {
            ("dense", "per-phase", Some(pred)) if r.scope.devices.len() == 1 => {
                let mut copy = r.clone();
                copy.predictions.clear();
                iteragpu::prediction::check::predictions(&mut copy, &pred, 0);
                copy.predictions
            }
            _ => r.predictions.clone(),
        };
        rows.extend(comparisons.into_iter().map(|c| (name.clone(), c)));
    }
    if rows.is_empty() {
        println!(
            "no recorded GPU results with predictions under {} yet: nothing to score",
            root.display()
        );
        return;
    }
    println!(
        "{:<40} {:<16} {:>16} {:>16} {:>9} {:>9}",
        "result", "phase", "predicted resv", "measured resv", "err resv", "err alloc"
    );
    let mut over = 0;
    for (name, c) in &rows {
        let resv = error_pct(
            c.predicted_peak_reserved_bytes,
            c.observed_peak_reserved_bytes,
        );
        let fmt = |v: Option<f64>| v.map_or("n/a".into(), |p| format!("{p:+.1}%"));
        if resv.is_some_and(|e| e.abs() > 5.0)
            || c.error_allocated_pct.is_some_and(|e| e.abs() > 5.0)
        {
            over += 1;
        }
        println!(
            "{:<40} {:<16} {:>16} {:>16} {:>9} {:>9}",
            name,
            c.phase,
            c.predicted_peak_reserved_bytes,
            c.observed_peak_reserved_bytes
                .map_or("n/a".into(), |v| v.to_string()),
            fmt(resv),
            fmt(c.error_allocated_pct)
        );
    }
    println!("{} phase(s) scored; {over} above the 5% target", rows.len());
}
