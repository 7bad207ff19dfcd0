//! The settings a vLLM release applies when `vllm serve` is not given them, by card and release,
//! each cited by file and release and printed as "default applied" (issue 32 item 4):
//! `max_num_batched_tokens`, `max_num_seqs`, chunked prefill, the block size and CUDA graphs.

use super::Version;
use crate::units::GIB;

/// The scheduler's settings as the release resolves them for `vllm serve` (usage context
/// OPENAI_API_SERVER), and the "default applied" lines for those not given.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub max_num_batched_tokens: u64,
    pub max_num_seqs: u64,
    pub chunked_prefill: bool,
    pub lines: Vec<String>,
}

/// Whether the release turns chunked prefill on for this `vllm serve`: V1 (0.8 on) always; V0
/// only above 32,768 tokens for a model without sliding window (`engine/arg_utils.py`
/// create_engine_config, use_long_context, 0.5.5–0.7.3), with the reason.
pub fn chunked_prefill(version: Version, max_model_len: u64, sliding: bool) -> (bool, String) {
    if version >= Version(0, 8, 0) {
        (
            true,
            "on: V1 always uses chunked prefill (engine/arg_utils.py _set_default_args_v1 0.8.x; _set_default_args 0.9–0.11)".into(),
        )
    } else if max_model_len > 32768 && !sliding {
        (
            true,
            format!(
                "on: V0 turns it on above 32,768 tokens (engine/arg_utils.py create_engine_config use_long_context, 0.5.5–0.7.3; max_model_len {max_model_len})"
            ),
        )
    } else {
        (
            false,
            format!(
                "off: V0 turns it on only above 32,768 tokens for a model without sliding window (engine/arg_utils.py create_engine_config use_long_context, 0.5.5–0.7.3; max_model_len {max_model_len}{})",
                if sliding { ", sliding window" } else { "" }
            ),
        )
    }
}

/// Whether the release gives this card its larger batch defaults: by name (H100, H200) in 0.8.x
/// (`engine/arg_utils.py _set_default_args_v1`); from 0.9 by memory, ≥ 70 GiB and not an A100
/// (`get_batch_defaults`, PR #17885: "Setting large `max_num_batched_tokens` for A100 reduces
/// throughput").
fn large_card(version: Version, card: &str, total: u64) -> (bool, String) {
    let name = card.to_ascii_lowercase();
    if version < Version(0, 9, 0) {
        let large = name.contains("h100") || name.contains("h200");
        (
            large,
            format!(
                "{} (engine/arg_utils.py _set_default_args_v1 0.8.x: `\"h100\" in device_name or \"h200\" in device_name`)",
                if large {
                    "an H100/H200"
                } else {
                    "not an H100/H200"
                }
            ),
        )
    } else {
        let (huge_tier, gb10_small) = super::releases::batch_tiers(version);
        if huge_tier && total >= 160 * GIB {
            return (
                true,
                "≥ 160 GiB (engine/arg_utils.py get_batch_defaults 0.28.0–0.34.0: `device_memory >= 160 * GiB_bytes`)".into(),
            );
        }
        if gb10_small && name.contains("gb10") {
            return (
                false,
                "a GB10, kept on the small tier (engine/arg_utils.py get_batch_defaults 0.33.0–0.34.0: compute capability 12.1)".into(),
            );
        }
        let large = total >= 70 * GIB && !name.contains("a100");
        (
            large,
            format!(
                "{} (engine/arg_utils.py get_batch_defaults 0.9–0.34: `device_memory >= 70 * GiB_bytes and \"a100\" not in device_name`)",
                if large {
                    "≥ 70 GiB and not an A100"
                } else if total >= 70 * GIB {
                    "an A100"
                } else {
                    "< 70 GiB"
                }
            ),
        )
    }
}

/// `max_num_batched_tokens`, `max_num_seqs` and chunked prefill as the release resolves them.
pub fn vllm_batch(
    version: Version,
    card: &str,
    total: u64,
    max_model_len: u64,
    sliding: bool,
    given_tokens: Option<u64>,
    given_seqs: Option<u64>,
) -> Batch {
    let mut lines = Vec::new();
    let v0 = version < Version(0, 8, 0);
    let (chunked, chunked_why) = chunked_prefill(version, max_model_len, sliding);
    lines.push(format!("chunked prefill {chunked_why}"));
    let (large, large_why) = large_card(version, card, total);
    let tokens = match given_tokens {
        Some(n) => n,
        None if v0 && chunked => {
            let n = if version < Version(0, 6, 6) {
                512
            } else {
                2048
            };
            lines.push(format!(
                "--max-num-batched-tokens {n}: V0 with chunked prefill (config.py SchedulerConfig {version}: 512 before 0.6.6, 2048 from 0.6.6)"
            ));
            n
        }
        None if v0 => {
            let n = max_model_len.max(2048);
            lines.push(format!(
                "--max-num-batched-tokens max(max_model_len, 2048) = {n} (config.py SchedulerConfig, V0 without chunked prefill)"
            ));
            n
        }
        None => {
            let huge = super::releases::batch_tiers(version).0 && total >= 160 * GIB;
            let n = if huge {
                16384
            } else if large {
                8192
            } else {
                2048
            };
            lines.push(format!(
                "--max-num-batched-tokens {n}: `vllm serve` (OPENAI_API_SERVER) default for a card {large_why}"
            ));
            n
        }
    };
    let seqs = match given_seqs {
        Some(n) => n,
        None => {
            let (n, why) = if v0 {
                (
                    256,
                    "EngineArgs.max_num_seqs, V0 (engine/arg_utils.py 0.5.5–0.7.3)".to_string(),
                )
            } else if large {
                (1024, format!("for a card {large_why}"))
            } else {
                (256, format!("for a card {large_why}"))
            };
            // 0.10.0–0.11.0 hold the default at or below max_num_batched_tokens, which the
            // scheduler requires (config.py SchedulerConfig._verify_args); 0.11.1 dropped the cap
            // (engine/arg_utils.py get_batch_defaults, read in the 0.11.1 wheel).
            let caps = version >= Version(0, 10, 0) && version < Version(0, 11, 1);
            let capped = if caps && n > tokens {
                format!(", capped at max_num_batched_tokens {tokens} (0.10.0–0.11.0)")
            } else {
                String::new()
            };
            let n = if caps { n.min(tokens) } else { n };
            lines.push(format!("--max-num-seqs {n}: {why}{capped}"));
            n
        }
    };
    Batch {
        max_num_batched_tokens: tokens,
        max_num_seqs: seqs,
        chunked_prefill: chunked,
        lines,
    }
}

/// The block size the release uses: the given one, or the backend's default; an MLA model's
/// backend forces its own from 0.9 (FlashMLA 64, CUTLASS MLA on Blackwell 128, platforms/cuda.py
/// check_and_update_config), whatever `--block-size` says. The line says which.
pub fn vllm_block_size(
    version: Version,
    mla: bool,
    compute_major: Option<u32>,
    given: Option<u64>,
) -> (u64, Option<String>) {
    let forced = (mla && version >= Version(0, 9, 0)).then(|| {
        if version >= Version(0, 11, 0) && compute_major.is_some_and(|c| c >= 10) {
            (
                128,
                "CUTLASS_MLA on Blackwell (platforms/cuda.py 0.11.0:130-185)",
            )
        } else {
            (64, "FlashMLA (platforms/cuda.py 0.9.2/0.11.0)")
        }
    });
    match (given, forced) {
        (Some(b), Some((f, why))) if b != f => (
            f,
            Some(format!(
                "--block-size {f}, not the {b} given: the MLA backend forces it, {why}"
            )),
        ),
        (Some(b), _) => (b, None),
        (None, Some((f, why))) => (f, Some(format!("--block-size {f}: {why}"))),
        (None, None) if version >= Version(0, 34, 0) => {
            let (b, why) = super::releases::default_block_size(version);
            (b, Some(format!("--block-size {b}: {why}")))
        }
        (None, None) => (
            16,
            Some(
                "--block-size 16: CUDA default (platforms/cuda.py; engine/arg_utils.py 0.5.5:81; config/cache.py to 0.33.0)"
                    .into(),
            ),
        ),
    }
}

/// CUDA graphs as the release captures them when `--enforce-eager` is not given.
pub fn vllm_cuda_graphs(version: Version, max_num_seqs: u64) -> String {
    if version < Version(0, 8, 0) {
        format!(
            "CUDA graphs captured (--enforce-eager off, the default): V0 captures batch sizes 1, 2, 4, 8, 16, … up to min(max_num_seqs {max_num_seqs}, 256) (worker/model_runner.py _BATCH_SIZES_TO_CAPTURE, 0.5.5–0.7.3)"
        )
    } else if version < Version(0, 11, 0) {
        "CUDA graphs captured (--enforce-eager off, the default): V1 piecewise graphs around attention (config.py CompilationConfig, 0.8–0.10)".into()
    } else if version < Version(0, 20, 0) {
        "CUDA graphs captured (--enforce-eager off, the default): V1 cudagraph_mode FULL_AND_PIECEWISE (config/compilation.py, from 0.11.0)".into()
    } else if version < Version(0, 34, 0) {
        "CUDA graphs captured (--enforce-eager off, the default), their memory estimated before the pool is sized and charged to it (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, envs.py 0.20.0–0.33.0)".into()
    } else {
        "CUDA graphs captured (--enforce-eager off, the default) before 0.34.0's extensible KV cache is sized: the pool gets what they leave (v1/worker/gpu_worker.py compile_or_warm_up_model 0.34.0)".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_batch_defaults_follow_the_release_rule_for_the_card() {
        let h100 = 80 * GIB;
        let b = |v: Version, card: &str, total: u64| {
            let d = vllm_batch(v, card, total, 8192, false, None, None);
            (d.max_num_batched_tokens, d.max_num_seqs)
        };
        // 0.11: ≥ 70 GiB and not an A100.
        assert_eq!(b(Version(0, 11, 0), "H100 80GB", h100), (8192, 1024));
        assert_eq!(b(Version(0, 11, 0), "A100 80GB", h100), (2048, 256));
        assert_eq!(b(Version(0, 11, 0), "RTX 4090", 24 * GIB), (2048, 256));
        assert_eq!(b(Version(0, 11, 0), "B200", 180 * GIB), (8192, 1024));
        // 0.28 on: ≥ 160 GiB gets 16,384; 0.33 on: a GB10 stays small.
        assert_eq!(b(Version(0, 27, 0), "B200", 180 * GIB), (8192, 1024));
        assert_eq!(b(Version(0, 28, 0), "B200", 180 * GIB), (16384, 1024));
        assert_eq!(b(Version(0, 32, 0), "GB10", 119 * GIB), (8192, 1024));
        assert_eq!(b(Version(0, 33, 0), "GB10", 119 * GIB), (2048, 256));
        // 0.8.x: by name only; an A100 80GB is not an H100.
        assert_eq!(b(Version(0, 8, 5), "A100 80GB", h100), (2048, 256));
        assert_eq!(b(Version(0, 8, 5), "H200", 141 * GIB), (8192, 1024));
        assert_eq!(b(Version(0, 8, 5), "B200", 180 * GIB), (2048, 256));
        // V0: max(max_model_len, 2048) and 256, whatever the card.
        assert_eq!(b(Version(0, 6, 4), "H100 80GB", h100), (8192, 256));
        let long = vllm_batch(
            Version(0, 6, 4),
            "H100 80GB",
            h100,
            65536,
            false,
            None,
            None,
        );
        assert!(long.chunked_prefill);
        assert_eq!(long.max_num_batched_tokens, 512);
        let sliding = vllm_batch(Version(0, 6, 6), "H100 80GB", h100, 65536, true, None, None);
        assert!(!sliding.chunked_prefill);
        assert_eq!(sliding.max_num_batched_tokens, 65536);
        // 0.10+: the default max_num_seqs never exceeds max_num_batched_tokens.
        let small = vllm_batch(
            Version(0, 10, 0),
            "H100 80GB",
            h100,
            8192,
            false,
            Some(512),
            None,
        );
        assert_eq!(small.max_num_seqs, 512);
        assert!(
            small.lines.iter().any(|l| l.contains("capped")),
            "{:?}",
            small.lines
        );
    }

    #[test]
    fn mla_backends_force_their_block_size_from_0_9() {
        assert_eq!(
            vllm_block_size(Version(0, 11, 0), true, Some(9), Some(16)).0,
            64
        );
        assert_eq!(
            vllm_block_size(Version(0, 11, 0), true, Some(10), None).0,
            128
        );
        assert_eq!(
            vllm_block_size(Version(0, 8, 5), true, Some(9), Some(32)).0,
            32
        );
        assert_eq!(
            vllm_block_size(Version(0, 11, 0), false, Some(9), Some(32)),
            (32, None)
        );
        assert_eq!(
            vllm_block_size(Version(0, 11, 0), false, Some(9), None).0,
            16
        );
        assert_eq!(
            vllm_block_size(Version(0, 33, 0), false, Some(9), None).0,
            16
        );
        assert_eq!(
            vllm_block_size(Version(0, 34, 0), false, Some(9), None).0,
            64
        );
    }
}
