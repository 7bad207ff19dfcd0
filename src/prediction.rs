//! Predictions: what a workload will hold on a card, phase by phase, from running its own code on
//! data-less CUDA tensors (`run`, the worker's storage events replayed through the allocator
//! model in `replay`, which also answers the script's own `torch.cuda.memory_*` calls in
//! `answers`, the file in `document`, the target card in `target`), and how they are
//! compared with what `measure` observes (`check`), together with the estimate's KV term. The
//! torch releases supported and the versions compared with the GPU machine's (`--like`) are in
//! `versions` and `like`; where a failed workload raised, in `failure`.

pub mod answers;
pub mod bounds;
pub mod dequantized;
pub mod fork_server;
pub mod like;
pub mod oom;
pub mod render;
pub mod replay;
pub mod run;
pub mod serve_profile;
pub mod symbolic;

use anyhow::Result;

use crate::estimate::KvRequest;
use crate::estimate::kv_cache::{self, CacheKind, CacheOptions, CacheStrategy, QuantizedSettings};
use crate::schema::check::CacheEstimate;
use crate::schema::measure::MeasureResult;
use crate::schema::target::{self, Target};
use crate::workload::plan::{RunPlan, WorkloadPlan};

/// The estimate's KV-cache bytes after the prefill and after decoding, for causal-lm generation
/// (compared with the cache object's real size); empty for other workloads.
pub fn kv_estimates(plan: &RunPlan) -> Result<Vec<CacheEstimate>> {
    let WorkloadPlan::CausalLm(p) = &plan.workload else {
        return Ok(Vec::new());
    };
    let Some(arch) = &p.architecture else {
        return Ok(Vec::new());
    };
    if p.training.is_some() || p.whole_loop {
        return Ok(Vec::new());
    }
    if let Some(lengths) = plan.request_lengths() {
        return requests_estimates(
            &arch.kv,
            p.dtype.bytes(),
            &lengths.map_err(anyhow::Error::msg)?,
        );
    }
    let d = &plan.dims;
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
            requests: Vec::new(),
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
        p.cache,
        p.dtype.bytes()
    );
    let caches: Vec<CacheEstimate> = ["", "_warm"]
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
    Ok(caches)
}

/// The estimate's Σ over concurrent requests, each its own dynamic cache: after the prefills
/// every request holds its prompt (a sliding layer all of it, its window not yet applied), after
/// decoding its prompt and output.
fn requests_estimates(
    layout: &crate::model::KvLayout,
    element_bytes: u64,
    lengths: &[kv_cache::RequestLengths],
) -> Result<Vec<CacheEstimate>> {
    let sum = |lengths: Vec<kv_cache::RequestLengths>, windows: bool| -> Result<(u64, u64)> {
        let mut layout = layout.clone();
        if !windows {
            for l in &mut layout.layers {
                l.window = None;
            }
        }
        let req = KvRequest {
            layout,
            tokens: lengths.iter().map(|r| r.tokens()).max().unwrap_or(1),
            sequences: 1,
            element_bytes,
            strategy: CacheStrategy::Dynamic,
            prompt_tokens: None,
            requests: lengths.clone(),
        };
        let bytes = kv_cache::requests_terms(&req, &mut Vec::new())?[0]
            .bytes
            .get();
        Ok((lengths.iter().map(|r| r.tokens()).sum(), bytes))
    };
    let prompts = lengths
        .iter()
        .map(|r| kv_cache::RequestLengths {
            prompt: r.prompt,
            output: 0,
        })
        .collect();
    let (prefill_tokens, after_prefill) = sum(prompts, false)?;
    let (decode_tokens, after_decode) = sum(lengths.to_vec(), true)?;
    let basis = format!(
        "estimate's KV term, Σ over {} requests each with its own dynamic cache, {element_bytes} bytes per value",
        lengths.len()
    );
    Ok(["", "_warm"]
        .iter()
        .flat_map(|suffix| {
            [
                CacheEstimate {
                    phase: format!("prefill{suffix}"),
                    tokens: prefill_tokens,
                    bytes: after_prefill,
                    basis: basis.clone(),
                },
                CacheEstimate {
                    phase: format!("decode{suffix}"),
                    tokens: decode_tokens,
                    bytes: after_decode,
                    basis: basis.clone(),
                },
            ]
        })
        .collect())
}

/// The card a measurement ran on, as its PyTorch declared it, for the prediction stored next to it.
pub fn measured_target(result: &MeasureResult) -> Option<Target> {
    let device = result.scope.devices.first()?;
    let props = result.environment.python.as_ref()?.device(device)?;
    let name = props.get("name")?.as_str()?.to_string();
    let capability = props.get("capability")?;
    let capability = (
        capability.get(0)?.as_u64()? as u32,
        capability.get(1)?.as_u64()? as u32,
    );
    let total = props.get("total_memory")?.as_u64()?;
    let backend = result
        .environment
        .python
        .as_ref()
        .and_then(|p| p.allocator_backend())
        .unwrap_or("native");
    // The worker's own settings, as it recorded them (not this process's: `--alloc-conf` set
    // the worker's).
    let backend = if backend == "native" {
        let settings = &result.environment.python.as_ref()?.settings;
        let values: Vec<String> = crate::schema::alloc_conf::VARIABLES
            .iter()
            .filter_map(|v| settings.get(*v)?.as_str().map(String::from))
            .collect();
        target::allocator_backend_of(&values)
    } else {
        backend.to_string()
    };
    let mut t = match crate::cards::identify(&name) {
        Some(card) => Target::for_card(&card, &backend).ok()?,
        None => Target::named(None, &backend).ok()?,
    };
    t.name = format!("{name} ({device})");
    t.capability = capability;
    t.total_memory = total;
    t.total_memory_source = "PyTorch's total_memory, read in the measurement".into();
    Some(t)
}
