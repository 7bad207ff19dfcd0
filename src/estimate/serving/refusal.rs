//! Will the engine start? The refusal rules each supported release applies at start-up, in the
//! order the engine meets them, each with its file, the releases read and the engine's own
//! wording filled with the plan's figures (issue 32 item 1); then, for a KV-capacity refusal, the
//! largest max_model_len that starts (V1: `estimate_max_model_len`'s binary search, reproduced;
//! V0: blocks × block_size, the figure of its own message) and how many requests of that length
//! fit at once.

use serde::Serialize;

use super::releases::{py_float, py2};
use super::{Engine, ServeModel, ServeRequest, ServingSummary, Version, defaults};
use crate::units::{Bytes, GIB};

/// What the start-up checks need beyond the plan: the model's attention heads (the TP rule) and
/// the memory free on the device when the engine starts (`torch.cuda.mem_get_info()[0]`).
#[derive(Clone, Debug, Default)]
pub struct StartFacts {
    pub attention_heads: Option<u64>,
    pub free_at_start: Option<Bytes>,
    /// The card's compute capability, when the catalog knows it (the bfloat16 rule).
    pub compute_capability: Option<(u32, u32)>,
    /// `--dtype` was given (vLLM ≥ 0.9's `--dtype auto` avoids bfloat16 where it is refused).
    pub dtype_explicit: bool,
}

/// What the process holds on the device before the KV pool, as the plan's terms count it.
#[derive(Clone, Debug, Default)]
pub struct Held {
    pub weights: u64,
    pub activation_peak: u64,
    pub non_torch: u64,
}

/// One rule the engine would stop on.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Refusal {
    /// A stable name: `tensor_parallel_heads`, `tensor_parallel_kv_heads`, `block_size_choice`,
    /// `block_size_backend`, `batched_tokens_below_max_model_len`, `batched_tokens_below_max_num_seqs`,
    /// `bfloat16_unsupported`, `free_memory_below_utilization`, `oom_loading_weights`, `oom_profile_run`, `no_kv_memory`,
    /// `max_model_len_above_kv_capacity`, `sglang_not_enough_memory`.
    pub rule: &'static str,
    /// Where the engine applies it, with the releases read.
    pub source: String,
    /// The engine's own message, with this plan's figures.
    pub message: String,
    /// What would make it start.
    pub fix: String,
}

/// The verdict: starts, or the refusals in the order the engine meets them (it stops at the
/// first; the others follow once that one is fixed).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct StartCheck {
    pub starts: bool,
    /// "vLLM 0.11.0", "SGLang 0.5.5": the release whose rules were applied.
    pub rules_of: String,
    pub refusals: Vec<Refusal>,
    /// The largest max_model_len that would start with every other setting kept (a KV-capacity
    /// refusal only), and the rule that gives it.
    pub largest_max_model_len: Option<u64>,
    pub largest_rule: Option<String>,
    /// Requests of `largest_max_model_len` tokens that fit in the pool at once: the largest
    /// max_num_seqs that can run at that length.
    pub max_num_seqs_at_largest: Option<u64>,
    /// What the checks assumed.
    pub notes: Vec<String>,
}

/// The CUDA context and what else the process holds before the engine's first snapshot, assumed
/// when the free memory at start is not given: the least seen, so that a refusal is never
/// predicted from the assumption alone on a card vLLM would start on.
const ASSUMED_CONTEXT: u64 = GIB / 4;

/// A signed byte count, grouped in thousands: −3,718,782,976.
fn signed(b: i128) -> String {
    let sign = if b < 0 { "−" } else { "" };
    format!("{sign}{}", crate::estimate::g(b.unsigned_abs()))
}

fn cdiv(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

/// vLLM V1's `estimate_max_model_len` (v1/core/kv_cache_utils.py, 0.8.4–0.11.0), step by step:
/// the largest length in [1, current_max] whose KV need fits in `available`, by binary search;
/// 0 when not even one token fits.
pub fn estimate_max_model_len(
    current_max: u64,
    available: u128,
    needed: impl Fn(u64) -> u128,
) -> u64 {
    let fits = |len: u64| needed(len) <= available;
    let (mut left, mut right) = (1u64, current_max);
    if !fits(left) {
        return 0;
    }
    let mut result = 1;
    while left <= right {
        let mid = left + (right - left) / 2;
        if fits(mid) {
            result = mid;
            left = mid + 1;
        } else {
            right = mid - 1;
        }
    }
    result
}

/// The refusals the release would meet for this plan.
pub fn assess(
    m: &ServeModel,
    r: &ServeRequest,
    s: &ServingSummary,
    f: &StartFacts,
    held: &Held,
) -> StartCheck {
    let mut check = match r.engine {
        Engine::Vllm => vllm(m, r, s, f, held),
        Engine::Sglang => sglang(m, r, s, f, held),
    };
    check.rules_of = s.rules_of.clone();
    check.starts = check.refusals.is_empty();
    check
}

/// TP against the attention and KV heads: `which` names the engine's files.
fn heads(m: &ServeModel, tp: u64, f: &StartFacts, engine: Engine, out: &mut Vec<Refusal>) {
    if let Some(h) = f.attention_heads
        && h > 0
        && !h.is_multiple_of(tp)
    {
        out.push(match engine {
            Engine::Vllm => Refusal {
                rule: "tensor_parallel_heads",
                source: "config.py ModelConfig.verify_with_parallel_config (0.5.5–0.10), config/model.py (0.11.0)".into(),
                message: format!(
                    "Total number of attention heads ({h}) must be divisible by tensor parallel size ({tp})."
                ),
                fix: format!("give a --tensor-parallel-size that divides {h}"),
            },
            Engine::Sglang => Refusal {
                rule: "tensor_parallel_heads",
                source: "the model's attention layer (models/llama.py LlamaAttention and the other families, 0.5.5)".into(),
                message: format!(
                    "AssertionError: assert self.total_num_heads % tp_size == 0 ({h} attention heads, TP {tp})"
                ),
                fix: format!("give a --tensor-parallel-size (--tp) that divides {h}"),
            },
        });
    }
    let kv = m.kv_heads;
    if !m.mla && kv > 0 {
        let (ok, assertion) = if kv >= tp {
            (
                kv.is_multiple_of(tp),
                "assert self.total_num_kv_heads % tp_size == 0",
            )
        } else {
            (
                tp.is_multiple_of(kv),
                "assert tp_size % self.total_num_kv_heads == 0",
            )
        };
        if !ok {
            out.push(Refusal {
                rule: "tensor_parallel_kv_heads",
                source: format!(
                    "the model's attention layer (models/llama.py LlamaAttention.__init__ and the other families, {})",
                    match engine {
                        Engine::Vllm => "vLLM 0.5.5–0.11.0",
                        Engine::Sglang => "SGLang 0.5.5",
                    }
                ),
                message: format!("AssertionError: {assertion} ({kv} KV heads, TP {tp})"),
                fix: format!("give a --tensor-parallel-size that divides the {kv} KV heads, or a multiple of them"),
            });
        }
    }
}

fn vllm(
    m: &ServeModel,
    r: &ServeRequest,
    s: &ServingSummary,
    f: &StartFacts,
    held: &Held,
) -> StartCheck {
    let version = r.version.unwrap_or(super::releases::VLLM_DEFAULT);
    let v0 = version < Version(0, 8, 0);
    let grouped = version >= Version(0, 9, 0);
    let tp = s.tensor_parallel_size;
    let len = s.max_model_len;
    let bs = s.block_size.max(1);
    let mut refusals = Vec::new();
    let mut notes = Vec::new();

    // 1. Engine arguments and config, before any GPU work.
    if let Some(b) = r.block_size {
        let choices: &[u64] = if grouped {
            &[1, 8, 16, 32, 64, 128]
        } else {
            &[8, 16, 32, 64, 128]
        };
        if !choices.contains(&b) {
            let list = choices
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            refusals.push(Refusal {
                rule: "block_size_choice",
                source: if grouped {
                    "config/cache.py BlockSize = Literal[1, 8, 16, 32, 64, 128] (0.9–0.11), the CLI's choices".into()
                } else {
                    "engine/arg_utils.py --block-size choices=[8, 16, 32, 64, 128] (0.5.5–0.8.x)".into()
                },
                message: format!(
                    "vllm serve: error: argument --block-size: invalid choice: {b} (choose from {list})"
                ),
                fix: format!("give --block-size 16 (or one of {list})"),
            });
        }
    }
    heads(m, tp, f, Engine::Vllm, &mut refusals);
    let sliding = m.layers.iter().any(Option::is_some);
    let (chunked, _) = defaults::chunked_prefill(version, len, sliding);
    if let (Some(mnbt), Some(seqs)) = (s.max_num_batched_tokens, s.max_num_seqs) {
        if mnbt < len && !chunked {
            refusals.push(Refusal {
                rule: "batched_tokens_below_max_model_len",
                source: "config.py SchedulerConfig._verify_args (0.5.5–0.7.3: V0 without chunked prefill)".into(),
                message: format!(
                    "max_num_batched_tokens ({mnbt}) is smaller than max_model_len ({len}). This effectively limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. Please increase max_num_batched_tokens or decrease max_model_len."
                ),
                fix: format!("give --max-num-batched-tokens {len} or more, or --max-model-len {mnbt} or less"),
            });
        }
        if mnbt < seqs {
            refusals.push(Refusal {
                rule: "batched_tokens_below_max_num_seqs",
                source: "config.py SchedulerConfig._verify_args (0.5.5–0.11.0)".into(),
                message: format!(
                    "max_num_batched_tokens ({mnbt}) must be greater than or equal to max_num_seqs ({seqs})."
                ),
                fix: format!("give --max-num-seqs {mnbt} or less, or --max-num-batched-tokens {seqs} or more"),
            });
        }
    }
    // The attention backend's own block sizes: V1's default FLASH_ATTN wants a multiple of 16
    // (V0 falls back to xFormers instead); an MLA backend forces its own (defaults.rs).
    if !v0 && !m.mla && !bs.is_multiple_of(16) {
        refusals.push(Refusal {
            rule: "block_size_backend",
            source: "v1/attention/backends/flash_attn.py FlashAttentionBackend.get_kv_cache_shape (the default CUDA backend, 0.8–0.11.0)".into(),
            message: "ValueError: Block size must be a multiple of 16.".into(),
            fix: "give --block-size 16 (or 32, 64, 128)".into(),
        });
    }

    // 2. The worker's device: bfloat16 needs compute capability 8.0.
    if let Some((major, minor)) = f.compute_capability
        && major < 8
        && m.dtype_rule.starts_with("bfloat16")
    {
        if f.dtype_explicit || !grouped {
            refusals.push(Refusal {
                rule: "bfloat16_unsupported",
                source: if grouped {
                    "platforms/cuda.py check_if_supports_dtype, from v1/worker/gpu_worker.py init_device (0.9–0.11.0)".into()
                } else {
                    "worker/worker.py _check_if_gpu_supports_dtype, from init_device (0.5.5–0.8.x)".into()
                },
                message: format!(
                    "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your {} GPU has compute capability {major}.{minor}. You can use float16 instead by explicitly setting the`dtype` flag in CLI, for example: --dtype=half.",
                    s.card
                ),
                fix: "give --dtype float16 (the same bytes: the plan's figures hold)".into(),
            });
        } else {
            notes.push(format!(
                "vLLM {version} serves this bfloat16 config in float16 on compute capability {major}.{minor} (--dtype auto: config/model.py _resolve_auto_dtype, the platform's first supported dtype); the bytes are the same"
            ));
        }
    }

    // 3. The worker's first memory snapshot (V1 from 0.9).
    let total = s.device_total_bytes.get();
    let u = s.gpu_memory_utilization;
    // 0.34.0's extensible KV cache skips the check: its budget is only a cap (v1/worker/utils.py
    // request_memory 0.34.0:783-786).
    let extensible = super::releases::extensible_kv_cache(version) && r.kv_cache_memory.is_none();
    if grouped && !extensible {
        let requested = total as f64 * u;
        let (free, given) = free_at_start(s, f);
        if (free as f64) < requested {
            refusals.push(Refusal {
                rule: "free_memory_below_utilization",
                source: "v1/worker/gpu_worker.py init_device (0.9–0.11.0): init_snapshot.free_memory < total × gpu_memory_utilization".into(),
                message: format!(
                    "Free memory on device {}({}/{} GiB) on startup is less than desired GPU memory utilization ({}, {} GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
                    if super::releases::free_memory_names_device(version) { "cuda:0 " } else { "" },
                    py2(free as f64 / GIB as f64),
                    py2(total as f64 / GIB as f64),
                    py_float(u),
                    py2(requested / GIB as f64)
                ),
                fix: format!(
                    "give --gpu-memory-utilization {:.2} or less (free ÷ total{}), or free the memory other processes hold",
                    ((free as f64 / total as f64) * 100.0).floor() / 100.0,
                    if given { "" } else { ", with the free memory ASSUMED" }
                ),
            });
            if !given {
                notes.push(format!(
                    "the free memory at start is ASSUMED: the device total less {} bytes of CUDA context; pass what nvidia-smi shows free (or the engine's \"Free memory on device\" figure) with --free-at-start",
                    crate::estimate::g(ASSUMED_CONTEXT)
                ));
            }
        }
    }

    // 4. Loading the weights, then the profile run, in the memory free at start.
    let (free, given) = free_at_start(s, f);
    let loading = out_of_memory(
        "oom_loading_weights",
        "the weights",
        held.weights,
        free,
        given,
        if v0 {
            "worker/model_runner.py load_model (0.5.5–0.7.3)"
        } else {
            "v1/worker/gpu_model_runner.py load_model (0.8–0.11.0)"
        },
    );
    let profiling = out_of_memory(
        "oom_profile_run",
        "the weights, the profile run's activation peak and the memory outside PyTorch",
        held.weights
            .saturating_add(held.activation_peak)
            .saturating_add(held.non_torch),
        free,
        given,
        if v0 {
            "worker/worker.py determine_num_available_blocks → model_runner.profile_run (0.5.5–0.7.3)"
        } else {
            "v1/worker/gpu_worker.py determine_available_memory → profile_run (0.8–0.11.0)"
        },
    );
    // A given KV budget (a log's "Available KV cache memory") means the weights loaded and the
    // profile ran: the terms beside it are information, not checked.
    let (loading, profiling) = if r.kv_cache_memory.is_some() {
        (None, None)
    } else {
        (loading, profiling)
    };
    let out_of_memory_first = loading.is_some() || profiling.is_some();
    refusals.extend(loading.or(profiling));

    // 5. The KV pool against one request of max_model_len.
    let budget = s.kv_budget_bytes;
    let page = s.page_bytes.get() as u128;
    let mnbt = s.max_num_batched_tokens.unwrap_or(len);
    let mut largest = None;
    let mut largest_rule = None;
    let mut seqs_at = None;
    // Out of memory before the pool is sized: the engine never reaches the KV checks.
    if out_of_memory_first {
    } else if v0 {
        let blocks = s.num_blocks.unwrap_or(0);
        let cite = if version < Version(0, 5, 5) {
            "engine/llm_engine.py _init_cache (0.2.x–0.4.x; as worker/worker.py raise_if_cache_size_invalid from 0.5)"
        } else {
            "worker/worker.py raise_if_cache_size_invalid (0.5.5–0.7.3)"
        };
        if blocks == 0 {
            refusals.push(no_memory(cite, budget, version, s.gpu_memory_utilization));
        } else if len > blocks * bs {
            let cap = blocks * bs;
            refusals.push(Refusal {
                rule: "max_model_len_above_kv_capacity",
                source: cite.into(),
                message: format!(
                    "The model's max seq len ({len}) is larger than the maximum number of tokens that can be stored in KV cache ({cap}). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
                ),
                fix: format!("give --max-model-len {cap} or less, or raise --gpu-memory-utilization"),
            });
            largest = Some(cap);
            largest_rule = Some(format!(
                "# GPU blocks {blocks} × block_size {bs}, the capacity V0's message names; V0 sizes its profile run by max_model_len without chunked prefill, so a shorter max_model_len frees a little more"
            ));
            seqs_at = Some(blocks / cdiv(cap, bs));
        }
    } else {
        let cite = if version < Version(0, 9, 0) {
            "v1/core/kv_cache_utils.py check_enough_kv_cache_memory (0.8.5:510-552)"
        } else if version < Version(0, 12, 0) {
            "v1/core/kv_cache_utils.py check_enough_kv_cache_memory (0.11.0:678-724)"
        } else if version < Version(0, 33, 0) {
            "v1/core/kv_cache_utils.py check_enough_kv_cache_memory (0.12.0–0.32.0; the null block held back from 0.29.0)"
        } else if super::releases::extensible_kv_cache(version) && r.kv_cache_memory.is_none() {
            "v1/core/kv_cache_planning.py shrink_kv_cache_configs after warm-up, the extensible KV cache (0.34.0:1827-1861)"
        } else {
            "v1/core/kv_cache_planning.py check_enough_kv_cache_memory (0.33.0–0.34.0)"
        };
        // 0.29.0 on: one block of every layer (the null block) is held back from the check.
        let budget = if super::releases::null_block_held_back(version) && budget > 0 {
            let n_sw = m.layers.iter().filter(|l| l.is_some()).count() as u64;
            let n_full = m.layers.len() as u64 - n_sw;
            let per_block = if grouped && n_sw > 0 && n_full > 0 {
                n_sw.min(n_full)
            } else {
                m.layers.len() as u64
            };
            budget - (s.page_bytes.get() * per_block) as i128
        } else {
            budget
        };
        if budget <= 0 {
            refusals.push(no_memory(cite, budget, version, s.gpu_memory_utilization));
        } else {
            let avail = budget as u128;
            // KVCacheSpec.max_memory_usage_bytes per layer, summed (max_memory_usage_bytes):
            // full attention cdiv(len, block) pages; sliding window (0.9+) the window less one
            // plus max_num_batched_tokens, at most len, + 1 page (v1/kv_cache_interface.py).
            let needed = |l: u64| -> u128 {
                m.layers
                    .iter()
                    .map(|w| match w {
                        Some(w) if grouped => {
                            (cdiv((w.saturating_sub(1) + mnbt).min(l), bs) + 1) as u128 * page
                        }
                        _ => cdiv(l, bs) as u128 * page,
                    })
                    .sum()
            };
            let need = needed(len);
            if need > avail {
                let est = estimate_max_model_len(len, avail, needed);
                let estimated_msg = if est > 0 && version >= Version(0, 8, 4) {
                    format!(
                        "Based on the available memory, the estimated maximum model length is {est}."
                    )
                } else {
                    String::new()
                };
                refusals.push(Refusal {
                    rule: "max_model_len_above_kv_capacity",
                    source: cite.into(),
                    message: if version >= Version(0, 12, 0) {
                        super::releases::kv_capacity_message(
                            version,
                            u,
                            len,
                            need as f64 / GIB as f64,
                            avail as f64 / GIB as f64,
                            est,
                        )
                    } else {
                        format!(
                            "To serve at least one request with the models's max seq len ({len}), ({:.2} GiB KV cache is needed, which is larger than the available KV cache memory ({:.2} GiB). {estimated_msg} Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
                            need as f64 / GIB as f64,
                            avail as f64 / GIB as f64
                        )
                    },
                    fix: if est > 0 {
                        format!("give --max-model-len {est} or less, or raise --gpu-memory-utilization")
                    } else {
                        "raise --gpu-memory-utilization, or split the model over more GPUs".into()
                    },
                });
                if est > 0 {
                    largest = Some(est);
                    largest_rule = Some(format!(
                        "estimate_max_model_len (v1/core/kv_cache_utils.py, from 0.8.4): binary search over [1, {len}] for the largest length whose per-layer KV need fits the {} bytes available",
                        crate::estimate::g(avail)
                    ));
                    seqs_at = Some((avail / needed(est).max(1)) as u64);
                }
            }
        }
    }
    StartCheck {
        starts: refusals.is_empty(),
        rules_of: String::new(),
        refusals,
        largest_max_model_len: largest,
        largest_rule,
        max_num_seqs_at_largest: seqs_at,
        notes,
    }
}

/// The memory free when the engine starts: given, or the device total less the CUDA context
/// (assumed); and whether it was given.
fn free_at_start(s: &ServingSummary, f: &StartFacts) -> (u64, bool) {
    match f.free_at_start {
        Some(b) => (b.get(), true),
        None => (
            s.device_total_bytes.get().saturating_sub(ASSUMED_CONTEXT),
            false,
        ),
    }
}

/// torch's out-of-memory error when `bytes` do not fit in the memory free at start.
fn out_of_memory(
    rule: &'static str,
    what: &str,
    bytes: u64,
    free: u64,
    given: bool,
    cite: &str,
) -> Option<Refusal> {
    (bytes > free).then(|| Refusal {
        rule,
        source: format!("{cite}; torch's caching allocator"),
        message: format!(
            "torch.OutOfMemoryError: CUDA out of memory. ({what}: {} bytes = {:.2} GiB, against {:.2} GiB free at start{})",
            crate::estimate::g(bytes),
            bytes as f64 / GIB as f64,
            free as f64 / GIB as f64,
            if given { "" } else { ", ASSUMED: the device total less 0.25 GiB of CUDA context" }
        ),
        fix: "split the model over more GPUs (--tensor-parallel-size), quantize it, or use a card with more memory".into(),
    })
}

fn no_memory(cite: &str, budget: i128, version: Version, u: f64) -> Refusal {
    Refusal {
        rule: "no_kv_memory",
        source: cite.into(),
        message: if version >= Version(0, 12, 0) {
            super::releases::no_kv_memory_message(version, u)
        } else {
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.".into()
        },
        fix: format!(
            "the KV budget is {} bytes: raise --gpu-memory-utilization, lower --max-num-batched-tokens/--max-num-seqs, or split the model over more GPUs (--tensor-parallel-size)",
            signed(budget)
        ),
    }
}

fn sglang(
    m: &ServeModel,
    r: &ServeRequest,
    s: &ServingSummary,
    f: &StartFacts,
    held: &Held,
) -> StartCheck {
    let mut refusals = Vec::new();
    let mut notes = Vec::new();
    heads(m, s.tensor_parallel_size, f, Engine::Sglang, &mut refusals);
    let (free, given) = free_at_start(s, f);
    if r.kv_cache_memory.is_some() {
        // A given budget (the log's K and V sizes): the weights loaded.
    } else if let Some(r) = out_of_memory(
        "oom_loading_weights",
        "the weights",
        held.weights,
        free,
        given,
        "model_executor/model_runner.py load_model (0.5.5)",
    ) {
        refusals.push(r);
    }
    if s.kv_tokens == 0 {
        refusals.push(Refusal {
            rule: "sglang_not_enough_memory",
            source: "model_executor/model_runner.py init_memory_pool (0.5.5): max_total_num_tokens <= 0".into(),
            message: "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.".into(),
            fix: format!(
                "the KV budget is {} bytes: raise --mem-fraction-static (--gpu-memory-utilization here), or split the model over more GPUs (--tp)",
                signed(s.kv_budget_bytes)
            ),
        });
    } else if s.max_model_len > s.kv_tokens {
        notes.push(format!(
            "SGLang starts with a context length ({}) above its pool ({} tokens): it does not refuse, it caps one request's input at max_total_num_tokens − 1 (managers/scheduler.py max_req_input_len, 0.5.5)",
            s.max_model_len, s.kv_tokens
        ));
    }
    StartCheck {
        starts: refusals.is_empty(),
        rules_of: String::new(),
        refusals,
        largest_max_model_len: None,
        largest_rule: None,
        max_num_seqs_at_largest: None,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_binary_search_is_the_engines() {
        // A hand computation from the source's algorithm: 32 full layers, block 16, a page of
        // 65,536 bytes; 1,000 blocks per layer fit: the answer is 16,000 tokens, not more.
        let page = 65_536u128;
        let avail = 1000 * 32 * page;
        let needed = |l: u64| 32 * cdiv(l, 16) as u128 * page;
        assert_eq!(estimate_max_model_len(131_072, avail, needed), 16_000);
        // Bounded by the configured length, and 0 when one token does not fit.
        assert_eq!(estimate_max_model_len(9_000, avail, needed), 9_000);
        assert_eq!(estimate_max_model_len(9_000, page, needed), 0);
        // A sliding layer's need stops growing past its window: more length fits.
        let hybrid = |l: u64| {
            16 * cdiv(l, 16) as u128 * page
                + 16 * (cdiv((127 + 2048).min(l), 16) + 1) as u128 * page
        };
        let est = estimate_max_model_len(131_072, avail, hybrid);
        assert!(hybrid(est) <= avail && hybrid(est + 1) > avail, "{est}");
    }

    #[test]
    fn python_number_forms() {
        assert_eq!(py2(3.254), "3.25");
        assert_eq!(py2(23.4), "23.4");
        assert_eq!(py2(22.0), "22.0");
        assert_eq!(py_float(0.9), "0.9");
        assert_eq!(py_float(1.0), "1.0");
    }
}
