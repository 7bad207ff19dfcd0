//! DeepSpeed's ZeRO stages 1–3: the stage × component table, the per-rank terms, and DeepSpeed's
//! own estimators reproduced for comparison.

use super::{
    Context, DeepSpeedFigures, Extras, LargestModule, Part, add, bytes, mul, overflow, part,
    partition, width_name,
};
use crate::estimate::states::{Offload, Optimizer, Sharding, Strategy, Trainable, optimizer_bytes};
use crate::estimate::weights::WeightsSource;
use crate::estimate::{EstimateError, Kind, Shard, Term, TermId, g};
use crate::model::TensorGroup;
use crate::units::Overflow;

/// DeepSpeed's `additional_buffer_factor` default, as the fraction 3/2.
const ABF: (u128, u128) = (3, 2);

/// The largest single module's own parameters (`sum(p.numel() for p in
/// m.parameters(recurse=False))` maximised over `model.modules()`, DeepSpeed's `model_to_params`):
/// tensors grouped by their module path (the name without its last segment).
pub fn largest_module(groups: &[TensorGroup]) -> Option<LargestModule> {
    // In the inventory's order (the model's), so that a tie goes to the first module built, as
    // DeepSpeed's `model.modules()` walk would keep it.
    let mut modules: Vec<(&str, u128)> = Vec::new();
    for grp in groups {
        let module = grp.name.rsplit_once('.').map_or("", |(m, _)| m);
        match modules.iter_mut().find(|(m, _)| *m == module) {
            Some((_, n)) => *n += grp.numel() as u128,
            None => modules.push((module, grp.numel() as u128)),
        }
    }
    let mut best: Option<(&str, u128)> = None;
    for (name, n) in modules {
        if best.is_none_or(|(_, b)| n > b) {
            best = Some((name, n));
        }
    }
    best.map(|(name, n)| LargestModule {
        name: if name.is_empty() {
            "(the root module's own parameters)".into()
        } else {
            name.to_string()
        },
        parameters: u64::try_from(n).unwrap_or(u64::MAX),
    })
}

/// DeepSpeed's `estimate_zero2_model_states_mem_needs(total_params, num_gpus_per_node,
/// num_nodes, cpu_offload, additional_buffer_factor=1.5)` → `(cpu_mem, gpu_mem)`, in checked
/// integers (`None` past `u128`).
pub fn deepspeed_zero2(
    p: u128,
    gpus_per_node: u128,
    nodes: u128,
    cpu_offload: bool,
) -> Option<(u128, u128)> {
    let total = nodes.checked_mul(gpus_per_node)?.max(1);
    let abf = |x: u128| Some(x.checked_mul(ABF.0)? / ABF.1);
    if cpu_offload {
        let gpu = p.checked_mul(2)?;
        let cpu = abf(p.checked_mul(total.checked_mul(4)?.max(16))?)?;
        Some((cpu, gpu))
    } else {
        let gpu = p.checked_mul(2)?.checked_add(p.checked_mul(18)? / total)?;
        let cpu = abf(p.checked_mul(4)?.checked_mul(gpus_per_node)?)?;
        Some((cpu, gpu))
    }
}

/// DeepSpeed's `estimate_zero3_model_states_mem_needs(total_params, largest_layer_params,
/// num_gpus_per_node, num_nodes, cpu_offload, cpu_offload_params, zero_init=True,
/// additional_buffer_factor=1.5)` → `(cpu_mem, gpu_mem)`, in checked integers (`gpus_factor =
/// 1 / num_nodes` is applied as a division; Python's float may differ by a byte when the node
/// count is not a power of two).
pub fn deepspeed_zero3(
    p: u128,
    largest: u128,
    gpus_per_node: u128,
    nodes: u128,
    cpu_offload: bool,
    cpu_offload_params: bool,
) -> Option<(u128, u128)> {
    let nodes = nodes.max(1);
    let total = nodes.checked_mul(gpus_per_node)?.max(1);
    let largest_layer_memory = largest.checked_mul(4)?;
    let per_node =
        |k: u128| Some(p.checked_mul(k)?.checked_mul(ABF.0)? / nodes.checked_mul(ABF.1)?);
    if cpu_offload {
        if cpu_offload_params {
            Some((per_node(18)?, largest_layer_memory))
        } else {
            Some((
                per_node(16)?,
                largest_layer_memory.checked_add(p.checked_mul(2)? / total)?,
            ))
        }
    } else {
        Some((
            largest
                .checked_mul(4)?
                .checked_mul(gpus_per_node)?
                .checked_mul(ABF.0)?
                / ABF.1,
            largest_layer_memory.checked_add(p.checked_mul(18)? / total)?,
        ))
    }
}

/// Where a stage keeps a 16-bit component.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    /// Whole on every rank.
    Whole,
    /// Partitioned: `⌈P/N⌉` elements per rank.
    Partitioned,
    /// ZeRO-3's gradients: only the gathered module's, counted in its term.
    Gathered,
}

/// One ZeRO stage: how it holds the 16-bit parameters and gradients, and the ZeRO paper's closed
/// form for it (bytes per parameter replicated, bytes per partitioned element, the formula, and
/// how DeepSpeed differs from it).
struct Stage {
    number: u8,
    params: Held,
    grads: Held,
    paper: (u128, u128, &'static str, &'static str),
}

/// The stage × component table (K = 12 in the paper: fp32 parameters 4 + momentum 4 + variance
/// 4, Rajbhandari et al., §5, Fig. 1).
const STAGES: [Stage; 3] = [
    Stage {
        number: 1,
        params: Held::Whole,
        grads: Held::Whole,
        paper: (4, 12, "2Ψ + 2Ψ + KΨ/N", FP32_GRADIENT_COPY),
    },
    Stage {
        number: 2,
        params: Held::Whole,
        grads: Held::Partitioned,
        paper: (2, 14, "2Ψ + (2 + K)Ψ/N", FP32_GRADIENT_COPY),
    },
    Stage {
        number: 3,
        params: Held::Partitioned,
        grads: Held::Gathered,
        paper: (
            0,
            16,
            "(2 + 2 + K)Ψ/N",
            "DeepSpeed keeps the gradient partition in fp32 (4Ψ/N where the paper has 2Ψ/N in 16 bits) and adds the gathered largest module (4L)",
        ),
    },
];

const FP32_GRADIENT_COPY: &str = "DeepSpeed adds the partitioned fp32 gradient copy (4Ψ/N)";

/// ZeRO stages 1–3 as DeepSpeed's engine lays them out.
pub(super) fn zero(
    sh: &Sharding,
    ctx: &Context<'_>,
    gpus_per_node: u64,
    nodes: u64,
    extras: &mut Extras,
    notes: &mut Vec<String>,
    left_out: &mut Vec<String>,
) -> Result<Vec<Part>, EstimateError> {
    let number = sh.strategy.zero_stage().unwrap_or(3);
    let stage = &STAGES[usize::from(number.clamp(1, 3)) - 1];
    let stage_n = stage.number;
    let n = sh.world_size;
    let p = ctx.trainable.count();
    let part_n = partition(p, n);
    let mixed = ctx.req.precision.mixed();
    // The model's own width: 16 bits under DeepSpeed's bf16/fp16 modes, else fp32.
    let w: u128 = if mixed { 2 } else { 4 };
    let wn = width_name(w);
    let adam = matches!(ctx.req.optimizer, Optimizer::Adam | Optimizer::Adamw);
    let generalised = if mixed && adam {
        ""
    } else {
        "; generalised from DeepSpeed's mixed-precision Adam accounting"
    };
    let offload_opt = sh.offload.is_some();
    let offload_params = sh.offload == Some(Offload::Parameters);
    let mut parts = Vec::new();
    let partition_text = format!("⌈{} / {}⌉ = {} elements per rank", g(p), g(n), g(part_n));
    let calculated = |id: TermId, b: u128, formula: String| -> Result<Term, EstimateError> {
        Ok(Term::new(id, bytes(b)?, Kind::Calculated, formula))
    };

    // Parameters in the model's width.
    match stage.params {
        Held::Whole => parts.push(part(
            calculated(
                TermId::Weights {
                    dtype: Some(wn.into()),
                    shard: Some(Shard::Replicated),
                },
                mul(&[w, p])?,
                format!(
                    "{} parameters × {w} bytes: ZeRO-{stage_n} does not partition the parameters",
                    g(p)
                ),
            )?
            .input("parameters", p as u64),
            true,
        )),
        _ if offload_params => extras
            .host_per_rank
            .push((format!("{wn} parameter partition"), mul(&[w, part_n])?)),
        _ => parts.push(part(
            calculated(
                TermId::Weights {
                    dtype: Some(wn.into()),
                    shard: Some(Shard::Partition),
                },
                mul(&[w, part_n])?,
                format!("{partition_text} × {w} bytes"),
            )?
            .input("parameters", p as u64),
            true,
        )),
    }
    if stage.params == Held::Partitioned {
        let largest = gathered_module(sh, ctx)?;
        let l = largest.parameters as u128;
        parts.push(part(
            Term::new(
                TermId::GatheredLargestModule { dtype: wn.into() },
                bytes(mul(&[2, w, l])?)?,
                Kind::Assumed,
                format!(
                    "{} parameters ({}: {}) × ({w} bytes gathered parameters + {w} bytes gradients): DeepSpeed's largest_layer_memory, one module gathered whole at a time; prefetching (stage3_prefetch_bucket_size, stage3_max_live_parameters) can keep more gathered{generalised}",
                    g(l),
                    largest_source(sh),
                    largest.name
                ),
            )
            .input("largest_module_parameters", largest.parameters),
            true,
        ));
        extras.largest_module = Some(largest);
    }

    // Gradients in the model's width. ZeRO-2 with offload: reduced gradients go straight into
    // the host's fp32 partition.
    match stage.grads {
        Held::Whole => parts.push(part(
            calculated(
                TermId::Gradients {
                    dtype: wn.into(),
                    shard: Some(Shard::Replicated),
                },
                mul(&[w, p])?,
                format!(
                    "{} parameters × {w} bytes: ZeRO-{stage_n} keeps every gradient until the step",
                    g(p)
                ),
            )?,
            true,
        )),
        Held::Partitioned if !offload_opt => parts.push(part(
            calculated(
                TermId::Gradients {
                    dtype: wn.into(),
                    shard: Some(Shard::Partition),
                },
                mul(&[w, part_n])?,
                format!("{partition_text} × {w} bytes: reduce-scattered gradients"),
            )?,
            true,
        )),
        Held::Partitioned | Held::Gathered => {}
    }

    // fp32 gradient partition, master partition, optimizer states: on the host with an offload.
    let (states, states_formula) =
        optimizer_bytes(ctx.req.optimizer, &Trainable::Count(part_n), 4)?;
    let pieces = [
        (
            TermId::Fp32GradientPartition,
            mul(&[4, part_n])?,
            format!(
                "{partition_text} × 4 bytes: the partition's gradients in fp32 for the step (counted by DeepSpeed since #5099){}",
                if mixed {
                    ""
                } else {
                    "; DeepSpeed flattens and keeps them even when the model is fp32"
                }
            ),
            "fp32 gradient partition",
        ),
        (
            TermId::MasterWeights {
                shard: Some(Shard::Partition),
            },
            mul(&[4, part_n])?,
            format!(
                "{partition_text} × 4 bytes: DeepSpeed's fp32 partition (single_partition_of_fp32_groups / fp32_partitioned_groups_flat){}",
                if mixed {
                    ""
                } else {
                    ", cloned even when the model is fp32"
                }
            ),
            "fp32 master partition",
        ),
        (
            TermId::OptimizerStates {
                optimizer: ctx.req.optimizer,
                shard: Some(Shard::Partition),
            },
            states,
            format!("on the partition: {states_formula}"),
            "optimizer states",
        ),
    ];
    for (id, b, formula, host_name) in pieces {
        if offload_opt {
            extras.host_per_rank.push((host_name.to_string(), b));
        } else {
            parts.push(part(
                calculated(id, b, format!("{formula}{generalised}"))?,
                true,
            ));
        }
    }

    // DeepSpeed's estimator and the ZeRO paper, for the case they describe.
    if mixed && adam && stage_n >= 2 {
        deepspeed_figures(sh, p, gpus_per_node, nodes, extras)?;
    }
    if mixed && adam && sh.offload.is_none() {
        let (replicated, partitioned, form, difference) = stage.paper;
        let paper = add([mul(&[replicated, p])?, mul(&[partitioned, part_n])?])?;
        extras.info.push(
            Term::new(
                TermId::ZeroPaper { stage: stage_n },
                bytes(paper)?,
                Kind::Calculated,
                format!(
                    "{form} with K = 12, Ψ = {}, N = {} (Rajbhandari et al. 2019, §5); {difference}",
                    g(p),
                    g(n)
                ),
            )
            .info(),
        );
        extras.zero_paper = Some(bytes(paper)?);
    }
    notes.push(format!(
        "ZeRO-{stage_n} follows DeepSpeed's engine: the model in {wn} ({}), fp32 master weights, gradients and optimizer states partitioned as the stage says; DeepSpeed's communication buckets (reduce_bucket_size, allgather_bucket_size{}) are not counted",
        if mixed {
            "DeepSpeed's bf16/fp16 mode, not torch.autocast's fp32 parameters"
        } else {
            "fp32 training"
        },
        if stage_n == 3 {
            ", stage3_prefetch_bucket_size"
        } else {
            ""
        }
    ));
    if stage_n == 3 {
        notes.push("ZeRO-3 is estimated with zero_init=True (deepspeed.zero.Init), DeepSpeed's default: the model is partitioned as it is built".into());
    }
    if n == 1 {
        notes.push(format!(
            "--world-size 1: the partitions are the whole model, so the model states equal the unsharded estimate's bytes{}; the layout differs (16-bit weights plus an fp32 master copy instead of autocast's fp32 parameters plus its 16-bit cast cache)",
            if stage_n == 3 {
                " plus the gathered largest module (4·L, DeepSpeed's accounting)"
            } else {
                ""
            }
        ));
    }
    left_out.push("DeepSpeed's communication buckets and temporary flat buffers".into());
    Ok(parts)
}

/// ZeRO-3's gathered module: stated by `--largest-layer-parameters`, or the model's largest.
fn gathered_module(sh: &Sharding, ctx: &Context<'_>) -> Result<LargestModule, EstimateError> {
    match (ctx.source, sh.largest_layer_parameters) {
        (_, Some(l)) => Ok(LargestModule {
            name: "--largest-layer-parameters".into(),
            parameters: l,
        }),
        (WeightsSource::Model(m), None) => largest_module(&m.architecture.groups)
            .ok_or_else(|| EstimateError::Input("the model lists no parameter tensor".into())),
        (WeightsSource::Numbers { .. }, None) => Err(EstimateError::Input(
            "--shard zero3 with --parameters needs --largest-layer-parameters N".into(),
        )),
    }
}

/// Where [`gathered_module`] took its figure, as the term's formula says it.
fn largest_source(sh: &Sharding) -> &'static str {
    match sh.largest_layer_parameters {
        Some(_) => "--largest-layer-parameters",
        None => "the model's largest module",
    }
}

/// DeepSpeed's estimator for ZeRO-2/3 with mixed-precision Adam: two information lines and the
/// summary's figures.
fn deepspeed_figures(
    sh: &Sharding,
    p: u128,
    gpus_per_node: u64,
    nodes: u64,
    extras: &mut Extras,
) -> Result<(), EstimateError> {
    let stage3 = sh.strategy == Strategy::Zero3;
    let offload_opt = sh.offload.is_some();
    let offload_params = sh.offload == Some(Offload::Parameters);
    let (gp, nd) = (gpus_per_node as u128, nodes as u128);
    let largest = extras.largest_module.as_ref().map_or(0, |m| m.parameters);
    let (figures, estimator, args) = if stage3 {
        (
            deepspeed_zero3(p, largest as u128, gp, nd, offload_opt, offload_params),
            "estimate_zero3_model_states_mem_needs",
            format!(
                "total_params={}, largest_layer_params={}, num_gpus_per_node={}, num_nodes={}, cpu_offload={}, cpu_offload_params={}, zero_init=True",
                g(p),
                g(largest),
                g(gp),
                g(nd),
                py_bool(offload_opt),
                py_bool(offload_params)
            ),
        )
    } else {
        (
            deepspeed_zero2(p, gp, nd, offload_opt),
            "estimate_zero2_model_states_mem_needs",
            format!(
                "total_params={}, num_gpus_per_node={}, num_nodes={}, cpu_offload={}",
                g(p),
                g(gp),
                g(nd),
                py_bool(offload_opt)
            ),
        )
    };
    let (cpu, gpu) = figures.ok_or_else(|| overflow()(Overflow))?;
    extras.info.push(
        Term::new(
            TermId::DeepspeedGpu,
            bytes(gpu)?,
            Kind::Calculated,
            format!(
                "{estimator}({args}) gpu_mem; the model-state terms above equal it when --world-size divides the parameters (partitions are ⌈P/N⌉)"
            ),
        )
        .info()
        .input("estimator", estimator),
    );
    extras.info.push(
        Term::new(
            TermId::DeepspeedHost,
            bytes(cpu)?,
            Kind::Assumed,
            format!(
                "{estimator}({args}, additional_buffer_factor=1.5) cpu_mem: DeepSpeed's own figure for one node's RAM, its 1.5 buffer factor an assumption"
            ),
        )
        .info()
        .input("memory", "host")
        .input("additional_buffer_factor", 1.5),
    );
    extras.deepspeed = Some(DeepSpeedFigures {
        estimator,
        gpu_bytes: bytes(gpu)?,
        cpu_bytes_per_node: bytes(cpu)?,
        additional_buffer_factor: 1.5,
        zero_init: stage3.then_some(true),
        cpu_offload: offload_opt,
        cpu_offload_params: stage3.then_some(offload_params),
    });
    Ok(())
}

fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}
