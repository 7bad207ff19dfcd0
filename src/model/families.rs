//! The supported `model_type` families: each turns a config into the tensors transformers would
//! create (same names, same shapes) and the KV layout its cache classes would keep.
//!
//! Shapes follow the transformers modeling files of each family (`modeling_<family>.py`); the
//! defaults used when a field is absent are those of the family's `configuration_<family>.py`.

mod deepseek;
mod gpt;

use serde::Serialize;
use strum::VariantArray;

use super::ModelError;
use super::attention::AttentionKernel;
use super::config::{Config, Fields, MAX_PARAMETERS};
use super::inventory::{Builder, Role, TensorGroup, total_parameters};
use super::kv_layout::{KvLayer, KvLayout, LatentLayout};
use super::quantization::Quantization;
use crate::dtype::Dtype;
use deepseek::deepseek_v3;
use gpt::{falcon, gpt_neox, gpt2};

/// A supported architecture family, named by the `model_type` written in config.json.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, strum::IntoStaticStr, strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Family {
    Llama,
    Mistral,
    Mixtral,
    Qwen2,
    Qwen2Moe,
    Qwen3,
    Qwen3Moe,
    Gemma,
    Gemma2,
    Gemma3,
    Phi3,
    Gpt2,
    GptNeox,
    Falcon,
    DeepseekV3,
}

impl Family {
    /// The `model_type` written in config.json.
    pub fn model_type(self) -> &'static str {
        self.into()
    }

    pub fn from_model_type(model_type: &str) -> Option<Family> {
        Some(match model_type {
            "gemma3_text" => Family::Gemma3,
            "RefinedWeb" | "RefinedWebModel" => Family::Falcon,
            other => *Family::VARIANTS.iter().find(|f| f.model_type() == other)?,
        })
    }

    pub fn supported_list() -> String {
        Family::VARIANTS
            .iter()
            .map(|f| f.model_type())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Mixture-of-experts facts needed for activations and for the summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Moe {
    /// Routed experts per MoE layer.
    pub experts: u64,
    /// Experts each token is routed to.
    pub active: u64,
    /// Layers that are MoE (the others are dense).
    pub moe_layers: u64,
    /// Intermediate size of one routed expert.
    pub expert_intermediate: u64,
    /// Intermediate size of the always-active shared expert(s), 0 if none.
    pub shared_intermediate: u64,
}

/// Dimensions that activation and logits models need.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Dims {
    pub hidden_size: u64,
    pub num_layers: u64,
    pub num_heads: u64,
    pub num_kv_heads: u64,
    pub head_dim: u64,
    pub vocab_size: u64,
    /// Intermediate width of a dense MLP.
    pub intermediate_size: u64,
    /// SwiGLU/GeGLU style MLP (gate and up projections) rather than a plain two-layer MLP.
    pub gated_mlp: bool,
}

/// A model as iteragpu understands it.
#[derive(Clone, Debug, Serialize)]
pub struct Architecture {
    pub family: Family,
    /// `model_type` as written in the file that was read.
    pub model_type: String,
    pub dims: Dims,
    pub moe: Option<Moe>,
    /// Every parameter tensor the model holds, grouped.
    pub groups: Vec<TensorGroup>,
    pub kv: KvLayout,
    pub tied_embeddings: bool,
    /// `torch_dtype` (or `dtype`) recorded in the config: the format the weights were saved in.
    pub config_dtype: Option<Dtype>,
    pub quantization: Option<Quantization>,
    /// The attention the layers run (the config's `attn_implementation`, else transformers'
    /// default), and where that choice comes from: it decides the s² term of the activations.
    pub attention: AttentionKernel,
    pub attention_source: String,
    /// Facts worth telling the user about how the count was made.
    pub notes: Vec<String>,
}

impl Architecture {
    pub fn parameters(&self) -> u128 {
        total_parameters(&self.groups)
    }

    /// Builds the architecture of a parsed config.
    pub fn from_config(config: &Config) -> Result<Architecture, ModelError> {
        let root = config.fields();
        let family = Family::from_model_type(&config.model_type).ok_or_else(|| {
            ModelError::UnknownFamily {
                path: config.path.clone(),
                model_type: config.model_type.clone(),
                supported: Family::supported_list(),
            }
        })?;
        let mut notes = Vec::new();
        // Multimodal configs nest the language model under `text_config`.
        let text = match root.section("text_config")? {
            Some(section) => {
                notes.push("language model read from `text_config`".to_string());
                section
            }
            None => root.clone(),
        };
        let mut arch = match family {
            Family::Phi3 => phi3(&text)?,
            Family::Gpt2 => gpt2(&text)?,
            Family::GptNeox => gpt_neox(&text)?,
            Family::Falcon => falcon(&text)?,
            Family::DeepseekV3 => deepseek_v3(&text, &mut notes)?,
            _ => llama_like(family, &text)?,
        };
        if family == Family::Gemma3
            && let Some(vision) = root.section("vision_config")?
        {
            let text_hidden = arch.dims.hidden_size;
            let before = total_parameters(&arch.groups);
            siglip_vision_and_projector(&vision, text_hidden, &mut arch.groups)?;
            let added = total_parameters(&arch.groups) - before;
            notes.push(format!(
                "vision tower (SigLIP) and projector counted: {} parameters",
                crate::units::group_thousands(added)
            ));
        }
        check_sizes(config, &arch.groups)?;
        arch.model_type = config.model_type.clone();
        arch.config_dtype = config_dtype(&root, &text)?;
        arch.quantization = Quantization::from_config(&root)?;
        (arch.attention, arch.attention_source) =
            AttentionKernel::of_sections(&[text.clone(), root.clone()])?;
        arch.notes.splice(0..0, notes);
        Ok(arch)
    }
}

/// Refuses a tensor whose element count does not fit in a `u64`, and a model above
/// [`MAX_PARAMETERS`]: everything downstream multiplies these counts by element widths.
fn check_sizes(config: &Config, groups: &[TensorGroup]) -> Result<(), ModelError> {
    for group in groups {
        if group.checked_numel().is_none() {
            return Err(ModelError::TensorTooLarge {
                path: config.path.clone(),
                tensor: group.name.clone(),
                shape: group.shape.clone(),
            });
        }
    }
    let parameters = total_parameters(groups);
    if parameters > MAX_PARAMETERS as u128 {
        return Err(ModelError::TooManyParameters {
            path: config.path.clone(),
            parameters,
        });
    }
    Ok(())
}

/// Refuses query heads that the KV heads do not divide: each KV head serves a whole group of
/// query heads, so transformers' attention cannot be built otherwise.
fn check_kv_groups(f: &Fields, kv_key: &str, kv_heads: u64, heads: u64) -> Result<(), ModelError> {
    if !heads.is_multiple_of(kv_heads) {
        return Err(f.invalid(
            kv_key,
            &format!(
                "({kv_heads}) does not divide num_attention_heads ({heads}): each KV head serves a whole group of query heads; fix one of the two"
            ),
        ));
    }
    Ok(())
}

/// `hidden / heads`, refused when the heads do not split the hidden width evenly.
fn head_dim_of(
    f: &Fields,
    (heads_key, heads): (&str, u64),
    (hidden_key, hidden): (&str, u64),
) -> Result<u64, ModelError> {
    if !hidden.is_multiple_of(heads) {
        return Err(f.invalid(
            heads_key,
            &format!(
                "({heads}) does not divide {hidden_key} ({hidden}); fix one of the two, or add head_dim to the config"
            ),
        ));
    }
    Ok(hidden / heads)
}

fn config_dtype(root: &Fields, text: &Fields) -> Result<Option<Dtype>, ModelError> {
    for fields in [root, text] {
        for key in ["torch_dtype", "dtype"] {
            if let Some(name) = fields.opt_str(key)? {
                if name == "auto" {
                    continue;
                }
                return name
                    .parse::<Dtype>()
                    .map(Some)
                    .map_err(|e| fields.invalid(key, &e.to_string()));
            }
        }
    }
    Ok(None)
}

/// Per-layer sliding windows as transformers' config classes and cache derive them.
fn layer_windows(family: Family, f: &Fields, layers: u64) -> Result<Vec<Option<u64>>, ModelError> {
    let window = f.positions("sliding_window")?.filter(|w| *w > 0);
    if let Some(types) = f.opt_strings("layer_types")? {
        if types.len() as u64 != layers {
            return Err(f.invalid(
                "layer_types",
                &format!(
                    "lists {} layers but num_hidden_layers is {layers}",
                    types.len()
                ),
            ));
        }
        return types
            .iter()
            .map(|t| match *t {
                "sliding_attention" => window.map(Some).ok_or_else(|| {
                    f.invalid("sliding_window", "is missing but layer_types has sliding layers")
                }),
                "full_attention" => Ok(None),
                other => Err(f.invalid(
                    "layer_types",
                    &format!("has `{other}`, which iteragpu does not model (supported: full_attention, sliding_attention)"),
                )),
            })
            .collect();
    }
    let all = |w: Option<u64>| Ok((0..layers).map(|_| w).collect());
    match family {
        // configuration_gemma2.py: sliding on even layers (the first layer is sliding).
        Family::Gemma2 => Ok((0..layers)
            .map(|i| if (i + 1) % 2 == 1 { window } else { None })
            .collect()),
        // configuration_gemma3.py: every `sliding_window_pattern`-th layer is full (default 6).
        Family::Gemma3 => {
            let pattern = f.positive_or("sliding_window_pattern", 6)?;
            Ok((0..layers)
                .map(|i| if (i + 1) % pattern != 0 { window } else { None })
                .collect())
        }
        // configuration_qwen2.py / qwen3: sliding only with use_sliding_window, from max_window_layers on.
        Family::Qwen2 | Family::Qwen3 => {
            if !f.bool_or("use_sliding_window", false)? {
                return all(None);
            }
            let from = f.u64_or("max_window_layers", 28)?;
            Ok((0..layers)
                .map(|i| if i >= from { window } else { None })
                .collect())
        }
        // configuration_qwen2_moe.py: odd-numbered layers below max_window_layers.
        Family::Qwen2Moe => {
            if !f.bool_or("use_sliding_window", false)? {
                return all(None);
            }
            let below = f.u64_or("max_window_layers", 28)?;
            Ok((0..layers)
                .map(|i| {
                    if (i + 1) % 2 == 1 && i < below {
                        window
                    } else {
                        None
                    }
                })
                .collect())
        }
        Family::Qwen3Moe => {
            let sliding = f.bool_or("use_sliding_window", false)?;
            all(window.filter(|_| sliding))
        }
        // cache_utils.get_layer_types_and_kwargs: a config-level sliding_window makes every layer sliding.
        Family::Mistral | Family::Mixtral | Family::Phi3 => all(window),
        _ => all(None),
    }
}

fn kv_from_windows(windows: Vec<Option<u64>>, heads: u64, head_dim: u64) -> KvLayout {
    let layers = windows.len() as u64;
    let width = heads * head_dim;
    let description = format!("{layers} layers × {heads} KV heads × {head_dim} head_dim");
    KvLayout {
        layers: windows
            .into_iter()
            .map(|window| KvLayer {
                key_width: width,
                value_width: width,
                window,
            })
            .collect(),
        latent: None,
        description,
    }
}

/// Llama-style decoders: llama, mistral, mixtral, qwen2(_moe), qwen3(_moe), gemma, gemma2, gemma3.
fn llama_like(family: Family, f: &Fields) -> Result<Architecture, ModelError> {
    use Family::*;
    let gemma_defaults = matches!(family, Gemma3);
    // Gemma 3's configuration class has defaults where the others require the field.
    let required = |key: &str, gemma3_default: u64| {
        if gemma_defaults {
            f.positive_or(key, gemma3_default)
        } else {
            f.positive(key)
        }
    };
    let vocab = required("vocab_size", 262_208)?;
    let hidden = required("hidden_size", 2304)?;
    let layers = f.layers_or("num_hidden_layers", gemma_defaults.then_some(26))?;
    let heads = required("num_attention_heads", 8)?;
    let kv_heads = f.positive_or(
        "num_key_value_heads",
        if gemma_defaults { 4 } else { heads },
    )?;
    check_kv_groups(f, "num_key_value_heads", kv_heads, heads)?;
    let default_head_dim = match family {
        Gemma | Gemma2 | Gemma3 => 256,
        Qwen3 | Qwen3Moe => 128,
        _ if f.has("head_dim") => 0,
        _ => head_dim_of(f, ("num_attention_heads", heads), ("hidden_size", hidden))?,
    };
    let head_dim = f.positive_or("head_dim", default_head_dim)?;
    let intermediate = match family {
        Gemma3 => f.positive_or("intermediate_size", 9216)?,
        Qwen3Moe => f.positive_or("intermediate_size", 6144)?,
        _ => f.positive("intermediate_size")?,
    };
    let tie_default = matches!(family, Gemma | Gemma2 | Gemma3);
    let tied = f.bool_or("tie_word_embeddings", tie_default)?;
    let qkv_bias = match family {
        Qwen2 | Qwen2Moe => f.bool_or("qkv_bias", true)?,
        _ => f.bool_or("attention_bias", false)?,
    };
    let o_bias = match family {
        Qwen2 | Qwen2Moe => false,
        _ => f.bool_or("attention_bias", false)?,
    };
    let mlp_bias = f.bool_or("mlp_bias", false)?;
    let qk_norm = matches!(family, Qwen3 | Qwen3Moe | Gemma3);
    let extra_norms = matches!(family, Gemma2 | Gemma3);

    let mut b = Builder::default();
    embedding(&mut b, "model.embed_tokens.weight", vocab, hidden);
    let (q, kv) = (heads * head_dim, kv_heads * head_dim);
    template(
        &mut b,
        "model.layers.*.self_attn",
        layers,
        [
            Linear("q_proj", hidden, q, qkv_bias),
            Linear("k_proj", hidden, kv, qkv_bias),
            Linear("v_proj", hidden, kv, qkv_bias),
            Linear("o_proj", q, hidden, o_bias),
        ],
    );
    if qk_norm {
        let norms = [
            Norm("q_norm", head_dim, false),
            Norm("k_norm", head_dim, false),
        ];
        template(&mut b, "model.layers.*.self_attn", layers, norms);
    }
    let mut norms = vec![
        Norm("input_layernorm", hidden, false),
        Norm("post_attention_layernorm", hidden, false),
    ];
    if extra_norms {
        norms.push(Norm("pre_feedforward_layernorm", hidden, false));
        norms.push(Norm("post_feedforward_layernorm", hidden, false));
    }
    template(&mut b, "model.layers.*", layers, norms);

    let moe = match family {
        Mixtral => {
            let experts = f.positive_or("num_local_experts", 8)?;
            let active = f.positive_or("num_experts_per_tok", 2)?;
            let mlp = "model.layers.*.mlp";
            b.moe(mlp, experts, hidden, intermediate, layers);
            Some(Moe {
                experts,
                active,
                moe_layers: layers,
                expert_intermediate: intermediate,
                shared_intermediate: 0,
            })
        }
        Qwen2Moe | Qwen3Moe => {
            let experts = f.u64_or("num_experts", if family == Qwen2Moe { 60 } else { 128 })?;
            let active = f.positive_or(
                "num_experts_per_tok",
                if family == Qwen2Moe { 4 } else { 8 },
            )?;
            let step = f.positive_or("decoder_sparse_step", 1)?;
            // A set: a config listing every layer must not cost layers² lookups.
            let dense_only: std::collections::BTreeSet<u64> = f
                .opt_u64s("mlp_only_layers")?
                .unwrap_or_default()
                .into_iter()
                .collect();
            let expert_inter = f.positive_or(
                "moe_intermediate_size",
                if family == Qwen2Moe { 1408 } else { 768 },
            )?;
            let shared_inter = if family == Qwen2Moe {
                f.positive_or("shared_expert_intermediate_size", 5632)?
            } else {
                0
            };
            let moe_layers = (0..layers)
                .filter(|i| !dense_only.contains(i) && experts > 0 && (i + 1) % step == 0)
                .count() as u64;
            let dense_layers = layers - moe_layers;
            gated_mlp(
                &mut b,
                "model.layers.*.mlp",
                hidden,
                intermediate,
                dense_layers,
                mlp_bias,
            );
            let mlp = "model.layers.*.mlp";
            b.moe(mlp, experts, hidden, expert_inter, moe_layers);
            if shared_inter > 0 {
                gated_mlp(
                    &mut b,
                    &format!("{mlp}.shared_expert"),
                    hidden,
                    shared_inter,
                    moe_layers,
                    false,
                );
                b.push(
                    format!("{mlp}.shared_expert_gate.weight"),
                    &[1, hidden],
                    moe_layers,
                    Role::Router,
                );
            }
            Some(Moe {
                experts,
                active,
                moe_layers,
                expert_intermediate: expert_inter,
                shared_intermediate: shared_inter,
            })
        }
        _ => {
            gated_mlp(
                &mut b,
                "model.layers.*.mlp",
                hidden,
                intermediate,
                layers,
                mlp_bias,
            );
            None
        }
    };
    b.norm("model.norm", hidden, 1, false);
    head(&mut b, "lm_head.weight", vocab, hidden, tied);
    let windows = layer_windows(family, f, layers)?;
    let dims = Dims {
        hidden_size: hidden,
        num_layers: layers,
        num_heads: heads,
        num_kv_heads: kv_heads,
        head_dim,
        vocab_size: vocab,
        intermediate_size: intermediate,
        gated_mlp: true,
    };
    Ok(Architecture {
        moe,
        ..simple(family, b, windows, dims, tied)
    })
}

/// `gate_proj`, `up_proj`, `down_proj` (SwiGLU/GeGLU MLP).
fn gated_mlp(b: &mut Builder, prefix: &str, hidden: u64, inter: u64, count: u64, bias: bool) {
    template(
        b,
        prefix,
        count,
        [
            Linear("gate_proj", hidden, inter, bias),
            Linear("up_proj", hidden, inter, bias),
            Linear("down_proj", inter, hidden, bias),
        ],
    );
}

/// One row of a family's tensor template, named under the template's prefix.
enum Tensor<'a> {
    /// `name.weight` of `[out, in]` (and `name.bias`): `(name, in, out, bias)`.
    Linear(&'a str, u64, u64, bool),
    /// `name.weight` of `[width]` (and `name.bias`): `(name, width, bias)`.
    Norm(&'a str, u64, bool),
}
use Tensor::{Linear, Norm};

/// Adds a template's rows under `prefix`, each `count` times (the layers, or 1), in order: the
/// inventory keeps the model's order.
fn template<'a>(
    b: &mut Builder,
    prefix: &str,
    count: u64,
    rows: impl IntoIterator<Item = Tensor<'a>>,
) {
    for row in rows {
        match row {
            Linear(name, inp, out, bias) => {
                b.linear(&format!("{prefix}.{name}"), inp, out, count, bias)
            }
            Norm(name, width, bias) => b.norm(&format!("{prefix}.{name}"), width, count, bias),
        }
    }
}

/// The input embedding `[vocab, hidden]`.
fn embedding(b: &mut Builder, name: &str, vocab: u64, hidden: u64) {
    b.push(name, &[vocab, hidden], 1, Role::Embedding);
}

/// The output head `[vocab, hidden]`, unless it is tied to the embedding.
fn head(b: &mut Builder, name: &str, vocab: u64, hidden: u64, tied: bool) {
    if !tied {
        b.push(name, &[vocab, hidden], 1, Role::LmHead);
    }
}

/// modeling_phi3.py: fused `qkv_proj` and `gate_up_proj`.
fn phi3(f: &Fields) -> Result<Architecture, ModelError> {
    let vocab = f.positive("vocab_size")?;
    let hidden = f.positive("hidden_size")?;
    let layers = f.layers_or("num_hidden_layers", None)?;
    let heads = f.positive("num_attention_heads")?;
    let kv_heads = f.positive_or("num_key_value_heads", heads)?;
    check_kv_groups(f, "num_key_value_heads", kv_heads, heads)?;
    let head_dim = if f.has("head_dim") {
        f.positive("head_dim")?
    } else {
        head_dim_of(f, ("num_attention_heads", heads), ("hidden_size", hidden))?
    };
    let inter = f.positive("intermediate_size")?;
    let tied = f.bool_or("tie_word_embeddings", false)?;
    let mut b = Builder::default();
    embedding(&mut b, "model.embed_tokens.weight", vocab, hidden);
    template(
        &mut b,
        "model.layers.*",
        layers,
        [
            Linear(
                "self_attn.qkv_proj",
                hidden,
                (heads + 2 * kv_heads) * head_dim,
                false,
            ),
            Linear("self_attn.o_proj", heads * head_dim, hidden, false),
            Linear("mlp.gate_up_proj", hidden, 2 * inter, false),
            Linear("mlp.down_proj", inter, hidden, false),
            Norm("input_layernorm", hidden, false),
            Norm("post_attention_layernorm", hidden, false),
        ],
    );
    b.norm("model.norm", hidden, 1, false);
    head(&mut b, "lm_head.weight", vocab, hidden, tied);
    let windows = layer_windows(Family::Phi3, f, layers)?;
    Ok(simple(
        Family::Phi3,
        b,
        windows,
        Dims {
            hidden_size: hidden,
            num_layers: layers,
            num_heads: heads,
            num_kv_heads: kv_heads,
            head_dim,
            vocab_size: vocab,
            intermediate_size: inter,
            gated_mlp: true,
        },
        tied,
    ))
}

fn simple(
    family: Family,
    b: Builder,
    windows: Vec<Option<u64>>,
    dims: Dims,
    tied: bool,
) -> Architecture {
    Architecture {
        family,
        model_type: family.model_type().to_string(),
        kv: kv_from_windows(windows, dims.num_kv_heads, dims.head_dim),
        dims,
        moe: None,
        groups: b.groups,
        tied_embeddings: tied,
        config_dtype: None,
        quantization: None,
        attention: AttentionKernel::Sdpa,
        attention_source: String::new(),
        notes: Vec::new(),
    }
}

/// modeling_siglip.py vision tower (as Gemma 3 uses it) and Gemma3MultiModalProjector.
fn siglip_vision_and_projector(
    v: &Fields,
    text_hidden: u64,
    groups: &mut Vec<TensorGroup>,
) -> Result<(), ModelError> {
    let hidden = v.positive_or("hidden_size", 768)?;
    let inter = v.positive_or("intermediate_size", 3072)?;
    let layers = v.layers_or("num_hidden_layers", Some(12))?;
    let channels = v.positive_or("num_channels", 3)?;
    let image = v.positive_or("image_size", 224)?;
    let patch = v.positive_or("patch_size", 16)?;
    let patches = (image / patch) * (image / patch);
    let mut b = Builder::default();
    let p = "vision_tower.vision_model";
    b.push(
        format!("{p}.embeddings.patch_embedding.weight"),
        &[hidden, channels, patch, patch],
        1,
        Role::Other,
    );
    b.push(
        format!("{p}.embeddings.patch_embedding.bias"),
        &[hidden],
        1,
        Role::Bias,
    );
    b.push(
        format!("{p}.embeddings.position_embedding.weight"),
        &[patches, hidden],
        1,
        Role::Embedding,
    );
    template(
        &mut b,
        &format!("{p}.encoder.layers.*"),
        layers,
        [
            Norm("layer_norm1", hidden, true),
            Linear("self_attn.q_proj", hidden, hidden, true),
            Linear("self_attn.k_proj", hidden, hidden, true),
            Linear("self_attn.v_proj", hidden, hidden, true),
            Linear("self_attn.out_proj", hidden, hidden, true),
            Norm("layer_norm2", hidden, true),
            Linear("mlp.fc1", hidden, inter, true),
            Linear("mlp.fc2", inter, hidden, true),
        ],
    );
    b.norm(&format!("{p}.post_layernorm"), hidden, 1, true);
    if v.bool_or("vision_use_head", false)? {
        return Err(v.invalid(
            "vision_use_head",
            "is true; iteragpu counts Gemma 3's SigLIP tower without the pooling head only",
        ));
    }
    b.push(
        "multi_modal_projector.mm_input_projection_weight",
        &[hidden, text_hidden],
        1,
        Role::Other,
    );
    b.norm("multi_modal_projector.mm_soft_emb_norm", hidden, 1, false);
    groups.extend(b.groups);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `model_type` strum derives is the word serde writes, for every family.
    #[test]
    fn model_types_are_the_serialized_names() {
        for family in Family::VARIANTS {
            assert_eq!(serde_json::to_value(family).unwrap(), family.model_type());
            assert_eq!(Family::from_model_type(family.model_type()), Some(*family));
        }
        assert_eq!(Family::model_type(Family::Qwen2Moe), "qwen2_moe");
        assert_eq!(Family::model_type(Family::DeepseekV3), "deepseek_v3");
        assert_eq!(Family::model_type(Family::GptNeox), "gpt_neox");
    }
}
