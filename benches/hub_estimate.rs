//! Benchmark: `estimate --model meta-llama/Llama-3.1-8B` from a Hub on 127.0.0.1 (the tests'
//! server, `tests/integration/hub_server.rs`): 30 shards, configs and index fetched, each shard's
//! header read by range into an empty cache. Prints the wall time and the bytes the Hub sent, cold
//! (empty cache) and warm (everything cached, the file list asked again). Targets: under 2 s and
//! under 2 MiB cold. Run with `cargo bench --bench hub_estimate`.

#[path = "../tests/integration/hub_server.rs"]
mod hub_server;

use std::process::Command;
use std::time::{Duration, Instant};

const RUNS: usize = 5;
const REPO: &str = "meta-llama/Llama-3.1-8B";

fn estimate(hub: &hub_server::Hub, home: &std::path::Path) -> Duration {
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_iteragpu"))
        .args(["estimate", "--model", REPO, "--json"])
        .env("HF_HOME", home)
        .env("HF_ENDPOINT", &hub.endpoint)
        .env_remove("HF_HUB_CACHE")
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("HF_TOKEN")
        .output()
        .expect("iteragpu runs");
    let elapsed = start.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    elapsed
}

fn main() {
    let hub = hub_server::Hub::start(hub_server::fixture_repos());
    let (mut cold, mut warm, mut cold_bytes, mut warm_bytes) = (Vec::new(), Vec::new(), 0, 0);
    for _ in 0..RUNS {
        let home = tempfile::tempdir().expect("a temporary HF_HOME");
        hub.reset_counts();
        cold.push(estimate(&hub, home.path()));
        cold_bytes = cold_bytes.max(hub.bytes_sent());
        hub.reset_counts();
        warm.push(estimate(&hub, home.path()));
        warm_bytes = warm_bytes.max(hub.bytes_sent());
    }
    let worst = |v: &[Duration]| v.iter().max().copied().unwrap_or_default();
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (cold_worst, warm_worst) = (worst(&cold), worst(&warm));
    println!(
        "hub_estimate: {REPO} (30 shards) from a Hub on 127.0.0.1, {RUNS} runs: cold (empty cache) median {:?}, worst {cold_worst:?}, {cold_bytes} bytes sent (at most); warm median {:?}, worst {warm_worst:?}, {warm_bytes} bytes sent",
        median(&mut cold),
        median(&mut warm)
    );
    let target = cold_worst < Duration::from_secs(2) && cold_bytes < 2 << 20;
    println!(
        "target (cold: under 2 s and under 2 MiB): {}",
        if target { "met" } else { "NOT met" }
    );
    if !target {
        std::process::exit(1);
    }
}
