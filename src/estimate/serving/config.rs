//! A model folder read as a serving engine reads it: the served dtype (the engine's `--dtype auto`
//! rule), `max_model_len` derived from the config's positions and rope, the KV layout the engine
//! caches, the weights it loads and vLLM's rotary cache. The command gives the values it was
//! handed; the rules live here, beside the planner that uses them.

use std::path::Path;

use super::{Engine, Rotary, ServeModel, Version, VisionEncoder};
use crate::dtype::Dtype;
use crate::estimate::EstimateError;
use crate::estimate::weights::ModelWeights;
use crate::model::config::Fields;
use crate::model::families::{Architecture, Family};

/// What the command was given that reading the model needs.
pub struct ReadRequest<'a> {
    pub path: &'a Path,
    pub engine: Engine,
    pub version: Option<Version>,
    /// `--dtype` (`None`: the engine's `auto`).
    pub dtype: Option<Dtype>,
    /// The card's compute capability (major), which `--dtype auto` reads.
    pub compute_major: Option<u32>,
    /// `--max-model-len` (`None`: derived from the config).
    pub max_model_len: Option<u64>,
}

/// The model as the engine serves it.
pub struct Read {
    pub weights: ModelWeights,
    pub model: ServeModel,
    pub max_model_len: u64,
    pub max_model_len_source: String,
    pub attention_heads: u64,
    pub notes: Vec<String>,
}

/// Ropes whose scaling leaves vLLM's derived `max_model_len` at `max_position_embeddings`.
const UNSCALED_ROPES: [&str; 4] = ["llama3", "su", "longrope", "default"];

fn refuse(text: String) -> EstimateError {
    EstimateError::Input(text)
}

/// Reads `g.path` as the engine does, or says why it cannot be planned.
pub fn read(g: &ReadRequest<'_>) -> Result<Read, EstimateError> {
    let config = crate::model::Config::load(g.path)?;
    let fields = config.fields();
    let model_type = fields
        .opt_str("model_type")?
        .unwrap_or_default()
        .to_string();
    if let Err(crate::model::ModelError::UnknownFamily { supported, .. }) =
        Architecture::from_config(&config)
    {
        return Err(refuse(unreadable(
            g.path,
            &model_type,
            &supported,
            &fields,
        )?));
    }
    let m = ModelWeights::load(g.path, g.dtype, None)?;
    // `--dtype auto` serves a float32 config in 16 bits; an explicit --dtype is the engine's too.
    let m = if g.dtype.is_none() && m.compute_dtype == Dtype::Float32 {
        let (served, why) = super::auto_dtype(g.engine, g.version, &model_type, g.compute_major);
        ModelWeights::load(g.path, None, Some((served, why)))?
    } else {
        m
    };
    let dtype_rule = format!("{} ({})", m.compute_dtype.torch_name(), m.dtype_source);
    let text = fields.section("text_config")?;
    let position_limit = match fields.positive_positions("max_position_embeddings")? {
        Some(n) => Some(n),
        None => match &text {
            Some(t) => t.positive_positions("max_position_embeddings")?,
            None => None,
        },
    };
    let mut notes: Vec<String> = Vec::new();
    let rope = fields.raw("rope_scaling").filter(|v| !v.is_null());
    let rope_type = rope
        .and_then(|r| r.get("rope_type").or_else(|| r.get("type")))
        .and_then(|t| t.as_str())
        .unwrap_or("default");
    let unscaled = rope.is_none() || UNSCALED_ROPES.contains(&rope_type);
    let (max_model_len, max_model_len_source) = match (g.max_model_len, position_limit) {
        (Some(n), _) => (n, "--max-model-len".to_string()),
        (None, Some(n)) if unscaled => (
            n,
            format!(
                "the config's max_position_embeddings (config/model.py _get_and_verify_max_len; rope_scaling {rope_type} does not scale it)"
            ),
        ),
        (None, Some(_)) => {
            return Err(refuse(format!(
                "the config's rope_scaling ({rope_type}) changes vLLM's derived max_model_len in a way this planner does not model: give --max-model-len N"
            )));
        }
        (None, None) => {
            return Err(refuse(
                "the config names no max_position_embeddings: give --max-model-len N".into(),
            ));
        }
    };
    if let Some(limit) = position_limit
        && unscaled
    {
        let allowed = std::env::var(super::long_len_env(g.engine)).is_ok_and(|v| v == "1");
        if let Some(note) = super::check_max_model_len(g.engine, max_model_len, limit, allowed)
            .map_err(EstimateError::Input)?
        {
            notes.push(note);
        }
    }
    let arch = &m.architecture;
    let d = arch.dims;
    let (kv_heads, head_size, mla) = match arch.kv.latent {
        Some(l) => (1, l.kv_lora_rank + l.rope_dim, true),
        None => (d.num_kv_heads, d.head_dim, false),
    };
    let weights = crate::units::checked_sum(
        crate::estimate::weights::terms(
            &crate::estimate::WeightsSource::Model(Box::new(m.clone())),
            &mut notes,
        )?
        .iter()
        .filter(|t| t.in_total && t.id != crate::estimate::TermId::AllocatorSegments)
        .map(|t| t.bytes),
    )
    .map_err(EstimateError::overflow("the weights", "the config's sizes"))?;
    let model = ServeModel {
        kv_heads,
        head_size,
        mla,
        layers: arch.kv.layers.iter().map(|l| l.window).collect(),
        hidden: d.hidden_size,
        q_width: d.num_heads * d.head_dim,
        intermediate: arch.moe.map_or(d.intermediate_size, |x| {
            x.active * x.expert_intermediate + x.shared_intermediate
        }),
        vocab: d.vocab_size,
        dtype_bytes: m.compute_dtype.bytes(),
        dtype_rule,
        weights,
        rotary: rotary_cache(arch, mla, rope_type, rope, position_limit, &text, &fields),
        encoder: vision_encoder(arch, &fields)?,
        runner: super::releases::RunnerModel {
            architectures: fields
                .raw("architectures")
                .and_then(|a| a.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default(),
            moe: arch.moe.is_some(),
            quantized: fields
                .raw("quantization_config")
                .is_some_and(|q| !q.is_null()),
        },
    };
    Ok(Read {
        attention_heads: d.num_heads,
        weights: m,
        model,
        max_model_len,
        max_model_len_source,
        notes,
    })
}

/// Why `estimate serve` cannot read a config of an unknown model_type, and what to give instead: a
/// vision-language model's language part is its own config (`text_config`), not read here.
fn unreadable(
    path: &Path,
    model_type: &str,
    supported: &str,
    fields: &Fields<'_>,
) -> Result<String, EstimateError> {
    let config = path.display();
    if fields.raw("vision_config").is_some() {
        let text = match fields.section("text_config")? {
            Some(t) => match t.opt_str("model_type")? {
                Some(tt) if supported.split(", ").any(|f| f == tt) => {
                    format!("its language model is the text_config (model_type `{tt}`)")
                }
                Some(tt) => format!(
                    "its language model is the text_config, of model_type `{tt}`, itself not one of these families (the planner cannot plan it)"
                ),
                None => "its language model is the text_config".to_string(),
            },
            None => "its language model's settings sit at the top level beside the vision ones"
                .to_string(),
        };
        Ok(format!(
            "{config}: model_type `{model_type}` is a vision-language model (the config has a vision_config); `estimate serve` plans the language models of the families {supported} (Gemma 3's multimodal config through its text_config), and {text}: write that language model's complete config.json (model_type one of the families above, every size it needs stated, not left to transformers' defaults) in a folder of its own and give it with --model; the vision encoder's weights, its activations and the image tokens are then NOT counted, add them yourself (e.g. `iteragpu estimate` of the whole model for the weights)"
        ))
    } else {
        Ok(format!(
            "{config}: model_type `{model_type}` is not a family `estimate serve` reads ({supported}); the planner needs the KV layout from such a config, so --parameters/--bits does not apply to a serving plan: give a config.json of a supported family with the same layers, KV heads and head size"
        ))
    }
}

/// Gemma 3's SigLIP tower, read as the weights are (`model::families`): the sizes the profile
/// run's dummy images go through (vLLM's `Gemma3ProcessingInfo`: one 896-pixel image, pan-and-scan
/// off by default, is `mm_tokens_per_image` embeddings).
fn vision_encoder(
    arch: &Architecture,
    fields: &Fields<'_>,
) -> Result<Option<VisionEncoder>, EstimateError> {
    if arch.family != Family::Gemma3 {
        return Ok(None);
    }
    let Some(v) = fields.section("vision_config")? else {
        return Ok(None);
    };
    let image_size = v.positive_or("image_size", 224)?;
    let patch = v.positive_or("patch_size", 16)?;
    let side = image_size / patch;
    Ok(Some(VisionEncoder {
        image_size,
        patches: side * side,
        hidden: v.positive_or("hidden_size", 768)?,
        intermediate: v.positive_or("intermediate_size", 3072)?,
        tokens_per_item: fields.positive_or("mm_tokens_per_image", 256)?,
    }))
}

/// vLLM's rotary cache for `estimate serve`: the positions it precomputes and the rotary width,
/// or why it is not counted (a rope whose cache vLLM sizes by another rule, MLA, no rope).
fn rotary_cache(
    arch: &Architecture,
    mla: bool,
    rope_type: &str,
    rope: Option<&serde_json::Value>,
    positions: Option<u64>,
    text: &Option<Fields<'_>>,
    fields: &Fields<'_>,
) -> Result<Rotary, String> {
    if arch.family == Family::Gpt2 {
        return Err("GPT-2 has learned positions, no rotary cache".into());
    }
    if arch.family == Family::Gemma3 {
        return Err(
            "Gemma 3's local and global layers use two rope settings (two caches), not modelled"
                .into(),
        );
    }
    if mla {
        return Err(
            "MLA's DeepseekScalingRotaryEmbedding sizes its cache by the YaRN factor, not modelled"
                .into(),
        );
    }
    let raw = |key: &str| {
        text.as_ref()
            .and_then(|t| t.raw(key))
            .or_else(|| fields.raw(key))
    };
    if raw("alibi").and_then(serde_json::Value::as_bool) == Some(true) {
        return Err("ALiBi positions, no rotary cache".into());
    }
    let positions = positions.ok_or("the config names no max_position_embeddings")?;
    let fraction = raw("partial_rotary_factor")
        .or_else(|| raw("rotary_pct"))
        .and_then(serde_json::Value::as_f64)
        .unwrap_or(1.0);
    let dim = (arch.dims.head_dim as f64 * fraction).round() as u64;
    let positions = match rope_type {
        "default" | "llama3" => positions,
        "linear" => {
            let factor = rope
                .and_then(|r| r.get("factor"))
                .and_then(serde_json::Value::as_f64)
                .ok_or("rope_scaling linear without a factor")?;
            (positions as f64 * factor).round() as u64
        }
        other => {
            return Err(format!(
                "rope_scaling {other} sizes its cache by its own rule, not modelled"
            ));
        }
    };
    Ok(Rotary { positions, dim })
}
