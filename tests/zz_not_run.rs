//! Runs after the other test targets (cargo runs them in name order) and lists the checks that
//! could not run here and why, so that a green `cargo test` never hides one. Under CI those
//! checks fail instead (see `not_run` in tests/integration/common.rs).

fn main() {
    let folder = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("not-run");
    let mut lines: Vec<String> = std::fs::read_dir(&folder)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let text = std::fs::read_to_string(e.path()).ok();
            let _ = std::fs::remove_file(e.path());
            text
        })
        .flat_map(|t| t.lines().map(String::from).collect::<Vec<_>>())
        .collect();
    lines.sort();
    lines.dedup();
    if lines.is_empty() {
        println!(
            "\nevery check ran (none was skipped for a missing browser, interpreter or privilege)"
        );
    } else {
        println!("\nchecks that did NOT run here ({}):", lines.len());
        for l in &lines {
            println!("  - {l}");
        }
        println!("(under CI, with ITERAGPU_CI or CI set, each of them fails instead)");
    }
}
