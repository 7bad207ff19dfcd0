//! The gap ledger: from the estimate to the driver's view and the card's capacity, term by term,
//! for the phase whose peak is the highest. Each figure says where it comes from (calculated or
//! assumed by the estimate, predicted, observed) and the checkpoint it was read at; what no term
//! explains is its own `unexplained` line, never spread over the others. The reading rules hold:
//! reserved − allocated only from one checkpoint (never peak − peak); the growth inside a phase
//! is not called the volume of its temporaries (it is what was alive at the peak beyond the
//! start); a partial peak before a failure is not a need.

use serde::{Deserialize, Serialize};

use crate::estimate::{Kind, TermId};
use crate::schema::load::{EstimateDoc, EstimateTerm};
use crate::schema::measure::MeasureResult;
use crate::schema::prediction::{PredictedPhase, PredictionDoc};

mod diagnostic;
mod prediction_alone;
pub mod render;

pub use diagnostic::{Diagnostic, diagnostics};
pub use prediction_alone::of_prediction;

pub const SCHEMA: &str = "iteragpu.explain/1";

/// Where a figure comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provenance {
    /// Exact arithmetic on the inputs (the estimate).
    Calculated,
    /// A model or a stated choice.
    Assumed,
    /// `iteragpu predict` (the workload's code on data-less tensors).
    Predicted,
    /// Read on the GPU by PyTorch or the driver.
    Observed,
}

/// One number of the ledger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figure {
    pub bytes: u64,
    pub provenance: Provenance,
    /// How it was obtained, in words.
    pub basis: String,
}

/// What a line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LineKind {
    /// A part of the peak allocated: weights, what the phase started with, its growth.
    Term,
    /// Inside one of the terms, shown apart (the KV cache, library workspaces): not added again.
    Part,
    /// A level read at a checkpoint (the peak allocated, the peak reserved, the driver's view).
    Level,
    /// What no term explains.
    Unexplained,
}

/// Which line of the ledger, in the order they are listed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LineId {
    /// The weights as loaded (the end of `model_load`).
    Weights,
    KvCache,
    /// Held at the phase's start beyond the weights.
    HeldAtStart,
    /// The growth inside the phase to its peak.
    Growth,
    /// A prediction's gradients alive at its peak.
    Gradients,
    /// A prediction's optimizer states alive at its peak.
    OptimizerStates,
    /// A prediction's activations and temporaries alive at its peak.
    Activations,
    /// A prediction's other storages alive at its peak (inputs, collectives' buffers, rounding).
    OtherTensors,
    /// Library workspaces at the predicted peak.
    Workspaces,
    PeakAllocated,
    PeakReserved,
    AllocatorSlack,
    /// Outside PyTorch's allocator (CUDA context, libraries).
    OutsideAllocator,
    /// The estimate's stated reserve.
    Reserve,
    DriverView,
    Unexplained,
}

impl LineId {
    /// The line's English name (`term` in the file).
    pub fn english(self) -> &'static str {
        match self {
            LineId::Weights => "weights (as loaded)",
            LineId::KvCache => "KV cache (inside the levels below, shown apart)",
            LineId::HeldAtStart => "held at the phase's start beyond the weights",
            LineId::Growth => "growth inside the phase to its peak",
            LineId::Gradients => "gradients (alive at the predicted peak)",
            LineId::OptimizerStates => "optimizer states (alive at the predicted peak)",
            LineId::Activations => "activations and temporaries (alive at the predicted peak)",
            LineId::OtherTensors => "inputs and other storages (alive at the predicted peak)",
            LineId::Workspaces => "of which library workspaces (no tensor holds them)",
            LineId::PeakAllocated => "peak allocated",
            LineId::PeakReserved => "peak reserved",
            LineId::AllocatorSlack => "allocator slack (reserved − allocated)",
            LineId::OutsideAllocator => "outside PyTorch's allocator (CUDA context, libraries)",
            LineId::Reserve => "the estimate's reserve (a stated margin)",
            LineId::DriverView => "the driver's view",
            LineId::Unexplained => "unexplained: driver's view − (peak reserved + outside)",
        }
    }

    /// The line's English name when its figures are read at a prediction's out-of-memory (what
    /// was alive at the allocation that did not fit, not at a peak).
    pub fn english_at_oom(self) -> &'static str {
        match self {
            LineId::Gradients => "gradients (alive at the predicted out-of-memory)",
            LineId::OptimizerStates => "optimizer states (alive at the predicted out-of-memory)",
            LineId::Activations => {
                "activations and temporaries (alive at the predicted out-of-memory)"
            }
            LineId::OtherTensors => {
                "inputs and other storages (alive at the predicted out-of-memory)"
            }
            LineId::Weights => "weights (alive at the predicted out-of-memory)",
            LineId::PeakAllocated => "allocated when the allocation failed",
            LineId::PeakReserved => "reserved when the allocation failed",
            LineId::AllocatorSlack => "reserved but unallocated (reserved − allocated)",
            LineId::DriverView => "the driver's view when the allocation failed",
            _ => self.english(),
        }
    }

    pub fn kind(self) -> LineKind {
        match self {
            LineId::KvCache | LineId::Workspaces => LineKind::Part,
            LineId::PeakAllocated | LineId::PeakReserved | LineId::DriverView => LineKind::Level,
            LineId::Unexplained => LineKind::Unexplained,
            _ => LineKind::Term,
        }
    }

    /// The ledger line an estimate term is compared on; `None`: on none (transients the ledger
    /// does not place, NCCL, lines shown for information).
    pub fn of_term(id: &TermId) -> Option<LineId> {
        match id {
            TermId::Weights { .. }
            | TermId::QuantizedWeights { .. }
            | TermId::UnquantizedWeights { .. }
            | TermId::ComputeCopies
            | TermId::StoredWeights
            | TermId::AllocatorSegments
            | TermId::GatheredLargestModule { .. }
            | TermId::FsdpRootGroup { .. }
            | TermId::FsdpGatheredBlocks { .. } => Some(LineId::Weights),
            TermId::KvCache { .. }
            | TermId::PagedKvCache { .. }
            | TermId::KvCacheHost
            | TermId::KvPrefillSurplus
            | TermId::KvDecompressed => Some(LineId::KvCache),
            TermId::Gradients { .. }
            | TermId::DdpBuckets { .. }
            | TermId::Fp32GradientPartition
            | TermId::FsdpBlockGradients { .. }
            | TermId::FsdpReduceScatterInputs { .. }
            | TermId::OptimizerStates { .. }
            | TermId::MasterWeights { .. }
            | TermId::LoraAdapters { .. } => Some(LineId::HeldAtStart),
            TermId::Activations
            | TermId::LogitsAndLoss
            | TermId::PrefillTransient
            | TermId::ImageInputs
            | TermId::ForwardTransient
            | TermId::AttentionScores { .. }
            | TermId::ServeActivationPeak
            | TermId::OptimizerStepTemporaries { .. } => Some(LineId::Growth),
            TermId::Reserve => Some(LineId::Reserve),
            TermId::DequantizedWeight { .. }
            | TermId::NcclBuffers
            | TermId::NonTorchMemory
            | TermId::CudaGraphs
            | TermId::HostOffloadedStates
            | TermId::DeepspeedGpu
            | TermId::DeepspeedHost
            | TermId::ZeroPaper { .. }
            | TermId::Other => None,
        }
    }
}

impl LineId {
    /// The line of a prediction's ledger (one line per storage category) an estimate term is
    /// compared on: `of_term`, with what a measurement can only see as held at a phase's start
    /// or grown inside it split into the categories a prediction names.
    pub fn of_term_by_category(id: &TermId) -> Option<LineId> {
        match id {
            TermId::Gradients { .. }
            | TermId::DdpBuckets { .. }
            | TermId::Fp32GradientPartition
            | TermId::FsdpBlockGradients { .. }
            | TermId::FsdpReduceScatterInputs { .. } => Some(LineId::Gradients),
            TermId::OptimizerStates { .. } | TermId::MasterWeights { .. } => {
                Some(LineId::OptimizerStates)
            }
            // The adapters are parameters: their gradients and states are in the terms above.
            TermId::LoraAdapters { .. } => Some(LineId::Weights),
            // The prediction's `temporary` storages are on the activations' line too.
            TermId::Activations
            | TermId::LogitsAndLoss
            | TermId::PrefillTransient
            | TermId::ImageInputs
            | TermId::ForwardTransient
            | TermId::AttentionScores { .. }
            | TermId::OptimizerStepTemporaries { .. } => Some(LineId::Activations),
            other => LineId::of_term(other),
        }
    }
}

type MakeCheckpoint = fn(String) -> Checkpoint;

/// Where a line's figures were read; the phase is named as the result names it. Written in the
/// file as English words (`end of model_load`, `peak of forward − its start`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Checkpoint {
    Start(String),
    End(String),
    Peak(String),
    /// The peak less the phase's start.
    PeakMinusStart(String),
    PredictedPeak(String),
    /// When a prediction's allocation did not fit the simulated card, in this phase.
    PredictedOom(String),
    /// Reserved and allocated both read at the phase's end.
    EndOneCheckpoint(String),
    /// NVML's sampled peak.
    PeakSampled(String),
    /// A stated figure, read nowhere.
    Stated,
}

impl Checkpoint {
    /// The phase it was read in (`None` for a stated figure).
    pub fn phase(&self) -> Option<&str> {
        match self {
            Checkpoint::Start(p)
            | Checkpoint::End(p)
            | Checkpoint::Peak(p)
            | Checkpoint::PeakMinusStart(p)
            | Checkpoint::PredictedPeak(p)
            | Checkpoint::PredictedOom(p)
            | Checkpoint::EndOneCheckpoint(p)
            | Checkpoint::PeakSampled(p) => Some(p),
            Checkpoint::Stated => None,
        }
    }

    /// The forms of the English words, `PREFIX phase SUFFIX`, the longer ones first.
    const FORMS: [(&str, &str, MakeCheckpoint); 8] = [
        ("predicted peak of ", "", Checkpoint::PredictedPeak),
        ("predicted out of memory in ", "", Checkpoint::PredictedOom),
        ("peak of ", " − its start", Checkpoint::PeakMinusStart),
        ("peak of ", " (sampled)", Checkpoint::PeakSampled),
        ("end of ", " (one checkpoint)", Checkpoint::EndOneCheckpoint),
        ("peak of ", "", Checkpoint::Peak),
        ("end of ", "", Checkpoint::End),
        ("start of ", "", Checkpoint::Start),
    ];
}

impl std::fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some(phase) = self.phase() else {
            return f.write_str("stated");
        };
        let (prefix, suffix, _) = Checkpoint::FORMS
            .iter()
            .find(|(_, _, make)| make(phase.to_string()) == *self)
            .expect("every checkpoint with a phase has a form");
        write!(f, "{prefix}{phase}{suffix}")
    }
}

impl From<Checkpoint> for String {
    fn from(c: Checkpoint) -> String {
        c.to_string()
    }
}

impl TryFrom<String> for Checkpoint {
    type Error = String;
    fn try_from(text: String) -> Result<Checkpoint, String> {
        if text == "stated" {
            return Ok(Checkpoint::Stated);
        }
        Checkpoint::FORMS
            .iter()
            .find_map(|(prefix, suffix, make)| {
                let phase = text.strip_prefix(prefix)?.strip_suffix(suffix)?;
                Some(make(phase.to_string()))
            })
            .ok_or_else(|| format!("`{text}` is not a checkpoint"))
    }
}

/// One line: the same term as the estimate states it, as predicted, as observed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Line {
    pub id: LineId,
    /// The line's English name, from `id`.
    pub term: String,
    pub kind: LineKind,
    pub estimate: Option<Figure>,
    pub predicted: Option<Figure>,
    pub observed: Option<Figure>,
    /// Where the figures were read (`end of model_load`, `peak of forward − its start`).
    pub checkpoint: Checkpoint,
    /// Predicted parts of the term (by category, then by module), when a prediction has them.
    #[serde(default)]
    pub breakdown: Vec<(String, u64)>,
}

impl Line {
    /// A line without figures, read at `checkpoint`.
    fn new(id: LineId, checkpoint: Checkpoint) -> Line {
        Line {
            id,
            term: id.english().into(),
            kind: id.kind(),
            estimate: None,
            predicted: None,
            observed: None,
            checkpoint,
            breakdown: Vec::new(),
        }
    }
}

/// A capacity of the card, named for what it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capacity {
    pub name: CapacityName,
    pub bytes: u64,
    pub source: String,
}

/// Which of the card's capacities a figure is, written in the file as English words
/// (`PyTorch's total_memory`, `NVML's total`, `the vendor's label (141 GB HBM3e)`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum CapacityName {
    /// `torch.cuda.get_device_properties().total_memory`.
    TorchTotalMemory,
    /// `nvmlDeviceGetMemoryInfo().total`.
    NvmlTotal,
    /// The catalog card's label, in the vendor's (decimal) gigabytes.
    VendorLabel(String),
}

impl CapacityName {
    const TORCH: &str = "PyTorch's total_memory";
    const NVML: &str = "NVML's total";
    const VENDOR: (&str, &str) = ("the vendor's label (", ")");
}

impl std::fmt::Display for CapacityName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CapacityName::TorchTotalMemory => f.pad(CapacityName::TORCH),
            CapacityName::NvmlTotal => f.pad(CapacityName::NVML),
            CapacityName::VendorLabel(label) => {
                let (open, close) = CapacityName::VENDOR;
                f.pad(&format!("{open}{label}{close}"))
            }
        }
    }
}

impl From<CapacityName> for String {
    fn from(c: CapacityName) -> String {
        c.to_string()
    }
}

impl TryFrom<String> for CapacityName {
    type Error = String;
    fn try_from(text: String) -> Result<CapacityName, String> {
        let (open, close) = CapacityName::VENDOR;
        match text.as_str() {
            CapacityName::TORCH => Ok(CapacityName::TorchTotalMemory),
            CapacityName::NVML => Ok(CapacityName::NvmlTotal),
            other => other
                .strip_prefix(open)
                .and_then(|rest| rest.strip_suffix(close))
                .map(|label| CapacityName::VendorLabel(label.to_string()))
                .ok_or_else(|| format!("`{text}` is not a capacity of the card")),
        }
    }
}

/// What a ledger explains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Explained {
    /// A measurement, with its estimate and prediction beside it.
    Measurement,
    /// A prediction alone: every figure predicted, none observed.
    Prediction,
}

/// The moment a ledger's lines are read at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BuiltOn {
    /// The explained phase's highest peak (measured, or predicted).
    Peak,
    /// A prediction that ran out of the simulated card's memory: what was alive at the
    /// allocation that did not fit. That moment explains the failure; the peaks of the phases
    /// that ran before it do not.
    OutOfMemory,
}

/// The whole ledger, written by `explain --json` (never read back: its diagnostics are words).
#[derive(Clone, Debug, Serialize)]
pub struct Ledger {
    pub schema: String,
    /// A measurement or a prediction: a prediction's figures are never called observed.
    pub explained: Explained,
    /// At the peak, or at a prediction's out-of-memory.
    pub built_on: BuiltOn,
    /// A prediction's out-of-memory as its file holds it (the allocation that did not fit,
    /// where, and what a card needs with unlimited memory); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out_of_memory: Option<crate::schema::prediction::PredictedOom>,
    /// The phase explained (the highest observed peak reserved; predicted when nothing was
    /// observed), its index and device.
    pub phase: String,
    pub phase_index: u64,
    pub device: String,
    /// Under torchrun: the rank explained (the one with the highest peak reserved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u64>,
    pub lines: Vec<Line>,
    pub capacities: Vec<Capacity>,
    /// The allocator's own story: fragmentation, retries, the backend.
    pub diagnostics: Vec<Diagnostic>,
    /// The failure's out-of-memory message, parsed and classified.
    pub post_mortem: Option<crate::explain::oom::PostMortem>,
    /// What PyTorch's observer saw alive at the (latest) out-of-memory.
    pub live_at_oom: Option<crate::schema::history::OomSnapshot>,
    /// `--timeline`: the largest allocations alive at the explained phase's peak, with the
    /// frames that made them (empty without a timeline).
    pub largest_at_peak: Vec<crate::explain::snapshot::Allocation>,
    pub notes: Vec<String>,
}

fn figure(bytes: u64, provenance: Provenance, basis: impl Into<String>) -> Figure {
    Figure {
        bytes,
        provenance,
        basis: basis.into(),
    }
}

/// An observed figure of `basis`, for `Option::map`.
fn observed(basis: impl Into<String>) -> impl FnOnce(u64) -> Figure {
    move |bytes| figure(bytes, Provenance::Observed, basis)
}

/// A predicted figure of `basis`, for `Option::map`.
fn predicted(basis: impl Into<String>) -> impl FnOnce(u64) -> Figure {
    move |bytes| figure(bytes, Provenance::Predicted, basis)
}

/// The estimate's figures are assumed when one of the terms they add is.
fn estimated<'a>(terms: impl IntoIterator<Item = &'a EstimateTerm>) -> Provenance {
    if terms.into_iter().any(|t| t.kind == Kind::Assumed) {
        Provenance::Assumed
    } else {
        Provenance::Calculated
    }
}

/// The estimate's terms compared on `line`, summed (counted terms only).
fn estimate_sum(e: &EstimateDoc, line: LineId) -> Option<Figure> {
    estimate_sum_on(e, line, LineId::of_term)
}

/// The estimate's terms that `place` puts on `line`, summed (counted terms only).
fn estimate_sum_on(
    e: &EstimateDoc,
    line: LineId,
    place: fn(&TermId) -> Option<LineId>,
) -> Option<Figure> {
    let terms: Vec<_> = e
        .terms
        .iter()
        .filter(|t| t.in_total && place(&t.id) == Some(line))
        .collect();
    if terms.is_empty() {
        return None;
    }
    Some(figure(
        terms.iter().map(|t| t.bytes).sum(),
        estimated(terms.iter().copied()),
        terms
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>()
            .join(" + "),
    ))
}

/// The n-th predicted phase of this name (phases repeat: warm_forward, training steps), when it
/// was predicted (a failed phase's figures stop where it failed).
fn predicted_phase<'a>(p: &'a PredictionDoc, name: &str, nth: usize) -> Option<&'a PredictedPhase> {
    p.phases
        .iter()
        .filter(|ph| ph.name == name)
        .nth(nth)
        .filter(|ph| ph.status.has_figures())
}

/// Why a result has no ledger.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    #[error("{}", NOTHING_TO_RECONCILE)]
    NothingToReconcile,
    #[error(
        "the prediction has no predicted phase with a peak reserved: nothing to explain (its phases are unpredictable or failed; see its `unpredictable` and `failure`)"
    )]
    NothingPredicted,
}

const NOTHING_TO_RECONCILE: &str = "the result has no completed phase with a peak reserved reading: nothing to reconcile (a partial peak before a failure is not a need)";

/// Builds the ledger of a result, with the estimate and the prediction when given (the
/// prediction stored in the result is used when none is given).
pub fn of_result(
    r: &MeasureResult,
    estimate: Option<&EstimateDoc>,
    prediction: Option<&PredictionDoc>,
) -> Result<Ledger, LedgerError> {
    let prediction = prediction.or(r.prediction.as_deref());
    let device = r
        .scope
        .devices
        .first()
        .cloned()
        .unwrap_or_else(|| "cuda:0".into());
    // The phase to explain: the one whose peak matters (`MeasureResult::peak_phase`).
    let post_mortem = r.failure.as_ref().and_then(|f| f.post_mortem.clone());
    let live_at_oom = r.oom_snapshots.last().cloned();
    let Some((k, peak_phase)) = r.peak_phase().map(|p| (p.position, p.phase)) else {
        if post_mortem.is_none() && live_at_oom.is_none() {
            return Err(LedgerError::NothingToReconcile);
        }
        // An out-of-memory before any phase completed: its post-mortem is the explanation.
        let failed = r.phases.last();
        return Ok(Ledger {
            schema: SCHEMA.into(),
            explained: Explained::Measurement,
            built_on: BuiltOn::Peak,
            out_of_memory: None,
            phase: failed.map_or("(before any phase)".into(), |p| p.name.clone()),
            phase_index: failed.map_or(0, |p| p.index),
            capacities: capacities(
                r,
                &device,
                r.environment.nvml_indices.first().copied().flatten(),
            ),
            device,
            rank: r.scope.rank,
            lines: Vec::new(),
            diagnostics: diagnostics(r),
            post_mortem,
            live_at_oom,
            largest_at_peak: Vec::new(),
            notes: vec![NOTHING_TO_RECONCILE.into()],
        });
    };
    let reading = &peak_phase.devices[0];
    let nth = r.phases[..k]
        .iter()
        .filter(|p| p.name == peak_phase.name)
        .count();
    let pred = prediction.and_then(|p| predicted_phase(p, &peak_phase.name, nth));
    let name = &peak_phase.name;
    let mut lines = Vec::new();
    let mut notes = Vec::new();

    // Weights: the estimate's, and what was allocated once the model was loaded.
    let load = r.phases.iter().find(|p| p.name == "model_load");
    let weights_observed = load
        .and_then(|p| p.devices.first()?.end_allocated_bytes)
        .map(observed("allocated at the end of model_load"));
    let weights_predicted =
        weights_predicted_bytes(prediction).map(predicted("allocated at the end of model_load"));
    let weights_estimate = estimate.and_then(|e| estimate_sum(e, LineId::Weights));
    if load.is_some() || weights_estimate.is_some() {
        lines.push(Line {
            estimate: weights_estimate,
            predicted: weights_predicted,
            observed: weights_observed.clone(),
            ..Line::new(LineId::Weights, Checkpoint::End("model_load".into()))
        });
    } else {
        notes.push("no model_load phase: the weights are inside the phase's start level".into());
    }

    // KV cache: the estimate's term and the cache object's bytes in the explained phase.
    let kv_observed = peak_phase
        .inputs
        .get("cache_bytes")
        .and_then(serde_json::Value::as_u64)
        .map(observed("storage of every tensor the cache object holds"));
    let kv_estimate = estimate.and_then(|e| estimate_sum(e, LineId::KvCache));
    let kv_predicted = pred
        .and_then(|p| p.inputs.get("cache_bytes"))
        .and_then(serde_json::Value::as_u64)
        .map(predicted("the cache object's storage, predicted"));
    if kv_observed.is_some() || kv_estimate.is_some() {
        lines.push(Line {
            estimate: kv_estimate,
            predicted: kv_predicted,
            observed: kv_observed.clone(),
            ..Line::new(LineId::KvCache, Checkpoint::End(name.clone()))
        });
    }

    // What the phase started with beyond the weights.
    let start = reading.start_allocated_bytes;
    let held = start
        .zip(weights_observed.as_ref())
        .map(|(s, w)| s.saturating_sub(w.bytes));
    let held_predicted = pred.and_then(|p| {
        Some(
            p.start_allocated_bytes?
                .saturating_sub(weights_predicted_bytes(prediction)?),
        )
    });
    lines.push(Line {
        estimate: estimate.and_then(|e| estimate_sum(e, LineId::HeldAtStart)),
        predicted: held_predicted.map(predicted("start of the phase − the weights")),
        observed: held.map(observed(format!(
            "allocated at the start of {name} − the weights (inputs, caches, gradients, optimizer states, workspaces of earlier phases)"
        ))),
        ..Line::new(LineId::HeldAtStart, Checkpoint::Start(name.clone()))
    });

    // In-phase growth to the peak: what was alive at the peak beyond the start.
    let growth = reading
        .peak_allocated_bytes
        .zip(start)
        .map(|(p, s)| p.saturating_sub(s));
    let mut breakdown = Vec::new();
    if let Some(at) = pred.and_then(|p| p.at_peak.as_ref()) {
        let mut cats: Vec<(String, u64)> = at
            .by_category
            .iter()
            .filter(|(c, _)| !matches!(c.as_str(), "parameter" | "buffer"))
            .map(|(c, b)| (format!("category {c}"), *b))
            .collect();
        cats.sort_by_key(|b| std::cmp::Reverse(b.1));
        breakdown.extend(cats);
        breakdown.extend(
            at.top_modules
                .iter()
                .take(5)
                .map(|m| (format!("module {}", m.module), m.bytes)),
        );
    }
    lines.push(Line {
        estimate: estimate.and_then(|e| estimate_sum(e, LineId::Growth)),
        predicted: pred
            .and_then(|p| {
                Some(
                    p.peak_allocated_bytes?
                        .saturating_sub(p.start_allocated_bytes?),
                )
            })
            .map(predicted("predicted peak allocated − the phase's start")),
        observed: growth.map(observed(format!(
            "peak allocated of {name} − allocated at its start"
        ))),
        breakdown,
        ..Line::new(LineId::Growth, Checkpoint::PeakMinusStart(name.clone()))
    });

    // Workspaces: inside allocated, visible only in a prediction.
    let workspaces = pred
        .and_then(|p| p.at_peak.as_ref())
        .and_then(|a| a.by_category.get("workspace"))
        .copied();
    if let Some(ws) = workspaces {
        lines.push(Line {
            predicted: Some(predicted(
                prediction.map_or(String::new(), |p| p.target.workspaces_source.clone()),
            )(ws)),
            ..Line::new(LineId::Workspaces, Checkpoint::PredictedPeak(name.clone()))
        });
    }

    lines.push(Line {
        predicted: pred
            .and_then(|p| p.peak_allocated_bytes)
            .map(predicted("allocator replay")),
        observed: reading
            .peak_allocated_bytes
            .map(observed("torch.cuda.max_memory_allocated")),
        ..Line::new(LineId::PeakAllocated, Checkpoint::Peak(name.clone()))
    });
    lines.push(Line {
        predicted: pred
            .and_then(|p| p.peak_reserved_bytes)
            .map(predicted("allocator replay")),
        observed: reading
            .peak_reserved_bytes
            .map(observed("torch.cuda.max_memory_reserved")),
        ..Line::new(LineId::PeakReserved, Checkpoint::Peak(name.clone()))
    });
    // Allocator slack: reserved − allocated at one checkpoint, and the inactive split bytes.
    let slack = reading
        .end_reserved_bytes
        .zip(reading.end_allocated_bytes)
        .map(|(r, a)| r.saturating_sub(a));
    let mut slack_breakdown = Vec::new();
    if let Some(stats) = &reading.allocator {
        if let Some(b) = stats.inactive_split_bytes_current {
            slack_breakdown.push(("inactive split bytes (free inside split blocks)".into(), b));
        }
        if let (Some(req), Some(a)) = (stats.requested_bytes_current, reading.end_allocated_bytes) {
            slack_breakdown.push((
                "rounding (allocated − requested)".into(),
                a.saturating_sub(req),
            ));
        }
    }
    lines.push(Line {
        predicted: pred
            .and_then(|p| Some(p.end_reserved_bytes?.saturating_sub(p.end_allocated_bytes?)))
            .map(predicted("at the phase's end")),
        observed: slack.map(observed(
            "memory_reserved − memory_allocated, both read at the phase's end",
        )),
        breakdown: slack_breakdown,
        ..Line::new(
            LineId::AllocatorSlack,
            Checkpoint::EndOneCheckpoint(name.clone()),
        )
    });

    // Outside PyTorch's allocator, and the driver's view.
    let driver = peak_phase.driver.as_ref().and_then(|d| d.first());
    let outside = driver.and_then(|d| d.outside_allocator_at_end_bytes);
    lines.push(Line {
        predicted: prediction
            .map(|p| predicted(p.target.context_source.clone())(p.target.context_bytes)),
        observed: outside.map(observed(
            "NVML process memory − memory_reserved at the phase's end",
        )),
        ..Line::new(LineId::OutsideAllocator, Checkpoint::End(name.clone()))
    });
    if let Some(reserve) = estimate.and_then(|e| estimate_sum(e, LineId::Reserve)) {
        lines.push(Line {
            estimate: Some(reserve),
            ..Line::new(LineId::Reserve, Checkpoint::Stated)
        });
    }
    let driver_peak = driver.and_then(|d| d.peak_process_used_bytes);
    lines.push(Line {
        estimate: estimate.map(|e| {
            figure(
                e.total_bytes,
                estimated(e.terms.iter().filter(|t| t.in_total)),
                "the estimate's preparation hypothesis",
            )
        }),
        predicted: pred
            .and_then(|p| p.driver_view_bytes)
            .map(predicted("peak reserved + outside the allocator")),
        observed: driver_peak.map(observed(format!(
            "NVML's highest reading for the process during {name}"
        ))),
        ..Line::new(LineId::DriverView, Checkpoint::PeakSampled(name.clone()))
    });
    if driver.is_none_or(|d| d.peak_process_used_bytes.is_none()) {
        notes.push(
            driver
                .and_then(|d| d.reason.clone())
                .or_else(|| r.environment.driver_reason.clone())
                .map_or("no driver's view (NVML) in this result".into(), |why| {
                    format!("no driver's view: {why}")
                }),
        );
    }
    // Unexplained: the driver's peak beyond the reserved peak and what lies outside the allocator.
    let unexplained = driver_peak
        .zip(reading.peak_reserved_bytes)
        .zip(outside)
        .map(|((d, resv), out)| d as i128 - resv as i128 - out as i128);
    if let Some(u) = unexplained {
        lines.push(Line {
            observed: Some(observed(if u < 0 {
                    "negative: the outside-the-allocator reading at the phase's end was larger than at the driver's peak (NVML samples every ~5 ms; the two readings are not one instant)"
                } else {
                    "what neither the allocator nor the end-of-phase outside reading accounts for (other allocations outside PyTorch during the phase, NVML's sampling)"
            })(u.unsigned_abs() as u64)),
            ..Line::new(LineId::Unexplained, Checkpoint::Peak(name.clone()))
        });
    }

    let capacities = capacities(r, &device, driver.and_then(|d| d.nvml_index));
    let largest_at_peak = largest_at_peak(r, &device, peak_phase.index);
    Ok(Ledger {
        schema: SCHEMA.into(),
        explained: Explained::Measurement,
        built_on: BuiltOn::Peak,
        out_of_memory: None,
        phase: name.clone(),
        phase_index: peak_phase.index,
        device,
        rank: r.scope.rank,
        lines,
        capacities,
        diagnostics: diagnostics(r),
        post_mortem,
        live_at_oom,
        largest_at_peak,
        notes,
    })
}

/// The device's capacities, named apart: PyTorch's total_memory, NVML's total and the vendor's
/// label (never folded into one number).
fn capacities(r: &MeasureResult, device: &str, nvml_index: Option<u32>) -> Vec<Capacity> {
    let mut capacities = Vec::new();
    if let Some(t) = r
        .environment
        .python
        .as_ref()
        .and_then(|p| p.device(device))
        .and_then(|d| d.get("total_memory"))
        .and_then(serde_json::Value::as_u64)
    {
        capacities.push(Capacity {
            name: CapacityName::TorchTotalMemory,
            bytes: t,
            source: "torch.cuda.get_device_properties().total_memory, read in the run".into(),
        });
    }
    if let Some(total) = nvml_index
        .and_then(|i| {
            r.environment
                .driver
                .as_ref()?
                .gpus
                .iter()
                .find(|g| g.index == i)
        })
        .and_then(|g| g.total_bytes)
    {
        capacities.push(Capacity {
            name: CapacityName::NvmlTotal,
            bytes: total,
            source: "nvmlDeviceGetMemoryInfo().total, read in the run".into(),
        });
    }
    let gpu = r
        .environment
        .python
        .as_ref()
        .and_then(|p| p.device(device))
        .and_then(|d| d.get("name"))
        .and_then(serde_json::Value::as_str)
        .map(String::from);
    if let Some(card) = gpu.as_deref().and_then(crate::cards::identify) {
        capacities.push(Capacity {
            name: CapacityName::VendorLabel(card.label.clone()),
            bytes: (card.label_gb() * 1e9) as u64,
            source: format!("catalog: {}", card.name),
        });
    }
    capacities
}

/// From the timeline's summary: the largest allocations alive at phase `index`'s peak.
fn largest_at_peak(
    r: &MeasureResult,
    device: &str,
    index: u64,
) -> Vec<crate::explain::snapshot::Allocation> {
    let device_index = device
        .rsplit(':')
        .next()
        .and_then(|i| i.parse::<i64>().ok());
    r.timeline
        .as_ref()
        .and_then(|t| t.summary.as_ref())
        .and_then(|s| s.devices.iter().find(|d| Some(d.device) == device_index))
        .and_then(|d| d.trace.as_ref())
        .and_then(|t| t.phases.iter().find(|p| p.index == Some(index)))
        .map(|p| p.largest_at_peak.clone())
        .unwrap_or_default()
}

fn weights_predicted_bytes(prediction: Option<&PredictionDoc>) -> Option<u64> {
    prediction
        .and_then(|p| predicted_phase(p, "model_load", 0))
        .and_then(|ph| ph.end_allocated_bytes)
}

#[cfg(test)]
mod tests;
