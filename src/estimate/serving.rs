//! `estimate serve vllm|sglang`: the KV pool a serving engine allocates on ONE GPU, by the
//! engine's own rules (vLLM V0 `worker/worker.py`, V1 `v1/worker/gpu_worker.py` and
//! `v1/core/kv_cache_utils.py`; SGLang `model_executor/model_runner.py`), each cited by file and
//! release in the term's formula. What the engine measures at start-up (weights, the profile run's
//! activation peak, memory outside PyTorch) is either given from a log or assumed, and said so.

use serde::Serialize;

use super::{EstimateError, Kind, Term, TermId, g};
use crate::units::{Bytes, GIB};

pub mod config;
pub mod defaults;
pub mod profile;
pub mod refusal;
pub mod releases;
pub use profile::ProfileShape;
use profile::activation_term;

/// The serving engine whose rules apply.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Serialize,
    serde::Deserialize,
    clap::ValueEnum,
    strum::Display,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Engine {
    Vllm,
    Sglang,
}

/// A release as `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    /// `0.6.3`, `0.11` or `0.24.0`; anything else is refused with the form expected.
    pub fn parse(text: &str) -> Result<Version, String> {
        let parts: Vec<&str> = text.trim().trim_start_matches('v').split('.').collect();
        let bad = || format!("--engine-version {text:?} is not a release such as 0.6.3 or 0.11");
        if !(2..=3).contains(&parts.len()) {
            return Err(bad());
        }
        let n = |i: usize| -> Result<u32, String> {
            parts.get(i).map_or(Ok(0), |p| p.parse().map_err(|_| bad()))
        };
        Ok(Version(n(0)?, n(1)?, n(2)?))
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// What each model layer keeps per token, as the engine counts it.
#[derive(Clone, Debug)]
pub struct ServeModel {
    /// KV heads of the whole model (MLA: 1 latent "head").
    pub kv_heads: u64,
    /// Elements per head: head_dim (MLA: kv_lora_rank + qk_rope_head_dim).
    pub head_size: u64,
    pub mla: bool,
    /// Attention layers with a cache; `Some(w)` for a sliding-window layer.
    pub layers: Vec<Option<u64>>,
    pub hidden: u64,
    /// Query heads × head_dim (the q projection's width).
    pub q_width: u64,
    /// MLP intermediate per token (MoE: active experts' + shared).
    pub intermediate: u64,
    pub vocab: u64,
    /// Bytes of the model's compute dtype (the KV cache's with `--kv-cache-dtype auto`).
    pub dtype_bytes: u64,
    /// The served dtype and where it comes from (the config's, `--dtype`, or the engine's
    /// `--dtype auto` downcast of a float32 config, cited).
    pub dtype_rule: String,
    /// Weight bytes of the whole model, as the estimate's weight terms count them.
    pub weights: Bytes,
    /// vLLM's rotary cos/sin cache, when the config's rope is one it sizes plainly; else why not.
    pub rotary: Result<Rotary, String>,
    /// A multimodal model's vision tower, which V1's profile run exercises with a dummy batch.
    pub encoder: Option<VisionEncoder>,
    /// What picks vLLM's model runner (0.22–0.28: `releases::v2_runner_graphs_zero`).
    pub runner: releases::RunnerModel,
}

/// The vision tower of a multimodal model as vLLM V1's profile run exercises it: a dummy batch of
/// images of the largest size, through the tower, their embeddings held in the encoder cache
/// while the language model's dummy run follows (v1/worker/gpu_model_runner.py `profile_run`).
#[derive(Clone, Copy, Debug)]
pub struct VisionEncoder {
    /// The image's side in pixels (the processor's size, the tower's `image_size`).
    pub image_size: u64,
    /// Patches per image the tower runs over: (image_size / patch_size)².
    pub patches: u64,
    pub hidden: u64,
    pub intermediate: u64,
    /// Embeddings one image takes in the language model (`mm_tokens_per_image`).
    pub tokens_per_item: u64,
}

/// The `cos_sin_cache` buffer of vLLM's `RotaryEmbedding`: `positions × rotary_dim` elements in
/// the model's dtype, on every rank (model_executor/layers/rotary_embedding.py
/// `_compute_cos_sin_cache` then `cache.to(dtype)`). "Loading model weights took" includes it:
/// Llama-3.1-8B's 131,072 × 128 × 2 bytes are the 0.03 GiB between the log's 14.9888 GiB and the
/// parameters' 14.9575 GiB.
#[derive(Clone, Copy, Debug)]
pub struct Rotary {
    pub positions: u64,
    pub dim: u64,
}

/// The profile run's activation peak when it is not assumed by the stated rule.
#[derive(Clone, Debug)]
pub enum ActivationPeak {
    /// Read from the engine's log (`--activation-peak SIZE`).
    FromLog(Bytes),
    /// Predicted by running transformers' forward at the profile run's shapes on data-less
    /// tensors (`--activation-peak predict`); `how` says what ran.
    Predicted { bytes: Bytes, how: String },
}

/// Everything `estimate serve` was asked.
#[derive(Clone, Debug)]
pub struct ServeRequest {
    pub engine: Engine,
    /// `None`: the rules of the newest release read (vLLM 0.34.0, SGLang 0.5.23).
    pub version: Option<Version>,
    pub card: String,
    /// `torch.cuda.mem_get_info()[1]` of one device.
    pub device_total: Bytes,
    pub device_total_source: String,
    /// Compute capability major (Blackwell MLA block size), when known.
    pub compute_major: Option<u32>,
    pub gpu_memory_utilization: Option<f64>,
    pub max_model_len: u64,
    pub max_model_len_source: String,
    pub max_num_seqs: Option<u64>,
    pub max_num_batched_tokens: Option<u64>,
    pub tensor_parallel_size: u64,
    pub kv_fp8: bool,
    pub block_size: Option<u64>,
    pub enforce_eager: bool,
    pub weights: Option<Bytes>,
    pub activation_peak: Option<ActivationPeak>,
    pub non_torch: Option<Bytes>,
    /// The KV budget given (vLLM's `--kv-cache-memory`, a log's "Available KV cache memory"):
    /// the start-up terms are then shown for information, not charged.
    pub kv_cache_memory: Option<Bytes>,
    /// Extra lengths at which the concurrency is given.
    pub lengths: Vec<u64>,
}

/// The engine's figures, as its start-up log prints them.
#[derive(Clone, Debug, Serialize)]
pub struct ServingSummary {
    pub engine: Engine,
    /// The release whose rules were applied (stated, or the default).
    pub rules_of: String,
    pub generation: String,
    pub card: String,
    pub device_total_bytes: Bytes,
    pub device_total_source: String,
    pub gpu_memory_utilization: f64,
    pub max_model_len: u64,
    /// vLLM's; null for SGLang (it derives max_running_requests).
    pub max_num_seqs: Option<u64>,
    /// vLLM's profile-run size; null for SGLang unless given.
    pub max_num_batched_tokens: Option<u64>,
    pub tensor_parallel_size: u64,
    pub block_size: u64,
    pub kv_dtype_bytes: u64,
    /// vLLM: one block of one layer (`page_size_bytes`); SGLang: one token over all layers.
    pub page_bytes: Bytes,
    pub kv_budget_bytes: i128,
    /// vLLM's `# GPU blocks`; null for SGLang (no blocks: page size 1).
    pub num_blocks: Option<u64>,
    /// vLLM's "GPU KV cache size: N tokens", SGLang's `max_total_num_tokens`.
    pub kv_tokens: u64,
    /// (length, requests of that length at once), first at max_model_len.
    pub concurrency: Vec<(u64, f64)>,
    /// Settings not given, with the default applied and its source.
    pub defaults: Vec<String>,
    /// Will the engine start? Its refusal rules, in the order it meets them (refusal.rs).
    pub start: refusal::StartCheck,
}

/// The terms, the summary and the notes of a serving plan.
pub struct Plan {
    pub terms: Vec<Term>,
    pub summary: ServingSummary,
    pub notes: Vec<String>,
}

const MIB: u64 = 1 << 20;

fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / GIB as f64)
}

fn signed_gib(b: i128) -> String {
    format!("{:.2} GiB", b as f64 / GIB as f64)
}

fn cdiv(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

/// The bounds of what the planner takes, each far above any published model, card or engine
/// setting: within them every product the planner forms fits in a `u64` (the tests build with
/// overflow checks and a proptest draws every value from the whole `u64` range).
pub mod bounds {
    /// Widths, heads, head sizes, vocabulary, MLP (`config.rs::MAX_DIMENSION`).
    pub const DIMENSION: u64 = 1 << 24;
    /// KV values per token of one layer (heads × head size): 2^24.
    pub const KV_WIDTH: u64 = 1 << 24;
    /// Layers (`config.rs::MAX_LAYERS`).
    pub const LAYERS: u64 = 100_000;
    /// Positions: max_model_len, windows, lengths, batched tokens, the rotary cache's positions.
    pub const POSITIONS: u64 = 1 << 32;
    /// Sequences at once (`--max-num-seqs`).
    pub const SEQUENCES: u64 = 1 << 24;
    /// Tensor-parallel ranks.
    pub const RANKS: u64 = 1 << 16;
    /// Tokens per KV block or page (`--block-size`; engines take at most 256).
    pub const BLOCK: u64 = 1 << 16;
    /// Bytes of one element.
    pub const ELEMENT: u64 = 64;
    /// Any size in bytes (a card, weights, a budget): 2^60, an exbibyte.
    pub const BYTES: u64 = 1 << 60;
}

/// Refuses a model or a request past [`bounds`], naming the value, the option or config field it
/// came from and the bound: an absurd value is a typo or a corrupt file, and the planner's sums and
/// products are then never wrapped.
fn check_bounds(m: &ServeModel, r: &ServeRequest) -> Result<(), EstimateError> {
    use crate::units::group_thousands;
    let check = |name: &str, v: u64, lo: u64, hi: u64| -> Result<(), EstimateError> {
        if (lo..=hi).contains(&v) {
            return Ok(());
        }
        Err(EstimateError::Input(format!(
            "{name} is {}, outside what the serving planner takes ({} to {}, far beyond any published model, card or engine setting): check the value",
            group_thousands(u128::from(v)),
            group_thousands(u128::from(lo)),
            group_thousands(u128::from(hi)),
        )))
    };
    let cfg = "the config's";
    check(&format!("{cfg} KV heads"), m.kv_heads, 1, bounds::DIMENSION)?;
    check(
        &format!("{cfg} head size"),
        m.head_size,
        1,
        bounds::DIMENSION,
    )?;
    check(
        &format!("{cfg} KV heads × head size"),
        m.kv_heads.saturating_mul(m.head_size),
        1,
        bounds::KV_WIDTH,
    )?;
    check(
        &format!("{cfg} hidden size"),
        m.hidden,
        0,
        bounds::DIMENSION,
    )?;
    check(
        &format!("{cfg} query width"),
        m.q_width,
        0,
        bounds::DIMENSION,
    )?;
    check(
        &format!("{cfg} MLP width"),
        m.intermediate,
        0,
        bounds::DIMENSION,
    )?;
    check(&format!("{cfg} vocabulary"), m.vocab, 0, bounds::DIMENSION)?;
    check(
        &format!("{cfg} layer count"),
        m.layers.len() as u64,
        0,
        bounds::LAYERS,
    )?;
    for w in m.layers.iter().flatten() {
        check(&format!("{cfg} sliding_window"), *w, 1, bounds::POSITIONS)?;
    }
    check("the dtype's bytes", m.dtype_bytes, 1, bounds::ELEMENT)?;
    check(
        "the model's weights in bytes",
        m.weights.get(),
        0,
        bounds::BYTES,
    )?;
    if let Ok(rot) = &m.rotary {
        check(
            "the rotary cache's positions",
            rot.positions,
            0,
            bounds::POSITIONS,
        )?;
        check("the rotary dimension", rot.dim, 0, bounds::DIMENSION)?;
    }
    check(
        "the device's memory in bytes",
        r.device_total.get(),
        MIB,
        bounds::BYTES,
    )?;
    if let Some(u) = r.gpu_memory_utilization
        && !(u > 0.0 && u <= 1.0)
    {
        return Err(EstimateError::Input(format!(
            "--gpu-memory-utilization {u} is not a share of the card: give a value above 0 and at most 1 (0.9 is the engines' default)"
        )));
    }
    check("max_model_len", r.max_model_len, 1, bounds::POSITIONS)?;
    if let Some(n) = r.max_num_seqs {
        check("--max-num-seqs", n, 1, bounds::SEQUENCES)?;
    }
    if let Some(n) = r.max_num_batched_tokens {
        check("--max-num-batched-tokens", n, 1, bounds::POSITIONS)?;
    }
    check(
        "--tensor-parallel-size",
        r.tensor_parallel_size,
        1,
        bounds::RANKS,
    )?;
    if let Some(n) = r.block_size {
        check("--block-size", n, 1, bounds::BLOCK)?;
    }
    for (name, v) in [
        ("--weights-memory", r.weights),
        ("--non-torch", r.non_torch),
        ("--kv-cache-memory", r.kv_cache_memory),
    ] {
        if let Some(b) = v {
            check(name, b.get(), 0, bounds::BYTES)?;
        }
    }
    if let Some(ActivationPeak::FromLog(b) | ActivationPeak::Predicted { bytes: b, .. }) =
        &r.activation_peak
    {
        check("--activation-peak", b.get(), 0, bounds::BYTES)?;
    }
    for n in &r.lengths {
        check("--concurrency-at", *n, 1, bounds::POSITIONS)?;
    }
    Ok(())
}

/// The plan for one GPU.
pub fn plan(m: &ServeModel, r: &ServeRequest) -> Result<Plan, EstimateError> {
    plan_with(m, r, &refusal::StartFacts::default())
}

/// The plan for one GPU, with what the start-up checks need beyond the model and the request.
pub fn plan_with(
    m: &ServeModel,
    r: &ServeRequest,
    facts: &refusal::StartFacts,
) -> Result<Plan, EstimateError> {
    check_bounds(m, r)?;
    if m.layers.is_empty() {
        return Err(EstimateError::Input(
            "the model has no attention layer with a KV cache: a serving engine allocates no KV pool for it".into(),
        ));
    }
    let release = release_note(r.engine, r.version).map_err(input_err)?;
    let mut p = match r.engine {
        Engine::Vllm => vllm(m, r, facts.free_at_start),
        Engine::Sglang => sglang(m, r),
    }?;
    if let Some(note) = release {
        p.notes.insert(0, note);
    }
    let term = |want: fn(&TermId) -> bool| {
        p.terms
            .iter()
            .find(|t| want(&t.id))
            .map_or(0, |t| t.bytes.get())
    };
    let held = refusal::Held {
        weights: term(|id| matches!(id, TermId::Weights { .. })),
        activation_peak: term(|id| *id == TermId::ServeActivationPeak),
        non_torch: term(|id| *id == TermId::NonTorchMemory),
    };
    p.summary.start = refusal::assess(m, r, &p.summary, facts, &held);
    p.notes.extend(p.summary.start.notes.iter().cloned());
    // Only V0's KV-capacity refusal comes after the engine has printed its pool's figures.
    if let Some(first) = p.summary.start.refusals.first() {
        let v0_after_sizing = r.engine == Engine::Vllm
            && r.version.is_some_and(|v| v < Version(0, 8, 0))
            && first.rule == "max_model_len_above_kv_capacity";
        if !v0_after_sizing {
            for note in &mut p.notes {
                if let Some(rest) = note.strip_prefix("the engine's own figures: ") {
                    *note = format!(
                        "the engine stops before printing its pool's figures; were it to start they would be: {rest}"
                    );
                }
            }
        }
    }
    Ok(p)
}

/// The vLLM releases whose rules the planner holds: 0.2.x through logs 12–13 (the rotary cache
/// per layer, 2023's budget), the source read from 0.5.5 to 0.11.0, then the `.0` of every
/// minor release to 0.34.0 (releases.rs).
const VLLM_OLDEST: Version = Version(0, 2, 0);
const VLLM_READ_FROM: Version = Version(0, 5, 5);
const VLLM_READ_TO: Version = releases::VLLM_DEFAULT;
const VLLM_NEWEST: Version = releases::VLLM_DEFAULT;
/// SGLang: 0.5.5's source, and 0.5.23's (releases.rs).
const SGLANG_READ: Version = Version(0, 5, 5);
const SGLANG_NEWEST: Version = releases::SGLANG_DEFAULT;

/// Which known release's rules apply to `--engine-version`, said in a note where it is not one
/// the planner read; a version outside the known range is refused (no rule of its is known).
pub fn release_note(engine: Engine, version: Option<Version>) -> Result<Option<String>, String> {
    let Some(v) = version else {
        return Ok(None);
    };
    match engine {
        Engine::Vllm => {
            if v < VLLM_OLDEST {
                Err(format!(
                    "--engine-version {v} is older than any vLLM release the planner knows (the oldest: 0.2.x, logs 12–13 in tests/fixtures/serving): give --engine-version {VLLM_OLDEST} or later"
                ))
            } else if v >= Version(VLLM_NEWEST.0, VLLM_NEWEST.1 + 1, 0) {
                Err(format!(
                    "--engine-version {v} is newer than any vLLM release the planner knows (the newest read: {VLLM_NEWEST}): its rules are not known; give --engine-version {VLLM_NEWEST} to plan by the newest known rules, and check the result against your engine's log"
                ))
            } else if v < VLLM_READ_FROM {
                Ok(Some(format!(
                    "vLLM {v} predates the oldest source read ({VLLM_READ_FROM}): {VLLM_READ_FROM}'s defaults and V0 budget rule apply, with 0.2.x's rotary cache per layer before 0.3.0, as logs 12–13 (0.2.x) check them; what changed between is not modelled"
                )))
            } else if v.1 > 11 && v.2 != 0 {
                Ok(Some(format!(
                    "vLLM {v}: the rules of {}.{}.0 apply (the .0 of each minor release was read from 0.11.0 to {VLLM_READ_TO}; patch releases were not)",
                    v.0, v.1
                )))
            } else {
                Ok(None)
            }
        }
        Engine::Sglang => {
            if v.0 != SGLANG_READ.0 || v.1 != SGLANG_READ.1 || v < SGLANG_READ || v > SGLANG_NEWEST
            {
                Err(format!(
                    "--engine-version {v} is not an SGLang release the planner knows: it read SGLang {SGLANG_READ} and {SGLANG_NEWEST} (the releases between are planned by {SGLANG_NEWEST}'s rules); give --engine-version {SGLANG_NEWEST}, or `estimate serve vllm` if {v} is a vLLM release"
                ))
            } else if v == SGLANG_READ || v == SGLANG_NEWEST {
                Ok(None)
            } else {
                Ok(Some(format!(
                    "SGLang {v}: the rules of SGLang {SGLANG_NEWEST} apply (only {SGLANG_READ} and {SGLANG_NEWEST} were read in full); the default mem_fraction_static changed between them (0.5.8: piecewise prefill graphs 8 MiB each when on; 0.5.19–0.5.21: the 20–35 GB tier's chunked prefill 2048 → 4096): pass the mem_fraction_static your log prints with --gpu-memory-utilization"
                )))
            }
        }
    }
}

/// What a serving plan leaves out, for each engine: said in every plan.
pub fn left_out(engine: Engine) -> Vec<String> {
    vec![
        match engine {
            Engine::Vllm => "memory of other processes on the GPU (vLLM ≥ 0.9 refuses to start unless free memory ≥ total × gpu_memory_utilization: give --free-at-start to check it)",
            Engine::Sglang => "memory of other processes on the GPU (SGLang sizes its pool from the memory free at start: another process's memory shrinks it)",
        }
        .into(),
        "the sampler's and CUDA graphs' buffers created after the KV pool".into(),
        "allocator fragmentation beyond what the engine's own profile measures".into(),
    ]
}

/// The environment variable with which the engine accepts a max_model_len above the model's.
pub fn long_len_env(engine: Engine) -> &'static str {
    match engine {
        Engine::Vllm => "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
        Engine::Sglang => "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",
    }
}

/// `--max-model-len` against the model's own limit (the config's max_position_embeddings, as the
/// planner derives it): above it the engine refuses to start (vLLM `config.py
/// _get_and_verify_max_len` 0.5.5, `config/model.py` 0.11.0:1763-; SGLang
/// `configs/model_config.py` ModelConfig 0.5.5) unless its environment variable is 1 (`allowed`),
/// when it only warns: a note then.
pub fn check_max_model_len(
    engine: Engine,
    len: u64,
    limit: u64,
    allowed: bool,
) -> Result<Option<String>, String> {
    if len <= limit {
        return Ok(None);
    }
    let (name, option, cite) = match engine {
        Engine::Vllm => (
            "vLLM",
            "--max-model-len",
            "config.py _get_and_verify_max_len 0.5.5, config/model.py 0.11.0:1763-",
        ),
        Engine::Sglang => (
            "SGLang",
            "--context-length",
            "configs/model_config.py ModelConfig 0.5.5",
        ),
    };
    let env = long_len_env(engine);
    if allowed {
        Ok(Some(format!(
            "max_model_len {len} is above the model's limit of {limit} (the config's max_position_embeddings): {env}=1 is set, so {name} starts with a warning ({cite}); outputs past {limit} positions may be wrong"
        )))
    } else {
        Err(format!(
            "--max-model-len {len} is above the model's limit of {limit} (the config's max_position_embeddings): {name} refuses it at start-up ({cite}) unless {env}=1 is set; give --max-model-len {limit} or less (the engine's {option}), or set {env}=1 here as for the engine"
        ))
    }
}

/// The dtype `--dtype auto` serves a float32 config in, by the engine's rule, with the rule cited:
/// vLLM ≤ 0.8 `config.py _get_and_verify_dtype` (0.5.5–0.7.3): float16, Gemma 2 bfloat16; vLLM
/// ≥ 0.9 `config/model.py _resolve_auto_dtype` (0.11.0:1647-1691): the platform's first supported
/// dtype, bfloat16 from compute capability 8.0, else float16 (`platforms/cuda.py` 0.11.0:63-72);
/// SGLang `configs/model_config.py _get_and_verify_dtype` (0.5.5): bfloat16 for a `gemma*`
/// model_type, else float16.
pub fn auto_dtype(
    engine: Engine,
    version: Option<Version>,
    model_type: &str,
    compute_major: Option<u32>,
) -> (crate::dtype::Dtype, String) {
    use crate::dtype::Dtype::{Bfloat16, Float16};
    let (dtype, why) = match engine {
        Engine::Sglang => {
            let d = if model_type.starts_with("gemma") {
                Bfloat16
            } else {
                Float16
            };
            (
                d,
                format!(
                    "{}, bfloat16 for a gemma* model_type (SGLang configs/model_config.py _get_and_verify_dtype 0.5.5)",
                    d.torch_name()
                ),
            )
        }
        Engine::Vllm if version.unwrap_or(VLLM_READ_TO) < Version(0, 9, 0) => {
            if model_type == "gemma2" {
                (
                    Bfloat16,
                    "bfloat16 for Gemma 2 (vllm/config.py _get_and_verify_dtype 0.5.5–0.8.x)"
                        .to_string(),
                )
            } else {
                (
                    Float16,
                    "float16, Gemma 2 excepted (vllm/config.py _get_and_verify_dtype 0.5.5–0.8.x)"
                        .to_string(),
                )
            }
        }
        Engine::Vllm => match compute_major {
            Some(c) if c < 8 => (
                Float16,
                format!(
                    "float16: the platform's first supported dtype on compute capability {c}.x (vllm/config/model.py _resolve_auto_dtype 0.11.0:1647-1691, platforms/cuda.py 0.11.0:63-72)"
                ),
            ),
            c => (
                Bfloat16,
                format!(
                    "bfloat16: the platform's first supported dtype {} (vllm/config/model.py _resolve_auto_dtype 0.11.0:1647-1691, platforms/cuda.py 0.11.0:63-72)",
                    if c.is_some() {
                        "from compute capability 8.0"
                    } else {
                        "from compute capability 8.0, ASSUMED (the card's capability is not known)"
                    }
                ),
            ),
        },
    };
    (
        dtype,
        format!(
            "the config's float32 served in {why}: --dtype auto downcasts it; --dtype float32 keeps it"
        ),
    )
}

fn input_err(text: String) -> EstimateError {
    EstimateError::Input(text)
}

/// The rotary cache's bytes on each rank and how they are counted: one buffer shared by every
/// layer from 0.3 (`get_rope` keeps one instance per setting in `_ROPE_DICT`), one per attention
/// layer before (0.2.x's `PagedAttentionWithRoPE`); none for SGLang (not read).
/// Where the KV element's width comes from.
fn kv_rule(r: &ServeRequest, m: &ServeModel) -> String {
    if r.kv_fp8 {
        "--kv-cache-dtype fp8".into()
    } else {
        format!("--kv-cache-dtype auto: the model's {}", m.dtype_rule)
    }
}

fn rotary_bytes(m: &ServeModel, r: &ServeRequest) -> (u64, String) {
    if r.engine != Engine::Vllm {
        return (0, String::new());
    }
    match m.rotary {
        Ok(rot) => {
            let version = r.version.unwrap_or(releases::VLLM_DEFAULT);
            let (copies, how) = if version >= Version(0, 3, 0) {
                (
                    1,
                    "one buffer for all layers (get_rope's _ROPE_DICT)".to_string(),
                )
            } else {
                let n = m.layers.len() as u64;
                (
                    n,
                    format!("one per attention layer ({n}: 0.2.x's PagedAttentionWithRoPE)"),
                )
            };
            let bytes = copies * rot.positions * rot.dim * m.dtype_bytes;
            (
                bytes,
                format!(
                    " + {} bytes of rotary cos/sin cache: {} positions × rotary_dim {} × {} bytes, {how}, whole on each rank (model_executor/layers/rotary_embedding.py)",
                    g(bytes),
                    g(rot.positions),
                    rot.dim,
                    m.dtype_bytes
                ),
            )
        }
        Err(ref why) => (
            0,
            format!("; vLLM's rotary cos/sin cache not counted: {why}"),
        ),
    }
}

/// The weights per GPU: the log's figure, else the model's weights ÷ TP, plus vLLM's rotary cache.
fn weights_term(m: &ServeModel, r: &ServeRequest, engine_line: &str) -> Term {
    let (rotary, rotary_text) = rotary_bytes(m, r);
    let (bytes, kind, formula) = match r.weights {
        Some(b) => (
            b,
            Kind::Calculated,
            format!("given (--weights-memory), as the engine's log prints it: {engine_line}"),
        ),
        None => {
            let tp = r.tensor_parallel_size;
            (
                Bytes(m.weights.get().div_ceil(tp) + rotary),
                if tp == 1 {
                    Kind::Calculated
                } else {
                    Kind::Assumed
                },
                if tp == 1 {
                    format!(
                        "{} bytes: the model's weights (estimate's weight terms) in {}{rotary_text}; the engine measures the torch bytes load_model allocates",
                        g(m.weights.get()),
                        m.dtype_rule
                    )
                } else {
                    format!(
                        "{} bytes in {} ÷ TP {tp}: column/row-parallel linears and vocab-parallel embeddings split evenly (norms, replicated, counted split: a few MB low){rotary_text}",
                        g(m.weights.get()),
                        m.dtype_rule
                    )
                },
            )
        }
    };
    Term::new(
        TermId::Weights {
            dtype: None,
            shard: None,
        },
        bytes,
        kind,
        formula,
    )
    .input("from_log", r.weights.is_some())
}

/// A given budget must fit on the card beside the weights: the engine would fail to allocate more.
/// Refused when the weights are the log's or calculated from the config at TP 1 (or the budget
/// alone exceeds the card); with weights ASSUMED split by TP, said in a note instead.
fn check_given_budget(
    r: &ServeRequest,
    weights: &Term,
    engine: &str,
    notes: &mut Vec<String>,
) -> Result<(), EstimateError> {
    let Some(given) = r.kv_cache_memory else {
        return Ok(());
    };
    let total = r.device_total.get();
    let room = total.saturating_sub(weights.bytes.get());
    if given.get() <= room {
        return Ok(());
    }
    let text = format!(
        "--kv-cache-memory {} bytes ({}) is more than the card can hold beside the weights: device total {} − weights {} = {} bytes ({}); {engine} would fail to allocate it (CUDA out of memory)",
        g(given.get()),
        gib(given.get()),
        g(total),
        g(weights.bytes.get()),
        g(room),
        gib(room),
    );
    if weights.kind != Kind::Assumed || given.get() > total {
        Err(input_err(format!(
            "{text}: give at most {} bytes, or split the model with --tensor-parallel-size",
            g(room)
        )))
    } else {
        notes.push(format!(
            "{text} if the weights ASSUMED here are the model's: pass the log's --weights-memory to check"
        ));
        Ok(())
    }
}

fn non_torch_term(r: &ServeRequest, cite: &str) -> Term {
    match r.non_torch {
        Some(b) => Term::new(
            TermId::NonTorchMemory,
            b,
            Kind::Calculated,
            format!("given (--non-torch), as the engine's log prints it ({cite})"),
        ),
        None => {
            let tp = r.tensor_parallel_size;
            let bytes = if tp > 1 { 1536 * MIB } else { 512 * MIB };
            Term::new(
                TermId::NonTorchMemory,
                Bytes(bytes),
                Kind::Assumed,
                format!(
                    "ASSUMED: {} (cuBLAS workspaces{}) for TP {tp}; the logs in tests/fixtures/serving show 0.16–1.79 GiB at TP 1 ({cite}); pass the log's figure with --non-torch",
                    gib(bytes),
                    if tp > 1 { ", NCCL and custom all-reduce buffers" } else { "" }
                ),
            )
        }
    }
    .input("from_log", r.non_torch.is_some())
}

/// `free_at_start`: what the device had free before the engine started (`--free-at-start`), which
/// 0.8.x's V1 charges to its budget.
/// 0.8.x's V1 counts everything used on the device that is not its torch allocations as its own
/// non-torch memory, other processes' included (v1/worker/gpu_worker.py determine_available_memory
/// 0.8.5:190-203: `total_allocated_bytes = mem_get_info()[1] - mem_get_info()[0]`; fixed by
/// PR #19312 in 0.9): what was in use before the engine started is added to the term.
fn other_processes_charged(mut non_torch: Term, total: u64, free_at_start: Bytes) -> Term {
    let others = total.saturating_sub(free_at_start.get());
    if others > 0 {
        non_torch.formula = format!(
            "{} + {} bytes in use before the engine started (device total − --free-at-start {}): 0.8.x's V1 charges other processes' memory to its budget as non-torch memory (v1/worker/gpu_worker.py determine_available_memory 0.8.5:190-203; fixed in 0.9 by PR #19312)",
            non_torch.formula,
            g(others),
            g(free_at_start.get())
        );
        non_torch.bytes = Bytes(non_torch.bytes.get().saturating_add(others));
    }
    non_torch
}

/// What is in use on the device at 0.34.0's first snapshot (CUDA context, NCCL, cuBLAS handles,
/// other processes), which its device bound leaves out: ASSUMED 0.5 GiB, plus what was in use
/// before the engine started when `--free-at-start` is given.
fn extensible_context(free_at_start: Option<Bytes>, total: u64) -> (u64, String) {
    let others = free_at_start.map_or(0, |f| total.saturating_sub(f.get()));
    (
        GIB / 2 + others,
        format!(
            "context {} bytes: ASSUMED 0.5 GiB of CUDA context, NCCL and cuBLAS handles created before the first snapshot (v1/worker/gpu_worker.py init_device 0.34.0:500-548){}",
            g(GIB / 2 + others),
            if others > 0 {
                format!(
                    " + {} bytes in use before the engine started (--free-at-start)",
                    g(others)
                )
            } else {
                String::new()
            }
        ),
    )
}

fn vllm(
    m: &ServeModel,
    r: &ServeRequest,
    free_at_start: Option<Bytes>,
) -> Result<Plan, EstimateError> {
    let mut notes = Vec::new();
    let mut defaults = Vec::new();
    let version = r.version.unwrap_or(releases::VLLM_DEFAULT);
    if r.version.is_none() {
        defaults.push(format!(
            "--engine-version: the rules of vLLM {} (the newest release read)",
            releases::VLLM_DEFAULT
        ));
    }
    // 0.34.0 on: the extensible KV cache, unless a budget is given (config/vllm.py 0.34.0:3201-3206).
    let extensible = releases::extensible_kv_cache(version) && r.kv_cache_memory.is_none();
    let v0 = version < Version(0, 8, 0);
    let grouped = version >= Version(0, 9, 0);
    let generation = if v0 {
        "V0 (vllm/worker/worker.py); V1 was opt-in before 0.8 (VLLM_USE_V1=1) and is not modelled for those releases".to_string()
    } else {
        "V1 (vllm/v1/worker/gpu_worker.py, vllm/v1/core/kv_cache_utils.py)".to_string()
    };
    let tp = r.tensor_parallel_size;
    let total = r.device_total.get();

    let u = match r.gpu_memory_utilization {
        Some(u) => u,
        None => {
            let (u, why) = releases::vllm_gmu_default(version);
            let (u, why) = if releases::extensible_kv_cache(version) && !extensible {
                (
                    0.92,
                    "0.92: --kv-cache-memory turns the extensible KV cache off (config/cache.py 0.34.0:186)",
                )
            } else {
                (u, why)
            };
            defaults.push(format!("--gpu-memory-utilization {u} ({why})"));
            u
        }
    };
    let len = r.max_model_len;
    let sliding = m.layers.iter().any(Option::is_some);
    // max_num_batched_tokens, max_num_seqs, chunked prefill and the block size as the release's
    // `vllm serve` resolves them (defaults.rs).
    let batch = defaults::vllm_batch(
        version,
        &r.card,
        total,
        len,
        sliding,
        r.max_num_batched_tokens,
        r.max_num_seqs,
    );
    let (mnbt, seqs) = (batch.max_num_batched_tokens, batch.max_num_seqs);
    defaults.extend(batch.lines);
    let (block_size, block_line) =
        defaults::vllm_block_size(version, m.mla, r.compute_major, r.block_size);
    defaults.extend(block_line);
    if !r.enforce_eager {
        defaults.push(defaults::vllm_cuda_graphs(version, seqs));
    }
    let kv_bytes = if r.kv_fp8 { 1 } else { m.dtype_bytes };
    let kv_heads = if m.mla { 1 } else { (m.kv_heads / tp).max(1) };
    let coef = if m.mla && version >= Version(0, 7, 0) {
        1
    } else {
        2
    };
    let page = coef * block_size * kv_heads * m.head_size * kv_bytes;
    let layers = m.layers.len() as u64;

    let profile_cite = if v0 {
        "worker/model_runner.py profile_run, V0"
    } else {
        "v1/worker/gpu_model_runner.py profile_run → _dummy_run(max_num_tokens) + _dummy_sampler_run"
    };
    let weights = weights_term(
        m,
        r,
        if v0 {
            "\"Loading model weights took X GB\""
        } else {
            "\"Model loading took X GiB\""
        },
    );
    check_given_budget(r, &weights, "vLLM", &mut notes)?;
    let act = activation_term(m, r, mnbt, seqs, profile_cite);
    if v0 && tp > 1 && matches!(r.activation_peak, Some(ActivationPeak::FromLog(_))) {
        // worker/model_runner.py 0.6.4:1690: non-driver ranks return before sampling, so their
        // peak is lower; the executor keeps the smallest block count (executor_base.py, the
        // minimum over workers' determine_num_available_blocks).
        notes.push("with tensor parallelism V0 keeps the smallest block count over the ranks: the driver's, whose profile run alone samples (its activation peak is the largest); give the driver's figures (the profiling line without \"(VllmWorkerProcess pid=…)\"), a worker's plan too many blocks".into());
    }
    let non_torch = non_torch_term(r, "memory_profiling in vllm/utils.py: non_torch_increase");
    let non_torch = match free_at_start {
        Some(free) if !v0 && !grouped => other_processes_charged(non_torch, total, free),
        None if !v0 && !grouped => {
            notes.push(format!("vLLM {version}'s V1 charges every byte in use on the device to its budget, other processes' included (fixed in 0.9): on a shared GPU give what is free before the engine starts with --free-at-start"));
            non_torch
        }
        _ => non_torch,
    };
    let graphs_charged = (releases::graphs_estimated(version) || extensible) && !r.enforce_eager;
    let graphs = if r.enforce_eager {
        Term::new(
            TermId::CudaGraphs,
            Bytes(0),
            Kind::Calculated,
            "--enforce-eager: no CUDA graph is captured",
        )
    } else {
        // Charged (0.20 on): vLLM's own estimate, which logs show at 0.13–0.78 GiB for 2–9B
        // models on 24–48 GB cards; before, captured after the pool in the headroom, where the
        // 1 GiB of vLLM's own warning is the prudent figure.
        let (bytes, what) = if extensible {
            (
                GIB / 2,
                "ASSUMED 0.5 GiB: 0.34.0's extensible KV cache sizes the pool after capture, from the memory then free, so the graphs' memory comes out of it (v1/worker/gpu_worker.py 0.34.0:1103-1235 compile_or_warm_up_model → measure_kv_cache_blocks; profile_cudagraph_memory returns 0, v1/worker/gpu/model_runner.py 0.34.0:1121-1125): read \"Graph capturing finished … took X GiB\" from your engine's log",
            )
        } else if graphs_charged {
            (
                GIB / 2,
                "ASSUMED 0.5 GiB: from 0.20 vLLM estimates the graphs' memory before sizing the pool and charges it to the KV budget (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, default 1 in the 0.20.0 wheel; v1/worker/gpu_worker.py: the two largest graphs per mode captured, the rest extrapolated); its logged estimates: 0.52 GiB (Qwen3-8B, 24 GB card), 0.64 and 0.78 GiB (Qwen3.5-4B and 9B), 0.13–0.17 GiB (3090s), none read on an H100 (max_num_seqs 1024 captures more): read \"CUDA graph memory\" from your engine's log",
            )
        } else {
            (
                GIB,
                "ASSUMED 1 GiB (vLLM 0.5.5 worker/model_runner.py:1185: \"CUDA graphs can take additional 1~3 GiB memory per GPU\"); captured AFTER the KV pool is sized (initialize_cache/compile_or_warm_up_model): not in the KV budget, it must fit in the (1 − gpu_memory_utilization) headroom",
            )
        };
        Term::new(TermId::CudaGraphs, Bytes(bytes), Kind::Assumed, what)
    };
    let graphs = match releases::v2_runner_graphs_zero(version, &m.runner) {
        Some(why) if graphs_charged && !extensible => {
            Term::new(TermId::CudaGraphs, Bytes(0), Kind::Calculated, why)
        }
        _ if graphs_charged => graphs,
        _ => graphs.info(),
    };

    let requested = (total as f64 * u) as i128;
    let mut budget = requested
        - weights.bytes.get() as i128
        - act.bytes.get() as i128
        - non_torch.bytes.get() as i128;
    if graphs_charged {
        budget -= graphs.bytes.get() as i128;
    }
    if extensible {
        let (context, context_rule) = extensible_context(free_at_start, total);
        let held = weights.bytes.get() + non_torch.bytes.get() + graphs.bytes.get();
        let (b, by_request) = releases::extensible_budget(total, u, held, act.bytes.get(), context);
        budget = b;
        notes.push(format!(
            "0.34.0 sizes its pool after warm-up and capture: min(total × gpu_memory_utilization − (weights + non-torch + CUDA graphs), total − context − the same − margin max(1 GiB, 0.75 × activation peak)) − activation peak, with the {context_rule}; here the {} bound applies",
            if by_request { "gpu_memory_utilization" } else { "device" }
        ));
    }
    let (weights, act, non_torch, graphs) = if let Some(given) = r.kv_cache_memory {
        budget = given.get() as i128;
        (weights.info(), act.info(), non_torch.info(), graphs.info())
    } else {
        (weights, act, non_torch, graphs)
    };
    let budget_rule = if r.kv_cache_memory.is_some() {
        given_budget_rule(version)
    } else if extensible {
        format!(
            "min(total × {u} − (weights + non-torch + CUDA graphs), total − context − (weights + non-torch + CUDA graphs) − max(1 GiB, 0.75 × activation peak)) − activation peak (v1/worker/extensible_kv_cache.py measure_kv_cache_bytes 0.34.0:592-618, the extensible KV cache)"
        )
    } else if releases::graphs_estimated(version) && !r.enforce_eager {
        format!(
            "math.ceil(total × {u}) − (weights + activation peak + non-torch) − CUDA graph estimate (v1/worker/gpu_worker.py determine_available_memory 0.20.0–0.33.0, v1/worker/utils.py request_memory)"
        )
    } else if v0 {
        "total × gpu_memory_utilization − (weights + activation peak + non-torch) (worker/worker.py determine_num_available_blocks, 0.6.6–0.10; ≤0.6.3 as total×u − peak since init)"
            .into()
    } else if version < Version(0, 9, 0) {
        "total × gpu_memory_utilization − (torch peak + non-torch) (v1/worker/gpu_worker.py determine_available_memory 0.8.5:165-212; other processes' memory is charged too)"
            .into()
    } else {
        "requested_memory − non_kv_cache_memory = total × gpu_memory_utilization − (weights + activation peak + non-torch) (v1/worker/gpu_worker.py 0.11.0:254-300)"
            .into()
    };
    if budget <= 0 {
        notes.push(format!(
            "the KV budget is {} bytes ({}): vLLM refuses to start (\"No available memory for the cache blocks\"); raise --gpu-memory-utilization, lower --max-num-batched-tokens/--max-num-seqs, or use more GPUs (--tensor-parallel-size)",
            budget,
            signed_gib(budget)
        ));
    }
    let avail = budget.max(0) as u64;

    // Layer groups and blocks.
    let n_sw = m.layers.iter().filter(|l| l.is_some()).count() as u64;
    let n_full = layers - n_sw;
    let window = m.layers.iter().flatten().copied().max();
    let hybrid = grouped && n_sw > 0 && n_full > 0;
    let (num_blocks, tokens, per_request_blocks, block_rule): (
        u64,
        u64,
        Box<dyn Fn(u64) -> u64>,
        String,
    );
    if hybrid {
        let gs = n_sw.min(n_full);
        let groups_full = cdiv(n_full, gs);
        let groups_sw = cdiv(n_sw, gs);
        let groups = groups_full + groups_sw;
        num_blocks = avail / page / gs;
        tokens = num_blocks / groups * block_size;
        let w = window.unwrap_or(0);
        per_request_blocks = Box::new(move |l| {
            groups_full * cdiv(l, block_size)
                + groups_sw * (cdiv((w - 1 + mnbt).min(l), block_size) + 1)
        });
        block_rule = format!(
            "hybrid groups (kv_cache_utils.py _get_kv_cache_groups_uniform_page_size 0.11.0:894-1002): {n_full} full + {n_sw} sliding layers, group_size {gs}, {groups} groups; blocks = budget // page // {gs}; tokens = blocks // {groups} × {block_size}"
        );
    } else {
        num_blocks = avail / page / layers;
        tokens = num_blocks * block_size;
        let sw_only = !v0 && n_full == 0 && grouped;
        let w = window.unwrap_or(0);
        per_request_blocks = if sw_only {
            Box::new(move |l| cdiv((w - 1 + mnbt).min(l), block_size) + 1)
        } else {
            Box::new(move |l| cdiv(l, block_size))
        };
        block_rule = if v0 {
            format!(
                "V0: budget // (layers {layers} × page) (worker/worker.py; cache_engine.py get_cache_block_size — no sliding-window reduction)"
            )
        } else {
            format!(
                "budget // page // layers {layers} (kv_cache_utils.py get_num_blocks 0.11.0:824){}",
                if n_sw > 0 && !grouped {
                    "; 0.8.x turns sliding layers into full attention (unify_hybrid_kv_cache_specs 0.8.5:657-681)"
                } else {
                    ""
                }
            )
        };
    }
    let concurrency_at = |l: u64| -> f64 {
        if v0 || !grouped {
            // V0 executor_base.py 0.7.3:114-117; V1 0.8.5 kv_cache_utils.py:633-636.
            num_blocks as f64 * block_size as f64 / l as f64
        } else {
            num_blocks as f64 / per_request_blocks(l) as f64
        }
    };
    let mut lengths = vec![len];
    for l in &r.lengths {
        if *l < len && !lengths.contains(l) {
            lengths.push(*l);
        }
    }
    let concurrency: Vec<(u64, f64)> = lengths.iter().map(|&l| (l, concurrency_at(l))).collect();
    // 0.21.0 on prints int(max_concurrency × max_model_len) (releases.rs).
    let tokens = if releases::tokens_from_concurrency(version) {
        (concurrency[0].1 * len as f64) as u64
    } else {
        tokens
    };

    let kv_pool = Bytes(num_blocks * page * if hybrid { n_sw.min(n_full) } else { layers });
    let kv = Term::new(
        TermId::PagedKvCache { engine: Engine::Vllm },
        kv_pool,
        Kind::Calculated,
        format!(
            "{} blocks × {} bytes per block and layer ({}{} × block_size {block_size} × {kv_heads} KV head(s) per GPU × head size {} × {kv_bytes} bytes ({}){}) × {} layer(s); budget {} bytes = {budget_rule}; {block_rule}",
            g(num_blocks),
            g(page),
            if coef == 1 { "MLA: one latent, " } else { "2 (K and V)" },
            if coef == 1 { "1" } else { "" },
            m.head_size,
            kv_rule(r, m),
            if m.mla { ", not split by TP" } else { ", max(1, KV heads ÷ TP)" },
            if hybrid { n_sw.min(n_full) } else { layers },
            g(avail),
        ),
    )
    .input("budget_bytes", budget.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
    .input("num_blocks", num_blocks)
    .input("page_size_bytes", page);
    if num_blocks > 0 {
        notes.push(format!(
            "the engine's own figures: \"# GPU blocks: {}\", \"GPU KV cache size: {} tokens\", \"Maximum concurrency for {} tokens per request: {:.2}x\"",
            num_blocks,
            g(tokens),
            len,
            concurrency[0].1
        ));
    } else if v0 {
        notes.push("the engine's own figures: it logs \"# GPU blocks: 0\", then refuses to start (worker/worker.py raise_if_cache_size_invalid, 0.5.5–0.7.3)".into());
    } else {
        notes.push("the engine prints no KV figure: it refuses before sizing the pool (v1/core/kv_cache_utils.py check_enough_kv_cache_memory 0.8.5:510-552, 0.11.0:678-724)".into());
    }
    if r.activation_peak.is_none() && r.kv_cache_memory.is_none() {
        notes.push("the activation peak is a stated rule: read it from the engine's log (--activation-peak SIZE) or predict it by running the model's forward at max_num_batched_tokens on data-less tensors (--activation-peak predict)".into());
    }
    // The driver's figure or the label is not what vLLM reads; CUDA's total (a catalog reading,
    // PyTorch's total_memory or --device-total) is.
    use crate::cards::CapacitySource;
    let not_cuda = [CapacitySource::DriverReported, CapacitySource::VendorLabel]
        .iter()
        .any(|s| r.device_total_source.contains(s.label()));
    notes.push(if not_cuda {
        format!(
            "the device total is {} ({}); vLLM reads torch.cuda.mem_get_info()[1], a little below the driver's figure: pass the log's total_gpu_memory with --device-total",
            Bytes(total).both(),
            r.device_total_source
        )
    } else {
        format!(
            "the device total is {} ({}): CUDA's total, the torch.cuda.mem_get_info()[1] vLLM reads; a log's total_gpu_memory given with --device-total replaces it",
            Bytes(total).both(),
            r.device_total_source
        )
    });
    // A given budget is not carved out of total × gpu_memory_utilization: no headroom to state.
    if !graphs_charged && !r.enforce_eager && r.kv_cache_memory.is_none() {
        let headroom = total as i128 - requested;
        notes.push(format!(
            "CUDA graphs and anything else outside the instance must fit in the headroom total × (1 − {u}) = {} bytes",
            g(headroom.max(0) as u128)
        ));
    }
    Ok(Plan {
        terms: vec![weights, act, non_torch, kv, graphs],
        summary: ServingSummary {
            engine: Engine::Vllm,
            rules_of: format!("vLLM {version}"),
            generation,
            card: r.card.clone(),
            device_total_bytes: Bytes(total),
            device_total_source: r.device_total_source.clone(),
            gpu_memory_utilization: u,
            max_model_len: len,
            max_num_seqs: Some(seqs),
            max_num_batched_tokens: Some(mnbt),
            tensor_parallel_size: tp,
            block_size,
            kv_dtype_bytes: kv_bytes,
            page_bytes: Bytes(page),
            kv_budget_bytes: budget,
            num_blocks: Some(num_blocks),
            kv_tokens: tokens,
            concurrency,
            defaults,
            start: refusal::StartCheck::default(),
        },
        notes,
    })
}

/// SGLang 0.5.5 `_handle_gpu_memory_settings` (server_args.py 0.5.5:665-830): the default
/// mem_fraction_static from the device's MiB, TP and the chunked-prefill size.
fn sglang_default_fraction(total: u64, tp: u64) -> (f64, String) {
    let mib = (total / MIB) as f64;
    let (chunk, bs) = match total / GIB {
        0..20 => (2048.0, 8.0),
        20..35 => (2048.0, if tp < 4 { 24.0 } else { 80.0 }),
        35..60 => (4096.0, if tp < 4 { 32.0 } else { 160.0 }),
        _ => (8192.0, if tp < 4 { 256.0 } else { 512.0 }),
    };
    let chunk = if total >= 160 * GIB { 16384.0 } else { chunk };
    let mut reserved = 512.0 + f64::max(chunk, 2048.0) * 1.5 + bs * 2.0 + tp as f64 / 8.0 * 1024.0;
    if mib > 60.0 * 1024.0 {
        reserved = reserved.max(10.0 * 1024.0);
    }
    let m = ((mib - reserved) / mib * 1000.0).round() / 1000.0;
    (
        m,
        format!(
            "round((device MiB {mib} − reserved {reserved} MiB) / device MiB, 3) (server_args.py 0.5.5 _handle_gpu_memory_settings: chunked_prefill_size {chunk}, cuda_graph_max_bs {bs})"
        ),
    )
}

fn sglang(m: &ServeModel, r: &ServeRequest) -> Result<Plan, EstimateError> {
    let mut notes = Vec::new();
    let mut defaults = Vec::new();
    let version = r.version.unwrap_or(releases::SGLANG_DEFAULT);
    if r.version.is_none() {
        defaults.push(format!(
            "--engine-version: the rules of SGLang {} (the newest release read)",
            releases::SGLANG_DEFAULT
        ));
    }
    if r.block_size.is_some() || r.max_num_seqs.is_some() || r.activation_peak.is_some() {
        return Err(input_err(
            "--block-size, --max-num-seqs and --activation-peak are vLLM's: SGLang has page size 1, sizes its pool without a profile run and derives max_running_requests; drop them for SGLang".into(),
        ));
    }
    if r.enforce_eager {
        return Err(input_err(
            "--enforce-eager is vLLM's option: SGLang's is --disable-cuda-graph, which this planner does not model (SGLang's pool does not depend on it: its CUDA graphs are captured in the (1 − mem_fraction_static) headroom, and the default mem_fraction_static of 0.5.5 reserves room for them); drop --enforce-eager for SGLang".into(),
        ));
    }
    let tp = r.tensor_parallel_size;
    let total = r.device_total.get();
    let frac = match r.gpu_memory_utilization {
        Some(f) => f,
        None => {
            let (f, why) = if version > Version(0, 5, 5) {
                releases::sglang_default_fraction_0523(total, tp, m.mla)
            } else {
                sglang_default_fraction(total, tp)
            };
            defaults.push(format!("mem_fraction_static {f}: {why}"));
            f
        }
    };
    let kv_bytes = if r.kv_fp8 { 1 } else { m.dtype_bytes };
    let layers = m.layers.len() as u64;
    let cell = if m.mla {
        m.head_size * layers * kv_bytes
    } else {
        (m.kv_heads / tp).max(1) * m.head_size * layers * 2 * kv_bytes
    };
    let weights = weights_term(m, r, "\"Load weight end. … mem usage=X GB\"");
    check_given_budget(r, &weights, "SGLang", &mut notes)?;
    let non_torch = non_torch_term(
        r,
        "free memory before the weights minus after them, less the weights: CUDA context, NCCL",
    );
    let requested = (total as f64 * frac) as i128;
    let budget = match r.kv_cache_memory {
        Some(given) => given.get() as i128,
        None => requested - weights.bytes.get() as i128 - non_torch.bytes.get() as i128,
    };
    let (weights, non_torch) = if r.kv_cache_memory.is_some() {
        (weights.info(), non_torch.info())
    } else {
        (weights, non_torch)
    };
    let tokens = (budget.max(0) as u64) / cell;
    if budget <= 0 {
        notes.push(format!("the KV budget is {budget} bytes ({}): SGLang refuses to start; raise --gpu-memory-utilization (mem_fraction_static) or add GPUs", signed_gib(budget)));
    }
    let mut lengths = vec![r.max_model_len];
    for l in &r.lengths {
        if *l < r.max_model_len && !lengths.contains(l) {
            lengths.push(*l);
        }
    }
    let concurrency = lengths
        .iter()
        .map(|&l| (l, tokens as f64 / l as f64))
        .collect();
    let kv = Term::new(
        TermId::PagedKvCache { engine: Engine::Sglang },
        Bytes(tokens * cell),
        Kind::Calculated,
        format!(
            "{} tokens × cell {} bytes ({}); budget {}",
            g(tokens),
            g(cell),
            if m.mla {
                format!("MLA: (kv_lora_rank + qk_rope_head_dim) {} × {layers} layers × {kv_bytes} bytes ({}), not split by TP", m.head_size, kv_rule(r, m))
            } else {
                format!("max(1, KV heads ÷ TP) {} × head_dim {} × {layers} layers × 2 × {kv_bytes} bytes ({})", (m.kv_heads / tp).max(1), m.head_size, kv_rule(r, m))
            },
            if r.kv_cache_memory.is_some() {
                "given (--kv-cache-memory: a log's K size + V size)".to_string()
            } else {
                format!("= free memory at start × mem_fraction_static {frac} − (weights + non-torch) with the free memory taken as the device total (model_executor/model_runner.py profile_max_num_token {version})")
            }
        ),
    )
    .input("budget_bytes", budget.clamp(i64::MIN as i128, i64::MAX as i128) as i64);
    if tokens > 0 {
        notes.push(format!("the engine's own figure: \"KV Cache is allocated. #tokens: {tokens}\" (max_total_num_tokens)"));
    } else {
        notes.push("the engine prints no KV figure: it raises \"Not enough memory. Please try to increase --mem-fraction-static.\" (model_executor/model_runner.py init_memory_pool 0.5.5)".into());
    }
    notes.push("SGLang runs no activation profile: activations and CUDA graphs must fit in (1 − mem_fraction_static) of the free memory".into());
    Ok(Plan {
        terms: vec![weights, non_torch, kv],
        summary: ServingSummary {
            engine: Engine::Sglang,
            rules_of: format!("SGLang {version}"),
            generation: "model_executor/model_runner.py profile_max_num_token".into(),
            card: r.card.clone(),
            device_total_bytes: Bytes(total),
            device_total_source: r.device_total_source.clone(),
            gpu_memory_utilization: frac,
            max_model_len: r.max_model_len,
            max_num_seqs: None,
            max_num_batched_tokens: r.max_num_batched_tokens,
            tensor_parallel_size: tp,
            block_size: 1,
            kv_dtype_bytes: kv_bytes,
            page_bytes: Bytes(cell),
            kv_budget_bytes: budget,
            num_blocks: None,
            kv_tokens: tokens,
            concurrency,
            defaults,
            start: refusal::StartCheck::default(),
        },
        notes,
    })
}

/// What a given budget is, by release: vLLM's own `--kv-cache-memory` exists from 0.10 (it skips
/// the profile: `v1/worker/gpu_worker.py` 0.11.0:235-251); before, only a log's figure.
fn given_budget_rule(version: Version) -> String {
    if version >= Version(0, 10, 0) {
        "given (--kv-cache-memory): vLLM's own --kv-cache-memory skips the profile (v1/worker/gpu_worker.py 0.11.0:235-251), or a log's \"Available KV cache memory\"; the start-up terms are shown for information".into()
    } else {
        format!(
            "given (--kv-cache-memory): a log's \"Available KV cache memory\" (vLLM {version} has no --kv-cache-memory of its own: it came in 0.10); the start-up terms are shown for information"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama-3-8B's KV layout (32 × 8 KV heads × 128, bf16).
    fn llama(layers: Vec<Option<u64>>) -> ServeModel {
        ServeModel {
            kv_heads: 8,
            head_size: 128,
            mla: false,
            layers,
            hidden: 4096,
            q_width: 4096,
            intermediate: 14336,
            vocab: 128_256,
            dtype_bytes: 2,
            dtype_rule: "bfloat16 from config.json torch_dtype".into(),
            weights: Bytes(16 * GIB),
            rotary: Ok(Rotary {
                positions: 8192,
                dim: 128,
            }),
            encoder: None,
            runner: Default::default(),
        }
    }

    fn request(version: &str) -> ServeRequest {
        ServeRequest {
            engine: Engine::Vllm,
            version: Some(Version::parse(version).unwrap()),
            card: "H100 80GB".into(),
            device_total: Bytes(80 * GIB),
            device_total_source: "test".into(),
            compute_major: Some(9),
            gpu_memory_utilization: Some(0.9),
            max_model_len: 8192,
            max_model_len_source: "test".into(),
            max_num_seqs: Some(256),
            max_num_batched_tokens: Some(8192),
            tensor_parallel_size: 1,
            kv_fp8: false,
            block_size: None,
            enforce_eager: false,
            weights: None,
            activation_peak: None,
            non_torch: None,
            kv_cache_memory: Some(Bytes(32 * GIB)),
            lengths: vec![],
        }
    }

    #[test]
    fn the_rotary_cache_is_one_buffer_from_0_3_one_per_layer_before_and_not_sglangs() {
        let m = llama(vec![None; 32]);
        let mut r = request("0.6.4");
        let one = 8192 * 128 * 2;
        assert_eq!(rotary_bytes(&m, &r).0, one);
        r.version = Some(Version(0, 2, 5));
        assert_eq!(rotary_bytes(&m, &r).0, 32 * one);
        r.engine = Engine::Sglang;
        assert_eq!(rotary_bytes(&m, &r).0, 0);
        r.engine = Engine::Vllm;
        let not_sized = ServeModel {
            rotary: Err("rope_scaling yarn sizes its cache by its own rule".into()),
            ..m
        };
        let (bytes, text) = rotary_bytes(&not_sized, &r);
        assert_eq!(bytes, 0);
        assert!(text.contains("not counted: rope_scaling yarn"), "{text}");
    }

    #[test]
    fn block_size_defaults_to_16_and_to_64_for_mla_from_0_9() {
        let dense = plan(&llama(vec![None; 32]), &request("0.11.0")).unwrap();
        assert_eq!(dense.summary.block_size, 16);
        // 2 × 16 × 8 × 128 × 2 bytes per block and layer.
        assert_eq!(dense.summary.page_bytes.get(), 65_536);
        assert_eq!(dense.summary.num_blocks, Some(32 * GIB / 65_536 / 32));
        let mut mla = llama(vec![None; 27]);
        (mla.mla, mla.kv_heads, mla.head_size) = (true, 1, 512 + 64);
        let p = plan(&mla, &request("0.9.2")).unwrap();
        assert_eq!(p.summary.block_size, 64);
        // One latent (no K/V pair), not split by TP: 64 × 576 × 2 bytes.
        assert_eq!(p.summary.page_bytes.get(), 64 * 576 * 2);
        let mut blackwell = request("0.11.0");
        blackwell.compute_major = Some(10);
        assert_eq!(plan(&mla, &blackwell).unwrap().summary.block_size, 128);
        assert_eq!(
            plan(&mla, &request("0.8.5")).unwrap().summary.block_size,
            16
        );
        let mut r = request("0.9.2");
        r.tensor_parallel_size = 8;
        assert_eq!(
            plan(&mla, &r).unwrap().summary.page_bytes.get(),
            64 * 576 * 2
        );
    }

    #[test]
    fn fp8_kv_halves_the_page_and_kv_heads_below_tp_are_replicated() {
        let m = llama(vec![None; 32]);
        let mut r = request("0.11.0");
        r.kv_fp8 = true;
        assert_eq!(plan(&m, &r).unwrap().summary.page_bytes.get(), 32_768);
        assert_eq!(plan(&m, &r).unwrap().summary.kv_dtype_bytes, 1);
        // 8 KV heads over TP 16: one head per GPU (max(1, 8 // 16)), as models/llama.py keeps it.
        let mut r = request("0.11.0");
        r.tensor_parallel_size = 16;
        assert_eq!(
            plan(&m, &r).unwrap().summary.page_bytes.get(),
            2 * 16 * 128 * 2
        );
        r.tensor_parallel_size = 4;
        assert_eq!(
            plan(&m, &r).unwrap().summary.page_bytes.get(),
            2 * 16 * 2 * 128 * 2
        );
    }

    #[test]
    fn sliding_and_full_layers_are_grouped_from_0_9_and_unified_before() {
        // gpt-oss-20b's pattern: 12 sliding (window 128) and 12 full layers.
        let layers: Vec<Option<u64>> = (0..24)
            .map(|i| if i % 2 == 0 { Some(128) } else { None })
            .collect();
        let m = llama(layers);
        let p = plan(&m, &request("0.11.0")).unwrap();
        let page = p.summary.page_bytes.get();
        // group_size 12, two groups; blocks = budget // page // 12; tokens = blocks // 2 × 16.
        let blocks = 32 * GIB / page / 12;
        assert_eq!(p.summary.num_blocks, Some(blocks));
        assert_eq!(p.summary.kv_tokens, blocks / 2 * 16);
        // Per request: cdiv(8192, 16) full blocks + cdiv(min(127 + 8192, 8192), 16) + 1 sliding.
        let per_request = (512 + 512 + 1) as f64;
        assert!((p.summary.concurrency[0].1 - blocks as f64 / per_request).abs() < 1e-9);
        // 0.8.5 turns the sliding layers into full attention: one group of 24 layers.
        let old = plan(&m, &request("0.8.5")).unwrap();
        assert_eq!(old.summary.num_blocks, Some(32 * GIB / page / 24));
        assert_eq!(old.summary.kv_tokens, 32 * GIB / page / 24 * 16);
    }

    #[test]
    fn a_given_budget_cites_the_release_and_states_no_headroom() {
        let m = llama(vec![None; 32]);
        let kv = |p: &Plan| {
            p.terms
                .iter()
                .find(|t| matches!(t.id, TermId::PagedKvCache { .. }))
                .unwrap()
                .formula
                .clone()
        };
        let new = plan(&m, &request("0.11.0")).unwrap();
        assert!(kv(&new).contains(
            "vLLM's own --kv-cache-memory skips the profile (v1/worker/gpu_worker.py 0.11.0"
        ));
        let old = plan(&m, &request("0.6.5")).unwrap();
        assert!(!kv(&old).contains("gpu_worker.py"), "{}", kv(&old));
        assert!(kv(&old).contains("vLLM 0.6.5 has no --kv-cache-memory of its own"));
        // total × (1 − u) sizes nothing when the budget is given, nor is the activation rule used.
        for p in [&new, &old] {
            assert!(
                !p.notes.iter().any(|n| n.contains("headroom")),
                "{:?}",
                p.notes
            );
            assert!(
                !p.notes
                    .iter()
                    .any(|n| n.contains("activation peak is a stated rule"))
            );
        }
        let mut profiled = request("0.6.5");
        profiled.kv_cache_memory = None;
        let p = plan(&m, &profiled).unwrap();
        assert!(
            p.notes.iter().any(|n| n.contains("headroom")),
            "{:?}",
            p.notes
        );
    }

    #[test]
    fn a_predicted_activation_peak_is_charged_labelled_and_assumed() {
        let m = llama(vec![None; 32]);
        let mut r = request("0.6.5");
        r.kv_cache_memory = None;
        let assumed = plan(&m, &r).unwrap();
        r.activation_peak = Some(ActivationPeak::Predicted {
            bytes: Bytes(GIB),
            how: "a test ran".into(),
        });
        let predicted = plan(&m, &r).unwrap();
        let act = predicted
            .terms
            .iter()
            .find(|t| t.id == TermId::ServeActivationPeak)
            .unwrap();
        assert_eq!(
            (act.bytes, act.kind, act.in_total),
            (Bytes(GIB), Kind::Assumed, true)
        );
        assert!(act.formula.starts_with(
            "PREDICTED (data-less tensors at the profile run's shapes, not vLLM's kernels)"
        ));
        assert!(act.formula.contains(profile::PREDICTED_ERROR));
        let a = assumed
            .terms
            .iter()
            .find(|t| t.id == TermId::ServeActivationPeak)
            .unwrap()
            .bytes;
        assert_eq!(
            assumed.summary.kv_budget_bytes - predicted.summary.kv_budget_bytes,
            GIB as i128 - a.get() as i128
        );
    }

    #[test]
    fn v1_runs_a_multimodal_encoders_dummy_batch_first_and_v0_says_it_is_not_modelled() {
        let text_only = llama(vec![None; 32]);
        let m = ServeModel {
            encoder: Some(VisionEncoder {
                image_size: 896,
                patches: 4096,
                hidden: 1152,
                intermediate: 4304,
                tokens_per_item: 256,
            }),
            ..llama(vec![None; 32])
        };
        let act = |m: &ServeModel, r: &ServeRequest| {
            plan(m, r)
                .unwrap()
                .terms
                .into_iter()
                .find(|t| t.id == TermId::ServeActivationPeak)
                .unwrap()
        };
        let mut r = request("0.11.0");
        r.kv_cache_memory = None;
        // Few requests: the sampler is small, the tower's 32 images set the peak.
        r.max_num_seqs = Some(4);
        let (with, without) = (act(&m, &r), act(&text_only, &r));
        assert!(
            with.bytes > without.bytes,
            "{} ≤ {}",
            with.bytes.get(),
            without.bytes.get()
        );
        assert!(
            with.formula
                .contains(": the multimodal encoder's dummy batch;"),
            "{}",
            with.formula
        );
        // An H100's default 1,024 requests: the sampler's sort sets it, the batch's pixels and
        // embeddings are held beside it.
        r.max_num_seqs = Some(1024);
        let (with, without) = (act(&m, &r), act(&text_only, &r));
        let held = 32 * 3 * 896 * 896 * 4 + 32 * 256 * 4096 * 2;
        assert_eq!(with.bytes.get() - without.bytes.get(), held);
        assert!(
            with.formula.contains(": the sampler's sort;"),
            "{}",
            with.formula
        );
        let v0 = act(&m, &request("0.6.5"));
        assert!(
            v0.formula
                .contains("dummy batch of V0's profile run not modelled"),
            "{}",
            v0.formula
        );
    }

    #[test]
    fn v1_of_0_8_charges_other_processes_memory_and_0_9_does_not() {
        let m = llama(vec![None; 32]);
        let mut r = request("0.8.5");
        r.kv_cache_memory = None;
        let free = |b: u64| refusal::StartFacts {
            attention_heads: None,
            free_at_start: Some(Bytes(b)),
            compute_capability: None,
            dtype_explicit: false,
        };
        let alone = plan_with(&m, &r, &free(80 * GIB)).unwrap();
        let shared = plan_with(&m, &r, &free(60 * GIB)).unwrap();
        assert_eq!(
            alone.summary.kv_budget_bytes - shared.summary.kv_budget_bytes,
            20 * GIB as i128
        );
        let unknown = plan(&m, &r).unwrap();
        assert!(
            unknown
                .notes
                .iter()
                .any(|n| n.contains("other processes' included")),
            "{:?}",
            unknown.notes
        );
        r.version = Some(Version(0, 9, 0));
        let alone = plan_with(&m, &r, &free(80 * GIB)).unwrap();
        let shared = plan_with(&m, &r, &free(79 * GIB)).unwrap();
        assert_eq!(
            alone.summary.kv_budget_bytes,
            shared.summary.kv_budget_bytes
        );
    }

    #[test]
    fn cuda_graphs_are_charged_to_the_budget_from_0_20_only() {
        let m = llama(vec![None; 32]);
        let mut r = request("0.19.0");
        r.kv_cache_memory = None;
        let before = plan(&m, &r).unwrap();
        r.version = Some(Version(0, 20, 0));
        let after = plan(&m, &r).unwrap();
        // 0.17–0.19 and 0.20 share the sampler (Triton at 256 rows): only the graphs differ.
        assert_eq!(
            before.summary.kv_budget_bytes - after.summary.kv_budget_bytes,
            GIB as i128 / 2
        );
        let graphs = |p: &Plan| {
            p.terms
                .iter()
                .find(|t| t.id == TermId::CudaGraphs)
                .unwrap()
                .in_total
        };
        assert!(!graphs(&before) && graphs(&after));
        r.enforce_eager = true;
        let eager = plan(&m, &r).unwrap();
        assert_eq!(
            eager.summary.kv_budget_bytes,
            before.summary.kv_budget_bytes
        );
    }

    #[test]
    fn the_sampler_sorts_the_vocabulary_through_0_16_and_not_from_0_17() {
        let m = llama(vec![None; 32]);
        let act = |v: &str, seqs: u64| {
            let mut r = request(v);
            r.kv_cache_memory = None;
            r.max_num_seqs = Some(seqs);
            plan(&m, &r)
                .unwrap()
                .terms
                .into_iter()
                .find(|t| t.id == TermId::ServeActivationPeak)
                .unwrap()
        };
        let (sorted, triton) = (act("0.16.0", 1024), act("0.17.0", 1024));
        assert!(
            sorted.formula.contains("the sort's 20-byte scratch"),
            "{}",
            sorted.formula
        );
        assert!(
            triton.formula.contains("Triton top-k/top-p"),
            "{}",
            triton.formula
        );
        // 1,024 rows × 128,256 logits: 38 bytes each sorted, 14 + the kernel's 132 rows × 4.
        let rows_vocab = 1024 * 128_256u64;
        assert_eq!(
            sorted.bytes.get() - triton.bytes.get(),
            rows_vocab * (38 - 14) - 132 * 128_256 * 4
        );
        // Fewer than 8 rows keep the sort (until 0.30, beyond the releases planned).
        assert!(act("0.24.0", 4).formula.contains("20-byte scratch"));
    }

    #[test]
    fn a_given_kv_budget_replaces_the_start_up_terms() {
        let m = llama(vec![None; 32]);
        let p = plan(&m, &request("0.11.0")).unwrap();
        assert_eq!(p.summary.kv_budget_bytes, 32 * GIB as i128);
        let charged: Vec<_> = p
            .terms
            .iter()
            .filter(|t| t.in_total)
            .map(|t| t.id.clone())
            .collect();
        assert_eq!(
            charged,
            vec![TermId::PagedKvCache {
                engine: Engine::Vllm
            }]
        );
    }

    #[test]
    fn a_given_budget_above_the_card_less_the_weights_is_refused() {
        let m = llama(vec![None; 32]);
        let mut r = request("0.11.0");
        r.kv_cache_memory = Some(Bytes(65 * GIB));
        let Err(EstimateError::Input(e)) = plan(&m, &r) else {
            panic!("a 65 GiB budget beside 16 GiB of weights on 80 GiB was planned")
        };
        assert!(
            e.contains("more than the card can hold") && e.contains("64.00 GiB)"),
            "{e}"
        );
        // 16 GiB of weights and 2 MiB of rotary cache: 63 GiB fits.
        r.kv_cache_memory = Some(Bytes(63 * GIB));
        assert!(plan(&m, &r).is_ok());
        // Weights assumed split by TP: a note, not a refusal.
        r.tensor_parallel_size = 2;
        r.kv_cache_memory = Some(Bytes(75 * GIB));
        let p = plan(&m, &r).unwrap();
        assert!(
            p.notes
                .iter()
                .any(|n| n.contains("--weights-memory to check")),
            "{:?}",
            p.notes
        );
    }

    #[test]
    fn release_notes_and_refusals() {
        assert_eq!(release_note(Engine::Vllm, Some(Version(0, 6, 4))), Ok(None));
        assert!(release_note(Engine::Vllm, Some(Version(0, 99, 0))).is_err());
        assert!(
            release_note(Engine::Vllm, Some(Version(0, 24, 3)))
                .unwrap()
                .is_some()
        );
        assert!(release_note(Engine::Vllm, Some(Version(0, 1, 7))).is_err());
        assert!(release_note(Engine::Sglang, Some(Version(0, 11, 0))).is_err());
        assert!(release_note(Engine::Sglang, Some(Version(0, 5, 4))).is_err());
        assert_eq!(
            release_note(Engine::Sglang, Some(Version(0, 5, 5))),
            Ok(None)
        );
        assert!(
            release_note(Engine::Sglang, Some(Version(0, 5, 6)))
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn a_float32_config_is_served_in_16_bits_by_the_engines_rule() {
        use crate::dtype::Dtype::{Bfloat16, Float16};
        let v = |s: &str| Some(Version::parse(s).unwrap());
        assert_eq!(
            auto_dtype(Engine::Vllm, v("0.6.4"), "llama", Some(8)).0,
            Float16
        );
        assert_eq!(
            auto_dtype(Engine::Vllm, v("0.6.4"), "gemma2", Some(8)).0,
            Bfloat16
        );
        assert_eq!(
            auto_dtype(Engine::Vllm, v("0.11.0"), "llama", Some(8)).0,
            Bfloat16
        );
        assert_eq!(
            auto_dtype(Engine::Vllm, v("0.11.0"), "llama", Some(7)).0,
            Float16
        );
        assert_eq!(auto_dtype(Engine::Sglang, None, "gemma2", None).0, Bfloat16);
        assert_eq!(auto_dtype(Engine::Sglang, None, "qwen2", None).0, Float16);
        assert!(
            auto_dtype(Engine::Vllm, None, "llama", None)
                .1
                .contains("ASSUMED")
        );
    }

    #[test]
    fn a_max_model_len_above_the_models_is_refused_unless_allowed() {
        assert_eq!(
            check_max_model_len(Engine::Vllm, 8192, 8192, false),
            Ok(None)
        );
        let e = check_max_model_len(Engine::Vllm, 9000, 8192, false).unwrap_err();
        assert!(
            e.contains("9000") && e.contains("8192") && e.contains("VLLM_ALLOW_LONG"),
            "{e}"
        );
        let e = check_max_model_len(Engine::Sglang, 9000, 8192, false).unwrap_err();
        assert!(
            e.contains("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN")
                && e.contains("--context-length")
        );
        assert!(
            check_max_model_len(Engine::Vllm, 9000, 8192, true)
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn sglang_refuses_enforce_eager() {
        let mut r = request("0.5.5");
        r.engine = Engine::Sglang;
        r.max_num_seqs = None;
        r.enforce_eager = true;
        let Err(EstimateError::Input(e)) = plan(&llama(vec![None; 32]), &r) else {
            panic!("--enforce-eager planned for SGLang")
        };
        assert!(e.contains("--disable-cuda-graph"), "{e}");
    }

    #[test]
    fn versions_parse_and_refuse_with_the_form_expected() {
        assert_eq!(Version::parse("v0.6.3").unwrap(), Version(0, 6, 3));
        assert_eq!(Version::parse("0.11").unwrap(), Version(0, 11, 0));
        let e = Version::parse("latest").unwrap_err();
        assert!(e.contains("\"latest\"") && e.contains("0.6.3"), "{e}");
    }
}
