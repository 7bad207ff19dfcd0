//! The series file (`"schema": "iteragpu.series/1"`): every trial of a sweep with its values,
//! status, four counters, error and duration, plus the frontier and the fit. Rewritten after each
//! trial under a temporary name and moved into place, so a crash or Ctrl-C keeps every finished
//! trial; an existing file is never overwritten.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

use crate::output::OutputError;
use crate::schema::dimensions::Variable;
use crate::schema::fit::Fit;
use crate::schema::measure::{MeasureResult, RunStatus};
use crate::schema::prediction::PredictionDoc;

pub const SCHEMA: &str = "iteragpu.series/1";

/// How one trial of a sweep ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::Display, strum::AsRefStr, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum TrialStatus {
    Ok,
    /// An exception in a phase (out of memory among others): a finding, not a failure of the sweep.
    Failed,
    Crashed,
    Timeout,
    Interrupted,
    Terminated,
    /// PyTorch or a GPU went missing after the first trial.
    Unavailable,
    /// A predicted trial whose prediction cannot say whether it fits (a phase depends on data,
    /// or an op has no fake implementation): a gap in the series, with its reason in `error`,
    /// never a figure.
    Unpredictable,
}

/// Whether a figure was measured on a GPU or predicted on data-less tensors (`sweep --predict`).
/// Files written before predicted series have no such field: they were measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::Display, strum::AsRefStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum PointKind {
    #[default]
    Measured,
    Predicted,
}

impl TrialStatus {
    pub fn is_ok(self) -> bool {
        self == TrialStatus::Ok
    }
}

impl From<RunStatus> for TrialStatus {
    fn from(s: RunStatus) -> TrialStatus {
        match s {
            RunStatus::Ok => TrialStatus::Ok,
            RunStatus::Failed => TrialStatus::Failed,
            RunStatus::Crashed => TrialStatus::Crashed,
            RunStatus::Timeout => TrialStatus::Timeout,
            RunStatus::Interrupted => TrialStatus::Interrupted,
            RunStatus::Terminated => TrialStatus::Terminated,
        }
    }
}

/// Where a sweep stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::Display, strum::AsRefStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum SeriesStatus {
    /// Trials are still running (or the CLI was killed before it could say otherwise).
    Running,
    Complete,
    /// Stopped by SIGINT (Ctrl-C).
    Interrupted,
    /// Stopped by SIGTERM or SIGHUP.
    Terminated,
    /// Stopped by an error of the CLI itself; the note says which.
    Aborted,
}

/// How a sweep chooses its trials.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::Display, strum::AsRefStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum SweepMode {
    /// One `--vary` list.
    List,
    /// The success / out-of-memory frontier over a `--vary` range.
    Frontier,
    /// Two `--vary` lists, walked so that neighbours differ by one variable.
    Grid,
    /// Named reference loads (`--loads`).
    Loads,
    /// The same configuration in N fresh processes (`--processes`).
    Processes,
    /// Allocator settings compared in fresh processes (`--vary alloc_conf=…`), alone or at each
    /// value of one listed dimension.
    #[serde(rename = "alloc-conf")]
    #[strum(serialize = "alloc-conf")]
    AllocConf,
}

/// One trial of a sweep.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrialRecord {
    pub index: usize,
    /// `measured` or `predicted`: what the figures of this trial are (absent: measured).
    #[serde(default)]
    pub kind: PointKind,
    /// The varied values of this trial (`{"batch": 4}`).
    pub values: Map<String, Value>,
    /// The name of the reference load (`--loads`), if any.
    pub load: Option<String>,
    /// `ok`, `failed` (out-of-memory or another exception: a finding), `crashed`, `timeout`,
    /// `interrupted`, or `unavailable`.
    pub status: TrialStatus,
    /// Measured: the trial ran out of memory. Predicted: it is predicted not to fit
    /// (`failed_phase` is the first phase whose driver's view exceeds the capacity).
    pub out_of_memory: bool,
    /// Highest peak allocated over phases and devices.
    pub peak_allocated_bytes: Option<u64>,
    /// Highest peak reserved over phases and devices.
    pub peak_reserved_bytes: Option<u64>,
    /// Levels at the end of the last phase that ended (first device).
    pub end_allocated_bytes: Option<u64>,
    pub end_reserved_bytes: Option<u64>,
    pub failed_phase: Option<String>,
    pub error: Option<String>,
    pub duration_s: f64,
    /// The trial's full result (measured trials).
    pub result: Option<MeasureResult>,
    /// The trial's full prediction (predicted trials): never in `result`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prediction: Option<Box<PredictionDoc>>,
    /// `sweep --gpus`: the GPU this trial ran on (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<Gpu>,
}

/// One GPU of `sweep --gpus`, the worker's only one (its `cuda:0`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    /// Its `CUDA_VISIBLE_DEVICES` entry, as given (an index, or with `all` NVML's UUID).
    pub visible: String,
    /// NVML's index, when NVML sees it.
    pub nvml_index: Option<u32>,
    /// The model, as `source` declares it (`NVIDIA H200`).
    pub name: Option<String>,
    pub uuid: Option<String>,
    /// `total_memory` as PyTorch declares it.
    pub total_memory: Option<u64>,
    /// Who declared the name and UUID: `NVML`, else `PyTorch`.
    pub source: String,
}

/// Where the trials of `sweep --gpus` ran: each trial on one of `gpus`, never two at once on one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Devices {
    pub gpus: Vec<Gpu>,
    /// `4 × NVIDIA H200`; several models (`--allow-mixed`): `2 × NVIDIA H200, 1 × NVIDIA A100`.
    pub models: String,
    /// More than one model (only with `--allow-mixed`): a peak is its GPU's, and the frontier
    /// and fit mix them.
    pub mixed: bool,
}

impl TrialRecord {
    /// A trial that is neither a success nor a finding (an out-of-memory).
    pub fn is_broken(&self) -> bool {
        match self.status {
            TrialStatus::Ok => false,
            TrialStatus::Failed => !self.out_of_memory,
            // A gap said with its reason: the prediction cannot answer, nothing broke.
            TrialStatus::Unpredictable => false,
            _ => true,
        }
    }
}

/// A frontier search's outcome.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FrontierRecord {
    pub variable: Variable,
    pub last_success: Option<u64>,
    pub first_failure: Option<u64>,
    pub resolution: u64,
    pub trials: usize,
    /// `prediction hint (N predictions…), then measured-peak curve` (both sides of the predicted
    /// frontier first), `measured-peak curve` (successes' peaks extrapolated to the capacity), or
    /// `grow-then-bisect` (no capacity known).
    pub strategy: String,
    pub hint: Option<u64>,
    /// Predictions of the workload the hint took (each a run on data-less tensors on the CPU).
    #[serde(default)]
    pub predictions: usize,
    pub budget_exhausted: bool,
    /// Predicted series: what decides at the first value predicted not to fit (absent for a
    /// measured frontier, or when no value was predicted not to fit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deciding: Option<Deciding>,
}

/// Why the first value predicted not to fit does not: its first phase over the capacity.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Deciding {
    /// The value of the varied dimension (the frontier's first failure).
    pub value: u64,
    /// The phase of the simulated card's out-of-memory, else the first phase whose predicted
    /// driver's view exceeds the capacity.
    pub phase: String,
    /// The predicted driver's view (peak reserved + memory outside the allocator): of the whole
    /// run with unlimited memory after an out-of-memory, else of that phase.
    pub driver_view_bytes: Option<u64>,
    /// The capacity it is held against.
    pub capacity_bytes: u64,
    /// The allocation that did not fit on the simulated card (its out-of-memory).
    #[serde(default)]
    pub allocation: Option<DecidingAllocation>,
    /// The largest storage alive at that phase's peak allocated, when the prediction has it:
    /// the largest allocation there, not necessarily the one that crossed the capacity.
    #[serde(default)]
    pub largest_at_peak: Option<crate::schema::prediction::TensorAtPeak>,
}

/// The allocation the simulated card could not serve: its size, the storage, and the user's line.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DecidingAllocation {
    /// Bytes as the program asked for them.
    pub bytes: u64,
    pub shape: Vec<u64>,
    pub dtype: String,
    pub category: String,
    pub module: Option<String>,
    pub file: Option<String>,
    pub line: Option<u64>,
}

/// The predicted frontier of one card from the fit.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CardFrontier {
    pub card: String,
    pub capacity_bytes: u64,
    pub capacity_source: String,
    /// Capacity minus the non-PyTorch memory measured in the trials (when measured).
    pub usable_bytes: u64,
    /// Value of the varied dimension at which the fitted peak reserved reaches `usable_bytes`.
    pub predicted: Option<f64>,
    /// Where the fit's ~95% prediction band reaches the usable bytes (it widens away from the
    /// measured values).
    pub range: Option<(f64, f64)>,
    /// Outside the measured range: an extrapolation, not a measurement.
    pub extrapolation: bool,
    /// Why no value is given (too far beyond the measured values, or never reached).
    #[serde(default)]
    pub withheld: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FitRecord {
    pub variable: Variable,
    pub fit: Fit,
    /// Memory outside PyTorch's allocator subtracted from each card, and where it came from.
    pub overhead_bytes: Option<u64>,
    pub overhead_source: String,
    pub cards: Vec<CardFrontier>,
}

/// The emulated capacity of a smaller card, or the capacity predictions are held against.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Limit {
    pub bytes: u64,
    /// `--memory-limit` or `--card NAME`.
    pub source: String,
    /// True: the limit is emulated on a larger GPU, not a real card. False: the capacity a
    /// predicted series is held against (`sweep --predict`), no GPU involved.
    pub emulated: bool,
    pub method: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Series {
    pub schema: String,
    pub tool_version: String,
    pub started_at: String,
    pub updated_at: String,
    /// `running`, `complete`, `interrupted`, `terminated` or `aborted`.
    pub status: SeriesStatus,
    /// `list`, `frontier`, `grid`, `loads`, `processes` or `alloc-conf`.
    pub mode: SweepMode,
    /// `measured` or `predicted` (`sweep --predict`): what every trial of the series is (absent
    /// in files written before predicted series: measured).
    #[serde(default)]
    pub kind: PointKind,
    /// The card the predictions were made for, with the provenance of each figure no tensor
    /// shows (predicted series only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<crate::schema::target::Target>,
    pub varied: Vec<Variable>,
    /// The allocator settings compared (mode `alloc-conf`), in the order they ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alloc_confs: Vec<crate::schema::alloc_conf::AllocConf>,
    /// The worker specification shared by every trial (the varied keys removed).
    pub base: Map<String, Value>,
    /// Checked after each trial: every option but the varied ones was identical.
    pub identical_across_trials: bool,
    /// `fresh process per trial` (and, with --processes, N processes of one configuration, which
    /// is not the same protocol as N repeats in one process).
    pub protocol: String,
    pub limit: Option<Limit>,
    /// `sweep --gpus`: the GPUs the trials ran on, one trial per GPU at a time (absent: the one
    /// `--device` names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<Devices>,
    pub trials: Vec<TrialRecord>,
    pub frontier: Option<FrontierRecord>,
    pub fit: Option<FitRecord>,
    pub notes: Vec<String>,
}

/// One row of an allocator A/B: a value of the listed dimension (none when only the settings
/// vary) and each setting's trial there, in the order of `Series::alloc_confs`.
#[derive(Debug)]
pub struct AllocConfRow<'a> {
    pub value: Option<(Variable, u64)>,
    pub trials: Vec<Option<&'a TrialRecord>>,
}

impl AllocConfRow<'_> {
    /// A setting's peak reserved against the first setting's, as a signed fraction, when both
    /// trials completed (a partial peak compares nothing).
    pub fn change(&self, k: usize) -> Option<f64> {
        let peak = |t: Option<&TrialRecord>| {
            t.filter(|t| t.status.is_ok())
                .and_then(|t| t.peak_reserved_bytes)
        };
        let (a, b) = (peak(*self.trials.first()?)?, peak(*self.trials.get(k)?)?);
        (a > 0).then(|| (b as f64 - a as f64) / a as f64)
    }
}

impl Series {
    /// Mode `alloc-conf`: the trials side by side, one row per value of the listed dimension.
    pub fn alloc_conf_rows(&self) -> Vec<AllocConfRow<'_>> {
        let variable = self.varied.first().copied();
        let mut values: Vec<Option<u64>> = Vec::new();
        for t in &self.trials {
            let v = variable.and_then(|v| t.values.get(v.name())?.as_u64());
            if !values.contains(&v) {
                values.push(v);
            }
        }
        values.sort_unstable();
        values
            .into_iter()
            .map(|v| AllocConfRow {
                value: variable.zip(v),
                trials: self
                    .alloc_confs
                    .iter()
                    .map(|a| {
                        self.trials.iter().find(|t| {
                            t.values.get(crate::schema::alloc_conf::ALLOC_CONF)
                                == Some(&Value::from(a.name()))
                                && variable.and_then(|x| t.values.get(x.name())?.as_u64()) == v
                        })
                    })
                    .collect(),
            })
            .collect()
    }

    /// The most memory a trial's process held outside PyTorch's allocator (NVML's view).
    pub fn max_outside_allocator(&self) -> Option<u64> {
        self.trials
            .iter()
            .filter_map(|t| t.result.as_ref())
            .filter_map(MeasureResult::max_outside_allocator)
            .max()
    }

    pub fn predicted(&self) -> bool {
        self.kind == PointKind::Predicted
    }
}

/// Writes the series atomically after each trial (a temporary sibling moved into place). The
/// first write refuses to replace a file that appeared meanwhile. If the path cannot be written
/// any more (a full disk), the series moves to the temporary folder and says so, so that no
/// finished trial is lost.
pub struct Writer {
    path: PathBuf,
    written: bool,
    /// The series could not be written where asked: why, and where it is instead.
    moved: Option<(OutputError, PathBuf)>,
}

impl Writer {
    pub fn new(path: &Path) -> Result<Writer, OutputError> {
        crate::output::check_new(path)?;
        Ok(Writer {
            path: path.to_path_buf(),
            written: false,
            moved: None,
        })
    }

    pub fn save(&mut self, series: &Series) -> Result<(), OutputError> {
        let bytes = serde_json::to_vec_pretty(series).map_err(|e| OutputError::Io {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        match self.write(&bytes) {
            Ok(()) => Ok(()),
            Err(e @ OutputError::Exists(_)) => Err(e),
            Err(why) if self.moved.is_none() => {
                let elsewhere = std::env::temp_dir().join(format!(
                    "iteragpu-series-{}-{}.json",
                    chrono::Utc::now().format("%Y%m%dT%H%M%S"),
                    std::process::id()
                ));
                crate::say!(
                    "warning: {why}; the series continues in {}",
                    elsewhere.display()
                );
                self.path = elsewhere.clone();
                self.written = false;
                self.moved = Some((why, elsewhere));
                self.write(&bytes)
            }
            Err(e) => Err(e),
        }
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), OutputError> {
        let staged = crate::output::stage(&self.path, bytes)?;
        if self.written {
            staged.replace()?;
        } else {
            staged.commit()?;
        }
        self.written = true;
        Ok(())
    }

    /// Why and where the series went, when it could not be written at the requested path.
    pub fn take_moved(&mut self) -> Option<(OutputError, PathBuf)> {
        self.moved.take()
    }

    pub fn written(&self) -> bool {
        self.written
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::VariantArray;

    /// Statuses and modes are named once: the file's word is the derived text.
    #[test]
    fn names_are_the_files_words() {
        fn check<T: Serialize + AsRef<str> + std::fmt::Display>(v: &T) {
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_ref());
            assert_eq!(v.to_string(), v.as_ref());
        }
        TrialStatus::VARIANTS.iter().for_each(check);
        SeriesStatus::VARIANTS.iter().for_each(check);
        SweepMode::VARIANTS.iter().for_each(check);
        PointKind::VARIANTS.iter().for_each(check);
        assert_eq!(SweepMode::AllocConf.to_string(), "alloc-conf");
    }

    /// A series written before predicted series has no `kind`: it and its trials were measured.
    #[test]
    fn an_old_series_reads_as_measured() {
        let text = std::fs::read_to_string("tests/fixtures/fiche/series.json").unwrap();
        assert!(!text.contains("\"kind\""), "the fixture predates the field");
        let s: Series = serde_json::from_str(&text).unwrap();
        assert_eq!(s.kind, PointKind::Measured);
        assert!(!s.predicted());
        assert!(s.trials.iter().all(|t| t.kind == PointKind::Measured));
        assert!(s.trials.iter().all(|t| t.prediction.is_none()));
    }
}
