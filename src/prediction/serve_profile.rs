//! `estimate serve vllm --activation-peak predict`: vLLM's profile run predicted. The bundled
//! `serve_profile.py` runs as a script workload in the predicting worker: transformers' model
//! from the config with random weights on data-less CUDA tensors, one forward of
//! max_num_batched_tokens tokens over max_num_seqs requests with no KV cache, then V0's sampler on
//! each request's last token. The peak allocated above the weights is the activation peak.

use std::path::{Path, PathBuf};

use crate::progress::Progress;
use crate::schema::prediction::PredictionStatus;
use crate::schema::spec::{Task, Workload};
use crate::schema::target::Target;
use crate::signals::StopRequest;
use crate::units::Bytes;
use crate::workload::plan::{RunOptions, RunPlan};

pub use crate::estimate::serving::ProfileShape;
use crate::estimate::serving::profile::TopKTopP;

/// The predicted peak above the weights, and what ran.
#[derive(Clone, Debug)]
pub struct PredictedPeak {
    pub bytes: Bytes,
    pub how: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// torch or transformers cannot be imported (exit 2).
    #[error(
        "the activation peak cannot be predicted: {0}; install torch and transformers in the interpreter (ITERAGPU_PYTHON), or give the log's figure with --activation-peak SIZE"
    )]
    Unavailable(String),
    /// The forward raised or stopped (the model's config is not one transformers runs).
    #[error(
        "the profile run's forward did not run to its end: {0}; give the log's figure with --activation-peak SIZE"
    )]
    Failed(String),
}

/// Runs the profile run in a predicting worker for `card`.
pub fn predict_peak(
    shape: &ProfileShape,
    card: &str,
    python: Option<PathBuf>,
    stop: &StopRequest,
    progress: &dyn Progress,
) -> Result<PredictedPeak, ProfileError> {
    let dir = crate::python_side::private_dir("serve-profile")
        .map_err(|e| ProfileError::Failed(format!("no private folder for the script: {e}")))?;
    let script = dir.path().join("serve_profile.py");
    let text = crate::python_side::FILES
        .iter()
        .find(|(path, _)| path.ends_with("serve_profile.py"))
        .map(|(_, text)| *text)
        .expect("build.rs bundles python/iteragpu/serve_profile.py");
    std::fs::write(&script, text)
        .map_err(|e| ProfileError::Failed(format!("{}: {e}", script.display())))?;
    let options = options(shape, &script, python);
    let plan =
        RunPlan::for_prediction(&options, None).map_err(|e| ProfileError::Failed(e.to_string()))?;
    let target = Target::named(Some(card), &plan.allocator_backend())
        .map_err(|e| ProfileError::Failed(e.to_string()))?;
    let outcome = super::run::predict(&plan, &target, stop, progress)
        .map_err(|e| ProfileError::Unavailable(e.to_string()))?;
    let doc = match outcome {
        super::run::Outcome::Predicted(doc) => doc,
        super::run::Outcome::Unavailable(why) => return Err(ProfileError::Unavailable(why)),
    };
    if doc.status != PredictionStatus::Complete {
        let why = doc
            .failure
            .clone()
            .unwrap_or_else(|| doc.status.to_string());
        // A missing transformers is the script's ImportError: a missing package, not a failure.
        if why.contains("ModuleNotFoundError") || why.contains("ImportError") {
            return Err(ProfileError::Unavailable(why));
        }
        return Err(ProfileError::Failed(why));
    }
    let phase = doc
        .phases
        .iter()
        .find(|p| p.name == "profile_run")
        .ok_or_else(|| ProfileError::Failed("no profile_run phase was predicted".into()))?;
    let (Some(start), Some(peak)) = (phase.start_allocated_bytes, phase.peak_allocated_bytes)
    else {
        return Err(ProfileError::Failed(
            "the profile_run phase has no allocated figures".into(),
        ));
    };
    let forward = phase.inputs.get("forward").and_then(|v| v.as_str());
    let attention = phase
        .inputs
        .get("attention_implementation")
        .and_then(|v| v.as_str())
        .unwrap_or("unknown");
    let requests = shape.seqs.min(shape.tokens).max(1);
    let torch = doc.assumptions.torch_version.as_deref().unwrap_or("?");
    let rank = if shape.tensor_parallel_size > 1 {
        format!(
            " of one rank (heads, KV heads and MLP width ÷ {}; vocabulary whole, gathered to the driver)",
            shape.tensor_parallel_size
        )
    } else {
        String::new()
    };
    let forward = if forward == Some("vllm-llama-layout") {
        format!(
            "vLLM's Llama-layout activations{rank} (fused qkv_proj, attention output, o_proj, add-RMSNorm in place, gate_up_proj, SiluAndMul, down_proj: model_executor/models/llama.py) were replayed over {} unpadded tokens in {requests} requests",
            shape.tokens
        )
    } else {
        let length = shape.tokens.div_ceil(requests);
        format!(
            "transformers' forward{rank} ran {requests} requests × {length} tokens (the split padded to equal lengths) with no KV cache, attention `{attention}` (its modules, not vLLM's fused ones)"
        )
    };
    let sampler = if shape.v1 && shape.top_k_top_p == TopKTopP::Triton {
        "V1's dummy sampler run (v1/worker/gpu_model_runner.py _dummy_sampler_run; the release's Triton top-k/top-p, v1/sample/ops/topk_topp_triton.py 0.17+: no sort, its buffer of min(rows, 132 SMs assumed) × vocab float32; FlashInfer's pass, which runs before it from 0.21 and takes less, not modelled)"
    } else if shape.v1 {
        "V1's dummy sampler run (v1/worker/gpu_model_runner.py _dummy_sampler_run; the native top-k/top-p sampler, v1/sample/ops/topk_topp_sampler.py; FlashInfer's, used when flashinfer-python is installed, not modelled)"
    } else {
        "V0's sampler (model_executor/layers/sampler.py 0.6.4–0.7.3: fp32 logits, _apply_top_k_top_p, probabilities, log-probabilities, _multinomial)"
    };
    let encoder = match shape.encoder_images {
        Some((items, side)) => format!(
            "the multimodal encoder's dummy batch ({items} image(s) of {side}×{side}, float32 pixels, through transformers' vision tower and projector, batch and embeddings held), then "
        ),
        None => String::new(),
    };
    Ok(PredictedPeak {
        bytes: Bytes(peak.saturating_sub(start)),
        how: format!(
            "{encoder}{forward} in {} with the final hidden states held, then {sampler} on {requests} last tokens, the whole-vocabulary sort's kernel scratch (20 bytes per logit, PyTorch's SortStable.cu) charged, on torch {torch}'s data-less CUDA tensors for {card}",
            shape.dtype
        ),
    })
}

fn options(shape: &ProfileShape, script: &Path, python: Option<PathBuf>) -> RunOptions {
    RunOptions {
        workload: Workload::Dense,
        script: Some(script.to_path_buf()),
        script_args: vec![
            "--config".into(),
            shape.config.display().to_string(),
            "--tokens".into(),
            shape.tokens.to_string(),
            "--seqs".into(),
            shape.seqs.to_string(),
            "--dtype".into(),
            shape.dtype.clone(),
            "--tp".into(),
            shape.tensor_parallel_size.to_string(),
            "--engine".into(),
            if shape.v1 { "v1" } else { "v0" }.into(),
            "--top-k-top-p".into(),
            match shape.top_k_top_p {
                TopKTopP::Sort => "sort",
                TopKTopP::Triton => "triton",
            }
            .into(),
        ]
        .into_iter()
        .chain(shape.encoder_images.into_iter().flat_map(|(items, side)| {
            [
                "--images".to_string(),
                items.to_string(),
                "--image-size".to_string(),
                side.to_string(),
            ]
        }))
        .collect(),
        model: None,
        task: Task::Infer,
        device: Vec::new(),
        batch: None,
        context: None,
        seed: 0,
        dtype: None,
        whole_loop: false,
        width: None,
        depth: None,
        warmup: None,
        repeats: None,
        empty_cache: None,
        prompt_tokens: None,
        new_tokens: None,
        cache: None,
        resolution: None,
        images: None,
        images_per_request: None,
        requests: None,
        prompt_lengths: Vec::new(),
        output_lengths: Vec::new(),
        window: None,
        steps: None,
        optimizer: None,
        precision: None,
        gradient_checkpointing: false,
        shard: None,
        lora_rank: None,
        lora_targets: Vec::new(),
        quantize: None,
        double_quant: false,
        alloc_conf: None,
        nproc_per_node: None,
        nnodes: None,
        node_rank: None,
        rdzv_endpoint: None,
        rdzv_id: None,
        timeline: false,
        timeline_entries: 0,
        no_history: true,
        keep_children: false,
        python,
        timeout_s: 600,
        written: Vec::new(),
    }
}
