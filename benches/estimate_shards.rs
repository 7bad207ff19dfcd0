//! Benchmark: `estimate --model` on a folder of 30 safetensors shards made as sparse files
//! (declared sizes of tens of GB each, no tensor data written). Prints wall time and bytes read.
//! Targets: under 50 ms and under 1 MiB read. Run with `cargo bench --bench estimate_shards`.

use std::fs::OpenOptions;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use iteragpu::model::safetensors::{header_bytes, scan_folder};

const SHARDS: usize = 30;
const RUNS: usize = 20;

fn make_folder(dir: &Path) -> u64 {
    let config =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/llama-3-8b/config.json");
    std::fs::copy(config, dir.join("config.json")).expect("copy config");
    let mut declared = 0;
    let mut weight_map = serde_json::Map::new();
    for shard in 0..SHARDS {
        let name = format!("model-{:05}-of-{SHARDS:05}.safetensors", shard + 1);
        // About 100 tensors per shard, as in real checkpoints; big enough for tens of GB.
        let tensors: Vec<(String, &str, Vec<u64>)> = (0..100)
            .map(|i| {
                (
                    format!("model.layers.{shard}.tensor_{i}.weight"),
                    "BF16",
                    vec![16_384, 8_192],
                )
            })
            .collect();
        let refs: Vec<(&str, &str, Vec<u64>)> = tensors
            .iter()
            .map(|(n, d, s)| (n.as_str(), *d, s.clone()))
            .collect();
        for (n, _, _) in &refs {
            weight_map.insert(n.to_string(), name.clone().into());
        }
        let (header, data) = header_bytes(&refs);
        let path = dir.join(&name);
        std::fs::write(&path, &header).expect("write header");
        let file = OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open shard");
        file.set_len(header.len() as u64 + data)
            .expect("sparse set_len");
        declared += header.len() as u64 + data;
    }
    let index = serde_json::json!({"metadata": {"total_size": declared}, "weight_map": weight_map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string())
        .expect("write index");
    declared
}

fn rchar() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|v| v.trim().parse().ok())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let declared = make_folder(dir.path());
    println!(
        "folder: {SHARDS} sparse shards, {:.1} GB declared ({:.1} GB per shard), headers only on disk",
        declared as f64 / 1e9,
        declared as f64 / 1e9 / SHARDS as f64
    );

    // In process: the header scan alone.
    let mut times = Vec::new();
    let mut read_counted = 0;
    let before = rchar();
    for _ in 0..RUNS {
        let start = Instant::now();
        let stored = scan_folder(dir.path()).expect("scan").expect("shards");
        times.push(start.elapsed());
        read_counted = stored.bytes_read;
    }
    let read_os = match (before, rchar()) {
        (Some(a), Some(b)) => format!(
            "{} bytes per scan (/proc/self/io rchar)",
            (b - a) / RUNS as u64
        ),
        _ => "n/a".into(),
    };
    println!(
        "scan_folder: median {:.2} ms over {RUNS} runs; {} bytes read per scan (counted), {read_os}",
        median(times).as_secs_f64() * 1e3,
        read_counted
    );

    // Whole command, process start included.
    let bin = env!("CARGO_BIN_EXE_iteragpu");
    let mut times = Vec::new();
    for _ in 0..RUNS {
        let start = Instant::now();
        let out = Command::new(bin)
            .args(["estimate", "--model"])
            .arg(dir.path())
            .args(["--context", "8192", "--json"])
            .output()
            .expect("run iteragpu");
        times.push(start.elapsed());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let whole = median(times);
    println!(
        "iteragpu estimate --model (30 shards): median {:.2} ms over {RUNS} runs (target < 50 ms: {}); bytes read {} (target < 1 MiB: {})",
        whole.as_secs_f64() * 1e3,
        if whole < Duration::from_millis(50) {
            "met"
        } else {
            "NOT met"
        },
        read_counted,
        if read_counted < 1 << 20 {
            "met"
        } else {
            "NOT met"
        }
    );
}
