//! The profile run's activation peak (vLLM's "PyTorch activation peak memory"): read from the
//! engine's log, predicted by running the model's forward at the profile run's shapes
//! (`prediction::serve_profile`), or assumed by a stated rule.

use super::{ActivationPeak, ServeModel, ServeRequest};
use crate::estimate::{Kind, Term, TermId, g};
use crate::units::Bytes;

/// The profile run's shapes, as the planner resolved them.
#[derive(Clone, Debug)]
pub struct ProfileShape {
    pub config: std::path::PathBuf,
    pub tokens: u64,
    pub seqs: u64,
    /// `bfloat16`, `float16` or `float32`: the engine's compute dtype.
    pub dtype: String,
    pub tensor_parallel_size: u64,
    /// V1 (vLLM ≥ 0.8): its dummy sampler run and native sampler; else V0's profile run.
    pub v1: bool,
    /// V1 and a multimodal model: the dummy images its encoder runs first, and their side in
    /// pixels ([`encoder_items`]).
    pub encoder_images: Option<(u64, u64)>,
    /// How the release's dummy sampler run applies top-k/top-p ([`top_k_top_p`]).
    pub top_k_top_p: TopKTopP,
}

/// How many dummy images V1's profile run sends through the tower (v1/worker/utils.py
/// `MultiModalBudget` 0.11): the encoder budget is max(max_num_batched_tokens, one item's
/// embeddings) (v1/core/encoder_cache_manager.py `compute_mm_encoder_budget`), the items
/// min(budget ÷ item, requests × items per prompt), at least one.
pub fn encoder_items(
    enc: &super::VisionEncoder,
    tokens: u64,
    seqs: u64,
    max_model_len: u64,
) -> u64 {
    let per_item = enc.tokens_per_item.max(1);
    let per_prompt = (max_model_len / per_item).clamp(1, MM_LIMIT_PER_PROMPT);
    (tokens.max(per_item) / per_item)
        .min(seqs.saturating_mul(per_prompt))
        .max(1)
}

/// How far the prediction stands from the logs that print the figure (docs/serving.md), and what
/// it leaves out, with the bound read in vLLM's issues.
pub const PREDICTED_ERROR: &str = "error against the 5 public logs that print the figure, allocated against allocated (docs/serving.md): −0.1% and +0.2% (Llama-3.1-8B, RTX 3090, 0.6.4, 20,000 and 29,000 tokens: the forward sets the peak), −0.3% and −0.2% (Llama-3-8B, H100, 0.6.5, 8,192 tokens, TP 1 and 2) and −0.4% (4-bit Qwen2.5-7B, 0.7.3, 4,096 tokens): the sampler's sort sets those three; V1 releases (0.8 on) have no log that prints it yet; not modelled: torch.compile and autotuning transients of a cold V1 start (+0.5 to +1.9 GiB observed on release builds, vLLM PR #54479, 1Cat-vLLM PR #518) and FlashInfer's sampler (lower than the native sort)";

/// The term: given, predicted, or the ASSUMED rule (one layer's transient at
/// max_num_batched_tokens and the sampler's fp32 logits for min(max_num_seqs, tokens) rows).
pub(super) fn activation_term(
    m: &ServeModel,
    r: &ServeRequest,
    tokens: u64,
    seqs: u64,
    cite: &str,
) -> Term {
    match &r.activation_peak {
        Some(ActivationPeak::FromLog(b)) => {
            return Term::new(
                TermId::ServeActivationPeak,
                *b,
                Kind::Calculated,
                format!("given (--activation-peak), as the engine's log prints it ({cite})"),
            )
            .input("from_log", true);
        }
        Some(ActivationPeak::Predicted { bytes, how }) => {
            return Term::new(
                TermId::ServeActivationPeak,
                *bytes,
                Kind::Assumed,
                format!(
                    "PREDICTED (data-less tensors at the profile run's shapes, not vLLM's kernels): the peak allocated above the weights while {how}, as {cite} runs it at max_num_batched_tokens={} over max_num_seqs={}; {PREDICTED_ERROR}",
                    g(tokens),
                    g(seqs)
                ),
            )
            .input("from_log", false)
            .input("predicted", true);
        }
        None => {}
    }
    // docs/research/vllm-profile-run.md §3: the peak is the larger of the forward's (a Llama-layout
    // layer in steady state: the caller's input, the residual and the attention or MLP
    // transients) and the sampler's sort, plus the cuBLAS workspaces of the first matmul.
    let tp = r.tensor_parallel_size as u128;
    let (t, e, h) = (tokens as u128, m.dtype_bytes as u128, m.hidden as u128);
    let i = (m.intermediate as u128).div_ceil(tp);
    let q = (m.q_width as u128).div_ceil(tp);
    let kv = 2 * (m.kv_heads as u128 / tp).max(1) * m.head_size as u128;
    let mlp = t * (3 * h + 3 * i) * e;
    let attention = t * (3 * h + 2 * q + kv) * e;
    let rows = seqs.min(tokens) as u128;
    let v1 = r.version.unwrap_or(super::releases::VLLM_DEFAULT) >= super::Version(0, 8, 0);
    // Held hidden states; V1's last rows and their `rand_like`; per logit the model-dtype logits,
    // fp32 logits, sorted values (4), int64 indices (8) and the sort's kernel scratch (20); or,
    // where the release's top-k/top-p is the Triton kernel, the fp32 logits, probabilities and
    // exponential draws (4 + 4 + 4) and the kernel's buffer.
    let version = r.version.unwrap_or(super::releases::VLLM_DEFAULT);
    let topk = top_k_top_p(version, v1, rows as u64);
    let vocab = m.vocab as u128;
    let (per_logit, kernel_buffer) = match topk {
        TopKTopP::Sort => (e + 4 + 4 + 8 + 20, 0),
        TopKTopP::Triton => (e + 4 + 4 + 4, rows.min(TRITON_SMS) * vocab * 4),
    };
    let sampler = t * h * e
        + if v1 { 2 * rows * h * e } else { 0 }
        + rows * vocab * per_logit
        + kernel_buffer;
    let (workspace, workspace_rule) = match r.compute_major {
        Some(major) if major >= 9 => (34_603_008u128, "cuBLAS 32 MiB + cuBLASLt 1 MiB (sm90)"),
        Some(_) => (9_568_256, "cuBLAS 8.1 MiB + cuBLASLt 1 MiB (before sm90)"),
        None => (
            9_568_256,
            "cuBLAS 8.1 MiB + cuBLASLt 1 MiB (the card's compute capability unknown: before sm90 assumed)",
        ),
    };
    let (lm_peak, what) = [
        (mlp, "the forward's MLP: T·(3·h + 3·I/TP)"),
        (
            attention,
            "the forward's attention: T·(3·h + 2·q/TP + 2·kv/TP)",
        ),
        (
            sampler,
            match topk {
                TopKTopP::Sort => "the sampler's sort",
                TopKTopP::Triton => "the sampler (Triton top-k/top-p)",
            },
        ),
    ]
    .into_iter()
    .max_by_key(|(b, _)| *b)
    .unwrap_or((0, "nothing"));
    let encoder = m
        .encoder
        .filter(|_| v1)
        .map(|enc| encoder_batch(&enc, tokens, seqs, r.max_model_len, h, e));
    let (peak, what) = match &encoder {
        Some(b) if b.transient > b.outputs.saturating_add(lm_peak) => (
            b.held.saturating_add(b.transient),
            "the multimodal encoder's dummy batch",
        ),
        Some(b) => (
            b.held.saturating_add(b.outputs).saturating_add(lm_peak),
            what,
        ),
        None => (lm_peak, what),
    };
    let encoder_text = match &encoder {
        Some(b) => format!("; {}", b.formula),
        None if m.encoder.is_some() => "; the multimodal encoder's dummy batch of V0's profile run not modelled (each dummy request carries its images through the forward)".to_string(),
        None => String::new(),
    };
    let bytes = Bytes(u64::try_from(peak.saturating_add(workspace)).unwrap_or(u64::MAX));
    Term::new(
        TermId::ServeActivationPeak,
        bytes,
        Kind::Assumed,
        format!(
            "ASSUMED rule (vLLM's Llama layout and {} sampler, docs/research/vllm-profile-run.md): profile run over max_num_batched_tokens={} tokens in min(max_num_seqs, tokens)={} requests ({cite}); the larger of the forward's MLP {} × (3·{} + 3·{}) × {e} = {} bytes, its attention {} × (3·{} + 2·{} + {}) × {e} = {} bytes and the sampler {} × {} × {e} held hidden states{} + {} rows × vocab {} × {per_logit} bytes ({}) = {} bytes{encoder_text}: {what}; + {workspace_rule}; other families' fused kernels (MoE, MLA), torch.compile and autotuning transients and FlashInfer's sampler not modelled (pass the log's figure with --activation-peak SIZE, or predict it with --activation-peak predict)",
            if v1 { "V1's native" } else { "V0's" },
            g(tokens), g(rows as u64),
            g(tokens), g(m.hidden), g(i as u64), g(u64::try_from(mlp).unwrap_or(u64::MAX)),
            g(tokens), g(m.hidden), g(q as u64), g(kv as u64), g(u64::try_from(attention).unwrap_or(u64::MAX)),
            g(tokens), g(m.hidden),
            if v1 { " + V1's last rows and their rand_like, 2 × rows × hidden × e" } else { "" },
            g(rows as u64), g(m.vocab), topk.wording(), g(u64::try_from(sampler).unwrap_or(u64::MAX)),
        ),
    )
    .input("from_log", false)
}

/// How the release's dummy sampler run applies top-k/top-p (`_dummy_sampler_run` always sets
/// top_p 0.9 and top_k vocab − 1). docs/research/vllm-v1-sampler-by-release.md, read in the
/// released wheels: the PyTorch path sorts the whole vocabulary through 0.16; from 0.17 the Triton
/// kernel (`ops/topk_topp_triton.py`) takes batches of 8 rows or more;
/// from 0.21 FlashInfer's sampler runs first (≈ 8 bytes per logit, below either) and the PyTorch
/// path after it, so that path still sets the peak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopKTopP {
    Sort,
    Triton,
}

/// The SMs the Triton kernel's cached buffer is sized by (at most SMs × vocab × 4 bytes): an
/// H100 SXM's 132, assumed for every card.
const TRITON_SMS: u128 = 132;

pub fn top_k_top_p(version: super::Version, v1: bool, rows: u64) -> TopKTopP {
    use super::Version;
    // 0.30 takes every batch to the kernel, but the planner's releases end before it.
    if v1 && version >= Version(0, 17, 0) && rows >= 8 {
        TopKTopP::Triton
    } else {
        TopKTopP::Sort
    }
}

impl TopKTopP {
    fn wording(self) -> &'static str {
        match self {
            TopKTopP::Sort => {
                "model-dtype and fp32 logits, sorted values, int64 indices, the sort's 20-byte scratch"
            }
            TopKTopP::Triton => {
                "model-dtype and fp32 logits, probabilities and exponential draws: the release's Triton top-k/top-p (0.17+, 8 rows or more) sorts nothing; + its buffer, min(rows, 132 SMs assumed) × vocab × 4"
            }
        }
    }
}

/// V1's multimodal dummy batch, in bytes: what stays held through the language model's dummy run
/// (the batch's float32 pixels, kept by `profile_run`'s local, and the embeddings in the encoder
/// cache), and the tower's own transient.
struct EncoderBatch {
    held: u128,
    outputs: u128,
    transient: u128,
    formula: String,
}

/// vLLM's default per-prompt limit of each modality (`MultiModalConfig.get_limit_per_prompt`,
/// config/multimodal.py 0.9–0.11: 999 when `--limit-mm-per-prompt` does not name it).
const MM_LIMIT_PER_PROMPT: u64 = 999;

/// The dummy batch V1 runs through the tower ([`encoder_items`] images). A SigLIP layer's peak in steady state: the residual, the
/// normed input and, in the MLP, fc1's output and the activation's; the attention's q, k, v and
/// output (vLLM's `MultiHeadAttention`: no patches² matrix) weigh less.
fn encoder_batch(
    enc: &super::VisionEncoder,
    tokens: u64,
    seqs: u64,
    max_model_len: u64,
    text_hidden: u128,
    e: u128,
) -> EncoderBatch {
    let per_item = enc.tokens_per_item.max(1);
    let items = encoder_items(enc, tokens, seqs, max_model_len);
    let (n, p, h, i) = (
        items as u128,
        enc.patches as u128,
        enc.hidden as u128,
        enc.intermediate as u128,
    );
    // Saturating: a config's sizes are the user's, and a product of five of them can pass u128.
    let mul = |xs: &[u128]| xs.iter().fold(1u128, |a, x| a.saturating_mul(*x));
    let area = mul(&[enc.image_size as u128, enc.image_size as u128]);
    let pixels = mul(&[n, 3, area, 4]);
    let mlp = mul(&[n, p, (2 * h).saturating_add(2 * i), e]);
    let attention = mul(&[n, p, 6 * h, e]);
    let transient = mlp.max(attention).saturating_add(mul(&[n, 3, area, e]));
    let outputs = mul(&[n, per_item as u128, text_hidden, e]);
    EncoderBatch {
        held: pixels,
        outputs,
        transient,
        formula: format!(
            "the multimodal encoder's dummy batch first (V1 profile_run; MultiModalBudget 0.11: budget max(max_num_batched_tokens, {per_item}) ÷ {per_item} embeddings per image = {items} image(s) of {side}×{side}): float32 pixels {items} × 3 × {side}² × 4 = {} bytes held to the end, the tower's layer {items} × {} patches × (2·{} + 2·{}) × {e} = {} bytes, then its {items} × {per_item} × {} embeddings held in the encoder cache = {} bytes through the language model's run",
            g(u64::try_from(pixels).unwrap_or(u64::MAX)),
            g(enc.patches),
            g(enc.hidden),
            g(enc.intermediate),
            g(u64::try_from(mlp.max(attention)).unwrap_or(u64::MAX)),
            g(u64::try_from(text_hidden).unwrap_or(u64::MAX)),
            g(u64::try_from(outputs).unwrap_or(u64::MAX)),
            side = g(enc.image_size),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::serving::VisionEncoder;

    /// Gemma 3's SigLIP (gemma-3-4b-it's vision_config).
    const SIGLIP: VisionEncoder = VisionEncoder {
        image_size: 896,
        patches: 4096,
        hidden: 1152,
        intermediate: 4304,
        tokens_per_item: 256,
    };

    #[test]
    fn v1_sends_the_encoder_budget_in_images_through_the_tower() {
        // Budget max(max_num_batched_tokens, 256) ÷ 256; the decoder's room caps it.
        assert_eq!(encoder_items(&SIGLIP, 2048, 256, 8192), 8);
        assert_eq!(encoder_items(&SIGLIP, 8192, 1024, 8192), 32);
        // A budget below one image still runs one.
        assert_eq!(encoder_items(&SIGLIP, 100, 256, 8192), 1);
        // One request whose max_model_len holds 2 images: at most 2 items.
        assert_eq!(encoder_items(&SIGLIP, 8192, 1, 600), 2);
    }

    #[test]
    fn the_encoder_batch_holds_its_pixels_and_embeddings_and_its_layer_is_the_transient() {
        let b = encoder_batch(&SIGLIP, 8192, 1024, 8192, 2560, 2);
        assert_eq!(b.held, 32 * 3 * 896 * 896 * 4);
        assert_eq!(b.outputs, 32 * 256 * 2560 * 2);
        let mlp = 32 * 4096 * (2 * 1152 + 2 * 4304) * 2;
        assert_eq!(b.transient, mlp + 32 * 3 * 896 * 896 * 2);
        assert!(
            b.formula.contains("32 image(s) of 896×896"),
            "{}",
            b.formula
        );
    }
}
