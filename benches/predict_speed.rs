//! How long `iteragpu predict` takes on this machine, and how much memory its worker holds.
//!
//! Issue 28's targets on a 2-core machine, the first three cases, with issue 46's where it asks
//! for less:
//! - transformers' documentation page "Model training anatomy" as written there: BERT-large from
//!   its config, the `Trainer`, batch 4 × 512 tokens, one epoch of 512 samples (128 steps):
//!   under 20 s (issue 46; 60 s before);
//! - a bf16-mixed training step of Llama-3-8B (its real config, batch 1 × 4096; the workload runs
//!   its minimum of 2 steps, then an evaluation pass): under 10 s;
//! - a script's `model.generate()` of 128 tokens after a 4096-token prompt on Llama-3-8B (no
//!   markers): under 10 s (issue 46; 30 s before);
//! - a hand-written decode loop as torchtune's `generate` writes it (a static KV cache, 300 new
//!   tokens after 16, `decode_loop.py`) on Llama-3-8B: under 20 s (issue 46).
//!
//! Then issue 11's and 18's cases: a 4096-token prefill plus 128 decoded tokens of the same model
//! (one generation, `--whole-loop`), Llama-3-8B built in fp32 on the CPU then moved to the GPU
//! (under 15 s), and the guide's dense case (under 5 s). Every case under 2 GiB of resident memory.
//!
//! Each case runs with FakeTensorMode's answers memoised, a `Trainer` epoch's steady state and
//! repeated calls without gradients (decode steps, decoder layers: `predict/repeat.py`)
//! fast-forwarded (the defaults), the first three again with `ITERAGPU_PREDICT_MEMO=0` and the
//! Trainer epoch and the two decode loops with `ITERAGPU_PREDICT_STEADY=0` for comparison (same
//! documents: `tests/integration/predict_speed.rs`).
//! The load average is printed before each case, the CPU seconds (user and system, the CLI and its
//! worker) after it: other work on the machine slows the wall-clock figures. `PREDICT_SPEED_CASE=TEXT`
//! runs only the cases whose name contains TEXT (`PREDICT_SPEED_CASE=anatomy`).
//!
//! `ITERAGPU_BENCH_BASELINE=BINARY` runs each case with the previous release too and prints the
//! ratio (`support/baseline.rs`). Needs an interpreter with torch and transformers
//! (ITERAGPU_TEST_PYTHON, else python3); run with `cargo bench --bench predict_speed` (minutes).

use std::process::Command;
use std::time::Instant;

fn children_usage() -> libc::rusage {
    // SAFETY: getrusage fills the struct we own.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    }
}

fn max_rss_children_kib() -> i64 {
    children_usage().ru_maxrss
}

/// User and system CPU seconds of every child waited for so far (the CLI and its worker).
fn cpu_children_seconds() -> f64 {
    let u = children_usage();
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(u.ru_utime) + seconds(u.ru_stime)
}

mod support {
    pub mod baseline;
    pub mod python;
}

fn main() {
    let Some(python) = support::python::torch_python() else {
        return;
    };
    let root = env!("CARGO_MANIFEST_DIR");
    let llama = format!("{root}/tests/fixtures/models/llama-3-8b");
    let bert = format!("{root}/tests/fixtures/models/bert-large-uncased");
    // A causal LM's bf16-mixed training at 1 × 4096, as docs/predict.md predicts it.
    let training = |model: String| -> Vec<String> {
        [
            "--workload",
            "causal-lm",
            "--model",
            &model,
            "--task",
            "train",
            "--precision",
            "bf16-mixed",
            "--batch",
            "1",
            "--context",
            "4096",
        ]
        .map(String::from)
        .to_vec()
    };
    let cases: Vec<(&str, Vec<String>, f64)> = vec![
        (
            "training anatomy: BERT-large Trainer, 128 steps",
            vec![
                "--script".into(),
                format!("{root}/tests/fixtures/scripts/predict/training_anatomy.py"),
                "--".into(),
                bert,
            ],
            20.0,
        ),
        (
            "Llama-3-8B bf16-mixed training, 1×4096",
            [training(llama.clone()), vec!["--whole-loop".into()]].concat(),
            10.0,
        ),
        (
            "a script's model.generate(), 8B, 1×4096 + 128",
            vec![
                "--script".into(),
                format!("{root}/tests/fixtures/scripts/predict/generate.py"),
                "--".into(),
                llama.clone(),
                "128".into(),
                "4096".into(),
                "1".into(),
                "bfloat16".into(),
            ],
            10.0,
        ),
        (
            "a hand-written decode loop, 8B, static cache, 300 tokens",
            vec![
                "--script".into(),
                format!("{root}/tests/fixtures/scripts/predict/decode_loop.py"),
                "--".into(),
                llama.clone(),
                "300".into(),
                "16".into(),
                "bfloat16".into(),
            ],
            20.0,
        ),
        (
            // docs/predict.md's "Predicting ranks a machine does not have".
            "Llama-3-70B FSDP2 training, rank 0 of 64",
            [
                training(format!("{root}/tests/fixtures/models/llama-3-70b")),
                [
                    "--world-size",
                    "64",
                    "--shard",
                    "fsdp",
                    "--gradient-checkpointing",
                ]
                .map(String::from)
                .to_vec(),
            ]
            .concat(),
            15.0,
        ),
        (
            "guide dense (2×128×1024, fp32)",
            [
                "--batch",
                "2",
                "--context",
                "128",
                "--width",
                "1024",
                "--dtype",
                "float32",
            ]
            .map(String::from)
            .to_vec(),
            5.0,
        ),
        (
            "Llama-3-8B 4096 prefill + 128 decoded",
            vec![
                "--workload".into(),
                "causal-lm".into(),
                "--model".into(),
                llama.clone(),
                "--prompt-tokens".into(),
                "4096".into(),
                "--new-tokens".into(),
                "128".into(),
                "--whole-loop".into(),
            ],
            60.0,
        ),
        (
            "a script building 8B on the CPU, then .cuda()",
            vec![
                "--script".into(),
                format!("{root}/tests/fixtures/scripts/predict/big_cpu.py"),
                "--".into(),
                llama,
            ],
            15.0,
        ),
    ];
    let dir = tempfile::tempdir().expect("a temporary folder");
    // PREDICT_SPEED_CASE=TEXT: only the cases whose name contains TEXT.
    let only = std::env::var("PREDICT_SPEED_CASE").unwrap_or_default();
    let baseline = support::baseline::binary();
    if let Err(why) = &baseline {
        println!("({why})");
    }
    println!(
        "{:<42} {:>10} {:>9} {:>14} {:>8}  {:<22} result",
        "case", "seconds", "CPU s", "worker RSS", "target", "vs previous release"
    );
    // (case, ITERAGPU_PREDICT_MEMO, ITERAGPU_PREDICT_STEADY): every case with both shortcuts, the
    // first three again without the memo, the Trainer epoch and the two decode loops without the
    // steady state (the steps and the calls fast-forwarded).
    let runs = cases
        .iter()
        .enumerate()
        .map(|(k, c)| (k, c, "1", "1"))
        .chain(
            cases
                .iter()
                .take(3)
                .enumerate()
                .map(|(k, c)| (k, c, "0", "1")),
        )
        .chain(
            cases
                .iter()
                .enumerate()
                .filter(|(k, _)| matches!(k, 0 | 2 | 3))
                .map(|(k, c)| (k, c, "1", "0")),
        )
        .filter(|(_, (name, _, _), _, _)| name.contains(only.as_str()));
    for (k, (name, args, target), memo, steady) in runs {
        let out = dir
            .path()
            .join(format!("p{k}-memo{memo}-steady{steady}.json"));
        println!("  (load average {})", load_average());
        let name = match (memo, steady) {
            ("0", _) => format!("{name} (memo off)"),
            (_, "0") => format!("{name} (steady off)"),
            _ => name.to_string(),
        };
        // Options first: a script's own arguments follow `--`.
        let predict = |binary: &std::path::Path, out: &std::path::Path| {
            let _ = std::fs::remove_file(out);
            Command::new(binary)
                .arg("predict")
                .args(["--python", &python, "--output"])
                .arg(out)
                .env("ITERAGPU_PREDICT_MEMO", memo)
                .env("ITERAGPU_PREDICT_STEADY", steady)
                .args(args)
                .output()
                .expect("iteragpu runs")
        };
        // The previous release first, then this one (whose figures the columns print).
        let previous = support::baseline::seconds(&baseline, &out, |bin, out| {
            predict(bin, out);
        });
        let before = max_rss_children_kib();
        let cpu_before = cpu_children_seconds();
        let began = Instant::now();
        let run = predict(std::path::Path::new(env!("CARGO_BIN_EXE_iteragpu")), &out);
        let seconds = began.elapsed().as_secs_f64();
        let cpu = cpu_children_seconds() - cpu_before;
        // The largest resident set of any process waited for so far (the worker dominates).
        let rss = max_rss_children_kib().max(before) as f64 / (1024.0 * 1024.0);
        // A workload that raised after its steps (the Trainer's end-of-training save, while
        // checkpoints are not yet predicted) still wrote its prediction: timed all the same.
        let verdict = if !run.status.success() && !out.exists() {
            format!("FAILED: {}", String::from_utf8_lossy(&run.stderr).trim())
        } else if seconds <= *target && rss < 2.0 {
            "met".to_string()
        } else {
            "NOT met".to_string()
        };
        let verdict = if run.status.success() {
            verdict
        } else {
            format!("{verdict} (the workload failed after its steps: see the file)")
        };
        println!(
            "{name:<42} {seconds:>10.1} {cpu:>9.1} {:>10.2} GiB {:>7.0}s  {:<22} {verdict}",
            rss,
            target,
            support::baseline::ratio(seconds, previous)
        );
    }
    println!(
        "(machine: {} logical CPU(s))",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
}

/// The 1-minute load average, as /proc/loadavg says it ("?" elsewhere).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}
