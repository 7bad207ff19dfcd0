//! Nothing silently ignored and honest statuses: every accepted option acts or is refused; a sweep
//! whose trials fail for another reason than out-of-memory fails; an extrapolation far from the
//! measured values is withheld; a report refuses files that do not belong together; messages
//! carry no Rust debug names.

use crate::common::{fixture, read_json, with_fake_torch};
use predicates::prelude::*;

fn refused(args: &[&str], message: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.json");
    with_fake_torch()
        .args(args)
        .arg("--output")
        .arg(&out)
        .assert()
        .code(1)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains(message));
    assert!(!out.exists(), "{args:?}");
}

#[test]
fn options_a_workload_would_ignore_are_refused() {
    let llama = fixture("tiny/llama/config.json");
    let llama = llama.to_str().unwrap();
    let script = fixture("scripts/job.py");
    let script = script.to_str().unwrap();
    for (args, message) in [
        (
            vec!["measure", "--cache", "static"],
            "--cache has no effect on dense inference",
        ),
        (
            vec!["measure", "--optimizer", "sgd"],
            "--optimizer has no effect on dense inference",
        ),
        (
            vec!["measure", "--prompt-tokens", "9"],
            "--prompt-tokens has no effect on dense inference",
        ),
        (
            vec!["measure", "--task", "train", "--warmup", "2"],
            "--warmup has no effect on dense training",
        ),
        (
            vec![
                "measure",
                "--workload",
                "causal-lm",
                "--model",
                llama,
                "--width",
                "128",
            ],
            "--width has no effect on causal-lm generation",
        ),
        (
            vec![
                "measure",
                "--workload",
                "causal-lm",
                "--model",
                llama,
                "--context",
                "99",
            ],
            "--context has no effect on causal-lm generation",
        ),
        (
            vec![
                "measure",
                "--workload",
                "causal-lm",
                "--model",
                llama,
                "--task",
                "train",
                "--cache",
                "static",
            ],
            "--cache has no effect on causal-lm training",
        ),
        (
            vec!["measure", "--script", script, "--batch", "8"],
            "never reaches the script",
        ),
        (
            vec!["measure", "--script", script, "--dtype", "float16"],
            "--dtype has no effect on a script",
        ),
        (
            vec!["measure", "--task", "train", "--optimizer", "adafactor"],
            "run adamw, sgd, adamw-8bit or paged-adamw-8bit",
        ),
        (
            vec!["measure", "--task", "train", "--precision", "fp8-mixed"],
            "use fp32, bf16-mixed, fp16-mixed or bf16",
        ),
        (
            vec![
                "sweep",
                "--vary",
                "width=64,128",
                "--workload",
                "causal-lm",
                "--model",
                llama,
            ],
            "width has no effect on causal-lm generation",
        ),
        (
            vec!["sweep", "--processes", "2", "--memory-limit", "0"],
            "no memory at all",
        ),
    ] {
        refused(&args, message);
    }
    // The help states what measure runs, not the estimate's list.
    with_fake_torch()
        .args(["measure", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "Optimizer of the training loop: adamw, sgd",
        ))
        .stdout(predicate::str::contains("adafactor").not())
        .stdout(predicate::str::contains("--max-cache-len").not())
        .stdout(predicate::str::contains("--kv-quant-bits").not());
}

/// The options only measure accepts (the allocator's records, torchrun, the prediction beside
/// the result): predict's help lists none of them, and clap refuses them as unknown there.
const MEASURE_ONLY: [&str; 9] = [
    "--no-prediction",
    "--timeline",
    "--timeline-entries",
    "--no-history",
    "--nproc-per-node",
    "--nnodes",
    "--node-rank",
    "--rdzv-endpoint",
    "--rdzv-id",
];

fn help(command: &str) -> String {
    let out = with_fake_torch()
        .args(command.split(' '))
        .arg("--help")
        .env("COLUMNS", "100")
        .output()
        .unwrap();
    assert!(out.status.success(), "{command} --help");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn each_command_lists_only_the_options_it_accepts() {
    let (measure, sweep, predict) = (help("measure"), help("sweep"), help("predict"));
    // An option is listed when a line of the help starts with it.
    let lists = |help: &str, option: &str| {
        help.lines()
            .any(|l| l.trim_start().split(' ').next() == Some(option))
    };
    for option in MEASURE_ONLY {
        assert!(lists(&measure, option), "measure --help lists {option}");
        assert!(!predict.contains(option), "predict --help names {option}");
    }
    // A sweep keeps live frames for its post-mortems, runs torchrun jobs and takes a hint.
    for option in ["--no-history", "--nproc-per-node", "--no-prediction"] {
        assert!(lists(&sweep, option), "sweep --help lists {option}");
    }
    assert!(!lists(&sweep, "--timeline"), "{sweep}");
    // estimate has no multimodal terms: --images-per-request is refused, never offered; the
    // images are `estimate vision`'s, not the language model's.
    let estimate = help("estimate");
    assert!(!lists(&estimate, "--images"), "{estimate}");
    let vision = help("estimate vision");
    assert!(lists(&vision, "--images"), "{vision}");
    assert!(!vision.contains("--images-per-request"), "{vision}");
    for (command, help) in [
        ("measure", &measure),
        ("sweep", &sweep),
        ("predict", &predict),
    ] {
        insta::assert_snapshot!(format!("{command}_help"), help);
    }
}

#[test]
fn an_option_a_command_does_not_have_is_clap_s_usage_error() {
    for option in MEASURE_ONLY {
        let value: &[&str] = match option {
            "--no-prediction" | "--timeline" | "--no-history" => &[],
            "--rdzv-endpoint" => &["h:1"],
            _ => &["2"],
        };
        with_fake_torch()
            .args(["predict", option])
            .args(value)
            .assert()
            .code(1)
            .stdout(predicate::str::is_empty())
            .stderr(predicate::str::contains(format!(
                "unexpected argument '{option}' found"
            )));
    }
    with_fake_torch()
        .args([
            "sweep",
            "--vary",
            "batch=1,2",
            "--timeline",
            "--output",
            "x.json",
        ])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "unexpected argument '--timeline' found",
        ));
}

#[test]
fn an_empty_list_of_loads_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let loads = dir.path().join("loads.json");
    std::fs::write(&loads, r#"{"loads": []}"#).unwrap();
    refused(
        &["sweep", "--loads", loads.to_str().unwrap()],
        "the list of loads is empty",
    );
}

#[test]
fn a_limit_above_the_device_is_refused() {
    // The fake device has 16 GiB.
    refused(
        &["sweep", "--vary", "batch=1,2", "--memory-limit", "32GiB"],
        "is more than cuda:0 has",
    );
}

#[test]
fn a_sweep_whose_trials_fail_otherwise_than_out_of_memory_fails() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.json");
    with_fake_torch()
        .args(["sweep", "--script"])
        .arg(fixture("scripts/job.py"))
        .args(["--vary", "batch=1,2", "--output"])
        .arg(&out)
        .args(["--", "--rows", "{batch}", "--fail"])
        .assert()
        .code(3)
        .stdout(predicate::str::contains("the script failed on purpose"))
        .stdout(predicate::str::contains("the sweep failed: 2 trial(s)"));
    let doc = read_json(&out);
    assert_eq!(doc["status"], "complete");
    assert!(
        doc["trials"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["status"] == "failed" && t["out_of_memory"] == false)
    );
}

#[test]
fn a_far_extrapolation_is_withheld() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.json");
    with_fake_torch()
        .args([
            "sweep",
            "--vary",
            "batch=1,2,4",
            "--width",
            "256",
            "--json",
            "--output",
        ])
        .arg(&out)
        .assert()
        .success();
    let doc = read_json(&out);
    let h200 = doc["fit"]["cards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["card"] == "H200 141GB")
        .unwrap()
        .clone();
    assert!(h200["predicted"].is_null(), "{h200}");
    assert!(h200["range"].is_null());
    assert!(
        h200["withheld"]
            .as_str()
            .unwrap()
            .contains("beyond 4× the largest value measured (4)")
    );
    assert!(
        !doc["fit"]["cards"][0]["capacity_source"]
            .as_str()
            .unwrap()
            .contains("Torch")
    );
}

#[test]
fn a_report_refuses_files_that_do_not_belong_together() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    with_fake_torch()
        .args(["measure", "--width", "256", "--output"])
        .arg(p("r.json"))
        .assert()
        .success();
    with_fake_torch()
        .args(["sweep", "--vary", "batch=1,2", "--width", "512", "--output"])
        .arg(p("other-width.json"))
        .assert()
        .success();
    crate::common::iteragpu()
        .arg("report")
        .arg(p("r.json"))
        .arg(p("other-width.json"))
        .arg("--output")
        .arg(p("f.md"))
        .assert()
        .code(1)
        .stderr(predicate::str::contains("width = 256"))
        .stderr(predicate::str::contains("width = 512"));
    assert!(!p("f.md").exists());
    // An estimate of another model.
    let est = crate::common::estimate_json(&["--parameters", "7000000000", "--bits", "16"]);
    std::fs::write(p("e.json"), est.to_string()).unwrap();
    crate::common::iteragpu()
        .arg("report")
        .arg(p("r.json"))
        .arg("--estimate")
        .arg(p("e.json"))
        .arg("--output")
        .arg(p("f.md"))
        .assert()
        .code(1)
        .stderr(predicate::str::contains("the estimate of another model"));
    // A series still `running` (its sweep was killed) is reported with a warning in the fiche.
    with_fake_torch()
        .args(["sweep", "--vary", "batch=1,2", "--width", "256", "--output"])
        .arg(p("same.json"))
        .assert()
        .success();
    let mut series = read_json(&p("same.json"));
    series["status"] = "running".into();
    std::fs::write(p("running.json"), series.to_string()).unwrap();
    crate::common::iteragpu()
        .arg("report")
        .arg(p("r.json"))
        .arg(p("running.json"))
        .arg("--output")
        .arg(p("f.md"))
        .assert()
        .success()
        .stderr(predicate::str::contains("never closed"));
    assert!(
        std::fs::read_to_string(p("f.md"))
            .unwrap()
            .contains("never closed")
    );
}

#[test]
fn a_result_with_no_phase_is_not_called_complete() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("nothing.py");
    std::fs::write(&script, "print('no phase marked')\n").unwrap();
    let out = dir.path().join("r.json");
    with_fake_torch()
        .args(["measure", "--script"])
        .arg(&script)
        .arg("--output")
        .arg(&out)
        .assert()
        .success();
    let md = dir.path().join("f.md");
    crate::common::iteragpu()
        .arg("report")
        .arg(&out)
        .arg("--output")
        .arg(&md)
        .assert()
        .success();
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.contains("No phase was recorded"), "{text}");
    assert!(!text.contains("ran to completion"));
}

#[test]
fn cards_refuse_an_overhead_that_fills_every_card() {
    crate::common::iteragpu()
        .args(["cards", "--need", "1GiB", "--overhead", "1TB"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("fills even the largest card"));
    crate::common::iteragpu()
        .args(["cards", "--need", "20GiB"])
        .assert()
        .success()
        .stdout(predicate::str::contains("(PyTorch's total_memory)"))
        .stdout(predicate::str::contains("TorchTotalMemory").not());
}

#[test]
fn an_interpreter_that_hangs_is_stopped_and_messages_carry_no_debug_names() {
    let dir = tempfile::tempdir().unwrap();
    let hang = dir.path().join("hanging-python");
    std::fs::write(&hang, "#!/bin/sh\nsleep 60\n").unwrap();
    std::fs::set_permissions(&hang, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let started = std::time::Instant::now();
    crate::common::iteragpu()
        .args(["environment", "--timeout", "1", "--python"])
        .arg(&hang)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "did not report its environment within 1 s",
        ));
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    crate::common::iteragpu()
        .args(["environment", "--python", "/bin/true"])
        .assert()
        .success()
        .stdout(predicate::str::contains("(exit status 0)"))
        .stdout(predicate::str::contains("Some(").not());
    let out = dir.path().join("r.json");
    with_fake_torch()
        .args(["measure", "--python", "/bin/true", "--output"])
        .arg(&out)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("(exit status 0)"))
        .stderr(predicate::str::contains("Code(").not());
}

/// A bad number gets the same words in every command and for every option: not a whole number,
/// zero where it is not allowed, or outside the option's range.
#[test]
fn bad_numbers_are_worded_the_same_everywhere() {
    let cases: [(&[&str], &str); 7] = [
        (
            &["estimate", "--parameters", "0", "--bits", "16"],
            "0 is not allowed; give a whole number greater than 0",
        ),
        (
            &["measure", "--batch", "0", "--output", "x.json"],
            "0 is not allowed; give a whole number greater than 0",
        ),
        (
            &["predict", "--world-size", "0", "--output", "x.json"],
            "0 is not allowed; give a whole number greater than 0",
        ),
        (
            &[
                "measure", "--task", "train", "--steps", "1", "--output", "x.json",
            ],
            "1 is not allowed; give a whole number from 2 to 10,000",
        ),
        (
            &["measure", "--nproc-per-node", "2000", "--output", "x.json"],
            "2,000 is not allowed; give a whole number from 1 to 1,024",
        ),
        (
            &["measure", "--warmup", "abc", "--output", "x.json"],
            "`abc` is not a whole number",
        ),
        (
            &["sweep", "--vary", "batch=0,2", "--output", "x.json"],
            "0 is not allowed; give a whole number greater than 0",
        ),
    ];
    for (args, words) in cases {
        crate::common::iteragpu()
            .args(args)
            .assert()
            .code(1)
            .stderr(predicates::str::contains(words));
    }
}

/// A config.json from `base`'s with `fields` replaced, in a new folder.
fn config_with(base: &str, fields: serde_json::Value) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let path = crate::common::fixture(&format!("models/{base}/config.json"));
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    for (k, v) in fields.as_object().unwrap() {
        config[k] = v.clone();
    }
    std::fs::write(
        dir.path().join("config.json"),
        serde_json::to_vec(&config).unwrap(),
    )
    .unwrap();
    dir
}

/// `cards --need` past any device, typed or from a document's peak of 2^64 − 1: refused with the
/// value and where it came from, never a panic (it was exit 101 at commands/cards.rs:29).
#[test]
fn cards_refuse_a_need_beyond_any_device_without_a_panic() {
    for need in ["10000000TB", "18446744073709551615"] {
        crate::common::iteragpu()
            .args(["cards", "--need", need])
            .assert()
            .code(1)
            .stderr(predicate::str::contains("is beyond any device"))
            .stderr(predicate::str::contains("--need"))
            .stderr(predicate::str::contains("panicked").not());
    }
    let dir = tempfile::tempdir().unwrap();
    let out = crate::common::iteragpu()
        .args(["estimate", "--model"])
        .arg(crate::common::fixture("models/llama-3-8b"))
        .arg("--json")
        .output()
        .unwrap();
    let mut doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["total_bytes"] = serde_json::json!(u64::MAX);
    let file = dir.path().join("huge.json");
    std::fs::write(&file, serde_json::to_vec(&doc).unwrap()).unwrap();
    crate::common::iteragpu()
        .args(["cards", "--from"])
        .arg(&file)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("18,446,744,073,709,551,615 bytes"))
        .stderr(predicate::str::contains("huge.json is beyond any device"));
}

/// Config fields past any model, or 0 positions, are refused with the file and the field named:
/// no "+ 256 bytes of rotary cache" from a wrapped product, no 56× concurrency from a wrapped
/// window sum, no max_model_len 0 and "infx".
#[test]
fn config_positions_and_windows_are_bounded_with_the_field_named() {
    for (base, fields, field, problem) in [
        (
            "llama-3-8b",
            serde_json::json!({"max_position_embeddings": 72057594037927937u64}),
            "max_position_embeddings",
            "above the bound",
        ),
        (
            "llama-3-8b",
            serde_json::json!({"max_position_embeddings": 0}),
            "max_position_embeddings",
            "must be greater than 0",
        ),
        (
            "mistral-7b-v0.1",
            serde_json::json!({"sliding_window": u64::MAX}),
            "sliding_window",
            "above the bound",
        ),
    ] {
        let dir = config_with(base, fields);
        for (engine, card) in [("vllm", "H100 80GB"), ("sglang", "H200")] {
            crate::common::iteragpu()
                .args(["estimate", "serve", engine, "--card", card, "--model"])
                .arg(dir.path())
                .assert()
                .code(1)
                .stderr(predicate::str::contains("config.json: field"))
                .stderr(predicate::str::contains(field))
                .stderr(predicate::str::contains(problem))
                .stderr(predicate::str::contains("infx").not());
        }
    }
}

/// Strings from config.json in an error message (model_type here): ESC[2J, an OSC title sequence,
/// BEL, U+202E and U+2066 are shown escaped, never sent raw to the terminal.
#[test]
fn config_strings_in_error_messages_are_shown_escaped() {
    let dir = config_with(
        "llama-3-8b",
        serde_json::json!({"model_type": "\u{1b}[2J\u{1b}]0;pwned\u{7}llama\u{202e}x\u{2066}"}),
    );
    let out = crate::common::iteragpu()
        .args(["estimate", "--model"])
        .arg(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    for raw in ['\u{1b}', '\u{7}', '\u{202e}', '\u{2066}'] {
        assert!(!err.contains(raw), "{raw:?} raw in {err}");
    }
    assert!(
        err.contains("\\x1b[2J\\x1b]0;pwned\\x07llama\\u{202e}x\\u{2066}"),
        "{err}"
    );
}
