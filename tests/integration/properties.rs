//! Properties of the arithmetic, checked on random inputs.

use iteragpu::estimate::{CacheStrategy, KvRequest, kv_cache};
use iteragpu::model::KvLayout;
use iteragpu::model::safetensors::{parse_header, scan_reader};
use iteragpu::units::{Bytes, Decimal, GB, GIB, parse_size};
use proptest::prelude::*;
use std::io::Cursor;
use std::path::Path;

fn kv_bytes(
    layers: u64,
    heads: u64,
    dim: u64,
    tokens: u64,
    sequences: u64,
    strategy: CacheStrategy,
    window: Option<u64>,
) -> u64 {
    let req = KvRequest {
        layout: KvLayout::uniform(layers, heads, dim, window),
        tokens,
        sequences,
        element_bytes: 2,
        strategy,
        prompt_tokens: None,
        requests: Vec::new(),
    };
    kv_cache::terms(&req, &mut Vec::new()).expect("small inputs never overflow")[0]
        .bytes
        .get()
}

fn strategy() -> impl Strategy<Value = CacheStrategy> {
    prop_oneof![
        Just(CacheStrategy::Dynamic),
        (1u64..5000).prop_map(|window| CacheStrategy::Sliding { window }),
        (2u64..=8, 1u64..256, 0u64..512).prop_map(|(bits, group_size, residual)| {
            CacheStrategy::Quantized {
                bits,
                group_size,
                residual,
            }
        }),
        Just(CacheStrategy::Offloaded),
    ]
}

proptest! {
    #[test]
    fn kv_is_monotone_in_tokens_and_sequences(
        layers in 1u64..100, heads in 1u64..64, dim in 1u64..256,
        tokens in 1u64..100_000, more_tokens in 0u64..10_000,
        sequences in 1u64..64, more_sequences in 0u64..8,
        window in proptest::option::of(1u64..8192),
        strategy in strategy(),
    ) {
        let base = kv_bytes(layers, heads, dim, tokens, sequences, strategy.clone(), window);
        prop_assert!(kv_bytes(layers, heads, dim, tokens + more_tokens, sequences, strategy.clone(), window) >= base);
        prop_assert!(kv_bytes(layers, heads, dim, tokens, sequences + more_sequences, strategy, window) >= base);
    }

    #[test]
    fn dense_kv_is_linear_in_sequences(layers in 1u64..100, heads in 1u64..64, dim in 1u64..256, tokens in 1u64..100_000, sequences in 1u64..64) {
        let one = kv_bytes(layers, heads, dim, tokens, 1, CacheStrategy::Dynamic, None);
        prop_assert_eq!(kv_bytes(layers, heads, dim, tokens, sequences, CacheStrategy::Dynamic, None), one * sequences);
        prop_assert_eq!(one, 2 * layers * heads * dim * tokens * 2);
    }

    #[test]
    fn gb_and_gib_round_trip(bytes in 0u64..(1u64 << 50)) {
        // Printing with 2 decimals and parsing back stays within half a display unit.
        let b = Bytes(bytes);
        let gib = parse_size(&format!("{:.2}GiB", b.gib())).unwrap().get();
        let gb = parse_size(&format!("{:.2}GB", b.gb())).unwrap().get();
        prop_assert!(gib.abs_diff(bytes) <= GIB / 200 + 1);
        prop_assert!(gb.abs_diff(bytes) <= GB / 200 + 1);
        // Exact integers survive exactly.
        prop_assert_eq!(parse_size(&bytes.to_string()).unwrap().get(), bytes);
        prop_assert_eq!(parse_size(&format!("{}GiB", bytes >> 30)).unwrap().get(), (bytes >> 30) << 30);
    }

    #[test]
    fn weights_round_up_never_down(parameters in 1u64..1_000_000_000_000, tenths in 1u64..640) {
        let bits = Decimal::parse(&format!("{}.{}", tenths / 10, tenths % 10)).unwrap();
        let bytes = iteragpu::estimate::weights::bytes_for_bits(parameters, bits).unwrap();
        let exact = parameters as f64 * tenths as f64 / 80.0;
        prop_assert!(bytes as f64 >= exact - 1e-3 * exact.max(1.0) * 1e-6);
        prop_assert!((bytes as f64) < exact + 1.0 + exact * 1e-12);
    }

    /// The header parser never panics, whatever the bytes (the fuzz target runs the same code).
    #[test]
    fn header_parser_never_panics(data in proptest::collection::vec(any::<u8>(), 0..512), claimed in any::<u64>()) {
        let _ = parse_header(&data);
        let _ = scan_reader(Path::new("fuzz"), Cursor::new(&data), claimed);
        let _ = scan_reader(Path::new("fuzz"), Cursor::new(&data), data.len() as u64);
    }
}

#[path = "../../benches/support/doubling.rs"]
mod doubling;

mod frontier {
    use super::doubling::doubling_then_bisection;
    use iteragpu::sweep::search::{Bounds, Probe, find_guided};
    use proptest::prelude::*;

    /// The search with a pass/fail oracle that reports no peak and no capacity.
    fn find(
        b: Bounds,
        hint: Option<u64>,
        mut ok: impl FnMut(u64) -> bool,
    ) -> iteragpu::sweep::search::Frontier {
        find_guided(b, hint, None, |v| {
            Some(Probe {
                ok: ok(v),
                peak: None,
            })
        })
    }

    fn bounds() -> impl Strategy<Value = Bounds> {
        (1u64..5000, 1u64..200_000, 1u64..2000, 1usize..80).prop_map(
            |(lo, span, resolution, max_trials)| Bounds {
                lo,
                hi: lo + span,
                resolution,
                max_trials,
            },
        )
    }

    proptest! {
        /// For any monotone oracle (success up to a threshold), the search returns a success and
        /// a failure on the right sides of the threshold, within the resolution, and never
        /// exceeds its budget.
        #[test]
        fn finds_the_true_frontier(b in bounds(), threshold in 0u64..300_000, hint in proptest::option::of(0u64..300_000)) {
            let mut calls = 0usize;
            let f = find(b, hint, |v| { calls += 1; v <= threshold });
            prop_assert!(calls <= b.max_trials);
            prop_assert_eq!(calls, f.trials.len());
            for (v, ok) in &f.trials {
                prop_assert!(*v >= b.lo && *v <= b.hi, "value {v} outside bounds");
                prop_assert_eq!(*ok, *v <= threshold);
            }
            if let Some(s) = f.last_success { prop_assert!(s <= threshold); }
            if let Some(x) = f.first_failure { prop_assert!(x > threshold); }
            if !f.budget_exhausted {
                match (f.last_success, f.first_failure) {
                    (Some(s), Some(x)) => prop_assert!(x - s <= b.resolution, "{s}..{x} wider than {}", b.resolution),
                    (None, Some(x)) => prop_assert_eq!(x, b.lo, "failure at the first value"),
                    (Some(s), None) => prop_assert_eq!(s, b.hi, "success at the last value"),
                    (None, None) => prop_assert!(false, "no trial at all"),
                }
            }
        }

        #[test]
        fn the_reference_strategy_is_correct_too(b in bounds(), threshold in 0u64..300_000) {
            let f = doubling_then_bisection(b, |v| v <= threshold);
            if let Some(s) = f.last_success { prop_assert!(s <= threshold); }
            if let Some(x) = f.first_failure { prop_assert!(x > threshold); }
        }

        /// The guided search is correct for any monotone peak curve (convex, concave, with
        /// allocator-like steps), with or without a hint, and respects its budget.
        #[test]
        fn guided_search_finds_the_true_frontier(
            b in bounds(),
            base in 0u64..(1 << 30), lin in 0u64..(1 << 20), quad in 0u64..64, step in prop_oneof![Just(1u64), Just(2 << 20)],
            capacity in 1u64..(64u64 << 30),
            hint in proptest::option::of(0u64..300_000),
            know_capacity in any::<bool>(),
        ) {
            let peak = move |v: u64| (base + lin * v + quad * v * v).div_ceil(step) * step;
            let mut calls = 0usize;
            let f = find_guided(b, hint, know_capacity.then_some(capacity), |v| {
                calls += 1;
                let p = peak(v);
                Some(Probe { ok: p <= capacity, peak: Some(p) })
            });
            prop_assert!(calls <= b.max_trials);
            for (v, ok) in &f.trials {
                prop_assert!(*v >= b.lo && *v <= b.hi);
                prop_assert_eq!(*ok, peak(*v) <= capacity);
            }
            if let Some(s) = f.last_success { prop_assert!(peak(s) <= capacity); }
            if let Some(x) = f.first_failure { prop_assert!(peak(x) > capacity); }
            if !f.budget_exhausted {
                match (f.last_success, f.first_failure) {
                    (Some(s), Some(x)) => prop_assert!(x > s && x - s <= b.resolution),
                    (None, Some(x)) => prop_assert_eq!(x, b.lo),
                    (Some(s), None) => prop_assert_eq!(s, b.hi),
                    (None, None) => prop_assert!(false),
                }
            }
        }

        /// An exact hint costs two trials.
        #[test]
        fn an_exact_hint_costs_two_trials(lo in 1u64..1000, k in 1u64..500, resolution in 1u64..300) {
            let b = Bounds { lo, hi: lo + 1000 * resolution, resolution, max_trials: 64 };
            let threshold = lo + k * resolution;
            let f = find(b, Some(threshold), |v| v <= threshold);
            prop_assert_eq!(f.trials.len(), 2);
        }
    }
}

#[path = "../../fuzz/support/config_estimate.rs"]
mod config_estimate;

/// config.json → architecture → estimate on random configs: the fuzz target `config_estimate`
/// runs the same code on arbitrary bytes (`cargo fuzz run config_estimate`).
mod config_pipeline {
    use super::config_estimate::{KNOB_BYTES, Knobs, run};
    use proptest::prelude::*;
    use serde_json::{Value, json};
    use std::time::{Duration, Instant};

    /// Every tiny config of tests/fixtures/tiny (one per supported family and variant).
    pub(super) const BASES: [&str; 17] = [
        "deepseek_v3",
        "falcon",
        "falcon-new",
        "gemma",
        "gemma2",
        "gemma3_text",
        "gpt2",
        "gpt_neox",
        "llama",
        "mistral-sliding",
        "mixtral",
        "phi3",
        "phi3-sliding",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
    ];

    /// Fields the families read, where absurd values used to panic or run for minutes.
    pub(super) const KEYS: [&str; 43] = [
        "max_position_embeddings",
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "intermediate_size",
        "n_embd",
        "n_layer",
        "n_head",
        "n_positions",
        "n_inner",
        "num_local_experts",
        "num_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "shared_expert_intermediate_size",
        "decoder_sparse_step",
        "mlp_only_layers",
        "sliding_window",
        "max_window_layers",
        "use_sliding_window",
        "sliding_window_pattern",
        "layer_types",
        "q_lora_rank",
        "kv_lora_rank",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "v_head_dim",
        "n_routed_experts",
        "n_shared_experts",
        "first_k_dense_replace",
        "moe_layer_freq",
        "ffn_hidden_size",
        "num_kv_heads",
        "new_decoder_architecture",
        "multi_query",
        "tie_word_embeddings",
        "quantization_config",
        "text_config",
        "vision_config",
        "model_type",
    ];

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            4 => (0u64..5000).prop_map(Value::from),
            1 => prop::sample::select(vec![
                json!(0), json!(1), json!(100_000), json!(100_001), json!(1u64 << 24),
                json!((1u64 << 24) + 1), json!(1u64 << 40), json!(1_000_000_000_000_000_000u64),
                json!(u64::MAX), json!(1e30), json!(-1), json!(4096.0), json!(0.5), json!("8"),
                json!(null), json!(true), json!([1, 2, 3]), json!(["sliding_attention", "full_attention", "sliding_attention"]),
                json!({"quant_method": "gptq", "bits": 4, "group_size": 128}),
                json!({"quant_method": "awq", "bits": 3, "group_size": -1}),
                json!({"load_in_4bit": true, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true}),
                json!({"load_in_8bit": true, "llm_int8_skip_modules": ["lm_head"]}),
                json!({"quant_method": "fp8", "weight_block_size": [128, 128]}),
                json!({"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
                    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}}}}),
                json!({"quant_method": "hqq", "skip_modules": ["lm_head"],
                    "quant_config": {"weight_quant_params": {"nbits": 3, "group_size": 64, "axis": 0}}}),
                json!({"hidden_size": 16_777_216, "num_channels": 16_777_216, "patch_size": 16_777_216, "image_size": 16_777_216}),
                json!("llama"), json!("deepseek_v3"), json!("gemma3"),
            ]),
            1 => (0u64..=u64::MAX).prop_map(Value::from),
            1 => prop::collection::vec(0u64..200_000, 0..50).prop_map(|v| json!(v)),
        ]
    }

    fn knobs() -> impl Strategy<Value = Knobs> {
        any::<[u8; KNOB_BYTES]>().prop_map(|b| Knobs::from_bytes(&b))
    }

    pub(super) fn base(name: &str) -> serde_json::Map<String, Value> {
        let path = crate::common::fixture(&format!("tiny/{name}/config.json"));
        match serde_json::from_slice(&std::fs::read(path).expect("the tiny config exists")) {
            Ok(Value::Object(map)) => map,
            other => panic!("tiny/{name} is not a JSON object: {other:?}"),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Real configs with some fields replaced: refused with a message or estimated
        /// consistently, never a panic, never slow. Untouched tiny configs are always understood.
        #[test]
        fn config_to_estimate_never_panics(
            name in prop::sample::select(BASES.to_vec()),
            overrides in prop::collection::vec((prop::sample::select(KEYS.to_vec()), value()), 0..6),
            knobs in knobs(),
        ) {
            let mut config = base(name);
            let untouched = overrides.is_empty();
            for (key, value) in overrides {
                config.insert(key.to_string(), value);
            }
            let bytes = serde_json::to_vec(&config).expect("a map serializes");
            let start = Instant::now();
            let outcome = run(&bytes, knobs);
            prop_assert!(start.elapsed() < Duration::from_secs(10), "{name}: {:?}", start.elapsed());
            let outcome = match outcome {
                Ok(outcome) => outcome,
                Err(inconsistency) => return Err(TestCaseError::fail(inconsistency)),
            };
            prop_assert!(!untouched || outcome.architecture, "tiny/{name} refused: {:?}", outcome.refusals);
        }

        /// Arbitrary bytes as config.json: refused with a message, never a panic.
        #[test]
        fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..1024), knobs in knobs()) {
            let outcome = run(&data, knobs).map_err(TestCaseError::fail)?;
            prop_assert!(outcome.architecture || !outcome.refusals.is_empty());
        }
    }
}

/// The config reader → estimate as a campaign of `ITERAGPU_FUZZ_CASES` inputs (default 2,000):
/// each a tiny config with up to five fields replaced by extreme values (the proptest's keys), or
/// its bytes cut or flipped, from a fixed-seed generator, with the counts printed.
#[test]
fn config_reader_campaign() {
    use config_pipeline::{BASES, KEYS, base};
    use serde_json::{Value, json};
    let cases: u64 = std::env::var("ITERAGPU_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let bases: Vec<serde_json::Map<String, Value>> = BASES.iter().map(|n| base(n)).collect();
    let extremes = [
        json!(0),
        json!(1),
        json!(u64::MAX),
        json!(1u64 << 32),
        json!((1u64 << 32) + 1),
        json!(72057594037927937u64),
        json!(1e30),
        json!(-1),
        json!(null),
        json!("\u{1b}]0;t\u{7}"),
        json!([]),
        json!({}),
    ];
    let (mut understood, start) = (0u64, std::time::Instant::now());
    for _ in 0..cases {
        let r = next();
        let mut config = bases[(r % bases.len() as u64) as usize].clone();
        for k in 0..(r >> 8) % 6 {
            let pick = next();
            let value = if pick % 3 == 0 {
                json!(next() >> (pick % 64))
            } else {
                extremes[(pick % extremes.len() as u64) as usize].clone()
            };
            let key = KEYS[((pick >> 16) as usize + k as usize) % KEYS.len()];
            config.insert(key.to_string(), value);
        }
        let mut bytes = serde_json::to_vec(&config).unwrap();
        match (r >> 20) % 8 {
            0 => bytes.truncate((next() % (bytes.len() as u64 + 1)) as usize),
            1 => {
                let i = (next() % bytes.len() as u64) as usize;
                bytes[i] ^= 1 << (next() % 8);
            }
            _ => {}
        }
        let mut knob_bytes = [0u8; config_estimate::KNOB_BYTES];
        for b in knob_bytes.iter_mut() {
            *b = next() as u8;
        }
        let outcome = config_estimate::run(&bytes, config_estimate::Knobs::from_bytes(&knob_bytes))
            .unwrap_or_else(|e| panic!("{e}"));
        if outcome.architecture {
            understood += 1;
        }
    }
    println!(
        "config reader: {cases} cases, {understood} understood, the rest refused, in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    assert!(understood > 0);
}

#[path = "../../fuzz/support/serving_plan.rs"]
mod serving_plan;

/// The serving planner on extreme models and requests (every value from the whole `u64` range):
/// refused with a message or planned sanely, never a panic nor a wrap (tests build with overflow
/// checks). The fuzz target `serving_plan` runs the same code (`cargo fuzz run serving_plan`).
mod serving_planner {
    use super::serving_plan::{PLAN_BYTES, run};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

        #[test]
        fn the_serving_planner_never_panics_nor_wraps(data in prop::collection::vec(any::<u8>(), PLAN_BYTES)) {
            run(&data).map_err(TestCaseError::fail)?;
        }
    }

    /// The same property as a campaign of `ITERAGPU_FUZZ_CASES` inputs (default 20,000) from a
    /// fixed-seed generator, with the counts printed: what runs here without cargo-fuzz.
    #[test]
    fn serving_planner_campaign() {
        let cases: u64 = std::env::var("ITERAGPU_FUZZ_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20_000);
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut planned, start) = (0u64, std::time::Instant::now());
        for _ in 0..cases {
            let data: Vec<u8> = (0..PLAN_BYTES / 8)
                .flat_map(|_| next().to_le_bytes())
                .collect();
            if run(&data).unwrap_or_else(|e| panic!("{e}")).planned {
                planned += 1;
            }
        }
        println!(
            "serving planner: {cases} cases, {planned} planned, the rest refused, in {:.1} s",
            start.elapsed().as_secs_f64()
        );
        assert!(
            planned > 0,
            "no case was planned: the generator explores nothing"
        );
    }
}
