//! `measure --nproc-per-node` under torchrun (PyTorch's launcher) with real torch on the CPU: the
//! gloo backend for the collectives and a fake CUDA device for the counters (tests/fake_cuda,
//! reported as "fake": never a GPU measurement). Each case checks the per-rank result, the exit
//! code, and that no rank survives the run.

use crate::common::{assert_declared_phases, fixture, iteragpu, read_json, torch_python};
use predicates::prelude::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One torchrun job at a time: each starts three interpreters that import torch, and the
/// timeout case needs its ranks to reach their last phase within its limit on 2 cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// `iteragpu measure --nproc-per-node 2 --script ranks.py -- MODE` with real torch, the script
/// copied into `dir` so that its processes can be found by their command line.
fn measure(
    python: &str,
    dir: &Path,
    mode: &str,
    extra: &[&str],
) -> (std::process::Command, PathBuf) {
    let script = dir.join("ranks.py");
    std::fs::copy(fixture("scripts/ranks.py"), &script).unwrap();
    let out = dir.join(format!("{mode}.json"));
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("iteragpu"));
    cmd.env("PYTHONPATH", fixture("../fake_cuda"))
        .env("FAKE_CUDA_DEVICES", "2")
        .env("TMPDIR", dir)
        .args([
            "measure",
            "--nproc-per-node",
            "2",
            "--python",
            python,
            "--script",
        ])
        .arg(&script)
        .args(extra)
        .arg("--output")
        .arg(&out)
        .args(["--", mode]);
    (cmd, out)
}

/// Waits until no process runs the copied script (every rank and torchrun are gone).
fn assert_no_rank_left(dir: &Path) {
    let marker = dir.to_string_lossy().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let alive: Vec<String> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.contains(&marker))
            .collect();
        if alive.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "ranks left running: {alive:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ranks(doc: &Value) -> Vec<(u64, String, Option<String>)> {
    doc["distributed"]["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["rank"].as_u64().unwrap(),
                r["status"].as_str().unwrap().to_string(),
                r["stopped_because"].as_str().map(String::from),
            )
        })
        .collect()
}

#[test]
#[ignore = "needs torch and transformers"]
fn every_rank_is_recorded_on_its_own_device_and_never_pooled() {
    let python = torch_python();
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let (cmd, out) = measure(&python, dir.path(), "ok", &[]);
    assert_cmd::Command::from_std(cmd)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "ranks of this node under torchrun",
        ));
    assert_no_rank_left(dir.path());
    let doc = read_json(&out);
    assert_eq!(doc["status"], "ok");
    let d = &doc["distributed"];
    assert_eq!(d["world_size"], 2);
    assert_eq!(
        ranks(&doc),
        [(0, "ok".into(), None), (1, "ok".into(), None)]
    );
    for (k, r) in d["ranks"].as_array().unwrap().iter().enumerate() {
        assert_eq!(r["device"], format!("cuda:{k}"));
        let names: Vec<&str> = r["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["init_process_group", "allocate", "all_reduce"]);
        // Each rank's own counters: (k + 1) × 64 MiB, never the sum.
        let peak = r["phases"][1]["devices"][0]["peak_allocated_bytes"]
            .as_u64()
            .unwrap();
        assert_eq!(peak, (k as u64 + 1) * (64 << 20));
    }
    assert_eq!(d["highest_peak_rank"], 1);
    assert_eq!(d["imbalance"]["spread_bytes"], 64u64 << 20);
    // The result's phases are rank 1's, and say so.
    assert_eq!(doc["scope"]["rank"], 1);
    assert!(doc["notes"].to_string().contains("fake torch"));
    assert!(d["run_id"].as_str().is_some_and(|id| !id.is_empty()));
    // torchrun's logs stayed in the CLI's own temporary folder, which is gone.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("torchelastic_") || n.starts_with("iteragpu-ranks-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Each rank's child writes a forged `hello` (pid 1) and a note through a copy of the rank's
/// socket: the lines lack the run's token, so they are dropped and counted, and pid 1 never
/// becomes a rank's group to stop.
#[test]
#[ignore = "needs torch and transformers"]
fn a_ranks_forked_child_cannot_speak_for_it() {
    let python = torch_python();
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let (cmd, out) = measure(&python, dir.path(), "forge", &[]);
    assert_cmd::Command::from_std(cmd).assert().success();
    assert_no_rank_left(dir.path());
    let doc = read_json(&out);
    assert_eq!(
        ranks(&doc),
        [(0, "ok".into(), None), (1, "ok".into(), None)]
    );
    let notes = doc["notes"].to_string();
    assert!(!notes.contains("a forged note"), "{notes}");
    assert!(notes.contains("forged line(s) ignored"), "{notes}");
}

#[test]
#[ignore = "needs torch and transformers"]
fn a_rank_that_raises_is_the_cause_and_the_others_are_stopped() {
    let python = torch_python();
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let (cmd, out) = measure(&python, dir.path(), "raise", &[]);
    assert_cmd::Command::from_std(cmd).assert().code(3);
    assert_no_rank_left(dir.path());
    let doc = read_json(&out);
    assert_eq!(doc["status"], "failed");
    assert_eq!(doc["failure"]["rank"], 1);
    assert!(
        doc["failure"]["message"]
            .as_str()
            .unwrap()
            .contains("rank 1 fails on purpose")
    );
    let r = ranks(&doc);
    assert_eq!(r[1].1, "failed");
    assert_ne!(r[0].1, "ok");
    assert!(
        r[0].2
            .as_deref()
            .is_some_and(|w| w.contains("rank 1 failed first")),
        "{r:?}"
    );
    // Every rank keeps the phases it completed.
    for rank in doc["distributed"]["ranks"].as_array().unwrap() {
        assert!(rank["phases"].as_array().unwrap().len() >= 2);
    }
}

#[test]
#[ignore = "needs torch and transformers"]
fn a_rank_killed_by_a_signal_is_named_from_torchruns_summary() {
    let python = torch_python();
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let (cmd, out) = measure(&python, dir.path(), "kill", &[]);
    assert_cmd::Command::from_std(cmd).assert().code(3);
    assert_no_rank_left(dir.path());
    let doc = read_json(&out);
    assert_eq!(doc["status"], "crashed");
    assert_eq!(doc["failure"]["rank"], 1);
    let message = doc["failure"]["message"].as_str().unwrap();
    assert!(message.contains("without reporting"), "{message}");
    assert_eq!(ranks(&doc)[1].1, "crashed");
}

#[test]
#[ignore = "needs torch and transformers"]
fn a_timeout_stops_every_rank_and_keeps_their_phases() {
    let python = torch_python();
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let (cmd, out) = measure(&python, dir.path(), "hang", &["--timeout", "20"]);
    let began = Instant::now();
    assert_cmd::Command::from_std(cmd).assert().code(3);
    assert!(began.elapsed() < Duration::from_secs(60));
    assert_no_rank_left(dir.path());
    let doc = read_json(&out);
    assert_eq!(doc["status"], "timeout");
    for rank in doc["distributed"]["ranks"].as_array().unwrap() {
        assert_eq!(rank["status"], "timeout");
        let phases = rank["phases"].as_array().unwrap();
        assert_eq!(phases.len(), 3);
        // The phase each rank was in is recorded as stopped, with the signal.
        assert_eq!(phases[2]["status"], "failed");
        assert_eq!(phases[2]["error"]["type"], "RankStopped");
    }
}

/// The processes (pid, command line) whose chain of parents reaches `ancestor`: one run's own
/// tree (other tests run workers at the same time).
fn processes_under(ancestor: u32) -> Vec<(u32, String)> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            Some((pid, String::from_utf8_lossy(&cmdline).to_string()))
        })
        .filter(|(pid, _)| descends_from(*pid, ancestor))
        .collect()
}

/// Whether `pid`'s chain of parents reaches `ancestor`.
fn descends_from(mut pid: u32, ancestor: u32) -> bool {
    for _ in 0..64 {
        if pid == ancestor {
            return true;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        let Some(ppid) = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
        else {
            return false;
        };
        if ppid <= 1 {
            return false;
        }
        pid = ppid;
    }
    false
}

#[test]
#[ignore = "needs torch and transformers"]
fn ctrl_c_stops_torchrun_and_every_rank() {
    let python = torch_python();
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let (mut cmd, out) = measure(&python, dir.path(), "hang", &[]);
    let child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until both ranks sleep in their last phase (their processes exist), then Ctrl-C. Only
    // this run's own process tree counts (other tests run workers at the same time).
    let marker = dir.path().join("ranks.py").to_string_lossy().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    let cli = child.id();
    loop {
        let ranks = processes_under(cli)
            .iter()
            .filter(|(_, c)| c.contains("iteragpu.worker"))
            .count();
        if ranks >= 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the ranks never started ({marker})"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(4));
    // SAFETY: kill only sends a signal to our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    // torchrun's own traceback (its reaction to the signal) stays off the terminal.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("Traceback"), "{stderr}");
    assert_no_rank_left(dir.path());
    let doc = read_json(&out);
    assert_eq!(doc["status"], "interrupted");
    assert_eq!(doc["stop_signal"], "SIGINT");
    // Every rank names the signal the CLI received, not the SIGTERM torchrun passed on.
    for rank in doc["distributed"]["ranks"].as_array().unwrap() {
        let why = rank["stopped_because"].as_str().unwrap_or("");
        assert!(why.contains("SIGINT"), "rank {}: {why}", rank["rank"]);
    }
}

/// torchrun itself killed (SIGKILL, by someone else): its death is torchrun's, not a rank's;
/// the ranks ended with it, and none is left running.
#[test]
#[ignore = "needs torch and transformers"]
fn torchrun_killed_is_named_as_the_cause() {
    let python = torch_python();
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let (mut cmd, out) = measure(&python, dir.path(), "hang", &[]);
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let cli = child.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    // Wait for both ranks of this run, then kill torchrun (the CLI's own child).
    let torchrun = loop {
        let procs = processes_under(cli);
        let ranks = procs
            .iter()
            .filter(|(_, c)| c.contains("iteragpu.worker"))
            .count();
        let launcher = procs
            .iter()
            .find(|(_, c)| c.contains("torch.distributed.run"))
            .map(|(pid, _)| *pid);
        if let (true, Some(pid)) = (ranks >= 2, launcher) {
            break pid;
        }
        assert!(Instant::now() < deadline, "the ranks never started");
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: kill only sends a signal to a process of this test's own tree.
    unsafe {
        libc::kill(torchrun as i32, libc::SIGKILL);
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(3));
    assert_no_rank_left(dir.path());
    let doc = read_json(&out);
    assert_eq!(doc["status"], "crashed", "{}", doc["failure"]);
    let message = doc["failure"]["message"].as_str().unwrap();
    assert!(message.contains("torchrun itself"), "{message}");
    assert!(doc["failure"]["rank"].is_null(), "no rank is blamed");
    for rank in doc["distributed"]["ranks"].as_array().unwrap() {
        assert_eq!(rank["status"], "terminated", "rank {}", rank["rank"]);
    }
}

#[test]
fn distributed_options_are_checked_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.json");
    for (args, message) in [
        (
            &["--nproc-per-node", "2", "--device", "cuda:0"][..],
            "one device per local rank",
        ),
        (
            &["--nproc-per-node", "2", "--nnodes", "2"][..],
            "--rdzv-endpoint",
        ),
        (
            &["--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "2"][..],
            "from 0 to 1",
        ),
        (
            &[
                "--nproc-per-node",
                "1",
                "--nnodes",
                "2",
                "--rdzv-endpoint",
                "nohost",
                "--rdzv-id",
                "j",
            ][..],
            "HOST:PORT",
        ),
        (&["--nproc-per-node", "2", "--timeline"][..], "--timeline"),
        (&["--nproc-per-node", "0"][..], "0"),
    ] {
        iteragpu()
            .arg("measure")
            .args(args)
            .arg("--output")
            .arg(&out)
            .assert()
            .code(1)
            .stderr(predicate::str::contains(message));
        assert!(!out.exists());
    }
}

/// DDP and FSDP2 as the built-in training workload runs them (`--shard`), for real on two CPU
/// ranks with gloo: the process group in its own phase, FSDP2's shards half the model on each
/// rank, the whole training loop through. Structure only: the counters read zero.
#[test]
#[ignore = "needs torch and transformers"]
fn ddp_and_fsdp2_run_their_real_code_on_cpu_ranks() {
    let python = torch_python();
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(
        &config,
        r#"{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 1000,
            "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
            "tie_word_embeddings": false}"#,
    )
    .unwrap();
    for shard in ["fsdp", "ddp"] {
        let job = serde_json::json!({
            "workload": "causal-lm", "devices": ["cpu"], "seed": 0, "model_config": config,
            "batch": 1, "context": 16, "prompt_tokens": 8, "new_tokens": 2, "cache": "dynamic",
            "window": null, "dtype": "float32", "whole_loop": false, "lora_rank": null,
            "lora_targets": [], "task": "train", "steps": 2, "optimizer": "adamw",
            "precision": "bf16-mixed", "gradient_checkpointing": false, "shard": shard
        });
        let job_path = dir.path().join(format!("{shard}.json"));
        std::fs::write(&job_path, job.to_string()).unwrap();
        let out = dir.path().join(shard);
        std::fs::create_dir(&out).unwrap();
        let run = std::process::Command::new(&python)
            .env(
                "PYTHONPATH",
                format!(
                    "{}:{}",
                    fixture("../python").display(),
                    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                        .join("python")
                        .display()
                ),
            )
            .env("OMP_NUM_THREADS", "1")
            .args([
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node",
                "2",
                "--log-dir",
            ])
            .arg(dir.path().join("logs"))
            .arg(fixture("../python/sharded_on_cpu.py"))
            .arg(&job_path)
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "{shard}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        for rank in 0..2 {
            let doc = read_json(&out.join(format!("rank{rank}.json")));
            assert_eq!(
                doc["error"],
                Value::Null,
                "{shard} rank {rank}: {}",
                doc["error"]
            );
            let phases = doc["phases"].as_array().unwrap();
            let names: Vec<&str> = phases.iter().map(|p| p["name"].as_str().unwrap()).collect();
            assert_eq!(&names[..3], ["init_process_group", "model_load", "inputs"]);
            assert_declared_phases(&job, &names, shard);
            assert_eq!(names.iter().filter(|n| **n == "optimizer_step").count(), 2);
            assert!(names.ends_with(&["evaluation", "export"]), "{names:?}");
            assert!(phases.iter().all(|p| p["status"] == "ok"));
            assert_eq!(phases[0]["inputs"]["world_size"], 2);
            assert_eq!(phases[0]["inputs"]["backend"], "gloo");
            let load = &phases[1]["inputs"];
            assert_eq!(load["shard"], shard);
            let total = load["parameters"].as_u64().unwrap();
            if shard == "fsdp" {
                // Each rank holds half of every parameter (dim 0 padded to an even split).
                let local = load["local_parameters"].as_u64().unwrap();
                assert!(
                    2 * local >= total && 2 * local < total + 2 * 1000,
                    "{local} of {total}"
                );
                assert_eq!(load["fsdp_groups"], 3, "two decoder layers and the root");
            } else {
                assert!(load.get("local_parameters").is_none());
            }
        }
    }
}

/// The files of a multi-node job (one per node, one run id) make one fiche: every rank of every
/// node side by side; files of different runs, or a node given twice, are refused. (The second
/// node's file is made from the first: one machine has one node.)
#[test]
#[ignore = "needs torch and transformers"]
fn the_node_files_of_one_job_are_merged_and_other_runs_refused() {
    let python = torch_python();
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let (cmd, node0) = measure(&python, dir.path(), "ok", &[]);
    assert_cmd::Command::from_std(cmd).assert().success();
    let mut doc = read_json(&node0);
    doc["distributed"]["torchrun"]["nnodes"] = 2.into();
    doc["distributed"]["world_size"] = 4.into();
    std::fs::write(&node0, serde_json::to_vec(&doc).unwrap()).unwrap();
    doc["distributed"]["torchrun"]["node_rank"] = 1.into();
    for r in doc["distributed"]["ranks"].as_array_mut().unwrap() {
        let k = r["rank"].as_u64().unwrap();
        r["rank"] = (k + 2).into();
        r["node_rank"] = 1.into();
    }
    let node1 = dir.path().join("node1.json");
    std::fs::write(&node1, serde_json::to_vec(&doc).unwrap()).unwrap();
    let fiche = dir.path().join("fiche.md");
    iteragpu()
        .arg("report")
        .args([&node0, &node1])
        .arg("--output")
        .arg(&fiche)
        .assert()
        .success();
    let text = std::fs::read_to_string(&fiche).unwrap();
    assert!(text.contains("merged from 2 node file(s)"), "{text}");
    let ranks = &text[text.find("## Ranks (torchrun)").expect("the ranks section")..];
    for rank in 0..4 {
        assert!(
            ranks.contains(&format!("\n| {rank} | ")),
            "rank {rank} in {ranks}"
        );
    }
    for name in ["ok.json", "node1.json"] {
        assert!(text.contains(name), "{name} attached");
    }
    // Another run's file.
    doc["distributed"]["run_id"] = "another-run".into();
    let other = dir.path().join("other.json");
    std::fs::write(&other, serde_json::to_vec(&doc).unwrap()).unwrap();
    let out = dir.path().join("never.md");
    iteragpu()
        .arg("report")
        .args([&node0, &other])
        .arg("--output")
        .arg(&out)
        .assert()
        .code(1);
    assert!(!out.exists());
    // The same node twice.
    iteragpu()
        .arg("report")
        .args([&node0, &node0])
        .arg("--output")
        .arg(&out)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("both node 0"));
    // compare sees one run in the two node files.
    iteragpu()
        .arg("compare")
        .args([&node0, &node1])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("the nodes of one run"));
    // Files of "one run id" that do not describe one job: refused with the field named, or
    // merged with a warning when asked.
    let node1_doc = read_json(&node1);
    type Edit = fn(&mut serde_json::Value);
    let edits: [(&str, Edit, &str); 4] = [
        (
            "world",
            |d| d["distributed"]["world_size"] = 8.into(),
            "`distributed.world_size` is 8 here and 4",
        ),
        (
            "noderank",
            |d| d["distributed"]["torchrun"]["node_rank"] = 2.into(),
            "node_rank` 2 is not below nnodes 2",
        ),
        (
            "dup",
            |d| {
                for r in d["distributed"]["ranks"].as_array_mut().unwrap() {
                    let k = r["rank"].as_u64().unwrap();
                    r["rank"] = (k - 2).into();
                }
            },
            "global rank 0 appears on two nodes",
        ),
        (
            "workload",
            |d| d["dimensions"]["batch"] = 999.into(),
            "`dimensions` differ",
        ),
    ];
    for (name, edit, field) in edits {
        let mut d = node1_doc.clone();
        edit(&mut d);
        let bad = dir.path().join(format!("{name}.json"));
        std::fs::write(&bad, serde_json::to_vec(&d).unwrap()).unwrap();
        iteragpu()
            .arg("report")
            .args([&node0, &bad])
            .arg("--output")
            .arg(&out)
            .assert()
            .code(1)
            .stderr(predicate::str::contains(field));
        assert!(!out.exists(), "{name}");
        let forced = dir.path().join(format!("{name}-forced.md"));
        iteragpu()
            .arg("report")
            .args([&node0, &bad])
            .args(["--allow-mismatch", "--output"])
            .arg(&forced)
            .assert()
            .success();
        let text = std::fs::read_to_string(&forced).unwrap();
        assert!(text.contains("--allow-mismatch"), "{name}: {text}");
    }
}
