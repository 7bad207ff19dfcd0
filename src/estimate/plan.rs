//! An estimate as asked for ([`EstimateOptions`], [`VisionOptions`], [`ServingOptions`]: what the
//! command line hands over, so that this module never imports `cli`) → a validated [`Request`]
//! or a serving [`Estimate`]. Every option given acts on the estimate or is refused, by name and
//! with the fix: none is silently ignored.

use std::path::{Path, PathBuf};

use super::kv_cache::{self, CacheKind, CacheOptions, CacheStrategy, QuantizedSettings};
use super::serving::{self, ActivationPeak, Engine, ProfileShape};
use super::training::Lora;
use super::weights::ModelWeights;
use super::{
    Estimate, EstimateError, KvRequest, ModelSummary, Offload, Optimizer, Precision, Request,
    Reserve, Sharding, Strategy, TrainingRequest, WeightsSource,
};
use crate::dtype::Dtype;
use crate::model::quantization::QuantizeMethod;
use crate::model::{Architecture, Config, KvLayout, Quantization};
use crate::units::{Bytes, Decimal};

/// Returns the refusal: bad input, worded with the value and the fix.
macro_rules! refuse {
    ($($arg:tt)*) => {
        return Err(EstimateError::Input(format!($($arg)*)).into())
    };
}

/// The names of the options written on the command line, by the group that defines them (from
/// clap's value sources, in `commands`): the refusals name what the user wrote.
#[derive(Clone, Debug, Default)]
pub struct Written {
    pub images: Vec<String>,
    pub kv_shape: Vec<String>,
    pub kv_load: Vec<String>,
    pub kv_cache: Vec<String>,
    pub quantized_cache: Vec<String>,
    pub activations: Vec<String>,
    pub shard_options: Vec<String>,
}

/// `--train`, `--optimizer`, `--precision` (shared by the language-model and vision estimates).
#[derive(Clone, Copy, Debug)]
pub struct TrainStep {
    pub train: bool,
    pub optimizer: Optimizer,
    pub precision: Precision,
    /// `--precision` was written (the default is said as a default).
    pub precision_stated: bool,
}

/// The KV cache's layout by hand, its load and its kind.
#[derive(Clone, Debug, Default)]
pub struct KvOptions {
    pub layers: Option<u64>,
    pub heads: Option<u64>,
    pub head_dim: Option<u64>,
    /// `--tokens` (or the old `--context`).
    pub tokens: Option<u64>,
    /// `--sequences` (or the old `--batch`).
    pub sequences: Option<u64>,
    pub requests: Option<u64>,
    pub prompt_lengths: Vec<u64>,
    pub output_lengths: Vec<u64>,
    pub prompt_tokens: Option<u64>,
    pub kv_bytes: Option<u64>,
    pub kv_dtype: Option<Dtype>,
    pub cache: Option<CacheKind>,
    pub max_cache_len: Option<u64>,
    pub window: Option<u64>,
    pub quant_bits: Option<u64>,
    pub group_size: Option<u64>,
    pub residual: Option<u64>,
}

/// `--shard`'s options, before `--world-size` is checked present.
#[derive(Clone, Debug, Default)]
pub struct ShardOptions {
    pub world_size: Option<u64>,
    pub gpus_per_node: Option<u64>,
    pub offload: Option<Offload>,
    pub largest_layer_parameters: Option<u64>,
    pub comm_reserve: Option<Bytes>,
}

/// `estimate`: a language model's weights, KV cache, training step and sharding.
#[derive(Clone, Debug)]
pub struct EstimateOptions {
    pub parameters: Option<u64>,
    pub bits: Option<Decimal>,
    pub model: Option<PathBuf>,
    pub dtype: Option<Dtype>,
    /// `--images-per-request`, kept as written: refused with the command that has it.
    pub images_per_request: Option<String>,
    pub quantize: Option<QuantizeMethod>,
    pub double_quant: bool,
    pub step: TrainStep,
    pub lora_rank: Option<u64>,
    pub lora_targets: Vec<String>,
    pub gradient_checkpointing: bool,
    pub flash_attention: bool,
    pub kv: KvOptions,
    pub shard: Option<Strategy>,
    pub shard_options: ShardOptions,
    pub reserve: Option<Reserve>,
    pub written: Written,
}

/// `estimate vision`: an image encoder's config at a resolution, inference or a training step.
#[derive(Clone, Debug)]
pub struct VisionOptions {
    pub model: PathBuf,
    pub dtype: Option<Dtype>,
    pub resolution: Option<(u64, Option<u64>)>,
    pub images: Option<u64>,
    pub images_per_request: Option<String>,
    pub step: TrainStep,
    pub gradient_checkpointing: bool,
    pub reserve: Option<Reserve>,
}

/// `--activation-peak`: a size read from the engine's log, or `predict`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActivationPeakOption {
    Size(Bytes),
    Predict,
}

/// `estimate serve ENGINE`: one GPU of a serving engine, by the engine's rules.
#[derive(Clone, Debug)]
pub struct ServingOptions {
    pub engine: Engine,
    pub model: PathBuf,
    pub dtype: Option<Dtype>,
    pub card: Option<String>,
    pub gpu_memory_utilization: Option<f64>,
    pub max_model_len: Option<u64>,
    pub max_num_seqs: Option<u64>,
    pub max_num_batched_tokens: Option<u64>,
    pub tensor_parallel_size: Option<u64>,
    /// `--kv-cache-dtype fp8` (any of its spellings).
    pub kv_fp8: bool,
    pub block_size: Option<u64>,
    pub enforce_eager: bool,
    pub engine_version: Option<String>,
    pub device_total: Option<Bytes>,
    pub free_at_start: Option<Bytes>,
    pub weights_memory: Option<Bytes>,
    pub activation_peak: Option<ActivationPeakOption>,
    pub non_torch: Option<Bytes>,
    pub kv_cache_memory: Option<Bytes>,
    pub concurrency_at: Vec<u64>,
}

fn verb(names: &[String], one: &'static str, several: &'static str) -> &'static str {
    if names.len() == 1 { one } else { several }
}

fn pronoun(names: &[String]) -> &'static str {
    verb(names, "it", "them")
}

fn refuse_images_per_request(n: &Option<String>) -> Result<(), EstimateError> {
    if let Some(n) = n {
        refuse!(
            "--images-per-request {n}: estimate has no multimodal terms (a prompt's images become tokens only through the model's own image processor): use `iteragpu predict --workload vlm --model DIR --images-per-request {n}`"
        );
    }
    Ok(())
}

/// `estimate`: validates the combination of options and reads the model if one is given.
pub fn plan(o: &EstimateOptions) -> Result<Request, EstimateError> {
    refuse_images_per_request(&o.images_per_request)?;
    if let Some(method) = o.quantize
        && o.model.is_none()
    {
        refuse!(
            "--quantize {method} quantizes the linear layers of --model's config (the embeddings, norms and output head stay as they are): give --model PATH; with --parameters N, --bits B is the storage width"
        );
    }
    let images = &o.written.images;
    if !images.is_empty() {
        refuse!(
            "{} {} images, which a language model's estimate does not have: use `iteragpu estimate vision --model DIR` (an image model's config), or drop {}",
            images.join(", "),
            verb(images, "describes", "describe"),
            pronoun(images)
        );
    }
    refuse_sharding_without_shard(o)?;
    refuse_ignored(o)?;
    let weights = match (o.parameters, o.bits, &o.model) {
        (Some(parameters), Some(bits), None) => Some(WeightsSource::Numbers { parameters, bits }),
        (None, None, Some(path)) => {
            // A frozen LoRA base is built in the precision's compute dtype, as predict and
            // measure build it; --dtype still says otherwise.
            let lora_base = (o.step.train && o.lora_rank.is_some()).then(|| {
                (
                    o.step.precision.compute_dtype(),
                    format!("the compute dtype of --precision {}", o.step.precision),
                )
            });
            let mut model = ModelWeights::load(path, o.dtype, lora_base)?;
            quantize(&mut model, o)?;
            Some(WeightsSource::Model(Box::new(model)))
        }
        (None, None, None) => None,
        _ => refuse!("give either --parameters N --bits B, or --model PATH, not both"),
    };
    let model_arch = match &weights {
        Some(WeightsSource::Model(m)) => Some(m),
        _ => None,
    };
    if model_arch.is_some()
        && (o.kv.layers.is_some() || o.kv.heads.is_some() || o.kv.head_dim.is_some())
    {
        refuse!(
            "--kv-layers, --kv-heads and --head-dim are read from --model; drop them (or drop --model to give them by hand)"
        );
    }

    let training = if o.step.train {
        if weights.is_none() {
            refuse!("--train needs the model: give --model PATH or --parameters N --bits B");
        }
        Some(TrainingRequest {
            optimizer: o.step.optimizer,
            precision: o.step.precision,
            precision_stated: o.step.precision_stated,
            lora: o.lora_rank.map(|rank| Lora {
                rank,
                // Empty names are kept so that the estimate refuses them with the model's modules.
                targets: o
                    .lora_targets
                    .iter()
                    .map(|t| t.trim().to_string())
                    .collect(),
            }),
            gradient_checkpointing: o.gradient_checkpointing,
            flash_attention: o.flash_attention,
            batch: Some(o.kv.sequences.unwrap_or(1)),
            context: o.kv.tokens,
            sharding: sharding(o)?,
        })
    } else {
        None
    };

    let kv = if training.is_some() {
        None
    } else {
        kv_request(o, model_arch.map(|m| (&m.architecture, m.compute_dtype)))?
    };
    if training.is_none() && kv.is_none() {
        let w = &o.written;
        let without_cache = [
            w.kv_load.clone(),
            w.kv_cache.clone(),
            w.quantized_cache.clone(),
        ]
        .concat();
        if !without_cache.is_empty() {
            let fix = if o.model.is_some() {
                "add --context N (tokens per sequence) to estimate the model's KV cache"
            } else {
                "add --kv-layers, --kv-heads, --head-dim and --tokens to estimate a KV cache"
            };
            refuse!(
                "{} {} the KV cache, which this estimate does not have: {fix}, or drop {}",
                without_cache.join(", "),
                verb(&without_cache, "applies to", "apply to"),
                pronoun(&without_cache)
            );
        }
    }
    if weights.is_none() && kv.is_none() {
        refuse!(
            "nothing to estimate: give --parameters N --bits B (weights), --model PATH (a Hugging Face config), or --kv-layers, --kv-heads, --head-dim and --tokens (KV cache)"
        );
    }
    Ok(Request {
        weights,
        kv,
        training,
        reserve: o.reserve.clone(),
        vision: None,
    })
}

/// `estimate vision`: the config's encoder at --resolution (default: the config's image_size,
/// as the workload's) for --images, inference or --train.
pub fn vision_plan(v: &VisionOptions) -> Result<Request, EstimateError> {
    refuse_images_per_request(&v.images_per_request)?;
    let path = &v.model;
    if let (Some(dtype), true) = (v.dtype, v.step.train) {
        refuse!(
            "--dtype {dtype} with --train: the trained widths follow --precision (here {}): drop --dtype, or choose --precision",
            v.step.precision
        );
    }
    let config = Config::load(path)?;
    let model = super::vision::VisionModel::read(&config)?;
    let (height, width, resolution_source) = match v.resolution {
        Some((h, w)) => (h, w.unwrap_or(h), "--resolution".to_string()),
        None => (
            model.trained.0,
            model.trained.1,
            "the config's image_size, as the workload".to_string(),
        ),
    };
    let config_dtype = ["torch_dtype", "dtype"]
        .iter()
        .find_map(|k| config.fields().raw(k).and_then(|v| v.as_str()))
        .and_then(|d| d.parse::<Dtype>().ok());
    let dtype = v.dtype.or(config_dtype).unwrap_or(Dtype::Float32);
    let training = v.step.train.then_some(TrainingRequest {
        optimizer: v.step.optimizer,
        precision: v.step.precision,
        precision_stated: v.step.precision_stated,
        lora: None,
        gradient_checkpointing: v.gradient_checkpointing,
        flash_attention: false,
        batch: None,
        context: None,
        sharding: None,
    });
    Ok(Request {
        weights: None,
        kv: None,
        training: None,
        reserve: v.reserve.clone(),
        vision: Some(super::vision::VisionRequest {
            path: path.display().to_string(),
            model,
            height,
            width,
            resolution_source,
            images: v.images.unwrap_or(1),
            dtype,
            training,
        }),
    })
}

/// `--shard` and its options, checked for presence; their values are checked by the estimate.
fn sharding(o: &EstimateOptions) -> Result<Option<Sharding>, EstimateError> {
    let Some(strategy) = o.shard else {
        return Ok(None);
    };
    let s = &o.shard_options;
    let Some(world_size) = s.world_size else {
        refuse!(
            "--shard {} needs the number of ranks: add --world-size N (--world-size 1 for a single GPU)",
            strategy
        );
    };
    Ok(Some(Sharding {
        strategy,
        world_size,
        gpus_per_node: s.gpus_per_node,
        offload: s.offload,
        largest_layer_parameters: s.largest_layer_parameters,
        comm_reserve: s.comm_reserve,
    }))
}

/// Refuses the sharding options without `--shard`, and `--shard` without `--train`.
fn refuse_sharding_without_shard(o: &EstimateOptions) -> Result<(), EstimateError> {
    if let Some(strategy) = o.shard {
        if !o.step.train {
            refuse!(
                "--shard {} estimates one rank of a sharded training step: add --train (or drop --shard)",
                strategy
            );
        }
        return Ok(());
    }
    let options = &o.written.shard_options;
    if !options.is_empty() {
        refuse!(
            "{} {} sharded training, which needs --shard ddp|zero1|zero2|zero3|fsdp (with --train): add --shard, or drop {}",
            options.join(", "),
            verb(options, "describes", "describe"),
            pronoun(options)
        );
    }
    Ok(())
}

/// Refuses the combinations in which an option would change nothing, before any file is read.
fn refuse_ignored(o: &EstimateOptions) -> Result<(), EstimateError> {
    if let (Some(dtype), Some(bits)) = (o.dtype, o.bits) {
        refuse!(
            "--dtype {dtype} sets the compute dtype of --model's weights; with --parameters N --bits B the width is --bits {bits}: drop --dtype (for the KV cache's width, use --kv-dtype)"
        );
    }
    let (w, kv) = (&o.written, &o.kv);
    let cache = kv.cache.unwrap_or(CacheKind::Dynamic);
    if o.step.train {
        let inference_only = [
            w.kv_shape.clone(),
            w.kv_cache.clone(),
            w.quantized_cache.clone(),
        ]
        .concat();
        if !inference_only.is_empty() {
            refuse!(
                "{} {} the KV cache of inference, which a --train estimate does not have: drop {} (or drop --train)",
                inference_only.join(", "),
                verb(&inference_only, "describes", "describe"),
                pronoun(&inference_only)
            );
        }
        if let Some(dtype) = o.dtype
            && o.lora_rank.is_none()
        {
            refuse!(
                "--dtype {dtype} with --train: the widths of the trained parameters follow --precision (here {}); --dtype only sets the frozen base model's width under LoRA (--lora-rank): drop --dtype, or choose --precision",
                o.step.precision
            );
        }
        // The load (--context, --batch) and how activations are kept size the activations.
        let for_activations = [w.kv_load.clone(), w.activations.clone()].concat();
        if o.model.is_none() {
            if !for_activations.is_empty() {
                refuse!(
                    "{} {} the activations, which need the model's dimensions: give --model PATH (its config.json) instead of --parameters, or drop {}",
                    for_activations.join(", "),
                    verb(&for_activations, "sizes", "size"),
                    pronoun(&for_activations)
                );
            }
        } else if kv.tokens.is_none() && !for_activations.is_empty() {
            refuse!(
                "{} {} the activations, which need a sequence length: add --context N, or drop {}",
                for_activations.join(", "),
                verb(&for_activations, "sizes", "size"),
                pronoun(&for_activations)
            );
        }
        return Ok(());
    }
    let quantized_only = &w.quantized_cache;
    if !quantized_only.is_empty() && cache != CacheKind::Quantized {
        refuse!(
            "{} {} --cache quantized, not --cache {}: add --cache quantized, or drop {}",
            quantized_only.join(", "),
            verb(quantized_only, "applies to", "apply to"),
            cache,
            pronoun(quantized_only)
        );
    }
    if kv.prompt_tokens.is_some()
        && matches!(
            cache,
            CacheKind::Static | CacheKind::Quantized | CacheKind::Offloaded
        )
    {
        refuse!(
            "--prompt-tokens applies to --cache dynamic or sliding (sliding layers hold the whole prompt until the first decoding step), not to --cache {}: drop --prompt-tokens",
            cache
        );
    }
    if o.dtype.is_some() && o.model.is_none() && (kv.kv_bytes.is_some() || kv.kv_dtype.is_some()) {
        refuse!(
            "--dtype would set the cached values' width, but --kv-bytes or --kv-dtype already does: drop --dtype (it sets a --model's compute dtype)"
        );
    }
    Ok(())
}

/// `--quantize`: the float checkpoint loaded as transformers' `BitsAndBytesConfig` loads it, in
/// the model's compute dtype; a checkpoint quantized already is refused (its own
/// `quantization_config` says how it is stored).
fn quantize(model: &mut ModelWeights, o: &EstimateOptions) -> Result<(), EstimateError> {
    if o.double_quant && o.quantize == Some(QuantizeMethod::Int8) {
        refuse!(
            "--double-quant quantizes the absmax of 4-bit blocks; LLM.int8 (--quantize int8) has none: drop --double-quant, or use --quantize nf4"
        );
    }
    let Some(method) = o.quantize else {
        return Ok(());
    };
    if let Some(q) = &model.architecture.quantization {
        refuse!(
            "{} is stored quantized already ({}, its quantization_config): drop --quantize {method}",
            model.path,
            q.label()
        );
    }
    model.architecture.quantization = Some(Quantization::bitsandbytes(
        method,
        o.double_quant,
        model.compute_dtype,
    ));
    Ok(())
}

/// The KV cache's layout (from the model, or by hand), its requests, width and strategy.
fn kv_request(
    o: &EstimateOptions,
    model: Option<(&Architecture, Dtype)>,
) -> Result<Option<KvRequest>, EstimateError> {
    let kv = &o.kv;
    let layout = match model {
        Some((arch, _)) => {
            if kv.tokens.is_none() && kv.requests.is_none() {
                return Ok(None);
            }
            arch.kv.clone()
        }
        None => {
            let given = [
                ("--kv-layers", kv.layers),
                ("--kv-heads", kv.heads),
                ("--head-dim", kv.head_dim),
                ("--tokens", kv.tokens.or(kv.requests.map(|_| 1))),
            ];
            if given.iter().all(|(_, v)| v.is_none()) {
                return Ok(None);
            }
            let missing: Vec<&str> = given
                .iter()
                .filter(|(_, v)| v.is_none())
                .map(|(n, _)| *n)
                .collect();
            if !missing.is_empty() {
                refuse!(
                    "the KV cache needs {} as well (or --model PATH to read the layout from a config)",
                    missing.join(", ")
                );
            }
            KvLayout::uniform(
                kv.layers.unwrap_or(1),
                kv.heads.unwrap_or(1),
                kv.head_dim.unwrap_or(1),
                None,
            )
        }
    };
    let requests = match kv.requests {
        Some(n) => {
            let (prompts, outputs) = (&kv.prompt_lengths, &kv.output_lengths);
            for (flag, list) in [("--prompt-lengths", prompts), ("--output-lengths", outputs)] {
                if list.len() as u64 > n {
                    refuse!(
                        "{flag} lists {} lengths for --requests {n}: give at most one length per request, or raise --requests",
                        list.len()
                    );
                }
            }
            let lengths =
                kv_cache::cycle_lengths(n, prompts, outputs).map_err(EstimateError::Input)?;
            // The layout given by hand has no positions to check against.
            let max_positions = match (&o.model, model) {
                (Some(path), Some(_)) => Config::load(path)?.max_positions()?,
                _ => None,
            };
            kv_cache::check_positions(&lengths, max_positions).map_err(EstimateError::Input)?;
            lengths
        }
        None => Vec::new(),
    };
    let tokens = match requests.iter().map(|r| r.tokens()).max() {
        Some(longest) => longest,
        None => kv.tokens.unwrap_or(1),
    };
    let element_bytes = match (kv.kv_dtype, kv.kv_bytes, o.dtype, model) {
        (Some(d), _, _, _) => d.bytes(),
        (None, Some(b), _, _) => b,
        (None, None, Some(d), _) => d.bytes(),
        (None, None, None, Some((_, d))) => d.bytes(),
        (None, None, None, None) => refuse!(
            "give the width of a cached value: --kv-bytes 2 (bf16/fp16) or --kv-dtype bfloat16"
        ),
    };
    if let Some(p) = kv.prompt_tokens
        && p > tokens
    {
        refuse!(
            "--prompt-tokens {p} is longer than --tokens/--context {tokens}, which counts the prompt and the generated tokens; raise --context"
        );
    }
    let d = QuantizedSettings::DEFAULT;
    let options = CacheOptions {
        max_cache_len: kv.max_cache_len,
        window: kv.window,
        quantized: QuantizedSettings {
            bits: kv.quant_bits.unwrap_or(d.bits),
            group_size: kv.group_size.unwrap_or(d.group_size),
            residual: kv.residual.unwrap_or(d.residual),
        },
    };
    let strategy = kv
        .cache
        .unwrap_or(CacheKind::Dynamic)
        .strategy(&options, tokens, &layout)?;
    if kv.prompt_tokens.is_some()
        && strategy == CacheStrategy::Dynamic
        && layout.sliding_layers() == 0
    {
        refuse!(
            "--prompt-tokens matters only for sliding layers (they hold the whole prompt until the first decoding step), and this layout has none: drop --prompt-tokens"
        );
    }
    Ok(Some(KvRequest {
        layout,
        tokens,
        sequences: kv.sequences.unwrap_or(1),
        element_bytes,
        strategy,
        prompt_tokens: kv.prompt_tokens,
        requests,
    }))
}

/// `estimate serve`: one GPU of a serving engine, by the engine's rules. `predict_profile` runs
/// the profile run on data-less tensors for `--activation-peak predict` (the runners' layer,
/// above this one, does it): its answer replaces the first plan's activation term.
pub fn serve<E: From<EstimateError>>(
    s: &ServingOptions,
    predict_profile: impl FnOnce(&ProfileShape, &str) -> Result<ActivationPeak, E>,
) -> Result<Estimate, E> {
    let (engine, path) = (s.engine, s.model.as_path());
    let Some(card_name) = &s.card else {
        refuse!(
            "a serving plan needs --card NAME (iteragpu cards): the engine sizes its pool from the card's memory"
        );
    };
    let card = crate::cards::find(card_name).map_err(|e| EstimateError::Input(e.to_string()))?;
    let version = s
        .engine_version
        .as_deref()
        .map(serving::Version::parse)
        .transpose()
        .map_err(EstimateError::Input)?;
    let read = serving::config::read(&serving::config::ReadRequest {
        path,
        engine,
        version,
        dtype: s.dtype,
        compute_major: card.compute_capability().map(|c| c.0),
        max_model_len: s.max_model_len,
    })?;
    let (m, model, mut notes) = (read.weights, read.model, read.notes);
    let (device_total, device_total_source) = match s.device_total {
        Some(b) => (b, "--device-total".to_string()),
        None => {
            let (b, _) = card.device_capacity();
            (b, format!("{}, {}", card.name, card.capacity_words()))
        }
    };
    // TP against the heads is one of the engine's refusal rules (serving/refusal.rs).
    let facts = serving::refusal::StartFacts {
        attention_heads: Some(read.attention_heads),
        free_at_start: s.free_at_start,
        compute_capability: card.compute_capability(),
        dtype_explicit: s.dtype.is_some(),
    };
    let mut request = serving::ServeRequest {
        engine,
        version,
        card: card.name.clone(),
        device_total,
        device_total_source,
        compute_major: card.compute_capability().map(|c| c.0),
        gpu_memory_utilization: s.gpu_memory_utilization,
        max_model_len: read.max_model_len,
        max_model_len_source: read.max_model_len_source,
        max_num_seqs: s.max_num_seqs,
        max_num_batched_tokens: s.max_num_batched_tokens,
        tensor_parallel_size: s.tensor_parallel_size.unwrap_or(1),
        kv_fp8: s.kv_fp8,
        block_size: s.block_size,
        enforce_eager: s.enforce_eager,
        weights: s.weights_memory,
        activation_peak: match s.activation_peak {
            Some(ActivationPeakOption::Size(b)) => Some(ActivationPeak::FromLog(b)),
            _ => None,
        },
        non_torch: s.non_torch,
        kv_cache_memory: s.kv_cache_memory,
        lengths: if s.concurrency_at.is_empty() {
            vec![2048, 8192]
        } else {
            s.concurrency_at.clone()
        },
    };
    let mut p = serving::plan_with(&model, &request, &facts)?;
    if s.activation_peak == Some(ActivationPeakOption::Predict) {
        // The profile run at the shapes the first plan resolved, then the plan again.
        let (Some(tokens), Some(seqs)) = (p.summary.max_num_batched_tokens, p.summary.max_num_seqs)
        else {
            refuse!(
                "--activation-peak predict runs vLLM's profile run; SGLang runs none (it sizes its pool without one): drop it for SGLang"
            );
        };
        let v1 = version.unwrap_or(serving::releases::VLLM_DEFAULT) >= serving::Version(0, 8, 0);
        let shape = ProfileShape {
            config: config_file(path),
            tokens,
            seqs,
            dtype: m.compute_dtype.torch_name().to_string(),
            tensor_parallel_size: request.tensor_parallel_size,
            v1,
            encoder_images: model.encoder.filter(|_| v1).map(|enc| {
                let items =
                    serving::profile::encoder_items(&enc, tokens, seqs, request.max_model_len);
                (items, enc.image_size)
            }),
            top_k_top_p: serving::profile::top_k_top_p(
                version.unwrap_or(serving::releases::VLLM_DEFAULT),
                v1,
                seqs.min(tokens),
            ),
        };
        request.activation_peak = Some(predict_profile(&shape, &card.name)?);
        p = serving::plan_with(&model, &request, &facts)?;
    }
    notes.extend(p.notes);
    // A length the engine refuses is said, never dropped without a word.
    let above: Vec<String> = s
        .concurrency_at
        .iter()
        .filter(|l| **l > p.summary.max_model_len)
        .map(u64::to_string)
        .collect();
    if !above.is_empty() {
        notes.push(format!(
            "--concurrency-at {}: above max_model_len {}, a request that long is refused by the engine; no concurrency is given there (raise --max-model-len to plan for it)",
            above.join(","),
            p.summary.max_model_len
        ));
    }
    let total_bytes =
        crate::units::checked_sum(p.terms.iter().filter(|t| t.in_total).map(|t| t.bytes))
            .map_err(EstimateError::overflow("the total", "the inputs"))?;
    Ok(Estimate {
        schema: super::SCHEMA,
        tool_version: env!("CARGO_PKG_VERSION"),
        terms: p.terms,
        total_bytes,
        left_out: serving::left_out(engine),
        notes,
        hub: crate::model::hub_cache::origin(std::path::Path::new(&m.path)),
        model: Some(ModelSummary {
            path: m.path.clone(),
            parameters: u64::try_from(m.architecture.parameters()).unwrap_or(u64::MAX),
            kv_bytes_per_token: None,
            architecture: m.architecture.clone(),
        }),
        stored: m.stored.clone(),
        sharding: None,
        training: None,
        serving: Some(p.summary),
        vision: None,
    })
}

/// The config file of a model folder, or the file given.
fn config_file(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("config.json")
    } else {
        path.to_path_buf()
    }
}
