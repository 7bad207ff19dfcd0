//! A measurement request, validated once ([`RunOptions`] as given → a typed plan, as
//! hyperfine's `Options` or ripgrep's validated arguments). The runner, the prediction and the
//! sweep consume plans; a sweep varies a plan with [`RunPlan::with`]. The options are the
//! domain's own struct: `commands/` fills it from the command line, so no plan imports `cli`.

use anyhow::{Result, bail};
use serde_json::{Map, Value, json};
use std::path::PathBuf;
use std::time::Duration;

use crate::estimate::kv_cache::{self, CacheKind, QuantizedSettings, RequestLengths};
use crate::schema::alloc_conf::AllocConf;
use crate::schema::dimensions::{Dimensions, Variable};
use crate::schema::history::{HistoryMode, HistorySpec};
use crate::schema::measure::Policies;
use crate::schema::spec::{
    CausalLmSpec, DenseSpec, EmptyCache, QuantizeSpec, QuantizedCacheSpec, RequestsSpec,
    ScriptSpec, Task, TrainPrecision, TrainShard, TrainingSpec, VisionSpec, VlmSpec, WorkerSpec,
    Workload, WorkloadSpec,
};
use crate::schema::torchrun::{Rendezvous, Torchrun};

pub use crate::workload::kinds::{
    CausalLmPlan, DensePlan, LoraPlan, RequestsPlan, ScriptPlan, TrainingPlan, VLM_FAMILIES,
    VisionPlan, VisionSource, VlmPlan, WorkloadPlan,
};
use crate::workload::kinds::{causal_lm, config_image_size, dense, vision, vlm};
pub use crate::workload::options::{Acts, RunOptions, Scope, Written};

mod checks;
mod ranks;

use checks::refuse_ignored;
use ranks::{launched_torchrun, torchrun};

/// The largest world size `predict` follows: the fake process group's cost grows with the ranks
/// (about linearly: 16,384 ranks took 229 s on this 2-core machine; 4,096 stay within a minute).
pub const MAX_PREDICTED_WORLD_SIZE: u64 = 4096;

/// One run of a workload as asked for, validated: what `measure` measures in a fresh process and
/// what `predict` follows on data-less tensors (the same plan, so that both run the same code), where,
/// with which interpreter and for how long.
#[derive(Clone, Debug)]
pub struct RunPlan {
    pub workload: WorkloadPlan,
    pub dims: Dimensions,
    pub devices: Vec<String>,
    pub seed: u64,
    pub python: PathBuf,
    pub timeout: Duration,
    /// `--keep-children`: what the workload leaves running after its worker is named, not ended.
    pub keep_children: bool,
    /// `--alloc-conf`: the allocator setting the worker starts with (`None`: the environment's).
    pub alloc_conf: Option<AllocConf>,
    /// `--nproc-per-node`: one fresh worker per local rank under torchrun.
    pub torchrun: Option<Torchrun>,
    /// `predict --world-size N`: rank 0 of N ranks on PyTorch's fake process group.
    pub predicted_world_size: Option<u64>,
    /// `-- COMMAND`: what its launcher was resolved to, said in the result's notes.
    pub launch_notes: Vec<String>,
    /// What the allocator records: live allocations' frames for the post-mortem (the default),
    /// the whole timeline (`--timeline`), or nothing (`--no-history`).
    pub history: Option<HistorySpec>,
}

impl RunPlan {
    /// Validates the options of `measure` (and of the base configuration of a sweep).
    /// A command's ranks (`-- torchrun --nproc-per-node 2 …`, `-- accelerate launch …`) run for
    /// real, under torchrun itself, as `--nproc-per-node` runs them.
    pub fn new(args: &RunOptions) -> Result<RunPlan> {
        Self::build(args, None, Ranks::Measured)
    }

    /// The options of `sweep --predict`: a command's ranks are the predicted world, as in
    /// `predict` (each trial's prediction checks the rest).
    pub fn for_predicted_sweep(args: &RunOptions) -> Result<RunPlan> {
        Self::build(args, None, Ranks::Predicted)
    }

    /// Validates the options of `predict`, for rank 0 of `world_size` ranks when given (at most
    /// `MAX_PREDICTED_WORLD_SIZE`).
    pub fn for_prediction(args: &RunOptions, world_size: Option<u64>) -> Result<RunPlan> {
        if args.nproc_per_node.is_some() {
            bail!(
                "predict runs no torchrun job: give the job's size with --world-size N (rank 0 is predicted on PyTorch's fake process group)"
            );
        }
        if let Some(n) = world_size
            && n > MAX_PREDICTED_WORLD_SIZE
        {
            bail!(
                "--world-size {n} is above the {MAX_PREDICTED_WORLD_SIZE} ranks predict follows: PyTorch's fake process group costs time per rank (16,384 ranks took 229 s on 2 cores); for a larger job, `iteragpu estimate --train --shard … --world-size {n}` gives one rank's memory by arithmetic"
            );
        }
        let plan = Self::build(args, world_size, Ranks::Predicted)?;
        let cap = crate::workload::process::predict_memory_cap().map_err(anyhow::Error::msg)?;
        if let WorkloadPlan::Vlm(v) = &plan.workload {
            plan.check_vlm_images(
                v,
                cap as u128,
                "the predicting worker's memory cap (its own resident memory)",
            )?;
        }
        Ok(plan)
    }

    /// The file a script workload runs (a module's or an entry point's for `-- COMMAND`).
    pub fn script_path(&self) -> Option<&std::path::Path> {
        match &self.workload {
            WorkloadPlan::Script(p) => Some(&p.path),
            _ => None,
        }
    }

    /// The world size the workload's ranks see: torchrun's, or the predicted one.
    pub fn world_size(&self) -> Option<u64> {
        self.torchrun
            .as_ref()
            .map(Torchrun::world_size)
            .or(self.predicted_world_size)
    }

    fn build(
        args: &RunOptions,
        predicted_world_size: Option<u64>,
        ranks: Ranks,
    ) -> Result<RunPlan> {
        // ITERAGPU_WORKER_MEMORY is checked here, before anything runs, for both kinds of worker.
        crate::workload::process::predict_memory_cap().map_err(anyhow::Error::msg)?;
        // A command line as typed: `-- python -m pkg.train`, `-- torchrun … train.py`.
        let launched = match (&args.script, args.script_args.is_empty()) {
            (None, false) => {
                let python = crate::python_side::interpreter(args.python.as_deref());
                Some(
                    super::launch::resolve(&python, &args.script_args)
                        .map_err(|why| anyhow::anyhow!(why))?,
                )
            }
            _ => None,
        };
        let launched_world = launched
            .as_ref()
            .and_then(|l| l.world_size)
            .filter(|n| *n > 1);
        let torchrun = match (ranks, &launched) {
            (Ranks::Measured, Some(l)) => launched_torchrun(args, l)?,
            _ => torchrun(args)?,
        };
        let devices = match (&torchrun, args.device.is_empty()) {
            (None, true) => vec!["cuda:0".to_string()],
            (Some(t), true) => (0..t.nproc_per_node).map(|k| format!("cuda:{k}")).collect(),
            (Some(t), false) if args.device.len() as u64 != t.nproc_per_node => bail!(
                "--nproc-per-node {} runs {} ranks on this node and --device lists {}: give one device per local rank (rank k records the k-th), or drop --device for cuda:0 … cuda:{}",
                t.nproc_per_node,
                t.nproc_per_node,
                args.device.len(),
                t.nproc_per_node - 1
            ),
            (_, false) => args.device.clone(),
        };
        let mut seen = std::collections::BTreeSet::new();
        for d in &devices {
            if !seen.insert(d) {
                bail!("device {d} is listed twice in --device; list each device once");
            }
        }
        let dims = Dimensions {
            batch: args.batch.unwrap_or(DEFAULTS.batch),
            context: args.context.unwrap_or(DEFAULTS.context),
            width: args.width.unwrap_or(DEFAULTS.width),
            depth: args.depth.unwrap_or(DEFAULTS.depth),
            prompt_tokens: args.prompt_tokens.unwrap_or(DEFAULTS.prompt_tokens),
            new_tokens: args.new_tokens.unwrap_or(DEFAULTS.new_tokens),
            steps: args.steps.unwrap_or(DEFAULTS.steps),
            resolution: args.resolution.map_or(DEFAULTS.resolution, |r| r.0),
            resolution_width: args.resolution.and_then(|r| r.1),
            images: args.images.unwrap_or(DEFAULTS.images),
            images_per_request: args
                .images_per_request
                .unwrap_or(DEFAULTS.images_per_request),
            // Length lists alone are that many requests.
            requests: args.requests.unwrap_or(
                (args.prompt_lengths.len().max(args.output_lengths.len()) as u64).max(1),
            ),
        };
        let workload = if let Some(script) = &args.script {
            if let Err(e) = crate::model::files::regular_file(script) {
                bail!(match e {
                    crate::model::files::FileError::Missing { .. } => format!(
                        "--script {}: no such file; give the path of your Python script",
                        script.display()
                    ),
                    other => format!("--script: {other}"),
                });
            }
            WorkloadPlan::Script(ScriptPlan {
                path: std::fs::canonicalize(script)?,
                args_template: args.script_args.clone(),
                entry: None,
                env: Default::default(),
                local_rank_arg: false,
            })
        } else if let Some(launched) = &launched {
            WorkloadPlan::Script(ScriptPlan {
                path: launched.script.clone(),
                args_template: launched.args.clone(),
                entry: launched.entry.clone(),
                env: launched.env.clone(),
                local_rank_arg: launched.local_rank_arg,
            })
        } else {
            match args.workload {
                Workload::Dense => WorkloadPlan::Dense(dense(args)?),
                Workload::CausalLm => WorkloadPlan::CausalLm(Box::new(causal_lm(args)?)),
                Workload::Vision => WorkloadPlan::Vision(vision(args)?),
                Workload::Vlm => WorkloadPlan::Vlm(vlm(args)?),
            }
        };
        let mut dims = dims;
        if let (WorkloadPlan::Vision(v), None) = (&workload, args.resolution) {
            // Unstated, the images are the size the model was built for.
            if let VisionSource::Config(path) = &v.source {
                let (h, w) = config_image_size(path).unwrap_or((DEFAULTS.resolution, None));
                dims.resolution = h;
                dims.resolution_width = w;
            }
        }
        if let (WorkloadPlan::Vlm(v), None) = (&workload, args.resolution) {
            // Unstated, the images are the size its vision tower was built for.
            let (h, w) = config_image_size(&v.config).unwrap_or((DEFAULTS.resolution, None));
            dims.resolution = h;
            dims.resolution_width = w;
        }
        let launch_notes = launched
            .map(|l| {
                let mut notes = l.notes;
                if let (Ranks::Measured, Some(t), Some(_)) = (ranks, &torchrun, launched_world)
                    && l.launcher != "torchrun"
                {
                    notes.push(format!(
                        "the {} command's {} ranks of this node ran under torchrun (PyTorch's launcher, as measure runs ranks), each with the environment {} gives a rank",
                        l.launcher, t.nproc_per_node, l.launcher
                    ));
                }
                notes
            })
            .unwrap_or_default();
        let plan = RunPlan {
            workload,
            dims,
            devices,
            seed: args.seed,
            python: crate::python_side::interpreter(args.python.as_deref()),
            timeout: Duration::from_secs(args.timeout_s),
            alloc_conf: args.alloc_conf,
            torchrun,
            keep_children: args.keep_children,
            predicted_world_size: match ranks {
                Ranks::Predicted => predicted_world_size.or(launched_world),
                Ranks::Measured => predicted_world_size,
            },
            launch_notes,
            history: (!args.no_history).then(|| HistorySpec {
                mode: if args.timeline {
                    HistoryMode::Timeline
                } else {
                    HistoryMode::State
                },
                max_entries: args.timeline.then_some(args.timeline_entries),
                snapshot: None,
                oom_dir: None,
            }),
        };
        plan.check_dimensions()?;
        refuse_ignored(args, &plan)?;
        Ok(plan)
    }

    /// Whether a dimension changes what this workload runs (a script sees it only through a
    /// `{name}` placeholder in its arguments).
    pub fn uses(&self, variable: Variable) -> bool {
        let train = self.is_training();
        match &self.workload {
            WorkloadPlan::Script(s) => {
                let placeholder = format!("{{{}}}", variable.name());
                s.args_template.iter().any(|a| a.contains(&placeholder))
            }
            WorkloadPlan::Dense(_) => match variable {
                Variable::Batch | Variable::Context | Variable::Width | Variable::Depth => true,
                Variable::Steps => train,
                Variable::PromptTokens
                | Variable::NewTokens
                | Variable::Resolution
                | Variable::Images
                | Variable::Requests
                | Variable::ImagesPerRequest => false,
            },
            WorkloadPlan::CausalLm(c) => match (variable, &c.requests) {
                // Each request is one sequence: --batch is refused with --requests.
                (Variable::Batch, requests) => requests.is_none(),
                (Variable::Context | Variable::Steps, _) => train,
                (Variable::Requests, _) => !train,
                // A length list replaces the one value.
                (Variable::PromptTokens, Some(r)) => !train && r.prompt_lengths.is_empty(),
                (Variable::NewTokens, Some(r)) => !train && r.output_lengths.is_empty(),
                (Variable::PromptTokens | Variable::NewTokens, None) => !train,
                (
                    Variable::Width
                    | Variable::Depth
                    | Variable::Resolution
                    | Variable::Images
                    | Variable::ImagesPerRequest,
                    _,
                ) => false,
            },
            WorkloadPlan::Vision(_) => match variable {
                Variable::Resolution | Variable::Images => true,
                Variable::Steps => train,
                _ => false,
            },
            WorkloadPlan::Vlm(v) => match (variable, &v.requests) {
                // Each request is one sequence: --batch is refused with --requests.
                (Variable::Batch, requests) => requests.is_none(),
                (Variable::Requests | Variable::Resolution | Variable::ImagesPerRequest, _) => true,
                // A length list replaces the one value.
                (Variable::PromptTokens, Some(r)) => r.prompt_lengths.is_empty(),
                (Variable::NewTokens, Some(r)) => r.output_lengths.is_empty(),
                (Variable::PromptTokens | Variable::NewTokens, None) => true,
                (
                    Variable::Context
                    | Variable::Width
                    | Variable::Depth
                    | Variable::Steps
                    | Variable::Images,
                    _,
                ) => false,
            },
        }
    }

    /// Whether the options of `scope` change what this plan runs.
    fn acts_on(&self, scope: Scope) -> bool {
        let train = self.is_training();
        match (&self.workload, scope) {
            (WorkloadPlan::Script(_), _) => false,
            (_, Scope::BuiltIn) => true,
            (_, Scope::Training) => train,
            (WorkloadPlan::Dense(_), Scope::DenseInference) => !train,
            (WorkloadPlan::CausalLm(_), Scope::Generation | Scope::SlidingWindow) => !train,
            (WorkloadPlan::CausalLm(_), Scope::CausalLmTraining) => train,
            (WorkloadPlan::CausalLm(_), Scope::Requests) => !train,
            (WorkloadPlan::CausalLm(_), Scope::CausalLm) => true,
            (WorkloadPlan::Vlm(_), Scope::Requests) => true,
            _ => false,
        }
    }

    /// What the workload is, in words (for messages).
    pub fn describe(&self) -> &'static str {
        match (&self.workload, self.is_training()) {
            (WorkloadPlan::Script(_), _) => "a script",
            (WorkloadPlan::Dense(_), false) => "dense inference",
            (WorkloadPlan::Dense(_), true) => "dense training",
            (WorkloadPlan::Vision(_), false) => "vision inference",
            (WorkloadPlan::Vision(_), true) => "vision training",
            (WorkloadPlan::Vlm(_), _) => "vlm generation",
            (WorkloadPlan::CausalLm(_), false) => "causal-lm generation",
            (WorkloadPlan::CausalLm(_), true) => "causal-lm training",
        }
    }

    /// The same plan with one dimension changed, validated again (varying `requests` makes a
    /// generation one of concurrent requests).
    pub fn with(&self, variable: Variable, value: u64) -> Result<RunPlan> {
        let mut plan = self.clone();
        plan.dims.set(variable, value);
        if variable == Variable::Requests {
            match &mut plan.workload {
                WorkloadPlan::CausalLm(c) if c.training.is_none() => {
                    c.requests.get_or_insert_with(RequestsPlan::default);
                }
                WorkloadPlan::Vlm(v) => {
                    v.requests.get_or_insert_with(RequestsPlan::default);
                }
                _ => {}
            }
        }
        plan.check_dimensions()?;
        Ok(plan)
    }

    /// The concurrent requests' lengths, one per request (`None`: no `--requests`).
    pub fn request_lengths(&self) -> Option<Result<Vec<RequestLengths>, String>> {
        let r = match &self.workload {
            WorkloadPlan::CausalLm(c) => c.requests.as_ref()?,
            WorkloadPlan::Vlm(v) => v.requests.as_ref()?,
            _ => return None,
        };
        let one = |list: &[u64], value: u64| {
            if list.is_empty() {
                vec![value]
            } else {
                list.to_vec()
            }
        };
        Some(kv_cache::cycle_lengths(
            self.dims.requests,
            &one(&r.prompt_lengths, self.dims.prompt_tokens),
            &one(&r.output_lengths, self.dims.new_tokens),
        ))
    }

    fn max_positions(&self) -> Option<u64> {
        match &self.workload {
            WorkloadPlan::CausalLm(c) => c.max_positions,
            _ => None,
        }
    }

    pub fn is_training(&self) -> bool {
        self.training().is_some()
    }

    pub fn training(&self) -> Option<&TrainingPlan> {
        match &self.workload {
            WorkloadPlan::Dense(d) => d.training.as_ref(),
            WorkloadPlan::CausalLm(c) => c.training.as_ref(),
            WorkloadPlan::Vision(v) => v.training.as_ref(),
            WorkloadPlan::Vlm(_) | WorkloadPlan::Script(_) => None,
        }
    }

    /// The quantized checkpoint the causal-lm workload builds in its format's tensors, if any.
    pub fn packed(&self) -> Option<&crate::schema::spec::PackedSpec> {
        match &self.workload {
            WorkloadPlan::CausalLm(c) => c.packed.as_ref(),
            _ => None,
        }
    }

    /// The training precision as assumed and what it means (estimate's `Precision::meaning`,
    /// the same table), for the notes of a measurement or a prediction; `None` without training.
    pub fn precision_note(&self) -> Option<String> {
        let t = self.training()?;
        let lora = matches!(&self.workload, WorkloadPlan::CausalLm(c) if c.lora.is_some());
        let mut meaning =
            <crate::estimate::Precision as clap::ValueEnum>::from_str(t.precision.as_ref(), false)
                .ok()?
                .meaning(lora);
        if matches!(&self.workload, WorkloadPlan::CausalLm(c) if c.lora.is_some() && c.quantize.is_some())
        {
            meaning.lora_base_dtype = Some("quantized (--quantize), dequantized to compute");
        }
        Some(format!(
            "training precision: --precision {}{}: {meaning}",
            t.precision.as_ref(),
            if t.precision_stated {
                ""
            } else {
                " (the default, as estimate's; --precision bf16-mixed, fp16-mixed or bf16 to choose)"
            }
        ))
    }

    /// With `--requests`: how the live requests differ from one padded batch of the same
    /// requests (which holds batch × the longest length), with the estimate's bytes when the
    /// model's layout is known; `None` without `--requests` or when both hold the same.
    pub fn requests_note(&self) -> Option<String> {
        let lengths = self.request_lengths()?.ok()?;
        let n = lengths.len() as u64;
        let held: u64 = lengths.iter().map(|r| r.tokens()).sum();
        let longest = lengths.iter().map(|r| r.tokens()).max()?;
        let padded = n.saturating_mul(longest);
        let bytes = match &self.workload {
            WorkloadPlan::CausalLm(c) => c.architecture.as_ref().and_then(|a| {
                let per_token =
                    a.kv.elements_per_token()
                        .checked_mul(c.dtype.bytes() as u128)?;
                Some((per_token * held as u128, per_token * padded as u128))
            }),
            _ => None,
        };
        let vlm = matches!(self.workload, WorkloadPlan::Vlm(_));
        let mut note = if vlm {
            format!(
                "--requests {n}: each request is prefilled alone, with its own images, into its own dynamic cache, then all are decoded in turn (round-robin); together the caches hold Σ (text prompt + output) = {held} tokens plus every request's image tokens (the inputs phase lists them: image_tokens_per_request)"
            )
        } else {
            format!(
                "--requests {n}: each request is prefilled alone into its own dynamic cache, then all are decoded in turn (round-robin), and together they hold Σ (prompt + output) = {held} tokens of KV cache"
            )
        };
        let text = if vlm { " text" } else { "" };
        if padded == held {
            note.push_str(&format!(
                "; every request has the same{text} length, so --batch {n} would hold as many"
            ));
        } else {
            note.push_str(&format!(
                "; --batch {n} pads every sequence to the longest{text} ({longest}) and holds one cache of {n} × {longest} = {padded}{text} tokens"
            ));
        }
        if let Some((live, batch)) = bytes {
            note.push_str(&format!(
                " (estimate, every layer keeping every token: {live} bytes live vs {batch} bytes batched)"
            ));
        }
        Some(note)
    }

    /// A sweep's base specification when the varied values reach the requests' lengths
    /// (`requests`, `prompt-tokens`, `new-tokens`): each trial cycles the lists over its own
    /// count, so the base records `--prompt-lengths` / `--output-lengths` as given, and drops a
    /// list that was not given (`prompt_tokens` / `new_tokens` hold its one value, or the trial's
    /// varied values do).
    pub fn record_given_lengths(&self, spec: &mut Map<String, Value>, varied: &Map<String, Value>) {
        let given = match &self.workload {
            WorkloadPlan::CausalLm(c) => c.requests.as_ref(),
            WorkloadPlan::Vlm(v) => v.requests.as_ref(),
            _ => None,
        };
        if ![
            Variable::Requests,
            Variable::PromptTokens,
            Variable::NewTokens,
        ]
        .iter()
        .any(|v| varied.contains_key(v.name()))
        {
            return;
        }
        let Some(given) = given else {
            // None given: each trial derives its lists from its own varied values.
            spec.remove("prompt_lengths");
            spec.remove("output_lengths");
            return;
        };
        for (key, list) in [
            ("prompt_lengths", &given.prompt_lengths),
            ("output_lengths", &given.output_lengths),
        ] {
            if !spec.contains_key(key) {
                continue;
            }
            if list.is_empty() {
                spec.remove(key);
            } else {
                spec.insert(key.into(), json!(list));
            }
        }
    }

    /// The concurrent requests as the worker receives them, one length per request.
    fn requests_spec(&self) -> Option<RequestsSpec> {
        self.request_lengths()
            .and_then(Result::ok)
            .map(|lengths| RequestsSpec {
                requests: lengths.len() as u64,
                prompt_lengths: lengths.iter().map(|r| r.prompt).collect(),
                output_lengths: lengths.iter().map(|r| r.output).collect(),
            })
    }

    pub fn whole_loop(&self) -> bool {
        match &self.workload {
            WorkloadPlan::Dense(d) => d.whole_loop,
            WorkloadPlan::CausalLm(c) => c.whole_loop,
            WorkloadPlan::Vision(v) => v.whole_loop,
            WorkloadPlan::Vlm(_) | WorkloadPlan::Script(_) => false,
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
                shard: t.shard,
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
                requests: self.requests_spec(),
                quantization: p.quantize.map(|q| QuantizeSpec {
                    quantize: q.method,
                    double_quant: q.double_quant,
                }),
                packed: p.packed.clone().map(Box::new),
            }),
            WorkloadPlan::Vision(p) => {
                let (height, width) = d.image_size();
                WorkloadSpec::Vision(VisionSpec {
                    model_config: match &p.source {
                        VisionSource::Config(path) => Some(path.clone()),
                        VisionSource::Timm(_) => None,
                    },
                    timm_model: match &p.source {
                        VisionSource::Timm(name) => Some(name.clone()),
                        VisionSource::Config(_) => None,
                    },
                    images: d.images,
                    height,
                    width,
                    dtype: p.dtype.torch_name().into(),
                    whole_loop: p.whole_loop,
                    training: training(&p.training),
                })
            }
            WorkloadPlan::Vlm(p) => {
                let (height, width) = d.image_size();
                WorkloadSpec::Vlm(VlmSpec {
                    model_config: p.config.clone(),
                    processor_config: p.processor.clone(),
                    batch: d.batch,
                    prompt_tokens: d.prompt_tokens,
                    new_tokens: d.new_tokens,
                    images_per_request: d.images_per_request,
                    height,
                    width,
                    dtype: p.dtype.torch_name().into(),
                    requests: self.requests_spec(),
                })
            }
            WorkloadPlan::Script(p) => WorkloadSpec::Script(ScriptSpec {
                entry: p.entry.clone(),
                env: p.env.clone(),
                local_rank_arg: p.local_rank_arg,
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
            predict: None,
            history: self.history.clone(),
            world_size: None,
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
            "shard",
        ];
        let (mut dimensions, seed, first_pass, warmup, repeats) = match &self.workload {
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
                } else if p.requests.is_some() {
                    pick(&[
                        "requests",
                        "prompt_lengths",
                        "output_lengths",
                        "cache",
                        "dtype",
                    ])
                } else {
                    pick(&["batch", "prompt_tokens", "new_tokens", "cache", "dtype"])
                };
                dims.insert("model".into(), json!(p.config.display().to_string()));
                dims.extend(pick(&training_keys));
                if let Some(k) = &p.packed {
                    dims.extend(k.dimensions());
                }
                if let Some(q) = &p.quantize {
                    let dtype = map
                        .get("dtype")
                        .and_then(Value::as_str)
                        .unwrap_or("the model's");
                    dims.extend(q.dimensions(dtype));
                }
                let first = if train { "forward (step 0)" } else { "prefill" };
                let repeats = if train { self.dims.steps } else { 1 };
                (dims, Some(self.seed), first.to_string(), 0, repeats)
            }
            WorkloadPlan::Vision(p) => {
                let mut dims = pick(&["images", "height", "width", "dtype"]);
                dims.insert("model".into(), json!(p.model));
                dims.insert("resolution".into(), self.dims.resolution_value());
                dims.extend(pick(&training_keys));
                let first = if train {
                    "forward (step 0)"
                } else {
                    "cold_forward"
                };
                let repeats = if train { self.dims.steps } else { 1 };
                (dims, Some(self.seed), first.to_string(), 0, repeats)
            }
            WorkloadPlan::Vlm(p) => {
                let generation: &[&str] = if p.requests.is_some() {
                    &["requests", "prompt_lengths", "output_lengths"]
                } else {
                    &["batch", "prompt_tokens", "new_tokens"]
                };
                let mut dims = pick(generation);
                dims.extend(pick(&["images_per_request", "height", "width", "dtype"]));
                dims.insert("model".into(), json!(p.model.display().to_string()));
                dims.insert("resolution".into(), self.dims.resolution_value());
                (dims, Some(self.seed), "prefill".to_string(), 0, 1)
            }
        };
        // A model folder of the Hugging Face cache (`--model ORG/NAME`): the repository and the
        // commit are recorded with the folder.
        let origin = dimensions
            .get("model")
            .and_then(Value::as_str)
            .and_then(|m| crate::model::hub_cache::origin(std::path::Path::new(m)));
        if let Some(origin) = origin {
            dimensions.insert("model_repo".into(), json!(origin.repo));
            dimensions.insert("model_commit".into(), json!(origin.commit));
        }
        let empty_cache = match &self.workload {
            WorkloadPlan::Dense(p) => p.empty_cache,
            _ => EmptyCache::Never,
        };
        let scope_phases = scope_phases(&spec);
        Trial {
            workload: spec.workload_name().to_string(),
            spec,
            devices: self.devices.clone(),
            dimensions,
            seed,
            scope_phases,
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
            keep_children: self.keep_children,
            alloc_conf: self.alloc_conf,
            torchrun: self.torchrun.clone(),
            visible_devices: None,
        }
    }

    /// The allocator model a prediction of this plan uses: the one `--alloc-conf` sets, else the
    /// one the environment's variables ask for.
    pub fn allocator_backend(&self) -> String {
        match self.alloc_conf {
            Some(a) => a.backend().to_string(),
            None => crate::schema::target::allocator_backend_from_env(),
        }
    }

    /// The same plan with another allocator setting.
    pub fn with_alloc_conf(&self, alloc_conf: AllocConf) -> RunPlan {
        RunPlan {
            alloc_conf: Some(alloc_conf),
            ..self.clone()
        }
    }
}

/// The phases a built-in workload runs, in order: a sharded job's `init_process_group`, loading
/// and inputs, then the inference phases, the training steps, or the whole loop (training adds
/// evaluation and export); a script's are its own. The one list of the built-in phase names:
/// the workloads' real runs are checked against it (`tests/integration/workloads.rs`, `torchrun.rs`).
pub fn scope_phases(spec: &WorkerSpec) -> Vec<String> {
    let (inference, whole_loop, training): (&[&str], bool, Option<&TrainingSpec>) =
        match &spec.workload {
            WorkloadSpec::Script(_) => return Vec::new(),
            WorkloadSpec::Dense(d) => (
                &["cold_forward", "warmup", "warm_forward"],
                d.whole_loop,
                d.training.as_ref(),
            ),
            WorkloadSpec::CausalLm(c) => (
                &["prefill", "decode", "prefill_warm", "decode_warm"],
                c.whole_loop,
                c.training.as_ref(),
            ),
            WorkloadSpec::Vision(v) => (
                &["cold_forward", "warm_forward"],
                v.whole_loop,
                v.training.as_ref(),
            ),
            WorkloadSpec::Vlm(_) => (&["prefill", "decode"], false, None),
        };
    let mut phases = Vec::new();
    if training.is_some_and(|t| t.shard.is_some()) {
        phases.push("init_process_group");
    }
    phases.extend(["model_load", "inputs"]);
    if whole_loop {
        phases.push("whole_loop");
    } else if let Some(t) = training {
        for _ in 0..t.steps {
            phases.extend(["forward", "loss", "backward", "optimizer_step", "zero_grad"]);
        }
    } else {
        phases.extend(inference);
    }
    if training.is_some() {
        phases.extend(["evaluation", "export"]);
    }
    phases.into_iter().map(String::from).collect()
}

/// The dimensions' defaults (the command line's help states them).
const DEFAULTS: Dimensions = Dimensions {
    batch: 1,
    context: 16,
    width: 64,
    depth: 4,
    prompt_tokens: 128,
    new_tokens: 32,
    steps: 2,
    resolution: 224,
    resolution_width: None,
    images: 1,
    requests: 1,
    images_per_request: 1,
};

/// How the ranks a command's launcher starts are followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ranks {
    /// For real, under torchrun (`measure`, a measured sweep).
    Measured,
    /// As the world of a prediction of rank 0 (`predict`, `sweep --predict`).
    Predicted,
}

/// Everything needed to run one trial.
#[derive(Clone, Debug)]
pub struct Trial {
    pub workload: String,
    /// What the worker runs.
    pub spec: WorkerSpec,
    pub devices: Vec<String>,
    /// The requested dimensions, recorded in the result.
    pub dimensions: Map<String, Value>,
    pub seed: Option<u64>,
    /// Phases the workload runs, in order (documentation of the scope).
    pub scope_phases: Vec<String>,
    pub first_pass: String,
    pub policies: Policies,
    pub python: PathBuf,
    pub timeout: Option<Duration>,
    /// Forward the workload's own output to our stderr (a sweep keeps its terminal quiet).
    pub forward_output: bool,
    /// Name, but do not end, the processes the workload leaves running (`--keep-children`).
    pub keep_children: bool,
    /// The allocator setting the worker starts with (`None`: the environment's).
    pub alloc_conf: Option<crate::schema::alloc_conf::AllocConf>,
    /// `--nproc-per-node`: one worker per local rank under torchrun.
    pub torchrun: Option<crate::schema::torchrun::Torchrun>,
    /// The `CUDA_VISIBLE_DEVICES` the worker starts with (`sweep --gpus`: the one GPU it runs on,
    /// which it sees as `cuda:0`); `None`: the environment's.
    pub visible_devices: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lm(extra: Value) -> WorkerSpec {
        let mut doc = json!({
            "workload": "causal-lm", "devices": ["cuda:0"], "seed": 0, "model_config": "config.json",
            "batch": 1, "context": 16, "prompt_tokens": 8, "new_tokens": 2, "cache": "dynamic",
            "window": null, "dtype": "float32", "whole_loop": false, "lora_rank": null,
            "lora_targets": []
        });
        doc.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(doc).unwrap()
    }

    /// Every precision the training loop runs is one of estimate's, with the same name: the
    /// note that says what it means is never missing.
    #[test]
    fn every_training_precision_has_estimates_meaning() {
        for p in <TrainPrecision as strum::VariantArray>::VARIANTS {
            let e = <crate::estimate::Precision as clap::ValueEnum>::from_str(p.as_ref(), false);
            assert_eq!(e.map(|e| e.to_string()).ok().as_deref(), Some(p.as_ref()));
        }
    }

    /// A sharded job opens with its process group, as `workloads/sharding.py::init` does; each
    /// training step's five phases follow the loading, then evaluation and export.
    #[test]
    fn a_sharded_job_starts_with_its_process_group() {
        let train = json!({"task": "train", "steps": 1, "optimizer": "adamw", "precision": "fp32",
            "gradient_checkpointing": false});
        let mut sharded = train.clone();
        sharded["shard"] = json!("fsdp");
        let steps = ["forward", "loss", "backward", "optimizer_step", "zero_grad"];
        let unsharded = scope_phases(&lm(train));
        assert_eq!(&unsharded[..2], ["model_load", "inputs"]);
        assert_eq!(&unsharded[2..7], steps);
        assert_eq!(&unsharded[7..], ["evaluation", "export"]);
        let sharded = scope_phases(&lm(sharded));
        assert_eq!(sharded[0], "init_process_group");
        assert_eq!(sharded[1..], unsharded[..]);
        assert_eq!(
            scope_phases(&lm(json!({}))),
            [
                "model_load",
                "inputs",
                "prefill",
                "decode",
                "prefill_warm",
                "decode_warm"
            ]
        );
    }
}
