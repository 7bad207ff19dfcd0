//! The fiche's `Document`, English and French, from the frozen inputs in `tests/fixtures/fiche/`:
//! any change of content shows here as a reviewed diff (`cargo insta review`).

use std::fmt::Write;
use std::path::Path;

use super::build;
use crate::report::document::Block;
use crate::report::format::{Lang, Style, Units};
use crate::schema::load::{Loaded, load};

fn fixture(name: &str) -> Loaded {
    load(&Path::new("tests/fixtures/fiche").join(name)).expect("a frozen fixture")
}

/// One block per paragraph, one verdict line, table row or chart per line: every field of the
/// document is written, as it is (cells and charts in their `Debug` form).
fn write_block(out: &mut String, block: &Block) {
    match block {
        Block::Verdict(lines) => {
            for v in lines {
                writeln!(
                    out,
                    "verdict {:?} | {} | {} | → {:?}",
                    v.tone, v.label, v.value, v.section
                )
                .unwrap();
            }
        }
        Block::Heading(h) => writeln!(out, "## {h}").unwrap(),
        Block::Para(p) => writeln!(out, "{p}").unwrap(),
        Block::Table { header, rows } => {
            writeln!(out, "table {header:?}").unwrap();
            for row in rows {
                writeln!(out, "  {row:?}").unwrap();
            }
        }
        Block::List(items) => {
            for item in items {
                writeln!(out, "- {item}").unwrap();
            }
        }
        Block::Chart(chart) => writeln!(out, "chart {chart:?}").unwrap(),
    }
    out.push('\n');
}

/// The document as text: its title and blocks, and each attachment by path and SHA-256 (the raw
/// text is the fixture itself).
fn snapshot(result: &str, series: Option<&str>, estimate: Option<&str>, lang: Lang) -> String {
    let (result, series, estimate) = (fixture(result), series.map(fixture), estimate.map(fixture));
    let fiche = build(
        &result,
        series.as_ref().as_slice(),
        estimate.as_ref(),
        Style::new(lang, Units::Gib),
    )
    .expect("the fixtures make a fiche");
    let doc = fiche.document;
    let mut out = format!("{}\n\n", doc.title);
    for w in &fiche.warnings {
        writeln!(out, "warning: {w}").unwrap();
    }
    for block in &doc.blocks {
        write_block(&mut out, block);
    }
    for a in &doc.attachments {
        writeln!(out, "attached: {} {}", a.path, a.sha256).unwrap();
    }
    out
}

#[test]
fn a_completed_run_with_its_series_and_estimate() {
    let args = (Some("series.json"), Some("estimate.json"));
    insta::assert_snapshot!(
        "complete_en",
        snapshot("result.json", args.0, args.1, Lang::En)
    );
    insta::assert_snapshot!(
        "complete_fr",
        snapshot("result.json", args.0, args.1, Lang::Fr)
    );
}

#[test]
fn a_run_that_ran_out_of_memory() {
    insta::assert_snapshot!("failed_en", snapshot("failed.json", None, None, Lang::En));
    insta::assert_snapshot!("failed_fr", snapshot("failed.json", None, None, Lang::Fr));
}

#[test]
fn a_run_with_its_prediction() {
    insta::assert_snapshot!(
        "predicted_en",
        snapshot("predicted.json", None, Some("estimate.json"), Lang::En)
    );
    insta::assert_snapshot!(
        "predicted_fr",
        snapshot("predicted.json", None, Some("estimate.json"), Lang::Fr)
    );
}

/// A prediction alone (no GPU run): "predicted, not measured", the target and the deciding phase.
#[test]
fn a_prediction_without_a_gpu() {
    insta::assert_snapshot!(
        "prediction_en",
        snapshot("prediction_train.json", None, None, Lang::En)
    );
    insta::assert_snapshot!(
        "prediction_fr",
        snapshot("prediction_train.json", None, None, Lang::Fr)
    );
}

/// A prediction that ran out of the simulated card's memory: where, the allocation, the class,
/// the phases not reached and what a card needs.
#[test]
fn a_prediction_that_runs_out_of_memory() {
    insta::assert_snapshot!(
        "prediction_oom_en",
        snapshot("prediction_oom.json", None, None, Lang::En)
    );
    insta::assert_snapshot!(
        "prediction_oom_fr",
        snapshot("prediction_oom.json", None, None, Lang::Fr)
    );
}

/// A prediction with the predicted frontier of the same workload: the frontier in the verdict,
/// the predicted series' trials and chart.
#[test]
fn a_prediction_with_its_predicted_series() {
    let args = (Some("predicted_series.json"), None);
    insta::assert_snapshot!(
        "prediction_series_en",
        snapshot("prediction_batch.json", args.0, args.1, Lang::En)
    );
    insta::assert_snapshot!(
        "prediction_series_fr",
        snapshot("prediction_batch.json", args.0, args.1, Lang::Fr)
    );
}

/// The peak that matters is the phase the fit is judged on (the highest driver's view), even when
/// another phase holds the highest peak allocated; what is alive is read there and named so.
#[test]
fn the_peak_that_matters_is_the_fits_and_the_alive_peak_is_named() {
    let text = std::fs::read_to_string("tests/fixtures/fiche/prediction_train.json").unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let first = &mut doc["phases"][0];
    assert_eq!(first["name"], "model_load");
    first["peak_reserved_bytes"] = 400_000_000u64.into();
    first["driver_view_bytes"] = 999_000_000u64.into();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("prediction.json");
    std::fs::write(&path, doc.to_string()).unwrap();
    let loaded = load(&path).unwrap();
    let fiche = build(&loaded, &[], None, Style::new(Lang::En, Units::Gib)).unwrap();
    let verdicts: Vec<(String, String)> = fiche
        .document
        .blocks
        .iter()
        .flat_map(|b| match b {
            Block::Verdict(lines) => lines
                .iter()
                .map(|v| (v.label.clone(), v.value.clone()))
                .collect(),
            _ => vec![],
        })
        .collect();
    let said = |label: &str| {
        verdicts
            .iter()
            .find(|(l, _)| l.contains(label))
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("no {label}: {verdicts:?}"))
    };
    assert!(
        said("Peak that matters").contains("in `model_load`"),
        "{verdicts:?}"
    );
    assert!(
        said("At the predicted peak")
            .contains("at the highest peak allocated, in `optimizer_step`"),
        "{verdicts:?}"
    );
}
