//! `measure -- COMMAND` and `sweep -- COMMAND` (issue 44): a launcher's ranks run for real, under
//! torchrun itself as `--nproc-per-node` runs them, with the environment the launcher's own code
//! gives a rank; real torch on the CPU (gloo) with the fake CUDA device of tests/fake_cuda.

use crate::common::{Ran, Run, fixture, python_with};

/// `iteragpu measure -- COMMAND` in the launch fixtures' folder, with 2 fake CUDA devices.
fn measured(python: &str, command: &[&str], dir: &std::path::Path) -> Ran {
    Run::measure()
        .env("PYTHONPATH", fixture("../fake_cuda"))
        .env("FAKE_CUDA_DEVICES", "2")
        .env("TMPDIR", dir)
        .output(dir.join("m.json"))
        .args(["--python", python, "--no-prediction"])
        .current_dir(fixture("scripts/launch"))
        .arg("--")
        .args(command)
        .finish()
}

/// Each rank's status and peak allocated bytes in its last phase, in rank order.
fn ranks(ran: &Ran) -> Vec<(u64, String, u64)> {
    let doc = ran.json();
    assert_eq!(doc["distributed"]["world_size"], 2, "{doc}");
    doc["distributed"]["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let last = r["phases"].as_array().unwrap().last().unwrap();
            (
                r["rank"].as_u64().unwrap(),
                r["status"].as_str().unwrap().to_string(),
                last["devices"][0]["peak_allocated_bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Rank r of trainpkg/ranks.py allocates (r + 1) × 32 MiB: each rank's own figures.
fn both_ranks_measured(ran: &Ran) {
    let said = format!("{}{}", ran.stdout(), ran.stderr());
    assert_eq!(ran.code(), Some(0), "{said}");
    assert_eq!(
        ranks(ran),
        [(0, "ok".into(), 32 << 20), (1, "ok".into(), 64 << 20)],
        "{said}"
    );
}

#[test]
#[ignore = "needs torch"]
fn measure_runs_a_torchrun_command_s_ranks_for_real() {
    let python = python_with(&["torch"]);
    let _one = crate::torchrun::serial();
    let dir = tempfile::tempdir().unwrap();
    let ran = measured(
        &python,
        &["torchrun", "--nproc-per-node", "2", "trainpkg/ranks.py"],
        dir.path(),
    );
    both_ranks_measured(&ran);
    let said = format!("{}{}", ran.stdout(), ran.stderr());
    for rank in ["COUNTER rank 0 of 2", "COUNTER rank 1 of 2"] {
        assert!(said.contains(rank), "{said}");
    }
    assert!(said.contains("LOCAL_WORLD_SIZE=2"), "{said}");
    let notes = ran.json()["notes"].to_string();
    assert!(
        notes.contains("torchrun: 1 node(s) × 2 process(es) = 2 ranks"),
        "{notes}"
    );
}

/// `python -m torch.distributed.run … -m trainpkg.ranks`: a module is every rank's `__main__`.
#[test]
#[ignore = "needs torch"]
fn measure_runs_a_module_s_ranks_under_python_dash_m_torch_distributed_run() {
    let python = python_with(&["torch"]);
    let _one = crate::torchrun::serial();
    let dir = tempfile::tempdir().unwrap();
    let ran = measured(
        &python,
        &[
            "python",
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "-m",
            "trainpkg.ranks",
        ],
        dir.path(),
    );
    both_ranks_measured(&ran);
    let said = format!("{}{}", ran.stdout(), ran.stderr());
    assert!(said.contains("COUNTER rank 1 of 2 main __main__"), "{said}");
}

/// `accelerate launch --config_file fsdp.yaml` (2 processes, FSDP): both ranks run under
/// torchrun with the variables accelerate's launcher prepares from the config.
#[test]
#[ignore = "needs torch and accelerate"]
fn measure_runs_an_accelerate_command_s_ranks_with_its_variables() {
    let python = python_with(&["torch", "accelerate"]);
    let _one = crate::torchrun::serial();
    let dir = tempfile::tempdir().unwrap();
    let ran = measured(
        &python,
        &[
            "accelerate",
            "launch",
            "--config_file",
            "fsdp.yaml",
            "trainpkg/ranks.py",
        ],
        dir.path(),
    );
    both_ranks_measured(&ran);
    let said = format!("{}{}", ran.stdout(), ran.stderr());
    for rank in ["0", "1"] {
        // Up to the next rank's line or the end of the line: two ranks share one pipe.
        let start = said
            .find(&format!("COUNTER rank {rank} of 2"))
            .unwrap_or_else(|| panic!("rank {rank} said nothing: {said}"));
        let rest = &said[start..];
        let end = rest[1..]
            .find('\n')
            .into_iter()
            .chain(rest[1..].find("COUNTER"))
            .min()
            .map_or(rest.len(), |i| i + 1);
        let line = &rest[..end];
        for seen in [
            "ACCELERATE_USE_FSDP=true",
            "FSDP_VERSION=2",
            "ACCELERATE_MIXED_PRECISION=bf16",
        ] {
            assert!(
                line.contains(seen),
                "{seen} not seen by rank {rank}: {line}"
            );
        }
    }
    let notes = ran.json()["notes"].to_string();
    assert!(notes.contains("ran under torchrun"), "{notes}");
}

/// `deepspeed --num_gpus 2 --module trainpkg.ranks`: each rank gets `--local_rank=N`, N its own
/// LOCAL_RANK, as DeepSpeed's launcher passes it. Not named for the oldest environment.
#[test]
#[ignore = "needs torch and deepspeed"]
fn deepspeed_launcher_command_is_measured_with_each_rank_s_local_rank() {
    let python = python_with(&["torch", "deepspeed"]);
    let _one = crate::torchrun::serial();
    let dir = tempfile::tempdir().unwrap();
    let ran = measured(
        &python,
        &["deepspeed", "--num_gpus", "2", "--module", "trainpkg.ranks"],
        dir.path(),
    );
    both_ranks_measured(&ran);
    let said = format!("{}{}", ran.stdout(), ran.stderr());
    for rank in ["0", "1"] {
        assert!(
            said.contains(&format!(
                "local_rank_arg {rank} LOCAL_RANK={rank} LOCAL_WORLD_SIZE=2"
            )),
            "{said}"
        );
    }
}

/// `sweep -- accelerate launch --mixed_precision bf16 -m trainpkg.batch --batch {batch}`: one
/// process per trial, the placeholder filled, accelerate's variable set (else the script exits 1).
#[test]
#[ignore = "needs torch and accelerate"]
fn sweep_runs_a_command_as_typed() {
    let python = python_with(&["torch", "accelerate"]);
    let dir = tempfile::tempdir().unwrap();
    let ran = Run::sweep()
        .env("PYTHONPATH", fixture("../fake_cuda"))
        .env("FAKE_CUDA_DEVICES", "1")
        .output(dir.path().join("s.json"))
        .args(["--python", &python, "--vary", "batch=1,3"])
        .current_dir(fixture("scripts/launch"))
        .args([
            "--",
            "accelerate",
            "launch",
            "--mixed_precision",
            "bf16",
            "-m",
            "trainpkg.batch",
            "--batch",
            "{batch}",
        ])
        .succeeds();
    let doc = ran.json();
    let trials: Vec<(u64, &str, u64)> = doc["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["values"]["batch"].as_u64().unwrap(),
                t["status"].as_str().unwrap(),
                t["peak_allocated_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(trials, [(1, "ok", 8 << 20), (3, "ok", 24 << 20)], "{doc}");
    assert!(
        doc["notes"]
            .to_string()
            .contains("accelerate launch: 1 process(es), one process"),
        "{}",
        doc["notes"]
    );
}

/// A launcher that is not installed, flags a launcher refuses, a config file that is missing:
/// `measure` and `sweep` say it (naming it), exit 1 and write nothing; so does a
/// `--nproc-per-node` that contradicts the command.
#[test]
#[ignore = "needs torch and accelerate"]
fn measure_and_sweep_refuse_a_command_they_cannot_resolve() {
    let python = python_with(&["torch", "accelerate"]);
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&[&str], &str); 3] = [
        (
            &["no-such-launcher", "train.py"],
            "'no-such-launcher' is neither python, torchrun, accelerate launch, deepspeed nor a console script",
        ),
        (
            &["torchrun", "--no-such-flag", "1", "trainpkg/ranks.py"],
            "): torchrun: error: unrecognized arguments: --no-such-flag",
        ),
        (
            &[
                "accelerate",
                "launch",
                "--config_file",
                "missing.yaml",
                "trainpkg/ranks.py",
            ],
            "The passed configuration file `missing.yaml` does not exist",
        ),
    ];
    for (command, message) in cases {
        for (run, placeholder) in [
            (Run::measure().output(dir.path().join("m.json")), &[][..]),
            (
                Run::sweep()
                    .output(dir.path().join("s.json"))
                    .args(["--vary", "batch=1,2"]),
                &["--batch", "{batch}"][..],
            ),
        ] {
            run.args(["--python", &python])
                .current_dir(fixture("scripts/launch"))
                .arg("--")
                .args(command)
                .args(placeholder)
                .expect_status(1)
                .stderr_has(message)
                .wrote_nothing();
        }
    }
    // --nproc-per-node beside a command that starts another count of ranks.
    Run::measure()
        .output(dir.path().join("m.json"))
        .args(["--python", &python, "--nproc-per-node", "4"])
        .current_dir(fixture("scripts/launch"))
        .args(["--", "torchrun", "--nproc-per-node", "2", "trainpkg/ranks.py"])
        .expect_status(1)
        .stderr_has("--nproc-per-node 4 and -- torchrun --nproc-per-node 2 trainpkg/ranks.py (which starts 1 node(s) × 2 ranks) disagree")
        .wrote_nothing();
}
