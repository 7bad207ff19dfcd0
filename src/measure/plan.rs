//! A measurement request, validated once from the command line (raw arguments → a typed plan, as
//! hyperfine's `Options` or ripgrep's validated arguments). The runner, the prediction and the
//! sweep consume plans; a sweep varies a plan with [`MeasurePlan::with`], never clap's struct.

use anyhow::{Result, bail};
use serde_json::{Map, Value, json};
use std::path::PathBuf;
use std::time::Duration;

use super::dimensions::{Dimensions, Variable};
use super::result::Policies;
use super::spec::{
    CausalLmSpec, DenseSpec, EmptyCache, QuantizedCacheSpec, ScriptSpec, Task, TrainingSpec,
    WorkerSpec, Workload, WorkloadSpec,
};
use super::trial::Trial;
use crate::cli::MeasureArgs;
use crate::dtype::Dtype;
use crate::estimate::kv_cache::{CacheKind, QuantizedSettings};
use crate::estimate::{Optimizer, Precision};
use crate::model::{Architecture, Config, ModelError};

/// What to measure, where, with which interpreter and for how long.
#[derive(Clone, Debug)]
pub struct MeasurePlan {
    pub workload: WorkloadPlan,
    pub dims: Dimensions,
    pub devices: Vec<String>,
    pub seed: u64,
    pub python: PathBuf,
    pub timeout: Duration,
}

/// The workload and its validated settings.
#[derive(Clone, Debug)]
pub enum WorkloadPlan {
    Dense(DensePlan),
    CausalLm(Box<CausalLmPlan>),
    Script(ScriptPlan),
}

#[derive(Clone, Debug)]
pub struct DensePlan {
    pub dtype: Dtype,
    pub warmup: u64,
    pub repeats: u64,
    pub empty_cache: EmptyCache,
    pub whole_loop: bool,
    pub training: Option<TrainingPlan>,
}

#[derive(Clone, Debug)]
pub struct CausalLmPlan {
    /// The config.json as the user named it (recorded in the result's dimensions).
    pub config: PathBuf,
    /// The same, absolute (what the worker opens).
    pub config_absolute: PathBuf,
    /// The model's architecture, when its family is known to the estimator (for predictions).
    pub architecture: Option<Architecture>,
    pub cache: CacheKind,
    pub window: Option<u64>,
    pub dtype: Dtype,
    pub whole_loop: bool,
    pub lora: Option<LoraPlan>,
    pub training: Option<TrainingPlan>,
}

#[derive(Clone, Debug)]
pub struct ScriptPlan {
    /// Absolute path of the script.
    pub path: PathBuf,
    /// Its arguments, with `{batch}`, `{context}`, … still to be replaced by each trial's values.
    pub args_template: Vec<String>,
}

/// The training loop (measured with AdamW or SGD, in fp32, bf16-mixed or bf16).
#[derive(Clone, Copy, Debug)]
pub struct TrainingPlan {
    pub optimizer: Optimizer,
    pub precision: Precision,
    pub gradient_checkpointing: bool,
}

#[derive(Clone, Debug)]
pub struct LoraPlan {
    pub rank: u64,
    pub targets: Vec<String>,
}

impl MeasurePlan {
    /// Validates the arguments of `measure` (and of the base configuration of a sweep).
    pub fn from_args(args: &MeasureArgs) -> Result<MeasurePlan> {
        let mut seen = std::collections::BTreeSet::new();
        for d in &args.device {
            if !seen.insert(d) {
                bail!("device {d} is listed twice in --device; list each device once");
            }
        }
        let dims = Dimensions {
            batch: args.batch,
            context: args.context,
            width: args.width,
            depth: args.depth,
            prompt_tokens: args.prompt_tokens,
            new_tokens: args.new_tokens,
            steps: args.steps,
        };
        let workload = if let Some(script) = &args.script {
            if !script.is_file() {
                bail!(
                    "--script {}: no such file; give the path of your Python script",
                    script.display()
                );
            }
            WorkloadPlan::Script(ScriptPlan {
                path: std::fs::canonicalize(script)?,
                args_template: args.script_args.clone(),
            })
        } else {
            if !args.script_args.is_empty() {
                bail!("arguments after `--` are for --script; give --script PATH or drop them");
            }
            match args.workload {
                Workload::Dense => WorkloadPlan::Dense(dense(args)?),
                Workload::CausalLm => WorkloadPlan::CausalLm(Box::new(causal_lm(args)?)),
            }
        };
        let plan = MeasurePlan {
            workload,
            dims,
            devices: args.device.clone(),
            seed: args.seed,
            python: crate::python_side::interpreter(args.python.as_deref()),
            timeout: Duration::from_secs(args.timeout),
        };
        plan.check_dimensions()?;
        Ok(plan)
    }

    /// The same plan with one dimension changed, validated again.
    pub fn with(&self, variable: Variable, value: u64) -> Result<MeasurePlan> {
        let mut plan = self.clone();
        plan.dims.set(variable, value);
        plan.check_dimensions()?;
        Ok(plan)
    }

    /// The rules that depend on the dimensions, checked again whenever a sweep changes one.
    fn check_dimensions(&self) -> Result<()> {
        if let WorkloadPlan::Dense(_) = self.workload
            && self.dims.depth < self.devices.len() as u64
        {
            bail!(
                "--depth {} is smaller than the {} devices given: each device needs at least one block",
                self.dims.depth,
                self.devices.len()
            );
        }
        Ok(())
    }

    pub fn is_training(&self) -> bool {
        self.training().is_some()
    }

    pub fn training(&self) -> Option<&TrainingPlan> {
        match &self.workload {
            WorkloadPlan::Dense(d) => d.training.as_ref(),
            WorkloadPlan::CausalLm(c) => c.training.as_ref(),
            WorkloadPlan::Script(_) => None,
        }
    }

    pub fn whole_loop(&self) -> bool {
        match &self.workload {
            WorkloadPlan::Dense(d) => d.whole_loop,
            WorkloadPlan::CausalLm(c) => c.whole_loop,
            WorkloadPlan::Script(_) => false,
        }
    }

    /// What the worker receives.
    pub fn worker_spec(&self) -> WorkerSpec {
        let d = &self.dims;
        let training = |t: &Option<TrainingPlan>| {
            t.map(|t| TrainingSpec {
                task: Task::Train,
                steps: d.steps,
                optimizer: t.optimizer,
                precision: t.precision,
                gradient_checkpointing: t.gradient_checkpointing,
            })
        };
        let workload = match &self.workload {
            WorkloadPlan::Dense(p) => WorkloadSpec::Dense(DenseSpec {
                batch: d.batch,
                context: d.context,
                width: d.width,
                depth: d.depth,
                dtype: p.dtype.torch_name().into(),
                warmup: p.warmup,
                repeats: p.repeats,
                empty_cache: p.empty_cache,
                whole_loop: p.whole_loop,
                training: training(&p.training),
            }),
            WorkloadPlan::CausalLm(p) => WorkloadSpec::CausalLm(CausalLmSpec {
                model_config: p.config_absolute.clone(),
                batch: d.batch,
                context: d.context,
                prompt_tokens: d.prompt_tokens,
                new_tokens: d.new_tokens,
                cache: p.cache,
                window: p.window,
                dtype: p.dtype.torch_name().into(),
                whole_loop: p.whole_loop,
                lora_rank: p.lora.as_ref().map(|l| l.rank),
                lora_targets: p
                    .lora
                    .as_ref()
                    .map(|l| l.targets.clone())
                    .unwrap_or_default(),
                quantized_cache: (p.cache == CacheKind::Quantized).then_some(QuantizedCacheSpec {
                    kv_quant_bits: QuantizedSettings::DEFAULT.bits,
                    kv_group_size: QuantizedSettings::DEFAULT.group_size,
                    kv_residual: QuantizedSettings::DEFAULT.residual,
                }),
                training: training(&p.training),
            }),
            WorkloadPlan::Script(p) => WorkloadSpec::Script(ScriptSpec {
                script: p.path.clone(),
                script_args: p
                    .args_template
                    .iter()
                    .map(|a| self.dims.substitute(a))
                    .collect(),
            }),
        };
        WorkerSpec {
            workload,
            devices: self.devices.clone(),
            seed: self.seed,
            memory_limit_bytes: None,
        }
    }

    /// The trial this plan describes: the spec, and what the result records about it.
    pub fn trial(&self) -> Trial {
        let spec = self.worker_spec();
        let map = spec.to_map();
        let train = self.is_training();
        let pick = |keys: &[&str]| -> Map<String, Value> {
            keys.iter()
                .filter_map(|k| map.get(*k).map(|v| (k.to_string(), v.clone())))
                .collect()
        };
        let training_keys = [
            "task",
            "steps",
            "optimizer",
            "precision",
            "gradient_checkpointing",
        ];
        let (dimensions, seed, first_pass, warmup, repeats) = match &self.workload {
            WorkloadPlan::Script(_) => (
                Map::new(),
                None,
                "the script's first phase".to_string(),
                0,
                0,
            ),
            WorkloadPlan::Dense(p) => {
                let mut dims = pick(&["batch", "context", "width", "depth", "dtype"]);
                dims.extend(pick(&training_keys));
                let first = if train {
                    "forward (step 0)"
                } else {
                    "cold_forward"
                };
                let (warmup, repeats) = if train {
                    (0, self.dims.steps)
                } else {
                    (p.warmup, p.repeats)
                };
                (dims, Some(self.seed), first.to_string(), warmup, repeats)
            }
            WorkloadPlan::CausalLm(p) => {
                let mut dims = if train {
                    pick(&["batch", "context", "dtype"])
                } else {
                    pick(&["batch", "prompt_tokens", "new_tokens", "cache", "dtype"])
                };
                dims.insert("model".into(), json!(p.config.display().to_string()));
                dims.extend(pick(&training_keys));
                let first = if train { "forward (step 0)" } else { "prefill" };
                let repeats = if train { self.dims.steps } else { 1 };
                (dims, Some(self.seed), first.to_string(), 0, repeats)
            }
        };
        let empty_cache = match &self.workload {
            WorkloadPlan::Dense(p) => p.empty_cache,
            _ => EmptyCache::Never,
        };
        Trial {
            workload: spec.workload_name().to_string(),
            spec,
            devices: self.devices.clone(),
            dimensions,
            seed,
            scope_phases: self.scope_phases(),
            first_pass,
            policies: Policies {
                process: "fresh".into(),
                warmup,
                repeats,
                empty_cache,
                protocol: if self.whole_loop() {
                    "whole-loop".into()
                } else {
                    "per-phase".into()
                },
                timeout_s: Some(self.timeout.as_secs()),
            },
            python: self.python.clone(),
            timeout: Some(self.timeout),
            forward_output: true,
        }
    }

    /// The phases a built-in workload runs, in order: loading and inputs, then the inference
    /// phases, the training steps, or the whole loop (training adds evaluation and export).
    fn scope_phases(&self) -> Vec<String> {
        let inference: &[&str] = match &self.workload {
            WorkloadPlan::Script(_) => return Vec::new(),
            WorkloadPlan::Dense(_) => &["cold_forward", "warmup", "warm_forward"],
            WorkloadPlan::CausalLm(_) => &["prefill", "decode", "prefill_warm", "decode_warm"],
        };
        let mut phases = vec!["model_load".to_string(), "inputs".to_string()];
        let train = self.is_training();
        if self.whole_loop() {
            phases.push("whole_loop".into());
        } else if train {
            for _ in 0..self.dims.steps {
                phases.extend(
                    ["forward", "loss", "backward", "optimizer_step", "zero_grad"]
                        .map(String::from),
                );
            }
        } else {
            phases.extend(inference.iter().map(|p| p.to_string()));
        }
        if train {
            phases.extend(["evaluation", "export"].map(String::from));
        }
        phases
    }
}

/// The dtype of the weights: training precision decides; else --dtype; else the default.
fn weights_dtype(args: &MeasureArgs, default: Dtype) -> Result<Dtype> {
    if args.task == Task::Train {
        let by_precision = match args.precision {
            Precision::Fp32 | Precision::Bf16Mixed => Dtype::Float32,
            Precision::Bf16 => Dtype::Bfloat16,
            Precision::Fp16Mixed => {
                bail!("--precision fp16-mixed is not measured yet; use fp32, bf16-mixed or bf16")
            }
        };
        if let Some(d) = args.dtype
            && d != by_precision
        {
            bail!(
                "--dtype {d} contradicts --precision {:?}, which keeps the weights in {by_precision}; drop --dtype",
                args.precision
            );
        }
        return Ok(by_precision);
    }
    let d = args.dtype.unwrap_or(default);
    if !matches!(
        d,
        Dtype::Float32 | Dtype::Float16 | Dtype::Bfloat16 | Dtype::Float64
    ) {
        bail!(
            "--dtype {d} is not a floating-point dtype for weights; use float32, float16 or bfloat16"
        );
    }
    Ok(d)
}

/// The training loop's settings, or `None` for inference (where training options are refused).
fn training(args: &MeasureArgs) -> Result<Option<TrainingPlan>> {
    if args.task != Task::Train {
        if args.gradient_checkpointing || args.lora_rank.is_some() {
            bail!(
                "--gradient-checkpointing and --lora-rank apply to --task train; add --task train"
            );
        }
        return Ok(None);
    }
    if !matches!(args.optimizer, Optimizer::Adamw | Optimizer::Sgd) {
        bail!(
            "--optimizer {:?} is estimated but not measured yet; measure with adamw or sgd",
            args.optimizer
        );
    }
    if args.precision == Precision::Fp16Mixed {
        bail!("--precision fp16-mixed is not measured yet; use fp32, bf16-mixed or bf16");
    }
    Ok(Some(TrainingPlan {
        optimizer: args.optimizer,
        precision: args.precision,
        gradient_checkpointing: args.gradient_checkpointing,
    }))
}

fn dense(args: &MeasureArgs) -> Result<DensePlan> {
    if args.model.is_some() {
        bail!("--model applies to --workload causal-lm");
    }
    if args.lora_rank.is_some() {
        bail!(
            "--lora-rank applies to --workload causal-lm (the dense network has no LoRA targets)"
        );
    }
    if args.depth < args.device.len() as u64 {
        bail!(
            "--depth {} is smaller than the {} devices given: each device needs at least one block",
            args.depth,
            args.device.len()
        );
    }
    let dtype = weights_dtype(args, Dtype::Float32)?;
    Ok(DensePlan {
        dtype,
        warmup: args.warmup,
        repeats: args.repeats,
        empty_cache: args.empty_cache,
        whole_loop: args.whole_loop,
        training: training(args)?,
    })
}

fn causal_lm(args: &MeasureArgs) -> Result<CausalLmPlan> {
    let Some(model) = &args.model else {
        bail!("--workload causal-lm needs --model PATH (a config.json or a folder holding one)");
    };
    if args.device.len() > 1 {
        bail!(
            "--workload causal-lm runs on one device; splitting a language model over several GPUs is for you to measure with --script"
        );
    }
    let config_path = if model.is_dir() {
        model.join("config.json")
    } else {
        model.clone()
    };
    let config = Config::load(&config_path)?;
    let architecture = match Architecture::from_config(&config) {
        Ok(a) => Some(a),
        Err(ModelError::UnknownFamily { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let default = architecture
        .as_ref()
        .and_then(|a| a.config_dtype)
        .unwrap_or(Dtype::Bfloat16);
    let dtype = weights_dtype(args, default)?;
    if args.window.is_some() && args.cache != CacheKind::Sliding {
        bail!("--window applies to --cache sliding; add --cache sliding or drop --window");
    }
    let training = training(args)?;
    Ok(CausalLmPlan {
        config_absolute: std::fs::canonicalize(&config_path)?,
        config: config_path,
        architecture,
        cache: args.cache,
        window: args.window,
        dtype,
        whole_loop: args.whole_loop,
        lora: args.lora_rank.map(|rank| LoraPlan {
            rank,
            targets: args.lora_targets.clone(),
        }),
        training,
    })
}
