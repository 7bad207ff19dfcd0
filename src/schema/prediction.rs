//! The prediction file (`"schema": "iteragpu.prediction/1"`): every phase's predicted peaks, what
//! was alive at each peak, and every assumption the figures rest on. A prediction is never a
//! measurement: the file says so in `kind`, and a phase that depends on data is `unpredictable`
//! with `null` figures, never a guessed number.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

use crate::schema::target::Target;
use crate::schema::trace::Unpredictable;

pub const SCHEMA: &str = "iteragpu.prediction/1";

/// How a predicted phase ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::Display, strum::AsRefStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum PhaseStatus {
    Predicted,
    /// An op in it (or before it, whose outputs it holds) has an output size that depends on the
    /// data, within bounds its inputs' shapes give: its figures are those at the largest outputs
    /// (what a verdict reads), `lower` those at the smallest.
    Bounded,
    /// Something in it depends on data with no bound known (or an op has no fake
    /// implementation): no figure.
    Unpredictable,
    /// The workload raised an exception in it (other than an unpredictable op).
    Failed,
    /// The simulated card's memory ran out in it (`out_of_memory` says where); its figures stop
    /// before the allocation that did not fit.
    OutOfMemory,
    /// It would start after the out-of-memory: never reached on the card, no figure.
    NotReached,
}

impl PhaseStatus {
    /// Predicted or bounded: a phase whose figures a verdict reads (a bounded one's are those at
    /// the largest data-dependent sizes: they hold whatever the data).
    pub fn has_figures(self) -> bool {
        matches!(self, PhaseStatus::Predicted | PhaseStatus::Bounded)
    }
}

/// How a whole prediction ended. `timeout`, `interrupted` and `terminated` are `measure`'s words
/// (`RunStatus`) for a prediction stopped before the workload ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::Display, strum::AsRefStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum PredictionStatus {
    /// Every phase predicted.
    Complete,
    /// Some phase unpredictable or failed, or no phase at all, or a stop where the prediction
    /// could not follow the workload.
    Partial,
    /// The workload raised before its end (or the worker died).
    Failed,
    /// Stopped by the CLI after `--timeout`.
    Timeout,
    /// Stopped by SIGINT.
    Interrupted,
    /// Stopped by SIGTERM or SIGHUP.
    Terminated,
    /// The workload is predicted to run out of the card's memory (`out_of_memory` says where);
    /// the phases after it are `not_reached`. A result, not a failure of the prediction.
    OutOfMemory,
}

impl PredictionStatus {
    /// Stopped before the workload ended: `timeout`, `interrupted`, `terminated`.
    pub fn stopped(self) -> bool {
        matches!(
            self,
            PredictionStatus::Timeout
                | PredictionStatus::Interrupted
                | PredictionStatus::Terminated
        )
    }
}

/// What a prediction file is: always a prediction, never a measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::Display, strum::AsRefStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum DocumentKind {
    Prediction,
}

/// A whole prediction.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PredictionDoc {
    pub schema: String,
    pub tool_version: String,
    /// Always `prediction`: nothing here was measured on a GPU.
    pub kind: DocumentKind,
    /// `complete` (every phase predicted), `partial` (some unpredictable or failed, or no phase
    /// at all), `failed` (the workload raised before its end), or, when the prediction was
    /// stopped before the workload ended, `timeout`, `interrupted` (SIGINT) or `terminated`
    /// (SIGTERM, SIGHUP) — `measure`'s words (`RunStatus`); the phases are then those predicted
    /// until it stopped.
    pub status: PredictionStatus,
    pub created_at: String,
    pub identity: crate::schema::run::Identity,
    pub dimensions: Map<String, Value>,
    pub target: Target,
    /// The worker's specification as run (rerunnable: `python -m iteragpu.worker SPEC.json`).
    pub spec: crate::schema::spec::WorkerSpec,
    pub assumptions: Assumptions,
    pub phases: Vec<PredictedPhase>,
    /// The memory the simulated card gives PyTorch's allocator; null in files written before
    /// predictions applied a capacity (their phases were simulated as if memory were unlimited).
    #[serde(default)]
    pub capacity: Option<Capacity>,
    /// The first allocation the simulated card could not serve; null when every allocation fit.
    #[serde(default)]
    pub out_of_memory: Option<PredictedOom>,
    /// The workload's error, or why the prediction stopped (the timeout, a signal); ` (at
    /// FILE:LINE)` ends it when the traceback names a frame (`failure_detail.frame`).
    pub failure: Option<String>,
    /// The workload's exception: type, message, the innermost frame of the user's code and the
    /// traceback's last lines; null when it did not raise (or was stopped).
    #[serde(default)]
    pub failure_detail: Option<crate::schema::failure::FailureDetail>,
    /// `--like FILE`: the prediction's torch, transformers, peft and CUDA next to those of a
    /// measurement or an environment report of the GPU machine; null without `--like`.
    #[serde(default)]
    pub like: Option<crate::schema::versions::Like>,
    /// The Hub repositories the predicted code reached (`from_pretrained("ORG/NAME")`,
    /// `snapshot_download`, `hf_hub_download`), served by the tool's Hub client without their
    /// weights (`model::hub::overlay`); empty when it reached none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hub: Vec<crate::model::hub::overlay::HubServed>,
    /// The quantized weights the replay saw dequantized to the compute dtype (bitsandbytes'
    /// `dequantize_4bit`): what the estimate assumes, seen. Absent when there were none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dequantized: Option<DequantizedSeen>,
    pub notes: Vec<String>,
}

/// The card's memory as a prediction applies it: PyTorch's allocator may reserve
/// `allocator_bytes`, the device's memory less what the process holds outside the allocator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capacity {
    /// The device's memory the process may use: the card's `total_memory`, or `--memory-limit`.
    pub device_bytes: u64,
    /// Where `device_bytes` comes from (`--card NAME (…)`, `--memory-limit SIZE`).
    pub source: String,
    /// `device_bytes` − `target.context_bytes` (CUDA context, libraries): what the allocator may
    /// reserve before a request fails.
    pub allocator_bytes: u64,
    /// `--memory-limit`: applied as `sweep --memory-limit` applies it on a card, a memory
    /// fraction of `allocator_bytes` (PyTorch's message then says `allowed`).
    pub memory_fraction: bool,
}

/// The first allocation the simulated card could not serve, even after PyTorch's allocator
/// released its cached segments (as it does before raising): a predicted out-of-memory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PredictedOom {
    /// The innermost phase open at the allocation, and its index.
    pub phase: Option<String>,
    pub phase_index: Option<u64>,
    /// The storage's bytes as the program asked for them.
    pub requested_bytes: u64,
    /// What the allocator had to reserve for it (a new segment; PyTorch's `Tried to allocate`).
    pub segment_bytes: u64,
    /// The storage's role (the last one it showed) and the module that created it.
    pub category: crate::schema::trace::Category,
    pub module: Option<String>,
    pub shape: Vec<u64>,
    pub dtype: String,
    /// The line of the user's own code that asked for it (outside torch and the libraries);
    /// null when the worker did not say (older workers).
    pub file: Option<String>,
    pub line: Option<u64>,
    /// PyTorch's allocated and reserved memory when it gave up (after releasing its cache).
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
    /// Reserved but unallocated: free pieces of segments that also hold live blocks.
    pub reserved_unallocated_bytes: u64,
    /// Cached segments released before giving up.
    pub released_bytes: u64,
    /// The device's memory still free: `capacity.device_bytes` − the context − reserved.
    pub free_bytes: u64,
    /// What was alive when it gave up.
    pub alive: AtPeak,
    /// The highest predicted peak reserved, and driver's view, with unlimited memory (the same
    /// events replayed without the capacity): what a card that holds the whole workload needs;
    /// null when no phase could be predicted.
    pub unlimited_peak_reserved_bytes: Option<u64>,
    pub unlimited_driver_view_bytes: Option<u64>,
    /// The same post-mortem as a measured out-of-memory's (`failure.post_mortem` of a
    /// measurement): the figures PyTorch's message would print, from the replayed allocator, and
    /// their class (capacity or fragmentation).
    pub post_mortem: crate::explain::oom::PostMortem,
}

/// What the figures rest on besides the tensors.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Assumptions {
    pub torch_version: Option<String>,
    pub transformers_version: Option<String>,
    #[serde(default)]
    pub peft_version: Option<String>,
    /// The CUDA version PyTorch was built with (`torch.version.cuda`), or `hip X` for a ROCm
    /// build; null for a CPU-only build.
    #[serde(default)]
    pub cuda_version: Option<String>,
    /// How reserved memory is modelled.
    pub allocator_model: String,
    /// Values read from data answered with placeholders (`.item()` of a loss, a flag…).
    pub placeholder_reads: Vec<PlaceholderRead>,
    /// What no tensor shows and is not modelled (attention kernels' internal workspaces…).
    pub not_modelled: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlaceholderRead {
    pub file: Option<String>,
    pub line: Option<u64>,
    pub count: u64,
    /// The placeholder answer: 1 (or 1.0) for numbers, never 0 (no division by zero, no empty
    /// structure), False for conditions (nothing stops early: the longest case).
    pub answer: String,
}

/// One phase as predicted. Phases nest (`parent`); each one's figures cover its whole span, its
/// inner phases included. A failed phase (or one that never ended) has the figures reached until
/// it stopped; an unpredictable one has none.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PredictedPhase {
    pub name: String,
    pub index: u64,
    /// The index of the phase this one ran inside; null at the top level.
    #[serde(default)]
    pub parent: Option<u64>,
    /// Made by the tool (around a workload that marks no phase), not by a user's marker.
    #[serde(default)]
    pub automatic: bool,
    pub status: PhaseStatus,
    #[serde(default)]
    pub inputs: Map<String, Value>,
    pub start_allocated_bytes: Option<u64>,
    pub start_reserved_bytes: Option<u64>,
    pub peak_allocated_bytes: Option<u64>,
    pub peak_reserved_bytes: Option<u64>,
    /// The highest sum of live tensor storages (each rounded to 512 bytes, workspaces left out):
    /// what tensor-level trackers such as PyTorch's MemTracker report.
    pub peak_tensor_bytes: Option<u64>,
    pub end_allocated_bytes: Option<u64>,
    pub end_reserved_bytes: Option<u64>,
    /// Peak reserved + the memory outside PyTorch's allocator (`target.context_bytes`).
    pub driver_view_bytes: Option<u64>,
    /// The highest memory outside PyTorch's caching allocator the workload itself made, live in
    /// the phase: CUDA unified memory (`cudaMallocManaged`), bitsandbytes' paged optimizer
    /// states. Not in the allocated, reserved or driver's-view figures, nor in the capacity
    /// check: the driver keeps its pages on the GPU while there is room and moves them to the
    /// host under pressure. Absent when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_managed_bytes: Option<u64>,
    /// What was alive at the peak allocated.
    pub at_peak: Option<AtPeak>,
    pub unpredictable: Vec<Unpredictable>,
    /// A `bounded` phase's figures at the smallest outputs (the same workload predicted again,
    /// each data-dependent op at its lower bound); null otherwise, or when that run did not reach
    /// the phase (a note says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lower: Option<LowerFigures>,
    /// A `bounded` phase's figures at a published typical size of its data-dependent outputs,
    /// between `lower` and the upper figures: *assumed*, never predicted (`basis` says the
    /// source and how it was computed). Only where a typical size is published (LLM.int8's
    /// outlier columns); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assumed: Option<AssumedFigures>,
}

/// A bounded phase's figures at the lower bound.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LowerFigures {
    pub peak_allocated_bytes: Option<u64>,
    pub peak_reserved_bytes: Option<u64>,
    pub end_allocated_bytes: Option<u64>,
    pub end_reserved_bytes: Option<u64>,
    pub driver_view_bytes: Option<u64>,
}

/// The dequantized weights a prediction saw: the largest one and how many were made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DequantizedSeen {
    pub largest_bytes: u64,
    pub count: u64,
}

/// A bounded phase's peaks at an assumed, published typical size of its data-dependent outputs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AssumedFigures {
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// The share of the largest data-dependent size assumed (0.001: 0.1% of the columns).
    pub fraction: f64,
    /// Where the share comes from and how the figures were computed.
    pub basis: String,
}

/// The live storages at a peak, summed by category and by module, and the largest of them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AtPeak {
    /// Bytes as the allocator counts them (rounded to 512) by category; `allocator rounding`
    /// holds what blocks handed out beyond that (a large block is not split for ≤ 1 MiB).
    pub by_category: BTreeMap<String, u64>,
    /// The 10 modules that created the most bytes alive at the peak.
    pub top_modules: Vec<ModuleBytes>,
    /// The 10 largest storages alive at the peak.
    pub top_tensors: Vec<TensorAtPeak>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModuleBytes {
    pub module: String,
    pub bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorAtPeak {
    pub bytes: u64,
    pub shape: Vec<u64>,
    pub dtype: String,
    pub category: String,
    pub module: Option<String>,
}

impl PredictionDoc {
    /// The highest predicted peak reserved over the predicted phases (a failed phase's figures
    /// stop where it failed: they are not its peak).
    pub fn max_peak_reserved(&self) -> Option<u64> {
        self.predicted().filter_map(|p| p.peak_reserved_bytes).max()
    }

    /// Among predicted phases, the highest peak allocated, the first to reach it on a tie: the
    /// phase whose live tensors make the run's need. Not the highest peak reserved, as for a
    /// measurement (`MeasureResult::peak_phase`), which reads no categories: the cache keeps
    /// what it reserved, so a later phase that adds one small segment (an optimizer step after
    /// the backward pass) tops the reserved peak by a few MiB while holding a fraction of the
    /// tensors, and the categories the prediction records at that phase's peak would explain
    /// nothing. Its position in `phases` comes with it.
    pub fn peak_phase(&self) -> Option<(usize, &PredictedPhase)> {
        self.phases
            .iter()
            .enumerate()
            .filter(|(_, p)| p.status.has_figures())
            .filter_map(|(k, p)| Some((k, p, p.peak_allocated_bytes?)))
            .max_by_key(|(k, _, allocated)| (*allocated, std::cmp::Reverse(*k)))
            .map(|(k, p, _)| (k, p))
    }

    /// The highest predicted driver's view over the predicted phases.
    pub fn max_driver_view(&self) -> Option<u64> {
        self.predicted().filter_map(|p| p.driver_view_bytes).max()
    }

    /// The predicted phase of the highest driver's view: the one the fit is judged on (the first
    /// of equals).
    pub fn driver_view_phase(&self) -> Option<&PredictedPhase> {
        let top = self.max_driver_view()?;
        self.predicted().find(|p| p.driver_view_bytes == Some(top))
    }

    fn predicted(&self) -> impl Iterator<Item = &PredictedPhase> {
        self.phases.iter().filter(|p| p.status.has_figures())
    }

    /// Stopped before the workload ended (`timeout`, `interrupted`, `terminated`): the phases are
    /// what was predicted until then, not the workload's prediction.
    pub fn stopped(&self) -> bool {
        self.status.stopped()
    }

    /// How deep a phase is nested (0 at the top level), following `parent` through the phases
    /// of this file.
    pub fn depth(&self, phase: &PredictedPhase) -> usize {
        let mut depth = 0;
        let mut parent = phase.parent;
        while let Some(index) = parent {
            // A parent that is not in the file (or a cycle) ends the walk.
            let Some(p) = self.phases.iter().find(|p| p.index == index) else {
                break;
            };
            depth += 1;
            if depth > self.phases.len() {
                break;
            }
            parent = p.parent;
        }
        depth
    }
}

/// The versions a prediction was made with, as `--like` compares them.
impl Assumptions {
    pub fn versions(&self) -> crate::schema::versions::Versions {
        crate::schema::versions::Versions {
            torch: self.torch_version.clone(),
            transformers: self.transformers_version.clone(),
            peft: self.peft_version.clone(),
            cuda: self.cuda_version.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::VariantArray;

    /// Statuses, the kind and the storage categories are named once: the file's word is the
    /// derived text.
    #[test]
    fn names_are_the_files_words() {
        fn check<T: Serialize + AsRef<str> + std::fmt::Display>(v: &T) {
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_ref());
            assert_eq!(v.to_string(), v.as_ref());
        }
        PhaseStatus::VARIANTS.iter().for_each(check);
        PredictionStatus::VARIANTS.iter().for_each(check);
        DocumentKind::VARIANTS.iter().for_each(check);
        super::super::trace::Category::VARIANTS
            .iter()
            .for_each(check);
        assert_eq!(
            super::super::trace::Category::KvCache.to_string(),
            "kv cache"
        );
    }
}
