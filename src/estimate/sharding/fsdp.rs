//! PyTorch's FSDP2 (`fully_shard` on every repeated block, then on the root): dim-0 padded
//! shards, the unsharded root group and the transient per-block buffers.

use std::collections::BTreeMap;

use super::{Context, Extras, Part, bytes, mul, part, partition};
use crate::estimate::states::{
    Offload, Optimizer, Precision, Sharding, Trainable, optimizer_bytes,
};
use crate::estimate::weights::WeightsSource;
use crate::estimate::{EstimateError, Kind, Shard, Term, TermId, g};
use crate::model::TensorGroup;

/// `(d0, rest)` of a tensor: FSDP2 shards dim 0 (`Shard(0)`); a 0-d tensor is `(1, 1)`.
fn dim0(shape: &[u64]) -> (u128, u128) {
    match shape.split_first() {
        None => (1, 1),
        Some((d0, rest)) => (*d0 as u128, rest.iter().map(|d| *d as u128).product()),
    }
}

/// Elements of one tensor's FSDP2 shard on every rank, padding included: `⌈d0/N⌉·rest`.
pub fn fsdp_shard_numel(shape: &[u64], world: u64) -> u128 {
    let (d0, rest) = dim0(shape);
    partition(d0, world) * rest
}

/// Elements of one tensor once all-gathered by FSDP2, padding included: `⌈d0/N⌉·N·rest`.
pub fn fsdp_unsharded_numel(shape: &[u64], world: u64) -> u128 {
    fsdp_shard_numel(shape, world) * world as u128
}

/// The repeated block a tensor belongs to (`model.layers.*`), or `None` for the root group.
pub(super) fn block_of(name: &str) -> Option<&str> {
    let mut end = 0;
    for segment in name.split('.') {
        end += segment.len();
        if segment == "*" {
            return Some(&name[..end]);
        }
        end += 1;
    }
    None
}

/// The largest single instance of a repeated block, with `per` the elements of one tensor. A
/// block's groups normally share one count (the number of layers); when they do not (dense and
/// MoE layers under one prefix, as DeepSeek-V3's first layers), the groups with the largest count
/// are in every layer and, of the others, the heaviest set with a common count is added: an
/// upper bound when two different layer kinds happen to have the same count.
pub(super) fn largest_block(groups: &[&TensorGroup], per: impl Fn(&TensorGroup) -> u128) -> u128 {
    let Some(max_count) = groups.iter().map(|grp| grp.count).max() else {
        return 0;
    };
    let mut by_count: BTreeMap<u64, u128> = BTreeMap::new();
    for grp in groups {
        *by_count.entry(grp.count).or_default() += per(grp);
    }
    let common = by_count.get(&max_count).copied().unwrap_or(0);
    let extra = by_count
        .iter()
        .filter(|(c, _)| **c != max_count)
        .map(|(_, v)| *v)
        .max()
        .unwrap_or(0);
    common + extra
}

/// FSDP2's groups: the repeated blocks (one `fully_shard` each) and the root's tensors.
pub(super) struct FsdpLayout<'a> {
    root: Vec<&'a TensorGroup>,
    blocks: BTreeMap<&'a str, Vec<&'a TensorGroup>>,
}

impl<'a> FsdpLayout<'a> {
    pub(super) fn of(groups: &'a [TensorGroup]) -> FsdpLayout<'a> {
        let mut root = Vec::new();
        let mut blocks: BTreeMap<&str, Vec<&TensorGroup>> = BTreeMap::new();
        for grp in groups {
            match block_of(&grp.name) {
                Some(block) => blocks.entry(block).or_default().push(grp),
                None => root.push(grp),
            }
        }
        FsdpLayout { root, blocks }
    }
    /// `(block, padded unsharded elements)` of the largest block instance.
    pub(super) fn largest_block(&self, world: u64) -> Option<(&'a str, u128)> {
        self.blocks
            .iter()
            .map(|(name, groups)| {
                (
                    *name,
                    largest_block(groups, |grp| fsdp_unsharded_numel(&grp.shape, world)),
                )
            })
            .max_by_key(|(_, n)| *n)
    }
    pub(super) fn root_unsharded(&self, world: u64) -> u128 {
        self.root
            .iter()
            .map(|grp| fsdp_unsharded_numel(&grp.shape, world) * grp.count as u128)
            .sum()
    }
}

/// FSDP2 with `fully_shard` per block and on the root.
pub(super) fn fsdp(
    sh: &Sharding,
    ctx: &Context<'_>,
    extras: &mut Extras,
    notes: &mut Vec<String>,
    left_out: &mut Vec<String>,
) -> Result<Vec<Part>, EstimateError> {
    let n = sh.world_size;
    let precision = ctx.req.precision;
    // Storage width of the sharded params/grads/states; compute (param_dtype) and reduce widths.
    let s = precision.param_bytes() as u128;
    let c: u128 = if precision == Precision::Fp32 { 4 } else { 2 };
    let r: u128 = if precision == Precision::Bf16 { 2 } else { 4 };
    let name = |w: u128| if w == 4 { "fp32" } else { "bf16" };
    let (sn, cn, rn) = (name(s), name(c), name(r));
    let offload = sh.offload == Some(Offload::Parameters);
    let p = ctx.trainable.count();
    let groups = match (ctx.source, ctx.trainable) {
        (WeightsSource::Model(m), Trainable::Shapes(_)) => Some(&m.architecture.groups),
        _ => None,
    };
    let (shard, shard_trainable, shard_text) = match groups {
        Some(groups) => {
            let sharded: Vec<TensorGroup> = groups
                .iter()
                .map(|grp| {
                    let mut shape = grp.shape.clone();
                    if let Some(d0) = shape.first_mut() {
                        *d0 = d0.div_ceil(n.max(1));
                    }
                    TensorGroup {
                        shape,
                        ..grp.clone()
                    }
                })
                .collect();
            let total: u128 = groups
                .iter()
                .map(|grp| fsdp_shard_numel(&grp.shape, n) * grp.count as u128)
                .sum();
            extras.padding_counted = Some(true);
            (
                total,
                Trainable::Shapes(sharded),
                format!(
                    "Σ ⌈d0/{}⌉·rest over the model's tensors = {} elements per rank (dim-0 padding counted: every rank holds the same bytes; unpadded {})",
                    g(n),
                    g(total),
                    g(partition(p, n))
                ),
            )
        }
        None => {
            extras.padding_counted = Some(false);
            let part_n = partition(p, n);
            (
                part_n,
                Trainable::Count(part_n),
                format!(
                    "⌈{} / {}⌉ = {} elements per rank (dim-0 padding NOT counted: it needs the tensor shapes of --model)",
                    g(p),
                    g(n),
                    g(part_n)
                ),
            )
        }
    };
    let (states, states_formula) = optimizer_bytes(ctx.req.optimizer, &shard_trainable, s)?;
    let persistent = [
        (
            TermId::Weights {
                dtype: Some(sn.into()),
                shard: Some(Shard::FsdpShard),
            },
            mul(&[s, shard])?,
            format!(
                "{shard_text} × {s} bytes{}",
                if precision.mixed() {
                    ": the fp32 sharded parameters are the master copy (no separate one)"
                } else {
                    ""
                }
            ),
            format!("{sn} parameter shards"),
        ),
        (
            TermId::Gradients {
                dtype: sn.into(),
                shard: Some(Shard::FsdpShard),
            },
            mul(&[s, shard])?,
            format!("{shard_text} × {s} bytes: the reduce-scattered gradients"),
            format!("{sn} gradient shards"),
        ),
        (
            TermId::OptimizerStates {
                optimizer: ctx.req.optimizer,
                shard: Some(Shard::FsdpShard),
            },
            states,
            format!("on the shards: {states_formula}"),
            "optimizer states".to_string(),
        ),
    ];
    let mut parts = Vec::new();
    for (id, b, formula, host_name) in persistent {
        if offload {
            extras.host_per_rank.push((host_name, b));
        } else {
            parts.push(part(
                Term::new(id, bytes(b)?, Kind::Calculated, formula),
                true,
            ));
        }
    }
    match groups {
        Some(groups) => {
            let layout = FsdpLayout::of(groups);
            let root = layout.root_unsharded(n);
            if root > 0 {
                parts.push(part(
                    Term::new(
                        TermId::FsdpRootGroup { dtype: cn.into() },
                        bytes(mul(&[c, root])?)?,
                        Kind::Calculated,
                        format!(
                            "{} elements (embeddings, final norm, output head: the tensors outside the repeated blocks, all-gathered with padding ⌈d0/N⌉·N·rest) × {c} bytes: the root is not resharded after forward (reshard_after_forward=False for the root), so it stays unsharded until the end of backward",
                            g(root)
                        ),
                    ),
                    false,
                ));
            }
            match layout.largest_block(n) {
                Some((block, layer)) => {
                    let transients = [
                        (
                            TermId::FsdpGatheredBlocks { dtype: cn.into() },
                            [2, 2 * c, layer],
                            format!(
                                "2 blocks (the current one and the prefetched next) × (unsharded parameters + all-gather output) × {} elements of the largest `{block}` (padded) × {c} bytes; 1 block when nothing overlaps; the all-gather inputs (1/N of a block) are not counted",
                                g(layer)
                            ),
                        ),
                        (
                            TermId::FsdpBlockGradients { dtype: cn.into() },
                            [1, c, layer],
                            format!(
                                "{} elements of the largest `{block}` × {c} bytes: backward's unsharded gradients before their copy into the reduce-scatter input",
                                g(layer)
                            ),
                        ),
                        (
                            TermId::FsdpReduceScatterInputs { dtype: rn.into() },
                            [2, r, layer],
                            format!(
                                "2 blocks × {} elements of the largest `{block}` × {r} bytes (reduce_dtype {rn}): an input is kept until the next block's reduce-scatter (reduce_scatter_max_input_buffers 1 → up to 2 alive); the outputs (1/N) accumulate into the gradient shards",
                                g(layer)
                            ),
                        ),
                    ];
                    for (id, factors, formula) in transients {
                        let term = Term::new(id, bytes(mul(&factors)?)?, Kind::Assumed, formula);
                        parts.push(part(term, false));
                    }
                }
                None => left_out.push("FSDP's per-block all-gather and reduce-scatter buffers (this model has no repeated block to wrap)".into()),
            }
        }
        None => left_out.push(
            "FSDP's unsharded root group and per-block all-gather and reduce-scatter buffers (they need the model's tensors: pass --model PATH)".into(),
        ),
    }
    notes.push(format!(
        "FSDP2: fully_shard on every repeated block, then on the root (embeddings, final norm, output head){}",
        match precision {
            Precision::Bf16Mixed => {
                "; MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32) over fp32 parameters"
            }
            Precision::Fp16Mixed => {
                "; MixedPrecisionPolicy(param_dtype=float16, reduce_dtype=float32) over fp32 parameters"
            }
            Precision::Fp32 => "; no mixed precision: everything in fp32",
            Precision::Bf16 => "; the model in bfloat16 (model.to(torch.bfloat16)), no policy",
        }
    ));
    if offload {
        notes.push("CPUOffloadPolicy: the sharded parameters, gradients and optimizer states live on the host and the optimizer step runs on the CPU; each block's shard is copied to the GPU for its all-gather (not counted)".into());
    }
    if ctx.req.optimizer == Optimizer::Adamw8bit {
        notes.push("adamw-8bit under FSDP2: the blockwise states are counted on each tensor's local shard (generalised; bitsandbytes' support of DTensor shards is not checked)".into());
    }
    if n == 1 {
        notes.push("--world-size 1: the shards are the whole model (16 bytes per parameter for mixed-precision AdamW, like the unsharded estimate's fp32 master weights, gradients and states); instead of autocast's 16-bit copy of every weight, FSDP holds the root group and two blocks unsharded, plus its all-gather and reduce-scatter buffers".into());
    }
    Ok(parts)
}
