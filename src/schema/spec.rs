//! The worker's contract: what the CLI asks one fresh worker to run, written to a JSON file the
//! worker reads (`python -m iteragpu.worker SPEC.json`). Its Python twin is
//! `python/iteragpu/spec.py`, which refuses unknown keys; both follow these examples:
//!
//! ```text
//! {"workload": "dense", "devices": ["cuda:0"], "seed": 0, "batch": 2, "context": 128, "width": 1024, "depth": 4, "dtype": "float32", "warmup": 3, "repeats": 5, "empty_cache": "never", "whole_loop": false}
//! {"workload": "dense", "devices": ["cuda:0"], "seed": 0, "batch": 2, "context": 128, "width": 1024, "depth": 4, "dtype": "float32", "warmup": 0, "repeats": 2, "empty_cache": "never", "whole_loop": false, "task": "train", "steps": 2, "optimizer": "adamw", "precision": "bf16-mixed", "gradient_checkpointing": false}
//! {"workload": "causal-lm", "devices": ["cuda:0"], "seed": 0, "model_config": "/abs/config.json", "batch": 1, "context": 16, "prompt_tokens": 128, "new_tokens": 32, "cache": "dynamic", "window": null, "dtype": "bfloat16", "whole_loop": false, "lora_rank": null, "lora_targets": []}
//! {"workload": "vision", "devices": ["cuda:0"], "seed": 0, "model_config": "/abs/config.json", "timm_model": null, "images": 8, "height": 224, "width": 224, "dtype": "float32", "whole_loop": false}
//! {"workload": "vlm", "devices": ["cuda:0"], "seed": 0, "model_config": "/abs/config.json", "processor_config": "/abs/preprocessor_config.json", "batch": 1, "prompt_tokens": 128, "new_tokens": 32, "images_per_request": 2, "height": 336, "width": 336, "dtype": "float16"}
//! {"workload": "vlm", "devices": ["cuda:0"], "seed": 0, "model_config": "/abs/config.json", "processor_config": "/abs/preprocessor_config.json", "batch": 1, "prompt_tokens": 128, "new_tokens": 32, "images_per_request": 1, "height": 560, "width": 560, "dtype": "bfloat16", "requests": 2, "prompt_lengths": [128, 512], "output_lengths": [32, 64]}
//! {"workload": "script", "devices": ["cuda:0"], "seed": 0, "script": "/abs/train.py", "script_args": ["--batch", "8"]}
//! {"workload": "script", "devices": ["cuda:0"], "seed": 0, "script": "/abs/train.py", "script_args": [], "history": {"mode": "timeline", "max_entries": 100000, "snapshot": "/out/.r.json.snapshot-1a2b"}}
//! ```
//! A sweep adds `"memory_limit_bytes": 8589934592` to emulate a smaller card; a prediction adds
//! `"predict": {…}`, the target card (`prediction::target::Target`); a measurement adds what the
//! allocator records, `"history": {"mode": "state"}` (the last example: `--timeline`). The training keys
//! appear only for `--task train`; the quantized cache's keys only for `--cache quantized`.
//!
//! These types are the contract: `schema/worker-spec.schema.json` is generated from them
//! (schemars), and `tests/integration/contract.rs` fails when it is stale and checks `spec.py`'s
//! keys and these examples against it.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::estimate::kv_cache::CacheKind;
use crate::model::quantization::QuantizeMethod;

/// One worker's specification.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkerSpec {
    #[serde(flatten)]
    pub workload: WorkloadSpec,
    /// Devices, `cuda:N`; several devices split the dense network (never one pool).
    pub devices: Vec<String>,
    /// Seed of the synthetic inputs and weights (scripts receive it too).
    pub seed: u64,
    /// Emulated capacity: PyTorch is capped at this minus the memory outside its allocator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_bytes: Option<u64>,
    /// Predict instead of measure: run on data-less CUDA tensors for this card, in a CPU process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predict: Option<crate::schema::target::Target>,
    /// What the allocator records (`measure/history.rs`); absent: nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<crate::schema::history::HistorySpec>,
    /// A prediction of rank 0 of this many ranks, on PyTorch's fake process group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u64>,
}

/// What the worker runs, tagged by `workload`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "workload", rename_all = "kebab-case")]
pub enum WorkloadSpec {
    Dense(DenseSpec),
    CausalLm(CausalLmSpec),
    Vision(VisionSpec),
    Vlm(VlmSpec),
    Script(ScriptSpec),
}

/// The guide's dense network on synthetic inputs of shape (batch, context, width).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DenseSpec {
    pub batch: u64,
    pub context: u64,
    pub width: u64,
    pub depth: u64,
    /// PyTorch's name: `float32`, `float16`, `bfloat16`.
    pub dtype: String,
    pub warmup: u64,
    pub repeats: u64,
    pub empty_cache: EmptyCache,
    pub whole_loop: bool,
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub training: Option<TrainingSpec>,
}

/// A language model built from a config.json with random weights.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CausalLmSpec {
    pub model_config: PathBuf,
    pub batch: u64,
    /// Sequence length of a training step.
    pub context: u64,
    pub prompt_tokens: u64,
    pub new_tokens: u64,
    pub cache: CacheKind,
    /// `--cache sliding`: the window (null: the model's own).
    pub window: Option<u64>,
    pub dtype: String,
    pub whole_loop: bool,
    pub lora_rank: Option<u64>,
    pub lora_targets: Vec<String>,
    /// `--cache quantized`: transformers' QuantizedCache settings.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub quantized_cache: Option<QuantizedCacheSpec>,
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub training: Option<TrainingSpec>,
    /// `--requests`: concurrent requests, each with its own cache (absent: one batch).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<RequestsSpec>,
    /// `--quantize`: the linear layers loaded quantized by bitsandbytes (absent: in `dtype`).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<QuantizeSpec>,
    /// A checkpoint stored quantized by GPTQ, AWQ, compressed-tensors or HQQ (its config's
    /// `quantization_config`): the linear layers are built in that layout, data-less
    /// (`workloads/packed.py`). Boxed: the spec's variants stay of like sizes.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub packed: Option<Box<PackedSpec>>,
}

/// transformers' `BitsAndBytesConfig` for the model's load: `load_in_4bit` with
/// `bnb_4bit_quant_type` nf4 or fp4 (and `bnb_4bit_use_double_quant`), or `load_in_8bit`;
/// the compute dtype is the spec's `dtype`, the output head stays unquantized.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QuantizeSpec {
    pub quantize: QuantizeMethod,
    pub double_quant: bool,
}

/// A GPTQ, AWQ, compressed-tensors or HQQ checkpoint's quantized linear layers: the format, its
/// bits and group size, and the modules its config keeps unquantized; compressed-tensors and HQQ
/// add their scheme (the tensors differ with it: `workloads/packed.py`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PackedSpec {
    /// `gptq`, `awq`, `compressed-tensors` or `hqq`.
    pub packed_format: String,
    pub packed_bits: u64,
    pub packed_group_size: Option<u64>,
    pub packed_skip_modules: Vec<String>,
    /// compressed-tensors: `pack-quantized`, `int-quantized` or `float-quantized`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packed_storage: Option<String>,
    /// compressed-tensors: `tensor`, `channel` or `group`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packed_strategy: Option<String>,
    /// compressed-tensors: symmetric weights (no zero point).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packed_symmetric: Option<bool>,
    /// compressed-tensors: input activations quantized (a static scale when `packed_static_input`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packed_input_quantized: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packed_static_input: Option<bool>,
    /// The scales' dtype (compressed-tensors), or the compute dtype of scale and zero (HQQ).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packed_scale_dtype: Option<String>,
    /// HQQ: the axis its groups run along (0 or 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packed_axis: Option<u64>,
}

impl PackedSpec {
    /// What the built layers' forward is, said in the notes: the format's reference path
    /// (assumed), or compressed-tensors' decompression at the first forward (transformers').
    pub fn note(&self) -> String {
        let format = self.packed_storage.as_ref().map_or_else(
            || self.packed_format.to_uppercase(),
            |s| format!("{} {s}", self.packed_format),
        );
        match self.packed_format.as_str() {
            "compressed-tensors" => format!(
                "{format} checkpoint: its layers built in compressed-tensors' own tensors (at estimate's bytes), then decompressed to dense {} weights at the model's first forward, as compressed-tensors' decompression hook does under transformers; vLLM would run them compressed",
                self.packed_scale_dtype.as_deref().unwrap_or("float16")
            ),
            "hqq" => format!(
                "{format} checkpoint: its layers built as hqq's HQQLinear holds them (W_q, scale, zero; hqq's own loader), the forward its reference path: each weight dequantized to the compute dtype for its matmul (assumed; HQQ's fused backends hold less); transformers' from_pretrained builds no HQQ layer from a checkpoint"
            ),
            _ => format!(
                "{format} checkpoint: its layers built in the format's packed tensors (at estimate's bytes), the forward the format's reference path: each weight dequantized to the compute dtype for its matmul (assumed; the fused kernels hold less); in LoRA training, peft's own GPTQLoraLinear over them, the weight dequantized again for the backward pass and never kept between the two (assumed, as bitsandbytes and the formats' Triton kernels do)"
            ),
        }
    }

    /// The fiche's dimensions: `GPTQ 4-bit`, `HQQ 4-bit`, `compressed-tensors pack-quantized
    /// 4-bit`, the group size, and the scales' dtype where the format names one.
    pub fn dimensions(&self) -> serde_json::Map<String, serde_json::Value> {
        let name = match &self.packed_storage {
            Some(storage) => format!("{} {storage}", self.packed_format),
            None => self.packed_format.to_uppercase(),
        };
        let mut dims = serde_json::Map::new();
        dims.insert(
            "quantization".into(),
            serde_json::json!(format!(
                "{name} {}-bit (the checkpoint's quantization_config)",
                self.packed_bits
            )),
        );
        dims.insert(
            "quantization_group_size".into(),
            serde_json::json!(self.packed_group_size),
        );
        if let Some(dtype) = &self.packed_scale_dtype {
            dims.insert("quantization_scale_dtype".into(), serde_json::json!(dtype));
        }
        dims
    }
}

/// N generation requests alive together, each with its own dynamic cache: prefilled one after
/// another, then decoded in turn. Both lists hold one length per request (already cycled).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RequestsSpec {
    pub requests: u64,
    pub prompt_lengths: Vec<u64>,
    pub output_lengths: Vec<u64>,
}

/// An image model with random weights on a batch of random images: a transformers config
/// (`model_config`) or a timm model's name (`timm_model`), exactly one of them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VisionSpec {
    pub model_config: Option<PathBuf>,
    pub timm_model: Option<String>,
    /// Images processed together.
    pub images: u64,
    /// The images' height and width in pixels.
    pub height: u64,
    pub width: u64,
    pub dtype: String,
    pub whole_loop: bool,
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub training: Option<TrainingSpec>,
}

/// A vision-language model with random weights (its folder's config.json), prompted with
/// `images_per_request` random images of height × width processed by its own image processor
/// (the folder's preprocessor_config.json) and `prompt_tokens` text tokens, per request of the
/// batch; then `new_tokens` generated with the KV cache. Inference only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VlmSpec {
    pub model_config: PathBuf,
    pub processor_config: PathBuf,
    /// Requests prompted together (a batch).
    pub batch: u64,
    /// Text tokens per request, beside the image tokens.
    pub prompt_tokens: u64,
    pub new_tokens: u64,
    pub images_per_request: u64,
    /// The images' height and width in pixels, before the processor.
    pub height: u64,
    pub width: u64,
    pub dtype: String,
    /// `--requests`: concurrent requests, each with its images and its own cache (absent: one
    /// batch).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<RequestsSpec>,
}

/// A user's script run as `__main__` with its arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScriptSpec {
    pub script: PathBuf,
    /// With `{batch}`, `{context}`, … already replaced by this trial's values.
    pub script_args: Vec<String>,
    /// What runs when it is not `script` itself (a command line as typed, `workload::launch`):
    /// a module run as `__main__` or a console script's `module:attr`; `script` is then the
    /// module's file (the code the run's hash covers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<ScriptEntry>,
    /// What the command's launcher sets for a rank (accelerate's ACCELERATE_*/FSDP_*, DeepSpeed's
    /// RANK, MASTER_*, …): set before the script runs; a rank's own RANK, LOCAL_RANK,
    /// WORLD_SIZE, MASTER_* and TORCHELASTIC_* (torchrun's, or the prediction's) stand.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// DeepSpeed's launcher passes `--local_rank=N` (the rank's LOCAL_RANK) before the arguments.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub local_rank_arg: bool,
}

/// A module or a console entry point, as `python -m` and the installed wrapper run them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScriptEntry {
    /// `module` (`python -m NAME`) or `console` (NAME is `module:attr`).
    pub kind: String,
    pub name: String,
    /// `sys.argv[0]` as the launcher gives it.
    pub program: String,
}

/// The training loop's settings (`task` is always `train` when present).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TrainingSpec {
    pub task: Task,
    pub steps: u64,
    pub optimizer: TrainOptimizer,
    pub precision: TrainPrecision,
    pub gradient_checkpointing: bool,
    /// `--shard`: the model wrapped in DDP or sharded with FSDP2 over the torchrun job's ranks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<TrainShard>,
}

/// How a training model is spread over the ranks of a torchrun job.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum TrainShard {
    /// DistributedDataParallel: a full replica per rank, gradients all-reduced.
    Ddp,
    /// FSDP2 (`fully_shard` per decoder layer, then the root): parameters, gradients and
    /// optimizer states sharded over the ranks.
    Fsdp,
}

/// The optimizers the training loop runs (the estimate knows more).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    clap::ValueEnum,
    strum::Display,
    strum::AsRefStr,
    strum::VariantArray,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum TrainOptimizer {
    Adamw,
    Sgd,
    /// bitsandbytes' `AdamW8bit`: 8-bit states in PyTorch's allocator.
    #[value(name = "adamw-8bit")]
    #[serde(rename = "adamw-8bit")]
    #[strum(serialize = "adamw-8bit")]
    Adamw8bit,
    /// bitsandbytes' `PagedAdamW8bit` (QLoRA's): 8-bit states in CUDA unified memory, outside
    /// PyTorch's allocator.
    #[value(name = "paged-adamw-8bit")]
    #[serde(rename = "paged-adamw-8bit")]
    #[strum(serialize = "paged-adamw-8bit")]
    PagedAdamw8bit,
}

/// The precisions the training loop runs (the estimate knows fp16-mixed too).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    clap::ValueEnum,
    strum::Display,
    strum::AsRefStr,
    strum::VariantArray,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum TrainPrecision {
    /// Everything in float32.
    Fp32,
    /// torch.autocast to bfloat16 with float32 weights.
    Bf16Mixed,
    /// torch.autocast to float16 with float32 weights and a GradScaler (loss scaling).
    Fp16Mixed,
    /// Weights, gradients and optimizer states in bfloat16.
    Bf16,
}

/// A quantized KV cache: `nbits` per value in groups, the last tokens at full precision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QuantizedCacheSpec {
    pub kv_quant_bits: u64,
    pub kv_group_size: u64,
    pub kv_residual: u64,
}

/// What a measured workload does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// The guide's small dense network on synthetic inputs.
    Dense,
    /// A language model built from a Hugging Face config with random weights (needs transformers).
    CausalLm,
    /// An image model (ViT, DeiT, ConvNeXt, Swin, a CLIP/SigLIP vision tower) from a Hugging Face
    /// config with random weights, or `timm:NAME` (needs transformers, or timm).
    Vision,
    /// A vision-language model (LLaVA-1.5, Qwen2-VL, Qwen2.5-VL, Gemma 3, Llama-3.2-Vision) from
    /// a folder holding its config.json and preprocessor_config.json, prompted with images and
    /// text, then generating (needs transformers and pillow).
    Vlm,
}

/// Inference or training.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Task {
    Infer,
    Train,
}

/// `torch.cuda.empty_cache()` policy between warm repeats.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    clap::ValueEnum,
    strum::Display,
    strum::AsRefStr,
    strum::VariantArray,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum EmptyCache {
    Never,
    BetweenRepeats,
}

impl WorkerSpec {
    /// The spec as a JSON object (what the worker reads; a sweep compares these across trials).
    pub fn to_map(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        }
    }

    /// What identifies the code this spec runs (a result's and a prediction's `code_hash`): the
    /// tool's Python package, and for a script also the script's bytes and its arguments.
    pub fn code_hash(&self) -> crate::python_side::CodeHash {
        match &self.workload {
            WorkloadSpec::Script(s) => {
                crate::python_side::script_code_hash(&s.script, &s.script_args)
            }
            _ => crate::python_side::CodeHash {
                code_hash: crate::python_side::code_hash(),
                script_sha256: None,
            },
        }
    }

    /// The built-in workload's name, or `script`.
    pub fn workload_name(&self) -> &'static str {
        match self.workload {
            WorkloadSpec::Dense(_) => "dense",
            WorkloadSpec::CausalLm(_) => "causal-lm",
            WorkloadSpec::Vision(_) => "vision",
            WorkloadSpec::Vlm(_) => "vlm",
            WorkloadSpec::Script(_) => "script",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The training loop's options are named once: the spec's word, the flag's value and the
    /// text are the same derived string.
    #[test]
    fn option_names_are_the_specs_and_the_flags() {
        use strum::VariantArray;
        fn check<T: Serialize + AsRef<str> + clap::ValueEnum>(v: &T) {
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_ref());
            assert_eq!(v.to_possible_value().unwrap().get_name(), v.as_ref());
        }
        TrainOptimizer::VARIANTS.iter().for_each(check);
        TrainPrecision::VARIANTS.iter().for_each(check);
        EmptyCache::VARIANTS.iter().for_each(check);
    }

    /// A measurement and a prediction name their code through the spec: a script's hash covers
    /// its bytes and its arguments, a built-in workload's is the tool's.
    #[test]
    fn the_code_hash_follows_the_workload() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("train.py");
        std::fs::write(&script, "pass\n").unwrap();
        let spec = |args: &[&str]| -> WorkerSpec {
            serde_json::from_value(
                serde_json::json!({"workload": "script", "devices": ["cuda:0"],
                "seed": 0, "script": script, "script_args": args}),
            )
            .unwrap()
        };
        let args = vec!["--batch".to_string(), "8".to_string()];
        let hash = spec(&["--batch", "8"]).code_hash();
        assert_eq!(hash, crate::python_side::script_code_hash(&script, &args));
        assert!(hash.script_sha256.is_some());
        assert_ne!(
            hash.code_hash,
            spec(&["--batch", "16"]).code_hash().code_hash
        );
        let dense: WorkerSpec = serde_json::from_str(
            r#"{"workload": "dense", "devices": ["cuda:0"], "seed": 0, "batch": 2, "context": 128, "width": 1024, "depth": 4, "dtype": "float32", "warmup": 3, "repeats": 5, "empty_cache": "never", "whole_loop": false}"#,
        )
        .unwrap();
        assert_eq!(
            dense.code_hash(),
            crate::python_side::CodeHash {
                code_hash: crate::python_side::code_hash(),
                script_sha256: None
            }
        );
    }

    /// The examples of the module documentation are what the worker receives, key for key.
    #[test]
    fn the_documented_examples_round_trip() {
        let examples: Vec<&str> = include_str!("spec.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("//! {"))
            .collect();
        assert_eq!(examples.len(), 8);
        for rest in examples {
            let text = format!("{{{rest}");
            let original: Value = serde_json::from_str(&text).expect(&text);
            let spec: WorkerSpec = serde_json::from_value(original.clone()).expect(&text);
            assert_eq!(serde_json::to_value(&spec).unwrap(), original, "{text}");
        }
    }

    #[test]
    fn training_and_limit_keys_appear_only_when_set() {
        let spec = WorkerSpec {
            workload: WorkloadSpec::Dense(DenseSpec {
                batch: 1,
                context: 2,
                width: 3,
                depth: 1,
                dtype: "float32".into(),
                warmup: 0,
                repeats: 1,
                empty_cache: EmptyCache::Never,
                whole_loop: false,
                training: Some(TrainingSpec {
                    task: Task::Train,
                    steps: 2,
                    optimizer: TrainOptimizer::Adamw,
                    precision: TrainPrecision::Bf16Mixed,
                    gradient_checkpointing: true,
                    shard: None,
                }),
            }),
            devices: vec!["cuda:0".into()],
            seed: 0,
            memory_limit_bytes: None,
            predict: None,
            history: None,
            world_size: None,
        };
        let map = spec.to_map();
        assert_eq!(map["workload"], "dense");
        assert_eq!(map["task"], "train");
        assert_eq!(map["precision"], "bf16-mixed");
        assert!(!map.contains_key("memory_limit_bytes"));
        let back: WorkerSpec = serde_json::from_value(Value::Object(map)).unwrap();
        assert_eq!(back, spec);
    }
}
