//! The command line's groups turned into the domain's options, so that no plan imports `cli`.
//! Which options were written comes from clap's value sources ([`Given`]); where each one acts
//! comes from the group that defines it: no list of option names is kept anywhere.

use clap::Args;

use crate::cli::{
    BuiltInArgs, DenseArgs, DistributedArgs, GenerationArgs, Given, HistoryArgs, LmTrainingArgs,
    MeasureArgs, PredictArgs, QuantizeArgs, RunArgs, SlidingWindowArgs, SweepArgs, TimelineArgs,
    TrainingArgs, VisionArgs, WorkloadArgs, WorkloadGroups,
};
use crate::model::hub::{HubError, Needs};
use crate::schema::dimensions::Variable;
use crate::schema::spec::Workload;
use crate::sweep::plan::SweepOptions;
use crate::workload::plan::{Acts, RunOptions, Scope, Written};

/// The measurement `measure` asks for.
pub fn measure(args: &MeasureArgs) -> Result<RunOptions, HubError> {
    let extra = Extra {
        distributed: Some(&args.distributed),
        history: Some(&args.history),
        timeline: Some(&args.timeline),
    };
    workload(&args.workload, extra, &args.run, &args.given)
}

/// The workload `predict` follows (no torchrun job, no allocator records).
pub fn predict(args: &PredictArgs) -> Result<RunOptions, HubError> {
    workload(&args.workload, Extra::default(), &args.run, &args.given)
}

/// The sweep, and the measurement each of its trials starts from.
pub fn sweep(args: &SweepArgs) -> Result<(SweepOptions, RunOptions), HubError> {
    let extra = Extra {
        distributed: Some(&args.distributed),
        history: Some(&args.history),
        timeline: None,
    };
    let sweep = SweepOptions {
        vary: args.vary.clone(),
        search: args.search,
        resolution: args.frontier_step,
        max_trials: args.max_trials,
        memory_limit: args.memory_limit,
        card: args.card.clone(),
        loads: args.loads.clone(),
        processes: args.processes,
        no_prediction: args.no_prediction,
        predict: args.predict,
        gpus: args.gpus.clone(),
        allow_mixed: args.allow_mixed,
    };
    Ok((
        sweep,
        workload(&args.workload, extra, &args.run, &args.given)?,
    ))
}

/// The groups a command accepts besides the workload's (`None`: the command has no such group).
#[derive(Default)]
struct Extra<'a> {
    distributed: Option<&'a DistributedArgs>,
    history: Option<&'a HistoryArgs>,
    timeline: Option<&'a TimelineArgs>,
}

fn workload(
    w: &WorkloadGroups,
    extra: Extra,
    run: &RunArgs,
    given: &Given,
) -> Result<RunOptions, HubError> {
    let (workload, dense, generation, training) =
        (&w.workload, &w.dense, &w.generation, &w.training);
    let distributed = extra.distributed;
    // The vlm workload's processor reads the tokenizer's files too.
    let needs = Needs {
        tokenizer: workload.workload == Workload::Vlm,
    };
    Ok(RunOptions {
        workload: workload.workload,
        script: workload.script.clone(),
        script_args: workload.script_args.clone(),
        model: model_path(workload.model.as_deref(), needs)?,
        task: workload.task,
        device: workload.device.clone(),
        batch: workload.batch,
        context: workload.context,
        seed: workload.seed,
        dtype: w.built_in.dtype,
        whole_loop: w.built_in.whole_loop,
        width: dense.width,
        depth: dense.depth,
        warmup: dense.warmup,
        repeats: dense.repeats,
        empty_cache: dense.empty_cache,
        prompt_tokens: generation.prompt_tokens,
        new_tokens: generation.new_tokens,
        cache: generation.cache,
        resolution: w.vision.resolution,
        images: w.vision.images,
        images_per_request: w.vision.images_per_request,
        requests: generation.requests,
        prompt_lengths: generation.prompt_lengths.clone(),
        output_lengths: generation.output_lengths.clone(),
        window: w.sliding.window,
        steps: training.steps,
        optimizer: training.optimizer,
        precision: training.precision,
        gradient_checkpointing: training.gradient_checkpointing,
        shard: w.lm_training.shard,
        lora_rank: w.lm_training.lora_rank,
        lora_targets: w.lm_training.lora_targets.clone(),
        quantize: w.quantize.quantize,
        double_quant: w.quantize.double_quant,
        alloc_conf: w.allocator.alloc_conf,
        nproc_per_node: distributed.and_then(|d| d.nproc_per_node),
        nnodes: distributed.and_then(|d| d.nnodes),
        node_rank: distributed.and_then(|d| d.node_rank),
        rdzv_endpoint: distributed.and_then(|d| d.rdzv_endpoint.clone()),
        rdzv_id: distributed.and_then(|d| d.rdzv_id.clone()),
        timeline: extra.timeline.is_some_and(|t| t.timeline),
        timeline_entries: extra.timeline.map_or(0, |t| t.timeline_entries),
        no_history: extra.history.is_some_and(|h| h.no_history),
        keep_children: run.keep_children,
        python: run.python.clone(),
        timeout_s: run.timeout,
        written: written(given),
    })
}

/// The options written on the command line that act only on some workloads: the dimensions
/// wherever they are defined, then every option of a scoped group, in the help's order.
fn written(given: &Given) -> Vec<Written> {
    let mut written = Vec::new();
    let mut add = |group: Vec<(String, String)>, scope: Option<Scope>| {
        for (id, flag) in group {
            let acts = match (Variable::parse(&id), scope) {
                (Ok(variable), _) => Acts::Dimension(variable),
                (Err(_), Some(scope)) => Acts::On(scope),
                (Err(_), None) => continue,
            };
            written.push(Written { flag, acts });
        }
    };
    add(written_in::<WorkloadArgs>(given), None);
    add(written_in::<VisionArgs>(given), None);
    add(written_in::<BuiltInArgs>(given), Some(Scope::BuiltIn));
    add(written_in::<DenseArgs>(given), Some(Scope::DenseInference));
    // The requests' lengths apply to vlm generation too, unlike the rest of the group (--cache).
    let (lengths, generation): (Vec<_>, Vec<_>) = written_in::<GenerationArgs>(given)
        .into_iter()
        .partition(|(id, _)| id == "prompt_lengths" || id == "output_lengths");
    add(generation, Some(Scope::Generation));
    add(lengths, Some(Scope::Requests));
    add(
        written_in::<SlidingWindowArgs>(given),
        Some(Scope::SlidingWindow),
    );
    add(written_in::<TrainingArgs>(given), Some(Scope::Training));
    add(
        written_in::<LmTrainingArgs>(given),
        Some(Scope::CausalLmTraining),
    );
    add(written_in::<QuantizeArgs>(given), Some(Scope::CausalLm));
    written
}

/// The options of group `A` written on the command line, in the group's order: each one's id
/// and its name as the help lists it, with its visible aliases (the user may have typed either).
pub fn written_in<A: Args>(given: &Given) -> Vec<(String, String)> {
    A::augment_args(clap::Command::new("group"))
        .get_arguments()
        .filter(|arg| given.contains(arg.get_id().as_str()))
        .map(|arg| {
            let id = arg.get_id().as_str();
            let names = std::iter::once(arg.get_long().unwrap_or(id))
                .chain(arg.get_visible_aliases().into_iter().flatten())
                .map(|name| format!("--{name}"))
                .collect::<Vec<_>>();
            (id.to_string(), names.join("/"))
        })
        .collect()
}

/// `--model VALUE` as a local path: a Hub id (`ORG/NAME[@REVISION]`) that is no local path becomes
/// its snapshot folder in the Hugging Face cache, fetched if need be ([`crate::model::hub`]); every
/// command reads the model, and every worker builds it, from that folder.
pub fn model_path(
    value: Option<&std::path::Path>,
    needs: Needs,
) -> Result<Option<std::path::PathBuf>, HubError> {
    value
        .map(|v| crate::model::hub::resolve(v, needs))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn measure_options(args: &[&str]) -> RunOptions {
        let argv = ["iteragpu", "measure"].iter().chain(args);
        let Command::Measure(m) = Cli::try_parse_from(argv).unwrap().command else {
            unreachable!("parsed as measure")
        };
        measure(&m).unwrap()
    }

    /// The help stays true: `sweep --vary` names every dimension that can be varied, and the
    /// vlm workload's help every family the worker follows.
    #[test]
    fn the_help_names_every_varied_dimension_and_vlm_family() {
        use clap::CommandFactory;
        let mut cli = Cli::command();
        let sweep = cli.find_subcommand_mut("sweep").unwrap();
        let vary = sweep
            .get_arguments()
            .find(|a| a.get_id() == "vary")
            .unwrap();
        let help = vary
            .get_long_help()
            .or(vary.get_help())
            .unwrap()
            .to_string()
            .replace('\n', " ");
        for v in Variable::ALL {
            assert!(
                help.contains(v.name()),
                "--vary help lacks {}: {help}",
                v.name()
            );
        }
        let step = sweep
            .get_arguments()
            .find(|a| a.get_id() == "frontier_step")
            .unwrap();
        let step = step
            .get_long_help()
            .or(step.get_help())
            .unwrap()
            .to_string();
        assert!(step.contains("frontier search's step"), "{step}");
        assert!(!step.contains("--resolution"), "{step}");
        let predict = Cli::command()
            .find_subcommand_mut("predict")
            .unwrap()
            .render_long_help()
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        for (family, words) in [
            ("llava", "LLaVA-1.5"),
            ("qwen2_vl", "Qwen2-VL"),
            ("qwen2_5_vl", "Qwen2.5-VL"),
            ("gemma3", "Gemma 3"),
            ("mllama", "Llama-3.2-Vision"),
        ] {
            assert!(crate::workload::plan::VLM_FAMILIES.contains(&family));
            assert!(predict.contains(words), "predict --help lacks {words}");
        }
        assert_eq!(crate::workload::plan::VLM_FAMILIES.len(), 5);
    }

    #[test]
    fn only_options_written_on_the_command_line_are_written_and_defaults_are_not() {
        let o = measure_options(&[
            "--cache",
            "static",
            "--seed",
            "3",
            "--task",
            "infer",
            "--batch",
            "2",
            "--dtype",
            "float16",
            "--timeout",
            "9",
            "--steps",
            "3",
        ]);
        let written: Vec<(&str, Acts)> = o.written.iter().map(|w| (&*w.flag, w.acts)).collect();
        assert_eq!(
            written,
            [
                ("--batch", Acts::Dimension(Variable::Batch)),
                ("--dtype", Acts::On(Scope::BuiltIn)),
                ("--cache", Acts::On(Scope::Generation)),
                ("--steps", Acts::Dimension(Variable::Steps)),
            ],
            "options that act everywhere (--seed, --task, --timeout) are not listed"
        );
        // Defaults are values, never written options.
        let o = measure_options(&[]);
        assert!(o.written.is_empty(), "{:?}", o.written);
        assert_eq!(
            (o.seed, o.timeout_s, o.timeline_entries),
            (0, 3600, 100_000)
        );
    }

    #[test]
    fn every_option_of_a_scoped_group_is_written_with_its_scope() {
        for (args, flag, scope) in [
            (&["--whole-loop"][..], "--whole-loop", Scope::BuiltIn),
            (&["--warmup", "1"], "--warmup", Scope::DenseInference),
            (
                &["--empty-cache", "between-repeats"],
                "--empty-cache",
                Scope::DenseInference,
            ),
            (&["--window", "8"], "--window", Scope::SlidingWindow),
            (
                &["--gradient-checkpointing"],
                "--gradient-checkpointing",
                Scope::Training,
            ),
            (&["--shard", "ddp"], "--shard", Scope::CausalLmTraining),
        ] {
            let o = measure_options(args);
            assert_eq!(
                o.written,
                [Written {
                    flag: flag.into(),
                    acts: Acts::On(scope)
                }],
                "{args:?}"
            );
        }
    }

    /// `--quantize` reaches the worker's spec, from the flag or from the checkpoint's own
    /// bitsandbytes `quantization_config`, and is refused where it cannot act.
    #[test]
    fn quantize_reaches_the_worker_spec_and_is_refused_where_it_cannot_act() {
        use crate::workload::plan::RunPlan;
        let model = |name: &str| {
            format!(
                "{}/tests/fixtures/models/{name}",
                env!("CARGO_MANIFEST_DIR")
            )
        };
        let plan = |args: &[&str]| RunPlan::new(&measure_options(args));
        let spec = |args: &[&str]| serde_json::to_value(plan(args).unwrap().worker_spec()).unwrap();
        let llama = model("llama-3-8b");
        let qlora = [
            "--workload",
            "causal-lm",
            "--model",
            &llama,
            "--task",
            "train",
            "--lora-rank",
            "16",
            "--lora-targets",
            "q_proj,v_proj",
            "--quantize",
            "nf4",
            "--double-quant",
        ];
        let doc = spec(&qlora);
        assert_eq!(doc["quantize"], "nf4", "{doc}");
        assert_eq!(doc["double_quant"], true, "{doc}");
        // The prediction's dimensions (and its fiche) name the quantization.
        let dims = plan(&qlora).unwrap().trial().dimensions;
        assert_eq!(dims["quantization"], "bitsandbytes nf4", "{dims:?}");
        assert_eq!(dims["double_quant"], true);
        assert_eq!(dims["quantization_source"], "--quantize");
        assert!(
            dims["quantization_storage"]
                .as_str()
                .unwrap()
                .contains("4-bit")
        );
        assert!(dims.contains_key("quantization_compute_dtype"), "{dims:?}");
        let doc = spec(&[
            "--workload",
            "causal-lm",
            "--model",
            &llama,
            "--quantize",
            "int8",
        ]);
        assert_eq!(doc["quantize"], "int8", "{doc}");
        assert_eq!(doc["double_quant"], false, "{doc}");
        let doc = spec(&["--workload", "causal-lm", "--model", &llama]);
        assert!(doc.get("quantize").is_none(), "{doc}");
        // The checkpoint's own bitsandbytes config: nf4 with double quantization.
        let bnb = model("llama-3-8b-bnb-4bit");
        let vit = model("vit-base-defaults");
        let doc = spec(&["--workload", "causal-lm", "--model", &bnb]);
        assert_eq!(doc["quantize"], "nf4", "{doc}");
        assert_eq!(doc["double_quant"], true, "{doc}");
        let gptq = model("llama-2-7b-gptq");
        // A GPTQ checkpoint is built packed (its own layout), for inference.
        let doc = spec(&["--workload", "causal-lm", "--model", &gptq]);
        assert_eq!(doc["packed_format"], "gptq", "{doc}");
        assert_eq!(doc["packed_bits"], 4, "{doc}");
        assert_eq!(doc["packed_group_size"], 128, "{doc}");
        assert!(doc.get("quantize").is_none(), "{doc}");
        // LoRA over its packed layers is trained, as peft trains it.
        let doc = spec(&[
            "--workload",
            "causal-lm",
            "--model",
            &gptq,
            "--task",
            "train",
            "--lora-rank",
            "8",
            "--lora-targets",
            "all-linear",
        ]);
        assert_eq!(doc["packed_format"], "gptq", "{doc}");
        assert_eq!(doc["lora_rank"], 8, "{doc}");
        for (args, words) in [
            (
                vec![
                    "--workload",
                    "causal-lm",
                    "--model",
                    gptq.as_str(),
                    "--task",
                    "train",
                ],
                "packed weights cannot be trained: add --lora-rank R",
            ),
            (
                vec![
                    "--workload",
                    "causal-lm",
                    "--model",
                    bnb.as_str(),
                    "--quantize",
                    "nf4",
                ],
                "stored quantized already",
            ),
            (
                vec![
                    "--workload",
                    "causal-lm",
                    "--model",
                    llama.as_str(),
                    "--quantize",
                    "int8",
                    "--double-quant",
                ],
                "LLM.int8",
            ),
            (
                vec![
                    "--workload",
                    "causal-lm",
                    "--model",
                    llama.as_str(),
                    "--quantize",
                    "nf4",
                    "--task",
                    "train",
                ],
                "--lora-rank",
            ),
            (
                vec![
                    "--workload",
                    "vision",
                    "--model",
                    vit.as_str(),
                    "--quantize",
                    "nf4",
                ],
                "--quantize has no effect on vision inference",
            ),
        ] {
            let err = plan(&args).map(|_| ()).unwrap_err().to_string();
            assert!(err.contains(words), "{args:?}: {err}");
        }
    }
}
