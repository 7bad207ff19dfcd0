//! `estimate`'s arguments turned into the plan's options ([`crate::estimate::plan`]), and the old
//! spellings (`estimate --serve ENGINE`, `estimate --workload vision`) refused where they carry an
//! option their new mode does not take. Which options were written comes from clap's value
//! sources and the group that defines each: no list of option names is kept.

use crate::cli::{
    ActivationArgs, EstimateArgs, EstimateImageArgs, EstimateServeArgs, EstimateVisionArgs, Given,
    KvCacheArgs, KvLoadArgs, KvShapeArgs, QuantizedCacheArgs, ReserveArgs, ServeArgs, ServeKvDtype,
    ServeOptions, ShardOptionsArgs, TrainStepArgs, VisionLegacyArgs,
};
use crate::commands::options::model_path;
use crate::dtype::Dtype;
use crate::estimate::Reserve;
use crate::estimate::plan::{
    EstimateOptions, KvOptions, ServingOptions, ShardOptions, TrainStep, VisionOptions, Written,
};
use crate::estimate::serving::Engine;
use crate::exit::CliError;
use crate::model::hub::{HubError, Needs};

/// `estimate` (a language model).
pub fn estimate(args: &EstimateArgs) -> Result<EstimateOptions, HubError> {
    let (load, cache, quantized) = (&args.load, &args.kv_cache, &args.quantized);
    let shard = &args.shard_options;
    Ok(EstimateOptions {
        parameters: args.parameters,
        bits: args.bits,
        model: model_path(args.model.as_deref(), Needs::default())?,
        dtype: args.dtype,
        images_per_request: args.vision.images.images_per_request.clone(),
        quantize: args.quantize.quantize,
        double_quant: args.quantize.double_quant,
        step: step(&args.step, &args.given),
        lora_rank: args.lora_rank,
        lora_targets: args.lora_targets.clone(),
        gradient_checkpointing: args.activations.gradient_checkpointing,
        flash_attention: args.activations.flash_attention,
        kv: KvOptions {
            layers: args.kv_shape.kv_layers,
            heads: args.kv_shape.kv_heads,
            head_dim: args.kv_shape.head_dim,
            tokens: load.tokens(),
            sequences: load.sequences(),
            requests: load.requests,
            prompt_lengths: load.prompt_lengths.clone(),
            output_lengths: load.output_lengths.clone(),
            prompt_tokens: cache.prompt_tokens,
            kv_bytes: cache.kv_bytes,
            kv_dtype: cache.kv_dtype,
            cache: cache.cache,
            max_cache_len: cache.max_cache_len,
            window: cache.window,
            quant_bits: quantized.kv_quant_bits,
            group_size: quantized.kv_group_size,
            residual: quantized.kv_residual,
        },
        shard: args.shard,
        shard_options: ShardOptions {
            world_size: shard.world_size,
            gpus_per_node: shard.gpus_per_node,
            offload: shard.offload,
            largest_layer_parameters: shard.largest_layer_parameters,
            comm_reserve: shard.comm_reserve,
        },
        reserve: reserve(&args.stated),
        written: Written {
            images: written::<EstimateImageArgs>(&args.given),
            kv_shape: written::<KvShapeArgs>(&args.given),
            kv_load: written::<KvLoadArgs>(&args.given),
            kv_cache: written::<KvCacheArgs>(&args.given),
            quantized_cache: written::<QuantizedCacheArgs>(&args.given),
            activations: written::<ActivationArgs>(&args.given),
            shard_options: written::<ShardOptionsArgs>(&args.given),
        },
    })
}

/// `estimate vision`.
pub fn vision(args: &EstimateVisionArgs) -> Result<VisionOptions, HubError> {
    Ok(VisionOptions {
        model: hub_path(&args.model)?,
        dtype: args.dtype,
        resolution: args.images.resolution,
        images: args.images.images,
        images_per_request: args.images.images_per_request.clone(),
        step: step(&args.step, &args.given),
        gradient_checkpointing: args.gradient_checkpointing,
        reserve: reserve(&args.stated),
    })
}

/// The old `estimate --workload vision`: every option `estimate vision` does not take is refused
/// by name.
pub fn legacy_vision(args: &EstimateArgs) -> Result<VisionOptions, CliError> {
    refuse_outside::<EstimateVisionArgs, VisionLegacyArgs>(
        &args.given,
        "a vision estimate (an image encoder has no KV cache, context, LoRA or sharding here; its load is --resolution and --images; its attention kernel is the config's attn_implementation)",
    )?;
    let Some(model) = &args.model else {
        refuse!("a vision estimate needs --model PATH (an image model's config.json)");
    };
    let images = &args.vision.images;
    Ok(VisionOptions {
        model: hub_path(model)?,
        dtype: args.dtype,
        resolution: images.resolution,
        images: images.images,
        images_per_request: images.images_per_request.clone(),
        step: step(&args.step, &args.given),
        gradient_checkpointing: args.activations.gradient_checkpointing,
        reserve: reserve(&args.stated),
    })
}

/// `estimate serve ENGINE`.
pub fn serving(args: &EstimateServeArgs) -> Result<ServingOptions, HubError> {
    Ok(serving_of(
        args.engine,
        &hub_path(&args.model)?,
        args.dtype,
        &args.options,
    ))
}

/// The old `estimate --serve ENGINE`: every option `estimate serve` does not take is refused by
/// name (clap refuses them itself under the new spelling).
pub fn legacy_serving(args: &EstimateArgs, engine: Engine) -> Result<ServingOptions, CliError> {
    refuse_outside::<EstimateServeArgs, ServeArgs>(
        &args.given,
        "a serving plan (the engine sets its own KV cache, batch and reserve)",
    )?;
    let Some(model) = &args.model else {
        refuse!(
            "a serving plan needs --model DIR (a Hugging Face config.json) and --card NAME (iteragpu cards): `iteragpu estimate serve {engine} --model DIR --card NAME`"
        );
    };
    Ok(serving_of(
        engine,
        &hub_path(model)?,
        args.dtype,
        &args.serve.options,
    ))
}

fn serving_of(
    engine: Engine,
    model: &std::path::Path,
    dtype: Option<Dtype>,
    s: &ServeOptions,
) -> ServingOptions {
    ServingOptions {
        engine,
        model: model.to_path_buf(),
        dtype,
        card: s.card.clone(),
        gpu_memory_utilization: s.gpu_memory_utilization,
        max_model_len: s.max_model_len,
        max_num_seqs: s.max_num_seqs,
        max_num_batched_tokens: s.max_num_batched_tokens,
        tensor_parallel_size: s.tensor_parallel_size,
        kv_fp8: s.kv_cache_dtype == Some(ServeKvDtype::Fp8),
        block_size: s.block_size,
        enforce_eager: s.enforce_eager,
        engine_version: s.engine_version.clone(),
        device_total: s.device_total,
        free_at_start: s.free_at_start,
        weights_memory: s.weights_memory,
        activation_peak: s.activation_peak,
        non_torch: s.non_torch,
        kv_cache_memory: s.kv_cache_memory,
        concurrency_at: s.concurrency_at.clone(),
    }
}

/// A model folder given by `--model` (a Hub id becomes its snapshot folder).
fn hub_path(model: &std::path::Path) -> Result<std::path::PathBuf, HubError> {
    crate::model::hub::resolve(model, Needs::default())
}

fn step(args: &TrainStepArgs, given: &Given) -> TrainStep {
    TrainStep {
        train: args.train,
        optimizer: args.optimizer,
        precision: args.precision,
        precision_stated: given.contains("precision"),
    }
}

/// The reserve as stated: `--reserve-gib` (its own wording) or `--reserve BYTES`; none without.
fn reserve(args: &ReserveArgs) -> Option<Reserve> {
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

/// The names of group `A`'s options written on the command line (clap's value sources).
fn written<A: clap::Args>(given: &Given) -> Vec<String> {
    crate::commands::options::written_in::<A>(given)
        .into_iter()
        .map(|(_, name)| name)
        .collect()
}

/// An old spelling's options: every one written that the new mode's Args `M` and the old
/// spelling's own group `L` do not hold is refused by name, as not part of `what`.
fn refuse_outside<M: clap::Args, L: clap::Args>(given: &Given, what: &str) -> Result<(), CliError> {
    let ids: Vec<String> = M::augment_args(clap::Command::new("mode"))
        .get_arguments()
        .chain(L::augment_args(clap::Command::new("old")).get_arguments())
        .map(|a| a.get_id().to_string())
        .collect();
    let others: Vec<String> = crate::commands::options::written_in::<EstimateArgs>(given)
        .into_iter()
        .filter(|(id, _)| !ids.contains(id))
        .map(|(_, name)| name)
        .collect();
    if !others.is_empty() {
        let (verb, pronoun) = if others.len() == 1 {
            ("is", "it")
        } else {
            ("are", "them")
        };
        refuse!(
            "{} {verb} not part of {what}: drop {pronoun}",
            others.join(", ")
        );
    }
    Ok(())
}
