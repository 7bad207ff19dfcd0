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
        .stderr(predicate::str::contains("takes no series yet"));
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
