//! A prediction (`iteragpu.prediction/1`) wherever a measurement is read: `report`, `explain`,
//! `compare` and `cards`, from the committed predictions made with real torch on the CPU
//! (`tests/fixtures/fiche/prediction*.json`). Each says "predicted, not measured"; no predicted
//! figure is called observed.

use crate::common::{fixture, iteragpu};
use predicates::prelude::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fiche(name: &str) -> PathBuf {
    fixture(&format!("fiche/{name}"))
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `estimate --json` of the dense network's training (8,402,944 parameters, fp32, AdamW).
fn training_estimate(dir: &Path) -> PathBuf {
    let out = iteragpu()
        .args([
            "estimate",
            "--parameters",
            "8402944",
            "--bits",
            "32",
            "--train",
            "--optimizer",
            "adamw",
            "--precision",
            "fp32",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = dir.join("estimate.json");
    std::fs::write(&path, &out.stdout).unwrap();
    path
}

#[test]
fn report_makes_the_fiche_of_a_prediction() {
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("fiche.md");
    let estimate = training_estimate(dir.path());
    iteragpu()
        .arg("report")
        .arg(fiche("prediction_train.json"))
        .arg("--estimate")
        .arg(&estimate)
        .arg("--output")
        .arg(&md)
        .assert()
        .success();
    let text = std::fs::read_to_string(&md).unwrap();
    for words in [
        "predicted, not measured",
        "predicted to fit A100 40GB",
        "in `optimizer_step`",
        "categories optimizer state",
        "torch 2.15.0+cu132",
        "## Predicted (not measured)",
        "optimizer states (alive at the predicted peak)",
    ] {
        assert!(text.contains(words), "`{words}` missing:\n{text}");
    }
    // Nothing predicted is called observed, and the estimate's gradients sit on their line.
    assert!(!text.to_lowercase().contains("observed"), "{text}");
    assert!(text.contains("| gradients (alive at the predicted peak) | 0.03 | 0.03 |"));
    // French, HTML.
    let html = dir.path().join("fiche.html");
    iteragpu()
        .arg("report")
        .arg(fiche("prediction_train.json"))
        .args(["--lang", "fr", "--output"])
        .arg(&html)
        .assert()
        .success();
    let text = std::fs::read_to_string(&html).unwrap();
    assert!(text.contains("prédit, pas mesuré"));
    assert!(text.contains("prédit pour tenir sur A100 40GB"));
    assert!(!text.contains("Observé"));
}

#[test]
fn a_prediction_short_of_the_card_is_predicted_not_to_fit() {
    let dir = tempfile::tempdir().unwrap();
    let mut doc = json(&fiche("prediction_train.json"));
    doc["target"]["total_memory"] = 500_000_000u64.into();
    let small = dir.path().join("small.json");
    std::fs::write(&small, doc.to_string()).unwrap();
    let md = dir.path().join("fiche.md");
    iteragpu()
        .arg("report")
        .arg(&small)
        .arg("--output")
        .arg(&md)
        .assert()
        .success();
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(
        text.contains("predicted NOT to fit A100 40GB") && text.contains("short by"),
        "{text}"
    );
}

#[test]
fn a_prediction_with_a_series_or_the_estimate_of_another_model_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("fiche.md");
    iteragpu()
        .arg("report")
        .arg(fiche("prediction.json"))
        .arg(fiche("series.json"))
        .arg("--output")
        .arg(&md)
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "a measured series is reported with a measurement of the same workload",
        ));
    assert!(!md.exists());
    let other = dir.path().join("other.json");
    let out = iteragpu()
        .args(["estimate", "--parameters", "1000", "--bits", "32", "--json"])
        .output()
        .unwrap();
    std::fs::write(&other, &out.stdout).unwrap();
    for command in ["report", "explain"] {
        let mut cmd = iteragpu();
        cmd.arg(command)
            .arg(fiche("prediction.json"))
            .arg("--estimate")
            .arg(&other);
        if command == "report" {
            cmd.arg("--output").arg(&md);
        }
        cmd.assert().code(1).stderr(predicate::str::contains(
            "the predicted model has 8,402,944",
        ));
    }
}

#[test]
fn explain_builds_the_ledger_of_a_prediction_by_category() {
    let dir = tempfile::tempdir().unwrap();
    let estimate = training_estimate(dir.path());
    let pred = fiche("prediction_train.json");
    iteragpu()
        .arg("explain")
        .arg(&pred)
        .assert()
        .success()
        .stdout(predicate::str::contains("predicted, not measured"))
        .stdout(predicate::str::contains("optimizer_step #5"))
        .stdout(predicate::str::contains("observed").not());
    let out = iteragpu()
        .arg("explain")
        .arg(&pred)
        .arg("--estimate")
        .arg(&estimate)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ledger: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ledger["explained"], "prediction");
    assert_eq!(ledger["phase"], "optimizer_step");
    let at_peak = &json(&pred)["phases"][5]["at_peak"]["by_category"];
    let line = |id: &str| {
        ledger["lines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["id"] == id)
            .unwrap_or_else(|| panic!("no {id} line"))
            .clone()
    };
    assert_eq!(line("gradients")["predicted"]["bytes"], at_peak["gradient"]);
    assert_eq!(
        line("optimizer_states")["predicted"]["bytes"],
        at_peak["optimizer state"]
    );
    assert_eq!(line("weights")["predicted"]["bytes"], at_peak["parameter"]);
    // The estimate's terms on the same lines, by their ids.
    let est = json(&estimate);
    let term = |id: &str| {
        est["terms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .unwrap()["bytes"]
            .clone()
    };
    assert_eq!(line("gradients")["estimate"]["bytes"], term("gradients"));
    assert_eq!(
        line("optimizer_states")["estimate"]["bytes"],
        term("optimizer_states")
    );
    // The category lines add up to the predicted peak allocated; nothing is observed.
    let sum: u64 = ledger["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["kind"] == "term" && l["checkpoint"] == "predicted peak of optimizer_step")
        .map(|l| l["predicted"]["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(
        Some(sum),
        line("peak_allocated")["predicted"]["bytes"].as_u64()
    );
    assert!(
        ledger["lines"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["observed"].is_null())
    );
    // A prediction is given once.
    iteragpu()
        .arg("explain")
        .arg(&pred)
        .arg("--prediction")
        .arg(&pred)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("already a prediction"));
}

#[test]
fn compare_sets_a_prediction_beside_a_measurement_in_either_order() {
    let (pred, measured) = (fiche("prediction.json"), fiche("result.json"));
    for files in [[&pred, &measured], [&measured, &pred]] {
        let out = iteragpu()
            .arg("compare")
            .args(files)
            .arg("--json")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let c: Value = serde_json::from_slice(&out.stdout).unwrap();
        let errors = &c["prediction_errors"][0];
        assert_eq!(errors["predicted_for"], "H200 141GB");
        let (p, m) = (json(&pred), json(&measured));
        let phase = &errors["phases"][2];
        assert_eq!(phase["phase"], "cold_forward");
        let predicted = p["phases"][2]["peak_reserved_bytes"].as_i64().unwrap();
        let got = m["phases"][2]["devices"][0]["peak_reserved_bytes"]
            .as_i64()
            .unwrap();
        assert_eq!(
            phase["error_reserved_bytes"].as_i64(),
            Some(got - predicted)
        );
        let pct = phase["error_reserved_pct"].as_f64().unwrap();
        assert!((pct - 100.0 * (got - predicted) as f64 / got as f64).abs() < 1e-9);
        let origins: Vec<&str> = c["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["origin"].as_str().unwrap())
            .collect();
        assert!(origins.contains(&"predicted") && origins.contains(&"measured"));
    }
    iteragpu()
        .arg("compare")
        .arg(&pred)
        .arg(&measured)
        .assert()
        .success()
        .stdout(predicate::str::contains("predicted, not measured: "))
        .stdout(predicate::str::contains("error = measured − predicted"));
    // Another workload (training, not inference): flagged, no error computed.
    let out = iteragpu()
        .arg("compare")
        .arg(&measured)
        .arg(fiche("prediction_train.json"))
        .arg("--json")
        .output()
        .unwrap();
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(c["prediction_errors"], serde_json::json!([]));
    assert_eq!(c["comparable"], false);
    assert!(
        c["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("no prediction error between"))
    );
    // A series is still refused, naming both kinds compare reads.
    iteragpu()
        .arg("compare")
        .arg(&pred)
        .arg(fiche("series.json"))
        .assert()
        .code(1)
        .stderr(predicate::str::contains("iteragpu.prediction/1"));
}

#[test]
fn cards_rank_the_cards_for_a_predicted_peak() {
    let pred = fiche("prediction_train.json");
    let out = iteragpu()
        .args(["cards", "--json", "--from"])
        .arg(&pred)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let peak = json(&pred)["phases"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["peak_reserved_bytes"].as_u64())
        .max();
    assert_eq!(doc["need_bytes"].as_u64(), peak);
    assert!(
        doc["need_source"]
            .as_str()
            .unwrap()
            .contains("a prediction, not a measurement")
    );
    assert!(
        doc["cards"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["fits"] == true)
    );
    iteragpu()
        .args(["cards", "--from"])
        .arg(fiche("result.json"))
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "highest peak reserved of one device",
        ));
}

/// `predict --script tests/fixtures/scripts/predict_oom.py --card "A100 40GB" --memory-limit
/// 765460479` with real torch on the CPU: the simulated card runs out of memory in `forward`.
fn oom_prediction() -> PathBuf {
    fiche("prediction_oom.json")
}

#[test]
fn report_words_a_predicted_out_of_memory_in_both_languages_and_formats() {
    let dir = tempfile::tempdir().unwrap();
    let doc = json(&oom_prediction());
    let unlimited = doc["out_of_memory"]["unlimited_driver_view_bytes"]
        .as_u64()
        .unwrap();
    let class = doc["out_of_memory"]["post_mortem"]["diagnosis"]["class"]
        .as_str()
        .unwrap()
        .to_string();
    let fiche = |lang: &str, ext: &str| {
        let out = dir.path().join(format!("fiche-{lang}.{ext}"));
        iteragpu()
            .arg("report")
            .arg(oom_prediction())
            .args(["--lang", lang, "--output"])
            .arg(&out)
            .assert()
            .success();
        std::fs::read_to_string(&out).unwrap()
    };
    let gib = |b: u64| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64);
    for ext in ["md", "html"] {
        let en = fiche("en", ext);
        for words in [
            "predicted, not measured",
            "predicted out of memory on A100 40GB (0.71 GiB, --memory-limit 765,460,479 on A100 40GB) in phase `forward`",
            "allocation (module `Sequential.1`, category activation, `tests/fixtures/scripts/predict_oom.py:11`)",
            "free — later phases not reached (`backward`)",
            &format!("{class}: "),
            &format!("a driver's view of {}", gib(unlimited)),
            "whole total_memory (40.00 GiB) would hold it",
            "not reached",
            "Out-of-memory post-mortem",
            "allocated when the allocation failed",
        ] {
            let words = if ext == "html" {
                words.replace('`', "").replace('\'', "&#39;")
            } else {
                words.to_string()
            };
            // Sizes are joined to their unit by a no-break space.
            let plain = en
                .replace("<code>", "")
                .replace("</code>", "")
                .replace('\u{a0}', " ");
            assert!(plain.contains(&words), "{ext}: `{words}` missing:\n{en}");
        }
        // Neither a complete prediction's verdict nor a zero for the phase never reached.
        assert!(!en.contains("predicted to fit A100"), "{en}");
        assert!(!en.to_lowercase().contains("observed"), "{en}");
        let fr = fiche("fr", ext)
            .replace("<code>", "")
            .replace("</code>", "")
            .replace('\u{a0}', " ");
        for words in [
            "prédit, pas mesuré",
            "prédit en manque de mémoire sur A100 40GB",
            "dans la phase",
            "phases suivantes non atteintes",
            "non atteinte",
            "avec une mémoire illimitée",
            "Autopsie du manque de mémoire",
        ] {
            assert!(fr.contains(words), "{ext}: `{words}` missing:\n{fr}");
        }
    }
    // The Markdown row of the phase never reached says so in every figure, never 0.
    let md = std::fs::read_to_string(dir.path().join("fiche-en.md")).unwrap();
    let row = md
        .lines()
        .find(|l| l.starts_with("| `  backward`"))
        .expect("the backward row");
    assert_eq!(row.matches("| not reached ").count(), 5, "{row}");
}

#[test]
fn explain_builds_the_ledger_of_a_predicted_out_of_memory_on_what_was_alive() {
    let pred = oom_prediction();
    let doc = json(&pred);
    iteragpu()
        .arg("explain")
        .arg(&pred)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "the prediction stopped at an out-of-memory in forward #2 — predicted, not measured",
        ))
        .stdout(predicate::str::contains(
            "built on the out-of-memory, not on a peak",
        ))
        .stdout(predicate::str::contains(
            "predicted out of memory in forward",
        ))
        .stdout(predicate::str::contains("out-of-memory post-mortem: "))
        .stdout(predicate::str::contains(
            "the phases after it were not reached",
        ))
        .stdout(predicate::str::contains("observed").not());
    let out = iteragpu()
        .arg("explain")
        .arg(&pred)
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success());
    let ledger: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ledger["explained"], "prediction");
    assert_eq!(ledger["built_on"], "out_of_memory");
    assert_eq!(ledger["phase"], "forward");
    assert_eq!(ledger["out_of_memory"], doc["out_of_memory"]);
    assert_eq!(ledger["post_mortem"], doc["out_of_memory"]["post_mortem"]);
    let oom = &doc["out_of_memory"];
    let line = |id: &str| {
        ledger["lines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["id"] == id)
            .unwrap_or_else(|| panic!("no {id} line"))
            .clone()
    };
    // The categories alive at the failing allocation add up to what was allocated then.
    let sum: u64 = ledger["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| {
            l["kind"] == "term" && l["id"] != "allocator_slack" && l["id"] != "outside_allocator"
        })
        .map(|l| l["predicted"]["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(Some(sum), oom["allocated_bytes"].as_u64());
    assert_eq!(
        line("peak_allocated")["predicted"]["bytes"],
        oom["allocated_bytes"]
    );
    assert_eq!(
        line("peak_reserved")["predicted"]["bytes"],
        oom["reserved_bytes"]
    );
    assert_eq!(
        line("weights")["predicted"]["bytes"],
        oom["alive"]["by_category"]["parameter"]
    );
    assert_eq!(
        line("weights")["checkpoint"],
        "predicted out of memory in forward"
    );
    // A complete prediction's ledger stays on its peak.
    let out = iteragpu()
        .arg("explain")
        .arg(fiche("prediction_train.json"))
        .arg("--json")
        .output()
        .unwrap();
    let ledger: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ledger["built_on"], "peak");
    assert!(ledger.get("out_of_memory").is_none());
}

/// `prediction.json` (the workload of `result.json`) as if the card had run out of memory in
/// `cold_forward`: that phase `out_of_memory`, the later ones `not_reached` with null figures.
fn ran_out_in_cold_forward(dir: &Path) -> PathBuf {
    let mut doc = json(&fiche("prediction.json"));
    let oom = json(&oom_prediction());
    doc["status"] = "out_of_memory".into();
    let mut record = oom["out_of_memory"].clone();
    record["phase"] = "cold_forward".into();
    record["phase_index"] = 2.into();
    doc["out_of_memory"] = record;
    doc["capacity"] = oom["capacity"].clone();
    for (k, phase) in doc["phases"].as_array_mut().unwrap().iter_mut().enumerate() {
        if k == 2 {
            phase["status"] = "out_of_memory".into();
        } else if k > 2 {
            phase["status"] = "not_reached".into();
            for f in [
                "start_allocated_bytes",
                "start_reserved_bytes",
                "peak_allocated_bytes",
                "peak_reserved_bytes",
                "peak_tensor_bytes",
                "end_allocated_bytes",
                "end_reserved_bytes",
                "driver_view_bytes",
                "at_peak",
            ] {
                phase[f] = Value::Null;
            }
        }
    }
    let path = dir.join("oom.json");
    std::fs::write(&path, doc.to_string()).unwrap();
    path
}

#[test]
fn compare_leaves_phases_not_reached_as_gaps_and_marks_the_out_of_memory() {
    let dir = tempfile::tempdir().unwrap();
    let pred = ran_out_in_cold_forward(dir.path());
    let measured = fiche("result.json");
    let out = iteragpu()
        .arg("compare")
        .arg(&pred)
        .arg(&measured)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    let errors = &c["prediction_errors"][0];
    // Only the phases predicted whole have an error.
    let phases: Vec<&str> = errors["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["model_load", "inputs"]);
    let gaps = errors["gaps"].as_array().unwrap();
    assert_eq!(gaps.len(), 7, "{gaps:?}");
    assert_eq!(gaps[0]["phase"], "cold_forward");
    assert_eq!(gaps[0]["predicted_status"], "out_of_memory");
    assert!(
        gaps[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("predicted out of memory here")
    );
    assert!(gaps[0]["measured_peak_reserved_bytes"].as_u64().is_some());
    for g in &gaps[1..] {
        assert_eq!(g["predicted_status"], "not_reached");
        assert!(
            g["reason"]
                .as_str()
                .unwrap()
                .contains("ran out of memory in cold_forward before it"),
            "{g}"
        );
        assert!(g.get("error_reserved_bytes").is_none());
    }
    assert_eq!(c["out_of_memory"][0]["phase"], "cold_forward");
    assert_eq!(
        c["out_of_memory"][0]["not_reached"]
            .as_array()
            .unwrap()
            .len(),
        6
    );
    // The rows of the phases never reached hold no figure: null, never 0.
    let rows = c["rows"].as_array().unwrap();
    let not_reached: Vec<&Value> = rows
        .iter()
        .filter(|r| r["status"] == "not_reached")
        .collect();
    assert_eq!(not_reached.len(), 6);
    assert!(
        not_reached
            .iter()
            .all(|r| r["peak_reserved_bytes"].is_null())
    );
    iteragpu()
        .arg("compare")
        .arg(&pred)
        .arg(&measured)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "predicted out of memory in cold_forward (a ",
        ))
        .stdout(predicate::str::contains("no figure (a gap, not 0)"))
        .stdout(predicate::str::contains("warmup           not reached: the prediction ran out of memory in cold_forward before it"));
}

/// The prediction of batch 4 and the predicted frontier of the same workload at the same
/// capacity (`tests/fixtures/fiche/README.md`).
fn with_frontier() -> (PathBuf, PathBuf) {
    (
        fiche("prediction_batch.json"),
        fiche("predicted_series.json"),
    )
}

/// A fiche's text with HTML's code tags and no-break spaces taken out, to match sentences.
fn plain(text: &str) -> String {
    text.replace("<code>", "")
        .replace("</code>", "")
        .replace(['\u{a0}', '\u{202f}'], " ")
}

#[test]
fn report_gives_a_prediction_its_predicted_frontier_in_both_languages_and_formats() {
    let dir = tempfile::tempdir().unwrap();
    let (prediction, series) = with_frontier();
    let frontier = &json(&series)["frontier"];
    // The committed files decide inside the range searched, as the sentence below says.
    assert_eq!(
        (
            frontier["last_success"].as_u64(),
            frontier["first_failure"].as_u64()
        ),
        (Some(8), Some(9))
    );
    let estimate = dir.path().join("estimate.json");
    let out = iteragpu()
        .args([
            "estimate",
            "--parameters",
            "8402944",
            "--bits",
            "32",
            "--json",
        ])
        .output()
        .unwrap();
    std::fs::write(&estimate, &out.stdout).unwrap();
    let fiche = |lang: &str, ext: &str| {
        let out = dir.path().join(format!("fiche-{lang}.{ext}"));
        iteragpu()
            .arg("report")
            .arg(&prediction)
            .arg(&series)
            .arg("--estimate")
            .arg(&estimate)
            .args(["--lang", lang, "--output"])
            .arg(&out)
            .assert()
            .success();
        plain(&std::fs::read_to_string(&out).unwrap())
    };
    let code = |words: &str, ext: &str| {
        if ext == "html" {
            words.replace('`', "")
        } else {
            words.to_string()
        }
    };
    for ext in ["md", "html"] {
        let en = fiche("en", ext);
        for words in [
            "predicted: `batch` up to 8 fits H200 141GB (0.88 GiB, `--memory-limit 950,000,000`); 9 does not (phase `cold_forward`, allocation of 0.07 GiB float32 [9, 1024, 2048] temporary in `Sequential.2`, `iteragpu/workloads/dense.py:55`)",
            "Predicted series",
            "Predicted frontier of `batch`: largest predicted to fit 8, first predicted not to fit 9",
            "predicted to fit H200 141GB (--memory-limit 0.88 GiB)",
            "predicted_series.json",
        ] {
            let words = code(words, ext);
            assert!(en.contains(&words), "{ext}: `{words}` missing:\n{en}");
        }
        assert!(!en.to_lowercase().contains("observed"), "{en}");
        let fr = fiche("fr", ext);
        for words in [
            "prédit : `batch` jusqu’à 8 tient sur H200 141GB (0,88 Gio, `--memory-limit 950,000,000`) ; 9 ne tient pas (phase `cold_forward`, allocation de 0,07 Gio float32 [9, 1024, 2048] temporaires dans `Sequential.2`, `iteragpu/workloads/dense.py:55`)",
            "Série prédite",
            "Frontière prédite de `batch` : plus grande valeur qui tient 8, première qui ne tient pas 9",
        ] {
            let words = code(words, ext);
            assert!(fr.contains(&words), "{ext}: `{words}` missing:\n{fr}");
        }
        if ext == "html" {
            // The series' chart against the capacity is drawn.
            assert!(en.matches("<svg").count() >= 2, "{en}");
        }
    }
}

#[test]
fn a_predicted_series_alone_makes_the_fiche_of_its_largest_fitting_trial() {
    let dir = tempfile::tempdir().unwrap();
    let (_, series) = with_frontier();
    for (lang, words) in [
        (
            "en",
            [
                "the prediction shown is its trial at `batch` = 8, the largest predicted to fit",
                "predicted: `batch` up to 8 fits H200 141GB",
            ],
        ),
        (
            "fr",
            [
                "la prédiction montrée est son essai à `batch` = 8",
                "prédit : `batch` jusqu’à 8 tient sur H200 141GB",
            ],
        ),
    ] {
        let md = dir.path().join(format!("alone-{lang}.md"));
        iteragpu()
            .arg("report")
            .arg(&series)
            .args(["--lang", lang, "--output"])
            .arg(&md)
            .assert()
            .success();
        let text = plain(&std::fs::read_to_string(&md).unwrap());
        for w in words {
            assert!(text.contains(w), "`{w}` missing:\n{text}");
        }
        assert!(text.contains("`batch=8 · context=1024"), "{text}");
        // The series is the one file attached.
        assert_eq!(
            text.matches("predicted_series.json` — SHA-256").count(),
            1,
            "{text}"
        );
    }
}

#[test]
fn a_predicted_series_of_another_workload_card_or_capacity_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (prediction, series) = with_frontier();
    let md = dir.path().join("fiche.md");
    let refused = |files: &[&Path], words: &[&str]| {
        let mut cmd = iteragpu();
        cmd.arg("report").args(files).arg("--output").arg(&md);
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        for w in words {
            assert!(stderr.contains(w), "`{w}` missing: {stderr}");
        }
        assert!(!md.exists());
    };
    // Another dimension besides the varied one.
    let mut doc = json(&prediction);
    doc["dimensions"]["context"] = 512.into();
    let other_context = dir.path().join("context512.json");
    std::fs::write(&other_context, doc.to_string()).unwrap();
    refused(
        &[&other_context, &series],
        &[
            "context512.json has context = 512 and trial 1 of the predicted series",
            "predicted_series.json has context = 1024",
            "make both with the same options",
        ],
    );
    // Another card.
    let mut doc = json(&series);
    doc["target"]["name"] = "A100 40GB".into();
    let other_card = dir.path().join("a100.json");
    std::fs::write(&other_card, doc.to_string()).unwrap();
    refused(
        &[&prediction, &other_card],
        &[
            "is for `H200 141GB` and the predicted series",
            "for `A100 40GB`",
        ],
    );
    // The same card at its whole total_memory, not at the series' --memory-limit.
    refused(
        &[&fiche("prediction.json"), &series],
        &["is held against 150.11 GB", "against 0.95 GB = 0.88 GiB"],
    );
    // A measured series beside a prediction: its frontier is drawn with its measurement.
    refused(
        &[&prediction, &fiche("series.json")],
        &[
            "a measured series is reported with a measurement",
            "shows both frontiers",
        ],
    );
    // A measured series alone, and a series before its run.
    refused(
        &[&fiche("series.json")],
        &["a measured series alone makes no fiche yet: give the measurement of one value first"],
    );
    refused(&[&series, &prediction], &["the run comes first"]);
}
