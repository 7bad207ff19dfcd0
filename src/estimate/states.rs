//! The vocabulary of a training request, shared by the unsharded terms (`training.rs`) and the
//! sharded ones (`sharding.rs`): optimizer, precision, LoRA, how the state is spread over ranks,
//! the trainable tensors and the optimizer-state bytes they imply. Both modules use it and neither
//! imports the other's internals through it.

use serde::Serialize;

use super::{EstimateError, g};
use crate::dtype::Dtype;
use crate::model::inventory::TensorGroup;
use crate::units::Bytes;

/// Optimizers whose states we can count, named as the command line takes them (`sgd-momentum`,
/// `adamw-8bit`) in tables and JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
#[derive(strum::Display, strum::AsRefStr, strum::EnumString, strum::VariantArray)]
#[strum(serialize_all = "kebab-case")]
pub enum Optimizer {
    Adamw,
    Adam,
    Sgd,
    SgdMomentum,
    #[value(name = "adamw-8bit")]
    #[serde(rename = "adamw-8bit")]
    #[strum(serialize = "adamw-8bit")]
    Adamw8bit,
    Adafactor,
}

/// Where the trainable parameters live and in which width; named as the command line takes it
/// (`bf16-mixed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
#[derive(strum::Display, strum::AsRefStr, strum::VariantArray)]
#[strum(serialize_all = "kebab-case")]
pub enum Precision {
    /// Everything in float32.
    Fp32,
    /// torch.autocast to bfloat16: fp32 parameters (the master copy), 16-bit copies for compute.
    Bf16Mixed,
    /// torch.autocast to float16 with a GradScaler: as bf16-mixed.
    Fp16Mixed,
    /// Parameters, gradients and optimizer states in bfloat16 (`model.to(torch.bfloat16)`).
    Bf16,
}

impl Precision {
    /// Bytes of a trainable parameter, its gradient and each optimizer state element.
    pub(super) fn param_bytes(self) -> u64 {
        match self {
            Precision::Bf16 => 2,
            _ => 4,
        }
    }
    /// Bytes of one activation element.
    pub(super) fn activation_bytes(self) -> u64 {
        match self {
            Precision::Fp32 => 4,
            _ => 2,
        }
    }
    pub(super) fn mixed(self) -> bool {
        matches!(self, Precision::Bf16Mixed | Precision::Fp16Mixed)
    }
    /// The dtype the forward computes in, which is also a frozen LoRA base's dtype (as predict
    /// and measure build it: `workload::plan`'s weights dtype).
    pub fn compute_dtype(self) -> Dtype {
        match self {
            Precision::Fp32 => Dtype::Float32,
            Precision::Bf16Mixed | Precision::Bf16 => Dtype::Bfloat16,
            Precision::Fp16Mixed => Dtype::Float16,
        }
    }
}

/// What a precision means for each kind of tensor: the one table estimate's terms, predict's
/// and measure's training loop (`workload::plan`) follow, said by all three commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PrecisionMeaning {
    /// The trained parameters' dtype (the fp32 master copy under the mixed precisions; LoRA's
    /// adapters).
    pub parameters_dtype: &'static str,
    /// The dtype the forward computes in (autocast's under the mixed precisions).
    pub compute_dtype: &'static str,
    pub gradients_dtype: &'static str,
    pub optimizer_states_dtype: &'static str,
    /// Under LoRA: the frozen base's dtype, the compute dtype.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora_base_dtype: Option<&'static str>,
}

impl Precision {
    /// Its meaning for a full fine-tune, or for LoRA adapters on a frozen base (`lora`).
    pub fn meaning(self, lora: bool) -> PrecisionMeaning {
        let trained = if lora || self != Precision::Bf16 {
            "float32"
        } else {
            "bfloat16"
        };
        PrecisionMeaning {
            parameters_dtype: trained,
            compute_dtype: self.compute_dtype().torch_name(),
            gradients_dtype: trained,
            optimizer_states_dtype: trained,
            lora_base_dtype: lora.then(|| self.compute_dtype().torch_name()),
        }
    }
}

impl std::fmt::Display for PrecisionMeaning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "trained parameters {}, compute {}, gradients {}, optimizer states {}",
            self.parameters_dtype,
            self.compute_dtype,
            self.gradients_dtype,
            self.optimizer_states_dtype
        )?;
        match self.lora_base_dtype {
            Some(d) => write!(f, ", frozen LoRA base {d}"),
            None => Ok(()),
        }
    }
}

/// Bytes of a trainable value (parameter, gradient, optimizer-state element). LoRA adapters are
/// float32 whatever the precision: peft's `get_peft_model` casts 16-bit adapters to float32
/// (`autocast_adapter_dtype=True`, its default), as predict shows under `bf16`.
pub(super) fn trainable_bytes(req: &TrainingRequest) -> u64 {
    if req.lora.is_some() {
        4
    } else {
        req.precision.param_bytes()
    }
}

/// LoRA adapters on the named modules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lora {
    pub rank: u64,
    pub targets: Vec<String>,
}

/// A training step to estimate.
#[derive(Clone, Debug)]
pub struct TrainingRequest {
    pub optimizer: Optimizer,
    pub precision: Precision,
    /// `--precision` written on the command line (else its default, fp32): the output says which.
    pub precision_stated: bool,
    pub lora: Option<Lora>,
    pub gradient_checkpointing: bool,
    pub flash_attention: bool,
    /// Micro-batch and sequence length, needed for activations.
    pub batch: Option<u64>,
    pub context: Option<u64>,
    /// Sharded data-parallel training (`--shard`): the terms become one rank's.
    pub sharding: Option<Sharding>,
}

/// How the training state is spread over the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[derive(strum::Display, strum::AsRefStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum Strategy {
    /// DistributedDataParallel: a full replica per rank, plus the reducer's gradient buckets.
    Ddp,
    /// ZeRO stage 1: optimizer states (and fp32 master weights) partitioned.
    Zero1,
    /// ZeRO stage 2: + gradients partitioned.
    Zero2,
    /// ZeRO stage 3: + parameters partitioned.
    Zero3,
    /// FSDP2 (`fully_shard`): parameters, gradients and optimizer states sharded per tensor.
    Fsdp,
}

impl Strategy {
    pub(super) fn zero_stage(self) -> Option<u8> {
        match self {
            Strategy::Zero1 => Some(1),
            Strategy::Zero2 => Some(2),
            Strategy::Zero3 => Some(3),
            _ => None,
        }
    }
}

/// What an offload moves to the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[derive(strum::Display, strum::AsRefStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum Offload {
    /// DeepSpeed `offload_optimizer`: fp32 master weights, fp32 gradients and optimizer states
    /// on the CPU (the step runs there).
    Optimizer,
    /// DeepSpeed `offload_param` (with `offload_optimizer`), or FSDP2's `CPUOffloadPolicy`:
    /// the parameter partitions too.
    Parameters,
}

/// A sharded training request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sharding {
    pub strategy: Strategy,
    /// Ranks in the data-parallel group (at least 1).
    pub world_size: u64,
    /// Ranks per node; `None`: the world size up to 8, else 8 (it must divide the world size).
    pub gpus_per_node: Option<u64>,
    pub offload: Option<Offload>,
    /// ZeRO-3 without `--model`: the largest single module's own parameters.
    pub largest_layer_parameters: Option<u64>,
    /// NCCL's memory per rank; `None`: the sharding module's `DEFAULT_COMM_RESERVE` (1 GiB).
    pub comm_reserve: Option<Bytes>,
}

pub(super) enum Trainable {
    Shapes(Vec<TensorGroup>),
    Count(u128),
}

impl Trainable {
    pub(super) fn count(&self) -> u128 {
        match self {
            Trainable::Shapes(groups) => groups.iter().map(TensorGroup::total).sum(),
            Trainable::Count(n) => *n,
        }
    }
}

/// Optimizer-state bytes for the trainable tensors (or one rank's partition of them).
pub(super) fn optimizer_bytes(
    opt: Optimizer,
    trainable: &Trainable,
    s: u128,
) -> Result<(u128, String), EstimateError> {
    let n = trainable.count();
    Ok(match opt {
        Optimizer::Sgd => (0, "plain SGD (momentum 0) keeps no state".into()),
        Optimizer::SgdMomentum => (
            n * s,
            format!("{} parameters × 1 momentum buffer × {s} bytes", g(n)),
        ),
        Optimizer::Adam | Optimizer::Adamw => (
            2 * n * s,
            format!(
                "{} parameters × 2 states (exp_avg, exp_avg_sq) × {s} bytes",
                g(n)
            ),
        ),
        // bitsandbytes AdamW8bit: blockwise 8-bit states (blocks of 256 with an fp32 absmax);
        // tensors under 4,096 elements keep 32-bit states (min_8bit_size).
        Optimizer::Adamw8bit => {
            let per_tensor = |numel: u128| {
                if numel < 4096 {
                    2 * numel * 4
                } else {
                    2 * (numel + numel.div_ceil(256) * 4)
                }
            };
            let bytes = match trainable {
                Trainable::Shapes(groups) => groups
                    .iter()
                    .map(|grp| per_tensor(grp.numel() as u128) * grp.count as u128)
                    .sum(),
                Trainable::Count(n) => per_tensor(*n),
            };
            (
                bytes,
                format!(
                    "{} parameters × 2 states × (1 byte + 4 bytes per 256-value block); tensors under 4,096 values keep fp32 states",
                    g(n)
                ),
            )
        }
        // transformers Adafactor (beta1 None): factored second moment, a row and a column
        // vector for tensors of 2+ dimensions, a full vector otherwise.
        Optimizer::Adafactor => match trainable {
            Trainable::Count(_) => {
                return Err(EstimateError::Input(
                    "adafactor factors its states by tensor shape: pass --model PATH so the shapes are known".into(),
                ));
            }
            Trainable::Shapes(groups) => {
                let elements: u128 = groups
                    .iter()
                    .map(|grp| {
                        let per = match grp.shape.as_slice() {
                            [] => 1,
                            [n] => *n as u128,
                            shape => {
                                let (last, rest) = shape.split_last().unwrap_or((&1, &[]));
                                let (second, head) = rest.split_last().unwrap_or((&1, &[]));
                                let head: u128 = head.iter().map(|d| *d as u128).product();
                                head * (*second as u128) + head * (*last as u128)
                            }
                        };
                        per * grp.count as u128
                    })
                    .sum();
                (
                    elements * s,
                    format!(
                        "factored second moment: rows + columns of each matrix ({} values) × {s} bytes",
                        g(elements)
                    ),
                )
            }
        },
    })
}
