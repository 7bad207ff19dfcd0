//! Benchmark: the per-rank estimate of FSDP2 training (bf16-mixed, AdamW) for Llama-3-70B
//! (tests/fixtures/models/llama-3-70b, the public Meta-Llama-3-70B config) at world sizes 8, 16
//! and 64: every term of ONE rank side by side, and the time one estimate takes.
//! Run with `cargo bench --bench sharded_estimate`.

use std::path::Path;
use std::time::{Duration, Instant};

use iteragpu::dtype::Dtype;
use iteragpu::estimate::weights::ModelWeights;
use iteragpu::estimate::{
    self, Estimate, Optimizer, Precision, Request, Sharding, Strategy, TrainingRequest,
    WeightsSource,
};
use iteragpu::model::{Architecture, Config};

const WORLD_SIZES: [u64; 3] = [8, 16, 64];
const BATCH: u64 = 1;
const CONTEXT: u64 = 8192;
const RUNS: usize = 200;

fn request(arch: &Architecture, world_size: u64) -> Request {
    Request {
        weights: Some(WeightsSource::Model(Box::new(ModelWeights {
            path: "tests/fixtures/models/llama-3-70b".into(),
            architecture: arch.clone(),
            stored: None,
            compute_dtype: Dtype::Bfloat16,
            dtype_source: "config.json torch_dtype".into(),
        }))),
        kv: None,
        training: Some(TrainingRequest {
            optimizer: Optimizer::Adamw,
            precision: Precision::Bf16Mixed,
            precision_stated: true,
            lora: None,
            gradient_checkpointing: true,
            flash_attention: true,
            batch: Some(BATCH),
            context: Some(CONTEXT),
            sharding: Some(Sharding {
                strategy: Strategy::Fsdp,
                world_size,
                gpus_per_node: None,
                offload: None,
                largest_layer_parameters: None,
                comm_reserve: None,
            }),
        }),
        reserve: None,
        vision: None,
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

fn main() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/llama-3-70b");
    let config = Config::load(&path).expect("the Llama-3-70B fixture loads");
    let arch = Architecture::from_config(&config).expect("llama is supported");
    println!(
        "Llama-3-70B ({} parameters), FSDP2 fully_shard per decoder layer + root, bf16-mixed \
         (MixedPrecisionPolicy bf16 params / fp32 reduce), AdamW, per-rank batch {BATCH}, context \
         {CONTEXT}, flash attention, gradient checkpointing; GiB per RANK (one GPU), never summed",
        arch.parameters()
    );
    let estimates: Vec<(u64, Estimate)> = WORLD_SIZES
        .iter()
        .map(|&n| {
            let est = estimate::estimate(&request(&arch, n)).expect("the estimate succeeds");
            (n, est)
        })
        .collect();
    // One row per counted term (in the order of the first estimate), then the totals.
    let mut rows: Vec<(String, Vec<u64>)> = estimates[0]
        .1
        .terms
        .iter()
        .filter(|t| t.in_total)
        .map(|t| {
            let values = estimates
                .iter()
                .map(|(_, est)| {
                    est.terms
                        .iter()
                        .find(|u| u.id == t.id)
                        .map_or(0, |u| u.bytes.get())
                })
                .collect();
            (format!("{} ({})", t.name, t.kind), values)
        })
        .collect();
    rows.push((
        "per-rank total".into(),
        estimates.iter().map(|(_, e)| e.total_bytes.get()).collect(),
    ));
    rows.push((
        "of which model states (sharded, persistent)".into(),
        estimates
            .iter()
            .map(|(_, e)| {
                e.sharding
                    .as_ref()
                    .map_or(0, |s| s.model_states_bytes.get())
            })
            .collect(),
    ));
    let width = rows
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(10);
    print!("{:width$}", "term (kind), GiB per rank");
    for (n, _) in &estimates {
        print!("  {:>9}", format!("N={n}"));
    }
    println!();
    for (label, values) in &rows {
        let pad = width - label.chars().count();
        print!("{label}{:pad$}", "");
        for v in values {
            print!("  {:>9.2}", gib(*v));
        }
        println!();
    }

    let mut times = Vec::new();
    for _ in 0..RUNS {
        let req = request(&arch, 64);
        let start = Instant::now();
        let est = estimate::estimate(&req).expect("estimate");
        times.push(start.elapsed());
        std::hint::black_box(est);
    }
    println!(
        "one sharded estimate (N=64, in process): median {:.3} ms over {RUNS} runs",
        median(times).as_secs_f64() * 1e3
    );
}
