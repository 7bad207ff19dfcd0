//! What changed in vLLM's and SGLang's memory rules after 0.11.0 / 0.5.5, release by release,
//! read from each release's wheel (the `.0` of every vLLM minor from 0.11.0 to 0.34.0; SGLang
//! 0.5.5 and 0.5.23, with 0.5.8–0.5.21 for the boundaries): each fact names the release that
//! brought it and the file (docs/research/serving/engine-rules.md §9).

use super::Version;
use crate::units::GIB;

/// The newest releases read: the default `--engine-version`.
pub const VLLM_DEFAULT: Version = Version(0, 34, 0);
pub const SGLANG_DEFAULT: Version = Version(0, 5, 23);

/// `gpu_memory_utilization` when not given, and where the release sets it.
pub fn vllm_gmu_default(v: Version) -> (f64, &'static str) {
    if extensible_kv_cache(v) {
        (
            1.0,
            "1.0 with the extensible KV cache, on by default on CUDA (config/cache.py 0.34.0:216-227 resolved_gpu_memory_utilization; config/vllm.py 0.34.0:3250-3254)",
        )
    } else if v >= Version(0, 20, 0) {
        (0.92, "config/cache.py CacheConfig, 0.20.0–0.33.0")
    } else {
        (
            0.9,
            "engine/arg_utils.py / config/cache.py default, 0.5.5–0.19.x",
        )
    }
}

/// CUDA graphs estimated before the pool is sized and charged to it
/// (`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS` defaults to "1" in envs.py from 0.20.0; "0" in
/// 0.18–0.19, absent before). 0.34's extensible KV cache measures them instead.
pub fn graphs_estimated(v: Version) -> bool {
    v >= Version(0, 20, 0) && !extensible_kv_cache(v)
}

/// What vLLM reads of a model to choose its model runner (config/vllm.py
/// `_is_default_v2_model_runner_model`): the config's `architectures`, whether it is a mixture of
/// experts, whether it is quantized (a `quantization_config`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunnerModel {
    pub architectures: Vec<String>,
    pub moe: bool,
    pub quantized: bool,
}

/// The architectures Model Runner V2 serves by default, by release (config/vllm.py
/// `DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES`, read in each `.0` wheel).
fn v2_default_architectures(v: Version) -> &'static [&'static str] {
    match (v.0, v.1) {
        (0, 22) => &["Qwen3ForCausalLM"],
        (0, 23) => &["LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM"],
        (0, 24) => &[
            "Qwen3ForCausalLM",
            "DeepseekV2ForCausalLM",
            "Qwen2MoeForCausalLM",
            "GraniteMoeForCausalLM",
            "LlamaForCausalLM",
            "MistralForCausalLM",
        ],
        (0, 25..=27) => &[
            "DeepseekV2ForCausalLM",
            "Qwen2MoeForCausalLM",
            "GraniteMoeForCausalLM",
        ],
        (0, 28) => &[
            "DeepseekV2ForCausalLM",
            "DeepseekV4ForCausalLM",
            "GraniteMoeForCausalLM",
            "InklingForCausalLM",
            "InklingForConditionalGeneration",
            "KimiK3ForConditionalGeneration",
            "LongcatFlashNgramForCausalLM",
            "Qwen2MoeForCausalLM",
        ],
        _ => &[],
    }
}

/// Why the CUDA graphs' charge is 0 in 0.22–0.28 for a model that runs on Model Runner V2 by
/// default: its `profile_cudagraph_memory` returns 0 until 0.29.0 implements it
/// (v1/worker/gpu/model_runner.py 0.22.0:620-622, 0.28.0:843-845; 0.29.0:896-898), so nothing is
/// taken from the pool for them (the graphs are then captured in the headroom). The runner is
/// V2 by default (config/vllm.py `_is_default_v2_model_runner_model`) for: 0.22–0.23 a listed
/// architecture, dense and not quantized; 0.24 a listed architecture; 0.25–0.28 a listed
/// architecture or any dense model. V2's unsupported features (`_get_v2_model_runner_unsupported_features`:
/// LoRA, speculative decoding…) are not modelled. None when the V1 runner's estimate applies.
pub fn v2_runner_graphs_zero(v: Version, m: &RunnerModel) -> Option<String> {
    if !(Version(0, 22, 0)..Version(0, 29, 0)).contains(&v) {
        return None;
    }
    let listed = m
        .architectures
        .iter()
        .any(|a| v2_default_architectures(v).contains(&a.as_str()));
    let v2 = match v.1 {
        22 | 23 => listed && !m.moe && !m.quantized,
        24 => listed,
        _ => listed || !m.moe,
    };
    v2.then(|| {
        format!(
            "0 B: vLLM {v} runs {} on Model Runner V2 by default (config/vllm.py _is_default_v2_model_runner_model), whose profile_cudagraph_memory returns 0 until 0.29.0 (v1/worker/gpu/model_runner.py): no graph memory is charged to the pool; the graphs are captured after it, in the headroom",
            m.architectures.first().map_or("this model", String::as_str)
        )
    })
}

/// 0.34.0 sizes the pool after warm-up and capture (v1/worker/extensible_kv_cache.py
/// measure_kv_cache_bytes), unless `--kv-cache-memory` is given.
pub fn extensible_kv_cache(v: Version) -> bool {
    v >= Version(0, 34, 0)
}

/// From 0.29.0 the capacity check leaves out the null block the BlockPool holds back
/// (v1/core/kv_cache_utils.py 0.29.0:975, kv_cache_planning.py 0.34.0:215).
pub fn null_block_held_back(v: Version) -> bool {
    v >= Version(0, 29, 0)
}

/// From 0.21.0 "GPU KV cache size: N tokens" is int(max_concurrency × max_model_len)
/// (v1/core/kv_cache_utils.py 0.21.0:1708, get_kv_cache_capacity from 0.24.0).
pub fn tokens_from_concurrency(v: Version) -> bool {
    v >= Version(0, 21, 0)
}

/// The CUDA default block size: `CacheConfig.DEFAULT_BLOCK_SIZE`, 16 through 0.33.0 and 64 in
/// 0.34.0; FLASH_ATTN, FLASHINFER and TRITON_ATTN all take 64, so it stands
/// (platforms/interface.py 0.34.0:760-790 update_block_size_for_backend).
pub fn default_block_size(v: Version) -> (u64, &'static str) {
    if v >= Version(0, 34, 0) {
        (
            64,
            "config/cache.py DEFAULT_BLOCK_SIZE 0.34.0:185, kept by the CUDA backends (v1/attention/backend.py get_preferred_block_size)",
        )
    } else {
        (
            16,
            "CUDA default (platforms/cuda.py; config/cache.py 0.11.0–0.33.0)",
        )
    }
}

/// Whether `vllm serve` gets 16,384 batched tokens on a card of ≥ 160 GiB (0.28.0 on), and
/// whether a GB10 is kept on the small tier (0.33.0 on): engine/arg_utils.py get_batch_defaults.
pub fn batch_tiers(v: Version) -> (bool, bool) {
    (v >= Version(0, 28, 0), v >= Version(0, 33, 0))
}

/// 0.14.0 on names the device in "Free memory on device cuda:0 (…)" (v1/worker/utils.py
/// request_memory).
pub fn free_memory_names_device(v: Version) -> bool {
    v >= Version(0, 14, 0)
}

const DOCS: &str =
    "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.";

/// What the release's KV refusals tell the user to do (v1/core/kv_cache_utils.py;
/// kv_cache_planning.py _more_kv_cache_memory_hint 0.33.0–0.34.0).
/// With the extensible KV cache the check that refuses is the one after warm-up
/// (kv_cache_planning.py shrink_kv_cache_configs 0.34.0:1827-1861, `after_warmup=True`).
fn hint(v: Version, u: f64) -> String {
    if extensible_kv_cache(v) {
        let used_by = "the model, its activations, CUDA graphs and warmup";
        let graphs =
            " CUDA graphs take less with fewer or smaller capture sizes in the compilation config.";
        if u < 1.0 {
            format!(
                "The KV cache gets what is left after {used_by} within `gpu_memory_utilization`={}; increase it (with the extensible KV cache it defaults to 1.0) or decrease `max_model_len` or `max_num_seqs`.{graphs}",
                py_float(u)
            )
        } else {
            format!(
                "The extensible KV cache already takes all device memory left after {used_by}; decrease `max_model_len` or `max_num_seqs`, or the model needs a device with more memory.{graphs}"
            )
        }
    } else {
        "Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory reservation on the CPU backend, despite its name).".into()
    }
}

/// "No available memory for the cache blocks." as the release words it.
pub fn no_kv_memory_message(v: Version, u: f64) -> String {
    if v >= Version(0, 22, 0) {
        format!(
            "No available memory for the cache blocks. {} {DOCS}",
            hint(v, u)
        )
    } else if v >= Version(0, 13, 0) {
        format!(
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine. {DOCS}"
        )
    } else {
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.".into()
    }
}

/// check_enough_kv_cache_memory's message for one request of max_model_len, as the release
/// words it (v1/core/kv_cache_utils.py 0.11.0–0.32.0, kv_cache_planning.py 0.33.0–0.34.0).
pub fn kv_capacity_message(
    v: Version,
    u: f64,
    len: u64,
    needed_gib: f64,
    available_gib: f64,
    estimated: u64,
) -> String {
    let old = v < Version(0, 14, 0);
    let est = match (estimated > 0, old) {
        (false, _) => String::new(),
        (true, true) => format!(
            "Based on the available memory, the estimated maximum model length is {estimated}."
        ),
        (true, false) => format!(
            "Based on the available memory, the estimated maximum model length is {estimated}. "
        ),
    };
    // 0.11–0.13 print "{:.2f}"; 0.14 on format_gib: str(round(x, 2)).
    let gib = |x: f64| {
        if old { format!("{x:.2}") } else { py2(x) }
    };
    let (needed, available) = (gib(needed_gib), gib(available_gib));
    let models = if v >= Version(0, 22, 0) {
        "model's"
    } else {
        "models's"
    };
    let head = format!(
        "To serve at least one request with the {models} max seq len ({len}), ({needed} GiB KV cache is needed, which is larger than the available KV cache memory ({available} GiB)."
    );
    if v >= Version(0, 33, 0) {
        format!(
            "{head} {est}{} Decreasing `max_model_len` also reduces what is needed. {DOCS}",
            hint(v, u)
        )
    } else if v >= Version(0, 22, 0) {
        format!(
            "{head} {est}Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. {DOCS}"
        )
    } else if v >= Version(0, 14, 0) {
        format!(
            "{head} {est}Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine. {DOCS}"
        )
    } else if v >= Version(0, 13, 0) {
        format!(
            "{head} {est} Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine. {DOCS}"
        )
    } else {
        format!(
            "{head} {est} Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
        )
    }
}

/// The margin 0.34.0's extensible KV cache keeps free beyond the transient peak:
/// max(1 GiB, 0.75 × peak) (v1/worker/extensible_kv_cache.py 0.34.0:64-65, 615).
pub fn extensible_margin(transient_peak: u64) -> u64 {
    GIB.max((transient_peak as f64 * 0.75) as u64)
}

/// 0.34.0's pool after warm-up and capture (v1/worker/extensible_kv_cache.py
/// measure_kv_cache_bytes 0.34.0:592-618): min(requested − engine's use, device headroom −
/// margin) − transient peak, where the engine's use is everything it holds but the pool
/// (weights + non-torch + CUDA graphs) and the headroom is the device total less that use and
/// what was in use at its first snapshot (`context`).
pub fn extensible_budget(
    total: u64,
    u: f64,
    held: u64,
    transient_peak: u64,
    context: u64,
) -> (i128, bool) {
    let requested = (total as f64 * u).ceil() as i128;
    let by_request = requested - held as i128;
    let by_device =
        total as i128 - context as i128 - held as i128 - extensible_margin(transient_peak) as i128;
    (
        by_request.min(by_device) - transient_peak as i128,
        by_request <= by_device,
    )
}

/// SGLang's default mem_fraction_static from 0.5.23's `_handle_gpu_memory_settings`
/// (arg_groups/memory_hook.py 0.5.23:84-160, 290-326, reserve_for_graph_mb 360-399): the
/// chunked-prefill size and decode graph batch by the device's MiB, prefill graphs (BREAKABLE by
/// default on CUDA, model_executor/cuda_graph_config.py 0.5.23:119-123) 8 MiB per captured size,
/// or 1.5 GiB for MLA.
pub fn sglang_default_fraction_0523(total: u64, tp: u64, mla: bool) -> (f64, String) {
    let mib = (total >> 20) as f64;
    let small_tp = tp < 4;
    let (chunk, decode_bs) = if mib < 20.0 * 1024.0 {
        (2048u64, 8u64)
    } else if mib < 35.0 * 1024.0 {
        (4096, if small_tp { 48 } else { 160 })
    } else if mib < 60.0 * 1024.0 {
        (4096, if small_tp { 32 } else { 160 })
    } else if mib < 160.0 * 1024.0 {
        (8192, if small_tp { 256 } else { 512 })
    } else {
        (16384, 512)
    };
    let (prefill, prefill_what) = if mla {
        (1536.0, "1536 MiB for MLA prefill graphs".to_string())
    } else {
        let sizes = prefill_graph_sizes(chunk);
        (
            sizes as f64 * 8.0,
            format!("{sizes} prefill graph sizes × 8 MiB"),
        )
    };
    let mut reserved = 512.0
        + chunk.max(2048) as f64 * 1.5
        + tp as f64 / 8.0 * 1024.0
        + decode_bs as f64 * 2.0
        + prefill;
    if mib > 60.0 * 1024.0 {
        reserved = f64::max(reserved, 10.0 * 1024.0);
    }
    let f = ((mib - reserved) / mib * 1000.0).round() / 1000.0;
    (
        f,
        format!(
            "round((device MiB {mib} − reserved {reserved} MiB) / device MiB, 3) (arg_groups/memory_hook.py 0.5.23 _handle_gpu_memory_settings: chunked_prefill_size {chunk}, decode graph max_bs {decode_bs} × 2 MiB, {prefill_what}, at least 10 GiB above 60 GiB)"
        ),
    )
}

/// How many prefill graph sizes 0.5.23 captures up to `max_bs` tokens
/// (arg_groups/cuda_graph_hook.py 0.5.23:480-497).
fn prefill_graph_sizes(max_bs: u64) -> usize {
    let ranges: [(u64, u64, u64); 6] = [
        (4, 32, 4),
        (48, 256, 16),
        (288, 512, 32),
        (576, 1024, 64),
        (1280, 4096, 256),
        (4608, max_bs, 512),
    ];
    ranges
        .iter()
        .flat_map(|&(a, b, s)| (a..=b).step_by(s as usize))
        .filter(|&x| x <= max_bs)
        .count()
}

/// A float as Python's `str(round(x, 2))` prints it: 3.25, 23.4, 22.0.
pub(super) fn py2(x: f64) -> String {
    let s = format!("{:.2}", (x * 100.0).round() / 100.0);
    let s = s.trim_end_matches('0');
    if s.ends_with('.') {
        format!("{s}0")
    } else {
        s.to_string()
    }
}

/// A float as Python's `str()` prints a setting such as gpu_memory_utilization: 0.9, 1.0.
pub(super) fn py_float(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_memory_utilization_defaults_by_release() {
        assert_eq!(vllm_gmu_default(Version(0, 19, 0)).0, 0.9);
        assert_eq!(vllm_gmu_default(Version(0, 20, 0)).0, 0.92);
        assert_eq!(vllm_gmu_default(Version(0, 33, 0)).0, 0.92);
        assert_eq!(vllm_gmu_default(Version(0, 34, 0)).0, 1.0);
    }

    #[test]
    fn the_release_boundaries_read_from_the_wheels() {
        assert!(!graphs_estimated(Version(0, 19, 0)));
        assert!(graphs_estimated(Version(0, 20, 0)));
        assert!(!graphs_estimated(Version(0, 34, 0)));
        assert!(!null_block_held_back(Version(0, 28, 0)));
        assert!(null_block_held_back(Version(0, 29, 0)));
        assert!(!tokens_from_concurrency(Version(0, 20, 0)));
        assert!(tokens_from_concurrency(Version(0, 21, 0)));
        assert_eq!(default_block_size(Version(0, 33, 0)).0, 16);
        assert_eq!(default_block_size(Version(0, 34, 0)).0, 64);
        assert_eq!(batch_tiers(Version(0, 27, 0)), (false, false));
        assert_eq!(batch_tiers(Version(0, 28, 0)), (true, false));
        assert_eq!(batch_tiers(Version(0, 33, 0)), (true, true));
        assert!(!free_memory_names_device(Version(0, 13, 0)));
        assert!(free_memory_names_device(Version(0, 14, 0)));
    }

    #[test]
    fn the_kv_refusals_are_worded_by_release() {
        let m = |v| kv_capacity_message(v, 0.9, 8192, 1.5, 1.25, 6000);
        assert!(m(Version(0, 11, 0)).contains("models's max seq len (8192), (1.50 GiB"));
        assert!(m(Version(0, 14, 0)).contains("(1.5 GiB KV cache"));
        assert!(m(Version(0, 21, 0)).contains("models's"));
        assert!(m(Version(0, 22, 0)).contains("model's max seq len"));
        assert!(m(Version(0, 22, 0)).contains("(which also controls CPU memory"));
        assert!(m(Version(0, 33, 0)).contains("Decreasing `max_model_len` also reduces"));
        assert!(
            kv_capacity_message(Version(0, 34, 0), 1.0, 8192, 1.5, 1.25, 0)
                .contains("The extensible KV cache already takes all device memory")
        );
        assert!(no_kv_memory_message(Version(0, 12, 0), 0.9).ends_with("the engine."));
        assert!(no_kv_memory_message(Version(0, 13, 0), 0.9).contains("conserving_memory"));
        assert!(no_kv_memory_message(Version(0, 22, 0), 0.9).contains("despite its name"));
    }

    #[test]
    fn the_extensible_pool_keeps_the_margin_and_the_peak_free() {
        let total = 80 * GIB;
        // u = 1.0: the device bound applies: 80 − 0.5 − 20 − max(1, 0.75 × 2) − 2 GiB.
        let (b, by_request) = extensible_budget(total, 1.0, 20 * GIB, 2 * GIB, GIB / 2);
        assert!(!by_request);
        assert_eq!(
            b,
            (80 * GIB - GIB / 2 - 20 * GIB - 3 * GIB / 2 - 2 * GIB) as i128
        );
        // u = 0.5: the request bound: 40 − 20 − 2 GiB.
        let (b, by_request) = extensible_budget(total, 0.5, 20 * GIB, 2 * GIB, GIB / 2);
        assert!(by_request);
        assert_eq!(b, (18 * GIB) as i128);
        // A small peak still keeps 1 GiB.
        assert_eq!(extensible_margin(GIB / 4), GIB);
    }

    #[test]
    fn sglang_0_5_23_reserves_prefill_graphs_and_the_80gb_floor() {
        // 8192 tokens: 8 + 14 + 8 + 8 + 12 + 8 sizes.
        assert_eq!(prefill_graph_sizes(8192), 58);
        assert_eq!(prefill_graph_sizes(4096), 50);
        // 24 GiB card, TP 1: 512 + 4096 × 1.5 + 128 + 48 × 2 + 50 × 8 MiB.
        let (f, _) = sglang_default_fraction_0523(24 * GIB, 1, false);
        let reserved = 512.0 + 6144.0 + 128.0 + 96.0 + 400.0;
        assert_eq!(
            f,
            ((24576.0 - reserved) / 24576.0 * 1000.0_f64).round() / 1000.0
        );
        // 80 GiB: 512 + 8192 × 1.5 + 128 + 256 × 2 + 58 × 8 = 13,904 MiB, above the 10 GiB floor.
        let (f, _) = sglang_default_fraction_0523(80 * GIB, 1, false);
        assert_eq!(f, 0.83);
        // MLA: 1.5 GiB for prefill graphs instead.
        let (f, _) = sglang_default_fraction_0523(80 * GIB, 1, true);
        assert_eq!(
            f,
            ((81920.0 - 14976.0) / 81920.0 * 1000.0_f64).round() / 1000.0
        );
    }

    #[test]
    fn model_runner_v2_charges_no_graphs_from_0_22_to_0_28() {
        let m = |arch: &str, moe: bool, quantized: bool| RunnerModel {
            architectures: vec![arch.to_string()],
            moe,
            quantized,
        };
        let v = |s: &str| Version::parse(s).unwrap();
        let llama = m("LlamaForCausalLM", false, false);
        assert!(v2_runner_graphs_zero(v("0.21.0"), &llama).is_none());
        assert!(
            v2_runner_graphs_zero(v("0.22.0"), &llama).is_none(),
            "0.22: Qwen3 only"
        );
        assert!(v2_runner_graphs_zero(v("0.22.0"), &m("Qwen3ForCausalLM", false, false)).is_some());
        assert!(v2_runner_graphs_zero(v("0.23.1"), &llama).is_some());
        assert!(
            v2_runner_graphs_zero(v("0.23.0"), &m("LlamaForCausalLM", false, true)).is_none(),
            "quantized"
        );
        assert!(
            v2_runner_graphs_zero(v("0.24.0"), &m("Qwen2MoeForCausalLM", true, false)).is_some()
        );
        // 0.25–0.28: every dense model, and the listed MoE.
        assert!(v2_runner_graphs_zero(v("0.25.0"), &m("GemmaForCausalLM", false, false)).is_some());
        assert!(
            v2_runner_graphs_zero(v("0.26.0"), &m("MixtralForCausalLM", true, false)).is_none()
        );
        assert!(
            v2_runner_graphs_zero(v("0.28.0"), &m("DeepseekV2ForCausalLM", true, false)).is_some()
        );
        assert!(
            v2_runner_graphs_zero(v("0.29.0"), &llama).is_none(),
            "0.29 implements the estimate"
        );
        let why = v2_runner_graphs_zero(v("0.24.0"), &llama).unwrap();
        assert!(why.contains("LlamaForCausalLM on Model Runner V2"), "{why}");
    }
}
