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
pub const PREDICTED_ERROR: &str = "error against the 5 public logs that print the figure, allocated against allocated (docs/serving.md): −0.5% and −0.1% (Llama-3.1-8B, RTX 3090, 0.6.4, 20,000 and 29,000 tokens: the forward sets the peak), −0.3% and −0.2% (Llama-3-8B, H100, 0.6.5, 8,192 tokens, TP 1 and 2) and −0.4% (4-bit Qwen2.5-7B, 0.7.3, 4,096 tokens): the sampler's sort sets those three; V1 releases (0.8 on) have no log that prints it yet; not modelled: torch.compile and autotuning transients of a cold V1 start (+0.5 to +1.9 GiB observed on release builds, vLLM PR #54479, 1Cat-vLLM PR #518) and FlashInfer's sampler (lower than the native sort)";

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
    let tp = r.tensor_parallel_size;
    let e = m.dtype_bytes;
    let kv_w = 2 * m.kv_heads.max(1) * m.head_size;
    let width = 2 * m.hidden + (m.q_width + kv_w).div_ceil(tp) + 3 * m.intermediate.div_ceil(tp);
    let rows = seqs.min(tokens);
    let layer = tokens as u128 * width as u128 * e as u128;
    let logits = rows as u128 * m.vocab as u128 * 4 * 2;
    let bytes = Bytes(u64::try_from(layer + logits).unwrap_or(u64::MAX));
    Term::new(
        TermId::ServeActivationPeak,
        bytes,
        Kind::Assumed,
        format!(
            "ASSUMED rule: profile run over max_num_batched_tokens={} tokens ({cite}): one layer's (2·h + (q+k+v)/TP + 3·I/TP) × {e} bytes = {} × {} + fp32 logits and probabilities for min(max_num_seqs, tokens)={} rows × vocab {} × 8 bytes; attention workspaces, torch.compile and the sampler's sort not modelled (pass the log's figure with --activation-peak SIZE, or predict it with --activation-peak predict)",
            g(tokens), g(width), g(tokens), g(rows), g(m.vocab)
        ),
    )
    .input("from_log", false)
}
