//! `iteragpu estimate`: arguments → a validated [`Request`] → terms → table or JSON.

use std::io::Write;
use std::path::Path;

use crate::cli::{
    ActivationArgs, ActivationPeakArg, EstimateArgs, EstimateImageArgs, EstimateMode,
    EstimateServeArgs, EstimateVisionArgs, EstimateWorkload, Given, KvCacheArgs, KvLoadArgs,
    KvShapeArgs, QuantizedCacheArgs, ReserveArgs, ServeArgs, ServeKvDtype, ServeOptions,
    ShardOptionsArgs, TrainStepArgs, VisionLegacyArgs,
};
use crate::dtype::Dtype;
use crate::estimate::kv_cache::{self, CacheKind, CacheOptions, CacheStrategy, QuantizedSettings};
use crate::estimate::serving::Engine;
use crate::estimate::training::Lora;
use crate::estimate::weights::ModelWeights;
use crate::estimate::{
    self, KvRequest, Request, Reserve, Sharding, TrainingRequest, WeightsSource,
};
use crate::exit::{CliError, ExitStatus};
use crate::model::quantization::QuantizeMethod;
use crate::model::{Architecture, Config, KvLayout, Quantization};

pub fn run(args: &EstimateArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let (est, json) = match (&args.mode, args.serve.serve) {
        (Some(EstimateMode::Serve(s)), _) => (serve(&ServeInput::new(s))?, s.json),
        (None, Some(engine)) => {
            if let Some(method) = args.quantize.quantize {
                refuse!(
                    "--quantize {method} is estimated for a language model's own load, not for a serving plan (the engine's planner reads the checkpoint's own quantization_config): drop --quantize"
                );
            }
            let mut est = serve(&ServeInput::legacy(args, engine)?)?;
            crate::say!("note: {}", legacy_note(engine));
            est.notes.push(legacy_note(engine));
            (est, args.json)
        }
        (Some(EstimateMode::Vision(v)), _) => (
            estimate::estimate(&vision_plan(&VisionInput::new(v))?)?,
            v.json,
        ),
        (None, None) => {
            let legacy = args.vision.workload == Some(EstimateWorkload::Vision);
            let mut est = estimate::estimate(&plan(args)?)?;
            if legacy {
                let note = "`estimate --workload vision` is spelled `estimate vision` now (its own options and help); the old spelling still estimates, until the next release";
                crate::say!("note: {note}");
                est.notes.push(note.into());
            }
            (est, args.json)
        }
    };
    let text = if json {
        estimate::render::json(&est)
    } else {
        crate::output::terminal_safe(&estimate::render::table(&est)).into_owned()
    };
    out.write_all(text.as_bytes())
        .map_err(|e| CliError::because("cannot write the estimate to standard output", &e))?;
    // A serving engine predicted to refuse to start is an answer, printed in full, with the
    // status `predict` gives a workload predicted not to fit the card (README, "Exit codes").
    if est.serving.as_ref().is_some_and(|s| !s.start.starts) {
        return Ok(ExitStatus::WorkloadFailed);
    }
    Ok(ExitStatus::Ok)
}

/// Validates the combination of options and reads the model if one is given. Every option given
/// acts on the estimate or is refused: none is silently ignored.
pub fn plan(args: &EstimateArgs) -> Result<Request, CliError> {
    if let Some(n) = &args.vision.images.images_per_request {
        refuse!(
            "--images-per-request {n}: estimate has no multimodal terms (a prompt's images become tokens only through the model's own image processor): use `iteragpu predict --workload vlm --model DIR --images-per-request {n}`"
        );
    }
    if let Some(method) = args.quantize.quantize
        && args.model.is_none()
    {
        refuse!(
            "--quantize {method} quantizes the linear layers of --model's config (the embeddings, norms and output head stay as they are): give --model PATH; with --parameters N, --bits B is the storage width"
        );
    }
    if let Some(method) = args.quantize.quantize
        && args.vision.workload == Some(EstimateWorkload::Vision)
    {
        refuse!(
            "--quantize {method} is estimated for a language model's own load (weights, training, KV cache), not for --workload vision: drop --quantize"
        );
    }
    if args.vision.workload == Some(EstimateWorkload::Vision) {
        return vision_plan(&VisionInput::legacy(args)?);
    }
    let images = written::<EstimateImageArgs>(&args.given);
    if !images.is_empty() {
        refuse!(
            "{} {} images, which a language model's estimate does not have: use `iteragpu estimate vision --model DIR` (an image model's config), or drop {}",
            images.join(", "),
            verb(&images, "describes", "describe"),
            pronoun(&images)
        );
    }
    refuse_sharding_without_shard(args)?;
    refuse_ignored(args)?;
    let weights = match (args.parameters, args.bits, &args.model) {
        (Some(parameters), Some(bits), None) => Some(WeightsSource::Numbers { parameters, bits }),
        (None, None, Some(path)) => {
            // A frozen LoRA base is built in the precision's compute dtype, as predict and
            // measure build it; --dtype still says otherwise.
            let lora_base = (args.step.train && args.lora_rank.is_some()).then(|| {
                (
                    args.step.precision.compute_dtype(),
                    format!("the compute dtype of --precision {}", args.step.precision),
                )
            });
            let mut model = ModelWeights::load(path, args.dtype, lora_base)?;
            quantize(&mut model, args)?;
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
        && (args.kv_shape.kv_layers.is_some()
            || args.kv_shape.kv_heads.is_some()
            || args.kv_shape.head_dim.is_some())
    {
        refuse!(
            "--kv-layers, --kv-heads and --head-dim are read from --model; drop them (or drop --model to give them by hand)"
        );
    }

    let training = if args.step.train {
        if weights.is_none() {
            refuse!("--train needs the model: give --model PATH or --parameters N --bits B");
        }
        Some(TrainingRequest {
            optimizer: args.step.optimizer,
            precision: args.step.precision,
            precision_stated: args.given.contains("precision"),
            lora: args.lora_rank.map(|rank| Lora {
                rank,
                // Empty names are kept so that the estimate refuses them with the model's modules.
                targets: args
                    .lora_targets
                    .iter()
                    .map(|t| t.trim().to_string())
                    .collect(),
            }),
            gradient_checkpointing: args.activations.gradient_checkpointing,
            flash_attention: args.activations.flash_attention,
            batch: Some(args.load.sequences().unwrap_or(1)),
            context: args.load.tokens(),
            sharding: sharding(args)?,
        })
    } else {
        None
    };

    let kv = if training.is_some() {
        None
    } else {
        kv_request(args, model_arch.map(|m| (&m.architecture, m.compute_dtype)))?
    };
    if training.is_none() && kv.is_none() {
        let without_cache = [
            written::<KvLoadArgs>(&args.given),
            written::<KvCacheArgs>(&args.given),
            written::<QuantizedCacheArgs>(&args.given),
        ]
        .concat();
        if !without_cache.is_empty() {
            let fix = if args.model.is_some() {
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
    let reserve = stated_reserve(&args.stated);
    Ok(Request {
        weights,
        kv,
        training,
        reserve,
        vision: None,
    })
}

/// What an image encoder's estimate is given: `estimate vision …`, or the old `estimate
/// --workload vision …`.
struct VisionInput<'a> {
    model: &'a Path,
    dtype: Option<Dtype>,
    images: &'a EstimateImageArgs,
    stated: &'a ReserveArgs,
    step: &'a TrainStepArgs,
    precision_stated: bool,
    gradient_checkpointing: bool,
}

impl<'a> VisionInput<'a> {
    fn new(args: &'a EstimateVisionArgs) -> VisionInput<'a> {
        VisionInput {
            model: &args.model,
            dtype: args.dtype,
            images: &args.images,
            stated: &args.stated,
            step: &args.step,
            precision_stated: args.given.contains("precision"),
            gradient_checkpointing: args.gradient_checkpointing,
        }
    }

    /// The old spelling: every option `estimate vision` does not take is refused by name.
    fn legacy(args: &'a EstimateArgs) -> Result<VisionInput<'a>, CliError> {
        refuse_outside::<EstimateVisionArgs, VisionLegacyArgs>(
            &args.given,
            "a vision estimate (an image encoder has no KV cache, context, LoRA or sharding here; its load is --resolution and --images; its attention kernel is the config's attn_implementation)",
        )?;
        let Some(model) = &args.model else {
            refuse!("a vision estimate needs --model PATH (an image model's config.json)");
        };
        Ok(VisionInput {
            model,
            dtype: args.dtype,
            images: &args.vision.images,
            stated: &args.stated,
            step: &args.step,
            precision_stated: args.given.contains("precision"),
            gradient_checkpointing: args.activations.gradient_checkpointing,
        })
    }
}

/// `estimate vision`: the config's encoder at --resolution (default: the config's image_size,
/// as the workload's) for --images, inference or --train.
fn vision_plan(v: &VisionInput<'_>) -> Result<Request, CliError> {
    if let Some(n) = &v.images.images_per_request {
        refuse!(
            "--images-per-request {n}: estimate has no multimodal terms (a prompt's images become tokens only through the model's own image processor): use `iteragpu predict --workload vlm --model DIR --images-per-request {n}`"
        );
    }
    let path = v.model;
    if let (Some(dtype), true) = (v.dtype, v.step.train) {
        refuse!(
            "--dtype {dtype} with --train: the trained widths follow --precision (here {}): drop --dtype, or choose --precision",
            v.step.precision
        );
    }
    let config = Config::load(path)?;
    let model = estimate::vision::VisionModel::read(&config)?;
    let (height, width, resolution_source) = match v.images.resolution {
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
        precision_stated: v.precision_stated,
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
        reserve: stated_reserve(v.stated),
        vision: Some(estimate::vision::VisionRequest {
            path: path.display().to_string(),
            model,
            height,
            width,
            resolution_source,
            images: v.images.images.unwrap_or(1),
            dtype,
            training,
        }),
    })
}

/// `--shard` and its options, checked for presence; their values are checked by the estimate.
fn sharding(args: &EstimateArgs) -> Result<Option<Sharding>, CliError> {
    let Some(strategy) = args.shard else {
        return Ok(None);
    };
    let Some(world_size) = args.shard_options.world_size else {
        refuse!(
            "--shard {} needs the number of ranks: add --world-size N (--world-size 1 for a single GPU)",
            strategy
        );
    };
    Ok(Some(Sharding {
        strategy,
        world_size,
        gpus_per_node: args.shard_options.gpus_per_node,
        offload: args.shard_options.offload,
        largest_layer_parameters: args.shard_options.largest_layer_parameters,
        comm_reserve: args.shard_options.comm_reserve,
    }))
}

/// Refuses the sharding options without `--shard`, and `--shard` without `--train`.
fn refuse_sharding_without_shard(args: &EstimateArgs) -> Result<(), CliError> {
    if let Some(strategy) = args.shard {
        if !args.step.train {
            refuse!(
                "--shard {} estimates one rank of a sharded training step: add --train (or drop --shard)",
                strategy
            );
        }
        return Ok(());
    }
    let options = written::<ShardOptionsArgs>(&args.given);
    if !options.is_empty() {
        refuse!(
            "{} {} sharded training, which needs --shard ddp|zero1|zero2|zero3|fsdp (with --train): add --shard, or drop {}",
            options.join(", "),
            verb(&options, "describes", "describe"),
            pronoun(&options)
        );
    }
    Ok(())
}

/// The names of group `A`'s options written on the command line (clap's value sources).
fn written<A: clap::Args>(given: &Given) -> Vec<String> {
    super::options::written_in::<A>(given)
        .into_iter()
        .map(|(_, name)| name)
        .collect()
}

fn verb(names: &[String], one: &'static str, several: &'static str) -> &'static str {
    if names.len() == 1 { one } else { several }
}

fn pronoun(names: &[String]) -> &'static str {
    verb(names, "it", "them")
}

/// Refuses the combinations in which an option would change nothing, before any file is read.
fn refuse_ignored(args: &EstimateArgs) -> Result<(), CliError> {
    if let (Some(dtype), Some(bits)) = (args.dtype, args.bits) {
        refuse!(
            "--dtype {dtype} sets the compute dtype of --model's weights; with --parameters N --bits B the width is --bits {bits}: drop --dtype (for the KV cache's width, use --kv-dtype)"
        );
    }
    let cache = args.kv_cache.cache.unwrap_or(CacheKind::Dynamic);
    if args.step.train {
        let inference_only = [
            written::<KvShapeArgs>(&args.given),
            written::<KvCacheArgs>(&args.given),
            written::<QuantizedCacheArgs>(&args.given),
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
        if let Some(dtype) = args.dtype
            && args.lora_rank.is_none()
        {
            refuse!(
                "--dtype {dtype} with --train: the widths of the trained parameters follow --precision (here {}); --dtype only sets the frozen base model's width under LoRA (--lora-rank): drop --dtype, or choose --precision",
                args.step.precision
            );
        }
        // The load (--context, --batch) and how activations are kept size the activations.
        let for_activations = [
            written::<KvLoadArgs>(&args.given),
            written::<ActivationArgs>(&args.given),
        ]
        .concat();
        if args.model.is_none() {
            if !for_activations.is_empty() {
                refuse!(
                    "{} {} the activations, which need the model's dimensions: give --model PATH (its config.json) instead of --parameters, or drop {}",
                    for_activations.join(", "),
                    verb(&for_activations, "sizes", "size"),
                    pronoun(&for_activations)
                );
            }
        } else if args.load.tokens().is_none() && !for_activations.is_empty() {
            refuse!(
                "{} {} the activations, which need a sequence length: add --context N, or drop {}",
                for_activations.join(", "),
                verb(&for_activations, "sizes", "size"),
                pronoun(&for_activations)
            );
        }
        return Ok(());
    }
    let quantized_only = written::<QuantizedCacheArgs>(&args.given);
    if !quantized_only.is_empty() && cache != CacheKind::Quantized {
        refuse!(
            "{} {} --cache quantized, not --cache {}: add --cache quantized, or drop {}",
            quantized_only.join(", "),
            verb(&quantized_only, "applies to", "apply to"),
            cache,
            pronoun(&quantized_only)
        );
    }
    if args.kv_cache.prompt_tokens.is_some()
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
    if args.dtype.is_some()
        && args.model.is_none()
        && (args.kv_cache.kv_bytes.is_some() || args.kv_cache.kv_dtype.is_some())
    {
        refuse!(
            "--dtype would set the cached values' width, but --kv-bytes or --kv-dtype already does: drop --dtype (it sets a --model's compute dtype)"
        );
    }
    Ok(())
}

/// `--quantize`: the float checkpoint loaded as transformers' `BitsAndBytesConfig` loads it, in
/// the model's compute dtype; a checkpoint quantized already is refused (its own
/// `quantization_config` says how it is stored).
fn quantize(model: &mut ModelWeights, args: &EstimateArgs) -> Result<(), CliError> {
    if args.quantize.double_quant && args.quantize.quantize == Some(QuantizeMethod::Int8) {
        refuse!(
            "--double-quant quantizes the absmax of 4-bit blocks; LLM.int8 (--quantize int8) has none: drop --double-quant, or use --quantize nf4"
        );
    }
    let Some(method) = args.quantize.quantize else {
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
        args.quantize.double_quant,
        model.compute_dtype,
    ));
    Ok(())
}

fn kv_request(
    args: &EstimateArgs,
    model: Option<(&Architecture, Dtype)>,
) -> Result<Option<KvRequest>, CliError> {
    let layout = match model {
        Some((arch, _)) => {
            if args.load.tokens().is_none() && args.load.requests.is_none() {
                return Ok(None);
            }
            arch.kv.clone()
        }
        None => {
            let given = [
                ("--kv-layers", args.kv_shape.kv_layers),
                ("--kv-heads", args.kv_shape.kv_heads),
                ("--head-dim", args.kv_shape.head_dim),
                (
                    "--tokens",
                    args.load.tokens().or(args.load.requests.map(|_| 1)),
                ),
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
            let (l, h, d) = (
                args.kv_shape.kv_layers.unwrap_or(1),
                args.kv_shape.kv_heads.unwrap_or(1),
                args.kv_shape.head_dim.unwrap_or(1),
            );
            KvLayout::uniform(l, h, d, None)
        }
    };
    let requests = match args.load.requests {
        Some(n) => {
            let (prompts, outputs) = (&args.load.prompt_lengths, &args.load.output_lengths);
            for (flag, list) in [("--prompt-lengths", prompts), ("--output-lengths", outputs)] {
                if list.len() as u64 > n {
                    refuse!(
                        "{flag} lists {} lengths for --requests {n}: give at most one length per request, or raise --requests",
                        list.len()
                    );
                }
            }
            let lengths =
                kv_cache::cycle_lengths(n, prompts, outputs).map_err(CliError::bad_input)?;
            // The layout given by hand has no positions to check against.
            let max_positions = match (&args.model, model) {
                (Some(path), Some(_)) => Config::load(path)?.max_positions()?,
                _ => None,
            };
            kv_cache::check_positions(&lengths, max_positions).map_err(CliError::bad_input)?;
            lengths
        }
        None => Vec::new(),
    };
    let tokens = match requests.iter().map(|r| r.tokens()).max() {
        Some(longest) => longest,
        None => args.load.tokens().unwrap_or(1),
    };
    let element_bytes = match (
        args.kv_cache.kv_dtype,
        args.kv_cache.kv_bytes,
        args.dtype,
        model,
    ) {
        (Some(d), _, _, _) => d.bytes(),
        (None, Some(b), _, _) => b,
        (None, None, Some(d), _) => d.bytes(),
        (None, None, None, Some((_, d))) => d.bytes(),
        (None, None, None, None) => refuse!(
            "give the width of a cached value: --kv-bytes 2 (bf16/fp16) or --kv-dtype bfloat16"
        ),
    };
    if let Some(p) = args.kv_cache.prompt_tokens
        && p > tokens
    {
        refuse!(
            "--prompt-tokens {p} is longer than --tokens/--context {tokens}, which counts the prompt and the generated tokens; raise --context"
        );
    }
    let options = CacheOptions {
        max_cache_len: args.kv_cache.max_cache_len,
        window: args.kv_cache.window,
        quantized: QuantizedSettings {
            bits: args
                .quantized
                .kv_quant_bits
                .unwrap_or(QuantizedSettings::DEFAULT.bits),
            group_size: args
                .quantized
                .kv_group_size
                .unwrap_or(QuantizedSettings::DEFAULT.group_size),
            residual: args
                .quantized
                .kv_residual
                .unwrap_or(QuantizedSettings::DEFAULT.residual),
        },
    };
    let strategy = args
        .kv_cache
        .cache
        .unwrap_or(CacheKind::Dynamic)
        .strategy(&options, tokens, &layout)?;
    if args.kv_cache.prompt_tokens.is_some()
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
        sequences: args.load.sequences().unwrap_or(1),
        element_bytes,
        strategy,
        prompt_tokens: args.kv_cache.prompt_tokens,
        requests,
    }))
}

/// `--activation-peak predict`: the profile run at the shapes the first plan resolved, predicted
/// on data-less tensors, then the plan again with that figure.
fn predicted_profile(
    path: &Path,
    card: &str,
    m: &ModelWeights,
    model: &estimate::serving::ServeModel,
    mut request: estimate::serving::ServeRequest,
    summary: &estimate::serving::ServingSummary,
    facts: &estimate::serving::refusal::StartFacts,
) -> Result<estimate::serving::Plan, CliError> {
    let (Some(tokens), Some(seqs)) = (summary.max_num_batched_tokens, summary.max_num_seqs) else {
        refuse!(
            "--activation-peak predict runs vLLM's profile run; SGLang runs none (it sizes its pool without one): drop it for SGLang"
        );
    };
    let shape = crate::prediction::serve_profile::ProfileShape {
        config: if path.is_dir() {
            path.join("config.json")
        } else {
            path.to_path_buf()
        },
        tokens,
        seqs,
        dtype: m.compute_dtype.torch_name().to_string(),
        tensor_parallel_size: request.tensor_parallel_size,
    };
    let display = super::progress::spinner(false, "predicting the profile run");
    let peak = crate::prediction::serve_profile::predict_peak(
        &shape,
        card,
        None,
        crate::signals::stop_request(),
        &*display,
    );
    display.finish();
    let peak = peak.map_err(|e| match e {
        crate::prediction::serve_profile::ProfileError::Unavailable(_) => {
            CliError::missing_runtime(e)
        }
        crate::prediction::serve_profile::ProfileError::Failed(_) => CliError::bad_input(e),
    })?;
    request.activation_peak = Some(estimate::serving::ActivationPeak::Predicted {
        bytes: peak.bytes,
        how: peak.how,
    });
    Ok(estimate::serving::plan_with(model, &request, facts)?)
}

/// What a serving plan is given: `estimate serve ENGINE …`, or the old `estimate --serve ENGINE`.
pub struct ServeInput<'a> {
    pub engine: Engine,
    pub model: &'a Path,
    pub dtype: Option<Dtype>,
    pub options: &'a ServeOptions,
}

impl<'a> ServeInput<'a> {
    pub fn new(args: &'a EstimateServeArgs) -> ServeInput<'a> {
        ServeInput {
            engine: args.engine,
            model: &args.model,
            dtype: args.dtype,
            options: &args.options,
        }
    }

    /// The old spelling: every option `estimate serve` does not take is refused by name (clap
    /// refuses them itself under the new one).
    fn legacy(args: &'a EstimateArgs, engine: Engine) -> Result<ServeInput<'a>, CliError> {
        refuse_outside::<EstimateServeArgs, ServeArgs>(
            &args.given,
            "a serving plan (the engine sets its own KV cache, batch and reserve)",
        )?;
        let Some(model) = &args.model else {
            refuse!(
                "a serving plan needs --model DIR (a Hugging Face config.json) and --card NAME (iteragpu cards): `iteragpu estimate serve {engine} --model DIR --card NAME`"
            );
        };
        Ok(ServeInput {
            engine,
            model,
            dtype: args.dtype,
            options: &args.serve.options,
        })
    }
}

/// An old spelling's options: every one written that the new mode's Args `M` and the old
/// spelling's own group `L` do not hold is refused by name (clap refuses them itself under the
/// new spelling), as not part of `what`.
fn refuse_outside<M: clap::Args, L: clap::Args>(given: &Given, what: &str) -> Result<(), CliError> {
    let ids: Vec<String> = M::augment_args(clap::Command::new("mode"))
        .get_arguments()
        .chain(L::augment_args(clap::Command::new("old")).get_arguments())
        .map(|a| a.get_id().to_string())
        .collect();
    let others: Vec<String> = super::options::written_in::<EstimateArgs>(given)
        .into_iter()
        .filter(|(id, _)| !ids.contains(id))
        .map(|(_, name)| name)
        .collect();
    if !others.is_empty() {
        refuse!(
            "{} {} not part of {what}: drop {}",
            others.join(", "),
            verb(&others, "is", "are"),
            pronoun(&others)
        );
    }
    Ok(())
}

/// The note the old spelling gets, in the plan and on the terminal.
fn legacy_note(engine: Engine) -> String {
    format!(
        "`estimate --serve {engine}` is spelled `estimate serve {engine}` now (its own options and help); the old spelling still plans, until the next release"
    )
}

/// `estimate serve`: one GPU of a serving engine, by the engine's rules.
pub fn serve(input: &ServeInput<'_>) -> Result<estimate::Estimate, CliError> {
    let (engine, path, s) = (input.engine, input.model, input.options);
    let Some(card_name) = &s.card else {
        refuse!(
            "a serving plan needs --card NAME (iteragpu cards): the engine sizes its pool from the card's memory"
        );
    };
    let card = crate::cards::find(card_name).map_err(|e| CliError::bad_input(e.to_string()))?;
    let version = s
        .engine_version
        .as_deref()
        .map(estimate::serving::Version::parse)
        .transpose()
        .map_err(CliError::bad_input)?;
    let read = estimate::serving::config::read(&estimate::serving::config::ReadRequest {
        path,
        engine,
        version,
        dtype: input.dtype,
        compute_major: card.compute_capability().map(|c| c.0),
        max_model_len: s.max_model_len,
    })?;
    let (m, model, mut notes) = (read.weights, read.model, read.notes);
    let (device_total, device_total_source) = match s.device_total {
        Some(b) => (b, "--device-total".to_string()),
        None => {
            let (b, src) = card.device_capacity();
            (b, format!("{}, {}", card.name, src.label()))
        }
    };
    let tp = s.tensor_parallel_size.unwrap_or(1);
    // TP against the heads is one of the engine's refusal rules (serving/refusal.rs).
    let facts = estimate::serving::refusal::StartFacts {
        attention_heads: Some(read.attention_heads),
        free_at_start: s.free_at_start,
        compute_capability: card.compute_capability(),
        dtype_explicit: input.dtype.is_some(),
    };
    let (max_model_len, max_model_len_source) = (read.max_model_len, read.max_model_len_source);
    let request = estimate::serving::ServeRequest {
        engine,
        version,
        card: card.name.clone(),
        device_total,
        device_total_source,
        compute_major: card.compute_capability().map(|c| c.0),
        gpu_memory_utilization: s.gpu_memory_utilization,
        max_model_len,
        max_model_len_source,
        max_num_seqs: s.max_num_seqs,
        max_num_batched_tokens: s.max_num_batched_tokens,
        tensor_parallel_size: tp,
        kv_fp8: s.kv_cache_dtype == Some(ServeKvDtype::Fp8),
        block_size: s.block_size,
        enforce_eager: s.enforce_eager,
        weights: s.weights_memory,
        activation_peak: match s.activation_peak {
            Some(ActivationPeakArg::Size(b)) => Some(estimate::serving::ActivationPeak::FromLog(b)),
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
    let mut p = estimate::serving::plan_with(&model, &request, &facts)?;
    if s.activation_peak == Some(ActivationPeakArg::Predict) {
        p = predicted_profile(path, &card.name, &m, &model, request, &p.summary, &facts)?;
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
            .map_err(estimate::EstimateError::overflow("the total", "the inputs"))?;
    Ok(estimate::Estimate {
        schema: estimate::SCHEMA,
        tool_version: env!("CARGO_PKG_VERSION"),
        terms: p.terms,
        total_bytes,
        left_out: estimate::serving::left_out(engine),
        notes,
        model: Some(estimate::ModelSummary {
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

/// The reserve as stated: `--reserve-gib` (its own wording) or `--reserve BYTES`; none without.
fn stated_reserve(args: &ReserveArgs) -> Option<Reserve> {
    match (&args.reserve_gib, args.reserve) {
        (Some((bytes, stated)), _) => Some(Reserve {
            bytes: *bytes,
            stated_as: stated.clone(),
        }),
        (None, Some(bytes)) => Some(Reserve {
            bytes,
            stated_as: format!("--reserve {}", bytes.grouped()),
        }),
        (None, None) => None,
    }
}
