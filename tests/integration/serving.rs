//! `estimate serve` against public vLLM start-up logs (tests/fixtures/serving/logs, each with
//! its source URL and what it does not state). Where a log prints the figures the engine measured
//! (weights, activation peak, non-torch, device total), they are fed in and the blocks or the KV
//! budget must land within 5%; the logs' own blocks/concurrency pairs are checked against the
//! engine's concurrency rule. Every row is printed as docs/serving.md's table shows it.

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
    let mut all = vec!["serve", "vllm"];
    all.extend_from_slice(args);
    estimate_json(&all)
}

/// `estimate serve vllm … --json`: the exit status and the document (0: starts, 3: the engine
/// is predicted to refuse to start, the plan printed all the same).
fn serve_status(args: &[&str]) -> (i32, serde_json::Value) {
    let mut all = vec!["estimate", "serve", "vllm"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = iteragpu().args(&all).output().unwrap();
    let code = out.status.code().unwrap_or(-1);
    assert!(
        code == 0 || code == 3,
        "estimate {args:?} exited {code}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("estimate --json");
    assert_eq!(
        doc["serving"]["start"]["starts"].as_bool(),
        Some(code == 0),
        "{args:?}: the status and the document disagree"
    );
    (code, doc)
}

/// The first refusal of a plan predicted to be refused (exit 3).
fn refused(args: &[&str]) -> serde_json::Value {
    let (code, doc) = serve_status(args);
    assert_eq!(
        code, 3,
        "{args:?} was predicted to start: {}",
        doc["serving"]["start"]
    );
    doc
}

/// 46176 → "46,176", as the table prints it.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn first_refusal(doc: &serde_json::Value) -> &serde_json::Value {
    &doc["serving"]["start"]["refusals"][0]
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
        let (code, doc) = serve_status(&[
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
        // 01 started; 02 was refused, as its log shows.
        assert_eq!(code, if name.starts_with("02") { 3 } else { 0 }, "{name}");
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

/// Issue 42, item 4: the RTX 3090's default total is CUDA's (the catalog's `cuda_total`), not
/// the driver's 24,576 MiB. Logs 01 and 02 planned with every figure of the log but the total
/// (the catalog's default instead of the log's 23.58 GiB) land within 2% of the logged blocks;
/// with the driver's figure they land more than 5% high, as the issue found.
#[test]
fn rtx3090_logs_planned_with_the_catalogs_default_total_land_on_their_blocks() {
    let llama3 = model("llama-3.1-8b");
    let mut rows = Vec::new();
    for (name, len, peak) in [
        ("01-llama31-8b-rtx3090-20k", "20000", 17.06),
        ("02-llama31-8b-rtx3090-29k-fail", "29000", 17.98),
    ] {
        let logged = log(name)["figures"]["gpu_blocks"].as_f64().unwrap();
        let activation = format!("{}", ((peak - 14.9888) * GIB).round() as u64);
        let plan = |total: Option<&str>| {
            let mut args = vec![
                "--model",
                &llama3,
                "--card",
                "RTX 3090",
                "--engine-version",
                "0.6.4",
                "--max-model-len",
                len,
                "--weights-memory",
                "14.9888GiB",
                "--activation-peak",
                &activation,
                "--non-torch",
                "0.35GiB",
            ];
            if let Some(t) = total {
                args.extend(["--device-total", t]);
            }
            serve_status(&args).1
        };
        let doc = plan(None);
        let sv = &doc["serving"];
        // The default total is the catalog's CUDA total, and the plan says so.
        let total = sv["device_total_bytes"].as_u64().unwrap();
        assert_eq!(
            total, 25_297_357_373,
            "23.56 GiB, the lowest public reading"
        );
        let source = sv["device_total_source"].as_str().unwrap();
        assert!(
            source.starts_with("RTX 3090, CUDA's total as public logs printed it: 23.56 GiB (±0.005 GiB as printed)")
                && source.contains("23.56–23.70 GiB"),
            "{source}"
        );
        let notes = doc["notes"].to_string();
        assert!(
            notes.contains("CUDA's total, the torch.cuda.mem_get_info()[1] vLLM reads")
                && !notes.contains("pass the log's total_gpu_memory with --device-total"),
            "{notes}"
        );
        let blocks = sv["num_blocks"].as_u64().unwrap() as f64;
        let e = err(blocks, logged);
        assert!(
            e.abs() < 2.0,
            "{name}: {blocks} vs the log's {logged} ({e:+.2}%)"
        );
        // The driver's figure (nvidia-smi's 24,576 MiB), the catalog's default before.
        let driver = plan(Some("24576MiB"))["serving"]["num_blocks"]
            .as_u64()
            .unwrap() as f64;
        let before = err(driver, logged);
        assert!(
            before > 5.0,
            "{name}: driver's total gives {driver} ({before:+.2}%)"
        );
        rows.push(format!(
            "{name}: {blocks} blocks ({e:+.2}%) with the catalog's CUDA total vs {driver} ({before:+.2}%) with the driver's, logged {logged}"
        ));
    }
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

/// `estimate serve ENGINE` is its own mode: its help lists the engine's settings and none of
/// the language model's; `estimate --help` lists none of them. The old `estimate --serve ENGINE`
/// spelling still plans the same, with a note saying the new one.
#[test]
fn serving_is_its_own_mode_and_the_old_spelling_still_plans() {
    let help = |args: &[&str]| {
        let out = iteragpu().args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let estimate = help(&["estimate", "--help"]);
    assert!(
        estimate.contains("serve") && estimate.contains("--kv-layers"),
        "{estimate}"
    );
    for serving in [
        "--card",
        "--max-model-len",
        "--gpu-memory-utilization",
        "--serve ",
    ] {
        assert!(
            !estimate.contains(serving),
            "{serving} in estimate --help:\n{estimate}"
        );
    }
    let serving = help(&["estimate", "serve", "--help"]);
    assert!(
        serving.contains("--max-model-len") && serving.contains("<ENGINE>"),
        "{serving}"
    );
    for other in ["--kv-layers", "--train", "--context", "--shard"] {
        assert!(
            !serving.contains(other),
            "{other} in estimate serve --help:\n{serving}"
        );
    }
    let llama = model("llama-3-8b");
    let args = [
        "--model",
        &llama,
        "--card",
        "H100 80GB",
        "--max-model-len",
        "8192",
    ];
    let new = serve(&args);
    let out = iteragpu()
        .args(["estimate", "--serve", "vllm"])
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("spelled `estimate serve vllm` now"));
    let old: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(old["serving"], new["serving"]);
    assert_eq!(old["terms"], new["terms"]);
    assert!(
        old["notes"]
            .to_string()
            .contains("spelled `estimate serve vllm` now")
    );
}

#[test]
fn serving_refuses_what_it_cannot_plan() {
    let llama = model("llama-3-8b");
    // `estimate serve` has no --context: clap refuses it by name; the old spelling says why.
    let out = iteragpu()
        .args(["estimate", "serve", "vllm", "--model", &llama])
        .args(["--card", "H100 80GB", "--context", "4096"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unexpected argument '--context'"));
    let out = iteragpu()
        .args(["estimate", "--serve", "vllm", "--model", &llama])
        .args(["--card", "H100 80GB", "--context", "4096"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--context is not part of a serving plan")
    );
    // A TP the model's heads refuse is the engine's refusal, not bad input: exit 3, the plan
    // printed with the engine's words first.
    let out = iteragpu()
        .args(["estimate", "serve", "vllm", "--model", &llama])
        .args(["--card", "H100 80GB", "--tensor-parallel-size", "3"])
        .args(["--engine-version", "0.11.0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with(
            "vLLM 0.11.0 would REFUSE TO START: Total number of attention heads (32) must be divisible by tensor parallel size (3)."
        )
    );
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
        "serve",
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
    let doc = refused(&[
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
    // V0 logs "# cuda blocks: 0", then stops on raise_if_cache_size_invalid.
    assert_eq!(first_refusal(&doc)["rule"], "no_kv_memory");
    assert!(
        first_refusal(&doc)["message"]
            .as_str()
            .unwrap()
            .starts_with(
                "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"
            ),
        "{}",
        first_refusal(&doc)
    );
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
        // These logs started: the plan must say so.
        assert_eq!(doc["serving"]["start"]["starts"], true, "{name}");
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
                "{name}: {blocks} blocks vs {logged} ({e:.2}%): the gap changed, update the table in docs/serving.md"
            );
        }
        rows.push(format!("{name}: {blocks} blocks vs {logged} ({e:+.2}%)"));
    }
    println!("{}", rows.join("\n"));
}

/// `--activation-peak predict` against the 5 logs that print the profile run's activation peak
/// (04, 05: "PyTorch activation peak memory", 0.6.5; 01, 02: peak_torch_memory − the weights,
/// 0.6.4; 11: 0.7.3), allocated against allocated. Each log's other figures are fed in, so only
/// the activation term is predicted. Observed (docs/serving.md): all five within 0.5%, the 01 → 02
/// slope within 1%; the test holds each within ±3% and the slope within 5%, so a change shows.
#[test]
#[ignore = "needs torch and transformers"]
fn serving_profile_run_activation_peak_beside_the_logs() {
    let python = crate::common::torch_python();
    let llama31 = model("llama-3.1-8b");
    let llama3 = model("llama-3-8b");
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
            (-3.0, 3.0),
        ),
        (
            "05",
            [
                &["--model", &llama3, "--tensor-parallel-size", "2"][..],
                &h100,
            ]
            .concat(),
            1.26,
            (-3.0, 3.0),
        ),
        (
            "01",
            [&["--model", &llama31, "--max-model-len", "20000"][..], &rtx].concat(),
            17.06 - 14.9888,
            (-3.0, 3.0),
        ),
        (
            "02",
            [&["--model", &llama31, "--max-model-len", "29000"][..], &rtx].concat(),
            17.98 - 14.9888,
            (-3.0, 3.0),
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
            (-3.0, 3.0),
        ),
    ];
    let mut rows = Vec::new();
    let mut predicted = std::collections::BTreeMap::new();
    for (name, args, logged, (low, high)) in cases {
        let out = crate::common::Run::command("estimate")
            .env("ITERAGPU_PYTHON", &python)
            .args(["serve", "vllm", "--activation-peak", "predict", "--json"])
            .args(&args)
            // 02 and 11 were refused at start-up, as the plan predicts (exit 3).
            .expect_status(if ["02", "11"].contains(&name) { 3 } else { 0 })
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
                "PREDICTED (data-less tensors at the profile run's shapes, not vLLM's kernels)"
            ),
            "{name}: {formula}"
        );
        let gib = term["bytes"].as_f64().unwrap() / GIB;
        let e = err(gib, logged);
        assert!(
            e > low && e < high,
            "{name}: predicted {gib:.3} GiB vs the log's {logged:.3} GiB ({e:+.1}%), outside ({low}, {high})%: the gap changed, update the table in docs/serving.md"
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
        (slope - 1.0).abs() < 0.05,
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
        .args(["serve", "vllm", "--activation-peak", "predict"])
        .args(["--model", &model("llama-3-8b"), "--card", "H100 80GB"])
        .expect_status(2)
        .stderr_has("install torch and transformers");
    // SGLang runs no profile run: refused before any worker starts.
    crate::common::Run::command("estimate")
        .args(["serve", "sglang", "--activation-peak", "predict"])
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
    let sglang = estimate_json(&["serve", "sglang", "--model", &gemma, "--card", "A100 80GB"]);
    assert_eq!(sglang["serving"]["kv_dtype_bytes"], 2);
}

#[test]
fn serving_refuses_a_max_model_len_above_the_model_a_budget_above_the_card_and_sglang_eager() {
    let llama = model("llama-3-8b");
    let base = ["serve", "vllm", "--model", &llama, "--card", "A100 80GB"];
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
        e.contains("more than the card can hold") && e.contains("69,031,419,904"),
        "{e}"
    );
    let e = serve_fails(
        &[
            "serve",
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
        "serve",
        "vllm",
        "--model",
        &llama,
        "--card",
        "A100 80GB",
        "--engine-version",
    ];
    let e = serve_fails(&[&base[..], &["0.99.0"]].concat(), None);
    assert!(
        e.contains("newer than any vLLM release") && e.contains("0.34.0"),
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
        "0.15.1",
    ]);
    // A patch release after 0.11: its minor's .0 was read.
    assert!(
        doc["notes"][0]
            .as_str()
            .unwrap()
            .contains("the rules of 0.15.0 apply"),
        "{}",
        doc["notes"]
    );
    // A read .0 release plans with no note; SGLang 0.5.12 by 0.5.23's rules, 0.5.24 refused.
    let doc = serve(&[
        "--model",
        &llama,
        "--card",
        "A100 80GB",
        "--engine-version",
        "0.20.0",
    ]);
    assert!(!doc["notes"][0].as_str().unwrap().contains("rules of"));
    let sg = estimate_json(&[
        "serve",
        "sglang",
        "--model",
        &llama,
        "--card",
        "A100 80GB",
        "--engine-version",
        "0.5.12",
    ]);
    assert!(
        sg["notes"][0]
            .as_str()
            .unwrap()
            .contains("the rules of SGLang 0.5.23 apply")
    );
    let e = serve_fails(
        &[
            "serve",
            "sglang",
            "--model",
            &llama,
            "--card",
            "A100 80GB",
            "--engine-version",
            "0.5.24",
        ],
        None,
    );
    assert!(
        e.contains("not an SGLang release") && e.contains("0.5.23"),
        "{e}"
    );
    let e = serve_fails(
        &[
            "serve",
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
                "serve",
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
            "serve",
            "vllm",
            "--model",
            &model("llama-3-8b"),
            "--engine-version",
            "0.11.0",
            "--card",
            "T4",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8_lossy(&out.stdout);
    // The headline first, in the engine's words: 14.96 GiB of weights do not load in the T4's
    // 15 GiB less the CUDA context; the pool is never sized.
    assert!(
        text.starts_with("vLLM 0.11.0 would REFUSE TO START: torch.OutOfMemoryError: CUDA out of memory. (the weights: 16,062,619,648 bytes = 14.96 GiB"),
        "{text}"
    );
    assert!(text.contains("KV budget −3,"), "{text}");
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

/// Log 02 (vLLM 0.6.4 format, RTX 3090, max_model_len 29,000) failed to start with "The model's
/// max seq len (29000) is larger than the maximum number of tokens that can be stored in KV cache
/// (23648)". Fed the log's own figures, the plan refuses in those words, and the largest length
/// it names is the log's capacity within the planner's block accuracy (5%); 01 (20,000) starts.
#[test]
fn serving_log_02_is_refused_in_the_engines_words_and_01_starts() {
    let llama3 = model("llama-3.1-8b");
    let args = |len: &'static str, peak: f64| {
        let activation = format!("{}", ((peak - 14.9888) * GIB).round() as u64);
        let (code, doc) = serve_status(&[
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
        (code, doc)
    };
    let (code, doc) = args("29000", 17.98);
    assert_eq!(code, 3);
    let r = first_refusal(&doc);
    assert_eq!(r["rule"], "max_model_len_above_kv_capacity");
    let message = r["message"].as_str().unwrap();
    assert!(
        message.starts_with("The model's max seq len (29000) is larger than the maximum number of tokens that can be stored in KV cache (")
            && message.ends_with("Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."),
        "{message}"
    );
    assert!(
        r["source"]
            .as_str()
            .unwrap()
            .contains("raise_if_cache_size_invalid")
    );
    let start = &doc["serving"]["start"];
    let largest = start["largest_max_model_len"].as_f64().unwrap();
    let blocks = doc["serving"]["num_blocks"].as_f64().unwrap();
    // V0's own capacity: blocks × 16, the figure its message names.
    assert_eq!(largest, blocks * 16.0);
    assert!(message.contains(&format!("({largest})")), "{message}");
    let e = err(largest, 23_648.0);
    assert!(
        e.abs() < 5.0,
        "largest {largest} vs the log's 23,648 ({e:+.2}%)"
    );
    assert_eq!(start["max_num_seqs_at_largest"], 1);
    let (code, doc) = args("20000", 17.06);
    assert_eq!(code, 0);
    assert_eq!(doc["serving"]["start"]["refusals"], serde_json::json!([]));
    println!(
        "02: refused; largest max_model_len {largest} vs the log's capacity 23,648 ({e:+.2}%)"
    );
}

/// The new user's case from issue 32: Llama-3.1-8B on an RTX 4090 with vLLM's defaults
/// (max_model_len 131,072). vLLM 0.11 refuses it; the plan says so first, in V1's words, with the
/// largest length by `estimate_max_model_len`, checked here against a hand computation of the
/// source's algorithm: every layer full attention, so a length fits while 32 × cdiv(len, 16) ×
/// page ≤ the budget, and the binary search lands on 16 × ⌊budget ÷ (32 × page)⌋.
#[test]
fn serving_rtx_4090_default_is_refused_with_the_largest_length_that_starts() {
    let base = [
        "estimate",
        "serve",
        "vllm",
        "--model",
        &model("llama-3.1-8b"),
        "--engine-version",
        "0.11.0",
        "--card",
        "RTX 4090",
    ]
    .map(String::from);
    let out = iteragpu().args(&base).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap();
    assert!(
        first.starts_with("vLLM 0.11.0 would REFUSE TO START: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the available KV cache memory ("),
        "{first}"
    );
    let doc = refused(&base[3..].iter().map(String::as_str).collect::<Vec<_>>());
    let sv = &doc["serving"];
    let budget = sv["kv_budget_bytes"].as_u64().unwrap();
    let page = sv["page_bytes"].as_u64().unwrap();
    let hand = 16 * (budget / (32 * page));
    let start = &sv["start"];
    assert_eq!(start["largest_max_model_len"].as_u64(), Some(hand));
    assert_eq!(
        start["largest_max_model_len"].as_u64().unwrap(),
        sv["kv_tokens"].as_u64().unwrap()
    );
    let message = first_refusal(&doc)["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "Based on the available memory, the estimated maximum model length is {hand}. Try increasing"
        )),
        "{message}"
    );
    assert!(
        text.contains(&format!(
            "largest max_model_len that starts: {}",
            thousands(hand)
        )),
        "{text}"
    );
    // At that length it starts.
    let (code, _) = serve_status(&[
        "--model",
        &model("llama-3.1-8b"),
        "--card",
        "RTX 4090",
        "--max-model-len",
        &hand.to_string(),
    ]);
    assert_eq!(code, 0, "max_model_len {hand} should start");
    // Before 0.8.4 V1's message has no estimate; the plan still gives the length.
    let old = refused(&[
        "--model",
        &model("llama-3.1-8b"),
        "--card",
        "RTX 4090",
        "--engine-version",
        "0.8.3",
    ]);
    let m = first_refusal(&old)["message"].as_str().unwrap();
    assert!(!m.contains("Based on the available memory"), "{m}");
    assert!(
        old["serving"]["start"]["largest_max_model_len"]
            .as_u64()
            .is_some()
    );
    println!("RTX 4090, Llama-3.1-8B, vLLM 0.11.0 defaults: refused; largest max_model_len {hand}");
}

/// A model with sliding-window layers (Gemma 2: 21 of 42 layers, window 4,096): V1 ≥ 0.9 counts a
/// sliding layer's need as cdiv(min(window − 1 + max_num_batched_tokens, len), block) + 1 pages
/// (kv_cache_interface.py SlidingWindowSpec.max_memory_usage_bytes); the largest length that starts
/// is the binary search over that sum, checked here by hand at the answer and one past it.
#[test]
fn serving_largest_length_of_a_sliding_window_model_is_the_engines_search() {
    let doc = refused(&[
        "--model",
        &model("gemma-2-9b"),
        "--engine-version",
        "0.11.0",
        "--card",
        "RTX 4090",
        // With CUDA's total (23.64 GiB, the catalog's default) 0.94 puts the answer past
        // window − 1 + max_num_batched_tokens.
        "--gpu-memory-utilization",
        "0.94",
    ]);
    let sv = &doc["serving"];
    let budget = sv["kv_budget_bytes"].as_u64().unwrap() as u128;
    let page = sv["page_bytes"].as_u64().unwrap() as u128;
    let mnbt = sv["max_num_batched_tokens"].as_u64().unwrap();
    let need = |l: u64| -> u128 {
        let full = 21 * l.div_ceil(16) as u128 * page;
        let sliding = 21 * ((4095 + mnbt).min(l).div_ceil(16) + 1) as u128 * page;
        full + sliding
    };
    let largest = sv["start"]["largest_max_model_len"].as_u64().unwrap();
    // Past window − 1 + max_num_batched_tokens the sliding layers stop growing: the answer lies
    // there, where a sum of full layers alone would have stopped sooner.
    assert!(largest > 4095 + mnbt && largest < 8192, "{largest}");
    let full_only = |l: u64| 42 * l.div_ceil(16) as u128 * page;
    assert!(full_only(largest) > budget);
    assert!(
        need(largest) <= budget && need(largest + 1) > budget,
        "{largest}"
    );
    println!("gemma-2-9b, RTX 4090 at 0.94: largest max_model_len {largest}");
}

/// Each refusal rule, in the engine's words, with its file; and where the same settings start.
#[test]
fn serving_refusal_rules_in_the_engines_words() {
    let llama = model("llama-3-8b");
    let rule = |args: &[&str], name: &str, says: &str, source: &str| {
        let doc = refused(args);
        let refusals = doc["serving"]["start"]["refusals"].as_array().unwrap();
        let r = refusals
            .iter()
            .find(|r| r["rule"] == name)
            .unwrap_or_else(|| panic!("{args:?}: no {name} in {refusals:?}"));
        assert!(r["message"].as_str().unwrap().contains(says), "{name}: {r}");
        assert!(
            r["source"].as_str().unwrap().contains(source),
            "{name}: {r}"
        );
        assert!(!r["fix"].as_str().unwrap().is_empty());
    };
    let starts = |args: &[&str]| assert_eq!(serve_status(args).0, 0, "{args:?}");
    let h100 = ["--model", &llama, "--card", "H100 80GB"];
    let with = |extra: &[&'static str]| [&h100[..], extra].concat();

    // TP against the attention heads (config.py) and the KV heads (the model's assert).
    rule(
        &with(&["--tensor-parallel-size", "3"]),
        "tensor_parallel_heads",
        "Total number of attention heads (32) must be divisible by tensor parallel size (3).",
        "verify_with_parallel_config",
    );
    // Qwen2-7B: 28 heads divide by 7, its 4 KV heads do not.
    rule(
        &[
            "--model",
            &model("qwen2-7b"),
            "--card",
            "H100 80GB",
            "--tensor-parallel-size",
            "7",
        ],
        "tensor_parallel_kv_heads",
        "assert tp_size % self.total_num_kv_heads == 0 (4 KV heads, TP 7)",
        "models/llama.py",
    );
    starts(&with(&["--tensor-parallel-size", "16"]));

    // Block sizes: the release's choices, then V1's FlashAttention.
    rule(
        &with(&["--block-size", "256"]),
        "block_size_choice",
        "invalid choice: 256 (choose from 1, 8, 16, 32, 64, 128)",
        "config/cache.py",
    );
    rule(
        &with(&["--engine-version", "0.6.4", "--block-size", "1"]),
        "block_size_choice",
        "invalid choice: 1 (choose from 8, 16, 32, 64, 128)",
        "engine/arg_utils.py",
    );
    rule(
        &with(&["--block-size", "8"]),
        "block_size_backend",
        "Block size must be a multiple of 16.",
        "flash_attn.py",
    );
    starts(&with(&["--engine-version", "0.6.4", "--block-size", "8"]));

    // max_num_batched_tokens below max_model_len without chunked prefill (V0 up to 32,768).
    rule(
        &with(&[
            "--engine-version",
            "0.6.4",
            "--max-num-batched-tokens",
            "4096",
        ]),
        "batched_tokens_below_max_model_len",
        "max_num_batched_tokens (4096) is smaller than max_model_len (8192). This effectively limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences.",
        "SchedulerConfig._verify_args",
    );
    starts(&with(&["--max-num-batched-tokens", "4096"]));
    rule(
        &with(&["--max-num-batched-tokens", "512", "--max-num-seqs", "1024"]),
        "batched_tokens_below_max_num_seqs",
        "max_num_batched_tokens (512) must be greater than or equal to max_num_seqs (1024).",
        "SchedulerConfig._verify_args",
    );

    // Free memory at start below total × utilization (V1 from 0.9), given or at 1.0 assumed.
    let busy = [
        "--model",
        &llama,
        "--card",
        "RTX 4090",
        "--max-model-len",
        "4096",
        "--free-at-start",
        "3.25GiB",
    ];
    rule(
        &[&busy[..], &["--engine-version", "0.11.0"]].concat(),
        "free_memory_below_utilization",
        "Free memory on device (3.25/23.64 GiB) on startup is less than desired GPU memory utilization (0.9, 21.28 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
        "v1/worker/gpu_worker.py",
    );
    // 0.14 names the device; 0.20 defaults to 0.92.
    rule(
        &[&busy[..], &["--engine-version", "0.20.0"]].concat(),
        "free_memory_below_utilization",
        "Free memory on device cuda:0 (3.25/23.64 GiB) on startup is less than desired GPU memory utilization (0.92, 21.75 GiB).",
        "init_device",
    );
    // 0.34's extensible KV cache skips the check: the weights then run out of memory.
    rule(
        &[&busy[..], &["--engine-version", "0.34.0"]].concat(),
        "oom_loading_weights",
        "CUDA out of memory",
        "load_model",
    );
    // 0.8.5 has no such check: it loads the weights into the 3.25 GiB and runs out of memory.
    rule(
        &[&busy[..], &["--engine-version", "0.8.5"]].concat(),
        "oom_loading_weights",
        "CUDA out of memory",
        "load_model",
    );
    let doc = refused(&[&busy[..], &["--engine-version", "0.8.5"]].concat());
    assert_eq!(first_refusal(&doc)["rule"], "oom_loading_weights");
    rule(
        &with(&[
            "--gpu-memory-utilization",
            "1",
            "--engine-version",
            "0.11.0",
        ]),
        "free_memory_below_utilization",
        "desired GPU memory utilization (1.0,",
        "init_device",
    );

    // No KV budget: V1's wording (V0's is log 11's).
    rule(
        &with(&[
            "--gpu-memory-utilization",
            "0.2",
            "--engine-version",
            "0.11.0",
        ]),
        "no_kv_memory",
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
        "check_enough_kv_cache_memory",
    );
    rule(
        &with(&[
            "--gpu-memory-utilization",
            "0.2",
            "--engine-version",
            "0.22.0",
        ]),
        "no_kv_memory",
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory reservation on the CPU backend, despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
        "check_enough_kv_cache_memory",
    );
    rule(
        &with(&[
            "--gpu-memory-utilization",
            "0.2",
            "--engine-version",
            "0.34.0",
        ]),
        "no_kv_memory",
        "No available memory for the cache blocks. The KV cache gets what is left after the model, its activations, CUDA graphs and warmup within `gpu_memory_utilization`=0.2;",
        "shrink_kv_cache_configs",
    );
    // Out of memory before any pool: loading the weights, then the profile run.
    rule(
        &["--model", &llama, "--card", "T4"],
        "oom_loading_weights",
        "torch.OutOfMemoryError: CUDA out of memory. (the weights: 16,062,619,648 bytes",
        "load_model",
    );
    rule(
        &[
            "--model",
            &llama,
            "--card",
            "RTX 4090",
            "--weights-memory",
            "23GiB",
            "--max-model-len",
            "4096",
        ],
        "oom_profile_run",
        "torch.OutOfMemoryError: CUDA out of memory. (the weights, the profile run's activation peak",
        "profile_run",
    );
    // bfloat16 on compute capability 7.x: refused by V0 and 0.8; 0.9+ serves float16 with
    // --dtype auto, refuses an explicit --dtype bfloat16.
    let small = model("llama-style-8l");
    let t4 = ["--model", &small, "--card", "T4"];
    rule(
        &[&t4[..], &["--engine-version", "0.6.4"]].concat(),
        "bfloat16_unsupported",
        "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your T4 GPU has compute capability 7.5. You can use float16 instead by explicitly setting the`dtype` flag in CLI, for example: --dtype=half.",
        "_check_if_gpu_supports_dtype",
    );
    rule(
        &[&t4[..], &["--dtype", "bfloat16"]].concat(),
        "bfloat16_unsupported",
        "compute capability 7.5",
        "check_if_supports_dtype",
    );
    starts(&t4);
    starts(
        &[
            &t4[..],
            &["--engine-version", "0.6.4", "--dtype", "float16"],
        ]
        .concat(),
    );

    // SGLang: its pool empty, and TP against the heads.
    let sglang = |extra: &[&str]| -> serde_json::Value {
        let out = iteragpu()
            .args(["estimate", "serve", "sglang", "--model", &llama, "--json"])
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{extra:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let doc = sglang(&["--card", "T4"]);
    assert_eq!(first_refusal(&doc)["rule"], "oom_loading_weights");
    let doc = sglang(&["--card", "RTX 4090", "--gpu-memory-utilization", "0.5"]);
    assert_eq!(first_refusal(&doc)["rule"], "sglang_not_enough_memory");
    assert_eq!(
        first_refusal(&doc)["message"],
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    );
    let doc = sglang(&["--card", "H100 80GB", "--tensor-parallel-size", "3"]);
    assert_eq!(first_refusal(&doc)["rule"], "tensor_parallel_heads");
    // A context above SGLang's pool is not refused: a note says it caps the input.
    let out = iteragpu()
        .args([
            "estimate",
            "serve",
            "sglang",
            "--model",
            &model("llama-3.1-8b"),
            "--card",
            "RTX 4090",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("max_req_input_len"));
}

/// Defaults by card and release, each printed as "default applied" with its file.
#[test]
fn serving_defaults_applied_by_card_and_release() {
    let llama = model("llama-3-8b");
    let plan = |card: &str, version: &str| {
        let doc = serve(&[
            "--model",
            &llama,
            "--card",
            card,
            "--engine-version",
            version,
        ]);
        let sv = doc["serving"].clone();
        let lines = sv["defaults"].to_string();
        (
            sv["max_num_batched_tokens"].as_u64().unwrap(),
            sv["max_num_seqs"].as_u64().unwrap(),
            lines,
        )
    };
    let (t, s, lines) = plan("H100 80GB", "0.11.0");
    assert_eq!((t, s), (8192, 1024));
    for cited in [
        "get_batch_defaults",
        "chunked prefill on",
        "--block-size 16",
        "FULL_AND_PIECEWISE",
    ] {
        assert!(lines.contains(cited), "{cited}: {lines}");
    }
    assert_eq!(plan("A100 80GB", "0.11.0").0, 2048);
    // 0.8.x chose by the card's name, H100 or H200: an A100 80GB and a B200 get the small ones.
    assert_eq!(plan("A100 80GB", "0.8.5").0, 2048);
    assert_eq!(plan("H200", "0.8.5").0, 8192);
    let (t, s, lines) = plan("H100 80GB", "0.6.4");
    assert_eq!((t, s), (8192, 256));
    assert!(
        lines.contains("chunked prefill off") && lines.contains("_BATCH_SIZES_TO_CAPTURE"),
        "{lines}"
    );
}

/// Logs 17–24, found after the planner was built (tests/fixtures/serving/logs/INDEX.md): each
/// started or refused as the planner says with the log's own figures fed in, blocks or tokens
/// within 5%, a refusal in the engine's own words.
#[test]
fn later_logs_start_or_refuse_as_logged() {
    // 19: Qwen2.5-32B, 2 × L40S, 0.7.1 (V0), TP 2: 3,947 blocks.
    let (code, doc) = serve_status(&[
        "--model",
        &fixture("models/qwen2.5-32b-layout").display().to_string(),
        "--card",
        "L40S",
        "--engine-version",
        "0.7.1",
        "--gpu-memory-utilization",
        "0.9",
        "--tensor-parallel-size",
        "2",
        "--max-model-len",
        "10000",
        "--device-total",
        "44.42GiB",
        "--weights-memory",
        "30.7098GiB",
        "--non-torch",
        "0.30GiB",
        "--activation-peak",
        "1.26GiB",
    ]);
    let logged = log("19-qwen25-32b-2xl40s-tp2-v071-10k")["figures"]["gpu_blocks"]
        .as_f64()
        .unwrap();
    let blocks = doc["serving"]["num_blocks"].as_f64().unwrap();
    assert_eq!(code, 0);
    assert!(err(blocks, logged).abs() < 5.0, "19: {blocks} vs {logged}");
    // 24: Qwen3-1.7B, V1 (~0.14), a given budget of 18.78 GiB: 175,856 tokens.
    let doc = serve(&[
        "--model",
        &fixture("models/qwen3-1.7b-layout").display().to_string(),
        "--card",
        "RTX 4090",
        "--engine-version",
        "0.14",
        "--max-model-len",
        "1024",
        "--max-num-seqs",
        "1",
        "--max-num-batched-tokens",
        "8192",
        "--kv-cache-memory",
        "18.78GiB",
    ]);
    let logged = log("24-qwen3-1.7b-24gb-v1-maxseqs1-1024")["figures"]["kv_cache_tokens"]
        .as_f64()
        .unwrap();
    let tokens = doc["serving"]["kv_tokens"].as_f64().unwrap();
    assert!(err(tokens, logged).abs() < 5.0, "24: {tokens} vs {logged}");
    // 21 and 23: too little free at start for total × gpu_memory_utilization (0.9.1), in the
    // engine's words.
    for (model, card, tp, total, free, u) in [
        (
            "mixtral-8x7b-v0.1",
            "H100 80GB",
            "8",
            "79.18GiB",
            "5.31GiB",
            "0.9",
        ),
        (
            "llama-3.1-8b",
            "RTX 6000 Ada",
            "1",
            "47.38GiB",
            "31.44GiB",
            "0.95",
        ),
    ] {
        let (code, doc) = serve_status(&[
            "--model",
            &fixture(&format!("models/{model}")).display().to_string(),
            "--card",
            card,
            "--engine-version",
            "0.9.1",
            "--tensor-parallel-size",
            tp,
            "--gpu-memory-utilization",
            u,
            "--max-model-len",
            "8192",
            "--device-total",
            total,
            "--free-at-start",
            free,
        ]);
        assert_eq!(code, 3, "{model}");
        let r = first_refusal(&doc);
        assert_eq!(r["rule"], "free_memory_below_utilization", "{model}");
        assert!(
            r["message"]
                .as_str()
                .unwrap()
                .starts_with("Free memory on device ("),
            "{model}: {r}"
        );
    }
    // 18 quoted a worker's profiling line of a TP-2 V0 run: the plan says the driver's decides.
    let (_, doc) = serve_status(&[
        "--model",
        &fixture("models/qwen2.5-32b-layout").display().to_string(),
        "--card",
        "RTX 4090",
        "--engine-version",
        "0.7.1",
        "--tensor-parallel-size",
        "2",
        "--activation-peak",
        "0.19GiB",
    ]);
    assert!(
        doc["notes"]
            .to_string()
            .contains("keeps the smallest block count over the ranks"),
        "{}",
        doc["notes"]
    );
    // 17: 0.8.5's V1 on a shared A800 (V0 started): the memory other processes hold is charged.
    let shared = |free: &str| {
        serve_status(&[
            "--model",
            &fixture("models/qwen3-8b").display().to_string(),
            "--card",
            "A100 80GB",
            "--engine-version",
            "0.8.5",
            "--gpu-memory-utilization",
            "0.4",
            "--device-total",
            "79.15GiB",
            "--free-at-start",
            free,
        ])
        .0
    };
    assert_eq!((shared("79GiB"), shared("60GiB")), (0, 3));
}

/// Logs 25–26, releases after 0.11 (issue 42 item 3): each fed the log's own total or budget,
/// blocks or tokens within 3%.
#[test]
fn logs_after_0_11_match_within_3_percent_given_their_own_budget() {
    // 25: MiniMax-M2.7 AWQ, 2 × DGX Spark, 0.29.1rc1, TP 2. No device total or weights are
    // printed, so the KV budget the log states is given; the GB10 is not in the catalog and
    // the card plays no part once the budget is given (GB200 stands in).
    let minimax = |u: &str, kv: &str| {
        serve_status(&[
            "--model",
            &model("minimax-m2-layout"),
            "--card",
            "GB200",
            "--engine-version",
            "0.29.1",
            "--tensor-parallel-size",
            "2",
            "--gpu-memory-utilization",
            u,
            "--max-model-len",
            "196608",
            "--kv-cache-memory",
            kv,
        ])
    };
    let logged = log("25-minimax-m27-awq-2xgb10-tp2-v0291-196k");
    // gmu 0.8: 22.5 GiB, refused in the engine's words; the largest length within 3%.
    let (code, doc) = minimax("0.8", "22.5GiB");
    assert_eq!(code, 3);
    let r = first_refusal(&doc);
    assert_eq!(r["rule"], "max_model_len_above_kv_capacity");
    let message = r["message"].as_str().unwrap();
    assert!(
        message.contains("(23.25 GiB KV cache is needed, which is larger than the available KV cache memory (22.5 GiB)"),
        "25: {message}"
    );
    let largest = doc["serving"]["start"]["largest_max_model_len"]
        .as_f64()
        .unwrap();
    let est = logged["figures"]["estimated_max_model_len"]
        .as_f64()
        .unwrap();
    assert!(err(largest, est).abs() < 3.0, "25: {largest} vs {est}");
    // gmu 0.85: the reporter's 28.74 GiB → 240,816 tokens.
    let (code, doc) = minimax("0.85", "28.74GiB");
    assert_eq!(code, 0);
    let tokens = doc["serving"]["kv_tokens"].as_f64().unwrap();
    let want = logged["figures"]["kv_cache_tokens"].as_f64().unwrap();
    assert!(err(tokens, want).abs() < 3.0, "25: {tokens} vs {want}");
    // 26: SGLang (main, July 2026, PR 18263's branch), Qwen3-30B-A3B on an AMD card of 287.18
    // GB free: the upstream budget the PR prints (204.63 GB) from the log's own total, weights
    // and mem_fraction_static; the allocated pool (the PR's smaller budget) from its K + V.
    let logged = log("26-qwen3-30b-a3b-sglang-amd-mfs0911-pr18263");
    let sglang = |extra: &[&str]| {
        let mut args = vec!["serve", "sglang", "--model"];
        let m = model("qwen3-30b-a3b");
        args.push(&m);
        args.extend_from_slice(&["--card", "MI325X", "--device-total", "287.18GiB"]);
        args.extend_from_slice(extra);
        estimate_json(&args)
    };
    let doc = sglang(&[
        "--weights-memory",
        "56.98GiB",
        "--non-torch",
        "0GiB",
        "--gpu-memory-utilization",
        "0.911",
    ]);
    let budget = doc["serving"]["kv_budget_bytes"].as_f64().unwrap();
    assert!(
        err(budget, 219_721_119_039.0).abs() < 3.0,
        "26: budget {budget}"
    );
    let doc = sglang(&["--kv-cache-memory", "152.88GiB"]);
    let tokens = doc["serving"]["kv_tokens"].as_f64().unwrap();
    let want = logged["figures"]["kv_cache_tokens"].as_f64().unwrap();
    assert!(err(tokens, want).abs() < 3.0, "26: {tokens} vs {want}");
}

/// V1's profile run of a multimodal model (Gemma 3) sends its dummy images through the vision
/// tower first and holds them: predicted with few requests (the tower sets the peak), the figure
/// stands above the language model's alone and the formula says how many images ran.
#[test]
#[ignore = "needs torch and transformers"]
fn serving_profile_run_predicts_the_encoders_dummy_batch() {
    let python = crate::common::torch_python();
    let run = |extra: &[&str]| {
        let out = crate::common::Run::command("estimate")
            .env("ITERAGPU_PYTHON", &python)
            .args([
                "serve",
                "vllm",
                "--json",
                "--model",
                &model("gemma-3-4b-it"),
            ])
            .args([
                "--card",
                "H100 80GB",
                "--max-model-len",
                "8192",
                "--max-num-seqs",
                "4",
            ])
            .args(extra)
            .expect_status(0)
            .stdout();
        let doc: serde_json::Value = serde_json::from_str(&out).expect("estimate --json");
        let term = crate::common::term_by_id(&doc, "serve_activation_peak").clone();
        (
            term["bytes"].as_f64().unwrap(),
            term["formula"].as_str().unwrap().to_string(),
        )
    };
    let (assumed, rule) = run(&[]);
    assert!(rule.contains("= 32 image(s) of 896×896"), "{rule}");
    assert!(
        rule.contains(": the multimodal encoder's dummy batch;"),
        "{rule}"
    );
    let (predicted, how) = run(&["--activation-peak", "predict"]);
    assert!(
        how.contains("the multimodal encoder's dummy batch (32 image(s) of 896×896"),
        "{how}"
    );
    // The tower's layer alone is 2.86 GB at these shapes; transformers' modules (not vLLM's)
    // land within 30% of the rule.
    assert!(predicted > 2.86e9, "{predicted}");
    assert!(
        (predicted / assumed - 1.0).abs() < 0.3,
        "{predicted} vs {assumed}"
    );
}
