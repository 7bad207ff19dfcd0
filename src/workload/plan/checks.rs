//! The rules a plan's dimensions must follow (sizes, positions, images), checked when the plan is
//! built and again whenever a sweep changes a dimension: split from `plan.rs`, which holds the plan.

use anyhow::{Result, bail};

use super::*;

impl RunPlan {
    /// The rules that depend on the dimensions, checked again whenever a sweep changes one.
    pub(super) fn check_dimensions(&self) -> Result<()> {
        // Under torchrun each rank runs the whole network on its one device.
        if let WorkloadPlan::Dense(_) = self.workload
            && self.torchrun.is_none()
            && self.dims.depth < self.devices.len() as u64
        {
            bail!(
                "--depth {} is smaller than the {} devices given: each device needs at least one block",
                self.dims.depth,
                self.devices.len()
            );
        }
        if let Some(lengths) = self.request_lengths() {
            let lengths = lengths.map_err(anyhow::Error::msg)?;
            kv_cache::check_positions(&lengths, self.max_positions())
                .map_err(anyhow::Error::msg)?;
            if self.dims.batch != 1 {
                bail!(
                    "--batch {} with --requests: each request is one sequence with its own cache; drop --batch (or drop --requests for one padded batch)",
                    self.dims.batch
                );
            }
        }
        if let WorkloadPlan::Vlm(v) = &self.workload {
            self.check_vlm_positions(v)?;
            // The images are built in the worker's host memory before anything else.
            if let Some(available) = crate::workload::process::available_memory() {
                self.check_vlm_images(
                    v,
                    available as u128,
                    "the memory this machine has available (MemAvailable)",
                )?;
            }
        }
        if let WorkloadPlan::CausalLm(c) = &self.workload
            && c.requests.is_none()
            && let Some(max) = c.max_positions
        {
            // On a GPU a sequence past the positions fails (learned positions index out of range)
            // or runs where the model was never trained; data-less tensors would not notice.
            let (tokens, what, fix) = if c.training.is_some() {
                (
                    self.dims.context,
                    format!("--context {}", self.dims.context),
                    "--context",
                )
            } else {
                let total = self.dims.prompt_tokens.saturating_add(self.dims.new_tokens);
                (
                    total,
                    format!(
                        "{} prompt + {} new tokens = {total}",
                        self.dims.prompt_tokens, self.dims.new_tokens
                    ),
                    "--prompt-tokens or --new-tokens",
                )
            };
            if tokens > max {
                bail!(
                    "{what} is beyond the model's {max} positions (max_position_embeddings); shorten {fix}"
                );
            }
        }
        Ok(())
    }

    /// Refuses a multimodal request longer than the text model's positions, counting what is
    /// known before processing: its text, its output and the least its images take
    /// (`VlmPlan::min_image_tokens`); the worker checks the total once the images are processed.
    /// Refuses a vlm load whose images alone pass `bound` bytes of host memory, before the worker
    /// builds any: each image is made as H × W × 3 bytes (uint8) and processed into at least as
    /// many float32 values (`workloads/vlm.py`), 15 bytes a pixel; a billion-image batch reached
    /// 9 GB resident before this check.
    pub(super) fn check_vlm_images(&self, v: &VlmPlan, bound: u128, what: &str) -> Result<()> {
        let (h, w) = self.dims.image_size();
        let (count, flag) = match &v.requests {
            Some(_) => (self.dims.requests, "--requests"),
            None => (self.dims.batch, "--batch"),
        };
        let images = u128::from(count) * u128::from(self.dims.images_per_request);
        let bytes = images * u128::from(h) * u128::from(w) * 15;
        if bytes <= bound {
            return Ok(());
        }
        let g = crate::units::group_thousands;
        let fitting = bound / (u128::from(h) * u128::from(w) * 15).max(1);
        bail!(
            "{flag} {count} × --images-per-request {} = {} images of {h}x{w} need at least {} bytes of host memory to build and process ({} images × {h} × {w} pixels × 3 channels × (1 byte + 4 bytes float32)), above {what}, {} bytes: give at most {} images in all (a smaller {flag} or --images-per-request, or a smaller --resolution)",
            self.dims.images_per_request,
            g(images),
            g(bytes),
            g(images),
            g(bound),
            g(fitting)
        )
    }

    fn check_vlm_positions(&self, v: &VlmPlan) -> Result<()> {
        let Some(max) = v.max_positions else {
            return Ok(());
        };
        let (lengths, prompt_flag, output_flag) = match (self.request_lengths(), &v.requests) {
            (Some(lengths), Some(r)) => (
                lengths.map_err(anyhow::Error::msg)?,
                if r.prompt_lengths.is_empty() {
                    "--prompt-tokens"
                } else {
                    "--prompt-lengths"
                },
                if r.output_lengths.is_empty() {
                    "--new-tokens"
                } else {
                    "--output-lengths"
                },
            ),
            _ => (
                vec![RequestLengths {
                    prompt: self.dims.prompt_tokens,
                    output: self.dims.new_tokens,
                }],
                "--prompt-tokens",
                "--new-tokens",
            ),
        };
        let images = self.dims.images_per_request;
        let image_tokens = images.saturating_mul(v.min_image_tokens);
        if let Some(r) = lengths
            .iter()
            .find(|r| r.tokens().saturating_add(image_tokens) > max)
        {
            bail!(
                "a request of {} text tokens + at least {image_tokens} image tokens ({images} image{}) + {} output tokens = {} or more is beyond the model's {max} positions (max_position_embeddings); shorten {prompt_flag} or {output_flag}",
                r.prompt,
                if images == 1 { "" } else { "s" },
                r.output,
                r.tokens().saturating_add(image_tokens),
            );
        }
        Ok(())
    }
}

/// Every option must act or be refused: an option written for a workload that would ignore it is
/// an error that names where it applies (the dimensions first).
pub(super) fn refuse_ignored(args: &RunOptions, plan: &RunPlan) -> Result<()> {
    for variable in args.written.iter().filter_map(|w| match w.acts {
        Acts::Dimension(v) => Some(v),
        Acts::On(_) => None,
    }) {
        if plan.uses(variable) {
            continue;
        }
        if let WorkloadPlan::Script(_) = plan.workload {
            bail!(
                "--{0} {1} never reaches the script: write {{{0}}} in its arguments (e.g. -- --{0} {{{0}}}) or drop --{0}",
                variable.name(),
                plan.dims.get(variable)
            );
        }
        bail!(
            "--{} has no effect on {} (it applies to {}); drop it",
            variable.name(),
            plan.describe(),
            match variable {
                Variable::Width | Variable::Depth => "the dense workload",
                Variable::PromptTokens | Variable::NewTokens => "causal-lm and vlm generation",
                Variable::Steps => "--task train",
                Variable::Context => "dense inputs and causal-lm training",
                Variable::Batch => "the dense, causal-lm and vlm workloads (vision: --images)",
                Variable::Resolution => "--workload vision and vlm",
                Variable::Images => "--workload vision (vlm: --images-per-request)",
                Variable::ImagesPerRequest => "--workload vlm (vision: --images)",
                Variable::Requests => "causal-lm and vlm generation",
            }
        );
    }
    for written in &args.written {
        if let Acts::On(scope) = written.acts
            && !plan.acts_on(scope)
        {
            bail!(
                "{} has no effect on {} (it applies to {}); drop it",
                written.flag,
                plan.describe(),
                scope.describe()
            );
        }
    }
    if let Some(shard) = args.shard {
        let name = format!("{shard:?}").to_lowercase();
        if plan.world_size().is_none() {
            bail!(
                "--shard {name} spreads the model over the ranks of a torchrun job: add --nproc-per-node N (measure) or --world-size N (predict)"
            );
        }
        if args.precision == Some(TrainPrecision::Fp16Mixed) {
            bail!(
                "--precision fp16-mixed with --shard is not supported yet (FSDP2's and DDP's loss scaling are untested here); use bf16-mixed with --shard"
            );
        }
        if args.lora_rank.is_some() && shard == TrainShard::Fsdp {
            bail!(
                "--shard fsdp with --lora-rank is not supported yet (peft's adapters under FSDP2 are untested here); use --shard ddp or drop --lora-rank"
            );
        }
    }
    Ok(())
}
