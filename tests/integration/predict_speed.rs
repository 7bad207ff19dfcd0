//! The shortcuts that make long predictions fast change nothing in what is predicted: the memo
//! of FakeTensorMode's answers (`python/iteragpu/predict/memo.py`, off with
//! `ITERAGPU_PREDICT_MEMO=0`) gives the same prediction document, to the byte but its creation
//! time, and the same worker event stream, event for event but its timestamps. How fast it is:
//! `cargo bench --bench predict_speed`.

use crate::common::{Run, fixture, python_with, torch_python};
use std::path::Path;
use std::process::Command;

/// The document of `iteragpu predict ARGS` with ITERAGPU_PREDICT_MEMO=`memo`, without its
/// creation time, as text.
fn document(python: &str, dir: &Path, name: &str, memo: &str, args: &[&str]) -> String {
    let out = dir.join(format!("{name}-memo-{memo}.json"));
    let run = Run::predict()
        .args(["--python", python, "--card", "H200"])
        .output(&out)
        .env("ITERAGPU_PREDICT_MEMO", memo)
        .args(args)
        .finish();
    assert!(out.exists(), "{name}: no prediction: {}", run.stderr());
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    doc.as_object_mut().unwrap().remove("created_at");
    serde_json::to_string_pretty(&doc).unwrap()
}

/// The worker's events for a script (run as the CLI runs it), with ITERAGPU_PREDICT_MEMO=`memo`,
/// without the fields that hold times.
fn events(python: &str, dir: &Path, script: &str, args: &[&str], memo: &str) -> Vec<String> {
    events_with(python, dir, script, args, ("ITERAGPU_PREDICT_MEMO", memo))
}

/// The worker's events for a script with one environment variable set (`key`, `value`).
fn events_with(
    python: &str,
    dir: &Path,
    script: &str,
    args: &[&str],
    (key, value): (&str, &str),
) -> Vec<String> {
    let memo = format!("{key}-{value}");
    let target = serde_json::json!({"name": "H200", "capability": [9, 0],
        "total_memory": 150_754_820_096u64, "total_memory_source": "the catalog",
        "context_bytes": iteragpu::schema::target::H200_CONTEXT_BYTES, "context_source": "measured",
        "workspaces": iteragpu::schema::target::SM90_WORKSPACES, "workspaces_source": "measured",
        "allocator_backend": "native", "cudnn_version": null});
    let spec = serde_json::json!({"workload": "script", "devices": ["cuda:0"], "seed": 0,
        "script": fixture(&format!("scripts/predict/{script}")), "script_args": args,
        "predict": target});
    let file = dir.join(format!("spec-{memo}.json"));
    std::fs::write(&file, spec.to_string()).unwrap();
    let out = Command::new(python)
        .args(["-m", "iteragpu.worker"])
        .arg(&file)
        .env(
            "PYTHONPATH",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("python"),
        )
        .env(key, value)
        .current_dir(dir)
        .output()
        .expect("the worker runs");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let mut event: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(data) = event.get_mut("data").and_then(|d| d.as_object_mut()) {
                for key in [
                    "duration_s",
                    "started_at_unix_us",
                    "ended_at_unix_us",
                    "pid",
                ] {
                    data.remove(key);
                }
            }
            event.to_string()
        })
        .collect()
}

fn counts(lines: &[String]) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for line in lines {
        let event: serde_json::Value = serde_json::from_str(line).unwrap();
        *counts
            .entry(event["type"].as_str().unwrap_or("?").to_string())
            .or_insert(0) += 1;
    }
    counts
}

/// Three workloads, each predicted with and without the memo: a training loop without markers
/// (foreach AdamW, its step-dependent floats), `generate()` on a tiny Llama (followed values, a
/// cache growing each token), and transformers' `Trainer` on BERT-large from its config for two
/// steps of the "Model training anatomy" page (fused AdamW, a learning-rate schedule): the same
/// documents. The first two also give the same event streams (every alloc, free and tag).
#[test]
#[ignore = "needs torch and transformers"]
fn predict_memo_changes_nothing() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let llama = fixture("tiny/llama").display().to_string();
    let bert = fixture("models/bert-large-uncased").display().to_string();
    let no_markers = fixture("scripts/predict/no_markers.py")
        .display()
        .to_string();
    let generate = fixture("scripts/predict/generate.py").display().to_string();
    let anatomy = fixture("scripts/predict/training_anatomy.py")
        .display()
        .to_string();
    let workloads: [(&str, Vec<&str>); 3] = [
        ("no_markers", vec!["--script", &no_markers]),
        ("generate", vec!["--script", &generate, "--", &llama, "6"]),
        ("anatomy", vec!["--script", &anatomy, "--", &bert, "8"]),
    ];
    for (name, args) in &workloads {
        let without = document(&python, dir.path(), name, "0", args);
        let with = document(&python, dir.path(), name, "1", args);
        assert!(
            without.contains("peak_reserved_bytes"),
            "{name}: a document with phases: {without}"
        );
        assert!(
            without == with,
            "{name}: the memo changed the prediction:\n--- without\n{without}\n--- with\n{with}"
        );
    }
    for (script, args) in [
        ("no_markers.py", vec![]),
        ("generate.py", vec![llama.as_str(), "6"]),
    ] {
        let without = events(&python, dir.path(), script, &args, "0");
        let with = events(&python, dir.path(), script, &args, "1");
        let allocs = counts(&without).get("alloc").copied().unwrap_or(0);
        assert!(allocs > 20, "{script}: storages allocated: {allocs}");
        assert_eq!(counts(&without), counts(&with), "{script}: event counts");
        assert!(
            without == with,
            "{script}: the memo changed the event stream"
        );
    }
}

/// `ITERAGPU_PREDICT_MEMO=check` checks every reuse against FakeTensorMode itself (its key
/// computed afresh, its own output compared field by field) and raises at the first difference:
/// a training loop and `generate()` run clean under it, and predict as without the memo.
#[test]
#[ignore = "needs torch and transformers"]
fn predict_memo_checked_against_fake_tensor_mode() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let llama = fixture("tiny/llama").display().to_string();
    let amp = fixture("scripts/predict/amp_scaler.py")
        .display()
        .to_string();
    let generate = fixture("scripts/predict/generate.py").display().to_string();
    for (name, args) in [
        ("amp_scaler", vec!["--script", amp.as_str()]),
        ("generate", vec!["--script", &generate, "--", &llama, "6"]),
    ] {
        let checked = document(&python, dir.path(), name, "check", &args);
        assert!(
            !checked.contains("memo:"),
            "{name}: a reuse differs from FakeTensorMode: {checked}"
        );
        let without = document(&python, dir.path(), name, "0", &args);
        assert!(without == checked, "{name}: checked run differs");
    }
}

/// The tracker writes its storage events (alloc, free) directly instead of through json.dumps:
/// the same characters, on allocations with and without a module or a site, non-ASCII and quoted
/// names, empty and huge shapes (`tests/python/event_encoding.py`).
#[test]
#[ignore = "needs torch"]
fn storage_events_are_encoded_as_json_dumps_writes_them() {
    let python = python_with(&["torch"]);
    let out = Command::new(&python)
        .env(
            "PYTHONPATH",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("python"),
        )
        .arg(fixture("../python/event_encoding.py"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("ok 9"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The document of `iteragpu predict ARGS` with ITERAGPU_PREDICT_STEADY=`steady`, without its
/// creation time, and the notes that say which steps the steady state fast-forwarded (taken out).
fn steady_document(
    python: &str,
    dir: &Path,
    name: &str,
    steady: &str,
    args: &[&str],
) -> (serde_json::Value, Vec<String>) {
    let out = dir.join(format!("{name}-steady-{steady}.json"));
    let run = Run::predict()
        .args(["--python", python, "--card", "H200"])
        .output(&out)
        .env("ITERAGPU_PREDICT_STEADY", steady)
        .args(args)
        .finish();
    assert!(out.exists(), "{name}: no prediction: {}", run.stderr());
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let object = doc.as_object_mut().unwrap();
    object.remove("created_at");
    let notes = object
        .get_mut("notes")
        .and_then(|n| n.as_array_mut())
        .expect("a document with notes");
    let steady_notes: Vec<String> = notes
        .iter()
        .filter_map(|n| n.as_str())
        .filter(|n| n.starts_with("steady state:"))
        .map(str::to_string)
        .collect();
    notes.retain(|n| !n.as_str().is_some_and(|n| n.starts_with("steady state:")));
    (doc, steady_notes)
}

/// A script's worker events without the fast-forwards (`ITERAGPU_PREDICT_STEADY=0`), then with
/// them, split into the notes that say what was fast-forwarded and every other event.
fn steady_events(
    python: &str,
    dir: &Path,
    script: &str,
    args: &[&str],
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let without = events_with(python, dir, script, args, ("ITERAGPU_PREDICT_STEADY", "0"));
    let (notes, with) = events_with(python, dir, script, args, ("ITERAGPU_PREDICT_STEADY", "1"))
        .into_iter()
        .partition(|line| line.contains("\"steady state:"));
    (without, notes, with)
}

/// The steady state of a `Trainer` epoch fast-forwarded (`python/iteragpu/predict/steady.py`,
/// off with `ITERAGPU_PREDICT_STEADY=0`) changes nothing but the note that says so, on three
/// workloads: the "Model training anatomy" epoch on BERT-large (24 steps, the last 5 not run), two
/// epochs of a small causal LM that logs every 15 steps and saves at each epoch's end (epoch 1's
/// last 6 steps not run, after its last log; epoch 2, logged late, runs whole), and an epoch
/// whose last batch is smaller (its batches drawn for a fast-forward, found unlike and given back:
/// every step run), and two epochs with gradient accumulation (2 micro-batches a step: 24 steps,
/// the last 5 not run; 49 micro-batches, whose last step of 1 must run: every step run). The same
/// documents; for all but the first, the same worker event streams, event for event (every
/// alloc, free and tag, the placeholder counts), but the note.
#[test]
#[ignore = "needs torch and transformers"]
fn predict_steady_state_changes_nothing() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let llama = fixture("tiny/llama").display().to_string();
    let bert = fixture("models/bert-large-uncased").display().to_string();
    let anatomy = fixture("scripts/predict/training_anatomy.py")
        .display()
        .to_string();
    let epochs = fixture("scripts/predict/trainer_epochs.py")
        .display()
        .to_string();
    let workloads: [(&str, &str, Vec<&str>, Option<&str>); 5] = [
        (
            "anatomy",
            &anatomy,
            vec![&bert, "96"],
            Some("steps 20 to 24 of epoch 1 (5 steps) were not run"),
        ),
        (
            "two_epochs",
            &epochs,
            vec![&llama, "80", "2", "15", "2"],
            Some("steps 35 to 40 of epoch 1 (6 steps) were not run"),
        ),
        (
            "smaller_last_batch",
            &epochs,
            vec![&llama, "41", "2", "100", "1"],
            None,
        ),
        (
            "accumulated",
            &epochs,
            vec![&llama, "96", "2", "100", "1", "2"],
            Some("steps 20 to 24 of epoch 1 (5 steps, 2 micro-batches each) were not run"),
        ),
        (
            "accumulated_shorter_last_step",
            &epochs,
            vec![&llama, "98", "2", "100", "1", "2"],
            None,
        ),
    ];
    for (name, script, script_args, skipped) in &workloads {
        let mut args = vec!["--script", script, "--"];
        args.extend(script_args);
        let (without, none) = steady_document(&python, dir.path(), name, "0", &args);
        let (with, notes) = steady_document(&python, dir.path(), name, "1", &args);
        assert!(
            without.to_string().contains("peak_reserved_bytes"),
            "{name}: a document with phases: {without}"
        );
        assert!(none.is_empty(), "{name}: fast-forwarded when off: {none:?}");
        // On torch 2.6 (CI's second interpreter) every step of these Trainers reads a value
        // (counted conservatively by steady.py: any read not answered by the placeholder policy),
        // so no step is fast-forwarded there: the documents must still be equal.
        let torch = without["assumptions"]["torch_version"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let skipped = if torch.starts_with("2.6") {
            &None
        } else {
            skipped
        };
        match skipped {
            Some(text) => assert!(
                notes.len() == 1 && notes[0].contains(text),
                "{name}: the note says `{text}`: {notes:?}"
            ),
            None => assert!(
                notes.is_empty(),
                "{name}: nothing fast-forwarded: {notes:?}"
            ),
        }
        assert!(
            without == with,
            "{name}: the fast-forward changed the prediction:\n--- without\n{without:#}\n--- with\n{with:#}"
        );
    }
    for (name, _, script_args, skipped) in &workloads[1..] {
        let (without, notes, with) =
            steady_events(&python, dir.path(), "trainer_epochs.py", script_args);
        assert!(
            notes.len() <= usize::from(skipped.is_some()),
            "{name}: fast-forwarded at most as in its document: {notes:?}"
        );
        let allocs = counts(&without).get("alloc").copied().unwrap_or(0);
        assert!(allocs > 1000, "{name}: storages allocated: {allocs}");
        assert_eq!(counts(&without), counts(&with), "{name}: event counts");
        assert!(
            without == with,
            "{name}: the fast-forward changed the event stream"
        );
    }
}

/// A tiny model's config from the fixtures with `layers` decoder layers (a stack of at least
/// four blocks is what `repeat.py` compares block by block), written into `dir`.
fn with_layers(dir: &Path, tiny: &str, layers: u64) -> String {
    let mut config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture(&format!("tiny/{tiny}/config.json"))).unwrap(),
    )
    .unwrap();
    config["num_hidden_layers"] = layers.into();
    let folder = dir.join(format!("{tiny}-{layers}-layers"));
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("config.json"), config.to_string()).unwrap();
    folder.display().to_string()
}

/// Calls without gradients fast-forwarded (`python/iteragpu/predict/repeat.py`, off with
/// `ITERAGPU_PREDICT_STEADY=0`) change nothing but the note that says so:
/// - a hand-written decode loop on a static KV cache (its `cumulative_length` advanced by each
///   skipped step, as the real steps advance it): the model's calls;
/// - `generate()` with a dynamic cache on an 8-layer Llama: each step's decoder layers after the
///   third, their cache slots given new storages of the grown length;
/// - `generate()` on an 8-layer Mistral whose sliding window (8) the cache outgrows: the layers'
///   counters and their cache slots, views of the last tokens, once the window is full;
/// - four modules called alike, of which two repeat exactly (one advancing a counter buffer whose
///   value sizes a last allocation) and two do not (a Python count that changes what a later call
///   allocates; a list passed in that grows).
///
/// The same documents and the same worker event streams, event for event; the notes name the
/// modules fast-forwarded.
#[test]
#[ignore = "needs torch and transformers"]
fn predict_repeated_calls_change_nothing() {
    let python = torch_python();
    let dir = tempfile::tempdir().unwrap();
    let llama = fixture("tiny/llama").display().to_string();
    let llama8 = with_layers(dir.path(), "llama", 8);
    let mistral8 = with_layers(dir.path(), "mistral-sliding", 8);
    let decode = fixture("scripts/predict/decode_loop.py")
        .display()
        .to_string();
    let generate = fixture("scripts/predict/generate.py").display().to_string();
    for (name, args, fast) in [
        (
            "decode",
            vec!["--script", &decode, "--", &llama, "40"],
            "LlamaForCausalLM's calls without gradients",
        ),
        (
            "sliding",
            vec!["--script", &generate, "--", &mistral8, "40", "4", "2"],
            "MistralDecoderLayer's calls without gradients",
        ),
    ] {
        let (without, none) = steady_document(&python, dir.path(), name, "0", &args);
        let (with, notes) = steady_document(&python, dir.path(), name, "1", &args);
        assert!(none.is_empty(), "{name}: fast-forwarded when off: {none:?}");
        assert!(
            notes.iter().any(|n| n.contains(fast)),
            "{name}: `{fast}` fast-forwarded: {notes:?}"
        );
        assert!(
            without.to_string().contains("peak_reserved_bytes"),
            "{name}: a document with phases: {without}"
        );
        assert!(
            without == with,
            "{name}: the fast-forward changed the prediction:\n--- without\n{without:#}\n--- with\n{with:#}"
        );
    }
    let modules = [
        "LlamaForCausalLM",
        "LlamaDecoderLayer",
        "MistralForCausalLM",
        "MistralDecoderLayer",
        "Counted",
        "Remembering",
        "Advancing",
        "Plain",
    ];
    for (script, args, fast) in [
        (
            "decode_loop.py",
            vec![llama.as_str(), "40"],
            vec!["LlamaForCausalLM"],
        ),
        (
            "generate.py",
            vec![llama8.as_str(), "12", "4", "2"],
            vec!["LlamaDecoderLayer"],
        ),
        (
            "generate.py",
            vec![mistral8.as_str(), "40", "4", "2"],
            vec!["MistralForCausalLM", "MistralDecoderLayer"],
        ),
        ("repeated_calls.py", vec!["40"], vec!["Advancing", "Plain"]),
    ] {
        let (without, notes, with) = steady_events(&python, dir.path(), script, &args);
        let named: Vec<&str> = modules
            .into_iter()
            .filter(|name| {
                notes
                    .iter()
                    .any(|n| n.contains(&format!("steady state: {name}'s")))
            })
            .collect();
        assert_eq!(
            named, fast,
            "{script} {args:?}: the modules fast-forwarded: {notes:?}"
        );
        let allocs = counts(&without).get("alloc").copied().unwrap_or(0);
        assert!(allocs > 300, "{script}: storages allocated: {allocs}");
        assert_eq!(counts(&without), counts(&with), "{script}: event counts");
        assert!(
            without == with,
            "{script} {args:?}: the fast-forward changed the event stream"
        );
    }
}
