//! What every integration test shares: the binary, the fixtures, the interpreters the tests need,
//! and `Run`, a builder that reads like the sentence a test states ("measure on the fake torch
//! with these arguments, expect status 3, then read the result") and returns typed documents.

use assert_cmd::Command;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

// The documents' Rust types, named once here so that a move of the types changes one line.
pub use iteragpu::schema::events::PhaseRecord;
pub use iteragpu::schema::measure::MeasureResult;
pub use iteragpu::schema::prediction::{
    DocumentKind, PhaseStatus, PredictedPhase, PredictionDoc, PredictionStatus,
};
pub use iteragpu::schema::run::RunStatus;
pub use iteragpu::schema::series::{PointKind, Series, SeriesStatus, SweepMode, TrialStatus};
pub use iteragpu::schema::spec::EmptyCache;

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

/// The interpreter the checks against real torch use: ITERAGPU_TEST_PYTHON, else `python3`,
/// checked once per set of `modules` to import them all. The tests that call it are
/// `#[ignore = "needs torch …"]`: they run under `cargo test -- --include-ignored` (as `.ci/run`
/// runs them), where a missing module fails the test instead of letting it pass unrun.
pub fn python_with(modules: &[&str]) -> String {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    static CHECKED: Mutex<BTreeMap<String, Result<String, String>>> = Mutex::new(BTreeMap::new());
    let candidate = std::env::var("ITERAGPU_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let import = format!("import {}", modules.join(", "));
    let verdict = CHECKED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .entry(import.clone())
        .or_insert_with(|| {
            match std::process::Command::new(&candidate)
                .args(["-c", &import])
                .output()
            {
                Ok(o) if o.status.success() => Ok(candidate.clone()),
                Ok(o) => Err(String::from_utf8_lossy(&o.stderr).trim().to_string()),
                Err(e) => Err(e.to_string()),
            }
        })
        .clone();
    verdict.unwrap_or_else(|why| {
        panic!(
            "`{candidate} -c \"{import}\"` failed: {why}\n(this test needs it: set ITERAGPU_TEST_PYTHON to an interpreter that has them; .ci/run prepares one)"
        )
    })
}

/// Runs `tests/python/NAME` with `python`, the package's Python first on its path; the check
/// passes when the script exits 0 and its closing line says "N passed, 0 failed". Returns what it
/// printed, for the test's own further assertions.
pub fn python_checks(python: &str, name: &str) -> String {
    let out = std::process::Command::new(python)
        .env(
            "PYTHONPATH",
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python"),
        )
        .arg(fixture(&format!("../python/{name}")))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains(" passed, 0 failed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The interpreter with real torch and transformers (CPU is enough); see `python_with`.
pub fn torch_python() -> String {
    python_with(&["torch", "transformers"])
}

/// One run of the `iteragpu` binary, built the way a test states it:
/// `Run::measure().fake_torch().args([..]).expect_status(3).result()`.
#[must_use = "a Run does nothing until expect_status or succeeds"]
pub struct Run {
    command: &'static str,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    fake_torch: bool,
    output: Option<PathBuf>,
    current_dir: Option<PathBuf>,
    timeout: Option<std::time::Duration>,
}

impl Run {
    pub fn command(command: &'static str) -> Run {
        Run {
            command,
            args: Vec::new(),
            env: Vec::new(),
            fake_torch: false,
            output: None,
            current_dir: None,
            timeout: None,
        }
    }

    pub fn measure() -> Run {
        Run::command("measure")
    }

    pub fn sweep() -> Run {
        Run::command("sweep")
    }

    pub fn predict() -> Run {
        Run::command("predict")
    }

    pub fn report() -> Run {
        Run::command("report")
    }

    /// The simulated caching allocator of `tests/fake_torch` first on PYTHONPATH, the fake's
    /// own switches cleared (see `with_fake_torch`).
    pub fn fake_torch(mut self) -> Run {
        self.fake_torch = true;
        self
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Run {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Run
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Run {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// `--output PATH`, given right after the command so that it never lands after a `--`
    /// meant for a script; the document `result`, `series` and `prediction` read.
    pub fn output(mut self, path: impl AsRef<Path>) -> Run {
        self.output = Some(path.as_ref().to_owned());
        self
    }

    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Run {
        self.current_dir = Some(dir.as_ref().to_owned());
        self
    }

    pub fn timeout(mut self, limit: std::time::Duration) -> Run {
        self.timeout = Some(limit);
        self
    }

    /// Runs it and asserts its exit status (the table in README's "exit codes").
    pub fn expect_status(self, code: i32) -> Ran {
        let ran = self.finish();
        assert_eq!(
            ran.code(),
            Some(code),
            "{}: exit status\nstdout:\n{}\nstderr:\n{}",
            ran.argv,
            ran.stdout(),
            ran.stderr()
        );
        ran
    }

    pub fn succeeds(self) -> Ran {
        self.expect_status(0)
    }

    /// Runs it whatever its exit status (for a test that looks at the status later, with the
    /// document in hand).
    pub fn finish(self) -> Ran {
        let mut cmd = if self.fake_torch {
            with_fake_torch()
        } else {
            iteragpu()
        };
        cmd.arg(self.command);
        if let Some(out) = &self.output {
            cmd.arg("--output").arg(out);
        }
        cmd.args(&self.args);
        for (key, value) in &self.env {
            cmd.env(key, value);
        }
        if let Some(dir) = &self.current_dir {
            cmd.current_dir(dir);
        }
        if let Some(limit) = self.timeout {
            cmd.timeout(limit);
        }
        let argv = format!("iteragpu {} {:?}", self.command, self.args);
        let output = cmd.output().unwrap_or_else(|e| panic!("{argv}: {e}"));
        Ran {
            argv,
            output,
            document: self.output,
        }
    }
}

/// A finished run: its streams, and the document it wrote at `--output`.
pub struct Ran {
    argv: String,
    output: std::process::Output,
    document: Option<PathBuf>,
}

impl Ran {
    /// The exit status; `None` when a signal ended it.
    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    /// Asserts that standard output contains `text`.
    pub fn stdout_has(self, text: &str) -> Ran {
        assert!(
            self.stdout().contains(text),
            "{}: {text:?} not in stdout:\n{}",
            self.argv,
            self.stdout()
        );
        self
    }

    /// Asserts that standard error contains `text`.
    pub fn stderr_has(self, text: &str) -> Ran {
        assert!(
            self.stderr().contains(text),
            "{}: {text:?} not in stderr:\n{}",
            self.argv,
            self.stderr()
        );
        self
    }

    /// The `--output` path given to the run.
    pub fn document(&self) -> &Path {
        self.document
            .as_deref()
            .unwrap_or_else(|| panic!("{}: no --output was given", self.argv))
    }

    /// Asserts that nothing was written at `--output`.
    pub fn wrote_nothing(self) -> Ran {
        assert!(
            !self.document().exists(),
            "{}: {} was written",
            self.argv,
            self.document().display()
        );
        self
    }

    /// The document as JSON, for what only its text shows (a key absent rather than null).
    pub fn json(&self) -> serde_json::Value {
        read_json(self.document())
    }

    /// The measurement (`iteragpu.measure/1`), read with the CLI's own type.
    pub fn result(&self) -> MeasureResult {
        read_typed(self.document())
    }

    /// The sweep's series (`iteragpu.series/1`).
    pub fn series(&self) -> Series {
        read_typed(self.document())
    }

    /// The prediction document.
    pub fn prediction(&self) -> PredictionDoc {
        read_typed(self.document())
    }
}

/// A document read with its Rust type: a field the type does not accept fails here.
pub fn read_typed<T: serde::de::DeserializeOwned>(path: &Path) -> T {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "{} does not parse as {}: {e}",
            path.display(),
            std::any::type_name::<T>()
        )
    })
}

/// The phases of a measurement or a prediction, looked up by name as the tests state them.
pub trait Phases {
    type Phase;
    fn phase_list(&self) -> &[Self::Phase];
    fn name_of(phase: &Self::Phase) -> &str;

    fn phase_names(&self) -> Vec<&str> {
        self.phase_list().iter().map(Self::name_of).collect()
    }

    /// The first phase called `name`.
    fn phase(&self, name: &str) -> &Self::Phase {
        self.phase_list()
            .iter()
            .find(|p| Self::name_of(p) == name)
            .unwrap_or_else(|| panic!("no phase {name:?} in {:?}", self.phase_names()))
    }
}

impl Phases for MeasureResult {
    type Phase = PhaseRecord;
    fn phase_list(&self) -> &[PhaseRecord] {
        &self.phases
    }
    fn name_of(phase: &PhaseRecord) -> &str {
        &phase.name
    }
}

impl Phases for PredictionDoc {
    type Phase = PredictedPhase;
    fn phase_list(&self) -> &[PredictedPhase] {
        &self.phases
    }
    fn name_of(phase: &PredictedPhase) -> &str {
        &phase.name
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

/// The worker specs documented by example in `src/schema/spec.rs` (its `//! {…}` lines): both
/// sides of the contract are tested on them.
pub fn documented_specs() -> Vec<String> {
    let examples: Vec<String> = include_str!("../../src/schema/spec.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("//! {"))
        .map(|rest| format!("{{{rest}"))
        .collect();
    assert_eq!(
        examples.len(),
        8,
        "the examples documented in src/schema/spec.rs"
    );
    examples
}

/// Every process whose parent chain leads to `root` (from /proc), with its depth below it.
pub fn descendants_with_depth(root: u32) -> Vec<(u32, usize)> {
    let mut parents = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parents.push((pid, ppid));
        }
    }
    let mut found = vec![(root, 0)];
    let mut i = 0;
    while i < found.len() {
        let (p, depth) = found[i];
        found.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == p)
                .map(|(c, _)| (*c, depth + 1)),
        );
        i += 1;
    }
    found.remove(0);
    found
}

/// Whether `pid` runs (exists and is no zombie).
pub fn process_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, r)| r.split_whitespace().next() != Some("Z"))
    })
}
