//! The Slurm runner (`sweep --executor slurm`): a sweep's cells as the tasks of a job array, each
//! task the iteragpu binary running ONE cell through the same runner a local sweep uses
//! (`iteragpu slurm-task`, on the shared filesystem), its trial written into the job folder and
//! read back here. The Slurm commands are run as they are (`sbatch`, `scontrol`, `sacct`,
//! `scancel`): no scheduler of ours, no ssh.
//!
//! The job folder, beside the series (`SERIES.slurm/`, never reused):
//! `sweep.json` (the command as typed, its folder, the binary), and per `sbatch` call
//! `array-N/` with `job.sh`, `cells.json` (the cell of each task), `job_id`, and per task
//! `task-I.out`, `task-I.err` (Slurm's output files) and `task-I.outcome.json` (the trial).
//!
//! A task that ends without its outcome (a time limit, a node failure, a preemption, a
//! cancellation, a crash) is still a trial: its status from Slurm's state, Slurm's state and
//! reason in its error. Ctrl-C or SIGTERM cancels the array (`scancel`) and waits for its tasks
//! to end; they are then recorded as interrupted (or terminated).

pub(crate) mod script;
pub(crate) mod state;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::progress::Progress;
use crate::schema::series::{PointKind, TrialRecord, TrialStatus};
use crate::signals::{Stop, StopRequest};
use crate::sweep::plan::{Cell, SweepPlan};
use crate::sweep::runner::{Ran, Runner, blank};
use state::TaskState;

/// Where a sweep's trials run (`--executor`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Executor {
    /// This machine.
    Local,
    /// The tasks of a Slurm job array.
    Slurm,
}

/// How the array is submitted: sbatch's own options, passed as given.
#[derive(Clone, Debug, Default)]
pub struct SlurmOptions {
    pub partition: Option<String>,
    pub gres: Option<String>,
    pub time: Option<String>,
    pub account: Option<String>,
    /// `--sbatch-arg`: more of sbatch's options, each one argument.
    pub sbatch_args: Vec<String>,
}

impl SlurmOptions {
    /// sbatch's arguments for these options.
    pub fn args(&self) -> Vec<String> {
        let mut a = Vec::new();
        for (flag, v) in [
            ("--partition", &self.partition),
            ("--gres", &self.gres),
            ("--time", &self.time),
            ("--account", &self.account),
        ] {
            if let Some(v) = v {
                a.push(format!("{flag}={v}"));
            }
        }
        a.extend(self.sbatch_args.iter().cloned());
        a
    }

    /// Asks sbatch whether it would take a job with these options (`--test-only`: nothing is
    /// submitted), so that a missing sbatch, a bad partition or account is refused before
    /// anything is written.
    pub fn check(&self) -> Result<()> {
        let out = Command::new("sbatch")
            .arg("--test-only")
            .args(self.args())
            .args(["--job-name=iteragpu-check", "--wrap=true"])
            .output();
        let out = match out {
            Ok(o) => o,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
                "--executor slurm: `sbatch` is not on PATH (Slurm's commands are needed on the machine that runs the sweep)"
            ),
            Err(e) => bail!("--executor slurm: cannot run sbatch: {e}"),
        };
        // `--test-only` answers on standard error, successful or not.
        let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if !out.status.success() {
            bail!(
                "--executor slurm: sbatch refuses {}: {said}",
                match self.args() {
                    a if a.is_empty() => "a job".into(),
                    a => a.join(" "),
                }
            );
        }
        Ok(())
    }
}

/// The folder of the tasks' files beside the series `output` (`SERIES.slurm`).
pub fn job_dir_for(output: &Path) -> PathBuf {
    match output.extension() {
        // `--output x.slurm`: the folder cannot take the series' own name.
        Some(e) if e == "slurm" => output.with_extension("slurm-jobs"),
        _ => output.with_extension("slurm"),
    }
}

/// What the tasks need to plan their sweep again: the command as typed, where it was typed, and
/// the binary that runs them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SweepCommand {
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    pub executable: PathBuf,
}

/// Which cell a task runs: its values and load, as the series records them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellKey {
    pub values: Map<String, Value>,
    pub load: Option<String>,
}

impl CellKey {
    pub fn of(cell: &Cell) -> CellKey {
        CellKey {
            values: cell.values.clone(),
            load: cell.load.clone(),
        }
    }
}

/// What a task wrote: the runner's answer for its cell.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskOutcome {
    Trial(Box<TrialRecord>),
    Unavailable(String),
}

impl From<Ran> for TaskOutcome {
    fn from(ran: Ran) -> TaskOutcome {
        match ran {
            Ran::Trial(t) => TaskOutcome::Trial(t),
            Ran::Unavailable(r) => TaskOutcome::Unavailable(r),
        }
    }
}

/// The file a task writes its outcome to.
pub fn outcome_path(array_dir: &Path, task: usize) -> PathBuf {
    array_dir.join(format!("task-{task}.outcome.json"))
}

/// The most tasks of one array that run at once (sbatch's `--array=…%N`); a frontier search's
/// rounds are as wide.
pub const ARRAY_PARALLELISM: usize = 8;

/// Runs each cell as a task of a Slurm job array.
pub struct Slurm {
    kind: PointKind,
    protocol: String,
    options: SlurmOptions,
    job_dir: PathBuf,
    command: SweepCommand,
    stop: &'static StopRequest,
    arrays: AtomicUsize,
}

impl Slurm {
    /// A runner whose tasks run `command` again for one cell each; `kind` and `protocol` are
    /// the local runner's that each task uses. Creates `job_dir` (refused if it exists).
    pub fn new(
        kind: PointKind,
        protocol: String,
        options: SlurmOptions,
        job_dir: PathBuf,
        command: SweepCommand,
        stop: &'static StopRequest,
    ) -> Result<Slurm> {
        // The tasks find it wherever they start.
        let job_dir = std::path::absolute(&job_dir)?;
        std::fs::create_dir(&job_dir).with_context(|| {
            format!(
                "cannot create the job folder {} (an existing one is never reused)",
                job_dir.display()
            )
        })?;
        std::fs::write(
            job_dir.join("sweep.json"),
            serde_json::to_vec_pretty(&command)?,
        )?;
        Ok(Slurm {
            kind,
            protocol,
            options,
            job_dir,
            command,
            stop,
            arrays: AtomicUsize::new(0),
        })
    }

    /// One `sbatch --array=0-(n-1)` for `cells` (at most [`ARRAY_PARALLELISM`] tasks running at
    /// once), followed to its end: `done(i, ran, seconds)` as each task ends. Once `done` says no
    /// more, the tasks still pending are cancelled; a stop signal cancels the whole array. A task
    /// cancelled before it started reports nothing, as a local cell never started.
    fn run_array(&self, cells: &[&Cell], done: &mut dyn FnMut(usize, Result<Ran>, f64) -> bool) {
        let began = Instant::now();
        let (dir, id) = match self.submit(cells) {
            Ok(submitted) => submitted,
            Err(e) => {
                done(0, Err(e), began.elapsed().as_secs_f64());
                return;
            }
        };
        let n = cells.len();
        let mut states: BTreeMap<usize, TaskState> = BTreeMap::new();
        let mut reported = vec![false; n];
        let mut stopped: Option<Stop> = None;
        let mut no_more = false;
        let mut cancelled_at: Option<Instant> = None;
        let mut wait = Duration::from_millis(300);
        let mut unknown = 0;
        while reported.iter().any(|r| !r) {
            let until = Instant::now() + wait;
            while Instant::now() < until {
                if stopped.is_none()
                    && let Some(s) = self.stop.get()
                {
                    stopped = Some(s);
                    let _ = Command::new("scancel")
                        .arg(&id)
                        .stderr(std::process::Stdio::null())
                        .status();
                    cancelled_at = Some(Instant::now());
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            wait = (wait * 3 / 2).min(Duration::from_secs(3));
            match query(&id) {
                Some(now) => {
                    unknown = 0;
                    states.extend(now);
                }
                None => unknown += 1,
            }
            // Slurm forgot the job (MinJobAge passed, no accounting), or a cancelled array
            // outlives a minute: what was seen is what there is.
            let give_up =
                unknown >= 5 || cancelled_at.is_some_and(|t| t.elapsed() > Duration::from_secs(60));
            for i in 0..n {
                let state = states.get(&i);
                if reported[i] || !(give_up || state.is_some_and(TaskState::ended)) {
                    continue;
                }
                reported[i] = true;
                let never_started =
                    state.is_some_and(|s| s.state == "CANCELLED" && s.nodes.is_none());
                if (stopped.is_some() || no_more) && never_started {
                    continue;
                }
                let ran = self.collect(cells[i], &dir, &id, i, state, stopped);
                if !done(i, Ok(ran), began.elapsed().as_secs_f64()) && !no_more {
                    no_more = true;
                    let _ = Command::new("scancel")
                        .args(["--state=PENDING", &id])
                        .status();
                }
            }
            if give_up {
                break;
            }
        }
    }

    /// Writes the array's folder and submits it: the folder and the job id.
    fn submit(&self, cells: &[&Cell]) -> Result<(PathBuf, String)> {
        let n = self.arrays.fetch_add(1, Ordering::Relaxed) + 1;
        let dir = self.job_dir.join(format!("array-{n}"));
        std::fs::create_dir(&dir)?;
        let keys: Vec<CellKey> = cells.iter().map(|c| CellKey::of(c)).collect();
        std::fs::write(dir.join("cells.json"), serde_json::to_vec_pretty(&keys)?)?;
        let torchrun = cells.first().and_then(|c| c.plan.trial().torchrun);
        let script = script::job_script(&self.command.executable, &dir, torchrun.as_ref());
        let script_path = dir.join("job.sh");
        std::fs::write(&script_path, script)?;
        let mut sbatch = Command::new("sbatch");
        sbatch
            .arg("--parsable")
            .arg(format!("--array=0-{}%{ARRAY_PARALLELISM}", cells.len() - 1))
            .arg(format!("--job-name=iteragpu-sweep-{n}"))
            .arg(format!("--chdir={}", self.command.cwd.display()))
            .arg(format!("--output={}", dir.join("task-%a.out").display()))
            .arg(format!("--error={}", dir.join("task-%a.err").display()))
            .args(script::allocation(torchrun.as_ref()))
            .args(self.options.args())
            .arg(&script_path);
        let out = sbatch.output().context("cannot run sbatch")?;
        if !out.status.success() {
            bail!(
                "sbatch refused the array: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let id = text.trim().split(';').next().unwrap_or("").to_string();
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
            bail!("sbatch answered no job id: {text:?}");
        }
        std::fs::write(dir.join("job_id"), &id)?;
        Ok((dir, id))
    }

    /// Task `i`'s trial: its outcome when Slurm says it completed, else a record of Slurm's state.
    fn collect(
        &self,
        cell: &Cell,
        dir: &Path,
        array: &str,
        i: usize,
        state: Option<&TaskState>,
        stopped: Option<Stop>,
    ) -> Ran {
        let outcome = std::fs::read(outcome_path(dir, i))
            .ok()
            .and_then(|b| serde_json::from_slice::<TaskOutcome>(&b).ok());
        let completed = state.is_some_and(|s| s.state == "COMPLETED");
        match (outcome, completed) {
            (Some(TaskOutcome::Unavailable(r)), true) => Ran::Unavailable(r),
            (Some(TaskOutcome::Trial(t)), true) => Ran::Trial(t),
            (outcome, _) => {
                let (status, why) = match state {
                    Some(s) if s.state == "COMPLETED" => (
                        TrialStatus::Crashed,
                        format!(
                            "{}: the task wrote no outcome ({})",
                            s.describe(array, i),
                            tail(&dir.join(format!("task-{i}.err")))
                        ),
                    ),
                    Some(s) => {
                        let status = match (s.state.as_str(), stopped) {
                            ("CANCELLED", Some(Stop::Interrupt)) => TrialStatus::Interrupted,
                            ("CANCELLED" | "PENDING", Some(_)) => TrialStatus::Terminated,
                            _ => s.status(),
                        };
                        let mut why = s.describe(array, i);
                        if let Some(stop) = stopped {
                            why.push_str(&format!("; cancelled by this sweep on {}", stop.name()));
                        }
                        if status == TrialStatus::Crashed {
                            why.push_str(&format!(
                                " ({})",
                                tail(&dir.join(format!("task-{i}.err")))
                            ));
                        }
                        (status, why)
                    }
                    None => (
                        TrialStatus::Crashed,
                        format!(
                            "Slurm no longer knows job {array}_{i} (no squeue or scontrol entry, no accounting): its end is unknown"
                        ),
                    ),
                };
                // What the task measured before it was stopped, if it wrote it, is kept.
                let mut record = match outcome {
                    Some(TaskOutcome::Trial(t)) => *t,
                    _ => blank(self.kind, cell, status),
                };
                record.status = status;
                record.out_of_memory = false;
                record.error = Some(match record.error.take() {
                    Some(e) if !e.is_empty() => format!("{why}; the trial said: {e}"),
                    _ => why,
                });
                Ran::Trial(Box::new(record))
            }
        }
    }
}

/// The array's tasks as Slurm describes them now: scontrol (the controller's memory), else sacct
/// (accounting, where there is one); `None` when neither knows the job.
fn query(id: &str) -> Option<BTreeMap<usize, TaskState>> {
    let out = Command::new("scontrol")
        .args(["-o", "show", "job", id])
        .output()
        .ok()?;
    if out.status.success() {
        let tasks = state::parse_scontrol(&String::from_utf8_lossy(&out.stdout));
        if !tasks.is_empty() {
            return Some(tasks);
        }
    }
    let out = Command::new("sacct")
        .args(["-n", "-P", "-X", "-j", id])
        .args(["-o", "JobID,State,Reason,ExitCode,NodeList"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let tasks = state::parse_sacct(&String::from_utf8_lossy(&out.stdout));
    (!tasks.is_empty()).then_some(tasks)
}

/// The last lines of a task's standard error, or that it has none.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return format!("{} is empty", path.display());
    }
    let from = lines.len().saturating_sub(3);
    format!("{}: {}", path.display(), lines[from..].join(" | "))
}

impl Runner for Slurm {
    fn kind(&self) -> PointKind {
        self.kind
    }

    /// An array of one.
    fn run(&self, cell: &Cell, _progress: &dyn Progress) -> Result<Ran> {
        let mut got = None;
        self.run_array(&[cell], &mut |_, ran, _| {
            got = Some(ran);
            true
        });
        got.unwrap_or_else(|| bail!("the task was cancelled before it started"))
    }

    /// One array for all the cells.
    fn run_many(
        &self,
        cells: &[&Cell],
        _progress: &dyn Progress,
        done: &mut dyn FnMut(usize, Result<Ran>, f64) -> bool,
    ) {
        if !cells.is_empty() {
            self.run_array(cells, done);
        }
    }

    fn stop_requested(&self) -> Option<Stop> {
        self.stop.get()
    }

    /// The array's throttle: Slurm queues the rest.
    fn parallelism(&self) -> Option<usize> {
        Some(ARRAY_PARALLELISM)
    }

    fn protocol(&self, _plan: &SweepPlan) -> String {
        format!(
            "{}; each trial a task of a Slurm job array, at most {ARRAY_PARALLELISM} running at once ({})",
            self.protocol,
            match self.options.args() {
                a if a.is_empty() => "sbatch's defaults".into(),
                a => a.join(" "),
            }
        )
    }
}
