//! A measurement (or a prediction, a sweep's base) as asked for, before validation: what the
//! command line hands to the plan, so that the plan never imports `cli`.

use std::path::PathBuf;

use crate::dtype::Dtype;
use crate::estimate::kv_cache::CacheKind;
use crate::model::quantization::QuantizeMethod;
use crate::schema::alloc_conf::AllocConf;
use crate::schema::dimensions::Variable;
use crate::schema::spec::{EmptyCache, Task, TrainOptimizer, TrainPrecision, TrainShard, Workload};

/// A measurement as asked for, before validation (`None`: the default the help states).
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub workload: Workload,
    pub script: Option<PathBuf>,
    pub script_args: Vec<String>,
    pub model: Option<PathBuf>,
    pub task: Task,
    pub device: Vec<String>,
    pub batch: Option<u64>,
    pub context: Option<u64>,
    pub seed: u64,
    pub dtype: Option<Dtype>,
    pub whole_loop: bool,
    pub width: Option<u64>,
    pub depth: Option<u64>,
    pub warmup: Option<u64>,
    pub repeats: Option<u64>,
    pub empty_cache: Option<EmptyCache>,
    pub prompt_tokens: Option<u64>,
    pub new_tokens: Option<u64>,
    pub cache: Option<CacheKind>,
    /// Vision: `--resolution` (height, and the width when not square).
    pub resolution: Option<(u64, Option<u64>)>,
    pub images: Option<u64>,
    /// vlm: `--images-per-request`.
    pub images_per_request: Option<u64>,
    /// `--requests`, `--prompt-lengths`, `--output-lengths` (empty lists: one length for all).
    pub requests: Option<u64>,
    pub prompt_lengths: Vec<u64>,
    pub output_lengths: Vec<u64>,
    pub window: Option<u64>,
    pub steps: Option<u64>,
    pub optimizer: Option<TrainOptimizer>,
    pub precision: Option<TrainPrecision>,
    pub gradient_checkpointing: bool,
    pub shard: Option<TrainShard>,
    pub lora_rank: Option<u64>,
    pub lora_targets: Vec<String>,
    /// `--quantize` and `--double-quant`: the model loaded quantized by bitsandbytes.
    pub quantize: Option<QuantizeMethod>,
    pub double_quant: bool,
    pub alloc_conf: Option<AllocConf>,
    pub nproc_per_node: Option<u64>,
    pub nnodes: Option<u64>,
    pub node_rank: Option<u64>,
    pub rdzv_endpoint: Option<String>,
    pub rdzv_id: Option<String>,
    pub timeline: bool,
    pub timeline_entries: u64,
    pub no_history: bool,
    pub keep_children: bool,
    pub python: Option<PathBuf>,
    pub timeout_s: u64,
    /// The options the user wrote that act only on some workloads, in the order to report them;
    /// the plan refuses each one its workload would ignore.
    pub written: Vec<Written>,
}

/// An option the user wrote (its name as the command line spells it, `--width`) and where it
/// acts. Which options were written comes from the parser's value sources (`commands/`), never
/// from a list of names kept here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub flag: String,
    pub acts: Acts,
}

/// Where a written option acts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acts {
    /// A dimension acts where [`RunPlan::uses`] says (a script sees it only through
    /// `{name}` in its arguments).
    Dimension(Variable),
    /// Any other option acts on the workloads of its scope.
    On(Scope),
}

/// The workloads a group of options acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    BuiltIn,
    DenseInference,
    Generation,
    SlidingWindow,
    Training,
    CausalLmTraining,
    /// `--prompt-lengths`, `--output-lengths`: the lengths of concurrent requests.
    Requests,
    /// `--quantize`, `--double-quant`: the causal-lm model's load, generating or training.
    CausalLm,
}

impl Scope {
    /// Where the scope's options apply, in words (for the refusal).
    pub(super) fn describe(self) -> &'static str {
        match self {
            Scope::BuiltIn => "the built-in workloads",
            Scope::DenseInference => "dense inference",
            Scope::Generation => "causal-lm generation",
            Scope::SlidingWindow => "causal-lm generation with --cache sliding",
            Scope::Training => "--task train",
            Scope::CausalLmTraining => "causal-lm training (--workload causal-lm --task train)",
            Scope::Requests => "causal-lm and vlm generation",
            Scope::CausalLm => "--workload causal-lm",
        }
    }
}
