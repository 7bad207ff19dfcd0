//! `estimate vision`: the terms of a ViT-like image encoder that its config determines.
//!
//! Covered: ViT and DeiT (with their classification head, as the vision workload builds them),
//! and the vision towers of CLIP and SigLIP (their `vision_config`, or a `*_vision_model` config).
//! Their parameters, the patches `(H/p)·(W/p)` plus the CLS (and DeiT's distillation) token, the
//! attention's saved bytes per kernel and the activations per image follow from the config; Swin
//! (windowed attention over merging stages) and ConvNeXt (convolutions) are refused with the
//! command that predicts them instead. The activations count the tensors transformers' layers
//! keep (checked against `predict` in `tests/integration/agreement.rs`): assumed, not calculated.

use serde::Serialize;

use super::states::TrainingRequest;
use super::training::{self, TrainingSummary};
use super::{EstimateError, Kind, Term, TermId, g, product, sum};
use crate::dtype::Dtype;
pub use crate::model::AttentionKernel;
use crate::model::Config;

use crate::units::{Bytes, Overflow};

/// The image-model families whose parameters and sequence a config determines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, strum::Display)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Family {
    /// `ViTForImageClassification`: CLS token, no pooler, a linear head.
    Vit,
    /// `DeiTForImageClassification`: CLS and distillation tokens, a linear head.
    Deit,
    /// `CLIPVisionModel`: CLS token, a norm before the encoder, the pooled token's norm after.
    Clip,
    /// `SiglipVisionModel`: no CLS token, a final norm and an attention-pooling head.
    Siglip,
}

/// What the estimate reads from a vision config.
#[derive(Clone, Debug, Serialize)]
pub struct VisionModel {
    pub model_type: String,
    pub family: Family,
    pub hidden: u64,
    pub intermediate: u64,
    pub layers: u64,
    pub heads: u64,
    pub patch: u64,
    pub channels: u64,
    /// The side(s) the position embeddings were made for (`image_size`).
    pub trained: (u64, u64),
    /// Outputs of the classification head (ViT, DeiT): `id2label`'s size, `num_labels`, else 2.
    pub labels: Option<u64>,
    pub qkv_bias: bool,
    /// SigLIP's attention-pooling head (`vision_use_head`, default true).
    pub pooling_head: bool,
    pub hidden_act: String,
    pub attention: AttentionKernel,
    pub attention_source: String,
    /// Dropout probabilities above 0 keep masks; transformers' defaults are 0.
    pub dropout: bool,
}

fn families() -> &'static str {
    "vit, deit, clip (its vision_config or clip_vision_model), siglip (its vision_config or siglip_vision_model)"
}

impl VisionModel {
    /// Reads a vision config (a tower's `vision_config` when the model has one), or refuses a
    /// family this estimate does not cover, naming the ones it does and the command that predicts
    /// the others.
    pub fn read(config: &Config) -> Result<VisionModel, EstimateError> {
        let top = config.fields();
        let model_type = top.opt_str("model_type")?.unwrap_or("").to_string();
        let tower = top.section("vision_config")?;
        let f = tower.clone().unwrap_or_else(|| top.clone());
        let family = match (model_type.as_str(), tower.is_some()) {
            ("vit", false) => Family::Vit,
            ("deit", false) => Family::Deit,
            ("clip", true) | ("clip_vision_model", false) => Family::Clip,
            ("siglip", true) | ("siglip_vision_model", false) => Family::Siglip,
            (other, true) if crate::model::VLM_FAMILIES.contains(&other) => {
                let folder = config
                    .path
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .unwrap_or(std::path::Path::new("."));
                return Err(EstimateError::Input(format!(
                    "`{other}` is a multimodal (image+text) model, not an image encoder, and estimate has no multimodal terms: run `iteragpu predict --workload vlm --model {}` for it (the folder with its config.json and preprocessor_config.json)",
                    folder.display()
                )));
            }
            (other, false)
                if ["image_size", "num_channels", "patch_size"]
                    .iter()
                    .all(|k| top.raw(k).is_none()) =>
            {
                return Err(EstimateError::Input(format!(
                    "`{other}` is a language model (its config has no image_size, patch_size, num_channels or vision_config), not an image encoder: estimate it with `iteragpu estimate --model {}` (not `estimate vision`)",
                    config.path.display()
                )));
            }
            (other, _) => {
                return Err(EstimateError::Input(format!(
                    "estimate vision covers ViT-like encoders: {}; `{other}` is not one of them (Swin's windows and ConvNeXt's convolutions are not modelled): run `iteragpu predict --workload vision --model {}` for it",
                    families(),
                    config.path.display()
                )));
            }
        };
        let labels = match family {
            Family::Vit | Family::Deit => Some(match top.raw("id2label") {
                Some(serde_json::Value::Object(m)) if !m.is_empty() => m.len() as u64,
                _ => top.positive_or("num_labels", 2)?,
            }),
            _ => None,
        };
        let side = |v: &serde_json::Value| v.as_u64().filter(|n| *n > 0);
        let trained = match f.raw("image_size") {
            None => (224, 224),
            Some(v) => match (side(v), v.as_array()) {
                (Some(n), _) => (n, n),
                (None, Some(a)) if a.len() == 2 && a.iter().all(|x| side(x).is_some()) => {
                    (side(&a[0]).unwrap_or(1), side(&a[1]).unwrap_or(1))
                }
                _ => {
                    return Err(EstimateError::Model(f.invalid(
                        "image_size",
                        &format!("must be a side or [height, width], found {v}"),
                    )));
                }
            },
        };
        let defaults = match family {
            Family::Clip => (32, "quick_gelu"),
            Family::Siglip => (16, "gelu_pytorch_tanh"),
            _ => (16, "gelu"),
        };
        // The tower's own choice, else the top level's (which applies to the tower too).
        let (attention, attention_source) = match &tower {
            Some(t) => AttentionKernel::of_sections(&[t.clone(), top.clone()])?,
            None => AttentionKernel::of_config(&top)?,
        };
        let probability = |key: &str| f.raw(key).and_then(|v| v.as_f64()).unwrap_or(0.0);
        let dropout = [
            "hidden_dropout_prob",
            "attention_probs_dropout_prob",
            "attention_dropout",
            "dropout",
        ]
        .iter()
        .any(|k| probability(k) > 0.0);
        Ok(VisionModel {
            family,
            hidden: f.positive_or("hidden_size", 768)?,
            intermediate: f.positive_or("intermediate_size", 3072)?,
            layers: f.layers_or("num_hidden_layers", Some(12))?,
            heads: f.positive_or("num_attention_heads", 12)?,
            patch: f.positive_or("patch_size", defaults.0)?,
            channels: f.positive_or("num_channels", 3)?,
            trained,
            labels,
            qkv_bias: f.bool_or("qkv_bias", true)?,
            pooling_head: f.bool_or("vision_use_head", true)?,
            hidden_act: f.opt_str("hidden_act")?.unwrap_or(defaults.1).to_string(),
            attention,
            attention_source,
            dropout,
            model_type,
        })
    }

    /// Tokens besides the patches: CLS (ViT, CLIP), CLS and distillation (DeiT), none (SigLIP).
    pub fn extra_tokens(&self) -> u64 {
        match self.family {
            Family::Vit | Family::Clip => 1,
            Family::Deit => 2,
            Family::Siglip => 0,
        }
    }

    /// The patch grid of an image: the patch embedding is a convolution of stride p, so a side
    /// that is not a multiple of p drops its last pixels (floor).
    pub fn grid(&self, height: u64, width: u64) -> Result<(u64, u64), EstimateError> {
        if height < self.patch || width < self.patch {
            return Err(EstimateError::Input(format!(
                "--resolution {height}x{width} is smaller than one {p}×{p} patch of this {}: give at least {p} pixels a side (the config's image_size is {}x{})",
                self.model_type,
                self.trained.0,
                self.trained.1,
                p = self.patch
            )));
        }
        Ok((height / self.patch, width / self.patch))
    }

    /// The parameters, and where they are: the config's own image size sizes the position
    /// embeddings (another resolution interpolates them at run time and keeps their size).
    pub fn parameters(&self) -> (u128, String) {
        let (h, i, l, c, p) = (
            self.hidden as u128,
            self.intermediate as u128,
            self.layers as u128,
            self.channels as u128,
            self.patch as u128,
        );
        let positions = (self.trained.0 / self.patch) as u128
            * (self.trained.1 / self.patch) as u128
            + self.extra_tokens() as u128;
        let norm = 2 * h;
        let linear = |inp: u128, out: u128, bias: bool| inp * out + if bias { out } else { 0 };
        let qkv_bias = self.qkv_bias || matches!(self.family, Family::Clip | Family::Siglip);
        let layer = 2 * norm
            + 3 * linear(h, h, qkv_bias)
            + linear(h, h, true)
            + linear(h, i, true)
            + linear(i, h, true);
        let conv_bias = self.family != Family::Clip;
        let embeddings =
            linear(c * p * p, h, conv_bias) + positions * h + self.extra_tokens() as u128 * h;
        let (head, head_text) = match (self.family, self.labels, self.pooling_head) {
            (Family::Vit | Family::Deit, Some(n), _) => (
                norm + linear(h, n as u128, true),
                format!("final norm + classifier h×{n}"),
            ),
            (Family::Clip, _, _) => (2 * norm, "pre- and post-norms".into()),
            (Family::Siglip, _, true) => (
                norm + h
                    + 3 * h * h
                    + 3 * h
                    + linear(h, h, true)
                    + norm
                    + linear(h, i, true)
                    + linear(i, h, true),
                "post-norm + attention-pooling head (probe, attention, norm, MLP)".into(),
            ),
            _ => (norm, "final norm".into()),
        };
        let total = embeddings + l * layer + head;
        (
            total,
            format!(
                "embeddings {} (patch conv {c}·{p}²·h, {positions} positions × h{}) + {l} layers × {} (norms, q/k/v/out, MLP h={}, I={}) + {} ({head_text})",
                g(embeddings),
                match self.extra_tokens() {
                    0 => "",
                    1 => ", CLS",
                    _ => ", CLS and distillation tokens",
                },
                g(layer),
                g(h),
                g(i),
                g(head),
            ),
        )
    }
}

/// `estimate vision`, validated.
#[derive(Clone, Debug)]
pub struct VisionRequest {
    pub path: String,
    pub model: VisionModel,
    pub height: u64,
    pub width: u64,
    pub resolution_source: String,
    pub images: u64,
    /// Inference's dtype (the workload's `--dtype`, float32 by default).
    pub dtype: Dtype,
    pub training: Option<TrainingRequest>,
}

/// What the table and the JSON say about the images beside the terms.
#[derive(Clone, Debug, Serialize)]
pub struct VisionSummary {
    pub model_type: String,
    pub family: Family,
    pub parameters: u64,
    pub resolution: [u64; 2],
    pub resolution_source: String,
    pub patch_size: u64,
    pub grid: [u64; 2],
    pub patches: u64,
    /// Patches plus CLS (and distillation) tokens: the sequence each layer attends over.
    pub sequence: u64,
    pub images: u64,
    pub attention: AttentionKernel,
    pub attention_source: String,
    /// The activation term divided by the images.
    pub activation_bytes_per_image: u64,
}

/// The terms, the training summary (with `--train`) and the images' summary.
pub struct VisionTerms {
    pub terms: Vec<Term>,
    pub training: Option<TrainingSummary>,
    pub summary: VisionSummary,
}

pub fn terms(
    req: &VisionRequest,
    notes: &mut Vec<String>,
    left_out: &mut Vec<String>,
) -> Result<VisionTerms, EstimateError> {
    let m = &req.model;
    let (gh, gw) = m.grid(req.height, req.width)?;
    let patches = gh * gw;
    let s = patches + m.extra_tokens();
    let (parameters, breakdown) = m.parameters();
    let overflow = || EstimateError::overflow("the vision terms", "--resolution and --images");
    if !req.height.is_multiple_of(m.patch) || !req.width.is_multiple_of(m.patch) {
        notes.push(format!(
            "--resolution {}x{} is not a multiple of the {p}-pixel patch: the patch convolution drops the last {} × {} pixels",
            req.height,
            req.width,
            req.height % m.patch,
            req.width % m.patch,
            p = m.patch
        ));
    }
    if (req.height, req.width) != m.trained {
        notes.push(format!(
            "{}x{} is not the config's image_size {}x{}: the workload passes interpolate_pos_encoding=True; the interpolated position embeddings are one (s × h) tensor, not counted",
            req.height, req.width, m.trained.0, m.trained.1
        ));
    }
    let mut out = Vec::new();
    let summary_training;
    let e: u128;
    let residual: u128;
    if let Some(training) = &req.training {
        let (states, summary) = training::full_training_states(parameters, training, notes)?;
        out.extend(states);
        summary_training = Some(summary);
        e = training.precision.activation_bytes() as u128;
        // Under autocast the residual stream stays float32 (the embeddings are fp32 parameters).
        residual = if training.precision.mixed() { 4 } else { e };
    } else {
        e = req.dtype.bytes() as u128;
        residual = e;
        summary_training = None;
        out.push(
            Term::new(
                TermId::Weights {
                    dtype: Some(req.dtype.torch_name().into()),
                    shard: None,
                },
                Bytes::from_u128(parameters * e).map_err(overflow())?,
                Kind::Calculated,
                format!("{} parameters × {e} bytes: {breakdown}", g(parameters)),
            )
            .input("parameters", parameters as u64),
        );
    }
    let b = req.images as u128;
    // The images are made in the model's dtype: float32 under autocast.
    let pixels = product(&[
        b,
        m.channels as u128,
        req.height as u128,
        req.width as u128,
        residual,
    ])
    .and_then(Bytes::from_u128)
    .map_err(overflow())?;
    out.push(Term::new(
        TermId::ImageInputs,
        pixels,
        Kind::Calculated,
        format!(
            "images × channels × H × W × {residual} bytes = {} × {} × {} × {}",
            g(b),
            m.channels,
            g(req.height),
            g(req.width)
        ),
    ));
    let (activations, attention) = match &req.training {
        Some(t) => training_activations(m, t, s as u128, e, residual).map_err(overflow())?,
        None => inference_transient(m, s as u128, e).map_err(overflow())?,
    };
    let per_image = activations.0 + attention.0;
    let scale = |v: u128| {
        product(&[v, b])
            .and_then(Bytes::from_u128)
            .map_err(overflow())
    };
    let sequence = format!(
        "s = ({}/{p})·({}/{p}){} = {}",
        req.height,
        req.width,
        match m.extra_tokens() {
            0 => String::new(),
            1 => " + CLS".into(),
            _ => " + CLS + distillation".into(),
        },
        g(s),
        p = m.patch
    );
    let activation_id = if req.training.is_some() {
        TermId::Activations
    } else {
        TermId::ForwardTransient
    };
    out.push(
        Term::new(
            activation_id,
            scale(activations.0)?,
            Kind::Assumed,
            format!(
                "{} bytes per image × {} images: {}; {sequence}",
                g(activations.0),
                g(b),
                activations.1
            ),
        )
        .input("images", req.images)
        .input("sequence", s)
        .input(
            "bytes_per_image",
            u64::try_from(activations.0).unwrap_or(u64::MAX),
        ),
    );
    out.push(
        Term::new(
            TermId::AttentionScores {
                kernel: m.attention,
            },
            scale(attention.0)?,
            if m.attention.materializes_scores() {
                Kind::Calculated
            } else {
                Kind::Assumed
            },
            format!(
                "{} bytes per image × {} images: {} (attention {}, {})",
                g(attention.0),
                g(b),
                attention.1,
                m.attention,
                m.attention_source
            ),
        )
        .input("heads", m.heads)
        .input("sequence", s),
    );
    if m.dropout {
        notes.push("the config's dropout probabilities are above 0: training also keeps dropout masks, not counted (transformers' defaults for these families are 0)".into());
    }
    if !matches!(
        m.hidden_act.as_str(),
        "gelu" | "gelu_pytorch_tanh" | "relu" | "silu" | "quick_gelu"
    ) {
        notes.push(format!(
            "hidden_act `{}` is counted as one operation (as gelu); a composite activation keeps more",
            m.hidden_act
        ));
    }
    left_out.push("the classifier's logits and the loss (a few values per image)".into());
    let activation_bytes_per_image = u64::try_from(per_image).map_err(|_| overflow()(Overflow))?;
    Ok(VisionTerms {
        terms: out,
        training: summary_training,
        summary: VisionSummary {
            model_type: m.model_type.clone(),
            family: m.family,
            parameters: u64::try_from(parameters).map_err(|_| overflow()(Overflow))?,
            resolution: [req.height, req.width],
            resolution_source: req.resolution_source.clone(),
            patch_size: m.patch,
            grid: [gh, gw],
            patches,
            sequence: s,
            images: req.images,
            attention: m.attention,
            attention_source: m.attention_source.clone(),
            activation_bytes_per_image,
        },
    })
}

/// Bytes per image and the formula that gives them.
type Figure = (u128, String);

/// The per-row statistics a fused SDPA kernel keeps (fp32 log-sum-exp): the memory-efficient
/// kernel pads the rows to 32 (fp32 activations), flash does not (16-bit), as predict's
/// `sdpa.choose` picks them on an sm80+ card.
fn lse_per_image(m: &VisionModel, s: u128, e: u128) -> u128 {
    let rows = if e == 4 { s.div_ceil(32) * 32 } else { s };
    m.heads as u128 * rows * 4
}

/// Training: per image, each layer keeps its first norm's input and output, q, k, v, the
/// attention's output (the out-projection's input), the second norm's input and output, and the
/// MLP's two intermediates (fc1's output, the activation's output; quick_gelu's sigmoid too);
/// the norms' mean and rstd; outside the layers the final norm's input and output (ViT, DeiT,
/// SigLIP) or the last hidden state (CLIP). Attention: eager keeps the fp32 softmax (and its
/// 16-bit cast), SDPA's fused kernels the log-sum-exp per row.
fn training_activations(
    m: &VisionModel,
    t: &TrainingRequest,
    s: u128,
    e: u128,
    residual: u128,
) -> Result<(Figure, Figure), Overflow> {
    let (h, i, l) = (m.hidden as u128, m.intermediate as u128, m.layers as u128);
    let mlp_kept: u128 = if m.hidden_act == "quick_gelu" { 3 } else { 2 };
    let per_layer = sum([
        product(&[2, s, h, residual])?,
        product(&[6, s, h, e])?,
        product(&[mlp_kept, s, i, e])?,
        product(&[2, 2, s, 4])?,
    ])?;
    let outside = match (m.family, m.pooling_head) {
        (Family::Clip, _) => product(&[s, h, e])?,
        (Family::Siglip, true) => product(&[4, s, h, e])?,
        _ => product(&[2, s, h, e])?,
    };
    let scores = if m.attention.materializes_scores() {
        let cast = if e < 4 { e } else { 0 };
        product(&[l, m.heads as u128, s, s, 4 + cast])?
    } else {
        product(&[l, lse_per_image(m, s, e)])?
    };
    let attention_text = if m.attention.materializes_scores() {
        format!(
            "{l} layers × a·s² × ({}) bytes: the fp32 softmax kept for backward{}; a={}",
            4 + if e < 4 { e } else { 0 },
            if e < 4 { " and its 16-bit cast" } else { "" },
            m.heads
        )
    } else {
        format!(
            "{l} layers × a × {} rows × 4 bytes: the fused kernel's log-sum-exp, no s×s scores; a={}",
            if e == 4 { "⌈s/32⌉·32" } else { "s" },
            m.heads
        )
    };
    let mlp_text = if mlp_kept == 3 {
        "3·s·I (quick_gelu keeps its sigmoid)"
    } else {
        "2·s·I"
    };
    if t.gradient_checkpointing {
        let kept = sum([product(&[l, s, h, residual])?, per_layer])?;
        return Ok((
            (
                sum([kept, outside])?,
                format!(
                    "gradient checkpointing: {l} layer inputs s·h × {residual} bytes + one layer recomputed (2·s·h×{residual} + 6·s·h×{e} + {mlp_text}×{e} + norms' statistics) + outside the layers; h={}, I={}",
                    g(h),
                    g(i)
                ),
            ),
            (
                product(&[scores, 1])? / l.max(1),
                format!("{attention_text} (one layer recomputed at a time)"),
            ),
        ));
    }
    Ok((
        (
            sum([product(&[l, per_layer])?, outside])?,
            format!(
                "{l} layers × (2·s·h × {residual} bytes (norm inputs, residual stream) + 6·s·h × {e} (norm outputs, q, k, v, attention output) + {mlp_text} × {e} (MLP) + 4·s × 4 (norms' mean, rstd)) + {} (outside the layers); h={}, I={}",
                match (m.family, m.pooling_head) {
                    (Family::Clip, _) => "s·h, the last hidden state",
                    (Family::Siglip, true) => "4·s·h, final norm and pooling head",
                    _ => "2·s·h, the final norm",
                },
                g(h),
                g(i)
            ),
        ),
        (scores, attention_text),
    ))
}

/// Inference (no_grad): the largest set alive inside one layer, per image: the embeddings'
/// output and the layer's input (both referenced by the callers), and either the MLP (its
/// residual, its norm's output, fc1's and the activation's outputs) or the attention (the norm's
/// output, q, k, v, its output; eager: the scores and their softmax at once).
fn inference_transient(m: &VisionModel, s: u128, e: u128) -> Result<(Figure, Figure), Overflow> {
    let (h, i) = (m.hidden as u128, m.intermediate as u128);
    let mlp_live: u128 = if m.hidden_act == "quick_gelu" { 3 } else { 2 };
    let mlp = sum([product(&[4, s, h, e])?, product(&[mlp_live, s, i, e])?])?;
    let attention_rest = product(&[7, s, h, e])?;
    let scores = if m.attention.materializes_scores() {
        product(&[m.heads as u128, s, s, 4 + e])?
    } else {
        lse_per_image(m, s, e)
    };
    // The scores only count when the attention is the larger of the two: the term holds what the
    // attention adds above the MLP's peak.
    let attention_peak = sum([attention_rest, scores])?;
    let above = attention_peak.saturating_sub(mlp);
    Ok((
        (
            mlp,
            format!(
                "the MLP's peak: 4·s·h (embeddings' output, layer input, residual, norm output) + {}·s·I (fc1, activation) × {e} bytes; h={}, I={}",
                mlp_live,
                g(h),
                g(i)
            ),
        ),
        (
            above,
            format!(
                "what the attention's peak (7·s·h × {e} + {}) adds above the MLP's: {} bytes per image",
                if m.attention.materializes_scores() {
                    format!(
                        "a·s² × ({}) bytes: the scores and their fp32 softmax at once",
                        4 + e
                    )
                } else {
                    "a·s·4 bytes of log-sum-exp".into()
                },
                g(above)
            ),
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str) -> Result<VisionModel, EstimateError> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/models")
            .join(name);
        VisionModel::read(&Config::load(&path).unwrap())
    }

    /// The counts transformers 5.24 gives for the same configs (`sum(p.numel())` of the model the
    /// vision workload builds, on the meta device).
    #[test]
    fn parameters_are_transformers_own() {
        for (name, family, expected, sequence) in [
            ("vit-base-defaults", Family::Vit, 85_800_194, 197),
            ("deit-base-defaults", Family::Deit, 85_801_730, 198),
            ("clip-vit-b32-defaults", Family::Clip, 87_456_000, 50),
            ("siglip-base-defaults", Family::Siglip, 92_884_224, 196),
        ] {
            let m = model(name).unwrap();
            assert_eq!(m.family, family, "{name}");
            assert_eq!(m.parameters().0, expected, "{name}");
            let (gh, gw) = m.grid(224, 224).unwrap();
            assert_eq!(gh * gw + m.extra_tokens(), sequence, "{name}");
            assert_eq!(m.attention, AttentionKernel::Sdpa, "{name}");
        }
    }

    #[test]
    fn other_families_and_tiny_images_are_refused_with_the_fix() {
        let err = model("convnext-tiny-defaults").unwrap_err().to_string();
        assert!(err.contains("`convnext` is not one of them"), "{err}");
        assert!(err.contains("iteragpu predict --workload vision"), "{err}");
        // A language model is sent to its own workload, a multimodal one to predict's vlm.
        let err = model("llama-3-8b").unwrap_err().to_string();
        assert!(
            err.contains("`llama` is a language model")
                && err.contains("iteragpu estimate --model"),
            "{err}"
        );
        assert!(!err.contains("--workload vision --model"), "{err}");
        for (name, kind) in [
            ("llava-1.5-7b-hf", "llava"),
            ("qwen2-vl-2b-instruct", "qwen2_vl"),
            ("gemma-3-4b-it", "gemma3"),
            ("llama-3.2-11b-vision-defaults", "mllama"),
        ] {
            let err = model(name).unwrap_err().to_string();
            assert!(
                err.contains(&format!("`{kind}` is a multimodal (image+text) model")),
                "{err}"
            );
            assert!(
                err.contains("iteragpu predict --workload vlm --model ") && err.contains(name),
                "{err}"
            );
        }
        let err = model("vit-base-defaults")
            .unwrap()
            .grid(8, 224)
            .unwrap_err()
            .to_string();
        assert!(err.contains("at least 16 pixels"), "{err}");
        // A side that is not a multiple of the patch drops its last pixels, as the convolution.
        assert_eq!(
            model("vit-base-defaults").unwrap().grid(230, 224).unwrap(),
            (14, 14)
        );
    }

    /// Eager keeps a·s² fp32 softmax values per layer (and their 16-bit cast); SDPA does not.
    #[test]
    fn the_s_squared_term_follows_the_kernel() {
        let mut m = model("vit-base-defaults").unwrap();
        let t = TrainingRequest {
            optimizer: super::super::Optimizer::Adamw,
            precision: super::super::Precision::Fp32,
            precision_stated: false,
            lora: None,
            gradient_checkpointing: false,
            flash_attention: false,
            batch: None,
            context: None,
            sharding: None,
        };
        let sdpa = training_activations(&m, &t, 197, 4, 4).unwrap().1.0;
        assert_eq!(sdpa, 12 * 12 * 224 * 4);
        m.attention = AttentionKernel::Eager;
        let eager = training_activations(&m, &t, 197, 4, 4).unwrap().1.0;
        assert_eq!(eager, 12 * 12 * 197 * 197 * 4);
        let bf16 = training_activations(&m, &t, 197, 2, 4).unwrap().1.0;
        assert_eq!(bf16, 12 * 12 * 197 * 197 * 6);
    }
}
