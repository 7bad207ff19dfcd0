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
    let v1 = r.version.unwrap_or(super::Version(0, 11, 0)) >= super::Version(0, 8, 0);
    // Held hidden states; V1's last rows and their `rand_like`; per logit the model-dtype logits,
    // fp32 logits, sorted values (4), int64 indices (8) and the sort's kernel scratch (20).
    let per_logit = e + 4 + 4 + 8 + 20;
    let sampler =
        t * h * e + if v1 { 2 * rows * h * e } else { 0 } + rows * m.vocab as u128 * per_logit;
    let (workspace, workspace_rule) = match r.compute_major {
        Some(major) if major >= 9 => (34_603_008u128, "cuBLAS 32 MiB + cuBLASLt 1 MiB (sm90)"),
        Some(_) => (9_568_256, "cuBLAS 8.1 MiB + cuBLASLt 1 MiB (before sm90)"),
        None => (
            9_568_256,
            "cuBLAS 8.1 MiB + cuBLASLt 1 MiB (the card's compute capability unknown: before sm90 assumed)",
        ),
    };
    let (peak, what) = [
        (mlp, "the forward's MLP: T·(3·h + 3·I/TP)"),
        (
            attention,
            "the forward's attention: T·(3·h + 2·q/TP + 2·kv/TP)",
        ),
        (sampler, "the sampler's sort"),
    ]
    .into_iter()
    .max_by_key(|(b, _)| *b)
    .unwrap_or((0, "nothing"));
    let bytes = Bytes(u64::try_from(peak + workspace).unwrap_or(u64::MAX));
    Term::new(
        TermId::ServeActivationPeak,
        bytes,
        Kind::Assumed,
        format!(
            "ASSUMED rule (vLLM's Llama layout and {} sampler, docs/research/vllm-profile-run.md): profile run over max_num_batched_tokens={} tokens in min(max_num_seqs, tokens)={} requests ({cite}); the larger of the forward's MLP {} × (3·{} + 3·{}) × {e} = {} bytes, its attention {} × (3·{} + 2·{} + {}) × {e} = {} bytes and the sampler's sort {} × {} × {e} held hidden states{} + {} rows × vocab {} × {per_logit} bytes (model-dtype and fp32 logits, sorted values, int64 indices, the sort's 20-byte scratch) = {} bytes: {what}; + {workspace_rule}; other families' fused kernels (MoE, MLA), torch.compile and autotuning transients and FlashInfer's sampler not modelled (pass the log's figure with --activation-peak SIZE, or predict it with --activation-peak predict)",
            if v1 { "V1's native" } else { "V0's" },
            g(tokens), g(rows as u64),
            g(tokens), g(m.hidden), g(i as u64), g(u64::try_from(mlp).unwrap_or(u64::MAX)),
            g(tokens), g(m.hidden), g(q as u64), g(kv as u64), g(u64::try_from(attention).unwrap_or(u64::MAX)),
            g(tokens), g(m.hidden),
            if v1 { " + V1's last rows and their rand_like, 2 × rows × hidden × e" } else { "" },
            g(rows as u64), g(m.vocab), g(u64::try_from(sampler).unwrap_or(u64::MAX)),
        ),
    )
    .input("from_log", false)
}
