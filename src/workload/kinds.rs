//! Each workload's validated settings (dense, causal-lm, vision, a user's script), and the
//! checks that build them from the options: the plan assembles them.

use anyhow::{Result, bail};
use serde_json::Value;
use std::path::PathBuf;

use crate::dtype::Dtype;
use crate::estimate::kv_cache::CacheKind;
use crate::model::quantization::QuantizeMethod;
use crate::model::{Architecture, Config, ModelError};
use crate::schema::spec::{EmptyCache, Task, TrainOptimizer, TrainPrecision, TrainShard};
use crate::workload::options::RunOptions;

/// The workload and its validated settings.
#[derive(Clone, Debug)]
pub enum WorkloadPlan {
    Dense(DensePlan),
    CausalLm(Box<CausalLmPlan>),
    Vision(VisionPlan),
    Vlm(VlmPlan),
    Script(ScriptPlan),
}

/// A vision-language model prompted with images and text, then generating (inference only).
#[derive(Clone, Debug)]
pub struct VlmPlan {
    /// The folder as the user named it (recorded in the dimensions).
    pub model: PathBuf,
    /// Its config.json and preprocessor_config.json, absolute (what the worker opens).
    pub config: PathBuf,
    pub processor: PathBuf,
    pub dtype: Dtype,
    /// Concurrent requests, each with its images and its own cache (`None`: one batch of
    /// `--batch` requests); how many is the dimension `requests`.
    pub requests: Option<RequestsPlan>,
    /// The text model's positions (`max_position_embeddings`, in `text_config` when nested),
    /// when the config states them: the longest request, image tokens included.
    pub max_positions: Option<u64>,
    /// The prompt tokens each image takes at the least, known before processing (its markers,
    /// Gemma 3's fixed `mm_tokens_per_image`); the rest is counted by the worker.
    pub min_image_tokens: u64,
}

/// An image model on a batch of random images.
#[derive(Clone, Debug)]
pub struct VisionPlan {
    /// What the user named: the config.json, or `timm:NAME` (recorded in the dimensions).
    pub model: String,
    pub source: VisionSource,
    pub dtype: Dtype,
    pub whole_loop: bool,
    pub training: Option<TrainingPlan>,
}

/// Where a vision model comes from.
#[derive(Clone, Debug)]
pub enum VisionSource {
    /// A transformers config (absolute path, what the worker opens).
    Config(PathBuf),
    /// A timm model's name (built by `timm.create_model`, where timm is installed).
    Timm(String),
}

#[derive(Clone, Debug)]
pub struct DensePlan {
    pub dtype: Dtype,
    pub warmup: u64,
    pub repeats: u64,
    pub empty_cache: EmptyCache,
    pub whole_loop: bool,
    pub training: Option<TrainingPlan>,
}

#[derive(Clone, Debug)]
pub struct CausalLmPlan {
    /// The config.json as the user named it (recorded in the result's dimensions).
    pub config: PathBuf,
    /// The same, absolute (what the worker opens).
    pub config_absolute: PathBuf,
    /// The model's architecture, when its family is known to the estimator (for predictions).
    pub architecture: Option<Architecture>,
    pub cache: CacheKind,
    pub window: Option<u64>,
    pub dtype: Dtype,
    pub whole_loop: bool,
    pub lora: Option<LoraPlan>,
    pub training: Option<TrainingPlan>,
    /// Concurrent requests, each with its own cache (`None`: one batch of `--batch` sequences);
    /// how many is the dimension `requests`.
    pub requests: Option<RequestsPlan>,
    /// The model's positions (`max_position_embeddings`), when its config states them.
    pub max_positions: Option<u64>,
    /// The linear layers loaded quantized by bitsandbytes (`--quantize`, or the checkpoint's own
    /// bitsandbytes `quantization_config`).
    pub quantize: Option<QuantizePlan>,
    /// A GPTQ or AWQ checkpoint's packed layers (its own `quantization_config`).
    pub packed: Option<crate::schema::spec::PackedSpec>,
}

/// bitsandbytes' load of the model, as transformers' `BitsAndBytesConfig` asks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantizePlan {
    pub method: QuantizeMethod,
    pub double_quant: bool,
    /// Read from the checkpoint's `quantization_config` rather than `--quantize`.
    pub from_checkpoint: bool,
}

impl QuantizePlan {
    /// The quantization as a prediction's dimensions (and the fiche's): the method, how the weights
    /// are stored, the dtype the matmuls compute in, double quantization, and where it was read.
    pub fn dimensions(&self, dtype: &str) -> serde_json::Map<String, serde_json::Value> {
        use crate::model::quantization::QuantizeMethod;
        let (method, storage) = match self.method {
            QuantizeMethod::Nf4 => (
                "bitsandbytes nf4",
                "uint8, two 4-bit values a byte, a float32 absmax per block of 64",
            ),
            QuantizeMethod::Fp4 => (
                "bitsandbytes fp4",
                "uint8, two 4-bit values a byte, a float32 absmax per block of 64",
            ),
            QuantizeMethod::Int8 => (
                "bitsandbytes LLM.int8",
                "int8, a float32 scale per row (outlier columns in the compute dtype)",
            ),
        };
        let mut dims = serde_json::Map::new();
        dims.insert("quantization".into(), serde_json::json!(method));
        dims.insert("quantization_storage".into(), serde_json::json!(storage));
        dims.insert(
            "quantization_compute_dtype".into(),
            serde_json::json!(dtype),
        );
        dims.insert("double_quant".into(), serde_json::json!(self.double_quant));
        dims.insert(
            "quantization_source".into(),
            serde_json::json!(if self.from_checkpoint {
                "the checkpoint's quantization_config"
            } else {
                "--quantize"
            }),
        );
        dims
    }
}

/// The lengths of concurrent requests, cycled over them; an empty list takes the one value of
/// `--prompt-tokens` / `--new-tokens` for every request.
#[derive(Clone, Debug, Default)]
pub struct RequestsPlan {
    pub prompt_lengths: Vec<u64>,
    pub output_lengths: Vec<u64>,
}

#[derive(Clone, Debug)]
pub struct ScriptPlan {
    /// Absolute path of the script.
    pub path: PathBuf,
    /// Its arguments, with `{batch}`, `{context}`, … still to be replaced by each trial's values.
    pub args_template: Vec<String>,
    /// A module or console script run instead of the file (`-- COMMAND`, `workload::launch`).
    pub entry: Option<crate::schema::spec::ScriptEntry>,
    /// What the command's launcher sets for a rank (`ScriptSpec::env`).
    pub env: std::collections::BTreeMap<String, String>,
    /// DeepSpeed's `--local_rank=N` before the arguments.
    pub local_rank_arg: bool,
}

/// The training loop (measured with AdamW or SGD, in fp32, bf16-mixed, fp16-mixed or bf16).
#[derive(Clone, Copy, Debug)]
pub struct TrainingPlan {
    pub optimizer: TrainOptimizer,
    pub precision: TrainPrecision,
    /// `--precision` was given; else fp32, estimate's default too.
    pub precision_stated: bool,
    pub gradient_checkpointing: bool,
    pub shard: Option<TrainShard>,
}

#[derive(Clone, Debug)]
pub struct LoraPlan {
    pub rank: u64,
    pub targets: Vec<String>,
}

/// The dtype of the weights: training precision decides; else --dtype; else the default.
pub(super) fn weights_dtype(args: &RunOptions, default: Dtype) -> Result<Dtype> {
    if args.task == Task::Train {
        let precision = args.precision.unwrap_or(TrainPrecision::Fp32);
        // A frozen LoRA base is kept in the compute dtype (as `estimate` counts it, and as people
        // load it); full fine-tuning in bf16-mixed keeps fp32 weights (the master copy).
        let by_precision = match precision {
            TrainPrecision::Bf16Mixed if args.lora_rank.is_some() => Dtype::Bfloat16,
            TrainPrecision::Fp16Mixed if args.lora_rank.is_some() => Dtype::Float16,
            TrainPrecision::Fp32 | TrainPrecision::Bf16Mixed | TrainPrecision::Fp16Mixed => {
                Dtype::Float32
            }
            TrainPrecision::Bf16 => Dtype::Bfloat16,
        };
        if let Some(d) = args.dtype
            && d != by_precision
        {
            bail!(
                "--dtype {d} contradicts --precision {}, which keeps the weights in {by_precision}; drop --dtype",
                precision
            );
        }
        return Ok(by_precision);
    }
    let d = args.dtype.unwrap_or(default);
    if !matches!(
        d,
        Dtype::Float32 | Dtype::Float16 | Dtype::Bfloat16 | Dtype::Float64
    ) {
        bail!(
            "--dtype {d} is not a floating-point dtype for weights; use float32, float16 or bfloat16"
        );
    }
    Ok(d)
}

/// The training loop's settings, or `None` for inference (where training options are refused).
pub(super) fn training(args: &RunOptions) -> Result<Option<TrainingPlan>> {
    if args.task != Task::Train {
        if args.gradient_checkpointing || args.lora_rank.is_some() {
            bail!(
                "--gradient-checkpointing and --lora-rank apply to --task train; add --task train"
            );
        }
        return Ok(None);
    }
    Ok(Some(TrainingPlan {
        optimizer: args.optimizer.unwrap_or(TrainOptimizer::Adamw),
        precision: args.precision.unwrap_or(TrainPrecision::Fp32),
        precision_stated: args.precision.is_some(),
        gradient_checkpointing: args.gradient_checkpointing,
        shard: args.shard,
    }))
}

pub(super) fn dense(args: &RunOptions) -> Result<DensePlan> {
    if args.model.is_some() {
        bail!("--model applies to --workload causal-lm or vision");
    }
    if args.lora_rank.is_some() {
        bail!(
            "--lora-rank applies to --workload causal-lm (the dense network has no LoRA targets)"
        );
    }
    let dtype = weights_dtype(args, Dtype::Float32)?;
    Ok(DensePlan {
        dtype,
        warmup: args.warmup.unwrap_or(3),
        repeats: args.repeats.unwrap_or(5),
        empty_cache: args.empty_cache.unwrap_or(EmptyCache::Never),
        whole_loop: args.whole_loop,
        training: training(args)?,
    })
}

pub(super) fn causal_lm(args: &RunOptions) -> Result<CausalLmPlan> {
    let Some(model) = &args.model else {
        bail!("--workload causal-lm needs --model PATH (a config.json or a folder holding one)");
    };
    if args.device.len() > 1 {
        bail!(
            "--workload causal-lm runs on one device; splitting a language model over several GPUs is for you to measure with --script"
        );
    }
    let config_path = if model.is_dir() {
        model.join("config.json")
    } else {
        model.clone()
    };
    let config = Config::load(&config_path)?;
    let architecture = match Architecture::from_config(&config) {
        Ok(a) => Some(a),
        Err(ModelError::UnknownFamily { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let default = architecture
        .as_ref()
        .and_then(|a| a.config_dtype)
        .unwrap_or(Dtype::Bfloat16);
    let dtype = weights_dtype(args, default)?;
    if let Some(rank) = args.lora_rank
        && rank > crate::model::config::MAX_DIMENSION
    {
        bail!(
            "--lora-rank {rank} is larger than any layer ({} at most); give the adapters' rank, e.g. 16",
            crate::model::config::MAX_DIMENSION
        );
    }
    let cache = args.cache.unwrap_or(CacheKind::Dynamic);
    if args.window.is_some() && cache != CacheKind::Sliding {
        bail!("--window applies to --cache sliding; add --cache sliding or drop --window");
    }
    let training = training(args)?;
    let packed = packed(args, architecture.as_ref())?;
    let quantize = if packed.is_some() {
        None
    } else {
        quantize(args, architecture.as_ref())?
    };
    let requests = requests(args)?;
    if requests.is_some() && training.is_none() {
        if cache != CacheKind::Dynamic {
            bail!(
                "--cache {cache} with --requests is not supported yet: each request gets its own dynamic cache; drop --cache"
            );
        }
        if args.whole_loop {
            bail!("--whole-loop with --requests is not supported yet: drop --whole-loop");
        }
    }
    Ok(CausalLmPlan {
        max_positions: config.max_positions()?,
        requests: requests.filter(|_| training.is_none()),
        config_absolute: std::fs::canonicalize(&config_path)?,
        config: config_path,
        architecture,
        cache,
        window: args.window,
        dtype,
        whole_loop: args.whole_loop,
        lora: args.lora_rank.map(|rank| LoraPlan {
            rank,
            targets: args.lora_targets.clone(),
        }),
        training,
        quantize,
        packed,
    })
}

/// A GPTQ, AWQ, compressed-tensors or HQQ checkpoint (its config's `quantization_config`): its
/// quantized layers in the format's own tensors, for inference, and for LoRA training on GPTQ and
/// AWQ (the others are refused with the fix).
fn packed(
    args: &RunOptions,
    arch: Option<&Architecture>,
) -> Result<Option<crate::schema::spec::PackedSpec>> {
    use crate::model::quantization::Format;
    let Some(q) = arch.and_then(|a| a.quantization.as_ref()) else {
        return Ok(None);
    };
    let mut spec = crate::schema::spec::PackedSpec {
        packed_format: String::new(),
        packed_bits: 0,
        packed_group_size: None,
        packed_skip_modules: q.skip_modules.clone(),
        packed_storage: None,
        packed_strategy: None,
        packed_symmetric: None,
        packed_input_quantized: None,
        packed_static_input: None,
        packed_scale_dtype: None,
        packed_axis: None,
    };
    let (format, bits, group_size) = match &q.format {
        Format::Gptq { bits, group_size } => ("gptq", *bits, *group_size),
        Format::Awq { bits, group_size } => ("awq", *bits, *group_size),
        Format::CompressedTensors(s) => {
            use crate::model::quantization::compressed_tensors::{Storage, Strategy};
            spec.packed_storage = Some(
                match s.storage {
                    Storage::PackQuantized => "pack-quantized",
                    Storage::IntQuantized => "int-quantized",
                    Storage::FloatQuantized => "float-quantized",
                }
                .into(),
            );
            let (strategy, group) = match s.strategy {
                Strategy::Tensor => ("tensor", None),
                Strategy::Channel => ("channel", None),
                Strategy::Group(g) => ("group", Some(g)),
            };
            spec.packed_strategy = Some(strategy.into());
            spec.packed_symmetric = Some(s.symmetric);
            spec.packed_input_quantized = Some(s.input_quantized);
            spec.packed_static_input = Some(s.static_input);
            spec.packed_scale_dtype = Some(s.scale_dtype.torch_name().to_string());
            ("compressed-tensors", s.bits, group)
        }
        Format::Hqq(s) => {
            spec.packed_axis = Some(s.axis);
            spec.packed_scale_dtype = Some(s.compute_dtype.torch_name().to_string());
            ("hqq", s.bits, s.group_size)
        }
        _ => return Ok(None),
    };
    if let Some(method) = args.quantize {
        bail!(
            "the config's quantization_config says the checkpoint is stored quantized already ({}): drop --quantize {method}",
            q.label()
        );
    }
    // peft trains LoRA on GPTQ and AWQ layers (its GPTQLoraLinear, `packed_lora.py`); the
    // packed weights themselves are never trained.
    let lora_on_it = matches!(format, "gptq" | "awq");
    if args.task == Task::Train && !lora_on_it {
        bail!(
            "training on a {} checkpoint is not built by the causal-lm workload (peft has no LoRA layer for its packed layers here): predict your training script with --script, or give a config without quantization_config",
            q.label()
        );
    }
    if args.task == Task::Train && args.lora_rank.is_none() {
        bail!(
            "a {} checkpoint's packed weights cannot be trained: add --lora-rank R (LoRA adapters on its packed layers, as peft trains them)",
            q.label()
        );
    }
    if args.shard.is_some() {
        bail!(
            "--shard with a {} checkpoint is not supported: drop --shard",
            q.label()
        );
    }
    spec.packed_format = format.into();
    spec.packed_bits = bits;
    spec.packed_group_size = group_size;
    Ok(Some(spec))
}

/// `--quantize` and `--double-quant`, or the checkpoint's own bitsandbytes `quantization_config`.
fn quantize(args: &RunOptions, arch: Option<&Architecture>) -> Result<Option<QuantizePlan>> {
    if args.double_quant && args.quantize == Some(QuantizeMethod::Int8) {
        bail!(
            "--double-quant quantizes the absmax of 4-bit blocks; LLM.int8 (--quantize int8) has none: drop --double-quant, or use --quantize nf4"
        );
    }
    let stored = arch.and_then(|a| a.quantization.as_ref());
    let bnb = args.quantize.is_some() || stored.is_some_and(|q| q.bnb_method().is_some());
    if bnb && args.task == Task::Train && args.lora_rank.is_none() {
        bail!(
            "a model loaded quantized by bitsandbytes cannot be fully fine-tuned (transformers refuses to train purely quantized weights): add --lora-rank 16 --lora-targets q_proj,v_proj (QLoRA)"
        );
    }
    match (args.quantize, stored) {
        (Some(method), Some(q)) => bail!(
            "the config's quantization_config says the checkpoint is stored quantized already ({}): drop --quantize {method}",
            q.label()
        ),
        (Some(method), None) => {
            if args.shard.is_some() {
                bail!(
                    "--quantize with --shard is not supported: QLoRA under DDP or FSDP2 is not run by the built-in workload; drop --shard, or use --script"
                );
            }
            Ok(Some(QuantizePlan {
                method,
                double_quant: args.double_quant,
                from_checkpoint: false,
            }))
        }
        (None, Some(q)) => match q.bnb_method() {
            Some((method, double_quant)) => Ok(Some(QuantizePlan {
                method,
                double_quant,
                from_checkpoint: true,
            })),
            // Built in --dtype instead, the figure would be the float model's: refused.
            None => bail!(
                "the config's quantization_config stores the weights as {}, which the causal-lm workload does not build (its random weights are loaded through bitsandbytes only): estimate it with `iteragpu estimate --model`, or predict your own loading script with --script; for the float model, give a config without quantization_config",
                q.label()
            ),
        },
        (None, None) => Ok(None),
    }
}

/// `--workload vision --model CONFIG_OR_DIR|timm:NAME`, validated: a transformers config must
/// describe an image model (its own `image_size`, `num_channels` or `patch_size`, or a
/// `vision_config` whose tower is run), so a language model's config is refused here by name.
pub(super) fn vision(args: &RunOptions) -> Result<VisionPlan> {
    let Some(model) = &args.model else {
        bail!(
            "--workload vision needs --model PATH (a config.json or a folder holding one) or --model timm:NAME"
        );
    };
    if args.device.len() > 1 {
        bail!(
            "--workload vision runs on one device; splitting an image model over several GPUs is for you to measure with --script"
        );
    }
    if args.shard.is_some() || args.lora_rank.is_some() {
        bail!(
            "--shard and --lora-rank apply to causal-lm training; the vision workload trains the whole model on one device"
        );
    }
    let text = model.display().to_string();
    let (source, default) = if let Some(name) = text.strip_prefix("timm:") {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
        {
            bail!(
                "--model {text}: give timm's model name after `timm:` (e.g. timm:vit_base_patch16_224)"
            );
        }
        (VisionSource::Timm(name.to_string()), Dtype::Float32)
    } else {
        let path = if model.is_dir() {
            model.join("config.json")
        } else {
            model.clone()
        };
        match crate::model::files::regular_file(&path) {
            Ok(_) => {}
            Err(crate::model::files::FileError::Missing { .. }) => bail!(
                "--model {}: no such file; give an image model's config.json, a folder holding one, or timm:NAME",
                path.display()
            ),
            Err(e) => bail!("--model: {e}"),
        }
        let raw: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)
            .map_err(|e| anyhow::anyhow!("--model {}: not JSON ({e})", path.display()))?;
        let image = |v: &Value| {
            ["image_size", "num_channels", "patch_size"]
                .iter()
                .any(|k| v.get(k).is_some())
        };
        if !image(&raw) && !raw.get("vision_config").is_some_and(image) {
            bail!(
                "--model {}: `{}` is not an image model (its config has no image_size, num_channels, patch_size or vision_config); give a vision config (ViT, DeiT, ConvNeXt, Swin, CLIP, SigLIP), or run a language model with --workload causal-lm",
                path.display(),
                raw.get("model_type").and_then(Value::as_str).unwrap_or("?")
            );
        }
        let dtype = ["torch_dtype", "dtype"]
            .iter()
            .find_map(|k| raw.get(k).and_then(Value::as_str))
            .and_then(|d| d.parse::<Dtype>().ok())
            .unwrap_or(Dtype::Float32);
        (VisionSource::Config(std::fs::canonicalize(&path)?), dtype)
    };
    Ok(VisionPlan {
        model: text,
        source,
        dtype: weights_dtype(args, default)?,
        whole_loop: args.whole_loop,
        training: training(args)?,
    })
}

/// `--requests`, `--prompt-lengths`, `--output-lengths` as concurrent requests (a length list
/// alone is that many requests); `None` when none is given. A list longer than `--requests` is
/// refused.
fn requests(args: &RunOptions) -> Result<Option<RequestsPlan>> {
    if args.requests.is_none() && args.prompt_lengths.is_empty() && args.output_lengths.is_empty() {
        return Ok(None);
    }
    if let Some(n) = args.requests {
        for (flag, list) in [
            ("--prompt-lengths", &args.prompt_lengths),
            ("--output-lengths", &args.output_lengths),
        ] {
            if list.len() as u64 > n {
                bail!(
                    "{flag} lists {} lengths for --requests {n}: give at most one length per request, or raise --requests",
                    list.len()
                );
            }
        }
    }
    Ok(Some(RequestsPlan {
        prompt_lengths: args.prompt_lengths.clone(),
        output_lengths: args.output_lengths.clone(),
    }))
}

pub use crate::model::VLM_FAMILIES;

/// `--workload vlm --model DIR`, validated: the folder holds the model's config.json, a
/// multimodal one (a `vision_config` of a family the worker follows), and the image processor's
/// preprocessor_config.json (the image tokens come from it); training is refused.
pub(super) fn vlm(args: &RunOptions) -> Result<VlmPlan> {
    let Some(model) = &args.model else {
        bail!(
            "--workload vlm needs --model DIR, a folder holding the model's config.json and preprocessor_config.json"
        );
    };
    if args.task == Task::Train {
        bail!(
            "--workload vlm runs inference only (images and text prefilled, then generation); drop --task train, or measure training with --script"
        );
    }
    if args.whole_loop {
        bail!("--whole-loop with --workload vlm is not supported yet: drop --whole-loop");
    }
    if args.device.len() > 1 {
        bail!(
            "--workload vlm runs on one device; splitting a model over several GPUs is for you to measure with --script"
        );
    }
    if !model.is_dir() {
        bail!(
            "--model {}: give the model's folder (holding config.json and preprocessor_config.json), not a file",
            model.display()
        );
    }
    let config = model.join("config.json");
    let processor = model.join("preprocessor_config.json");
    match crate::model::files::regular_file(&config) {
        Ok(_) => {}
        Err(crate::model::files::FileError::Missing { .. }) => bail!(
            "--model {}: no config.json there; give the folder of a vision-language model (config.json and preprocessor_config.json, as published with it)",
            model.display()
        ),
        Err(e) => bail!("--model: {e}"),
    }
    let raw: Value = serde_json::from_str(&std::fs::read_to_string(&config)?)
        .map_err(|e| anyhow::anyhow!("--model {}: not JSON ({e})", config.display()))?;
    let kind = raw.get("model_type").and_then(Value::as_str).unwrap_or("?");
    // The model comes first: a text or image model is sent to its workload before any word on
    // the image processor's file.
    if raw.get("vision_config").is_none() {
        let image_model = ["image_size", "num_channels", "patch_size"]
            .iter()
            .any(|k| raw.get(k).is_some());
        bail!(
            "--model {}: model_type `{kind}` is not a multimodal (image+text) model (its config has no vision_config); {}",
            config.display(),
            if image_model {
                "run an image model with --workload vision"
            } else {
                "run a language model with --workload causal-lm"
            }
        );
    }
    if !VLM_FAMILIES.contains(&kind) {
        bail!(
            "--model {}: model_type `{kind}` is not followed by --workload vlm (its image tokens are counted by the processors of {}); measure it with --script",
            config.display(),
            VLM_FAMILIES.join(", ")
        );
    }
    if matches!(
        crate::model::files::regular_file(&processor),
        Err(crate::model::files::FileError::Missing { .. })
    ) {
        bail!(
            "--model {}: no preprocessor_config.json there: the image tokens come from the model's own image processor; add the preprocessor_config.json published with the model",
            model.display()
        );
    }
    check_processor_file(&processor)?;
    let dtype = ["torch_dtype", "dtype"]
        .iter()
        .find_map(|k| raw.get(k).and_then(Value::as_str))
        .and_then(|d| d.parse::<Dtype>().ok())
        .unwrap_or(Dtype::Bfloat16);
    Ok(VlmPlan {
        max_positions: Config::load(&config)?.max_positions()?,
        min_image_tokens: min_image_tokens(kind, &raw),
        model: model.clone(),
        config: std::fs::canonicalize(&config)?,
        processor: std::fs::canonicalize(&processor)?,
        dtype: weights_dtype(args, dtype)?,
        requests: requests(args)?,
    })
}

/// The image processor's file read as the worker will read it, refused here with its name when it
/// cannot be (not a regular file, empty, not JSON, no `image_processor_type`): the worker's own
/// error would be a `JSONDecodeError` from `json/decoder.py` that names no file.
fn check_processor_file(path: &std::path::Path) -> Result<()> {
    let bytes = crate::model::files::read_capped(path, 1 << 20, "preprocessor_config.json")?;
    let raw: Value = serde_json::from_slice(&bytes).map_err(|e| {
        anyhow::anyhow!(
            "{} is not valid JSON (line {}, column {}: {}); restore the preprocessor_config.json published with the model",
            path.display(),
            e.line(),
            e.column(),
            if bytes.iter().all(u8::is_ascii_whitespace) {
                "the file is empty".to_string()
            } else {
                e.to_string()
            }
        )
    })?;
    if !raw
        .get("image_processor_type")
        .is_some_and(Value::is_string)
    {
        bail!(
            "{} names no image_processor_type (a JSON object with \"image_processor_type\": \"…ImageProcessor\" is expected): transformers cannot tell which processor it describes; restore the preprocessor_config.json published with the model",
            path.display()
        );
    }
    Ok(())
}

/// The prompt tokens one image takes at the least, by the rules of `workloads/vlm.py`
/// (`_image_tokens`, `_placeholder`): Qwen2-VL's vision_start, at least one image token and
/// vision_end; Gemma 3's boi, `mm_tokens_per_image` (256 by default) and eoi; one for LLaVA and
/// Llama-3.2-Vision (LLaVA's real count comes from the processed size, in the worker).
fn min_image_tokens(kind: &str, raw: &Value) -> u64 {
    match kind {
        "qwen2_vl" | "qwen2_5_vl" => 3,
        "gemma3" => {
            2 + raw
                .get("mm_tokens_per_image")
                .and_then(Value::as_u64)
                .unwrap_or(256)
        }
        _ => 1,
    }
}

/// The sides a vision config was built for: its `image_size` (the tower's, for a multimodal
/// config), a number or `[h, w]`: (height, the width when it differs).
pub(super) fn config_image_size(path: &std::path::Path) -> Option<(u64, Option<u64>)> {
    let raw: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    let size = raw
        .get("image_size")
        .or_else(|| raw.get("vision_config")?.get("image_size"))?;
    let side = |v: &Value| v.as_u64().filter(|&n| n > 0);
    if let Some(n) = side(size) {
        return Some((n, None));
    }
    match size.as_array()?.as_slice() {
        [h, w] => {
            let (h, w) = (side(h)?, side(w)?);
            Some((h, (w != h).then_some(w)))
        }
        _ => None,
    }
}
