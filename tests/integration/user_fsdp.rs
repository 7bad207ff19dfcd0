//! A user's own FSDP under `predict --world-size 4` (issue 44, item 2): FSDP2 with tensor
//! parallelism on a 2-D `DeviceMesh` (PyTorch's fsdp_tp_example, in a script of plain nn layers),
//! and FSDP1 (`FullyShardedDataParallel`) on a transformers model. Each gets figures in every
//! phase, and its per-rank parameters agree with the sharding computed here from the config.

use crate::common::{
    PhaseStatus, PredictedPhase, PredictionDoc, PredictionStatus, Run, fixture, python_with,
};

/// The small Llama's config folder, and its numbers.
struct Llama {
    folder: String,
    hidden: u64,
    layers: u64,
    /// Every parameter, as transformers (or the plain-nn script) lays a Llama out.
    params: u64,
}

fn small_llama() -> Llama {
    let folder = fixture("models/llama-small-distributed");
    let text = std::fs::read_to_string(folder.join("config.json")).unwrap();
    let config: serde_json::Value = serde_json::from_str(&text).unwrap();
    let get = |key: &str| config[key].as_u64().unwrap();
    let (hidden, vocab, layers) = (
        get("hidden_size"),
        get("vocab_size"),
        get("num_hidden_layers"),
    );
    let kv = hidden / get("num_attention_heads") * get("num_key_value_heads");
    let per_layer =
        2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * get("intermediate_size") + 2 * hidden;
    Llama {
        folder: folder.display().to_string(),
        hidden,
        layers,
        params: 2 * vocab * hidden + layers * per_layer + hidden,
    }
}

fn predict_script(python: &str, dir: &std::path::Path, script: &str) -> (PredictionDoc, String) {
    let (doc, said, _) = predict_script_with(python, dir, script, &[]);
    (doc, said)
}

/// The script's prediction under `env`, its output and its document as written.
fn predict_script_with(
    python: &str,
    dir: &std::path::Path,
    script: &str,
    env: &[(&str, &str)],
) -> (PredictionDoc, String, serde_json::Value) {
    let llama = small_llama();
    let tag: String = env.iter().map(|(k, v)| format!("-{k}{v}")).collect();
    let mut run = Run::predict()
        .args(["--python", python, "--card", "H200", "--world-size", "4"])
        .output(dir.join(format!("{script}{tag}.json")));
    for (k, v) in env {
        run = run.env(k, v);
    }
    let run = run
        .arg("--script")
        .arg(fixture(&format!("scripts/distributed/{script}")))
        .args(["--", &llama.folder, "2", "64"])
        .finish();
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), Some(0), "{said}");
    let doc = run.prediction();
    assert_eq!(doc.status, PredictionStatus::Complete, "{said}");
    (doc, said, run.json())
}

fn phase<'a>(doc: &'a PredictionDoc, name: &str) -> &'a PredictedPhase {
    doc.phases
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| {
            panic!(
                "no phase {name:?} in {:?}",
                doc.phases.iter().map(|p| &p.name).collect::<Vec<_>>()
            )
        })
}

/// Forward, backward and the optimizer step of both steps are predicted, and each allocates.
fn assert_figures_in_every_phase(doc: &PredictionDoc, forward: &str) {
    for step in 1..=2 {
        for name in [
            format!("{forward} #{step}"),
            format!("backward #{step}"),
            format!("AdamW.step #{step}"),
        ] {
            let p = phase(doc, &name);
            assert_eq!(p.status, PhaseStatus::Predicted, "{name}");
            let (start, peak) = (
                p.start_allocated_bytes.unwrap(),
                p.peak_allocated_bytes.unwrap(),
            );
            assert!(peak > start, "{name}: nothing allocated ({start} → {peak})");
        }
    }
}

fn category(p: &PredictedPhase, name: &str) -> u64 {
    p.at_peak
        .as_ref()
        .unwrap()
        .by_category
        .get(name)
        .copied()
        .unwrap_or(0)
}

fn assert_near(what: &str, got: u64, expected: u64) {
    let error = (got as f64 - expected as f64).abs() / expected as f64;
    assert!(
        error <= 0.01,
        "{what}: {got} vs {expected} expected ({:.2}%)",
        error * 100.0
    );
}

#[test]
#[ignore = "needs torch"]
fn predict_users_fsdp2_with_tensor_parallelism_on_a_2d_mesh() {
    let python = python_with(&["torch"]);
    let dir = tempfile::tempdir().unwrap();
    let (doc, said) = predict_script(&python, dir.path(), "fsdp_tp_llama.py");
    assert!(said.contains("COUNTER mesh 2x2"), "{said}");
    // Collectives on a sub-mesh's group answer as 2 identical ranks do, not the world's 4.
    assert!(said.contains("COUNTER dp_ranks 2 tp_gathered 6"), "{said}");
    assert_figures_in_every_phase(&doc, "FSDPTransformer.forward");
    // Tensor parallelism over 2 halves every projection, the embeddings and the head; the
    // RMSNorm weights stay whole on every rank (SequenceParallel replicates them).
    let llama = small_llama();
    let norms = 2 * llama.layers * llama.hidden + llama.hidden;
    let tp_sharded = (llama.params - norms) / 2 + norms;
    // FSDP2 over dp = 2 then keeps half of that per rank, in float32. Read at the optimizer
    // step, when only the sharded parameters are held (no all-gathered copy).
    let step = phase(&doc, "AdamW.step #1");
    let per_rank = category(step, "parameter");
    assert_near("parameters per rank", per_rank * 2, tp_sharded * 4);
    // About a quarter of the model's bytes: half by tensor, half of that by data parallelism.
    assert!(
        per_rank < llama.params * 4 * 26 / 100,
        "{per_rank}: not a quarter of the model"
    );
    // Sharded gradients, and AdamW's two states per sharded parameter.
    assert_near("gradients per rank", category(step, "gradient"), per_rank);
    assert_near(
        "AdamW's states per rank",
        category(step, "optimizer state"),
        2 * per_rank,
    );
    // The forward all-gathers a unit's parameters: more than the shards are held then.
    let forward = phase(&doc, "FSDPTransformer.forward #1");
    assert!(
        category(forward, "parameter") + category(forward, "communication") > per_rank,
        "{:?}",
        forward.at_peak
    );
}

#[test]
#[ignore = "needs torch and transformers"]
fn predict_users_fsdp1_over_4_ranks() {
    let python = python_with(&["torch", "transformers"]);
    let dir = tempfile::tempdir().unwrap();
    let (doc, _) = predict_script(&python, dir.path(), "fsdp1_llama.py");
    assert_figures_in_every_phase(&doc, "FullyShardedDataParallel.forward");
    // FULL_SHARD over 4 ranks: a quarter of every unit's flat parameter (each unit here divides
    // by 4 without padding), its gradient, and AdamW's two states.
    let llama = small_llama();
    let step = phase(&doc, "AdamW.step #1");
    let per_rank = category(step, "parameter");
    assert_near("parameters per rank", per_rank, llama.params * 4 / 4);
    assert_near("gradients per rank", category(step, "gradient"), per_rank);
    assert_near(
        "AdamW's states per rank",
        category(step, "optimizer state"),
        2 * per_rank,
    );
}

/// predict/dtensor_foreach.py on real DTensors: an optimizer's elementwise foreach ops over
/// parameters sharded alike (FSDP2's Shard(0), FSDP2 + TP's 2-D mesh) run on the local shards
/// with DTensor's own values, placements, shapes and strides, without DTensor's dispatch; what
/// DTensor must decide (Partial, unlike shardings, a scalar tensor, two meshes) still reaches it.
#[test]
#[ignore = "needs torch"]
fn predict_dtensor_foreach_on_local_shards_as_dtensor_answers() {
    let python = python_with(&["torch"]);
    let out = std::process::Command::new(&python)
        .arg(fixture("../python/dtensor_foreach_check.py"))
        .env("PYTHONPATH", fixture("../../python"))
        .output()
        .expect("python runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(said.contains("OK 22"), "{said}");
}

/// The same prediction with the foreach ops on local shards and with every one through DTensor
/// (`ITERAGPU_PREDICT_DTENSOR_FOREACH=0`): every phase's figures equal, on FSDP2 + TP.
#[test]
#[ignore = "needs torch"]
fn predict_dtensor_foreach_changes_no_figure() {
    let python = python_with(&["torch"]);
    let dir = tempfile::tempdir().unwrap();
    let (_, _, local) = predict_script_with(&python, dir.path(), "fsdp_tp_llama.py", &[]);
    let (_, _, dtensor) = predict_script_with(
        &python,
        dir.path(),
        "fsdp_tp_llama.py",
        &[("ITERAGPU_PREDICT_DTENSOR_FOREACH", "0")],
    );
    let figures = |doc: &serde_json::Value| -> Vec<serde_json::Value> {
        let mut phases = doc["phases"].as_array().expect("phases").clone();
        for p in &mut phases {
            // Timings are the only figures allowed to differ.
            if let Some(inputs) = p.get_mut("inputs").and_then(|i| i.as_object_mut()) {
                inputs.retain(|k, _| !k.ends_with("_s"));
            }
        }
        phases
    };
    let (a, b) = (figures(&local), figures(&dtensor));
    assert!(a.len() >= 4, "{a:?}");
    assert!(a.iter().any(|p| p["name"] == "AdamW.step #1"), "{a:?}");
    assert_eq!(a, b);
}
