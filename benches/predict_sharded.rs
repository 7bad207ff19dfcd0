//! Scale on paper (issue 13): the predicted per-rank memory of a Llama-3-70B FSDP2 training step
//! (its real config, bf16-mixed, AdamW, batch 1 × 4096 per rank, gradient checkpointing: the
//! workload's minimum of 2 steps, an evaluation and an export), for rank 0 of 8, 16 and 64 ranks —
//! world sizes this machine does not have — on PyTorch's fake process group, and how long each
//! prediction took. The figures are predictions for an H200, never measurements.
//!
//! Needs an interpreter with torch and transformers (ITERAGPU_TEST_PYTHON, else python3); run with
//! `cargo bench --bench predict_sharded`.

use std::process::Command;
use std::time::Instant;

mod support {
    pub mod baseline;
    pub mod python;
}

fn main() {
    let Some(python) = support::python::torch_python() else {
        return;
    };
    let model = format!(
        "{}/tests/fixtures/models/llama-3-70b/config.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let dir = tempfile::tempdir().expect("a temporary folder");
    let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
    println!(
        "Llama-3-70B, FSDP2 bf16-mixed AdamW, 1×4096 per rank, checkpointing — rank 0, predicted for an H200\n{:>6} {:>10} {:>16} {:>16} {:>16} {:>14}  vs previous release",
        "ranks", "seconds", "model states", "peak allocated", "peak reserved", "driver's view"
    );
    if let Err(why) = support::baseline::binary() {
        println!("({why})");
    }
    let baseline = support::baseline::binary();
    for world in [8u64, 16, 64] {
        let out = dir.path().join(format!("w{world}.json"));
        let predict = |binary: &std::path::Path, out: &std::path::Path| {
            let _ = std::fs::remove_file(out);
            Command::new(binary)
                .args(["predict", "--python", &python, "--json", "--output"])
                .arg(out)
                .args(["--workload", "causal-lm", "--model", &model])
                .args(["--task", "train", "--precision", "bf16-mixed"])
                .args([
                    "--batch",
                    "1",
                    "--context",
                    "4096",
                    "--gradient-checkpointing",
                ])
                .args(["--world-size", &world.to_string(), "--shard", "fsdp"])
                .output()
                .expect("iteragpu runs")
        };
        // The previous release first, then this one (whose figures the row prints).
        let previous = support::baseline::seconds(&baseline, &out, |bin, out| {
            predict(bin, out);
        });
        let began = Instant::now();
        let run = predict(std::path::Path::new(env!("CARGO_BIN_EXE_iteragpu")), &out);
        let seconds = began.elapsed().as_secs_f64();
        // Exit 3: the prediction ran out of the H200's memory (8 ranks do): its document holds the
        // phases up to there, and the row says where.
        let out_of_memory = run.status.code() == Some(3);
        if !run.status.success() && !out_of_memory {
            println!(
                "{world:>6} {seconds:>10.1}  FAILED: {}",
                String::from_utf8_lossy(&run.stderr).trim()
            );
            continue;
        }
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&out).expect("the prediction")).expect("JSON");
        let phases = doc["phases"].as_array().cloned().unwrap_or_default();
        let max = |key: &str| {
            phases
                .iter()
                .filter_map(|p| p[key].as_u64())
                .max()
                .unwrap_or(0)
        };
        // Sharded params, grads and optimizer states: what the first zero_grad leaves behind.
        let states = phases
            .iter()
            .find(|p| p["name"] == "zero_grad")
            .and_then(|p| p["start_allocated_bytes"].as_u64())
            .unwrap_or(0);
        // Issue 46's target: the 64-rank prediction under 15 s on 2 cores.
        let oom = if out_of_memory {
            format!(
                "  (out of the H200's memory in {})",
                phases
                    .iter()
                    .find(|p| p["status"] == "out_of_memory")
                    .and_then(|p| p["name"].as_str())
                    .unwrap_or("a phase")
            )
        } else {
            String::new()
        };
        let target = match world {
            64 if seconds <= 15.0 => "  (target 15 s: met)",
            64 => "  (target 15 s: NOT met)",
            _ => "",
        };
        println!(
            "{world:>6} {seconds:>10.1} {:>12.2} GiB {:>12.2} GiB {:>12.2} GiB {:>10.2} GiB  {}{oom}{target}",
            gib(states),
            gib(max("peak_allocated_bytes")),
            gib(max("peak_reserved_bytes")),
            gib(max("driver_view_bytes")),
            support::baseline::ratio(seconds, previous),
        );
    }
    println!(
        "(predictions, not measurements; machine: {} logical CPU(s))",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
}
