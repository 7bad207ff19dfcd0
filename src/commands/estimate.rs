//! `iteragpu estimate`: arguments → a validated [`Request`] → terms → table or JSON.

use anyhow::{Context, Result, bail};
use std::io::Write;
use std::path::Path;

use crate::cli::EstimateArgs;
use crate::dtype::Dtype;
use crate::estimate::kv_cache::{CacheOptions, QuantizedSettings};
use crate::estimate::training::Lora;
use crate::estimate::weights::ModelWeights;
use crate::estimate::{self, KvRequest, Request, Reserve, TrainingRequest, WeightsSource};
use crate::model::{Architecture, Config, KvLayout, safetensors};

pub fn run(args: &EstimateArgs, out: &mut dyn Write) -> Result<()> {
    let request = plan(args)?;
    let est = estimate::estimate(&request)?;
    let text = if args.json {
        estimate::render::json(&est)
    } else {
        estimate::render::table(&est)
    };
    out.write_all(text.as_bytes())
        .context("cannot write the estimate to standard output")?;
    Ok(())
}

/// Validates the combination of options and reads the model if one is given.
pub fn plan(args: &EstimateArgs) -> Result<Request> {
    let weights = match (args.parameters, args.bits, &args.model) {
        (Some(parameters), Some(bits), None) => Some(WeightsSource::Numbers { parameters, bits }),
        (None, None, Some(path)) => Some(WeightsSource::Model(Box::new(load_model(
            path, args.dtype,
        )?))),
        (None, None, None) => None,
        _ => bail!("give either --parameters N --bits B, or --model PATH, not both"),
    };
    let model_arch = match &weights {
        Some(WeightsSource::Model(m)) => Some(m),
        _ => None,
    };
    if model_arch.is_some()
        && (args.kv_layers.is_some() || args.kv_heads.is_some() || args.head_dim.is_some())
    {
        bail!(
            "--kv-layers, --kv-heads and --head-dim are read from --model; drop them (or drop --model to give them by hand)"
        );
    }

    let training = if args.train {
        if weights.is_none() {
            bail!("--train needs the model: give --model PATH or --parameters N --bits B");
        }
        Some(TrainingRequest {
            optimizer: args.optimizer,
            precision: args.precision,
            lora: args.lora_rank.map(|rank| Lora {
                rank,
                targets: args
                    .lora_targets
                    .iter()
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty())
                    .collect(),
            }),
            gradient_checkpointing: args.gradient_checkpointing,
            flash_attention: args.flash_attention,
            batch: Some(args.sequences.unwrap_or(1)),
            context: args.tokens,
        })
    } else {
        None
    };

    let kv = if training.is_some() {
        None
    } else {
        kv_request(args, model_arch.map(|m| (&m.architecture, m.compute_dtype)))?
    };
    if weights.is_none() && kv.is_none() {
        bail!(
            "nothing to estimate: give --parameters N --bits B (weights), --model PATH (a Hugging Face config), or --kv-layers, --kv-heads, --head-dim and --tokens (KV cache)"
        );
    }
    let reserve = match (&args.reserve_gib, args.reserve) {
        (Some((bytes, stated)), _) => Some(Reserve {
            bytes: *bytes,
            stated_as: stated.clone(),
        }),
        (None, Some(bytes)) => Some(Reserve {
            bytes,
            stated_as: format!("--reserve {}", bytes.grouped()),
        }),
        (None, None) => None,
    };
    Ok(Request {
        weights,
        kv,
        training,
        reserve,
    })
}

fn load_model(path: &Path, dtype: Option<Dtype>) -> Result<ModelWeights> {
    let config = Config::load(path)?;
    let architecture = Architecture::from_config(&config)?;
    let stored = if path.is_dir() {
        safetensors::scan_folder(path)?
    } else {
        None
    };
    let stored_float = stored.as_ref().and_then(|s| {
        s.by_dtype
            .iter()
            .filter_map(|(name, t)| {
                let d = match name.as_str() {
                    "BF16" => Dtype::Bfloat16,
                    "F16" => Dtype::Float16,
                    "F32" => Dtype::Float32,
                    _ => return None,
                };
                Some((t.bytes, d))
            })
            .max_by_key(|(bytes, _)| *bytes)
            .map(|(_, d)| d)
    });
    let (compute_dtype, dtype_source) = match (dtype, architecture.config_dtype, stored_float) {
        (Some(d), _, _) => (d, "--dtype".to_string()),
        (None, Some(d), _) => (d, "config.json torch_dtype".to_string()),
        (None, None, Some(d)) => (d, "the stored format".to_string()),
        (None, None, None) => (
            Dtype::Float32,
            "default float32: the config names no dtype; pass --dtype".to_string(),
        ),
    };
    Ok(ModelWeights {
        path: path.display().to_string(),
        architecture,
        stored,
        compute_dtype,
        dtype_source,
    })
}

fn kv_request(
    args: &EstimateArgs,
    model: Option<(&Architecture, Dtype)>,
) -> Result<Option<KvRequest>> {
    let layout = match model {
        Some((arch, _)) => {
            if args.tokens.is_none() {
                return Ok(None);
            }
            arch.kv.clone()
        }
        None => {
            let given = [
                ("--kv-layers", args.kv_layers),
                ("--kv-heads", args.kv_heads),
                ("--head-dim", args.head_dim),
                ("--tokens", args.tokens),
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
                bail!(
                    "the KV cache needs {} as well (or --model PATH to read the layout from a config)",
                    missing.join(", ")
                );
            }
            let (l, h, d) = (
                args.kv_layers.unwrap_or(1),
                args.kv_heads.unwrap_or(1),
                args.head_dim.unwrap_or(1),
            );
            KvLayout::uniform(l, h, d, None)
        }
    };
    let tokens = args.tokens.unwrap_or(1);
    let element_bytes = match (args.kv_dtype, args.kv_bytes, args.dtype, model) {
        (Some(d), _, _, _) => d.bytes(),
        (None, Some(b), _, _) => b,
        (None, None, Some(d), _) => d.bytes(),
        (None, None, None, Some((_, d))) => d.bytes(),
        (None, None, None, None) => bail!(
            "give the width of a cached value: --kv-bytes 2 (bf16/fp16) or --kv-dtype bfloat16"
        ),
    };
    if let Some(p) = args.prompt_tokens
        && p > tokens
    {
        bail!(
            "--prompt-tokens {p} is longer than --tokens/--context {tokens}, which counts the prompt and the generated tokens; raise --context"
        );
    }
    let options = CacheOptions {
        max_cache_len: args.max_cache_len,
        window: args.window,
        quantized: QuantizedSettings {
            bits: args.kv_quant_bits,
            group_size: args.kv_group_size,
            residual: args.kv_residual,
        },
    };
    let strategy = args
        .cache
        .strategy(&options, tokens, &layout)
        .map_err(anyhow::Error::msg)?;
    Ok(Some(KvRequest {
        layout,
        tokens,
        sequences: args.sequences.unwrap_or(1),
        element_bytes,
        strategy,
        prompt_tokens: args.prompt_tokens,
    }))
}
