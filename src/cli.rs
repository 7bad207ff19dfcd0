//! Command-line definitions (clap) and nothing else: validation of values that clap cannot check
//! alone happens in the value parsers below, so every refusal names the value and the fix.

use clap::parser::ValueSource;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

use crate::dtype::Dtype;
use crate::estimate::kv_cache::CacheKind;
use crate::estimate::{Optimizer, Precision};
use crate::model::quantization::QuantizeMethod;
use crate::schema::alloc_conf::AllocConf;
use crate::schema::spec::{EmptyCache, Task, TrainOptimizer, TrainPrecision, TrainShard, Workload};
use crate::sweep::vary::{Search, VaryArg, parse_vary_arg};
use crate::units::{self, Bytes, Decimal};

mod parse;
pub use parse::device;
use parse::{
    activation_peak, bits, block_size, dimension, element_bytes, fraction, gib, image_size,
    kv_quant_bits, layer_count, positive_size, train_optimizer, train_precision, whole,
};

pub use crate::units::parse_count as positive_u64;

/// Why does the GPU memory peak exceed the estimate, and will this workload fit on that card?
#[derive(Debug, Parser)]
#[command(name = "iteragpu", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Parses `args` as the binary does: the old `estimate --serve` and `estimate --workload
    /// vision` spellings and their options are accepted but hidden from `estimate --help`, which
    /// shows one mode (`estimate serve` and `estimate vision` have their own).
    pub fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::{CommandFactory, FromArgMatches};
        let legacy: Vec<clap::Id> = ServeArgs::augment_args(clap::Command::new("serve"))
            .get_arguments()
            .chain(VisionLegacyArgs::augment_args(clap::Command::new("vision")).get_arguments())
            .map(|a| a.get_id().clone())
            .collect();
        let mut command = Cli::command().mut_subcommand("estimate", |estimate| {
            estimate.mut_args(|arg| {
                if legacy.contains(arg.get_id()) {
                    arg.hide(true)
                } else {
                    arg
                }
            })
        });
        let matches = command.try_get_matches_from_mut(args)?;
        Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut command))
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Memory arithmetic before any GPU is touched: weights, KV cache, training states, reserve.
    Estimate(Box<EstimateArgs>),
    /// What a run will really use: GPUs as the driver declares them, Python, PyTorch, allocator.
    Environment(EnvironmentArgs),
    /// Measure a workload phase by phase in a fresh PyTorch process; raw bytes into a new JSON file.
    Measure(Box<MeasureArgs>),
    /// Change one variable at a time (a fresh process per trial) and find the out-of-memory frontier.
    Sweep(Box<SweepArgs>),
    /// The fiche: calculated, observed and assumed kept apart, in Markdown or self-contained HTML.
    Report(ReportArgs),
    /// Runs side by side, with a warning for every condition that differs besides the variable.
    Compare(CompareArgs),
    /// The GPU catalog, and whether a need fits on one device of each card.
    Cards(CardsArgs),
    /// Every phase's peak for a workload (yours included), predicted on a CPU: the same code runs
    /// on data-less CUDA tensors for a target card. A prediction, never a measurement.
    Predict(Box<PredictArgs>),
    /// Why the peak exceeds the estimate: the gap ledger, term by term, from the estimate to the
    /// driver's view and the card's capacity.
    Explain(ExplainArgs),
    /// Build the result file of a notebook's `iteragpu.Recorder` from the events it recorded
    /// (the Recorder runs it on `save()`; by hand, for the events it kept when it could not).
    #[command(hide = true)]
    FromEvents(FromEventsArgs),
    /// Run one trial of a sweep as a task of its Slurm job array (`sweep --executor slurm`
    /// submits it; not for use by hand).
    #[command(hide = true)]
    SlurmTask(SlurmTaskArgs),
}

#[derive(Debug, Args)]
pub struct FromEventsArgs {
    /// The Recorder's events (JSON Lines, `RESULT.events.jsonl` beside the result it names).
    pub events: PathBuf,
    /// Result file to create (iteragpu.measure/1); an existing file is never overwritten.
    #[arg(long, value_name = "PATH")]
    pub output: PathBuf,
    /// Print the result JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// A measure result (iteragpu.measure/1), or a prediction (iteragpu.prediction/1): its
    /// ledger by storage category at the predicted peak.
    #[arg(required_unless_present = "snapshot", conflicts_with = "snapshot")]
    pub result: Option<PathBuf>,
    /// The output of `iteragpu estimate --json` for the estimate's side.
    #[arg(long, value_name = "EST.json", conflicts_with = "snapshot")]
    pub estimate: Option<PathBuf>,
    /// A prediction (iteragpu.prediction/1); default: the one stored in the result.
    #[arg(long, value_name = "PRED.json", conflicts_with = "snapshot")]
    pub prediction: Option<PathBuf>,
    /// Summarise any PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot`, torch 2.1+)
    /// instead of a result: per device the state at dump time, the peak, what was alive there,
    /// the segments and their free blocks, the phases or time windows.
    #[arg(long, value_name = "FILE.pickle")]
    pub snapshot: Option<PathBuf>,
    /// Write to a new file (an existing one is never overwritten): the ledger as .json
    /// (iteragpu.explain/1) or as its table; with --snapshot, .html (with the timeline chart),
    /// .md or .json (iteragpu.snapshot/1). `-`: the JSON document alone on standard output.
    /// Without it, the table (or --json) goes to standard output.
    #[arg(long, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// With --snapshot: the language of the text and of the file.
    #[arg(long, value_enum, default_value = "en", requires = "snapshot")]
    pub lang: crate::report::format::Lang,
    /// Print JSON (schema iteragpu.explain/1; with --snapshot, iteragpu.snapshot/1) instead of
    /// the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PredictArgs {
    /// First: clap hands the matches to the fields in order, and the groups consume theirs.
    #[command(flatten)]
    pub given: Given,
    /// Predict rank 0 of a job of N ranks (FSDP2 pads every rank to the same shard; a DDP replica
    /// is the same on every rank), on PyTorch's fake process group: world sizes this machine does
    /// not have (8, 64). With --shard ddp|fsdp for causal-lm training.
    #[arg(long, value_name = "N", value_parser = whole::<1, 65_536>, help_heading = "Target")]
    pub world_size: Option<u64>,
    /// The card to predict for, from the catalog (`iteragpu cards`) [default: H200].
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with = "device",
        help_heading = "Target"
    )]
    pub card: Option<String>,
    /// Predict on a smaller card: PyTorch's allocator may reserve SIZE (e.g. 8GiB) minus the
    /// memory outside it, as `sweep --memory-limit` caps it on the card; the first allocation that
    /// does not fit is a predicted out-of-memory. Without it, the card's whole memory applies.
    #[arg(long, allow_negative_numbers = true, value_name = "SIZE", value_parser = positive_size, help_heading = "Target")]
    pub memory_limit: Option<Bytes>,
    /// A measurement made on the GPU machine (iteragpu.measure/1) or the output of `iteragpu
    /// environment --json` run there: its torch, transformers, peft and CUDA versions are
    /// compared with the prediction's (a warning per difference, `like` in the file).
    #[arg(long, value_name = "FILE", help_heading = "Target")]
    pub like: Option<PathBuf>,
    #[command(flatten)]
    pub workload: WorkloadGroups,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A measure result (iteragpu.measure/1) — the node files of one multi-node torchrun job are
    /// merged by their run id — then optionally a sweep series (iteragpu.series/1) of the same
    /// workload; or a prediction (iteragpu.prediction/1), whose fiche says "predicted, not
    /// measured".
    #[arg(required = true, num_args = 1.., value_name = "FILES")]
    pub files: Vec<PathBuf>,
    /// The output of `iteragpu estimate --json` for the calculated section.
    #[arg(long, value_name = "EST.json")]
    pub estimate: Option<PathBuf>,
    /// Merge the node files of one run id even when they disagree (world size, nnodes, node or
    /// global ranks, workload, dimensions, torch, code): each difference becomes a warning.
    #[arg(long)]
    pub allow_mismatch: bool,
    /// The fiche to create: .md for Markdown, .html for one self-contained HTML file.
    #[arg(long, value_name = "PATH")]
    pub output: PathBuf,
    /// Language of the fiche.
    #[arg(long, value_enum, default_value = "en")]
    pub lang: crate::report::format::Lang,
    /// The one unit of the fiche's sizes: gib (2^30 bytes, as PyTorch and nvidia-smi count) or gb
    /// (10^9, as vendors label cards); raw bytes stay on hover and in the embedded results.
    #[arg(long, value_enum, default_value = "gib")]
    pub units: crate::report::format::Units,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Two or more measure results or predictions; a prediction beside a measurement of the
    /// same workload gets its error phase by phase.
    #[arg(required = true, num_args = 2..)]
    pub files: Vec<PathBuf>,
    /// Also write the table as CSV (one row per run, phase and device; raw bytes).
    #[arg(long, value_name = "PATH")]
    pub csv: Option<PathBuf>,
    /// Merge the node files of one run id even when they disagree (each difference becomes a
    /// warning).
    #[arg(long)]
    pub allow_mismatch: bool,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CardsArgs {
    /// A memory need per device: 17.04GiB, 18GB or raw bytes.
    #[arg(long, value_name = "SIZE", value_parser = units::parse_size, conflicts_with = "from")]
    pub need: Option<Bytes>,
    /// Take the need from an estimate, a measure result, a series or a prediction.
    #[arg(long, value_name = "FILE")]
    pub from: Option<PathBuf>,
    /// Memory a process holds outside PyTorch's allocator (CUDA context, libraries), subtracted from
    /// each card; default 1GiB, assumed (612 MiB was read on an H200 with torch 2.11), unless --from
    /// gives a measured value.
    #[arg(long, value_name = "SIZE", value_parser = units::parse_size)]
    pub overhead: Option<Bytes>,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    /// First: clap hands the matches to the fields in order, and the groups consume theirs.
    #[command(flatten)]
    pub given: Given,
    /// NAME=V1,V2,… (a list) or NAME=LO..HI (a range, with --search frontier). Twice for a grid.
    /// NAME is one of batch, context, width, depth, prompt-tokens, new-tokens, steps, resolution,
    /// images, requests, images-per-request (those the workload uses; not one also fixed by its
    /// own option). `alloc_conf=default,expandable_segments[,cudaMallocAsync]` compares allocator
    /// settings in fresh processes, alone or at each value of one listed dimension.
    #[arg(long, value_name = "NAME=VALUES", value_parser = parse_vary_arg, help_heading = "Sweep")]
    pub vary: Vec<VaryArg>,
    /// Search the success / out-of-memory frontier over a --vary range.
    #[arg(long, value_enum, help_heading = "Sweep")]
    pub search: Option<Search>,
    /// The frontier search's step: it stops when the largest value that fits and the smallest
    /// that does not are this many units of the varied dimension apart.
    #[arg(long, allow_negative_numbers = true, value_name = "N", default_value = "1", value_parser = positive_u64, help_heading = "Sweep")]
    pub frontier_step: u64,
    /// Most trials a frontier search may run.
    #[arg(long, allow_negative_numbers = true, value_name = "N", default_value = "24", value_parser = positive_u64, help_heading = "Sweep")]
    pub max_trials: u64,
    /// Emulate a smaller card: cap PyTorch at SIZE (e.g. 8GiB) minus the non-PyTorch memory of the process
    /// (with --predict: the capacity the predictions are held against, on --card's allocator if given).
    #[arg(long, allow_negative_numbers = true, value_name = "SIZE", value_parser = positive_size, help_heading = "Sweep")]
    pub memory_limit: Option<Bytes>,
    /// Emulate a card of the catalog (`iteragpu cards`), e.g. L4 or "RTX 4090" (with --predict: the
    /// card predicted for).
    #[arg(long, value_name = "NAME", help_heading = "Sweep")]
    pub card: Option<String>,
    /// A JSON file of reference loads: {"loads": [{"name": "usual", "batch": 1, "context": 512}, …]}.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["vary", "processes"], help_heading = "Sweep")]
    pub loads: Option<PathBuf>,
    /// Run the same configuration in N fresh processes (not the same protocol as N repeats).
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64, conflicts_with = "vary", help_heading = "Sweep")]
    pub processes: Option<u64>,
    /// Skip the frontier search's prediction hint (with --search frontier; sweep trials are
    /// measured, not predicted).
    #[arg(long, help_heading = "Sweep")]
    pub no_prediction: bool,
    /// Predict every trial on data-less CUDA tensors (CPU, no GPU) instead of measuring it, held
    /// against --card NAME or --memory-limit SIZE: a predicted frontier, labelled as predicted.
    #[arg(long, help_heading = "Sweep")]
    pub predict: bool,
    /// Measure on these GPUs of this machine at once, one trial per GPU, each trial a fresh
    /// process that sees only its GPU (CUDA_VISIBLE_DEVICES; cuda:0 to the workload): indices
    /// (0,1,2,3), UUIDs, or all (every GPU NVML lists). A frontier search tries as many values per
    /// round. GPUs of different models are refused.
    #[arg(long, value_name = "LIST|all", help_heading = "Sweep")]
    pub gpus: Option<crate::measure::gpus::Gpus>,
    /// With --gpus: run on GPUs of different models anyway (the series and its table say so).
    #[arg(long, requires = "gpus", help_heading = "Sweep")]
    pub allow_mixed: bool,
    #[command(flatten)]
    pub workload: WorkloadGroups,
    #[command(flatten)]
    pub distributed: DistributedArgs,
    #[command(flatten)]
    pub history: HistoryArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

/// Where a sweep's trials run: here, or as the tasks of a Slurm job array; and a series resumed.
#[derive(Debug, Args)]
#[command(next_help_heading = "Cluster")]
pub struct ClusterArgs {
    /// Where the trials run: `local` (this machine) or `slurm` (a job array submitted with
    /// sbatch, one task per trial, on a filesystem the nodes share).
    #[arg(long, value_enum, default_value = "local")]
    pub executor: crate::sweep::runner::slurm::Executor,
    /// With --executor slurm: the partition (sbatch --partition).
    #[arg(long, value_name = "NAME")]
    pub partition: Option<String>,
    /// With --executor slurm: the generic resources of each task, e.g. gpu:1 (sbatch --gres).
    #[arg(long, value_name = "GRES")]
    pub gres: Option<String>,
    /// With --executor slurm: each task's time limit, in Slurm's format (minutes, or
    /// [D-]HH:MM:SS; sbatch --time). A task stopped by it is a trial with status timeout.
    #[arg(long, value_name = "TIME")]
    pub time: Option<String>,
    /// With --executor slurm: the account charged (sbatch --account).
    #[arg(long, value_name = "NAME")]
    pub account: Option<String>,
    /// With --executor slurm: one more sbatch option, as one argument (repeat it), e.g.
    /// --sbatch-arg=--qos=short.
    #[arg(long, value_name = "ARG", allow_hyphen_values = true)]
    pub sbatch_arg: Vec<String>,
    /// A series written before (by the same sweep): its trials that ended ok, out of memory or
    /// unpredictable are kept, the others (failed, crashed, timed out, cancelled) run again; the
    /// result is a new series at --output.
    #[arg(long, value_name = "SERIES.json")]
    pub resume: Option<PathBuf>,
}

/// The hidden command a Slurm task runs: one cell of a sweep.
#[derive(Debug, Args)]
pub struct SlurmTaskArgs {
    /// The array's folder (`SERIES.slurm/array-N`); the task is `SLURM_ARRAY_TASK_ID`.
    pub array_dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct EnvironmentArgs {
    /// Devices to check, comma-separated (cuda:0,cuda:1).
    #[arg(long, value_name = "LIST", default_value = "cuda:0", value_delimiter = ',', value_parser = device)]
    pub device: Vec<String>,
    /// Python interpreter (default: $ITERAGPU_PYTHON, else the Python beside the iteragpu binary —
    /// the environment pip installed it in —, else python3).
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// Stop the interpreter if it has not reported after this many seconds.
    #[arg(long, allow_negative_numbers = true, value_name = "SECONDS", default_value = "120", value_parser = positive_u64)]
    pub timeout: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `iteragpu measure`: every group of options, each of which acts on a measurement.
#[derive(Debug, Args)]
pub struct MeasureArgs {
    /// First: clap hands the matches to the fields in order, and the groups consume theirs.
    #[command(flatten)]
    pub given: Given,
    #[command(flatten)]
    pub workload: WorkloadGroups,
    #[command(flatten)]
    pub distributed: DistributedArgs,
    #[command(flatten)]
    pub history: HistoryArgs,
    #[command(flatten)]
    pub timeline: TimelineArgs,
    #[command(flatten)]
    pub run: RunArgs,
    /// Skip the prediction stored next to the result (it runs the workload again on data-less
    /// tensors on the CPU).
    #[arg(long, help_heading = "Run")]
    pub no_prediction: bool,
}

/// The groups that define a workload, shared by measure, sweep and predict.
#[derive(Debug, Args)]
pub struct WorkloadGroups {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub built_in: BuiltInArgs,
    #[command(flatten)]
    pub dense: DenseArgs,
    #[command(flatten)]
    pub generation: GenerationArgs,
    #[command(flatten)]
    pub sliding: SlidingWindowArgs,
    #[command(flatten)]
    pub training: TrainingArgs,
    #[command(flatten)]
    pub lm_training: LmTrainingArgs,
    #[command(flatten)]
    pub quantize: QuantizeArgs,
    #[command(flatten)]
    pub vision: VisionArgs,
    #[command(flatten)]
    pub allocator: AllocatorArgs,
}

/// What runs (a built-in workload or a script), where, and the dimensions every workload reads.
#[derive(Debug, Args)]
#[command(next_help_heading = "Workload")]
pub struct WorkloadArgs {
    /// Built-in workload (not with --script).
    #[arg(long, value_enum, default_value = "dense", conflicts_with = "script")]
    pub workload: Workload,
    /// Your own Python script, run in a fresh worker; mark phases with `with iteragpu.phase("…"):`.
    /// Arguments after `--` are passed to it; `{batch}`, `{context}`, … in them take the values of
    /// --batch, --context, … (the only way those options reach a script).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["model", "task"])]
    pub script: Option<PathBuf>,
    /// Arguments for --script (after `--`).
    #[arg(last = true, value_name = "ARGS")]
    pub script_args: Vec<String>,
    /// causal-lm, vision: a config.json, or a folder holding one (weights are random; no weight is
    /// downloaded); vision also takes `timm:NAME` (a timm model, where timm is installed); vlm: a
    /// folder holding config.json and preprocessor_config.json. Or a Hugging Face Hub id,
    /// ORG/NAME[@REVISION]: its configs are fetched into the Hugging Face cache (HF_HOME,
    /// HF_TOKEN, HF_ENDPOINT, HF_HUB_OFFLINE as huggingface_hub reads them).
    #[arg(long, value_name = "PATH|ORG/NAME")]
    pub model: Option<PathBuf>,
    /// Inference or a training loop (forward, loss, backward, optimizer_step, zero_grad per step).
    #[arg(long, value_enum, default_value = "infer")]
    pub task: Task,
    /// Devices, comma-separated; several devices split the dense network across them (never one
    /// pool) [default: cuda:0]. For predict: a device of this machine whose card to predict for.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = device)]
    pub device: Vec<String>,
    /// Sequences processed together [default: 1].
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64)]
    pub batch: Option<u64>,
    /// Dense: positions of the synthetic input (not an LLM context). causal-lm training: sequence
    /// length [default: 16].
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64)]
    pub context: Option<u64>,
    /// Seed of the synthetic inputs and weights.
    #[arg(long, value_name = "N", default_value = "0", value_parser = whole::<0, { u64::MAX }>)]
    pub seed: u64,
}

/// Options of the built-in workloads (a script sets its own).
#[derive(Debug, Args)]
#[command(next_help_heading = "Workload")]
pub struct BuiltInArgs {
    /// dtype of weights and inputs for inference (default: float32 for dense, the config's
    /// torch_dtype or bfloat16 for causal-lm); training takes it from --precision.
    #[arg(long, value_name = "DTYPE")]
    pub dtype: Option<Dtype>,
    /// Measure the whole loop as one phase with no synchronization between its steps.
    #[arg(long)]
    pub whole_loop: bool,
}

/// The dense network's shape, and how its inference is repeated.
#[derive(Debug, Args)]
#[command(next_help_heading = "Dense workload")]
pub struct DenseArgs {
    /// Dense: width of the network and of its inputs [default: 64].
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64)]
    pub width: Option<u64>,
    /// Dense: residual blocks [default: 4].
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64)]
    pub depth: Option<u64>,
    /// Dense inference: warm-up passes, measured together as one phase [default: 3].
    #[arg(long, value_name = "N", value_parser = whole::<0, 100_000>)]
    pub warmup: Option<u64>,
    /// Dense inference: warm repeats, each measured as its own phase [default: 5].
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64)]
    pub repeats: Option<u64>,
    /// Dense inference: empty PyTorch's cache between warm repeats (changes the conditions;
    /// recorded) [default: never].
    #[arg(long, value_enum)]
    pub empty_cache: Option<EmptyCache>,
}

/// causal-lm generation: the prompt, the tokens generated and the KV cache.
#[derive(Debug, Args)]
#[command(next_help_heading = "Language models")]
pub struct GenerationArgs {
    /// causal-lm generation: prompt length in tokens [default: 128].
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64)]
    pub prompt_tokens: Option<u64>,
    /// causal-lm generation: tokens generated one by one after the prompt [default: 32].
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64)]
    pub new_tokens: Option<u64>,
    /// causal-lm generation: KV-cache strategy [default: dynamic].
    #[arg(long, value_enum)]
    pub cache: Option<CacheKind>,
    /// causal-lm and vlm generation: N requests alive together, each with its own KV cache (and
    /// its images), prefilled one after another then decoded in turn (not one padded batch)
    /// [default: one generation; with length lists, their longest list's size].
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64)]
    pub requests: Option<u64>,
    /// causal-lm and vlm generation: the requests' prompt lengths, cycled over them
    /// (--prompt-lengths 128,512,2048) [default: --prompt-tokens for all].
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = positive_u64, conflicts_with = "prompt_tokens")]
    pub prompt_lengths: Vec<u64>,
    /// causal-lm and vlm generation: the requests' output lengths, cycled over them
    /// (--output-lengths 64,256) [default: --new-tokens for all].
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = positive_u64, conflicts_with = "new_tokens")]
    pub output_lengths: Vec<u64>,
}

/// The vision workload's images (dimensions: a sweep may vary them).
#[derive(Debug, Args)]
#[command(next_help_heading = "Vision")]
pub struct VisionArgs {
    /// vision, vlm: the images' size in pixels, N (square) or HxW, before the model's processor
    /// [default: the config's image_size, else 224].
    #[arg(long, value_name = "N|HxW", value_parser = image_size)]
    pub resolution: Option<(u64, Option<u64>)>,
    /// Vision: images processed together (a forward's batch) [default: 1].
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64)]
    pub images: Option<u64>,
    /// vlm: images in each request's prompt, each processed into image tokens by the model's own
    /// processor [default: 1].
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64)]
    pub images_per_request: Option<u64>,
}

/// `estimate --workload vision`'s images: the vision workload's two dimensions and no
/// `--images-per-request` (estimate has no multimodal terms: `predict --workload vlm` has them).
#[derive(Debug, Args)]
#[command(next_help_heading = "Vision")]
pub struct EstimateImageArgs {
    /// vision: the images' size in pixels, N (square) or HxW [default: the config's image_size,
    /// else 224].
    #[arg(long, value_name = "N|HxW", value_parser = image_size)]
    pub resolution: Option<(u64, Option<u64>)>,
    /// Vision: images processed together (a forward's batch) [default: 1].
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64)]
    pub images: Option<u64>,
    /// Not an estimate's option (hidden): refused with the command that has it, `predict
    /// --workload vlm`, rather than clap's "unexpected argument".
    #[arg(long, hide = true, allow_negative_numbers = true, value_name = "N")]
    pub images_per_request: Option<String>,
}

/// The window of a sliding KV cache (its own group: it acts only with `--cache sliding`).
#[derive(Debug, Args)]
#[command(next_help_heading = "Language models")]
pub struct SlidingWindowArgs {
    /// causal-lm with --cache sliding: window in tokens (default: the model's sliding_window).
    #[arg(long, value_name = "N", value_parser = positive_u64)]
    pub window: Option<u64>,
}

/// The training loop of either built-in workload (with `--task train`).
#[derive(Debug, Args)]
#[command(next_help_heading = "Training")]
pub struct TrainingArgs {
    /// Training steps, each recorded (at least 2: the first creates the optimizer states) [default: 2].
    #[arg(long, value_name = "N", value_parser = whole::<2, 10_000>)]
    pub steps: Option<u64>,
    /// Optimizer of the training loop: adamw, sgd, or bitsandbytes' adamw-8bit or paged-adamw-8bit
    /// (QLoRA's: its states in CUDA unified memory, outside PyTorch's allocator) [default: adamw].
    #[arg(long, value_name = "NAME", value_parser = train_optimizer)]
    pub optimizer: Option<TrainOptimizer>,
    /// Training precision: fp32, bf16-mixed (autocast to bfloat16, float32 weights), fp16-mixed
    /// (autocast to float16 with a GradScaler) or bf16 (everything in bfloat16); a frozen LoRA
    /// base in the compute dtype. The same default and meanings as estimate's [default: fp32].
    #[arg(long, value_name = "NAME", value_parser = train_precision)]
    pub precision: Option<TrainPrecision>,
    /// Recompute activations in the backward pass; step durations and losses are recorded.
    #[arg(long)]
    pub gradient_checkpointing: bool,
}

/// What only causal-lm training does: sharding over ranks and LoRA adapters.
#[derive(Debug, Args)]
#[command(next_help_heading = "Training")]
pub struct LmTrainingArgs {
    /// causal-lm training under torchrun: wrap the model in DDP, or shard it with FSDP2
    /// (`fully_shard` per decoder layer, bfloat16 compute with --precision bf16-mixed).
    #[arg(long, value_enum)]
    pub shard: Option<TrainShard>,
    /// causal-lm: LoRA rank (through peft).
    #[arg(long, value_name = "R", value_parser = positive_u64, requires = "lora_targets")]
    pub lora_rank: Option<u64>,
    /// causal-lm: modules that get LoRA adapters, comma-separated, or `all-linear` (peft's: every
    /// linear layer but the output head).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        requires = "lora_rank"
    )]
    pub lora_targets: Vec<String>,
}

/// A float checkpoint loaded quantized by bitsandbytes, as transformers' `BitsAndBytesConfig`
/// loads it (estimate, and the causal-lm workload's generation and training).
#[derive(Debug, Args)]
#[command(next_help_heading = "Quantization")]
pub struct QuantizeArgs {
    /// causal-lm: load the linear layers quantized through transformers' BitsAndBytesConfig: nf4
    /// or fp4 (load_in_4bit: two codes a byte, an fp32 absmax per 64 values, the compute dtype
    /// --dtype or the precision's), int8 (load_in_8bit, LLM.int8: int8 weights, an fp32 scale per
    /// row); the output head, embeddings and norms stay in the compute dtype.
    #[arg(long, value_enum, value_name = "METHOD", requires = "model")]
    pub quantize: Option<QuantizeMethod>,
    /// With --quantize nf4|fp4: bnb_4bit_use_double_quant, the absmax quantized in turn (uint8,
    /// an fp32 absmax per 256 blocks): QLoRA's setting [default: off, as transformers'].
    #[arg(long, requires = "quantize")]
    pub double_quant: bool,
}

/// The caching allocator's setting, which a prediction models too.
#[derive(Debug, Args)]
#[command(next_help_heading = "Allocator")]
pub struct AllocatorArgs {
    /// The caching allocator's setting for the worker: default, expandable_segments or
    /// cudaMallocAsync (replaces PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF for this run;
    /// default: inherit them).
    #[arg(long, value_name = "SETTING", value_parser = AllocConf::parse)]
    pub alloc_conf: Option<AllocConf>,
}

/// What the GPU's allocator records (measure and sweep: a prediction has no allocator).
#[derive(Debug, Args)]
#[command(next_help_heading = "Allocator")]
pub struct HistoryArgs {
    /// Record nothing in the allocator (by default the Python frames of live allocations are
    /// kept, so that an out-of-memory names the largest live tensors).
    #[arg(long)]
    pub no_history: bool,
}

/// One run's allocation timeline (measure only: a sweep keeps live frames for its post-mortems).
#[derive(Debug, Args)]
#[command(next_help_heading = "Allocator")]
pub struct TimelineArgs {
    /// Record PyTorch's allocation history and write its snapshot next to the result
    /// (RESULT.snapshot.pickle, for PyTorch's memory_viz), summarised per phase in the result.
    #[arg(long, conflicts_with = "no_history")]
    pub timeline: bool,
    /// The most allocation events --timeline keeps (the oldest are dropped first).
    #[arg(long, value_name = "N", default_value = "100000", value_parser = whole::<1, 100_000_000>, requires = "timeline")]
    pub timeline_entries: u64,
}

/// A torchrun job (measure and sweep; predict follows ranks with `--world-size`).
#[derive(Debug, Args)]
#[command(next_help_heading = "Distributed")]
pub struct DistributedArgs {
    /// Run under torchrun with this many ranks on this node, each a fresh worker on its own
    /// device (`--device` lists one per local rank; default cuda:0, cuda:1, …).
    #[arg(long, value_name = "N", value_parser = whole::<1, 1024>)]
    pub nproc_per_node: Option<u64>,
    /// Number of nodes of the torchrun job (each node runs its own iteragpu and writes its file).
    #[arg(long, value_name = "M", value_parser = whole::<1, 65_536>, requires = "nproc_per_node")]
    pub nnodes: Option<u64>,
    /// This node's rank among --nnodes (0 … M−1).
    #[arg(long, value_name = "R", requires = "nnodes")]
    pub node_rank: Option<u64>,
    /// The rendezvous of a multi-node job, the same on every node (HOST:PORT).
    #[arg(long, value_name = "HOST:PORT", requires = "nnodes")]
    pub rdzv_endpoint: Option<String>,
    /// The job's id, the same on every node; it names the run that `report` merges.
    #[arg(long, value_name = "ID", requires = "nnodes")]
    pub rdzv_id: Option<String>,
}

/// The worker process and the output, for every command that starts one.
#[derive(Debug, Args)]
#[command(next_help_heading = "Run")]
pub struct RunArgs {
    /// Leave running the processes the workload started in their own session and left behind
    /// (by default each is named in the result and ended, so it holds no GPU memory after the
    /// run).
    #[arg(long)]
    pub keep_children: bool,
    /// Result file to create; an existing file is refused before anything runs (measure and
    /// sweep need one; predict names one when none is given, and `-` writes the prediction to
    /// standard output only).
    #[arg(long, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Python interpreter with PyTorch (default: $ITERAGPU_PYTHON, else the Python beside the
    /// iteragpu binary — the environment pip installed it in —, else python3).
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// Stop the worker after this many seconds (status `timeout`, results kept).
    #[arg(long, allow_negative_numbers = true, value_name = "SECONDS", default_value = "3600", value_parser = positive_u64)]
    pub timeout: u64,
    /// Print the result JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// The ids of the options written on the command line (clap's value sources), not defaulted:
/// what lets a command refuse an option its workload would ignore without a list of names.
/// Flattened into a command, it adds no option and reads the command's own matches.
#[derive(Clone, Debug, Default)]
pub struct Given(std::collections::BTreeSet<String>);

impl Given {
    pub fn contains(&self, id: &str) -> bool {
        self.0.contains(id)
    }
}

impl clap::FromArgMatches for Given {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(Given(
            matches
                .ids()
                .filter(|id| matches.value_source(id.as_str()) == Some(ValueSource::CommandLine))
                .map(|id| id.as_str().to_string())
                .collect(),
        ))
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Args for Given {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        cmd
    }
}

#[derive(Debug, Args)]
#[command(
    next_help_heading = "Weights",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct EstimateArgs {
    /// First: clap hands the matches to the fields in order, and the groups consume theirs.
    #[command(flatten)]
    pub given: Given,
    /// Another mode, with its own options: `estimate serve ENGINE …`.
    #[command(subcommand)]
    pub mode: Option<EstimateMode>,
    /// Number of parameters, in digits (7000000000).
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64, requires = "bits", conflicts_with = "model")]
    pub parameters: Option<u64>,
    /// Bits per stored parameter: 4, 8, 16, 32 or an effective width such as 4.5.
    #[arg(long, allow_negative_numbers = true, value_name = "B", value_parser = bits, requires = "parameters")]
    pub bits: Option<Decimal>,
    /// A Hugging Face config.json, or a folder holding one and optionally *.safetensors shards;
    /// or a Hub id, ORG/NAME[@REVISION] (its configs and its shards' headers are fetched, never a
    /// weight; HF_HOME, HF_TOKEN, HF_ENDPOINT, HF_HUB_OFFLINE as huggingface_hub reads them).
    #[arg(long, value_name = "PATH|ORG/NAME")]
    pub model: Option<PathBuf>,
    /// Compute dtype of the weights (default: the config's torch_dtype, else float32).
    #[arg(long, value_name = "DTYPE")]
    pub dtype: Option<Dtype>,

    #[command(flatten)]
    pub stated: ReserveArgs,

    #[command(flatten)]
    pub kv_shape: KvShapeArgs,
    #[command(flatten)]
    pub load: KvLoadArgs,
    #[command(flatten)]
    pub kv_cache: KvCacheArgs,
    #[command(flatten)]
    pub quantized: QuantizedCacheArgs,

    #[command(flatten)]
    pub step: TrainStepArgs,
    /// LoRA rank: train adapters on --lora-targets instead of the whole model.
    #[arg(long, value_name = "R", value_parser = dimension, requires_all = ["train", "lora_targets"], help_heading = "Training")]
    pub lora_rank: Option<u64>,
    /// Modules that get LoRA adapters, comma-separated (q_proj,v_proj), or `all-linear` (peft's:
    /// every linear layer but the output head).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        requires = "lora_rank",
        help_heading = "Training"
    )]
    pub lora_targets: Vec<String>,

    #[command(flatten)]
    pub activations: ActivationArgs,

    #[command(flatten)]
    pub quantize: QuantizeArgs,

    /// Sharded data-parallel training (with --train): every figure becomes ONE rank's memory.
    /// ddp (full replica + reducer buckets), zero1/zero2/zero3 (DeepSpeed), fsdp (FSDP2).
    #[arg(
        long,
        value_enum,
        value_name = "STRATEGY",
        help_heading = "Sharded training"
    )]
    pub shard: Option<crate::estimate::Strategy>,

    #[command(flatten)]
    pub shard_options: ShardOptionsArgs,

    #[command(flatten)]
    pub serve: ServeArgs,

    #[command(flatten)]
    pub vision: VisionLegacyArgs,

    /// Print JSON (schema iteragpu.estimate/1) instead of the table.
    #[arg(long, help_heading = "Output")]
    pub json: bool,
}

/// The old spelling `estimate --workload vision …` (hidden from `estimate --help`, which shows
/// `estimate vision` instead); it still estimates, with a note, for one release.
#[derive(Debug, Args)]
pub struct VisionLegacyArgs {
    /// What --model runs: causal-lm (a language model) or vision (an image encoder: ViT, DeiT,
    /// a CLIP or SigLIP vision tower; with --resolution and --images) [default: causal-lm].
    #[arg(
        long,
        value_enum,
        value_name = "WORKLOAD",
        requires = "model",
        help_heading = "Vision"
    )]
    pub workload: Option<EstimateWorkload>,
    #[command(flatten)]
    pub images: EstimateImageArgs,
}

/// A training step instead of inference, with its optimizer and precision (`estimate` and
/// `estimate vision`).
#[derive(Debug, Args)]
#[command(next_help_heading = "Training")]
pub struct TrainStepArgs {
    /// Estimate a training step instead of inference.
    #[arg(long)]
    pub train: bool,
    /// Optimizer whose states are counted.
    #[arg(long, value_enum, default_value = "adamw", requires = "train")]
    pub optimizer: Optimizer,
    /// Training precision, with the same meanings and default as predict's and measure's (fp32:
    /// what PyTorch and the Hugging Face Trainer do when nothing is asked).
    #[arg(long, value_enum, default_value = "fp32", requires = "train")]
    pub precision: Precision,
}

/// The reserve the guide adds on top of the terms, as the user states it.
#[derive(Debug, Args)]
#[command(next_help_heading = "Reserve")]
pub struct ReserveArgs {
    /// Reserve in GiB (2^30 bytes), as in the guide: --reserve-gib 4.
    #[arg(long, allow_negative_numbers = true, value_name = "GIB", value_parser = gib, conflicts_with = "reserve")]
    pub reserve_gib: Option<(Bytes, String)>,
    /// Reserve as a size: 4GiB, 4.5GB or raw bytes (a bare 4G is ambiguous and refused).
    #[arg(long, allow_negative_numbers = true, value_name = "SIZE", value_parser = units::parse_size)]
    pub reserve: Option<Bytes>,
}

/// `estimate vision --model DIR`: an image model's encoder at a resolution, for a batch of
/// images, inference or a training step.
#[derive(Debug, Args)]
#[command(next_help_heading = "Model")]
pub struct EstimateVisionArgs {
    /// First: clap hands the matches to the fields in order, and the groups consume theirs.
    #[command(flatten)]
    pub given: Given,
    /// An image model's config.json (ViT, DeiT, ConvNeXt, Swin, a CLIP or SigLIP vision tower),
    /// or a folder holding one; or a Hub id, ORG/NAME[@REVISION].
    #[arg(long, value_name = "PATH|ORG/NAME", required = true)]
    pub model: PathBuf,
    /// Compute dtype of the weights (default: the config's torch_dtype, else float32).
    #[arg(long, value_name = "DTYPE")]
    pub dtype: Option<Dtype>,
    #[command(flatten)]
    pub images: EstimateImageArgs,
    #[command(flatten)]
    pub stated: ReserveArgs,
    #[command(flatten)]
    pub step: TrainStepArgs,
    /// Recompute activations in the backward pass (keep only each layer's input).
    #[arg(long, requires = "train", help_heading = "Training")]
    pub gradient_checkpointing: bool,
    /// Print JSON (schema iteragpu.estimate/1) instead of the table.
    #[arg(long, help_heading = "Output")]
    pub json: bool,
}

/// `estimate`'s modes beside the language model's weights, KV cache and training.
#[derive(Debug, clap::Subcommand)]
pub enum EstimateMode {
    /// One GPU of a serving engine (vLLM, SGLang), planned by the engine's own rules: its KV
    /// pool, the requests it holds at once, and whether it starts at all.
    Serve(Box<EstimateServeArgs>),
    /// An image model's encoder (ViT, DeiT, ConvNeXt, Swin, a CLIP or SigLIP vision tower) at a
    /// resolution, for a batch of images, inference or a training step.
    Vision(Box<EstimateVisionArgs>),
}

/// The workloads `estimate` models from a config.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EstimateWorkload {
    CausalLm,
    Vision,
}

/// The KV cache's layout given by hand (without --model).
#[derive(Debug, Args)]
#[command(next_help_heading = "KV cache")]
pub struct KvShapeArgs {
    /// Attention layers that keep a KV cache (without --model; at most 100,000).
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = layer_count)]
    pub kv_layers: Option<u64>,
    /// KV heads per layer: the model's key/value heads, not its query heads (without --model).
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = dimension)]
    pub kv_heads: Option<u64>,
    /// Dimension of one head (without --model).
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = dimension)]
    pub head_dim: Option<u64>,
}

/// The tokens and sequences held: the KV cache's load, and the activations' with --train.
#[derive(Debug, Args)]
#[command(next_help_heading = "KV cache")]
pub struct KvLoadArgs {
    /// Tokens per sequence kept in the cache (prompt + generated); alias --context.
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64)]
    pub tokens: Option<u64>,
    /// `--context`, the same as --tokens: its own argument (shown as --tokens' alias) so that a
    /// refusal names the flag as typed.
    #[arg(long, hide = true, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64, conflicts_with = "tokens")]
    pub context: Option<u64>,
    /// Sequences held at once (batch, concurrent requests); alias --batch. Default 1.
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64)]
    pub sequences: Option<u64>,
    /// `--batch`, the same as --sequences (its own argument, as --context).
    #[arg(long, hide = true, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64, conflicts_with = "sequences")]
    pub batch: Option<u64>,
    /// Concurrent requests, each with its own cache of its own length (instead of --tokens and
    /// --sequences): the KV cache is Σ (prompt + output) over them, beside the padded batch.
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64, conflicts_with_all = ["tokens", "context", "sequences", "batch", "prompt_tokens"], requires_all = ["prompt_lengths", "output_lengths"])]
    pub requests: Option<u64>,
    /// With --requests: the prompts' lengths, cycled over the requests (128,512,2048).
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = positive_u64, requires = "requests")]
    pub prompt_lengths: Vec<u64>,
    /// With --requests: the tokens each request generates, cycled over the requests (64,256).
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = positive_u64, requires = "requests")]
    pub output_lengths: Vec<u64>,
}

impl KvLoadArgs {
    /// `--tokens` or `--context`.
    pub fn tokens(&self) -> Option<u64> {
        self.tokens.or(self.context)
    }

    /// `--sequences` or `--batch`.
    pub fn sequences(&self) -> Option<u64> {
        self.sequences.or(self.batch)
    }
}

/// How the KV cache keeps its values (inference only).
#[derive(Debug, Args)]
#[command(next_help_heading = "KV cache")]
pub struct KvCacheArgs {
    /// Tokens of the prompt among --tokens: sliding layers hold the whole prompt until the first
    /// decoding step (default: all the tokens, an upper bound).
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64)]
    pub prompt_tokens: Option<u64>,
    /// Bytes per cached value (2 for bf16/fp16, at most 8). Default: the compute dtype's width.
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = element_bytes, conflicts_with = "kv_dtype")]
    pub kv_bytes: Option<u64>,
    /// Dtype of cached values, instead of --kv-bytes.
    #[arg(long, value_name = "DTYPE")]
    pub kv_dtype: Option<Dtype>,
    /// Cache strategy [default: dynamic].
    #[arg(long, value_enum)]
    pub cache: Option<CacheKind>,
    /// Preallocated length of a static cache (default: --tokens).
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64)]
    pub max_cache_len: Option<u64>,
    /// Window of the sliding strategy (default: the model's sliding_window).
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64)]
    pub window: Option<u64>,
}

/// The settings of --cache quantized.
#[derive(Debug, Args)]
#[command(next_help_heading = "KV cache")]
pub struct QuantizedCacheArgs {
    /// Bits of a quantized cache (transformers' QuantizedCache: 2 or 4) [default: 4].
    #[arg(long, value_name = "N", value_parser = kv_quant_bits)]
    pub kv_quant_bits: Option<u64>,
    /// Values per quantization group of a quantized cache [default: 64].
    #[arg(long, value_name = "N", value_parser = positive_u64)]
    pub kv_group_size: Option<u64>,
    /// Most recent tokens kept in full precision by a quantized cache [default: 128].
    #[arg(long, value_name = "N", value_parser = whole::<0, { u64::MAX }>)]
    pub kv_residual: Option<u64>,
}

/// How a training step keeps its activations (they need the model's dimensions and --context).
#[derive(Debug, Args)]
#[command(next_help_heading = "Training")]
pub struct ActivationArgs {
    /// Recompute activations in the backward pass (keep only each layer's input).
    #[arg(long, requires = "train")]
    pub gradient_checkpointing: bool,
    /// Count attention without the s×s scores even if the config names eager (by default the
    /// config's attn_implementation decides, else transformers' default SDPA).
    #[arg(long, requires = "train")]
    pub flash_attention: bool,
}

/// The old spelling `estimate --serve ENGINE …` (hidden from `estimate --help`, which shows
/// `estimate serve ENGINE` instead); it still plans, with a note, for one release.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Plan one GPU of a serving engine's KV pool by its own rules: `estimate serve ENGINE`.
    #[arg(long, value_enum, value_name = "ENGINE", requires_all = ["model", "card"])]
    pub serve: Option<crate::estimate::serving::Engine>,
    #[command(flatten)]
    pub options: ServeOptions,
}

/// `estimate serve ENGINE --model DIR --card NAME`: one GPU of a serving engine, by its rules.
#[derive(Debug, Args)]
#[command(next_help_heading = "Model")]
pub struct EstimateServeArgs {
    /// First: clap hands the matches to the fields in order, and the groups consume theirs.
    #[command(flatten)]
    pub given: Given,
    /// The engine whose rules plan the GPU's memory.
    #[arg(id = "serve", value_enum, value_name = "ENGINE")]
    pub engine: crate::estimate::serving::Engine,
    /// A Hugging Face config.json, or a folder holding one and optionally *.safetensors shards;
    /// or a Hub id, ORG/NAME[@REVISION].
    #[arg(long, value_name = "PATH|ORG/NAME", required = true)]
    pub model: PathBuf,
    /// The dtype served [default: the engine's `auto` rule on the config's torch_dtype].
    #[arg(long, value_name = "DTYPE")]
    pub dtype: Option<Dtype>,
    #[command(flatten)]
    pub options: ServeOptions,
    /// Print JSON (schema iteragpu.estimate/1) instead of the table.
    #[arg(long, help_heading = "Output")]
    pub json: bool,
}

/// A serving engine's settings and, when read from its log, the figures it measures at start-up.
#[derive(Debug, Args)]
#[command(next_help_heading = "Serving")]
pub struct ServeOptions {
    /// The GPU, by its catalog name (iteragpu cards).
    #[arg(long, value_name = "NAME", requires = "serve")]
    pub card: Option<String>,
    /// vLLM's gpu_memory_utilization (SGLang: mem_fraction_static), in (0, 1] [default: the engine's].
    #[arg(long, value_name = "F", value_parser = fraction, requires = "serve")]
    pub gpu_memory_utilization: Option<f64>,
    /// Longest request in tokens [default: the config's max_position_embeddings].
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64, requires = "serve")]
    pub max_model_len: Option<u64>,
    /// vLLM's max_num_seqs [default: the release's for the device].
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64, requires = "serve")]
    pub max_num_seqs: Option<u64>,
    /// vLLM's max_num_batched_tokens: the profile run's size [default: the release's].
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64, requires = "serve")]
    pub max_num_batched_tokens: Option<u64>,
    /// GPUs the model is split over by tensor parallelism [default: 1].
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64, requires = "serve")]
    pub tensor_parallel_size: Option<u64>,
    /// The KV cache's dtype: auto (the model's) or fp8 (1 byte).
    #[arg(long, value_enum, value_name = "DTYPE", requires = "serve")]
    pub kv_cache_dtype: Option<ServeKvDtype>,
    /// vLLM's tokens per block [default: 16; 64 for MLA from 0.9].
    #[arg(long, value_name = "N", value_parser = block_size, requires = "serve")]
    pub block_size: Option<u64>,
    /// No CUDA graph capture.
    #[arg(long, requires = "serve")]
    pub enforce_eager: bool,
    /// The engine's release whose rules apply (0.6.3, 0.11) [default: vLLM 0.34.0, SGLang 0.5.23].
    #[arg(long, value_name = "X.Y", requires = "serve")]
    pub engine_version: Option<String>,
    /// The device total the engine reads (the log's total_gpu_memory) [default: the catalog's].
    #[arg(long, value_name = "SIZE", value_parser = units::parse_size, requires = "serve")]
    pub device_total: Option<Bytes>,
    /// Memory free on the device when vLLM starts (nvidia-smi's free, or the engine's "Free
    /// memory on device" figure): below total × utilization vLLM 0.9+ refuses [default: the
    /// device total less 0.25 GiB of CUDA context, assumed].
    #[arg(long, value_name = "SIZE", value_parser = units::parse_size, requires = "serve")]
    pub free_at_start: Option<Bytes>,
    /// Weights per GPU as the engine's log prints them [default: from --model ÷ TP].
    #[arg(long, value_name = "SIZE", value_parser = units::parse_size, requires = "serve")]
    pub weights_memory: Option<Bytes>,
    /// The profile run's activation peak: SIZE from the log, or `predict` (the model's forward
    /// at max_num_batched_tokens on data-less tensors; needs torch and transformers) [default: an
    /// assumed rule, stated].
    #[arg(long, value_name = "SIZE|predict", value_parser = activation_peak, requires = "serve")]
    pub activation_peak: Option<ActivationPeakArg>,
    /// Memory outside PyTorch from the log [default: assumed 0.5 GiB, 1.5 GiB with TP].
    #[arg(long, value_name = "SIZE", value_parser = units::parse_size, requires = "serve")]
    pub non_torch: Option<Bytes>,
    /// The KV budget itself: vLLM's --kv-cache-memory (0.10+, profiling skipped), or a log's
    /// "Available KV cache memory" [default: total × utilization − the terms above].
    #[arg(long, value_name = "SIZE", value_parser = units::parse_size, requires = "serve")]
    pub kv_cache_memory: Option<Bytes>,
    /// Request lengths at which the concurrency is also given [default: 2048,8192].
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = positive_u64, requires = "serve")]
    pub concurrency_at: Vec<u64>,
}

/// `--activation-peak`: the log's figure, or predicted (the plan's own type).
pub use crate::estimate::plan::ActivationPeakOption as ActivationPeakArg;

/// `--kv-cache-dtype` (the engines' fp8 variants are one byte each: the same figures).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ServeKvDtype {
    Auto,
    #[value(alias = "fp8_e4m3", alias = "fp8_e5m2")]
    Fp8,
}

/// The options of --shard.
#[derive(Debug, Args)]
#[command(next_help_heading = "Sharded training")]
pub struct ShardOptionsArgs {
    /// Ranks in the data-parallel group (required with --shard; 1 is allowed).
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64)]
    pub world_size: Option<u64>,
    /// Ranks per node; must divide --world-size [default: the world size up to 8, else 8].
    #[arg(long, allow_negative_numbers = true, value_name = "G", value_parser = positive_u64)]
    pub gpus_per_node: Option<u64>,
    /// Keep states on the host: optimizer (zero2, zero3: DeepSpeed offload_optimizer) or
    /// parameters (zero3: offload_param too; fsdp: CPUOffloadPolicy).
    #[arg(long, value_enum, value_name = "WHAT")]
    pub offload: Option<crate::estimate::Offload>,
    /// zero3 with --parameters: the largest single module's own parameters (DeepSpeed's
    /// largest_layer_params; read from --model otherwise).
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = positive_u64)]
    pub largest_layer_parameters: Option<u64>,
    /// NCCL's memory per rank, outside PyTorch's allocator [default: 1GiB, assumed].
    #[arg(long, allow_negative_numbers = true, value_name = "SIZE", value_parser = units::parse_size)]
    pub comm_reserve: Option<Bytes>,
}
