//! The result file (`"schema": "iteragpu.measure/1"`): raw bytes only, `null` (with a reason) for
//! anything not read, never 0.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::environment::{DriverView, PythonEnvironment};
use crate::schema::events::PhaseRecord;

pub use crate::schema::run::{Identity, RunStatus};

pub const SCHEMA: &str = "iteragpu.measure/1";

/// A whole measurement.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MeasureResult {
    pub schema: String,
    pub tool_version: String,
    /// `ok`, `failed` (an exception in a phase, e.g. out of memory), `crashed` (killed by a signal
    /// or an unexpected exit), `timeout`, `interrupted` (Ctrl-C), `terminated` (SIGTERM, SIGHUP).
    pub status: RunStatus,
    /// The signal sent to iteragpu that stopped the run (`SIGINT`, `SIGTERM`, `SIGHUP`), if any.
    #[serde(default)]
    pub stop_signal: Option<String>,
    /// RFC 3339 times at which the CLI started and finished the run.
    pub started_at: String,
    pub ended_at: String,
    pub identity: Identity,
    /// The requested dimensions (the processed shapes are in each phase's `inputs`).
    pub dimensions: Map<String, Value>,
    pub environment: RunEnvironment,
    pub scope: Scope,
    pub policies: Policies,
    /// Phases in the order they ran, including a phase the worker never finished.
    pub phases: Vec<PhaseRecord>,
    /// min/median/max over the `warm_forward` repeats, per device.
    pub warm_summary: Vec<WarmSummary>,
    /// The failing phase, its error and the last values read, when status is not `ok`.
    pub failure: Option<Failure>,
    pub worker: WorkerInfo,
    /// The prediction next to what was observed, per phase.
    #[serde(default)]
    pub predictions: Vec<PhaseCheck>,
    /// The prediction itself (`iteragpu predict` for the measured card, run after the
    /// measurement on the CPU); null with a note when it could not run or was skipped.
    #[serde(default)]
    pub prediction: Option<Box<crate::schema::prediction::PredictionDoc>>,
    /// The cache object's real size next to the estimate's KV term for the same load (causal-lm).
    #[serde(default)]
    pub kv_cache: Vec<CacheCheck>,
    /// The allocator's recording as the worker could start it (null: not asked, `--no-history`).
    #[serde(default)]
    pub history: Option<crate::schema::history::HistoryStatus>,
    /// What PyTorch's out-of-memory observer saw before raising (the largest live blocks with
    /// their frames); at most `history::MAX_OOM_SNAPSHOTS`.
    #[serde(default)]
    pub oom_snapshots: Vec<crate::schema::history::OomSnapshot>,
    /// `--timeline`: the allocator's snapshot written next to the result, and its summary.
    #[serde(default)]
    pub timeline: Option<Timeline>,
    /// Under torchrun (`--nproc-per-node`): every rank of this node, each read on its own device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distributed: Option<Distributed>,
    /// Events of types this CLI does not know, kept verbatim.
    pub unknown_events: Vec<Value>,
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunEnvironment {
    pub python: Option<PythonEnvironment>,
    /// NVML's view at the start of the run; null with `driver_reason` when there is no driver.
    pub driver: Option<DriverView>,
    pub driver_reason: Option<String>,
    /// CUDA device → NVML index used for the driver's view.
    pub nvml_indices: Vec<Option<u32>>,
    /// Mean interval between NVML samples actually achieved, in milliseconds.
    pub nvml_sample_interval_ms: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Scope {
    /// The phases this workload runs, in order.
    pub phases: Vec<String>,
    /// The first pass after device initialisation (cold), as opposed to the warm repeats.
    pub first_pass: String,
    pub devices: Vec<String>,
    /// Under torchrun: the rank whose phases are the result's `phases` (the one with the highest
    /// peak reserved); every rank's are in `distributed.ranks`, never added together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Policies {
    /// Always `fresh` here: one new worker process per run.
    pub process: String,
    pub warmup: u64,
    pub repeats: u64,
    /// `never` or `between-repeats` (torch.cuda.empty_cache() before each warm repeat).
    pub empty_cache: crate::schema::spec::EmptyCache,
    /// `per-phase`: synchronize and reset peaks around every phase; `whole-loop`: one phase.
    pub protocol: String,
    pub timeout_s: Option<u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Stat {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WarmSummary {
    pub device: String,
    pub repeats: u64,
    pub peak_allocated_bytes: Option<Stat>,
    pub peak_reserved_bytes: Option<Stat>,
    pub duration_s: Option<Stat>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Failure {
    pub phase: Option<String>,
    pub error_type: Option<String>,
    pub message: Option<String>,
    pub out_of_memory: bool,
    /// Under torchrun: the rank that failed first (the others were stopped because of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u64>,
    /// PyTorch's out-of-memory message parsed and classified (capacity, fragmentation, another
    /// process), with what to try; null when the message is not an out-of-memory's.
    #[serde(default)]
    pub post_mortem: Option<crate::explain::oom::PostMortem>,
    /// A partial peak before a failure is not the need of a complete run.
    pub caution: String,
}

/// One node's ranks under torchrun. Each rank is its own fresh worker on its own device; its
/// phases are recorded with the same protocol and are never pooled with another rank's.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Distributed {
    /// `torchrun (torch.distributed.run)`, with its options.
    pub launcher: String,
    pub torchrun: crate::schema::torchrun::Torchrun,
    /// `TORCHELASTIC_RUN_ID` as the ranks read it: the files of one job's nodes share it.
    pub run_id: Option<String>,
    pub world_size: u64,
    pub ranks: Vec<RankResult>,
    /// The rank with the highest peak reserved, and the spread between ranks.
    pub highest_peak_rank: Option<u64>,
    pub imbalance: Option<Imbalance>,
    /// torchrun's own exit status and last lines (its summary names each failed rank).
    pub torchrun_exit: String,
}

/// The spread of the ranks' highest peak reserved.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Imbalance {
    pub max_peak_reserved_bytes: u64,
    pub max_rank: u64,
    pub min_peak_reserved_bytes: u64,
    pub min_rank: u64,
    /// max − min.
    pub spread_bytes: u64,
}

/// One rank: who it is, where it ran, how it ended, and its phases.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RankResult {
    pub rank: u64,
    pub local_rank: u64,
    pub node_rank: u64,
    pub host: String,
    pub device: String,
    pub pid: Option<u32>,
    pub status: RunStatus,
    /// Why a rank that did not fail itself ended (torchrun stops every rank when one fails).
    pub stopped_because: Option<String>,
    pub phases: Vec<PhaseRecord>,
    pub failure: Option<Failure>,
    #[serde(default)]
    pub oom_snapshots: Vec<crate::schema::history::OomSnapshot>,
    pub notes: Vec<String>,
}

impl RankResult {
    fn readings(&self) -> impl Iterator<Item = &crate::schema::events::DeviceReading> {
        self.phases.iter().flat_map(|p| p.devices.iter())
    }

    /// The rank's highest peak allocated over its phases.
    pub fn peak_allocated(&self) -> Option<u64> {
        self.readings().filter_map(|d| d.peak_allocated_bytes).max()
    }

    /// The rank's highest peak reserved over its phases.
    pub fn peak_reserved(&self) -> Option<u64> {
        self.readings().filter_map(|d| d.peak_reserved_bytes).max()
    }

    /// The most memory its process held outside PyTorch's allocator at a phase's end (NVML).
    pub fn outside_allocator(&self) -> Option<u64> {
        self.phases
            .iter()
            .flat_map(|p| p.driver.iter().flatten())
            .filter_map(|x| x.outside_allocator_at_end_bytes)
            .max()
    }
}

/// `measure --timeline`: PyTorch's allocator snapshot (a pickle memory_viz opens) next to the
/// result, with the CLI's summary of it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Timeline {
    /// Where the snapshot is; null with `reason` when none was written.
    pub path: Option<std::path::PathBuf>,
    pub reason: Option<String>,
    pub bytes: Option<u64>,
    pub sha256: Option<String>,
    /// Per phase: the largest allocations alive at its peak with their frames, the segments, the
    /// largest free block, and allocated/reserved over time.
    pub summary: Option<crate::explain::snapshot::SnapshotSummary>,
    /// Why there is no summary (the snapshot could not be read).
    #[serde(default)]
    pub summary_reason: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerInfo {
    pub pid: Option<u32>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub stderr_tail: Vec<String>,
}

/// The phase whose peak matters, as the fiche's verdict and the gap ledger both read it.
#[derive(Clone, Copy, Debug)]
pub struct PeakPhase<'a> {
    /// Its position in `phases` (repeated names are told apart by it).
    pub position: usize,
    pub phase: &'a PhaseRecord,
    /// Its first device's peak reserved.
    pub reserved_bytes: u64,
}

impl MeasureResult {
    /// Among completed phases, the highest peak reserved of the first device, the first to reach
    /// it on a tie (the cache keeps what it reserved, so every later phase shows the same peak
    /// without having caused it). A failed phase's partial peak is never the need.
    pub fn peak_phase(&self) -> Option<PeakPhase<'_>> {
        self.phases
            .iter()
            .enumerate()
            .filter(|(_, p)| p.status.is_ok())
            .filter_map(|(position, phase)| {
                Some(PeakPhase {
                    position,
                    phase,
                    reserved_bytes: phase.devices.first()?.peak_reserved_bytes?,
                })
            })
            .max_by_key(|p| (p.reserved_bytes, std::cmp::Reverse(p.position)))
    }

    /// The driver's highest reading of the process (NVML) over completed phases; `None` without
    /// a driver's view.
    pub fn driver_peak(&self) -> Option<u64> {
        self.phases
            .iter()
            .filter(|p| p.status.is_ok())
            .flat_map(|p| p.driver.iter().flatten())
            .filter_map(|d| d.peak_process_used_bytes)
            .max()
    }

    /// The highest peak reserved over phases and devices.
    pub fn max_peak_reserved(&self) -> Option<u64> {
        self.readings().filter_map(|d| d.peak_reserved_bytes).max()
    }

    /// The highest peak allocated over phases and devices.
    pub fn max_peak_allocated(&self) -> Option<u64> {
        self.readings().filter_map(|d| d.peak_allocated_bytes).max()
    }

    /// The most memory the process held outside PyTorch's allocator (CUDA context, libraries),
    /// as NVML saw it at the end of a phase; `None` without a driver's view.
    pub fn max_outside_allocator(&self) -> Option<u64> {
        self.phases
            .iter()
            .flat_map(|p| p.driver.iter().flatten())
            .filter_map(|d| d.outside_allocator_at_end_bytes)
            .max()
    }

    fn readings(&self) -> impl Iterator<Item = &crate::schema::events::DeviceReading> {
        self.phases.iter().flat_map(|p| p.devices.iter())
    }
}

/// min/median/max of values (median of an even count is the mean of the two middle values).
pub fn stat(mut values: Vec<f64>) -> Option<Stat> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let median = if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    };
    Some(Stat {
        min: values[0],
        median,
        max: values[n - 1],
    })
}

/// Summaries of the `warm_forward` phases per device.
pub fn warm_summary(phases: &[PhaseRecord], devices: &[String]) -> Vec<WarmSummary> {
    let warm: Vec<&PhaseRecord> = phases
        .iter()
        .filter(|p| p.name == "warm_forward" && p.status.is_ok())
        .collect();
    if warm.is_empty() {
        return Vec::new();
    }
    devices
        .iter()
        .enumerate()
        .map(|(i, device)| {
            let pick = |f: fn(&crate::schema::events::DeviceReading) -> Option<u64>| {
                stat(
                    warm.iter()
                        .filter_map(|p| p.devices.get(i).and_then(f))
                        .map(|v| v as f64)
                        .collect(),
                )
            };
            WarmSummary {
                device: device.clone(),
                repeats: warm.len() as u64,
                peak_allocated_bytes: pick(|d| d.peak_allocated_bytes),
                peak_reserved_bytes: pick(|d| d.peak_reserved_bytes),
                duration_s: stat(warm.iter().filter_map(|p| p.duration_s).collect()),
            }
        })
        .collect()
}

/// Predicted vs observed for one phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseCheck {
    pub phase: String,
    pub index: u64,
    pub predicted_peak_allocated_bytes: u64,
    pub observed_peak_allocated_bytes: Option<u64>,
    /// (observed − predicted) ÷ observed × 100.
    pub error_allocated_pct: Option<f64>,
    pub predicted_peak_reserved_bytes: u64,
    pub observed_peak_reserved_bytes: Option<u64>,
    pub error_reserved_pct: Option<f64>,
    pub basis: String,
    /// A bounded predicted phase (its sizes depend on data the prediction did not know): the
    /// predicted figures above are its upper bound, these its lower; the observed peak should
    /// lie between them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_lower_peak_allocated_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_lower_peak_reserved_bytes: Option<u64>,
}

/// Observed KV-cache bytes next to the estimate for the same load.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CacheCheck {
    pub phase: String,
    pub index: u64,
    pub tokens: u64,
    pub estimated_bytes: u64,
    /// Sum of the storage of every tensor the cache object holds (each storage counted once).
    pub observed_bytes: Option<u64>,
    /// observed − estimated.
    pub difference_bytes: Option<i64>,
    /// (observed − estimated) ÷ estimated × 100.
    pub difference_pct: Option<f64>,
    pub basis: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A status is named once: the file's word is the derived text.
    #[test]
    fn status_names_are_the_files_words() {
        for s in <RunStatus as strum::VariantArray>::VARIANTS {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_ref());
            assert_eq!(s.to_string(), s.as_ref());
        }
    }

    #[test]
    fn stats() {
        let s = stat(vec![3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.min, s.median, s.max), (1.0, 2.0, 3.0));
        assert_eq!(stat(vec![1.0, 2.0, 3.0, 10.0]).unwrap().median, 2.5);
        assert!(stat(vec![]).is_none());
    }
}
