//! What a measurement is compared with: per-phase peak predictions and the KV cache's estimated
//! bytes, built from a plan before the worker runs (`for_plan`), then attached to the result next
//! to what was observed (`check`). The sweep's frontier search uses the same predictions as its
//! hint.

pub mod check;
pub mod document;
pub mod hand_replay;
pub mod render;
pub mod replay;
pub mod run;
pub mod target;
pub mod trace;

use anyhow::Result;

use crate::estimate::KvRequest;
use crate::estimate::kv_cache::{self, CacheKind, CacheOptions, CacheStrategy, QuantizedSettings};
use crate::measure::plan::{CausalLmPlan, MeasurePlan, WorkloadPlan};
use crate::measure::result::MeasureResult;
use crate::measure::spec::{TrainOptimizer, TrainPrecision};
use check::CacheEstimate;
use hand_replay::{CausalLmSpec, CausalLmTrainSpec, DenseSpec, PhasePrediction};

/// The predictions of one plan.
pub enum Prediction {
    None,
    Phases(Vec<PhasePrediction>),
    CausalLm {
        phases: Vec<PhasePrediction>,
        caches: Vec<CacheEstimate>,
    },
}

impl Prediction {
    /// The highest predicted peak reserved over all phases (for a sweep's hint).
    pub fn max_peak_reserved(&self) -> Option<u64> {
        let phases = match self {
            Prediction::None => return None,
            Prediction::Phases(p) | Prediction::CausalLm { phases: p, .. } => p,
        };
        phases.iter().map(|p| p.peak_reserved_bytes).max()
    }

    /// Attaches the comparisons to a finished result.
    pub fn attach(&self, result: &mut MeasureResult) {
        match self {
            Prediction::None => {}
            Prediction::Phases(p) => check::predictions(result, p, 0),
            Prediction::CausalLm { phases, caches } => {
                check::predictions(result, phases, 0);
                check::kv_cache(result, caches);
            }
        }
    }
}

/// The predictions for a plan (none for scripts, several devices, or what is not modelled).
pub fn for_plan(plan: &MeasurePlan) -> Result<Prediction> {
    let d = &plan.dims;
    Ok(match &plan.workload {
        WorkloadPlan::Script(_) => Prediction::None,
        WorkloadPlan::Dense(p) => {
            let checkpointing = p.training.is_some_and(|t| t.gradient_checkpointing);
            if plan.devices.len() == 1 && !p.whole_loop && !checkpointing {
                Prediction::Phases(hand_replay::dense(&DenseSpec {
                    batch: d.batch,
                    context: d.context,
                    width: d.width,
                    depth: d.depth,
                    element_bytes: p.dtype.bytes(),
                    warmup: p.warmup,
                    repeats: p.repeats,
                    train_steps: p.training.map(|_| d.steps),
                    adamw: p
                        .training
                        .is_none_or(|t| t.optimizer == TrainOptimizer::Adamw),
                }))
            } else {
                Prediction::None
            }
        }
        WorkloadPlan::CausalLm(p) => causal_lm(plan, p)?,
    })
}

fn causal_lm(plan: &MeasurePlan, p: &CausalLmPlan) -> Result<Prediction> {
    let Some(arch) = &p.architecture else {
        return Ok(Prediction::None);
    };
    let d = &plan.dims;
    if p.whole_loop {
        return Ok(Prediction::None);
    }
    if let Some(t) = &p.training {
        let lora_trainable = p.lora.as_ref().map(|lora| {
            arch.groups
                .iter()
                .filter(|g| lora.targets.iter().any(|t| g.module() == t))
                .filter_map(|g| {
                    g.linear_dims()
                        .map(|(i, o)| lora.rank * (i + o) * g.linear_count())
                })
                .sum()
        });
        return Ok(Prediction::Phases(hand_replay::causal_lm_training(
            arch,
            &CausalLmTrainSpec {
                batch: d.batch,
                context: d.context,
                steps: d.steps,
                param_bytes: p.dtype.bytes(),
                mixed: t.precision == TrainPrecision::Bf16Mixed,
                adamw: t.optimizer == TrainOptimizer::Adamw,
                lora_trainable,
                gradient_checkpointing: t.gradient_checkpointing,
            },
        )));
    }
    let total = d.prompt_tokens + d.new_tokens;
    let options = CacheOptions {
        max_cache_len: (p.cache == CacheKind::Static).then_some(total),
        window: p.window,
        quantized: QuantizedSettings::DEFAULT,
    };
    let kv = |tokens: u64, windows: bool| -> Result<u64> {
        let mut layout = arch.kv.clone();
        let mut strategy = p
            .cache
            .strategy(&options, total, &layout)
            .map_err(anyhow::Error::msg)?;
        if !windows {
            // Right after the prefill every layer still holds the whole prompt.
            for l in &mut layout.layers {
                l.window = None;
            }
            if let CacheStrategy::Sliding { window } = &mut strategy {
                *window = u64::MAX;
            }
        }
        let req = KvRequest {
            layout,
            tokens,
            sequences: d.batch,
            element_bytes: p.dtype.bytes(),
            strategy,
            prompt_tokens: Some(d.prompt_tokens),
        };
        Ok(kv_cache::terms(&req, &mut Vec::new())?[0].bytes.get())
    };
    // Right after the prefill a sliding layer still holds the whole prompt (a view of the tensor
    // built from it); after a decoding step it holds min(tokens, window).
    let prefill_windows = p.cache == CacheKind::Static;
    let after_prefill = kv(d.prompt_tokens, prefill_windows)?;
    let after_decode = kv(total, true)?;
    let basis = format!(
        "estimate's KV term, --cache {}, {} bytes per value",
        p.cache.name(),
        p.dtype.bytes()
    );
    let caches = ["", "_warm"]
        .iter()
        .flat_map(|suffix| {
            [
                CacheEstimate {
                    phase: format!("prefill{suffix}"),
                    tokens: d.prompt_tokens,
                    bytes: after_prefill,
                    basis: basis.clone(),
                },
                CacheEstimate {
                    phase: format!("decode{suffix}"),
                    tokens: total,
                    bytes: after_decode,
                    basis: basis.clone(),
                },
            ]
        })
        .collect();
    let phases = hand_replay::causal_lm(
        arch,
        &CausalLmSpec {
            batch: d.batch,
            prompt_tokens: d.prompt_tokens,
            new_tokens: d.new_tokens,
            element_bytes: p.dtype.bytes(),
            kv_after_prefill: after_prefill,
            kv_after_decode: after_decode,
            static_cache: p.cache == CacheKind::Static,
        },
    );
    Ok(Prediction::CausalLm { phases, caches })
}
