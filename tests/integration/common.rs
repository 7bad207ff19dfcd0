use assert_cmd::Command;
use std::path::PathBuf;

pub fn iteragpu() -> Command {
    Command::cargo_bin("iteragpu").expect("the iteragpu binary is built by cargo test")
}

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Runs `iteragpu estimate … --json` and parses the document.
pub fn estimate_json(args: &[&str]) -> serde_json::Value {
    let out = iteragpu()
        .arg("estimate")
        .args(args)
        .arg("--json")
        .output()
        .expect("iteragpu runs");
    assert!(
        out.status.success(),
        "estimate {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("estimate --json prints JSON")
}

/// The bytes of the term whose name starts with `prefix`.
pub fn term_bytes(doc: &serde_json::Value, prefix: &str) -> u64 {
    doc["terms"]
        .as_array()
        .expect("terms is a list")
        .iter()
        .find(|t| t["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
        .unwrap_or_else(|| panic!("no term starting with {prefix:?} in {doc}"))["bytes"]
        .as_u64()
        .expect("bytes is an integer")
}

/// The one term whose `id` is `id` (ids tell the terms of an estimate apart).
pub fn term_by_id<'a>(doc: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    let found: Vec<&serde_json::Value> = doc["terms"]
        .as_array()
        .expect("terms is a list")
        .iter()
        .filter(|t| t["id"] == id)
        .collect();
    assert_eq!(found.len(), 1, "one term with id {id:?} in {doc}");
    found[0]
}

/// The bytes of the term whose `id` is `id`.
pub fn id_bytes(doc: &serde_json::Value, id: &str) -> u64 {
    term_by_id(doc, id)["bytes"]
        .as_u64()
        .expect("bytes is an integer")
}

/// `iteragpu` with the fake torch first on PYTHONPATH (a simulated caching allocator).
pub fn with_fake_torch() -> Command {
    let mut cmd = iteragpu();
    cmd.env("PYTHONPATH", fixture("../fake_torch"));
    for var in [
        "FAKE_TORCH_DEVICES",
        "FAKE_TORCH_CAPACITY",
        "FAKE_TORCH_NO_CUDA",
        "FAKE_TORCH_CPU_ONLY",
        "FAKE_TORCH_CRASH_AFTER_SYNC",
        "FAKE_TORCH_HANG_AFTER_SYNC",
        "FAKE_TORCH_NOISE",
        "FAKE_TORCH_BACKEND",
        "ITERAGPU_PYTHON",
        "CUDA_VISIBLE_DEVICES",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

pub fn read_json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).expect("result file exists"))
        .expect("result is JSON")
}

/// Whether the tests run under CI (`.ci/run` sets ITERAGPU_CI; most CI services set CI), where
/// a check that cannot run is a failure, not a note.
pub fn under_ci() -> bool {
    ["ITERAGPU_CI", "CI"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()))
}

/// Records that `check` did not run and why: fatal under CI; elsewhere the `zz_not_run` target
/// lists every such check at the end of `cargo test`.
pub fn not_run(check: &str, reason: &str) {
    assert!(
        !under_ci(),
        "{check} cannot run under CI: {reason} (.ci/run must provide what it needs)"
    );
    let folder = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("not-run");
    let _ = std::fs::create_dir_all(&folder);
    let line = format!("{check}: {reason}\n");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(folder.join(format!("{}.txt", std::process::id())))
    {
        use std::io::Write;
        let _ = f.write_all(line.as_bytes());
    }
    eprintln!("not run: {line}");
}

/// Interpreter for the checks that need real torch and transformers (CPU is enough).
pub fn torch_python() -> Option<String> {
    let candidate = std::env::var("ITERAGPU_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = std::process::Command::new(&candidate)
        .args(["-c", "import torch, transformers"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        Some(candidate)
    } else {
        crate::common::not_run(
            "checks against real torch and transformers on CPU",
            &format!(
                "{candidate} cannot import torch and transformers (set ITERAGPU_TEST_PYTHON to an interpreter that has them; .ci/run prepares one)"
            ),
        );
        None
    }
}

/// The phases a built-in workload recorded (`recorded`, in order) are the ones the Rust side
/// declares for its spec (`workload::plan::scope_phases`, the result's `scope.phases`): the same names in
/// the same order of first appearance (a phase repeated per repeat or step counts once). Fails on
/// any drift between the Python workloads and the declaration.
pub fn assert_declared_phases(job: &serde_json::Value, recorded: &[&str], what: &str) {
    let mut full = job.clone();
    let fields = full.as_object_mut().unwrap();
    // Fields the Python side defaults and Rust's spec requires.
    fields.entry("whole_loop").or_insert(false.into());
    if fields["workload"] == "causal-lm" {
        fields
            .entry("lora_targets")
            .or_insert(serde_json::json!([]));
    }
    let spec: iteragpu::schema::spec::WorkerSpec =
        serde_json::from_value(full).unwrap_or_else(|e| panic!("{what}: not a worker spec: {e}"));
    let declared = iteragpu::workload::plan::scope_phases(&spec);
    fn first<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
        let mut seen = Vec::new();
        for n in names {
            if !seen.contains(&n) {
                seen.push(n);
            }
        }
        seen
    }
    assert_eq!(
        first(recorded.iter().copied()),
        first(declared.iter().map(String::as_str)),
        "{what}: the phases the workload ran (left) and those workload::plan::scope_phases declares (right)"
    );
}
