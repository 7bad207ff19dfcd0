//! What an estimate term is, as a value: `TermId` is written as `id` next to the English `name`
//! (`"id": "optimizer_states", "optimizer": "adamw", "shard": "partition"`), and the English name
//! is made from it here, once. Code that looks for a term (the ledger, the report, the tests) matches
//! on the id, never on the words.
//!
//! The `id` string tells apart the terms of one estimate; the parameters (a dtype as the name
//! writes it, an optimizer, where a sharded term lives) are separate fields beside it.

use serde::{Deserialize, Serialize};

use super::kv_cache::CacheKind;
use super::states::Optimizer;

/// Where a sharded model-state term lives on a rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Shard {
    /// A full copy on every rank (ZeRO-1/2 parameters, ZeRO-1 gradients).
    Replicated,
    /// ZeRO's flat partition, ⌈P/N⌉ elements per rank.
    Partition,
    /// FSDP2's per-tensor dim-0 shard.
    FsdpShard,
}

/// The identity of an estimate term. Serialized internally tagged (`id`) and flattened into the
/// term; `dtype` is the width as the name writes it (`bfloat16`, `fp32`, `16-bit`).
#[derive(
    Clone, Debug, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr, strum::EnumCount,
)]
#[serde(tag = "id", rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum TermId {
    /// The model's parameters (no dtype for `--parameters --bits`); sharded under ZeRO or FSDP.
    Weights {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dtype: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shard: Option<Shard>,
    },
    /// The quantized linear weights in their storage format (`GPTQ 4-bit g128`).
    QuantizedWeights {
        format: String,
    },
    /// What a quantized checkpoint keeps unquantized (embeddings, norms, biases).
    UnquantizedWeights {
        dtype: String,
    },
    /// One weight dequantized at a time to the compute format.
    DequantizedWeight {
        dtype: String,
    },
    /// Autocast's 16-bit cast cache of every weight.
    ComputeCopies,
    /// The bytes the safetensors headers describe (information).
    StoredWeights,
    /// The caching allocator's rounding and segments around the weights.
    AllocatorSegments,
    LoraAdapters {
        dtype: String,
    },
    /// fp32 master weights: autocast's parameters, or ZeRO's partition.
    MasterWeights {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shard: Option<Shard>,
    },
    Gradients {
        dtype: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shard: Option<Shard>,
    },
    /// ZeRO's fp32 copy of the partition's gradients.
    Fp32GradientPartition,
    /// DDP's reducer buckets: a flat copy of every gradient.
    DdpBuckets {
        dtype: String,
    },
    /// ZeRO-3: the largest module gathered whole, weights and gradients.
    GatheredLargestModule {
        dtype: String,
    },
    /// FSDP2: the root group (embeddings, final norm, head) unsharded.
    FsdpRootGroup {
        dtype: String,
    },
    /// FSDP2: two blocks all-gathered (current and prefetched).
    FsdpGatheredBlocks {
        dtype: String,
    },
    /// FSDP2: one block's unsharded gradients.
    FsdpBlockGradients {
        dtype: String,
    },
    /// FSDP2: the reduce-scatter inputs.
    FsdpReduceScatterInputs {
        dtype: String,
    },
    OptimizerStates {
        optimizer: Optimizer,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shard: Option<Shard>,
    },
    /// The optimizer step's own temporaries (foreach Adam/AdamW's √v of every parameter).
    OptimizerStepTemporaries {
        optimizer: Optimizer,
    },
    Activations,
    LogitsAndLoss,
    /// Inference: the prefill's largest layer and the last position's logits.
    PrefillTransient,
    /// The batch of images given to a vision model.
    ImageInputs,
    /// Inference: the largest set of tensors alive inside one layer of a forward (vision).
    ForwardTransient,
    /// What the attention keeps per its kernel: eager's s×s scores, a fused kernel's row
    /// statistics (vision).
    AttentionScores {
        kernel: super::vision::AttentionKernel,
    },
    /// The KV cache on the GPU; `bits` for a quantized cache.
    KvCache {
        cache: CacheKind,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bits: Option<u64>,
    },
    /// An offloaded cache's layers in host memory (information).
    KvCacheHost,
    /// Sliding layers holding the whole prompt until the first decoding step.
    KvPrefillSurplus,
    /// MLA's decompressed K and V, as older transformers kept them (information).
    KvDecompressed,
    /// A serving engine's profile-run activation peak (`estimate serve`).
    ServeActivationPeak,
    /// Memory outside PyTorch's allocator a serving engine charges (NCCL, cuBLAS).
    NonTorchMemory,
    /// A serving engine's CUDA graphs.
    CudaGraphs,
    /// A serving engine's paged KV pool on one GPU.
    PagedKvCache {
        engine: super::serving::Engine,
    },
    /// The margin the user states.
    Reserve,
    /// NCCL's communicators, outside PyTorch's allocator.
    NcclBuffers,
    /// Offloaded states in the host's memory, per node (information).
    HostOffloadedStates,
    /// DeepSpeed's estimator, GPU per rank (information).
    DeepspeedGpu,
    /// DeepSpeed's estimator, host memory per node (information).
    DeepspeedHost,
    /// The ZeRO paper's closed form for the stage (information).
    ZeroPaper {
        stage: u8,
    },
    /// A term this version does not know: a newer file's id, or an older file's name that no
    /// id matches.
    #[serde(other)]
    Other,
}

impl TermId {
    /// The `id` string alone (`optimizer_states`), the same as the file's.
    pub fn key(&self) -> &'static str {
        self.into()
    }

    /// The English name of the term, as every estimate has written it.
    pub fn english(&self) -> String {
        let p = |base: &str, param: &str| format!("{base} ({param})");
        match self {
            TermId::Weights { dtype: None, .. } => "weights".into(),
            TermId::Weights {
                dtype: Some(d),
                shard,
            } => p("weights", d) + weights_shard(*shard),
            TermId::QuantizedWeights { format } => p("weights, quantized", format),
            TermId::UnquantizedWeights { dtype } => p("weights, unquantized modules", dtype),
            TermId::DequantizedWeight { dtype } => p("dequantized weight", dtype),
            TermId::ComputeCopies => "weights, 16-bit compute copies".into(),
            TermId::StoredWeights => "weights as stored (safetensors headers)".into(),
            TermId::AllocatorSegments => "allocator segments around the weights".into(),
            TermId::LoraAdapters { dtype } => p("LoRA adapters", dtype),
            TermId::MasterWeights { shard: None } => "master weights (fp32 parameters)".into(),
            TermId::MasterWeights { shard: Some(_) } => "master weights (fp32), partition".into(),
            TermId::Gradients { dtype, shard } => p("gradients", dtype) + gradients_shard(*shard),
            TermId::Fp32GradientPartition => "gradients (fp32 copy), partition".into(),
            TermId::DdpBuckets { dtype } => p("gradients", dtype) + ", DDP reducer buckets",
            TermId::GatheredLargestModule { dtype } => {
                p("weights and gradients", dtype) + " of the gathered largest module"
            }
            TermId::FsdpRootGroup { dtype } => p("weights", dtype) + ", FSDP root group unsharded",
            TermId::FsdpGatheredBlocks { dtype } => {
                p("weights", dtype) + ", FSDP all-gathered blocks"
            }
            TermId::FsdpBlockGradients { dtype } => p("gradients", dtype) + ", one block unsharded",
            TermId::FsdpReduceScatterInputs { dtype } => {
                p("gradients", dtype) + ", FSDP reduce-scatter inputs"
            }
            TermId::OptimizerStates { optimizer, shard } => {
                p("optimizer states", optimizer.as_ref())
                    + match shard {
                        None | Some(Shard::Replicated) => "",
                        Some(Shard::Partition) => ", partition",
                        Some(Shard::FsdpShard) => ", FSDP shard",
                    }
            }
            TermId::OptimizerStepTemporaries { optimizer } => {
                p("optimizer step temporaries", optimizer.as_ref())
            }
            TermId::Activations => "activations".into(),
            TermId::LogitsAndLoss => "logits and loss".into(),
            TermId::PrefillTransient => "prefill transient (largest layer + logits)".into(),
            TermId::ImageInputs => "image inputs (pixels)".into(),
            TermId::ForwardTransient => "forward transient (largest layer)".into(),
            TermId::AttentionScores { kernel } => match kernel {
                super::vision::AttentionKernel::Eager => {
                    "attention scores (eager: s×s per head)".into()
                }
                k => format!("attention row statistics ({k}: no s×s scores)"),
            },
            TermId::KvCache { cache, bits } => match (cache, bits) {
                (CacheKind::Quantized, Some(b)) => format!("KV cache (quantized, {b}-bit)"),
                (CacheKind::Offloaded, _) => "KV cache (offloaded: on the GPU)".into(),
                (c, _) => p("KV cache", c.as_ref()),
            },
            TermId::KvCacheHost => "KV cache (offloaded: in host memory)".into(),
            TermId::KvPrefillSurplus => "KV cache, sliding layers' prefill surplus".into(),
            TermId::KvDecompressed => {
                "KV cache, decompressed K and V (not what transformers 5 keeps)".into()
            }
            TermId::ServeActivationPeak => "profile run's activation peak".into(),
            TermId::NonTorchMemory => "memory outside PyTorch (non-torch)".into(),
            TermId::CudaGraphs => "CUDA graphs".into(),
            TermId::PagedKvCache { engine } => p("KV cache pool", &engine.to_string()),
            TermId::Reserve => "reserve".into(),
            TermId::NcclBuffers => "NCCL communicator buffers (outside PyTorch's allocator)".into(),
            TermId::HostOffloadedStates => {
                "HOST memory per node (CPU RAM, not GPU): offloaded states".into()
            }
            TermId::DeepspeedGpu => "DeepSpeed's estimator, GPU per rank (for comparison)".into(),
            TermId::DeepspeedHost => {
                "HOST memory per node (CPU RAM, not GPU), DeepSpeed's estimator".into()
            }
            TermId::ZeroPaper { stage } => {
                format!("ZeRO paper's ZeRO-{stage} model states (for comparison)")
            }
            TermId::Other => "(a term this version does not know)".into(),
        }
    }

    /// The id of a term read from a file written before terms had one: the id whose English name
    /// it is. The only place a name becomes an id; names no id makes give `Other`.
    pub fn from_english(name: &str) -> TermId {
        let fixed = [
            TermId::Weights {
                dtype: None,
                shard: None,
            },
            TermId::ComputeCopies,
            TermId::StoredWeights,
            TermId::AllocatorSegments,
            TermId::MasterWeights { shard: None },
            TermId::MasterWeights {
                shard: Some(Shard::Partition),
            },
            TermId::Fp32GradientPartition,
            TermId::Activations,
            TermId::LogitsAndLoss,
            TermId::PrefillTransient,
            TermId::ImageInputs,
            TermId::ForwardTransient,
            TermId::AttentionScores {
                kernel: super::vision::AttentionKernel::Eager,
            },
            TermId::AttentionScores {
                kernel: super::vision::AttentionKernel::Sdpa,
            },
            TermId::AttentionScores {
                kernel: super::vision::AttentionKernel::FlashAttention2,
            },
            TermId::KvCache {
                cache: CacheKind::Offloaded,
                bits: None,
            },
            TermId::KvCacheHost,
            TermId::KvPrefillSurplus,
            TermId::KvDecompressed,
            TermId::ServeActivationPeak,
            TermId::NonTorchMemory,
            TermId::CudaGraphs,
            TermId::PagedKvCache {
                engine: super::serving::Engine::Vllm,
            },
            TermId::PagedKvCache {
                engine: super::serving::Engine::Sglang,
            },
            TermId::Reserve,
            TermId::NcclBuffers,
            TermId::HostOffloadedStates,
            TermId::DeepspeedGpu,
            TermId::DeepspeedHost,
        ];
        let stage = name
            .strip_prefix("ZeRO paper's ZeRO-")
            .and_then(|r| r.strip_suffix(" model states (for comparison)"))
            .and_then(|s| s.parse().ok());
        // A parameter stands in parentheses (`weights (bf16), FSDP shard`): each text between a
        // ` (` and a later `)` is tried, for every id that takes one.
        let params = name.match_indices(" (").flat_map(|(open, _)| {
            let param = &name[open + 2..];
            param
                .match_indices(')')
                .map(move |(close, _)| &param[..close])
        });
        fixed
            .into_iter()
            .chain(stage.map(|stage| TermId::ZeroPaper { stage }))
            .chain(params.flat_map(with_param))
            .find(|id| id.english() == name)
            .unwrap_or(TermId::Other)
    }
}

/// Every id that takes a parameter, made with `param`; unsharded first, so that a name two shards
/// share (`optimizer states (adamw)`) reads as the unsharded one.
fn with_param(param: &str) -> Vec<TermId> {
    let text = || param.to_string();
    let mut ids = vec![
        TermId::QuantizedWeights { format: text() },
        TermId::UnquantizedWeights { dtype: text() },
        TermId::DequantizedWeight { dtype: text() },
        TermId::LoraAdapters { dtype: text() },
        TermId::DdpBuckets { dtype: text() },
        TermId::GatheredLargestModule { dtype: text() },
        TermId::FsdpRootGroup { dtype: text() },
        TermId::FsdpGatheredBlocks { dtype: text() },
        TermId::FsdpBlockGradients { dtype: text() },
        TermId::FsdpReduceScatterInputs { dtype: text() },
    ];
    let shards = [Shard::Replicated, Shard::Partition, Shard::FsdpShard];
    for shard in [None].into_iter().chain(shards.map(Some)) {
        ids.push(TermId::Weights {
            dtype: Some(text()),
            shard,
        });
        ids.push(TermId::Gradients {
            dtype: text(),
            shard,
        });
        if let Ok(optimizer) = param.parse() {
            ids.push(TermId::OptimizerStates { optimizer, shard });
        }
    }
    if let Ok(optimizer) = param.parse() {
        ids.push(TermId::OptimizerStepTemporaries { optimizer });
    }
    if let Ok(cache) = param.parse() {
        ids.push(TermId::KvCache { cache, bits: None });
    }
    if let Some(bits) = param
        .strip_prefix("quantized, ")
        .and_then(|r| r.strip_suffix("-bit"))
        .and_then(|b| b.parse().ok())
    {
        ids.push(TermId::KvCache {
            cache: CacheKind::Quantized,
            bits: Some(bits),
        });
    }
    ids
}

fn weights_shard(shard: Option<Shard>) -> &'static str {
    match shard {
        None => "",
        Some(Shard::Replicated) => ", full copy on every rank",
        Some(Shard::Partition) => ", ZeRO-3 partition",
        Some(Shard::FsdpShard) => ", FSDP shard",
    }
}

fn gradients_shard(shard: Option<Shard>) -> &'static str {
    match shard {
        None => "",
        Some(Shard::Replicated) => ", full on every rank",
        Some(Shard::Partition) => ", ZeRO-2 partition",
        Some(Shard::FsdpShard) => ", FSDP shard",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use strum::EnumCount;

    /// The estimate's enums are named once: the file's word, the flag's value and the text are
    /// the same derived string.
    #[test]
    fn enum_names_are_the_files_and_the_flags() {
        use strum::VariantArray;
        fn check<T: Serialize + AsRef<str> + std::fmt::Display>(v: &T) {
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_ref());
            assert_eq!(v.to_string(), v.as_ref());
        }
        fn flag<T: clap::ValueEnum + AsRef<str>>(v: &T) {
            assert_eq!(v.to_possible_value().unwrap().get_name(), v.as_ref());
        }
        use crate::estimate::{Kind, Offload, Precision, Strategy};
        Kind::VARIANTS.iter().for_each(check);
        for v in Optimizer::VARIANTS {
            check(v);
            flag(v);
        }
        for v in Precision::VARIANTS {
            check(v);
            flag(v);
        }
        for v in CacheKind::VARIANTS {
            check(v);
            flag(v);
        }
        for v in Strategy::VARIANTS {
            check(v);
            flag(v);
        }
        for v in Offload::VARIANTS {
            check(v);
            flag(v);
        }
        for s in [Shard::Replicated, Shard::Partition, Shard::FsdpShard] {
            assert_eq!(serde_json::to_value(s).unwrap(), <&str>::from(s));
        }
    }

    /// One id of every kind, with the parameters estimates give them.
    fn every_id() -> Vec<TermId> {
        let d = |s: &str| s.to_string();
        let mut ids = vec![
            TermId::Weights {
                dtype: None,
                shard: None,
            },
            TermId::QuantizedWeights {
                format: d("bnb nf4 + double quant"),
            },
            TermId::QuantizedWeights {
                format: d("FP8 128×128 blocks"),
            },
            TermId::UnquantizedWeights {
                dtype: d("bfloat16"),
            },
            TermId::DequantizedWeight {
                dtype: d("float16"),
            },
            TermId::ComputeCopies,
            TermId::StoredWeights,
            TermId::AllocatorSegments,
            TermId::LoraAdapters {
                dtype: d("float32"),
            },
            TermId::MasterWeights { shard: None },
            TermId::MasterWeights {
                shard: Some(Shard::Partition),
            },
            TermId::Fp32GradientPartition,
            TermId::DdpBuckets { dtype: d("fp32") },
            TermId::GatheredLargestModule { dtype: d("16-bit") },
            TermId::FsdpRootGroup { dtype: d("bf16") },
            TermId::FsdpGatheredBlocks { dtype: d("bf16") },
            TermId::FsdpBlockGradients { dtype: d("bf16") },
            TermId::FsdpReduceScatterInputs { dtype: d("fp32") },
            TermId::OptimizerStepTemporaries {
                optimizer: Optimizer::Adamw,
            },
            TermId::Activations,
            TermId::LogitsAndLoss,
            TermId::PrefillTransient,
            TermId::ImageInputs,
            TermId::ForwardTransient,
            TermId::AttentionScores {
                kernel: crate::estimate::vision::AttentionKernel::Eager,
            },
            TermId::AttentionScores {
                kernel: crate::estimate::vision::AttentionKernel::Sdpa,
            },
            TermId::KvCache {
                cache: CacheKind::Quantized,
                bits: Some(4),
            },
            TermId::KvCacheHost,
            TermId::KvPrefillSurplus,
            TermId::KvDecompressed,
            TermId::ServeActivationPeak,
            TermId::NonTorchMemory,
            TermId::CudaGraphs,
            TermId::PagedKvCache {
                engine: crate::estimate::serving::Engine::Vllm,
            },
            TermId::PagedKvCache {
                engine: crate::estimate::serving::Engine::Sglang,
            },
            TermId::Reserve,
            TermId::NcclBuffers,
            TermId::HostOffloadedStates,
            TermId::DeepspeedGpu,
            TermId::DeepspeedHost,
            TermId::ZeroPaper { stage: 3 },
        ];
        for shard in [None, Some(Shard::Replicated), Some(Shard::Partition)] {
            ids.push(TermId::Weights {
                dtype: Some(d("16-bit")),
                shard,
            });
            ids.push(TermId::Gradients {
                dtype: d("fp32"),
                shard,
            });
        }
        ids.push(TermId::Weights {
            dtype: Some(d("bf16")),
            shard: Some(Shard::FsdpShard),
        });
        ids.push(TermId::Gradients {
            dtype: d("bf16"),
            shard: Some(Shard::FsdpShard),
        });
        for shard in [None, Some(Shard::Partition), Some(Shard::FsdpShard)] {
            for optimizer in <Optimizer as strum::VariantArray>::VARIANTS {
                ids.push(TermId::OptimizerStates {
                    optimizer: *optimizer,
                    shard,
                });
            }
        }
        for cache in <CacheKind as strum::VariantArray>::VARIANTS {
            if *cache != CacheKind::Quantized {
                ids.push(TermId::KvCache {
                    cache: *cache,
                    bits: None,
                });
            }
        }
        ids
    }

    #[test]
    fn every_kind_of_id_is_listed() {
        let keys: BTreeSet<&str> = every_id().iter().map(TermId::key).collect();
        // Every variant but `Other`, which no estimate makes.
        assert_eq!(keys.len(), TermId::COUNT - 1, "{keys:?}");
    }

    /// An estimate file without ids is read back through the English names: each name gives
    /// back the id it was made from.
    #[test]
    fn english_names_read_back_to_their_id() {
        for id in every_id() {
            assert_eq!(TermId::from_english(&id.english()), id, "{}", id.english());
        }
        assert_eq!(
            TermId::from_english("weights"),
            TermId::Weights {
                dtype: None,
                shard: None
            }
        );
        assert_eq!(
            TermId::from_english("optimizer states (adamw-8bit), partition"),
            TermId::OptimizerStates {
                optimizer: Optimizer::Adamw8bit,
                shard: Some(Shard::Partition)
            }
        );
        for unknown in [
            "",
            "weights (",
            "optimizer states (lion)",
            "something new (x)",
        ] {
            assert_eq!(TermId::from_english(unknown), TermId::Other, "{unknown}");
        }
    }

    /// The `id` string is the variant's name in snake_case, the same for serde and for `key`;
    /// parameters sit beside it and stay out when absent.
    #[test]
    fn the_id_is_a_field_with_its_parameters_beside_it() {
        for id in every_id() {
            let v = serde_json::to_value(&id).unwrap();
            assert_eq!(v["id"], id.key());
            assert_eq!(serde_json::from_value::<TermId>(v).unwrap(), id);
        }
        assert_eq!(
            serde_json::to_value(TermId::Weights {
                dtype: None,
                shard: None
            })
            .unwrap(),
            serde_json::json!({"id": "weights"})
        );
        assert_eq!(
            serde_json::to_value(TermId::OptimizerStates {
                optimizer: Optimizer::SgdMomentum,
                shard: Some(Shard::FsdpShard)
            })
            .unwrap(),
            serde_json::json!({"id": "optimizer_states", "optimizer": "sgd-momentum", "shard": "fsdp_shard"})
        );
        // A newer file's id is kept as `other`, not refused.
        assert_eq!(
            serde_json::from_value::<TermId>(serde_json::json!({"id": "flux_capacitor"})).unwrap(),
            TermId::Other
        );
    }
}
