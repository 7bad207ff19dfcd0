//! The supported `model_type` families: each turns a config into the tensors transformers would
//! create (same names, same shapes) and the KV layout its cache classes would keep.
//!
//! Shapes follow the transformers modeling files of each family (`modeling_<family>.py`); the
//! defaults used when a field is absent are those of the family's `configuration_<family>.py`.

use serde::Serialize;

use super::ModelError;
use super::config::{Config, Fields, MAX_PARAMETERS};
use super::inventory::{Builder, Role, TensorGroup, total_parameters};
use super::kv_layout::{KvLayer, KvLayout, LatentLayout};
use super::quantization::Quantization;
use crate::dtype::Dtype;

/// A supported architecture family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
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
    pub const ALL: [Family; 15] = [
        Family::Llama,
        Family::Mistral,
        Family::Mixtral,
        Family::Qwen2,
        Family::Qwen2Moe,
        Family::Qwen3,
        Family::Qwen3Moe,
        Family::Gemma,
        Family::Gemma2,
        Family::Gemma3,
        Family::Phi3,
        Family::Gpt2,
        Family::GptNeox,
        Family::Falcon,
        Family::DeepseekV3,
    ];

    /// The `model_type` written in config.json.
    pub fn model_type(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Mistral => "mistral",
            Family::Mixtral => "mixtral",
            Family::Qwen2 => "qwen2",
            Family::Qwen2Moe => "qwen2_moe",
            Family::Qwen3 => "qwen3",
            Family::Qwen3Moe => "qwen3_moe",
            Family::Gemma => "gemma",
            Family::Gemma2 => "gemma2",
            Family::Gemma3 => "gemma3",
            Family::Phi3 => "phi3",
            Family::Gpt2 => "gpt2",
            Family::GptNeox => "gpt_neox",
            Family::Falcon => "falcon",
            Family::DeepseekV3 => "deepseek_v3",
        }
    }

    pub fn from_model_type(model_type: &str) -> Option<Family> {
        Some(match model_type {
            "gemma3_text" => Family::Gemma3,
            "RefinedWeb" | "RefinedWebModel" => Family::Falcon,
            other => *Family::ALL.iter().find(|f| f.model_type() == other)?,
        })
    }

    pub fn supported_list() -> String {
        Family::ALL
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
            Family::Llama | Family::Mistral | Family::Qwen2 | Family::Qwen3 | Family::Gemma => {
                llama_like(family, &text)?
            }
            Family::Gemma2 | Family::Gemma3 => llama_like(family, &text)?,
            Family::Mixtral | Family::Qwen2Moe | Family::Qwen3Moe => llama_like(family, &text)?,
            Family::Phi3 => phi3(&text)?,
            Family::Gpt2 => gpt2(&text)?,
            Family::GptNeox => gpt_neox(&text)?,
            Family::Falcon => falcon(&text)?,
            Family::DeepseekV3 => deepseek_v3(&text, &mut notes)?,
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
    let window = f.opt_u64("sliding_window")?.filter(|w| *w > 0);
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
            if f.bool_or("use_sliding_window", false)? {
                all(window)
            } else {
                all(None)
            }
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
    let vocab = if gemma_defaults {
        f.positive_or("vocab_size", 262_208)?
    } else {
        f.positive("vocab_size")?
    };
    let hidden = if gemma_defaults {
        f.positive_or("hidden_size", 2304)?
    } else {
        f.positive("hidden_size")?
    };
    let layers = f.layers_or("num_hidden_layers", gemma_defaults.then_some(26))?;
    let heads = if gemma_defaults {
        f.positive_or("num_attention_heads", 8)?
    } else {
        f.positive("num_attention_heads")?
    };
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
    b.push(
        "model.embed_tokens.weight",
        &[vocab, hidden],
        1,
        Role::Embedding,
    );
    let attn = "model.layers.*.self_attn";
    b.linear(
        &format!("{attn}.q_proj"),
        hidden,
        heads * head_dim,
        layers,
        qkv_bias,
    );
    b.linear(
        &format!("{attn}.k_proj"),
        hidden,
        kv_heads * head_dim,
        layers,
        qkv_bias,
    );
    b.linear(
        &format!("{attn}.v_proj"),
        hidden,
        kv_heads * head_dim,
        layers,
        qkv_bias,
    );
    b.linear(
        &format!("{attn}.o_proj"),
        heads * head_dim,
        hidden,
        layers,
        o_bias,
    );
    if qk_norm {
        b.norm(&format!("{attn}.q_norm"), head_dim, layers, false);
        b.norm(&format!("{attn}.k_norm"), head_dim, layers, false);
    }
    b.norm("model.layers.*.input_layernorm", hidden, layers, false);
    b.norm(
        "model.layers.*.post_attention_layernorm",
        hidden,
        layers,
        false,
    );
    if extra_norms {
        b.norm(
            "model.layers.*.pre_feedforward_layernorm",
            hidden,
            layers,
            false,
        );
        b.norm(
            "model.layers.*.post_feedforward_layernorm",
            hidden,
            layers,
            false,
        );
    }

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
    if !tied {
        b.push("lm_head.weight", &[vocab, hidden], 1, Role::LmHead);
    }
    let windows = layer_windows(family, f, layers)?;
    Ok(Architecture {
        family,
        model_type: family.model_type().to_string(),
        dims: Dims {
            hidden_size: hidden,
            num_layers: layers,
            num_heads: heads,
            num_kv_heads: kv_heads,
            head_dim,
            vocab_size: vocab,
            intermediate_size: intermediate,
            gated_mlp: true,
        },
        moe,
        groups: b.groups,
        kv: kv_from_windows(windows, kv_heads, head_dim),
        tied_embeddings: tied,
        config_dtype: None,
        quantization: None,
        notes: Vec::new(),
    })
}

/// `gate_proj`, `up_proj`, `down_proj` (SwiGLU/GeGLU MLP).
fn gated_mlp(b: &mut Builder, prefix: &str, hidden: u64, inter: u64, count: u64, bias: bool) {
    b.linear(&format!("{prefix}.gate_proj"), hidden, inter, count, bias);
    b.linear(&format!("{prefix}.up_proj"), hidden, inter, count, bias);
    b.linear(&format!("{prefix}.down_proj"), inter, hidden, count, bias);
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
    b.push(
        "model.embed_tokens.weight",
        &[vocab, hidden],
        1,
        Role::Embedding,
    );
    b.linear(
        "model.layers.*.self_attn.qkv_proj",
        hidden,
        (heads + 2 * kv_heads) * head_dim,
        layers,
        false,
    );
    b.linear(
        "model.layers.*.self_attn.o_proj",
        heads * head_dim,
        hidden,
        layers,
        false,
    );
    b.linear(
        "model.layers.*.mlp.gate_up_proj",
        hidden,
        2 * inter,
        layers,
        false,
    );
    b.linear("model.layers.*.mlp.down_proj", inter, hidden, layers, false);
    b.norm("model.layers.*.input_layernorm", hidden, layers, false);
    b.norm(
        "model.layers.*.post_attention_layernorm",
        hidden,
        layers,
        false,
    );
    b.norm("model.norm", hidden, 1, false);
    if !tied {
        b.push("lm_head.weight", &[vocab, hidden], 1, Role::LmHead);
    }
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
        notes: Vec::new(),
    }
}

/// modeling_gpt2.py: Conv1D layers stored as `[in, out]`, learned positions, tied head.
fn gpt2(f: &Fields) -> Result<Architecture, ModelError> {
    let vocab = f.positive_or("vocab_size", 50257)?;
    let hidden = f.positive_or("n_embd", 768)?;
    let layers = f.layers_or("n_layer", Some(12))?;
    let heads = f.positive_or("n_head", 12)?;
    let head_dim = head_dim_of(f, ("n_head", heads), ("n_embd", hidden))?;
    let positions = f.positive_or("n_positions", 1024)?;
    let inner = f
        .opt_size("n_inner")?
        .filter(|n| *n > 0)
        .unwrap_or(4 * hidden);
    let mut b = Builder::default();
    b.push(
        "transformer.wte.weight",
        &[vocab, hidden],
        1,
        Role::Embedding,
    );
    b.push(
        "transformer.wpe.weight",
        &[positions, hidden],
        1,
        Role::Embedding,
    );
    b.norm("transformer.h.*.ln_1", hidden, layers, true);
    b.linear(
        "transformer.h.*.attn.c_attn",
        hidden,
        3 * hidden,
        layers,
        true,
    );
    b.linear("transformer.h.*.attn.c_proj", hidden, hidden, layers, true);
    b.norm("transformer.h.*.ln_2", hidden, layers, true);
    b.linear("transformer.h.*.mlp.c_fc", hidden, inner, layers, true);
    b.linear("transformer.h.*.mlp.c_proj", inner, hidden, layers, true);
    b.norm("transformer.ln_f", hidden, 1, true);
    let tied = f.bool_or("tie_word_embeddings", true)?;
    if !tied {
        b.push("lm_head.weight", &[vocab, hidden], 1, Role::LmHead);
    }
    Ok(simple(
        Family::Gpt2,
        b,
        vec![None; layers as usize],
        Dims {
            hidden_size: hidden,
            num_layers: layers,
            num_heads: heads,
            num_kv_heads: heads,
            head_dim,
            vocab_size: vocab,
            intermediate_size: inner,
            gated_mlp: false,
        },
        tied,
    ))
}

/// modeling_gpt_neox.py (Pythia, GPT-NeoX-20B): fused QKV, separate `embed_out`.
fn gpt_neox(f: &Fields) -> Result<Architecture, ModelError> {
    let vocab = f.positive("vocab_size")?;
    let hidden = f.positive("hidden_size")?;
    let layers = f.layers_or("num_hidden_layers", None)?;
    let heads = f.positive("num_attention_heads")?;
    let head_dim = head_dim_of(f, ("num_attention_heads", heads), ("hidden_size", hidden))?;
    let inter = f.positive("intermediate_size")?;
    let bias = f.bool_or("attention_bias", true)?;
    let tied = f.bool_or("tie_word_embeddings", false)?;
    let mut b = Builder::default();
    b.push(
        "gpt_neox.embed_in.weight",
        &[vocab, hidden],
        1,
        Role::Embedding,
    );
    b.norm("gpt_neox.layers.*.input_layernorm", hidden, layers, true);
    b.norm(
        "gpt_neox.layers.*.post_attention_layernorm",
        hidden,
        layers,
        true,
    );
    b.linear(
        "gpt_neox.layers.*.attention.query_key_value",
        hidden,
        3 * hidden,
        layers,
        bias,
    );
    b.linear(
        "gpt_neox.layers.*.attention.dense",
        hidden,
        hidden,
        layers,
        bias,
    );
    b.linear(
        "gpt_neox.layers.*.mlp.dense_h_to_4h",
        hidden,
        inter,
        layers,
        true,
    );
    b.linear(
        "gpt_neox.layers.*.mlp.dense_4h_to_h",
        inter,
        hidden,
        layers,
        true,
    );
    b.norm("gpt_neox.final_layer_norm", hidden, 1, true);
    if !tied {
        b.push("embed_out.weight", &[vocab, hidden], 1, Role::LmHead);
    }
    Ok(simple(
        Family::GptNeox,
        b,
        vec![None; layers as usize],
        Dims {
            hidden_size: hidden,
            num_layers: layers,
            num_heads: heads,
            num_kv_heads: heads,
            head_dim,
            vocab_size: vocab,
            intermediate_size: inter,
            gated_mlp: false,
        },
        tied,
    ))
}

/// modeling_falcon.py: multi-query (7B), grouped KV with `new_decoder_architecture` (40B, 180B).
fn falcon(f: &Fields) -> Result<Architecture, ModelError> {
    let vocab = f.positive_or("vocab_size", 65024)?;
    let hidden = f.positive_or("hidden_size", 4544)?;
    let layers = f.layers_or("num_hidden_layers", Some(f.layers_or("n_layer", Some(32))?))?;
    let heads = f.positive_or("num_attention_heads", f.positive_or("n_head", 71)?)?;
    let head_dim = head_dim_of(f, ("num_attention_heads", heads), ("hidden_size", hidden))?;
    let new_arch = f.bool_or("new_decoder_architecture", false)?;
    let multi_query = f.bool_or("multi_query", true)?;
    let parallel = f.bool_or("parallel_attn", true)?;
    let bias = f.bool_or("bias", false)?;
    let ffn = f
        .opt_size("ffn_hidden_size")?
        .filter(|n| *n > 0)
        .unwrap_or(4 * hidden);
    let kv_heads = if new_arch {
        let kv_heads = f.positive_or("num_kv_heads", heads)?;
        check_kv_groups(f, "num_kv_heads", kv_heads, heads)?;
        kv_heads
    } else if multi_query {
        1
    } else {
        heads
    };
    let qkv_out = if new_arch {
        (heads + 2 * kv_heads) * head_dim
    } else if multi_query {
        hidden + 2 * head_dim
    } else {
        3 * hidden
    };
    let mut b = Builder::default();
    b.push(
        "transformer.word_embeddings.weight",
        &[vocab, hidden],
        1,
        Role::Embedding,
    );
    if new_arch && f.u64_or("num_ln_in_parallel_attn", 2)? == 2 {
        b.norm("transformer.h.*.ln_attn", hidden, layers, true);
        b.norm("transformer.h.*.ln_mlp", hidden, layers, true);
    } else {
        b.norm("transformer.h.*.input_layernorm", hidden, layers, true);
        if !parallel {
            b.norm(
                "transformer.h.*.post_attention_layernorm",
                hidden,
                layers,
                true,
            );
        }
    }
    b.linear(
        "transformer.h.*.self_attention.query_key_value",
        hidden,
        qkv_out,
        layers,
        bias,
    );
    b.linear(
        "transformer.h.*.self_attention.dense",
        hidden,
        hidden,
        layers,
        bias,
    );
    b.linear(
        "transformer.h.*.mlp.dense_h_to_4h",
        hidden,
        ffn,
        layers,
        bias,
    );
    b.linear(
        "transformer.h.*.mlp.dense_4h_to_h",
        ffn,
        hidden,
        layers,
        bias,
    );
    b.norm("transformer.ln_f", hidden, 1, true);
    let tied = f.bool_or("tie_word_embeddings", true)?;
    if !tied {
        b.push("lm_head.weight", &[vocab, hidden], 1, Role::LmHead);
    }
    let mut arch = simple(
        Family::Falcon,
        b,
        vec![None; layers as usize],
        Dims {
            hidden_size: hidden,
            num_layers: layers,
            num_heads: heads,
            num_kv_heads: kv_heads,
            head_dim,
            vocab_size: vocab,
            intermediate_size: ffn,
            gated_mlp: false,
        },
        tied,
    );
    if new_arch && kv_heads < heads {
        // modeling_falcon.py `_split_heads`: with the new decoder architecture, K and V are
        // broadcast to every query head (and flattened) before the cache update, so the cache
        // holds `num_attention_heads` heads although the model computes `num_kv_heads`.
        arch.kv = kv_from_windows(vec![None; layers as usize], heads, head_dim);
        arch.kv.description = format!(
            "{layers} layers × {heads} heads × {head_dim} head_dim (transformers broadcasts the {kv_heads} KV heads to the {heads} query heads before caching)"
        );
    }
    Ok(arch)
}

/// modeling_deepseek_v3.py: multi-head latent attention (MLA) and DeepSeekMoE with shared experts.
fn deepseek_v3(f: &Fields, notes: &mut Vec<String>) -> Result<Architecture, ModelError> {
    let vocab = f.positive_or("vocab_size", 129280)?;
    let hidden = f.positive_or("hidden_size", 7168)?;
    let layers = f.layers_or("num_hidden_layers", Some(61))?;
    let heads = f.positive_or("num_attention_heads", 128)?;
    let q_lora = f.u64_or("q_lora_rank", 1536)?;
    let kv_lora = f.positive_or("kv_lora_rank", 512)?;
    let nope = f.positive_or("qk_nope_head_dim", 128)?;
    let rope = f.positive_or("qk_rope_head_dim", 64)?;
    let v_dim = f.positive_or("v_head_dim", 128)?;
    let inter = f.positive_or("intermediate_size", 18432)?;
    let moe_inter = f.positive_or("moe_intermediate_size", 2048)?;
    let experts = f.u64_or("n_routed_experts", 256)?;
    let shared = f.u64_or("n_shared_experts", 1)?;
    let active = f.positive_or("num_experts_per_tok", 8)?;
    let first_dense = f.u64_or("first_k_dense_replace", 3)?;
    let freq = f.positive_or("moe_layer_freq", 1)?;
    let attn_bias = f.bool_or("attention_bias", false)?;
    let tied = f.bool_or("tie_word_embeddings", false)?;
    let qk_dim = nope + rope;

    let mut b = Builder::default();
    b.push(
        "model.embed_tokens.weight",
        &[vocab, hidden],
        1,
        Role::Embedding,
    );
    let attn = "model.layers.*.self_attn";
    if q_lora > 0 {
        b.linear(
            &format!("{attn}.q_a_proj"),
            hidden,
            q_lora,
            layers,
            attn_bias,
        );
        b.norm(&format!("{attn}.q_a_layernorm"), q_lora, layers, false);
        b.linear(
            &format!("{attn}.q_b_proj"),
            q_lora,
            heads * qk_dim,
            layers,
            false,
        );
    } else {
        b.linear(
            &format!("{attn}.q_proj"),
            hidden,
            heads * qk_dim,
            layers,
            false,
        );
    }
    b.linear(
        &format!("{attn}.kv_a_proj_with_mqa"),
        hidden,
        kv_lora + rope,
        layers,
        attn_bias,
    );
    b.norm(&format!("{attn}.kv_a_layernorm"), kv_lora, layers, false);
    b.linear(
        &format!("{attn}.kv_b_proj"),
        kv_lora,
        heads * (nope + v_dim),
        layers,
        false,
    );
    b.linear(
        &format!("{attn}.o_proj"),
        heads * v_dim,
        hidden,
        layers,
        attn_bias,
    );
    b.norm("model.layers.*.input_layernorm", hidden, layers, false);
    b.norm(
        "model.layers.*.post_attention_layernorm",
        hidden,
        layers,
        false,
    );
    let moe_layers = (0..layers)
        .filter(|i| experts > 0 && *i >= first_dense && i % freq == 0)
        .count() as u64;
    gated_mlp(
        &mut b,
        "model.layers.*.mlp",
        hidden,
        inter,
        layers - moe_layers,
        false,
    );
    let mlp = "model.layers.*.mlp";
    b.moe(mlp, experts, hidden, moe_inter, moe_layers);
    if shared > 0 {
        gated_mlp(
            &mut b,
            &format!("{mlp}.shared_experts"),
            hidden,
            moe_inter * shared,
            moe_layers,
            false,
        );
    }
    b.norm("model.norm", hidden, 1, false);
    if !tied {
        b.push("lm_head.weight", &[vocab, hidden], 1, Role::LmHead);
    }
    if moe_layers > 0 && experts > 0 {
        notes.push(format!(
            "each MoE router also holds an e_score_correction_bias of {experts} values, a buffer in transformers (not counted as parameters; DeepSeek's own code counts it, giving {} more)",
            crate::units::group_thousands((experts * moe_layers) as u128)
        ));
    }
    if let Some(n) = f.opt_u64("num_nextn_predict_layers")?.filter(|n| *n > 0) {
        notes.push(format!(
            "the checkpoint also stores {n} multi-token-prediction layer(s) that transformers does not load; they are not counted"
        ));
    }
    // modeling_deepseek_v3.py (transformers 5.x, checked with 5.24): the cache is updated while
    // the latent is still compressed — `kv_nope` (kv_lora_rank) in the key slot and `k_rot`
    // (qk_rope_head_dim) in the value slot — so it holds kv_lora_rank + rope values per token
    // and layer, as vLLM and SGLang do. The decompressed K and V are shown apart.
    let kv = KvLayout {
        layers: (0..layers)
            .map(|_| KvLayer {
                key_width: kv_lora,
                value_width: rope,
                window: None,
            })
            .collect(),
        latent: Some(LatentLayout {
            width: heads * (qk_dim + v_dim),
            kv_lora_rank: kv_lora,
            rope_dim: rope,
        }),
        description: format!(
            "{layers} layers × {} values (latent {kv_lora} + rope {rope}: K and V compressed, as transformers 5 caches them)",
            kv_lora + rope
        ),
    };
    Ok(Architecture {
        family: Family::DeepseekV3,
        model_type: "deepseek_v3".into(),
        dims: Dims {
            hidden_size: hidden,
            num_layers: layers,
            num_heads: heads,
            num_kv_heads: heads,
            head_dim: qk_dim,
            vocab_size: vocab,
            intermediate_size: inter,
            gated_mlp: true,
        },
        moe: Some(Moe {
            experts,
            active,
            moe_layers,
            expert_intermediate: moe_inter,
            shared_intermediate: moe_inter * shared,
        }),
        groups: b.groups,
        kv,
        tied_embeddings: tied,
        config_dtype: None,
        quantization: None,
        notes: Vec::new(),
    })
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
    let l = format!("{p}.encoder.layers.*");
    b.norm(&format!("{l}.layer_norm1"), hidden, layers, true);
    for proj in ["q_proj", "k_proj", "v_proj", "out_proj"] {
        b.linear(
            &format!("{l}.self_attn.{proj}"),
            hidden,
            hidden,
            layers,
            true,
        );
    }
    b.norm(&format!("{l}.layer_norm2"), hidden, layers, true);
    b.linear(&format!("{l}.mlp.fc1"), hidden, inter, layers, true);
    b.linear(&format!("{l}.mlp.fc2"), inter, hidden, layers, true);
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
