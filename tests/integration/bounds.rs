//! Bounded, never null (issue 45): an op whose output size depends on unknown data gives a
//! `bounded` phase with its figures at the largest outputs and, from a second run, at the
//! smallest; in the terminal table, the file and the fiche.

use crate::common::{PhaseStatus, PredictionStatus, Run, fixture, python_with};

#[test]
#[ignore = "needs torch"]
fn predict_a_nonzero_on_unknown_data_gives_a_bounded_phase_with_both_figures() {
    let python = python_with(&["torch"]);
    let dir = tempfile::tempdir().unwrap();
    let doc_path = dir.path().join("bounded.json");
    let run = Run::predict()
        .output(&doc_path)
        .args(["--python", &python, "--card", "H100 80GB", "--script"])
        .arg(fixture("scripts/predict/data_dependent_sizes.py"))
        .finish();
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), Some(0), "{said}");
    // The script ran twice (largest, then smallest sizes); its output is shown once.
    assert_eq!(said.matches("sizes ").count(), 1, "{said}");
    assert!(said.contains("sizes (2097152, 2) (512, 4096)"), "{said}");
    assert!(
        said.contains("bounded") && said.contains("lower bound"),
        "{said}"
    );
    assert!(said.contains("aten.nonzero.default"), "{said}");
    let doc = run.prediction();
    assert_eq!(doc.status, PredictionStatus::Complete, "{said}");
    let whole = doc
        .phases
        .iter()
        .find(|p| p.status == PhaseStatus::Bounded)
        .unwrap_or_else(|| panic!("no bounded phase: {said}"));
    let lower = whole.lower.as_ref().expect("the lower figures");
    let (upper_peak, lower_peak) = (
        whole.peak_allocated_bytes.unwrap(),
        lower.peak_allocated_bytes.unwrap(),
    );
    // At the largest: nonzero's 2,097,152 x 2 int64 positions (33.5 MB) and the 512 x 4096
    // float32 rows (8.4 MB) are alive together; at the smallest, neither holds a byte.
    assert!(
        upper_peak >= lower_peak + 2_097_152 * 2 * 8,
        "{upper_peak} vs {lower_peak}"
    );
    assert!(
        doc.phases.iter().all(|p| p.peak_allocated_bytes.is_some()),
        "no null figure"
    );
    assert!(
        doc.notes.iter().any(|n| n.contains("bounded")),
        "{:?}",
        doc.notes
    );
    // The fiche shows both rows.
    let fiche = dir.path().join("fiche.md");
    Run::report().arg(&doc_path).output(&fiche).succeeds();
    let text = std::fs::read_to_string(&fiche).unwrap();
    assert!(
        text.contains("bounded") && text.contains("lower bound"),
        "{text}"
    );
}
