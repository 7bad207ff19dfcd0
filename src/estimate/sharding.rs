//! Sharded (data-parallel) training: what **one rank** (one GPU) holds under DDP, DeepSpeed's
//! ZeRO stages 1–3 and PyTorch's FSDP2, with the host memory an offload moves to the CPU kept
//! apart. Every figure is per rank: nothing here is ever summed over ranks.
//!
//! Choices and sources (also in docs/sharding.md):
//!
//! * **`ddp`** — `DistributedDataParallel` with its defaults: every rank holds the unsharded
//!   training estimate (what `--train` gives without `--shard`) plus the reducer's buckets, a flat
//!   copy of every gradient in the gradient's dtype (`gradient_as_bucket_view=False`, the default;
//!   with `True` the `.grad` tensors become views of the buckets and this copy disappears).
//! * **`zero1` / `zero2` / `zero3`** — DeepSpeed's engine, anchored on its estimators
//!   (`estimate_zero2_model_states_mem_needs`, `estimate_zero3_model_states_mem_needs`, after
//!   deepspeedai/DeepSpeed#5099): the model in 16 bits (`--precision bf16-mixed|fp16-mixed`), an
//!   fp32 master partition, a partitioned fp32 gradient copy and the optimizer states on the
//!   partition. For mixed-precision Adam/AdamW the model-state terms equal DeepSpeed's `gpu_mem`
//!   whenever the world size divides the parameter count (otherwise they exceed it by less than
//!   18 bytes: each rank's partition is `⌈P/N⌉`, DeepSpeed pads its flat buffers to equal
//!   partitions while its estimator divides exactly). ZeRO-3 adds the gathered largest module's
//!   16-bit parameters and gradients (`4·L`, L = the largest single module's own parameters, as
//!   DeepSpeed's `largest_layer_params`). ZeRO-1 has no DeepSpeed estimator: it is ZeRO-2 with
//!   the 16-bit gradients unpartitioned. Other optimizers and fp32 are *generalised*: the same
//!   layout with the model's width and our per-optimizer state count on the partition, labelled so.
//! * **`fsdp`** — FSDP2 (`fully_shard` on every repeated block, then on the root, which keeps
//!   embeddings, final norm and output head), `MixedPrecisionPolicy(param_dtype=bf16,
//!   reduce_dtype=fp32)` for the mixed precisions: fp32 sharded parameters, gradients and
//!   optimizer states with dim-0 padding (`⌈d0/N⌉·rest` per tensor on every rank), the root
//!   group unsharded from its forward to the end of backward (`reshard_after_forward=False` for
//!   the root), and *assumed* transients of the default scheduling: two blocks' unsharded params
//!   and all-gather outputs, one block's unsharded gradients and two reduce-scatter inputs.
//! * **NCCL** — an *assumed* per-rank term (default 1 GiB, `--comm-reserve SIZE` to change it);
//!   NCCL allocates outside PyTorch's allocator. World size 1 has none.

mod fsdp;
mod zero;

use serde::Serialize;

pub use super::states::{Offload, Sharding, Strategy};
use super::states::{Optimizer, Precision, Trainable, TrainingRequest};
use super::weights::WeightsSource;
use super::{EstimateError, Kind, Term, TermId, g, product, sum};
use crate::units::{Bytes, GIB, Overflow};
pub use fsdp::{fsdp_shard_numel, fsdp_unsharded_numel};
pub use zero::{deepspeed_zero2, deepspeed_zero3, largest_module};

/// The NCCL memory assumed per rank when `--comm-reserve` is not given: 1 GiB.
pub const DEFAULT_COMM_RESERVE: Bytes = Bytes(GIB);

/// The largest single module (ZeRO-3's gathered unit in DeepSpeed's accounting).
#[derive(Clone, Debug, Serialize)]
pub struct LargestModule {
    /// Dotted module path (`model.embed_tokens`), or how the figure was given.
    pub name: String,
    pub parameters: u64,
}

/// DeepSpeed's own estimator, reproduced verbatim (integer arithmetic; Python's float gives the
/// same below 2^53 bytes).
#[derive(Clone, Debug, Serialize)]
pub struct DeepSpeedFigures {
    /// `estimate_zero2_model_states_mem_needs` or `estimate_zero3_model_states_mem_needs`.
    pub estimator: &'static str,
    /// `gpu_mem`: per GPU.
    pub gpu_bytes: Bytes,
    /// `cpu_mem`: HOST memory per node, not GPU memory.
    pub cpu_bytes_per_node: Bytes,
    pub additional_buffer_factor: f64,
    /// ZeRO-3 only: `zero_init=True` (deepspeed.zero.Init), the estimator's default.
    pub zero_init: Option<bool>,
    pub cpu_offload: bool,
    pub cpu_offload_params: Option<bool>,
}

/// The `sharding` object of `estimate --json`.
#[derive(Clone, Debug, Serialize)]
pub struct ShardingSummary {
    pub strategy: Strategy,
    pub world_size: u64,
    pub gpus_per_node: u64,
    pub nodes: u64,
    pub offload: Option<Offload>,
    /// Always true: every term is one rank's (one GPU's) memory, never a total over ranks.
    pub per_rank: bool,
    /// The micro-batch of one rank (`--batch`), when activations are estimated.
    pub batch_per_rank: Option<u64>,
    /// Sum of the model-state terms (parameters, gradients, optimizer states and their copies)
    /// held on the GPU by one rank.
    pub model_states_bytes: Bytes,
    pub model_state_terms: Vec<String>,
    /// ZeRO-3: the gathered module `L`.
    pub largest_module: Option<LargestModule>,
    /// FSDP: whether dim-0 padding is counted (it needs the tensor shapes of `--model`).
    pub padding_counted: Option<bool>,
    /// NCCL's memory per rank (assumed); `None` at world size 1.
    pub comm_reserve_bytes: Option<Bytes>,
    /// With an offload: HOST memory (CPU RAM, not GPU) per node for what the terms moved there.
    pub host_memory_per_node_bytes: Option<Bytes>,
    /// DeepSpeed's estimator for the same case (ZeRO-2/3, mixed-precision Adam/AdamW).
    pub deepspeed: Option<DeepSpeedFigures>,
    /// The ZeRO paper's closed form (Rajbhandari et al. 2019, §5; K = 12) for the same case.
    pub zero_paper_bytes: Option<Bytes>,
}

/// One line with whether it is a model state (counted in `model_states_bytes`).
struct Part {
    term: Term,
    model_state: bool,
}

/// What the sharded path adds to a training estimate.
pub(super) struct ShardedTerms {
    /// Model states and the strategy's own buffers, before the activations.
    pub states: Vec<Term>,
    /// NCCL and the lines shown for information (host memory, DeepSpeed, the ZeRO paper).
    pub tail: Vec<Term>,
    pub summary: ShardingSummary,
}

fn overflow() -> impl FnOnce(Overflow) -> EstimateError {
    EstimateError::overflow(
        "the sharded training terms",
        "--parameters, --world-size and --gpus-per-node",
    )
}

fn bytes(v: u128) -> Result<Bytes, EstimateError> {
    Bytes::from_u128(v).map_err(overflow())
}

fn mul(factors: &[u128]) -> Result<u128, EstimateError> {
    product(factors).map_err(overflow())
}

fn add(items: impl IntoIterator<Item = u128>) -> Result<u128, EstimateError> {
    sum(items).map_err(overflow())
}

impl Sharding {
    /// Ranks per node, defaulted and checked.
    pub fn resolved_gpus_per_node(&self) -> Result<u64, EstimateError> {
        let n = self.world_size;
        match self.gpus_per_node {
            Some(0) => Err(EstimateError::Input(
                "--gpus-per-node 0: a node runs at least one rank; give the GPUs of one node, e.g. --gpus-per-node 8".into(),
            )),
            Some(gpn) if !n.is_multiple_of(gpn) => Err(EstimateError::Input(format!(
                "--gpus-per-node {} does not divide --world-size {}: every node runs the same number of ranks; give a divisor of {} (e.g. --gpus-per-node {})",
                g(gpn),
                g(n),
                g(n),
                g(largest_divisor_at_most(n, 8))
            ))),
            Some(gpn) => Ok(gpn),
            None if n <= 8 => Ok(n),
            None if n.is_multiple_of(8) => Ok(8),
            None => Err(EstimateError::Input(format!(
                "--world-size {} spans more than one node of 8 GPUs and 8 does not divide it: give --gpus-per-node G, the ranks of one node (a divisor of {}, e.g. {})",
                g(n),
                g(n),
                g(largest_divisor_at_most(n, 8))
            ))),
        }
    }

    /// Refuses what this estimate does not model, before anything is computed. Called before
    /// the training request's own checks so that the message is about sharding.
    pub(super) fn check(
        &self,
        source: &WeightsSource,
        req: &TrainingRequest,
    ) -> Result<(), EstimateError> {
        let shard = self.strategy;
        let input = |m: String| Err(EstimateError::Input(m));
        if self.world_size == 0 {
            return input(
                "--world-size 0: a training run has at least one rank; give --world-size 1 or more"
                    .into(),
            );
        }
        self.resolved_gpus_per_node()?;
        if req.lora.is_some() {
            return input(format!(
                "--lora-rank with --shard {shard} is not estimated: how a frozen (possibly quantized) base is sharded next to trainable adapters depends on the framework's wrapping; estimate one rank without --shard (under DDP each rank holds that estimate plus a bucket copy of the adapters' gradients), or drop --lora-rank to estimate full fine-tuning"
            ));
        }
        match source {
            WeightsSource::Model(m) => {
                if let Some(q) = &m.architecture.quantization {
                    return input(format!(
                        "{} is quantized ({}): sharded training of quantized weights is not estimated (full fine-tuning cannot update quantized weights, and QLoRA under FSDP or ZeRO is not modelled); give the unquantized model's config.json",
                        m.path,
                        q.label()
                    ));
                }
            }
            WeightsSource::Numbers { bits, .. } => {
                if bits.to_f64() < 16.0 {
                    return input(format!(
                        "--bits {bits} describes a quantized checkpoint: sharded training of quantized weights is not estimated (full fine-tuning cannot update quantized weights); give the float checkpoint's width, --bits 16 or 32"
                    ));
                }
            }
        }
        if req.optimizer == Optimizer::Adafactor {
            return input(format!(
                "--optimizer adafactor with --shard {shard} is not estimated: its factored states follow each tensor's shape, and ZeRO hands the optimizer flat 1-D partitions while FSDP2 hands it DTensor shards; use adamw, adam, sgd, sgd-momentum or adamw-8bit"
            ));
        }
        if self.strategy.zero_stage().is_some() && req.precision == Precision::Bf16 {
            return input(format!(
                "--precision bf16 with --shard {shard}: DeepSpeed's ZeRO keeps an fp32 master partition and fp32 optimizer states whatever the model's width, which is --precision bf16-mixed (or fp16-mixed, or fp32); --precision bf16 (bf16 states, no master copy) is estimated with ddp and fsdp"
            ));
        }
        if let Some(o) = self.offload
            && let Some((_, _, why)) = OFFLOAD_REFUSED
                .iter()
                .find(|(s, only, _)| *s == shard && only.is_none_or(|x| x == o))
        {
            return input(format!("--offload {o} with --shard {shard}{why}"));
        }
        match (self.strategy, self.largest_layer_parameters, source) {
            (Strategy::Zero3, None, WeightsSource::Numbers { .. }) => {
                return input(
                    "--shard zero3 with --parameters needs the largest single module's own parameters (DeepSpeed's largest_layer_params, gathered whole on every rank; for a language model usually the embedding, vocabulary × hidden): add --largest-layer-parameters N, or give --model PATH to read it from the config".into(),
                );
            }
            (Strategy::Zero3, Some(_), WeightsSource::Model(_)) => {
                return input(
                    "--largest-layer-parameters is read from --model's modules: drop it (or give --parameters instead of --model)".into(),
                );
            }
            (Strategy::Zero3, Some(l), WeightsSource::Numbers { parameters, .. })
                if l > *parameters =>
            {
                return input(format!(
                    "--largest-layer-parameters {} is more than the model's --parameters {}: one module holds part of the model; check the value",
                    g(l),
                    g(*parameters)
                ));
            }
            (Strategy::Zero3, _, _) => {}
            (other, Some(_), _) => {
                return input(format!(
                    "--largest-layer-parameters sizes ZeRO-3's gathered module, not --shard {}: drop it",
                    other
                ));
            }
            (_, None, _) => {}
        }
        if self.world_size == 1 && self.comm_reserve.is_some() {
            return input(
                "--comm-reserve with --world-size 1: a single rank creates no NCCL communicator, so there is nothing to reserve; drop --comm-reserve (or raise --world-size)".into(),
            );
        }
        Ok(())
    }
}

/// The offloads a strategy refuses (`None`: any), with why and what to do instead.
const OFFLOAD_REFUSED: [(Strategy, Option<Offload>, &str); 4] = [
    (
        Strategy::Ddp,
        None,
        ": DistributedDataParallel keeps every state on each GPU; offloading is part of zero2, zero3 and fsdp: choose one of them, or drop --offload",
    ),
    (
        Strategy::Zero1,
        None,
        " is not estimated (DeepSpeed publishes estimators for ZeRO-2 and ZeRO-3 only); use --shard zero2 --offload optimizer (the same optimizer offload, with the gradients partitioned too), or drop --offload",
    ),
    (
        Strategy::Zero2,
        Some(Offload::Parameters),
        ": only stages that partition the parameters can keep them on the host; use --shard zero3 --offload parameters, or --offload optimizer",
    ),
    (
        Strategy::Fsdp,
        Some(Offload::Optimizer),
        ": FSDP2's CPUOffloadPolicy moves the sharded parameters, gradients and optimizer states to the host together; use --offload parameters",
    ),
];

/// The largest divisor of `n` not above `cap` (at least 1).
fn largest_divisor_at_most(n: u64, cap: u64) -> u64 {
    (1..=cap.min(n))
        .rev()
        .find(|d| n.is_multiple_of(*d))
        .unwrap_or(1)
}

/// Elements one rank holds of `n` split in `world` equal partitions: `⌈n/N⌉`.
pub fn partition(n: u128, world: u64) -> u128 {
    n.div_ceil(world.max(1) as u128)
}

/// Everything the sharded terms need from the request.
pub(super) struct Context<'a> {
    pub source: &'a WeightsSource,
    pub req: &'a TrainingRequest,
    pub trainable: &'a Trainable,
    /// The unsharded model-state terms (what `--train` gives without `--shard`), for DDP.
    pub unsharded: Vec<Term>,
}

/// The sharded terms: model states and buffers of one rank, NCCL, and the host-side lines.
pub(super) fn terms(
    sh: &Sharding,
    ctx: Context<'_>,
    notes: &mut Vec<String>,
    left_out: &mut Vec<String>,
) -> Result<ShardedTerms, EstimateError> {
    let gpus_per_node = sh.resolved_gpus_per_node()?;
    let nodes = sh.world_size / gpus_per_node;
    let n = sh.world_size;
    let mut extras = Extras::default();
    let parts = match sh.strategy {
        Strategy::Ddp => ddp(&ctx, notes)?,
        Strategy::Zero1 | Strategy::Zero2 | Strategy::Zero3 => {
            zero::zero(sh, &ctx, gpus_per_node, nodes, &mut extras, notes, left_out)?
        }
        Strategy::Fsdp => fsdp::fsdp(sh, &ctx, &mut extras, notes, left_out)?,
    };
    let model_states_bytes = bytes(add(parts
        .iter()
        .filter(|p| p.model_state)
        .map(|p| p.term.bytes.get() as u128))?)?;
    let model_state_terms = parts
        .iter()
        .filter(|p| p.model_state)
        .map(|p| p.term.name.clone())
        .collect();
    let mut tail = Vec::new();
    let comm_reserve_bytes = if n > 1 {
        let term = comm_term(sh.comm_reserve);
        let b = term.bytes;
        tail.push(term);
        Some(b)
    } else {
        None
    };
    let host_memory_per_node_bytes = if extras.host_per_rank.is_empty() {
        None
    } else {
        let per_rank = add(extras.host_per_rank.iter().map(|(_, b)| *b))?;
        let per_node = bytes(mul(&[per_rank, gpus_per_node as u128])?)?;
        let listed = extras
            .host_per_rank
            .iter()
            .map(|(what, b)| format!("{what} {}", g(*b)))
            .collect::<Vec<_>>()
            .join(" + ");
        tail.push(
            Term::new(
                TermId::HostOffloadedStates,
                per_node,
                Kind::Calculated,
                format!(
                    "{} ranks per node × ({listed}) bytes per rank{}",
                    g(gpus_per_node),
                    if sh.strategy == Strategy::Fsdp {
                        "; CPUOffloadPolicy(pin_memory=True) pins it"
                    } else {
                        ""
                    }
                ),
            )
            .info()
            .input("memory", "host")
            .input("gpus_per_node", gpus_per_node),
        );
        Some(per_node)
    };
    tail.extend(extras.info);
    let batch_per_rank = match (ctx.source, ctx.req.batch, ctx.req.context) {
        (WeightsSource::Model(_), Some(b), Some(_)) => Some(b),
        _ => None,
    };
    if batch_per_rank.is_some() {
        notes.push(format!(
            "--batch is the micro-batch of ONE rank: the activations above are one rank's; the global batch is {} × that (× gradient-accumulation steps)",
            g(n)
        ));
    }
    notes.push(format!(
        "sharded training over {} rank(s) ({} node(s) × {} GPU(s)): every term is what ONE rank holds on its GPU; nothing is summed over ranks",
        g(n),
        g(nodes),
        g(gpus_per_node)
    ));
    Ok(ShardedTerms {
        states: parts.into_iter().map(|p| p.term).collect(),
        tail,
        summary: ShardingSummary {
            strategy: sh.strategy,
            world_size: n,
            gpus_per_node,
            nodes,
            offload: sh.offload,
            per_rank: true,
            batch_per_rank,
            model_states_bytes,
            model_state_terms,
            largest_module: extras.largest_module,
            padding_counted: extras.padding_counted,
            comm_reserve_bytes,
            host_memory_per_node_bytes,
            deepspeed: extras.deepspeed,
            zero_paper_bytes: extras.zero_paper,
        },
    })
}

/// Side results of a strategy: host bytes per rank, lines shown for information, comparisons.
#[derive(Default)]
struct Extras {
    /// `(what, bytes)` moved to the host, per rank.
    host_per_rank: Vec<(String, u128)>,
    info: Vec<Term>,
    largest_module: Option<LargestModule>,
    padding_counted: Option<bool>,
    deepspeed: Option<DeepSpeedFigures>,
    zero_paper: Option<Bytes>,
}

fn comm_term(stated: Option<Bytes>) -> Term {
    let (b, formula) = match stated {
        Some(b) => (b, format!("stated by --comm-reserve {}", b.grouped())),
        None => (
            DEFAULT_COMM_RESERVE,
            "default 1 GiB per rank, assumed: NCCL keeps per channel and peer a 4 MiB Simple, ~0.5 MiB LL and ~4.7 MiB LL128 buffer (NCCL_BUFFSIZE…) over 2–32+ channels; measured 544–688 MB per communicator on 4×A100 (NVIDIA/nccl#964) and 1.06 GB on 8×H100 (NVIDIA/nccl#1685; 4.34 GB after an all-to-all); --comm-reserve SIZE to state yours".to_string(),
        ),
    };
    Term::new(TermId::NcclBuffers, b, Kind::Assumed, formula).input("stated", stated.is_some())
}

fn part(term: Term, model_state: bool) -> Part {
    Part { term, model_state }
}

fn width_name(w: u128) -> &'static str {
    match w {
        2 => "16-bit",
        _ => "fp32",
    }
}

/// DDP: the unsharded model states on every rank, plus the reducer's buckets.
fn ddp(ctx: &Context<'_>, notes: &mut Vec<String>) -> Result<Vec<Part>, EstimateError> {
    let n = ctx.trainable.count();
    let s = ctx.req.precision.param_bytes() as u128;
    let mut parts: Vec<Part> = ctx
        .unsharded
        .iter()
        .cloned()
        .map(|t| part(t, true))
        .collect();
    parts.push(part(
        Term::new(
            TermId::DdpBuckets {
                dtype: if s == 4 { "fp32" } else { "bf16" }.into(),
            },
            bytes(mul(&[n, s])?)?,
            Kind::Calculated,
            format!(
                "{} parameters × {s} bytes: DistributedDataParallel all-reduces a flat copy of every gradient in buckets (25 MiB, the first 1 MiB) kept for the whole run; gradient_as_bucket_view=False (the default): with True the .grad tensors become views of the buckets and this copy disappears",
                g(n)
            ),
        )
        .input("gradient_as_bucket_view", false),
        true,
    ));
    notes.push("DDP rebuilds its buckets once, in gradient-ready order, at the second forward; the old and new buckets may coexist briefly then (one more bucket copy, not counted)".into());
    Ok(parts)
}

#[cfg(test)]
mod tests;
