//! Training terms: weights in their training precision, gradients, optimizer states, master
//! weights, and activations. Everything but activations follows from the tensors' shapes; the
//! activation term is a published model (Korthikanti et al. 2022) and is labelled *assumed*.

use super::sharding::{self, ShardingSummary};
pub use super::states::{Lora, Optimizer, Precision, PrecisionMeaning, TrainingRequest};
use super::states::{Strategy, Trainable, optimizer_bytes, trainable_bytes};
use super::weights::{self, WeightsSource};
use super::{EstimateError, Kind, Term, TermId, g, product, sum};
use crate::model::inventory::TensorGroup;
use crate::model::{Architecture, AttentionKernel, Role};
use crate::units::{Bytes, Overflow};
use serde::Serialize;

/// The terms of a training step, and the sharding summary when sharded.
pub struct TrainingTerms {
    pub terms: Vec<Term>,
    pub sharding: Option<ShardingSummary>,
    pub summary: TrainingSummary,
}

/// What the precision was and what it means for each kind of tensor (`Precision::meaning`, the
/// same as predict's and measure's), written in the table and the JSON so that an estimate and a
/// prediction of the same question can be set side by side.
#[derive(Clone, Debug, Serialize)]
pub struct TrainingSummary {
    pub precision: Precision,
    /// `--precision` was written; false: its default (fp32, as predict and measure).
    pub precision_stated: bool,
    pub optimizer: Optimizer,
    #[serde(flatten)]
    pub meaning: PrecisionMeaning,
}

impl TrainingSummary {
    fn new(source: &WeightsSource, req: &TrainingRequest) -> TrainingSummary {
        let mut meaning = req.precision.meaning(req.lora.is_some());
        if req.optimizer == Optimizer::Adamw8bit {
            // bitsandbytes' 8-bit blocks (their absmax in fp32).
            meaning.optimizer_states_dtype = "uint8";
        }
        if let (Some(_), WeightsSource::Model(m)) = (&req.lora, source) {
            // --dtype may say otherwise than the compute dtype.
            meaning.lora_base_dtype = Some(match m.architecture.quantization {
                // Stored packed (the weights terms say how), dequantized to compute.
                Some(_) => "quantized (its storage in the weights terms)",
                None => m.compute_dtype.torch_name(),
            });
        }
        TrainingSummary {
            precision: req.precision,
            precision_stated: req.precision_stated,
            optimizer: req.optimizer,
            meaning,
        }
    }
}

/// How full fine-tuning of quantized weights is refused, and what to do instead.
const QLORA_HINT: &str = "quantized weights cannot be trained directly (transformers refuses to fine-tune a purely quantized model); estimate LoRA adapters on the quantized base instead (QLoRA)";

/// Trainable tensors: the model's own (full fine-tuning) or the LoRA adapters'.
fn trainable(source: &WeightsSource, req: &TrainingRequest) -> Result<Trainable, EstimateError> {
    match (&req.lora, source) {
        (None, WeightsSource::Model(m)) => match &m.architecture.quantization {
            Some(q) => Err(EstimateError::Input(format!(
                "{} is quantized ({}): {QLORA_HINT}: add --lora-rank 16 --lora-targets q_proj,v_proj",
                m.path,
                q.label()
            ))),
            None => Ok(Trainable::Shapes(m.architecture.groups.clone())),
        },
        (None, WeightsSource::Numbers { parameters, bits }) => {
            match bits.as_integer() {
                Some(16 | 32) => Ok(Trainable::Count(*parameters as u128)),
                _ if bits.to_f64() < 16.0 => Err(EstimateError::Input(format!(
                    "--bits {bits} with --train describes a quantized checkpoint: {QLORA_HINT}: --model PATH (its config.json) --train --lora-rank 16 --lora-targets q_proj,v_proj"
                ))),
                _ => Err(EstimateError::Input(format!(
                    "--bits {bits} with --train: give the checkpoint's float width, 16 (bf16, fp16) or 32 (fp32); the widths during training follow --precision"
                ))),
            }
        }
        (Some(_), WeightsSource::Numbers { .. }) => Err(EstimateError::Input(
            "--lora-rank needs the model's real shapes: pass --model PATH (a config.json) instead of --parameters".into(),
        )),
        (Some(lora), WeightsSource::Model(m)) => {
            let arch = &m.architecture;
            check_lora_targets(&lora.targets, arch)?;
            let targets = lora_targets(&lora.targets, arch);
            let mut adapters = Vec::new();
            for target in &targets {
                let matched: Vec<&TensorGroup> = arch
                    .groups
                    .iter()
                    .filter(|grp| grp.linear_dims().is_some() && grp.module() == target)
                    .collect();
                if matched.is_empty() {
                    return Err(EstimateError::Input(format!(
                        "--lora-targets `{target}` matches no linear layer of this {} model; its linear layers are: {}",
                        arch.model_type,
                        linear_modules(arch).join(", ")
                    )));
                }
                for grp in matched {
                    let (inp, out) = grp.linear_dims().unwrap_or((0, 0));
                    let base = grp.name.trim_end_matches(".weight");
                    // peft LoraLayer: lora_A Linear(in, r), lora_B Linear(r, out), no biases.
                    adapters.push(TensorGroup {
                        name: format!("{base}.lora_A.weight"),
                        shape: vec![lora.rank, inp],
                        count: grp.linear_count(),
                        role: Role::Linear,
                    });
                    adapters.push(TensorGroup {
                        name: format!("{base}.lora_B.weight"),
                        shape: vec![out, lora.rank],
                        count: grp.linear_count(),
                        role: Role::Linear,
                    });
                }
            }
            if let Some(too_large) = adapters.iter().find(|a| a.checked_numel().is_none()) {
                return Err(EstimateError::Input(format!(
                    "--lora-rank {}: adapter `{}` of shape {:?} would hold more than 2^64 values; a LoRA rank is at most the layer's width: lower --lora-rank",
                    lora.rank, too_large.name, too_large.shape
                )));
            }
            Ok(Trainable::Shapes(adapters))
        }
    }
}

/// The short names of the model's linear layers, which is what LoRA targets name.
fn linear_modules(arch: &Architecture) -> Vec<&str> {
    let mut names: Vec<&str> = arch
        .groups
        .iter()
        .filter(|grp| grp.linear_dims().is_some())
        .map(TensorGroup::module)
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// peft's `target_modules="all-linear"`: every linear layer but the output head
/// (peft/tuners/tuners_utils.py `_maybe_include_all_linear_layers` leaves out
/// `get_output_embeddings()`); any other list is taken as written.
pub const ALL_LINEAR: &str = "all-linear";

fn lora_targets(targets: &[String], arch: &Architecture) -> Vec<String> {
    if targets != [ALL_LINEAR] {
        return targets.to_vec();
    }
    let mut names: Vec<String> = arch
        .groups
        .iter()
        .filter(|grp| {
            grp.linear_dims().is_some() && matches!(grp.role, Role::Linear | Role::Router)
        })
        .map(|grp| grp.module().to_string())
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Refuses a target list that would silently train nothing or count a module twice.
fn check_lora_targets(targets: &[String], arch: &Architecture) -> Result<(), EstimateError> {
    let fix = || {
        format!(
            "list the modules to adapt separated by commas, e.g. --lora-targets q_proj,v_proj; this {} model's linear layers are: {}",
            arch.model_type,
            linear_modules(arch).join(", ")
        )
    };
    if targets.iter().all(String::is_empty) {
        return Err(EstimateError::Input(format!(
            "--lora-targets names no module, so nothing would be trained; {}",
            fix()
        )));
    }
    if targets.iter().any(String::is_empty) {
        return Err(EstimateError::Input(format!(
            "--lora-targets `{}` has an empty name between commas; {}",
            targets.join(","),
            fix()
        )));
    }
    for (i, target) in targets.iter().enumerate() {
        if targets[..i].contains(target) {
            return Err(EstimateError::Input(format!(
                "--lora-targets names `{target}` twice; list each module once (its adapters would be counted twice)"
            )));
        }
    }
    Ok(())
}

/// All terms of a training step.
pub fn terms(
    source: &WeightsSource,
    req: &TrainingRequest,
    notes: &mut Vec<String>,
    left_out: &mut Vec<String>,
) -> Result<TrainingTerms, EstimateError> {
    if let Some(sh) = &req.sharding {
        sh.check(source, req)?;
    }
    let trainable = trainable(source, req)?;
    let s = trainable_bytes(req) as u128;
    let precision = req.precision;
    let zero = req.sharding.as_ref().is_some_and(|sh| {
        matches!(
            sh.strategy,
            Strategy::Zero1 | Strategy::Zero2 | Strategy::Zero3
        )
    });
    if let (None, WeightsSource::Numbers { bits, .. }, false) = (&req.lora, source, zero) {
        notes.push(format!(
            "--bits {bits} is the checkpoint's width; during training each parameter takes {s} bytes ({precision}{}) whatever that width",
            if req.precision.mixed() {
                ": fp32 master weights, with 16-bit compute copies"
            } else {
                ""
            }
        ));
    }

    // DDP keeps the unsharded states on every rank; the other strategies lay them out anew.
    let unsharded = match &req.sharding {
        Some(sh) if sh.strategy != Strategy::Ddp => Vec::new(),
        _ => state_terms(source, req, &trainable, notes)?,
    };
    let (mut out, tail, summary) = match &req.sharding {
        None => {
            let mut states = unsharded;
            states.extend(step_temporaries(req, &trainable, notes)?);
            (states, Vec::new(), None)
        }
        Some(sh) => {
            let sharded = sharding::terms(
                sh,
                sharding::Context {
                    source,
                    req,
                    trainable: &trainable,
                    unsharded,
                },
                notes,
                left_out,
            )?;
            let mut states = sharded.states;
            // DDP steps torch's own optimizer on the full replica; ZeRO steps DeepSpeed's fused
            // kernels and FSDP2 its shards (left out with every operation's temporaries).
            if sh.strategy == Strategy::Ddp {
                states.extend(step_temporaries(req, &trainable, notes)?);
            }
            (states, sharded.tail, Some(sharded.summary))
        }
    };
    notes.push("optimizer states appear during the first optimizer step, not at model load: measure a full first step".into());

    match (source, req.batch, req.context) {
        (WeightsSource::Model(m), Some(b), Some(sq)) => {
            out.extend(activation_terms(&m.architecture, req, b, sq).map_err(
                EstimateError::overflow("the activations", "--context and --batch"),
            )?);
        }
        (WeightsSource::Model(_), _, _) => {
            left_out.push("activations (give --batch and --context to estimate them)".into());
        }
        _ => left_out.push("activations (they need the model's dimensions: pass --model PATH with --batch and --context)".into()),
    }
    out.extend(tail);
    Ok(TrainingTerms {
        terms: out,
        sharding: summary,
        summary: TrainingSummary::new(source, req),
    })
}

/// Full fine-tuning of a model whose parameters another module counted (the vision encoders):
/// the same weights, gradients, optimizer states and step temporaries as a language model's.
pub(crate) fn full_training_states(
    parameters: u128,
    req: &TrainingRequest,
    notes: &mut Vec<String>,
) -> Result<(Vec<Term>, TrainingSummary), EstimateError> {
    let source = WeightsSource::Numbers {
        parameters: u64::try_from(parameters)
            .map_err(|_| EstimateError::overflow("the parameter count", "the config")(Overflow))?,
        bits: crate::units::Decimal::parse("32")
            .map_err(|e| EstimateError::Input(e.to_string()))?,
    };
    if req.optimizer == Optimizer::Adafactor {
        // The model was given (--model): what is missing is the per-tensor shapes, which the
        // vision estimate does not list.
        return Err(EstimateError::Input(
            "--optimizer adafactor factors its states by each tensor's shape, and the vision estimate counts parameters, not shapes: predict it on data-less tensors (iteragpu predict --workload vision --model … --train --optimizer adafactor), or estimate adamw, adam, sgd, sgd-momentum or adamw-8bit".into(),
        ));
    }
    let trainable = Trainable::Count(parameters);
    let mut out = state_terms(&source, req, &trainable, notes)?;
    out.extend(step_temporaries(req, &trainable, notes)?);
    notes.push("optimizer states appear during the first optimizer step, not at model load: measure a full first step".into());
    Ok((out, TrainingSummary::new(&source, req)))
}

/// The optimizer step's own temporaries. PyTorch's Adam and AdamW take the foreach path by default
/// for CUDA parameters (`_default_to_fused_or_foreach`), whose `_foreach_sqrt(exp_avg_sqs)`
/// allocates one value per trainable parameter, alive until the step ends; predict's replay shows
/// it as the step's `temporary` bytes. The other optimizers update in place (SGD without weight
/// decay, bitsandbytes' fused 8-bit kernel) or tensor by tensor (Adafactor): not counted. Not
/// under ZeRO either: DeepSpeed's fused Adam updates in place.
fn step_temporaries(
    req: &TrainingRequest,
    trainable: &Trainable,
    notes: &mut Vec<String>,
) -> Result<Vec<Term>, EstimateError> {
    if !matches!(req.optimizer, Optimizer::Adam | Optimizer::Adamw) {
        return Ok(Vec::new());
    }
    let n = trainable.count();
    let s = trainable_bytes(req) as u128;
    let bytes = Bytes::from_u128(n * s).map_err(EstimateError::overflow(
        "the optimizer step's temporaries",
        "the model size",
    ))?;
    notes.push("the optimizer step's temporaries and the activations are not alive at the same time (the activations are freed by the backward pass): the total counts both, an upper bound by the smaller of the two".into());
    Ok(vec![
        Term::new(
            TermId::OptimizerStepTemporaries {
                optimizer: req.optimizer,
            },
            bytes,
            Kind::Assumed,
            format!(
                "{} parameters × {s} bytes: torch's foreach {} (its default on CUDA) computes √exp_avg_sq for every parameter at once during the step",
                g(n),
                req.optimizer
            ),
        )
        .input("trainable_parameters", n as u64),
    ])
}

/// The unsharded model states: weights (or LoRA adapters), gradients, optimizer states.
fn state_terms(
    source: &WeightsSource,
    req: &TrainingRequest,
    trainable: &Trainable,
    notes: &mut Vec<String>,
) -> Result<Vec<Term>, EstimateError> {
    let overflow =
        || EstimateError::overflow("the training terms", "the model size and dimensions");
    let to_bytes = |v: u128| Bytes::from_u128(v).map_err(overflow());
    let n = trainable.count();
    let s = trainable_bytes(req) as u128;
    let precision = req.precision;
    let mut out = Vec::new();
    if req.lora.is_some() {
        // Frozen base model: stored as for inference (quantized or not), in the compute dtype
        // unless --dtype says otherwise; no gradients, no states.
        out.extend(weights::frozen_base_terms(source, notes)?);
        out.push(
            Term::new(
                TermId::LoraAdapters {
                    dtype: "float32".into(),
                },
                to_bytes(n * s)?,
                Kind::Calculated,
                format!(
                    "{} trainable parameters (r × (in + out) per targeted layer) × {s} bytes",
                    g(n)
                ),
            )
            .input("trainable_parameters", n as u64),
        );
        notes.push("peft keeps LoRA adapters in float32 whatever the base's dtype (get_peft_model's autocast_adapter_dtype, its default), so their gradients and optimizer states are float32 too; the base weights are frozen: no gradients or optimizer states for them".into());
    } else if req.precision.mixed() {
        out.push(
            Term::new(
                TermId::MasterWeights { shard: None },
                to_bytes(n * 4)?,
                Kind::Calculated,
                format!("{} parameters × 4 bytes: under torch.autocast the parameters themselves stay float32", g(n)),
            )
            .input("parameters", n as u64),
        );
        out.push(Term::new(
            TermId::ComputeCopies,
            to_bytes(n * 2)?,
            Kind::Assumed,
            format!("{} parameters × 2 bytes: autocast's cast cache, held by the forward pass for the backward pass", g(n)),
        ));
    } else {
        out.push(
            Term::new(
                TermId::Weights {
                    dtype: Some(precision.to_string()),
                    shard: None,
                },
                to_bytes(n * s)?,
                Kind::Calculated,
                format!("{} parameters × {s} bytes", g(n)),
            )
            .input("parameters", n as u64),
        );
    }
    out.push(Term::new(
        TermId::Gradients {
            dtype: if s == 4 { "fp32" } else { "bf16" }.into(),
            shard: None,
        },
        to_bytes(n * s)?,
        Kind::Calculated,
        format!(
            "{} trainable parameters × {s} bytes (one gradient per trainable parameter)",
            g(n)
        ),
    ));
    let (opt_bytes, opt_formula) = optimizer_bytes(req.optimizer, trainable, s)?;
    out.push(
        Term::new(
            TermId::OptimizerStates {
                optimizer: req.optimizer,
                shard: None,
            },
            to_bytes(opt_bytes)?,
            Kind::Calculated,
            opt_formula,
        )
        .input("optimizer", req.optimizer.as_ref()),
    );
    Ok(out)
}

/// The attention the activations count, and why: `--flash-attention` overrides the model's own
/// (the config's `attn_implementation`, else transformers' default SDPA).
fn attention_of(arch: &Architecture, req: &TrainingRequest) -> (AttentionKernel, String) {
    if req.flash_attention {
        (
            AttentionKernel::FlashAttention2,
            format!(
                "--flash-attention, over the model's {} from {}",
                arch.attention, arch.attention_source
            ),
        )
    } else {
        (arch.attention, arch.attention_source.clone())
    }
}

/// Activations per Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
/// Transformer Models", §4.1): per layer `s·b·h·(34 + 5·a·s/h)` bytes with 16-bit activations,
/// of which attention 11·sbh + 5·a·s²·b, MLP 19·sbh, norms 4·sbh. Adapted here: the MLP part uses
/// the model's real width (2·sbh + 4·sbI plain, 2·sbh + 6·sbI gated, + sbh dropout mask; equal to
/// 19·sbh for I = 4h), MoE layers count the routed experts' width per token, and gradient
/// checkpointing keeps only each layer's input (2·sbh) plus one layer recomputed at a time. The
/// 5·a·s²·b score term is eager attention's: the kernel the model runs (`attention_of`) decides
/// it. SDPA's fused kernels and flash attention keep instead the softmax's fp32 log-sum-exp per
/// row (`a·b·s`; the memory-efficient kernel, SDPA's choice for fp32, pads s to 32), as predict
/// sees them and as the vision estimate counts them.
fn activation_terms(
    arch: &Architecture,
    req: &TrainingRequest,
    b: u64,
    s: u64,
) -> Result<Vec<Term>, Overflow> {
    let d = arch.dims;
    let (b128, s128, h) = (b as u128, s as u128, d.hidden_size as u128);
    let e = req.precision.activation_bytes() as u128;
    let (kernel, kernel_source) = attention_of(arch, req);
    // --context and --batch are only bounded by u64: every product is checked.
    let sbh = product(&[s128, b128, h])?;
    let mlp = |inter: u128| -> Result<u128, Overflow> {
        let per_i = if d.gated_mlp { 6 } else { 4 };
        sum([product(&[3, sbh])?, product(&[per_i, s128, b128, inter])?])
    };
    let dense_inter = d.intermediate_size as u128;
    let moe_inter = arch
        .moe
        .map(|m| m.active as u128 * m.expert_intermediate as u128 + m.shared_intermediate as u128);
    let scores = if kernel.materializes_scores() {
        product(&[5, d.num_heads as u128, s128, s128, b128])?
    } else {
        0
    };
    // The fused kernels' log-sum-exp, fp32 whatever the precision: bytes per layer, unscaled.
    let padded = kernel == AttentionKernel::Sdpa && e == 4;
    let rows = if padded { s128.div_ceil(32) * 32 } else { s128 };
    let lse = if kernel.materializes_scores() {
        0
    } else {
        product(&[d.num_heads as u128, b128, rows, 4])?
    };
    let layer = |inter: u128| -> Result<u128, Overflow> {
        sum([product(&[15, sbh])?, scores, mlp(inter)?])
    };
    let moe_layers = arch.moe.map_or(0, |m| m.moe_layers) as u128;
    let dense_layers = d.num_layers as u128 - moe_layers;
    let full = sum([
        product(&[dense_layers, layer(dense_inter)?])?,
        product(&[moe_layers, layer(moe_inter.unwrap_or(dense_inter))?])?,
    ])?;
    let scale = |v: u128| -> Result<u128, Overflow> { Ok(product(&[v, e])? / 2) };
    let per_layer = if kernel.materializes_scores() {
        "s·b·h·(34 + 5·a·s/h)".to_string()
    } else {
        format!(
            "(s·b·h·34 + a·b·{} × 4 bytes of log-sum-exp, no s² term)",
            if padded { "⌈s/32⌉·32" } else { "s" }
        )
    };
    let attention_text = format!(
        "attention {kernel} ({kernel_source}){}",
        if kernel.materializes_scores() {
            ": its s×s scores kept for backward"
        } else {
            ""
        }
    );
    let (bytes, formula) = if req.gradient_checkpointing {
        let largest = layer(moe_inter.unwrap_or(0).max(dense_inter))?;
        (
            sum([
                scale(sum([product(&[d.num_layers as u128, 2, sbh])?, largest])?)?,
                lse,
            ])?,
            format!(
                "gradient checkpointing: {} layers × 2·s·b·h (layer inputs) + one layer recomputed ({per_layer} adapted); s={}, b={}, h={}, a={}; {attention_text}",
                d.num_layers,
                g(s),
                g(b),
                g(d.hidden_size),
                d.num_heads
            ),
        )
    } else {
        (
            sum([scale(full)?, product(&[d.num_layers as u128, lse])?])?,
            format!(
                "{} layers × {per_layer} adapted to the MLP width (Korthikanti et al. 2022); s={}, b={}, h={}, a={}; {attention_text}",
                d.num_layers,
                g(s),
                g(b),
                g(d.hidden_size),
                d.num_heads
            ),
        )
    };
    let mut out = vec![
        Term::new(
            TermId::Activations,
            Bytes::from_u128(bytes)?,
            Kind::Assumed,
            formula,
        )
        .input("batch", b)
        .input("context", s)
        .input("gradient_checkpointing", req.gradient_checkpointing)
        .input("flash_attention", req.flash_attention)
        .input("attention", kernel.to_string()),
    ];
    // transformers' causal-LM loss upcasts the logits to float32; cross-entropy keeps the fp32
    // log-softmax for the backward pass.
    let logits = product(&[b128, s128, d.vocab_size as u128])?;
    let per = if e < 4 { e + 4 + 4 } else { 4 + 4 };
    out.push(Term::new(
        TermId::LogitsAndLoss,
        Bytes::from_u128(product(&[logits, per])?)?,
        Kind::Assumed,
        format!(
            "b·s·vocab = {} values × {per} bytes (logits{}, fp32 log-softmax kept for backward)",
            g(logits),
            if e < 4 {
                " in 16-bit, fp32 upcast"
            } else {
                " in fp32"
            }
        ),
    ));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::Dtype;
    use crate::estimate::weights::ModelWeights;

    fn llama(compute_dtype: Dtype) -> WeightsSource {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/models/llama-style-8l");
        let config = crate::model::Config::load(&path).unwrap();
        WeightsSource::Model(Box::new(ModelWeights {
            path: "llama-style-8l".into(),
            architecture: Architecture::from_config(&config).unwrap(),
            stored: None,
            compute_dtype,
            dtype_source: "test".into(),
        }))
    }

    fn request(optimizer: Optimizer, precision: Precision, lora: bool) -> TrainingRequest {
        TrainingRequest {
            optimizer,
            precision,
            precision_stated: false,
            lora: lora.then(|| Lora {
                rank: 16,
                targets: vec!["q_proj".into(), "v_proj".into()],
            }),
            gradient_checkpointing: false,
            flash_attention: false,
            batch: None,
            context: None,
            sharding: None,
        }
    }

    fn bytes(terms: &TrainingTerms, key: &str) -> Option<u64> {
        terms
            .terms
            .iter()
            .find(|t| t.id.key() == key)
            .map(|t| t.bytes.get())
    }

    fn run(source: &WeightsSource, req: &TrainingRequest) -> TrainingTerms {
        terms(source, req, &mut Vec::new(), &mut Vec::new()).unwrap()
    }

    /// peft casts 16-bit adapters to float32 (autocast_adapter_dtype): under `bf16` the adapters,
    /// their gradients and AdamW's states are 4 bytes a value, as predict shows (they were 2).
    #[test]
    fn lora_adapters_stay_float32_under_bf16() {
        let t = run(
            &llama(Dtype::Bfloat16),
            &request(Optimizer::Adamw, Precision::Bf16, true),
        );
        // 8 layers × (q: 16 × (2,048 + 2,048) + v: 16 × (2,048 + 512)) = 851,968 values.
        let n = 851_968;
        assert_eq!(bytes(&t, "lora_adapters"), Some(4 * n));
        assert_eq!(bytes(&t, "gradients"), Some(4 * n));
        assert_eq!(bytes(&t, "optimizer_states"), Some(8 * n));
        assert_eq!(t.summary.meaning.gradients_dtype, "float32");
        assert_eq!(t.summary.meaning.lora_base_dtype, Some("bfloat16"));
    }

    /// Foreach Adam and AdamW hold √v of every trainable value during the step; SGD, the 8-bit
    /// AdamW and sharded layouts have no such term.
    #[test]
    fn the_optimizer_step_holds_one_value_per_trained_parameter_for_adam() {
        let source = WeightsSource::Numbers {
            parameters: 1_000,
            bits: crate::units::Decimal::parse("16").unwrap(),
        };
        for (optimizer, precision, expected) in [
            (Optimizer::Adamw, Precision::Fp32, Some(4_000)),
            (Optimizer::Adam, Precision::Bf16Mixed, Some(4_000)),
            (Optimizer::Adamw, Precision::Bf16, Some(2_000)),
            (Optimizer::Sgd, Precision::Fp32, None),
            (Optimizer::SgdMomentum, Precision::Fp32, None),
            (Optimizer::Adamw8bit, Precision::Fp32, None),
        ] {
            let t = run(&source, &request(optimizer, precision, false));
            assert_eq!(
                bytes(&t, "optimizer_step_temporaries"),
                expected,
                "{optimizer} {precision}"
            );
        }
    }

    fn activations(source: &WeightsSource, req: &TrainingRequest) -> (u64, String) {
        let t = run(source, req);
        let term = t
            .terms
            .iter()
            .find(|t| t.id.key() == "activations")
            .unwrap();
        (term.bytes.get(), term.formula.clone())
    }

    /// The s² term follows the kernel the model runs: transformers' default SDPA keeps a
    /// log-sum-exp per row, a config naming eager keeps the scores, `--flash-attention` overrides.
    #[test]
    fn the_s_squared_term_follows_the_models_attention() {
        let mut req = request(Optimizer::Adamw, Precision::Bf16Mixed, true);
        (req.batch, req.context) = (Some(2), Some(100));
        let sdpa_source = llama(Dtype::Bfloat16);
        let (sdpa, formula) = activations(&sdpa_source, &req);
        assert!(
            formula.contains("attention sdpa (transformers' default (the config names none))"),
            "{formula}"
        );
        let mut eager_source = llama(Dtype::Bfloat16);
        if let WeightsSource::Model(m) = &mut eager_source {
            m.architecture.attention = AttentionKernel::Eager;
            m.architecture.attention_source = "the config's _attn_implementation".into();
        }
        let (eager, formula) = activations(&eager_source, &req);
        assert!(
            formula.contains("attention eager (the config's _attn_implementation)"),
            "{formula}"
        );
        // 8 layers × (5·a·s²·b bf16 units − the log-sum-exp: a·b·s × 4 bytes), a = 16.
        let (layers, a, s, b) = (8, 16, 100, 2);
        assert_eq!(eager - sdpa, layers * (5 * a * s * s * b - a * b * s * 4));
        req.flash_attention = true;
        let (flash, formula) = activations(&eager_source, &req);
        assert_eq!(flash, sdpa);
        assert!(
            formula.contains("--flash-attention, over the model's eager"),
            "{formula}"
        );
        // fp32 runs SDPA's memory-efficient kernel, whose rows are padded to 32.
        let mut fp32 = request(Optimizer::Adamw, Precision::Fp32, true);
        (fp32.batch, fp32.context) = (Some(2), Some(100));
        let (_, formula) = activations(&sdpa_source, &fp32);
        assert!(formula.contains("a·b·⌈s/32⌉·32 × 4 bytes"), "{formula}");
    }

    #[test]
    fn the_summary_says_what_each_precision_means() {
        let source = WeightsSource::Numbers {
            parameters: 1_000,
            bits: crate::units::Decimal::parse("16").unwrap(),
        };
        for (precision, parameters, compute) in [
            (Precision::Fp32, "float32", "float32"),
            (Precision::Bf16Mixed, "float32", "bfloat16"),
            (Precision::Fp16Mixed, "float32", "float16"),
            (Precision::Bf16, "bfloat16", "bfloat16"),
        ] {
            let m = run(&source, &request(Optimizer::Adamw, precision, false))
                .summary
                .meaning;
            assert_eq!(m, precision.meaning(false));
            assert_eq!(
                (m.parameters_dtype, m.compute_dtype, m.gradients_dtype),
                (parameters, compute, parameters),
                "{precision}"
            );
            assert_eq!(m.optimizer_states_dtype, parameters);
            assert_eq!(m.lora_base_dtype, None);
            // Under LoRA: fp32 adapters, the base in the compute dtype.
            let lora = precision.meaning(true);
            assert_eq!(lora.parameters_dtype, "float32");
            assert_eq!(lora.lora_base_dtype, Some(compute));
        }
    }
}
