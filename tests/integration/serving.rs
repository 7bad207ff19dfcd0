//! `estimate --serve` against public vLLM start-up logs (tests/fixtures/serving/logs, each with
//! its source URL and what it does not state). Where a log prints the figures the engine measured
//! (weights, activation peak, non-torch, device total), they are fed in and the blocks or the KV
//! budget must land within 5%; the logs' own blocks/concurrency pairs are checked against the
//! engine's concurrency rule. Every row is printed as the README's table shows it.

use crate::common::{estimate_json, fixture, iteragpu};

const GIB: f64 = (1u64 << 30) as f64;

fn log(name: &str) -> serde_json::Value {
    let path = fixture("serving/logs").join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn err(planner: f64, log: f64) -> f64 {
    (planner - log) / log * 100.0
}

/// `--flag` values from a log's own figures, each as the engine printed it.
fn serve(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--serve", "vllm"];
    all.extend_from_slice(args);
    estimate_json(&all)
}

fn model(name: &str) -> String {
    fixture("models").join(name).display().to_string()
}

#[test]
fn serving_planner_lands_on_the_logs_blocks_when_fed_their_measured_figures() {
    let llama3 = model("llama-3.1-8b");
    let mut rows = Vec::new();
    // 01 and 02: Llama-3.1-8B on an RTX 3090, v0.6.4.x log format (one-line profiling result).
    for (name, len, peak) in [
        ("01-llama31-8b-rtx3090-20k", "20000", "17.06GiB"),
        ("02-llama31-8b-rtx3090-29k-fail", "29000", "17.98GiB"),
    ] {
        let l = log(name);
        // "Loading model weights took 14.9888 GB": vLLM divides by 2^30 (worker/model_runner.py
        // `model_memory_usage / float(2**30)`), so its "GB" is GiB.
        let weights = 14.9888 * GIB;
        let peak_bytes = peak.trim_end_matches("GiB").parse::<f64>().unwrap() * GIB;
        let activation = format!("{}", (peak_bytes - weights).round() as u64);
        let doc = serve(&[
            "--model",
            &llama3,
            "--card",
            "RTX 3090",
            "--engine-version",
            "0.6.4",
            "--max-model-len",
            len,
            "--device-total",
            "23.58GiB",
            "--weights-memory",
            "14.9888GiB",
            "--activation-peak",
            &activation,
            "--non-torch",
            "0.35GiB",
        ]);
        let sv = &doc["serving"];
        let blocks = sv["num_blocks"].as_u64().unwrap() as f64;
        let logged = l["figures"]["gpu_blocks"].as_f64().unwrap();
        let e = err(blocks, logged);
        assert!(
            e.abs() < 5.0,
            "{name}: {blocks} blocks vs the log's {logged} ({e:.2}%)"
        );
        let conc = sv["concurrency"][0][1].as_f64().unwrap();
        let logged_conc = l["figures"]["max_concurrency"]["x"].as_f64().unwrap();
        assert!(
            (conc - logged_conc).abs() / logged_conc < 0.05,
            "{name}: {conc} vs {logged_conc}"
        );
        rows.push(format!("{name}: blocks {blocks} vs {logged} ({e:+.2}%), concurrency {conc:.2}x vs {logged_conc}x"));
    }
    // 04: Meta-Llama-3-8B on a 79.22 GiB card, defaults; the log prints the KV budget, no blocks.
    let doc = serve(&[
        "--model",
        &model("llama-3-8b"),
        "--card",
        "H100 80GB",
        "--engine-version",
        "0.6.5",
        "--device-total",
        "79.22GiB",
        "--weights-memory",
        "14.96GiB",
        "--activation-peak",
        "1.26GiB",
        "--non-torch",
        "1.79GiB",
    ]);
    let budget = doc["serving"]["kv_budget_bytes"].as_f64().unwrap() / GIB;
    let e = err(budget, 53.29);
    assert!(
        e.abs() < 1.0,
        "04: KV budget {budget:.2} GiB vs the log's 53.29 GiB"
    );
    rows.push(format!(
        "04-llama3-8b-h100-tp1-profiling: KV budget {budget:.2} GiB vs 53.29 GiB ({e:+.2}%)"
    ));
    println!("{}", rows.join("\n"));
}

#[test]
fn serving_planner_weights_match_the_logs_from_the_config_alone() {
    // 01 prints "Loading model weights took 14.9888 GB" (GiB: vLLM divides by 2^30) and 07
    // "14.9889 GiB" for Llama-3.1-8B. The planner's figure comes from config.json alone: the
    // parameters (14.9575 GiB) and vLLM's rotary cos/sin cache, 131,072 positions × 128 × 2 bytes
    // (0.0313 GiB), which "Loading model weights took" includes. The logs print 4 decimals.
    let doc = serve(&["--model", &model("llama-3.1-8b"), "--card", "H100 80GB"]);
    let weights = crate::common::id_bytes(&doc, "weights") as f64;
    assert!(
        (weights / GIB - 14.9888).abs() < 0.00005 + 1e-9,
        "weights {:.5} GiB vs the logs' 14.9888 GiB",
        weights / GIB
    );
    println!(
        "weights from config.json: {:.4} GiB vs the logs' 14.9888 / 14.9889 GiB",
        weights / GIB
    );
    // Without the log's figures the activation and non-torch terms are assumed, and say so.
    for id in ["serve_activation_peak", "non_torch_memory"] {
        assert_eq!(
            crate::common::term_by_id(&doc, id)["kind"],
            "assumed",
            "{id}"
        );
    }
}

#[test]
fn logs_blocks_and_concurrency_follow_the_engines_rule() {
    // V0 and V1 ≤ 0.8: concurrency = blocks × block_size / max_model_len (executor_base.py
    // 0.7.3:114-117; kv_cache_utils.py 0.8.5:633-636); "KV cache size" = blocks × block_size.
    for name in [
        "01-llama31-8b-rtx3090-20k",
        "02-llama31-8b-rtx3090-29k-fail",
        "06-llama31-70b-w8a8-gmu098-v1",
    ] {
        let l = log(name);
        let f = &l["figures"];
        let blocks = f["gpu_blocks"].as_f64().unwrap();
        let len = f["max_concurrency"]["tokens"].as_f64().unwrap();
        let x = f["max_concurrency"]["x"].as_f64().unwrap();
        assert!(
            (blocks * 16.0 / len - x).abs() < 0.006,
            "{name}: {blocks} × 16 / {len} ≠ {x}"
        );
    }
    let l = log("07-llama31-8b-l40s-v1");
    let f = &l["figures"];
    let x =
        f["kv_cache_tokens"].as_f64().unwrap() / f["max_concurrency"]["tokens"].as_f64().unwrap();
    assert!((x - f["max_concurrency"]["x"].as_f64().unwrap()).abs() < 0.006);
    // Every log keeps its source and says what it lacks.
    for entry in std::fs::read_dir(fixture("serving/logs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let doc: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            assert!(
                doc["source_url"]
                    .as_str()
                    .is_some_and(|u| u.starts_with("http")),
                "{path:?}"
            );
            assert!(
                doc["completeness"].as_str().is_some_and(|c| !c.is_empty()),
                "{path:?}"
            );
        }
    }
}

#[test]
fn serving_refuses_what_it_cannot_plan() {
    let llama = model("llama-3-8b");
    for (extra, says) in [
        (["--tensor-parallel-size", "3"], "--tensor-parallel-size 3"),
        (["--context", "4096"], "not part of a --serve plan"),
    ] {
        let out = iteragpu()
            .args(["estimate", "--serve", "vllm", "--model", &llama])
            .args(["--card", "H100 80GB"])
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains(says));
    }
}

/// One planner run's figures: (blocks, tokens, KV budget in GiB, concurrency at max_model_len).
fn figures(doc: &serde_json::Value) -> (f64, f64, f64, f64) {
    let sv = &doc["serving"];
    (
        sv["num_blocks"].as_f64().unwrap_or(f64::NAN),
        sv["kv_tokens"].as_f64().unwrap(),
        sv["kv_budget_bytes"].as_f64().unwrap() / GIB,
        sv["concurrency"][0][1].as_f64().unwrap(),
    )
}

#[test]
fn serving_planner_against_the_other_logs_each_fed_what_it_states() {
    let mut rows = Vec::new();
    // 05: Meta-Llama-3-8B at TP 2 prints "model weights take 7.48GiB" per rank: the config's
    // weights ÷ 2 must land on it (its KV figure is cut off in the source).
    let doc = serve(&[
        "--model",
        &model("llama-3-8b"),
        "--card",
        "H100 80GB",
        "--engine-version",
        "0.6.5",
        "--tensor-parallel-size",
        "2",
    ]);
    let w = crate::common::id_bytes(&doc, "weights") as f64 / GIB;
    assert!(
        (w - 7.48).abs() < 0.005 + 1e-9,
        "05: weights {w:.4} GiB vs 7.48 GiB"
    );
    rows.push(format!("05: weights per rank {w:.4} GiB vs 7.48 GiB"));

    // 08: Qwen3-235B-A22B-FP8 at TP 4; the log prints "Available KV cache memory: 8.11 GiB" and
    // "GPU KV cache size: 178,880 tokens". The KV layout (94 layers × 4 KV heads × 128, bf16) is
    // that of the Instruct-2507 config in the fixtures; the FP8 weights do not enter the pool.
    let doc = serve(&[
        "--model",
        &model("qwen3-235b-a22b-instruct-2507"),
        "--card",
        "H100 80GB",
        "--engine-version",
        "0.9.2",
        "--tensor-parallel-size",
        "4",
        "--max-model-len",
        "40960",
        "--kv-cache-memory",
        "8.11GiB",
    ]);
    let (_, tokens, _, _) = figures(&doc);
    let e = err(tokens, 178_880.0);
    assert!(e.abs() < 5.0, "08: {tokens} tokens vs 178,880 ({e:.2}%)");
    assert_eq!(
        crate::common::term_by_id(&doc, "weights")["in_total"],
        false
    );
    rows.push(format!("08: {tokens} tokens vs 178880 ({e:+.2}%)"));

    // 09: the same model on SGLang prints "#tokens: 367404, K size: 8.23 GB, V size: 8.23 GB"
    // (SGLang's GB is 2^30): the K + V bytes over the cell (1 KV head per rank × 128 × 94 × 2 × 2)
    // must give its max_total_num_tokens.
    let doc = estimate_json(&[
        "--serve",
        "sglang",
        "--model",
        &model("qwen3-235b-a22b-instruct-2507"),
        "--card",
        "H100 80GB",
        "--tensor-parallel-size",
        "4",
        "--max-model-len",
        "40960",
        "--kv-cache-memory",
        "16.46GiB",
    ]);
    assert_eq!(doc["serving"]["page_bytes"].as_u64(), Some(48_128));
    let (_, tokens, _, _) = figures(&doc);
    let e = err(tokens, 367_404.0);
    assert!(e.abs() < 0.5, "09: {tokens} tokens vs 367,404 ({e:.2}%)");
    rows.push(format!("09 (SGLang): {tokens} tokens vs 367404 ({e:+.2}%)"));

    // 11: Qwen2.5-7B (4-bit, id not stated; the KV layout is Qwen2-7B's: 28 × 4 × 128) on an
    // 8 GiB card at 0.7: the log's figures give a negative budget, 0 blocks and 0.00x.
    let doc = serve(&[
        "--model",
        &model("qwen2-7b"),
        "--card",
        "L4",
        "--engine-version",
        "0.7.3",
        "--device-total",
        "8.00GiB",
        "--gpu-memory-utilization",
        "0.7",
        "--max-model-len",
        "4096",
        "--weights-memory",
        "5.2032GiB",
        "--activation-peak",
        "1.42GiB",
        "--non-torch",
        "0.03GiB",
    ]);
    let (blocks, _, budget, conc) = figures(&doc);
    assert_eq!((blocks, conc), (0.0, 0.0), "11");
    assert!(
        (budget + 1.05).abs() < 0.01,
        "11: budget {budget:.3} GiB vs -1.05"
    );
    assert!(doc["notes"].to_string().contains("refuses to start"));
    rows.push(format!(
        "11: budget {budget:.3} GiB vs -1.05 GiB, 0 blocks, 0.00x"
    ));

    // Logs that do not state their activation peak or non-torch memory: the planner's assumed
    // rules, the difference printed, never tuned. Only 12 is asserted within 5%; 06, 07 and 13
    // pin the planner's own figures and the gap (V1's torch.compile peak, 0.8's device-wide
    // charge, and 2023's TP profiling bug are what the logs show and the rules do not model).
    let cases: [(&str, Vec<&str>, f64, bool); 4] = [
        (
            "06",
            vec![
                "--model",
                "llama-3-70b",
                "--card",
                "H100 80GB",
                "--engine-version",
                "0.7.1",
                "--device-total",
                "79.22GiB",
                "--gpu-memory-utilization",
                "0.98",
                "--max-model-len",
                "2048",
                "--weights-memory",
                "67.7229GiB",
            ],
            1381.0,
            false,
        ),
        (
            "07",
            vec![
                "--model",
                // Llama-3.1-8B-Instruct's 131,072 positions: llama-3-8b's 8,192 would refuse
                // max_model_len 32768 as vLLM does (same KV layout, weights given).
                "llama-3.1-8b",
                "--card",
                "L40S",
                "--engine-version",
                "0.8.4",
                "--max-model-len",
                "32768",
                "--weights-memory",
                "14.9889GiB",
            ],
            158_656.0 / 16.0,
            false,
        ),
        (
            "12",
            vec![
                "--model",
                "llama-2-7b-gptq",
                "--card",
                "A100 80GB",
                "--engine-version",
                "0.2.5",
                "--max-model-len",
                "4096",
                // Llama-2-7B's 6,738,415,616 parameters (REFERENCE.md) × 2 bytes (fp16).
                "--weights-memory",
                "13476831232",
            ],
            7351.0,
            true,
        ),
        (
            "13",
            vec![
                "--model",
                "llama-3-70b",
                "--card",
                "A100 80GB",
                "--engine-version",
                "0.2.5",
                "--max-model-len",
                "4096",
                "--tensor-parallel-size",
                "4",
                // Llama-2-70B: Llama-3-70B's 70,553,706,496 less 2 × (128,256 − 32,000) × 8,192
                // vocabulary rows = 68,976,648,192 parameters × 2 bytes ÷ 4 ranks.
                "--weights-memory",
                "34488324096",
            ],
            20865.0,
            false,
        ),
    ];
    for (name, mut args, logged, within) in cases {
        let path = model(args[1]);
        args[1] = &path;
        let doc = serve(&args);
        let (blocks, _, _, _) = figures(&doc);
        let e = err(blocks, logged);
        assert_eq!(
            crate::common::term_by_id(&doc, "serve_activation_peak")["kind"],
            "assumed",
            "{name}"
        );
        if within {
            assert!(
                e.abs() < 5.0,
                "{name}: {blocks} blocks vs {logged} ({e:.2}%)"
            );
        } else {
            assert!(
                e > 5.0 && e < 60.0,
                "{name}: {blocks} blocks vs {logged} ({e:.2}%): the gap changed, update the README table"
            );
        }
        rows.push(format!("{name}: {blocks} blocks vs {logged} ({e:+.2}%)"));
    }
    println!("{}", rows.join("\n"));
}

/// `--activation-peak predict` against the 5 logs that print the profile run's activation peak
/// (04, 05: "PyTorch activation peak memory", 0.6.5; 01, 02: peak_torch_memory − the weights,
/// 0.6.4; 11: 0.7.3). Each log's other figures are fed in, so only the activation term is
/// predicted. The bands are the errors observed (README, "Serving planner"), never tuned: the two
/// RTX 3090 logs land within 10% and their slope between 20,000 and 29,000 tokens within 10%;
/// the prediction stays 20–35% below the H100 (04, 05) and the 4-bit Qwen (11) logs, a gap the
/// README states (causes not isolated). A change of either shows.
#[test]
#[ignore = "needs torch and transformers"]
fn serving_profile_run_activation_peak_beside_the_logs() {
    let python = crate::common::torch_python();
    let llama3 = model("llama-3.1-8b");
    let qwen2 = model("qwen2-7b");
    let h100 = [
        "--card",
        "H100 80GB",
        "--engine-version",
        "0.6.5",
        "--device-total",
        "79.22GiB",
    ];
    let rtx = [
        "--card",
        "RTX 3090",
        "--engine-version",
        "0.6.4",
        "--device-total",
        "23.58GiB",
        "--weights-memory",
        "14.9888GiB",
        "--non-torch",
        "0.35GiB",
    ];
    // (log, arguments, the log's activation peak in GiB, the band of the error in %)
    type Case<'a> = (&'a str, Vec<&'a str>, f64, (f64, f64));
    let cases: [Case; 5] = [
        (
            "04",
            [
                &["--model", &llama3][..],
                &h100,
                &["--weights-memory", "14.96GiB", "--non-torch", "1.79GiB"],
            ]
            .concat(),
            1.26,
            (-35.0, -20.0),
        ),
        (
            "05",
            [
                &["--model", &llama3, "--tensor-parallel-size", "2"][..],
                &h100,
            ]
            .concat(),
            1.26,
            (-35.0, -20.0),
        ),
        (
            "01",
            [&["--model", &llama3, "--max-model-len", "20000"][..], &rtx].concat(),
            17.06 - 14.9888,
            (-10.0, 10.0),
        ),
        (
            "02",
            [&["--model", &llama3, "--max-model-len", "29000"][..], &rtx].concat(),
            17.98 - 14.9888,
            (-10.0, 10.0),
        ),
        (
            "11",
            vec![
                "--model",
                &qwen2,
                "--card",
                "L4",
                "--engine-version",
                "0.7.3",
                "--device-total",
                "8.00GiB",
                "--gpu-memory-utilization",
                "0.7",
                "--max-model-len",
                "4096",
                "--weights-memory",
                "5.2032GiB",
                "--non-torch",
                "0.03GiB",
            ],
            1.42,
            (-35.0, -20.0),
        ),
    ];
    let mut rows = Vec::new();
    let mut predicted = std::collections::BTreeMap::new();
    for (name, args, logged, (low, high)) in cases {
        let out = crate::common::Run::command("estimate")
            .env("ITERAGPU_PYTHON", &python)
            .args(["--serve", "vllm", "--activation-peak", "predict", "--json"])
            .args(&args)
            .succeeds()
            .stdout();
        let doc: serde_json::Value = serde_json::from_str(&out).expect("estimate --json");
        let term = crate::common::term_by_id(&doc, "serve_activation_peak");
        assert_eq!(
            term["kind"], "assumed",
            "{name}: a prediction is not a calculation"
        );
        assert_eq!(term["inputs"]["predicted"], true, "{name}");
        let formula = term["formula"].as_str().unwrap();
        assert!(
            formula.starts_with(
                "PREDICTED (transformers' implementation at the given shapes, not vLLM's kernels)"
            ),
            "{name}: {formula}"
        );
        let gib = term["bytes"].as_f64().unwrap() / GIB;
        let e = err(gib, logged);
        assert!(
            e > low && e < high,
            "{name}: predicted {gib:.3} GiB vs the log's {logged:.3} GiB ({e:+.1}%), outside ({low}, {high})%: the gap changed, update the README table"
        );
        predicted.insert(name, gib);
        let sv = &doc["serving"];
        rows.push(format!(
            "{name}: {} tokens over {} seqs: predicted {gib:.3} GiB vs the log's {logged:.3} GiB ({e:+.1}%); blocks {}, budget {:.2} GiB",
            sv["max_num_batched_tokens"],
            sv["max_num_seqs"],
            sv["num_blocks"],
            sv["kv_budget_bytes"].as_f64().unwrap() / GIB
        ));
    }
    // The 9,000 tokens between 01 and 02: what each token adds.
    let slope = (predicted["02"] - predicted["01"]) / (17.98 - 17.06);
    assert!(
        (slope - 1.0).abs() < 0.10,
        "01 → 02: the prediction grows {slope:.3}× as fast as the logs"
    );
    rows.push(format!(
        "01 → 02: the prediction grows {slope:.3}× as fast as the logs"
    ));
    println!("{}", rows.join("\n"));
}

#[test]
fn serving_profile_run_without_torch_exits_2() {
    crate::common::Run::command("estimate")
        .env("ITERAGPU_PYTHON", "python3")
        .env("PYTHONPATH", fixture("no_torch"))
        .args(["--serve", "vllm", "--activation-peak", "predict"])
        .args(["--model", &model("llama-3-8b"), "--card", "H100 80GB"])
        .expect_status(2)
        .stderr_has("install torch and transformers");
    // SGLang runs no profile run: refused before any worker starts.
    crate::common::Run::command("estimate")
        .args(["--serve", "sglang", "--activation-peak", "predict"])
        .args(["--model", &model("llama-3-8b"), "--card", "H100 80GB"])
        .expect_status(1)
        .stderr_has("SGLang runs none");
}

fn serve_fails(args: &[&str], env: Option<(&str, &str)>) -> String {
    let mut cmd = iteragpu();
    cmd.arg("estimate").args(args);
    cmd.env_remove("VLLM_ALLOW_LONG_MAX_MODEL_LEN");
    if let Some((k, v)) = env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn serving_serves_a_float32_config_in_16_bits_unless_dtype_is_given() {
    let gemma = model("gemma-2-9b");
    let auto = serve(&["--model", &gemma, "--card", "A100 80GB"]);
    let explicit = serve(&[
        "--model",
        &gemma,
        "--card",
        "A100 80GB",
        "--dtype",
        "float32",
    ]);
    assert_eq!(auto["serving"]["kv_dtype_bytes"], 2);
    assert_eq!(explicit["serving"]["kv_dtype_bytes"], 4);
    let (wa, we) = (
        crate::common::id_bytes(&auto, "weights"),
        crate::common::id_bytes(&explicit, "weights"),
    );
    // Half the float32 weights (the rotary cache halves too).
    assert_eq!(wa * 2, we);
    let f = crate::common::term_by_id(&auto, "weights")["formula"].to_string();
    assert!(
        f.contains("_resolve_auto_dtype") && f.contains("bfloat16"),
        "{f}"
    );
    let sglang = estimate_json(&[
        "--serve",
        "sglang",
        "--model",
        &gemma,
        "--card",
        "A100 80GB",
    ]);
    assert_eq!(sglang["serving"]["kv_dtype_bytes"], 2);
}

#[test]
fn serving_refuses_a_max_model_len_above_the_model_a_budget_above_the_card_and_sglang_eager() {
    let llama = model("llama-3-8b");
    let base = ["--serve", "vllm", "--model", &llama, "--card", "A100 80GB"];
    let e = serve_fails(&[&base[..], &["--max-model-len", "100000"]].concat(), None);
    assert!(
        e.contains("100000") && e.contains("8192") && e.contains("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"),
        "{e}"
    );
    let mut all = vec!["estimate"];
    all.extend_from_slice(&base);
    all.extend_from_slice(&["--max-model-len", "100000", "--json"]);
    let out = iteragpu()
        .args(&all)
        .env("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("starts with a warning"));
    let e = serve_fails(&[&base[..], &["--kv-cache-memory", "70GiB"]].concat(), None);
    assert!(
        e.contains("more than the card can hold") && e.contains("69,836,726,272"),
        "{e}"
    );
    let e = serve_fails(
        &[
            "--serve",
            "sglang",
            "--model",
            &llama,
            "--card",
            "A100 80GB",
            "--enforce-eager",
        ],
        None,
    );
    assert!(e.contains("--disable-cuda-graph"), "{e}");
}

#[test]
fn serving_states_or_refuses_unknown_engine_versions() {
    let llama = model("llama-3-8b");
    let base = [
        "--serve",
        "vllm",
        "--model",
        &llama,
        "--card",
        "A100 80GB",
        "--engine-version",
    ];
    let e = serve_fails(&[&base[..], &["0.99.0"]].concat(), None);
    assert!(
        e.contains("newer than any vLLM release") && e.contains("0.24.0"),
        "{e}"
    );
    let e = serve_fails(&[&base[..], &["0.1.0"]].concat(), None);
    assert!(e.contains("older than any vLLM release"), "{e}");
    let doc = serve(&[
        "--model",
        &llama,
        "--card",
        "A100 80GB",
        "--engine-version",
        "0.4.0",
    ]);
    assert!(
        doc["notes"][0]
            .as_str()
            .unwrap()
            .contains("0.5.5's defaults"),
        "{}",
        doc["notes"]
    );
    let doc = serve(&[
        "--model",
        &llama,
        "--card",
        "A100 80GB",
        "--engine-version",
        "0.15.0",
    ]);
    assert!(
        doc["notes"][0]
            .as_str()
            .unwrap()
            .contains("0.11.0's rules apply")
    );
    let e = serve_fails(
        &[
            "--serve",
            "sglang",
            "--model",
            &llama,
            "--card",
            "A100 80GB",
            "--engine-version",
            "0.11.0",
        ],
        None,
    );
    assert!(e.contains("not an SGLang release"), "{e}");
}

#[test]
fn serving_says_what_to_do_with_a_vision_language_model() {
    for (name, text) in [
        ("qwen2-vl-2b-instruct", "top level"),
        ("llava-1.5-7b-hf", "model_type `llama`"),
        ("llama-3.2-11b-vision-defaults", "not one of these families"),
    ] {
        let e = serve_fails(
            &[
                "--serve",
                "vllm",
                "--model",
                &model(name),
                "--card",
                "A100 80GB",
            ],
            None,
        );
        assert!(
            e.contains("vision-language model") && e.contains(text),
            "{name}: {e}"
        );
        assert!(!e.contains("--parameters N --bits B"), "{e}");
    }
}

#[test]
fn serving_a_card_too_small_says_the_engine_refuses_to_start() {
    let out = iteragpu()
        .args([
            "estimate",
            "--serve",
            "vllm",
            "--model",
            &model("llama-3-8b"),
            "--card",
            "T4",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("vLLM would REFUSE TO START: KV budget −2,"),
        "{text}"
    );
    assert!(
        !text.contains("KV budget 0 bytes") && !text.contains("# GPU blocks: 0"),
        "{text}"
    );
}

/// vLLM's fp8 KV variants (`fp8_e4m3`, `fp8_e5m2`) are one byte per element like `fp8`: the same
/// blocks, twice those of the 16-bit cache.
#[test]
fn serving_planner_takes_the_engines_fp8_kv_spellings() {
    let blocks = |dtype: &str| {
        serve(&[
            "--model",
            &model("llama-3-8b"),
            "--card",
            "H100 80GB",
            "--kv-cache-dtype",
            dtype,
        ])["serving"]["num_blocks"]
            .as_u64()
            .unwrap()
    };
    let fp8 = blocks("fp8");
    assert_eq!(blocks("fp8_e4m3"), fp8);
    assert_eq!(blocks("fp8_e5m2"), fp8);
    let auto = blocks("auto");
    assert!(fp8 >= 2 * auto && fp8 <= 2 * auto + 1, "{fp8} vs {auto}");
}
