//! The serving planner (`estimate --serve`) on extreme models and requests: shared by the proptest
//! in tests/integration/properties.rs (the stable harness that runs here; libFuzzer needs
//! cargo-fuzz and the libfuzzer-sys crate, see fuzz/Cargo.toml). Every value a config or the
//! command line can give is drawn from the whole `u64` range (or a float's); the planner must
//! refuse with a message or plan sanely: never panic (the tests build with overflow checks, so a
//! wrap is a panic), never a negative or non-finite concurrency, and never fewer KV tokens on a
//! card with more memory.

use iteragpu::estimate::serving::{
    Engine, Rotary, ServeModel, ServeRequest, Version, VisionEncoder, plan,
};
use iteragpu::units::Bytes;

/// Bytes read from the front of an input.
pub const PLAN_BYTES: usize = 96;

/// A `u64` of any magnitude from two bytes: near the top of the range, small, or a byte shifted
/// anywhere.
fn wide(b: &[u8], i: usize) -> u64 {
    let byte = |k: usize| b.get(k).copied().unwrap_or(0);
    let (v, shape) = (u64::from(byte(i)), byte(i + 1));
    match shape % 5 {
        0 => u64::MAX - v,
        1 => v,
        2 => v + 1,
        _ => (v + 1) << (shape % 64),
    }
}

/// A value: mostly `sane` (a real model's or request's), one time in sixteen any magnitude, one in
/// thirty-two a multiple of the sane one.
fn pick(b: &[u8], i: usize, sane: u64) -> u64 {
    match b.get(i).copied().unwrap_or(0) % 32 {
        0 | 1 => wide(b, i + 1),
        2 => sane.saturating_mul(u64::from(b.get(i + 1).copied().unwrap_or(0)) + 1),
        _ => sane,
    }
}

/// The model and the request an input describes: Llama-3-8B served on an 80 GB card, with each
/// value replaced by an extreme one now and then.
pub fn case(b: &[u8]) -> (ServeModel, ServeRequest) {
    let byte = |k: usize| b.get(k).copied().unwrap_or(0);
    let layers = (pick(b, 0, 32) % 300) as usize;
    let window = match byte(3) % 3 {
        0 => Some(pick(b, 4, 4096)),
        _ => None,
    };
    let model = ServeModel {
        kv_heads: pick(b, 7, 8),
        head_size: pick(b, 10, 128),
        mla: byte(13) % 4 == 1,
        layers: (0..layers)
            .map(|i| if i % 2 == 0 { window } else { None })
            .collect(),
        hidden: pick(b, 14, 4096),
        q_width: pick(b, 17, 4096),
        intermediate: pick(b, 20, 14336),
        vocab: pick(b, 23, 128_256),
        dtype_bytes: pick(b, 26, 2),
        dtype_rule: "fuzz".into(),
        weights: Bytes(pick(b, 29, 16 << 30)),
        rotary: if byte(32) % 4 == 0 {
            Err("not sized".into())
        } else {
            Ok(Rotary {
                positions: pick(b, 33, 8192),
                dim: pick(b, 36, 128),
            })
        },
        encoder: (byte(93) % 3 == 0).then(|| VisionEncoder {
            image_size: pick(b, 94, 896),
            patches: pick(b, 97, 4096),
            hidden: pick(b, 100, 1152),
            intermediate: pick(b, 103, 4304),
            tokens_per_item: pick(b, 106, 256),
        }),
        runner: Default::default(),
    };
    let opt = |k: usize, sane: u64| (byte(k) % 2 == 1).then(|| pick(b, k + 1, sane));
    let utilization = match byte(39) % 8 {
        0 => None,
        1 => Some(f64::from(byte(40)) / 100.0),
        2 => Some(f64::from(byte(40)) * 1e300),
        3 => Some(-f64::from(byte(40))),
        _ => Some(0.9),
    };
    let request = ServeRequest {
        engine: if byte(41) % 2 == 0 {
            Engine::Vllm
        } else {
            Engine::Sglang
        },
        version: match byte(42) % 5 {
            0 => None,
            1 => Some(Version(0, 2, 7)),
            2 => Some(Version(0, 6, 3)),
            3 => Some(Version(0, 11, 0)),
            _ => Some(Version(0, u32::from(byte(43)), u32::MAX)),
        },
        card: "fuzz".into(),
        device_total: Bytes(pick(b, 44, 80 << 30)),
        device_total_source: "fuzz".into(),
        compute_major: Some(u32::from(byte(47) % 12)),
        gpu_memory_utilization: utilization,
        max_model_len: pick(b, 48, 8192),
        max_model_len_source: "fuzz".into(),
        max_num_seqs: opt(51, 256),
        max_num_batched_tokens: opt(55, 8192),
        tensor_parallel_size: pick(b, 59, 1),
        kv_fp8: byte(62) % 2 == 1,
        block_size: opt(63, 16),
        enforce_eager: byte(67) % 2 == 1,
        weights: opt(68, 16 << 30).map(Bytes),
        activation_peak: None,
        non_torch: opt(72, 1 << 30).map(Bytes),
        kv_cache_memory: opt(76, 32 << 30).map(Bytes),
        lengths: (0..byte(80) % 4)
            .map(|k| pick(b, 81 + 3 * usize::from(k), 4096))
            .collect(),
    };
    (model, request)
}

/// What a planned case gave, for the caller's counts.
#[derive(Debug, Default, Clone, Copy)]
pub struct Outcome {
    pub planned: bool,
}

/// Plans the case; `Err` names an inconsistency (a panic propagates).
pub fn run(b: &[u8]) -> Result<Outcome, String> {
    let (model, request) = case(b);
    let Ok(p) = plan(&model, &request) else {
        return Ok(Outcome { planned: false });
    };
    let s = &p.summary;
    for (len, n) in &s.concurrency {
        if !n.is_finite() || *n < 0.0 {
            return Err(format!(
                "concurrency {n} at length {len} for {model:?} {request:?}"
            ));
        }
    }
    if s.max_model_len != request.max_model_len {
        return Err(format!(
            "max_model_len {} planned for {} asked",
            s.max_model_len, request.max_model_len
        ));
    }
    if let Some(blocks) = s.num_blocks
        && blocks.checked_mul(s.block_size).is_none()
    {
        return Err(format!("{blocks} blocks × {} wraps", s.block_size));
    }
    // More memory on the card never means fewer KV tokens (the budget is a share of the card
    // unless it is given), once the settings the engines derive from the card's memory (vLLM's
    // profile-run sizes, SGLang's mem_fraction_static: larger on a larger card, so a larger
    // activation peak) are held at what the smaller card resolved.
    if request.kv_cache_memory.is_none()
        && let Some(double) = request.device_total.get().checked_mul(2)
    {
        let vllm = request.engine == Engine::Vllm;
        let bigger = ServeRequest {
            device_total: Bytes(double),
            gpu_memory_utilization: Some(s.gpu_memory_utilization),
            max_num_seqs: if vllm { s.max_num_seqs } else { None },
            max_num_batched_tokens: if vllm {
                s.max_num_batched_tokens
            } else {
                request.max_num_batched_tokens
            },
            ..request.clone()
        };
        if let Ok(q) = plan(&model, &bigger)
            && q.summary.kv_tokens < s.kv_tokens
        {
            return Err(format!(
                "{} KV tokens on a card of {} bytes, {} on one of {double}: {model:?} {request:?}",
                s.kv_tokens,
                request.device_total.get(),
                q.summary.kv_tokens
            ));
        }
    }
    Ok(Outcome { planned: true })
}
