//! The fiche (Markdown and HTML, checked in a real headless browser), compare, cards, the lab
//! notebook, and refusals of bad input.

use crate::common::{MeasureResult, Run, iteragpu, read_json, read_typed};
use predicates::prelude::*;
use sha2::Digest;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A measure result, a series and an estimate made once with the fake torch.
struct Inputs {
    dir: tempfile::TempDir,
}

impl Inputs {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn inputs() -> &'static Inputs {
    static INPUTS: OnceLock<Inputs> = OnceLock::new();
    INPUTS.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        let dense = |batch: &'static str| ["--batch", batch, "--context", "128", "--width", "512"];
        Run::measure()
            .fake_torch()
            .args(dense("2"))
            .output(p("result.json"))
            .succeeds();
        Run::measure()
            .fake_torch()
            .args(dense("4"))
            .output(p("result-b4.json"))
            .succeeds();
        Run::sweep()
            .fake_torch()
            .args([
                "--vary",
                "batch=1,2,4,8,16",
                "--context",
                "128",
                "--width",
                "512",
            ])
            .output(p("series.json"))
            .succeeds();
        Run::measure()
            .fake_torch()
            .env("FAKE_TORCH_CAPACITY", (64u64 << 20).to_string())
            .args(["--width", "2048"])
            .output(p("failed.json"))
            .expect_status(3);
        let est = iteragpu()
            .args([
                "estimate",
                "--parameters",
                "8402944",
                "--bits",
                "32",
                "--reserve-gib",
                "1",
                "--json",
            ])
            .output()
            .unwrap();
        std::fs::write(p("estimate.json"), est.stdout).unwrap();
        Inputs { dir }
    })
}

/// `iteragpu report FILES EXTRA --output OUT`.
fn report(args: &[&Path], extra: &[&str], out: &Path) -> Run {
    Run::report().args(args).args(extra).output(out)
}

#[test]
fn the_markdown_fiche_keeps_calculated_observed_and_assumed_apart() {
    let i = inputs();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fiche.md");
    report(
        &[&i.path("result.json"), &i.path("series.json")],
        &["--estimate", i.path("estimate.json").to_str().unwrap()],
        &out,
    )
    .succeeds();
    let text = std::fs::read_to_string(&out).unwrap();
    let order = [
        "## Verdict",
        "## Identity",
        "## Dimensions",
        "## Environment",
        "## Scope",
        "## Calculated",
        "## Observed",
        "## Assumed",
        "## Configuration chosen",
        "## Raw results attached",
    ];
    let positions: Vec<usize> = order
        .iter()
        .map(|h| text.find(h).unwrap_or_else(|| panic!("{h} missing")))
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "sections out of order"
    );
    // Raw results with their real SHA-256.
    let raw = std::fs::read(i.path("result.json")).unwrap();
    let sha: String = sha2::Sha256::digest(&raw)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert!(text.contains(&sha));
    // One unit per column (named in the header), every size again in raw bytes at the end; the
    // reserve is assumed, the weights calculated.
    assert!(text.contains("| peak reserved (GiB) |"), "{text}");
    assert!(!text.contains(" GB · "), "no three units per cell any more");
    let raw_bytes = &text[text.find("## Raw bytes").expect("the raw bytes table")..];
    let doc: MeasureResult = read_typed(&i.path("result.json"));
    let peak = doc.phases[2].devices[0].peak_reserved_bytes.unwrap();
    assert!(raw_bytes.contains(&format!("| {peak} |")), "{raw_bytes}");
    let calculated = &text[positions[5]..positions[6]];
    let assumed = &text[positions[7]..positions[8]];
    assert!(calculated.contains("weights") && !calculated.contains("reserve"));
    assert!(assumed.contains("reserve"));
    // The reading rules.
    assert!(text.contains("same checkpoint"));
    assert!(text.contains("never as peak reserved − peak allocated"));
    assert!(text.contains("Largest load tested successfully: `batch` = 16"));
    // The verdict links each line to its section.
    let verdict = &text[positions[0]..positions[1]];
    for link in [
        "(#observed)",
        "(#why-the-peak-exceeds-the-estimate)",
        "(#assumed)",
    ] {
        assert!(verdict.contains(link), "{link} in {verdict}");
    }
    assert!(verdict.contains("`batch` = 16 validated"));
    // The gap ledger, between what was observed and what was assumed.
    let gap = text
        .find("## Why the peak exceeds the estimate")
        .expect("the gap section");
    assert!(positions[6] < gap && gap < positions[7]);
    let gap = &text[gap..positions[7]];
    for term in [
        "weights (as loaded)",
        "growth inside the phase",
        "peak reserved",
    ] {
        assert!(gap.contains(term), "{term} missing from the gap section");
    }
}

#[test]
fn a_failed_run_is_not_presented_as_a_need() {
    let i = inputs();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("failed.md");
    report(&[&i.path("failed.json")], &[], &out).succeeds();
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.contains("a partial peak before a failure is not the memory need of a complete run")
    );
    assert!(text.contains("did not complete"));
}

#[test]
fn the_html_fiche_is_self_contained_and_french_on_request() {
    let i = inputs();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fiche.html");
    report(
        &[&i.path("result.json"), &i.path("series.json")],
        &["--lang", "fr"],
        &out,
    )
    .succeeds();
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("<html lang=\"fr\">"));
    assert!(html.contains("Calculé") && html.contains("Observé") && html.contains("Supposé"));
    assert!(html.contains("id=\"verdict\""));
    assert_eq!(
        html.matches("<svg").count(),
        3,
        "peaks per phase, the series chart and the gap's waterfall"
    );
    assert!(html.contains("Pourquoi le pic dépasse l’estimation"));
    assert!(html.contains("Des poids à la vue du pilote (observé)"));
    assert!(
        !html.contains("src=\"http") && !html.contains("href=\"http") && !html.contains("<link"),
        "no external resource"
    );
    // The raw results are embedded: the same JSON value, with its SHA-256.
    let start = html.find("<script type=\"application/json\"").unwrap();
    let body_start = start + html[start..].find('>').unwrap() + 1;
    let body_end = body_start + html[body_start..].find("</script>").unwrap();
    let embedded: serde_json::Value = serde_json::from_str(&html[body_start..body_end]).unwrap();
    assert_eq!(embedded, read_json(&i.path("result.json")));
    let raw = std::fs::read(i.path("result.json")).unwrap();
    let sha: String = sha2::Sha256::digest(&raw)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert!(html[start..body_start].contains(&sha));
}

#[test]
fn text_from_files_is_escaped() {
    let i = inputs();
    let dir = tempfile::tempdir().unwrap();
    let mut doc = read_json(&i.path("result.json"));
    doc["identity"]["declared"]["model"] = serde_json::json!("<img src=x onerror=alert(1)>");
    let edited = dir.path().join("edited.json");
    std::fs::write(&edited, serde_json::to_string(&doc).unwrap()).unwrap();
    let out = dir.path().join("escaped.html");
    report(&[&edited], &[], &out).succeeds();
    let html = std::fs::read_to_string(&out).unwrap();
    let body = &html[..html.find("<script type=\"application/json\"").unwrap()];
    assert!(!body.contains("<img src=x"));
    assert!(body.contains("&lt;img src=x onerror=alert(1)&gt;"));
    let md = dir.path().join("escaped.md");
    report(&[&edited], &[], &md).succeeds();
    let md = std::fs::read_to_string(&md).unwrap();
    // In text, `<` is escaped; inside a code span it stays `<` (nothing there is HTML, and
    // `&lt;` would be shown as is).
    for (at, _) in md.match_indices("<img") {
        assert!(
            md[..at].ends_with('`'),
            "raw <img outside a code span: {}",
            &md[at.saturating_sub(40)..at + 20]
        );
    }
    assert!(!md.contains("`&lt;"), "&lt; inside a code span");
}

/// Chromium for the browser check (.ci/run installs Debian's); its test is
/// `#[ignore = "needs chromium"]` and fails under `--include-ignored` without it.
fn chromium() -> PathBuf {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .map(PathBuf::from)
        .find(|candidate| candidate.exists())
        .expect("no chromium in /usr/bin (apt-get install chromium)")
}

/// What a reader's browser sees, measured by a script added to a copy of the fiche: where the
/// verdict ends, whether the page overflows sideways, how much of each chart's plot its data
/// spans along its value axis, and the visible text outside code.
const MEASURE: &str = r#"<script>
(function () {
  const out = {};
  const v = document.getElementById('verdict');
  out.verdict_bottom = v ? v.getBoundingClientRect().bottom + window.scrollY : null;
  out.scroll_width = document.documentElement.scrollWidth;
  out.client_width = document.documentElement.clientWidth;
  out.charts = Array.from(document.querySelectorAll('svg[data-value-axis]')).map(function (svg) {
    const axis = svg.dataset.valueAxis;
    const plot = svg.querySelector('.plot').getBBox();
    let reach = 0;
    svg.querySelectorAll('.data').forEach(function (e) {
      const b = e.getBBox();
      reach = Math.max(reach, axis === 'y' ? (plot.y + plot.height) - b.y : (b.x + b.width) - plot.x);
    });
    return {title: svg.querySelector('title').textContent,
            ratio: reach / (axis === 'y' ? plot.height : plot.width),
            described: !!svg.querySelector('desc') && svg.querySelector('desc').textContent.length > 0};
  });
  const copy = document.body.cloneNode(true);
  copy.querySelectorAll('code, script, pre').forEach(function (e) { e.remove(); });
  out.text = copy.textContent;
  const pre = document.createElement('pre');
  pre.id = 'measured';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"#;

const FLAGS: [&str; 9] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
];

/// Opens `page` at `width` pixels with the measuring script: what it measured.
fn measure_in_browser(browser: &Path, dir: &Path, page: &Path, width: u32) -> serde_json::Value {
    let html = std::fs::read_to_string(page).unwrap();
    let instrumented = dir.join(format!("measured-{width}.html"));
    std::fs::write(
        &instrumented,
        html.replace("</body>", &format!("{MEASURE}</body>")),
    )
    .unwrap();
    let dom = std::process::Command::new(browser)
        .args(FLAGS)
        .arg(format!(
            "--user-data-dir={}",
            dir.join(format!("profile-m{width}")).display()
        ))
        .arg(format!("--window-size={width},900"))
        .arg("--virtual-time-budget=3000")
        .arg("--dump-dom")
        .arg(format!("file://{}", instrumented.display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout);
    let marker = "<pre id=\"measured\">";
    let start = dom.find(marker).expect("the script ran") + marker.len();
    let end = start + dom[start..].find("</pre>").unwrap();
    let json = dom[start..end]
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"");
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

/// The fiche as a new reader opens it (a dense result, a 5-value batch sweep, an estimate), at a
/// desktop width and at A4's: the verdict within the first 900 pixels, no sideways overflow, every
/// chart's data over at least half of its plot and described in text, screenshots taken, a PDF
/// printed; and the French fiche free of decimal points in its numbers.
#[test]
#[ignore = "needs chromium"]
fn the_html_fiche_reads_as_a_decision_in_a_headless_browser() {
    let browser = chromium();
    let i = inputs();
    let dir = tempfile::tempdir().unwrap();
    for (lang, name) in [("en", "fiche.html"), ("fr", "fiche-fr.html")] {
        let out = dir.path().join(name);
        report(
            &[&i.path("result.json"), &i.path("series.json")],
            &[
                "--estimate",
                i.path("estimate.json").to_str().unwrap(),
                "--lang",
                lang,
            ],
            &out,
        )
        .succeeds();
        // Desktop and A4 (210 mm at 96 dpi).
        for width in [1280u32, 794] {
            let m = measure_in_browser(&browser, dir.path(), &out, width);
            let bottom = m["verdict_bottom"].as_f64().expect("a verdict block");
            assert!(
                bottom <= 900.0,
                "{lang} {width}px: the verdict ends at {bottom}px"
            );
            assert!(
                m["scroll_width"].as_f64() <= m["client_width"].as_f64(),
                "{lang} {width}px: the page overflows sideways ({} > {})",
                m["scroll_width"],
                m["client_width"]
            );
            let charts = m["charts"].as_array().unwrap();
            assert!(charts.len() >= 3, "peaks, series and waterfall: {charts:?}");
            for c in charts {
                let ratio = c["ratio"].as_f64().unwrap();
                assert!(
                    ratio >= 0.5,
                    "{lang}: {} uses {ratio:.2} of its plot",
                    c["title"]
                );
                assert_eq!(c["described"], true, "{}: no text alternative", c["title"]);
            }
            if lang == "fr" {
                let text = m["text"].as_str().unwrap();
                let decimal_point = text
                    .as_bytes()
                    .windows(3)
                    .position(|w| w[0].is_ascii_digit() && w[1] == b'.' && w[2].is_ascii_digit());
                assert!(
                    decimal_point.is_none(),
                    "a decimal point in the French fiche: …{}…",
                    decimal_point.map_or("", |p| &text
                        [p.saturating_sub(40)..(p + 40).min(text.len())])
                );
                for english in [" the ", "peak ", "reserved", "allocated", " of the "] {
                    if let Some(p) = text.find(english) {
                        let from = text.floor_char_boundary(p.saturating_sub(60));
                        let to = text.ceil_char_boundary((p + 60).min(text.len()));
                        panic!(
                            "English `{english}` in the French fiche: …{}…",
                            &text[from..to]
                        );
                    }
                }
            }
            let shot = dir.path().join(format!("{lang}-{width}.png"));
            let run = std::process::Command::new(&browser)
                .args(FLAGS)
                .arg(format!(
                    "--user-data-dir={}",
                    dir.path().join(format!("profile-s{lang}{width}")).display()
                ))
                .arg(format!("--window-size={width},1800"))
                .arg(format!("--screenshot={}", shot.display()))
                .arg(format!("file://{}", out.display()))
                .output()
                .unwrap();
            assert!(
                run.status.success(),
                "{}",
                String::from_utf8_lossy(&run.stderr)
            );
            let png = std::fs::read(&shot).unwrap();
            assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
            assert!(
                png.len() > 20_000,
                "a screenshot of a real page, {} bytes",
                png.len()
            );
        }
        // Printed on A4 by the browser's own print path (the print stylesheet applies).
        let pdf = dir.path().join(format!("{lang}.pdf"));
        let run = std::process::Command::new(&browser)
            .args(FLAGS)
            .arg(format!(
                "--user-data-dir={}",
                dir.path().join(format!("profile-p{lang}")).display()
            ))
            .arg("--no-pdf-header-footer")
            .arg(format!("--print-to-pdf={}", pdf.display()))
            .arg(format!("file://{}", out.display()))
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let bytes = std::fs::read(&pdf).unwrap();
        assert!(bytes.starts_with(b"%PDF"), "a PDF");
        assert!(bytes.len() > 20_000, "{} bytes", bytes.len());
    }
    let html = std::fs::read_to_string(dir.path().join("fiche.html")).unwrap();
    assert!(html.contains("@media print") && html.contains("size:A4"));
    assert!(html.contains("prefers-color-scheme: dark"));
    assert!(!html.contains("rotate("), "labels are never rotated");
}

#[test]
fn compare_warns_about_every_differing_condition() {
    let i = inputs();
    iteragpu()
        .args(["compare"])
        .arg(i.path("result.json"))
        .arg(i.path("result-b4.json"))
        .assert()
        .success()
        .stdout(predicate::str::contains("variable under study: batch"))
        .stdout(predicate::str::contains("these runs are comparable"));
    let dir = tempfile::tempdir().unwrap();
    let mut doc = read_json(&i.path("result-b4.json"));
    doc["environment"]["python"]["torch"]["version"] = serde_json::json!("2.99.0");
    doc["policies"]["empty_cache"] = serde_json::json!("between-repeats");
    doc["dimensions"]["dtype"] = serde_json::json!("bfloat16");
    let edited = dir.path().join("other.json");
    std::fs::write(&edited, serde_json::to_string(&doc).unwrap()).unwrap();
    let csv = dir.path().join("table.csv");
    iteragpu()
        .args(["compare"])
        .arg(i.path("result.json"))
        .arg(&edited)
        .arg("--csv")
        .arg(&csv)
        .assert()
        .success()
        .stdout(predicate::str::contains("PyTorch version differs"))
        .stdout(predicate::str::contains("empty-cache policy differs"))
        .stdout(predicate::str::contains("more than one dimension differs"))
        .stdout(predicate::str::contains("NOT comparable"));
    let table = std::fs::read_to_string(&csv).unwrap();
    let mut lines = table.lines();
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("run,phase,index,device,status,start_allocated_bytes")
    );
    let first: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(first[1], "model_load");
    assert!(first[7].parse::<u64>().unwrap() > 0, "raw bytes");
    assert_eq!(table.lines().count(), 1 + 2 * 9);
    // Never overwritten.
    iteragpu()
        .args(["compare"])
        .arg(i.path("result.json"))
        .arg(&edited)
        .arg("--csv")
        .arg(&csv)
        .assert()
        .code(1);
}

#[test]
fn cards_tell_what_fits_on_one_device() {
    let out = iteragpu().args(["cards"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for card in [
        "H100 80GB",
        "H200 141GB",
        "A100 40GB",
        "A100 80GB",
        "L4",
        "L40S",
        "A10G",
        "T4",
        "V100 16GB",
        "V100 32GB",
        "RTX 3090",
        "RTX 4090",
        "RTX 5090",
        "RTX 5070",
        "RTX 6000 Ada",
        "MI300X",
        "MI250X",
    ] {
        assert!(text.contains(card), "{card} missing from the catalog");
    }
    let out = iteragpu()
        .args(["cards", "--need", "17.04GiB", "--json"])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let card = |name: &str| {
        doc["cards"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["card"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(card("T4")["fits"], false);
    assert_eq!(card("T4")["devices_if_split"], 2);
    assert_eq!(card("H100 80GB")["fits"], true);
    let need = doc["need_bytes"].as_u64().unwrap();
    assert_eq!(
        card("L4")["margin_bytes"].as_i64().unwrap(),
        card("L4")["usable_bytes"].as_i64().unwrap() - need as i64
    );
    iteragpu()
        .args(["cards", "--need", "200GB"])
        .assert()
        .success()
        .stdout(predicate::str::contains("must be split"))
        .stdout(predicate::str::contains("never one pool"));
    let i = inputs();
    for file in ["estimate.json", "result.json", "series.json"] {
        iteragpu()
            .args(["cards", "--from"])
            .arg(i.path(file))
            .assert()
            .success()
            .stdout(predicate::str::contains("need per device"));
    }
    iteragpu()
        .args(["cards", "--from"])
        .arg(i.path("failed.json"))
        .assert()
        .code(1)
        .stderr(predicate::str::contains("partial peak"));
}

#[test]
fn bad_report_input_is_refused_and_nothing_is_written() {
    let i = inputs();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fiche.md");
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let raw = std::fs::read_to_string(i.path("result.json")).unwrap();
    let other_version = write(
        "v2.json",
        &raw.replace("iteragpu.measure/1", "iteragpu.measure/2"),
    );
    let truncated = write("truncated.json", &raw[..raw.len() / 2]);
    let mut doc = read_json(&i.path("result.json"));
    doc.as_object_mut().unwrap().remove("phases");
    let edited = write("edited.json", &serde_json::to_string(&doc).unwrap());
    let foreign = write("foreign.json", r#"{"hello": "world"}"#);
    let mut other_gpu = read_json(&i.path("series.json"));
    for t in other_gpu["trials"].as_array_mut().unwrap() {
        t["result"]["environment"]["python"]["torch"]["devices"][0]["name"] =
            serde_json::json!("Another GPU");
    }
    let other_gpu = write(
        "other-gpu.json",
        &serde_json::to_string(&other_gpu).unwrap(),
    );
    let cases: Vec<(Vec<PathBuf>, &str)> = vec![
        (vec![other_version], "iteragpu.measure/2"),
        (vec![truncated], "line"),
        (vec![edited], "phases"),
        (vec![foreign], "schema"),
        (
            vec![i.path("series.json")],
            "a measured series alone makes no fiche yet",
        ),
        (
            vec![i.path("result.json"), i.path("result-b4.json")],
            "second file",
        ),
        (
            vec![i.path("result.json"), other_gpu],
            "report one GPU at a time",
        ),
        (vec![dir.path().join("absent.json")], "absent.json"),
    ];
    for (files, message) in cases {
        let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
        report(&refs, &[], &out)
            .expect_status(1)
            .stderr_has(message)
            .wrote_nothing();
    }
    report(
        &[&i.path("result.json")],
        &[],
        &dir.path().join("fiche.pdf"),
    )
    .expect_status(1)
    .stderr_has(".md");
    std::fs::write(&out, "keep").unwrap();
    report(&[&i.path("result.json")], &[], &out)
        .expect_status(1)
        .stderr_has("already exists");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep");
}

#[test]
fn the_lab_notebook_is_valid_and_its_cells_run() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("notebooks/iteragpu-lab.ipynb");
    let nb: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(nb["nbformat"], 4);
    let cells = nb["cells"].as_array().unwrap();
    assert!(cells.len() >= 10);
    let mut code = String::new();
    for c in cells {
        assert!(c["id"].is_string());
        let source: String = c["source"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        if c["cell_type"] == "code" {
            assert_eq!(
                c["outputs"],
                serde_json::json!([]),
                "shipped without outputs"
            );
            assert!(c["execution_count"].is_null());
            code.push_str(&source);
            code.push('\n');
        }
    }
    // Run every code cell in order, as a kernel would, on a machine without PyTorch: the GPU
    // steps must stop with the CLI's own message.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("lab.py");
    std::fs::write(&script, code).unwrap();
    let out = std::process::Command::new("python3")
        .arg(&script)
        .env("ITERAGPU_BIN", assert_cmd::cargo::cargo_bin("iteragpu"))
        .env("PYTHONPATH", crate::common::fixture("no_torch"))
        // The notebook keeps its results in a fresh temporary folder: this test's, removed after.
        .env("TMPDIR", dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("14,000,000,000"));
    assert!(stdout.contains("nothing measured: PyTorch cannot be imported"));
    assert!(stdout.contains("No GPU measurement here (exit status 2)"));
    assert!(stdout.contains("need per device"));
}
