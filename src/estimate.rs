//! Pure arithmetic before any GPU is touched: each memory term with its exact bytes, its formula
//! and whether it is *calculated* (follows from the inputs) or *assumed* (a model or a choice).

pub mod allocator;
pub mod kv_cache;
pub mod plan;
pub mod render;
pub mod reserve;
pub mod serving;
pub mod sharding;
pub mod states;
pub mod term_id;
pub mod training;
pub mod vision;
pub mod weights;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::model::Architecture;
use crate::model::safetensors::Stored;
use crate::units::{Bytes, Overflow, checked_sum};

pub use kv_cache::{CacheStrategy, KvRequest};
pub use reserve::Reserve;
pub use sharding::ShardingSummary;
pub use states::{Offload, Optimizer, Precision, Sharding, Strategy, TrainingRequest};
pub use term_id::{Shard, TermId};
pub use weights::WeightsSource;

/// Schema tag of `estimate --json`.
pub const SCHEMA: &str = "iteragpu.estimate/1";

/// Whether a figure follows from the inputs or rests on a model or a choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::Display, strum::AsRefStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum Kind {
    /// Exact arithmetic on the inputs (weights, KV cache of a known layout, optimizer states).
    Calculated,
    /// A model or a stated choice (reserve, activations, transient buffers).
    Assumed,
}

/// One line of the estimate.
#[derive(Clone, Debug, Serialize)]
pub struct Term {
    /// What the term is: `id` and its parameters, flattened into the term's object.
    #[serde(flatten)]
    pub id: TermId,
    /// What the bytes are for, in English (`weights (bfloat16)`, `KV cache (dynamic)`): made from
    /// the id.
    pub name: String,
    /// Exact integer bytes.
    pub bytes: Bytes,
    pub kind: Kind,
    /// The arithmetic, with the numbers used.
    pub formula: String,
    /// `false` for lines shown for information (stored format, alternative layouts, CPU-side bytes).
    pub in_total: bool,
    /// The inputs of the formula, by name.
    pub inputs: Map<String, Value>,
}

impl Term {
    pub fn new(id: TermId, bytes: Bytes, kind: Kind, formula: impl Into<String>) -> Term {
        Term {
            name: id.english(),
            id,
            bytes,
            kind,
            formula: formula.into(),
            in_total: true,
            inputs: Map::new(),
        }
    }
    pub fn info(mut self) -> Term {
        self.in_total = false;
        self
    }
    pub fn input(mut self, key: &str, value: impl Into<Value>) -> Term {
        self.inputs.insert(key.to_string(), value.into());
        self
    }
}

/// Everything `estimate` was asked, validated.
#[derive(Clone, Debug)]
pub struct Request {
    pub weights: Option<WeightsSource>,
    pub kv: Option<KvRequest>,
    pub training: Option<TrainingRequest>,
    pub reserve: Option<Reserve>,
    /// `--workload vision`: the image encoder's terms instead of a language model's.
    pub vision: Option<vision::VisionRequest>,
}

/// The model summary shown with an estimate from `--model`.
#[derive(Clone, Debug, Serialize)]
pub struct ModelSummary {
    pub path: String,
    pub architecture: Architecture,
    /// Parameters from config.json (u128 would not survive JSON readers: stored as u64).
    pub parameters: u64,
    /// KV-cache bytes per token and per sequence at the cache element width used.
    pub kv_bytes_per_token: Option<u64>,
}

/// The result: terms, total and what the total leaves out.
#[derive(Clone, Debug, Serialize)]
pub struct Estimate {
    pub schema: &'static str,
    pub tool_version: &'static str,
    pub terms: Vec<Term>,
    /// Sum of the terms with `in_total`: the preparation hypothesis.
    pub total_bytes: Bytes,
    /// What the hypothesis does not contain.
    pub left_out: Vec<String>,
    pub notes: Vec<String>,
    pub model: Option<ModelSummary>,
    /// The Hub repository and commit the model's folder holds (`--model ORG/NAME[@REVISION]`, or
    /// any snapshot folder of the Hugging Face cache); absent for another folder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hub: Option<crate::model::hub_cache::HubOrigin>,
    /// The stored format read from safetensors headers, apart from the config-based count.
    pub stored: Option<Stored>,
    /// Sharded training (`--shard`): strategy, ranks, offload, the host memory and the
    /// comparisons. Absent otherwise. With it, every term is ONE rank's memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sharding: Option<ShardingSummary>,
    /// With `--train`: the precision (stated or the default) and what it means for each kind of
    /// tensor. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub training: Option<training::TrainingSummary>,
    /// `estimate serve`: the engine's settings and figures (blocks, tokens, concurrency), ONE GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serving: Option<serving::ServingSummary>,
    /// With `--workload vision`: the images, patches, sequence and attention kernel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vision: Option<vision::VisionSummary>,
}

/// Why an estimate cannot be made from valid-looking inputs.
#[derive(Debug, thiserror::Error)]
pub enum EstimateError {
    // `reason` rather than `source`: the reason is in the message, and a `source` would be
    // printed a second time by the top-level error chain.
    #[error("{what}: {reason}; check {hint}")]
    Overflow {
        what: String,
        hint: String,
        reason: Overflow,
    },
    #[error("{0}")]
    Input(String),
    /// A config field this estimate reads is wrong (the vision families').
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    /// A stored checkpoint's header that cannot be read.
    #[error(transparent)]
    Stored(#[from] crate::model::safetensors::HeaderError),
    /// A cache kind's options that make no strategy.
    #[error(transparent)]
    Cache(#[from] kv_cache::CacheError),
}

impl EstimateError {
    pub fn overflow(what: &str, hint: &str) -> impl FnOnce(Overflow) -> EstimateError {
        let (what, hint) = (what.to_string(), hint.to_string());
        move |reason| EstimateError::Overflow { what, hint, reason }
    }
}

/// `a × b × …` without overflow: a `u128` holds any product of two `u64`, not of three, and
/// flags such as --tokens and --batch are only bounded by `u64`.
pub(crate) fn product(factors: &[u128]) -> Result<u128, Overflow> {
    factors
        .iter()
        .try_fold(1u128, |p, f| p.checked_mul(*f))
        .ok_or(Overflow)
}

/// A sum without overflow.
pub(crate) fn sum(items: impl IntoIterator<Item = u128>) -> Result<u128, Overflow> {
    items
        .into_iter()
        .try_fold(0u128, |s, i| s.checked_add(i))
        .ok_or(Overflow)
}

/// Runs every requested part of the estimate.
pub fn estimate(req: &Request) -> Result<Estimate, EstimateError> {
    let mut terms = Vec::new();
    let mut notes = Vec::new();
    let mut left_out = Vec::new();
    let mut sharding = None;
    let mut training_summary = None;
    let mut vision_summary = None;

    if let Some(v) = &req.vision {
        let found = vision::terms(v, &mut notes, &mut left_out)?;
        terms.extend(found.terms);
        training_summary = found.training;
        vision_summary = Some(found.summary);
    }
    match (&req.training, &req.weights) {
        _ if req.vision.is_some() => {}
        (Some(training), Some(source)) => {
            let trained = training::terms(source, training, &mut notes, &mut left_out)?;
            terms.extend(trained.terms);
            sharding = trained.sharding;
            training_summary = Some(trained.summary);
        }
        (Some(_), None) => {
            return Err(EstimateError::Input(
                "a training estimate needs the model's size".into(),
            ));
        }
        (None, weights) => {
            match weights {
                Some(source) => terms.extend(weights::terms(source, &mut notes)?),
                None => left_out.push("weights".into()),
            }
            let activations = match (weights, &req.kv) {
                (Some(WeightsSource::Model(_)), Some(_)) => {
                    "activations beyond the prefill's largest layer (attention workspaces)"
                }
                _ => "activations",
            };
            left_out.extend([activations, "gradients", "optimizer states"].map(String::from));
        }
    }
    if let (None, Some(WeightsSource::Model(m)), Some(kv)) = (&req.training, &req.weights, &req.kv)
    {
        terms.push(prefill_transient(&m.architecture, m.compute_dtype, kv)?);
    }
    match &req.kv {
        Some(kv) if !kv.requests.is_empty() => {
            terms.extend(kv_cache::requests_terms(kv, &mut notes)?)
        }
        Some(kv) => terms.extend(kv_cache::terms(kv, &mut notes)?),
        None if req.training.is_none() && req.vision.is_none() => left_out.push("KV cache".into()),
        None => {}
    }
    left_out.push("temporary buffers of each operation (workspaces, intermediate tensors)".into());
    left_out.push(
        match sharding.as_ref().and_then(|s| s.comm_reserve_bytes) {
            Some(_) => "memory outside PyTorch's allocator other than NCCL's assumed term (CUDA context, libraries such as cuBLAS)",
            None => "memory outside PyTorch's allocator (CUDA context, libraries such as cuBLAS and NCCL)",
        }
        .into(),
    );
    left_out.push("allocator rounding of transient tensors and fragmentation (reserved but unallocated memory)".into());
    match &req.reserve {
        Some(reserve) => terms.push(reserve.term()),
        None => notes.push("no reserve stated: add --reserve-gib or --reserve SIZE for the margin you intend to keep".into()),
    }
    let total_bytes = checked_sum(terms.iter().filter(|t| t.in_total).map(|t| t.bytes))
        .map_err(EstimateError::overflow("the total", "the inputs"))?;

    let model = match &req.weights {
        Some(WeightsSource::Model(m)) => Some(ModelSummary {
            path: m.path.clone(),
            parameters: u64::try_from(m.architecture.parameters()).map_err(|_| {
                EstimateError::overflow("the parameter count", "the config")(Overflow)
            })?,
            kv_bytes_per_token: req
                .kv
                .as_ref()
                .map(KvRequest::bytes_per_token)
                .transpose()
                .map_err(EstimateError::overflow(
                    "the KV cache per token",
                    "--kv-bytes and the layout",
                ))?,
            architecture: m.architecture.clone(),
        }),
        _ => None,
    };
    let stored = match &req.weights {
        Some(WeightsSource::Model(m)) => m.stored.clone(),
        _ => None,
    };
    let model_path = match (&req.weights, &req.vision) {
        (Some(WeightsSource::Model(m)), _) => Some(m.path.as_str()),
        (_, Some(v)) => Some(v.path.as_str()),
        _ => None,
    };
    Ok(Estimate {
        schema: SCHEMA,
        tool_version: env!("CARGO_PKG_VERSION"),
        terms,
        total_bytes,
        left_out,
        notes,
        hub: model_path.and_then(|p| crate::model::hub_cache::origin(std::path::Path::new(p))),
        model,
        stored,
        sharding,
        training: training_summary,
        serving: None,
        vision: vision_summary,
    })
}

/// The largest transient of a prefill over `kv.tokens` tokens (an upper bound: the prompt is at
/// most that long): one layer's residual and normed hidden states and its three MLP
/// intermediates (gate, up, activation), plus the last position's logits, as transformers computes
/// them with `logits_to_keep=1`. Attention workspaces are not modelled.
fn prefill_transient(
    arch: &Architecture,
    dtype: crate::dtype::Dtype,
    kv: &KvRequest,
) -> Result<Term, EstimateError> {
    let d = arch.dims;
    let (b, s, e) = (
        kv.sequences as u128,
        kv.tokens as u128,
        dtype.bytes() as u128,
    );
    // Sizes from a config are bounded (model::config::MAX_DIMENSION): these fit in a u128.
    let inter = arch.moe.map_or(d.intermediate_size as u128, |m| {
        m.active as u128 * m.expert_intermediate as u128 + m.shared_intermediate as u128
    });
    let width = 2 * d.hidden_size as u128 + 3 * inter;
    let bytes = product(&[width, b, s, e])
        .and_then(|layer| Ok((layer, product(&[b, d.vocab_size as u128, e])?)))
        .and_then(|(layer, logits)| sum([layer, logits]))
        .and_then(Bytes::from_u128)
        .map_err(EstimateError::overflow(
            "the prefill transient",
            "--context and --batch",
        ))?;
    Ok(Term::new(
        TermId::PrefillTransient,
        bytes,
        Kind::Assumed,
        format!(
            "(2·h + 3·I) × b·s × {e} bytes + b·vocab × {e} bytes with h={}, I={}, b={}, s={} (the whole context as prompt: an upper bound), vocab={}; attention workspaces not included",
            g(d.hidden_size),
            g(inter),
            g(b),
            g(s),
            g(d.vocab_size)
        ),
    ))
}

/// `1` → `1 sequence`, `4` → `4 sequences`.
pub(crate) fn plural(n: u64, word: &str) -> String {
    let n_text = crate::units::group_thousands(n as u128);
    if n == 1 {
        format!("{n_text} {word}")
    } else {
        format!("{n_text} {word}s")
    }
}

/// Shorthand for grouped integers in formulas.
pub(crate) fn g(n: impl Into<u128>) -> String {
    crate::units::group_thousands(n.into())
}
