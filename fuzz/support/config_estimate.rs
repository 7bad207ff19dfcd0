//! config.json → architecture → every kind of estimate, on whatever bytes: shared by the fuzz
//! target `config_estimate` and the proptest in tests/integration/properties.rs, so both run the
//! same code. Nothing here may panic, abort or take long; every estimate that succeeds must be
//! consistent (its total is the sum of its counted terms, its sizes within the bounds).

use iteragpu::dtype::Dtype;
use iteragpu::estimate::kv_cache::{CacheKind, CacheOptions, QuantizedSettings};
use iteragpu::estimate::training::Lora;
use iteragpu::estimate::weights::ModelWeights;
use iteragpu::estimate::{
    self, Estimate, KvRequest, Offload, Optimizer, Precision, Request, Sharding, Strategy,
    TrainingRequest, WeightsSource,
};
use iteragpu::model::config::{MAX_LAYERS, MAX_PARAMETERS};
use iteragpu::model::{Architecture, Config};
use std::path::Path;

/// The request around the config: what a command line could ask of it.
#[derive(Clone, Copy, Debug)]
pub struct Knobs {
    pub tokens: u64,
    pub sequences: u64,
    pub cache: u8,
    pub window: u64,
    pub kv_bits: u64,
    pub group_size: u64,
    pub residual: u64,
    pub optimizer: u8,
    pub precision: u8,
    pub lora_rank: u64,
    pub flags: u8,
}

impl Knobs {
    /// Knobs from the first bytes of a fuzz input (missing bytes read as 0).
    pub fn from_bytes(bytes: &[u8]) -> Knobs {
        let byte = |i: usize| bytes.get(i).copied().unwrap_or(0);
        // Any magnitude: a byte shifted anywhere in the u64 range, or close to its top.
        let wide = |i: usize| {
            let (b, shape) = (u64::from(byte(i)), byte(i + 1));
            match shape % 4 {
                0 => u64::MAX - b,
                1 => b,
                _ => b << (shape % 64),
            }
        };
        Knobs {
            tokens: wide(0),
            sequences: wide(2),
            cache: byte(4),
            window: wide(5),
            kv_bits: u64::from(byte(7) % 9),
            group_size: wide(8),
            residual: wide(10),
            optimizer: byte(12),
            precision: byte(13),
            lora_rank: wide(14),
            flags: byte(15),
        }
    }
}

/// How many leading bytes of a fuzz input `Knobs::from_bytes` reads.
pub const KNOB_BYTES: usize = 16;

/// What the run did, for the caller's assertions.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Whether the config was understood as an architecture.
    pub architecture: bool,
    /// Estimates that succeeded.
    pub estimates: usize,
    /// Messages of the refusals (config or estimate), each non-empty.
    pub refusals: Vec<String>,
}

/// Runs the whole pipeline on `config` and checks every estimate that succeeds; returns the
/// first inconsistency found, if any.
pub fn run(config: &[u8], knobs: Knobs) -> Result<Outcome, String> {
    let mut outcome = Outcome::default();
    let path = Path::new("fuzz/config.json");
    // The positions a request is checked against: bounded and positive, or refused.
    if let Ok(Some(n)) = Config::parse_bytes(path, config).and_then(|c| c.max_positions())
        && !(1..=iteragpu::model::config::MAX_POSITIONS).contains(&n)
    {
        return Err(format!("max_positions {n} taken past its bounds"));
    }
    let arch = match Config::parse_bytes(path, config).and_then(|c| Architecture::from_config(&c)) {
        Ok(arch) => arch,
        Err(e) => {
            outcome.refusals.push(e.to_string());
            return Ok(outcome);
        }
    };
    outcome.architecture = true;
    check_architecture(&arch)?;
    let nonzero = |n: u64| n.max(1);
    let model = |dtype: Dtype| {
        WeightsSource::Model(Box::new(ModelWeights {
            path: path.display().to_string(),
            architecture: arch.clone(),
            stored: None,
            compute_dtype: dtype,
            dtype_source: "fuzz".into(),
        }))
    };
    let dtype =
        [Dtype::Bfloat16, Dtype::Float32, Dtype::Float8E4m3fn][usize::from(knobs.flags % 3)];
    let kind = [
        CacheKind::Dynamic,
        CacheKind::Static,
        CacheKind::Sliding,
        CacheKind::Quantized,
        CacheKind::Offloaded,
    ][usize::from(knobs.cache % 5)];
    let options = CacheOptions {
        max_cache_len: (kind == CacheKind::Static).then_some(knobs.tokens.max(knobs.window)),
        window: (kind == CacheKind::Sliding && knobs.flags & 8 != 0)
            .then_some(nonzero(knobs.window)),
        quantized: QuantizedSettings {
            bits: knobs.kv_bits,
            group_size: nonzero(knobs.group_size),
            residual: knobs.residual,
        },
    };
    let tokens = nonzero(knobs.tokens);
    let kv = match kind.strategy(&options, tokens, &arch.kv) {
        Ok(strategy) => Some(KvRequest {
            layout: arch.kv.clone(),
            tokens,
            sequences: nonzero(knobs.sequences),
            element_bytes: dtype.bytes(),
            strategy,
            prompt_tokens: (knobs.flags & 16 != 0).then_some(tokens / 2 + 1),
            requests: Vec::new(),
        }),
        Err(e) => {
            outcome.refusals.push(e.to_string());
            None
        }
    };
    let optimizer = [
        Optimizer::Adamw,
        Optimizer::Adam,
        Optimizer::Sgd,
        Optimizer::SgdMomentum,
        Optimizer::Adamw8bit,
        Optimizer::Adafactor,
    ][usize::from(knobs.optimizer % 6)];
    let precision = [
        Precision::Fp32,
        Precision::Bf16Mixed,
        Precision::Fp16Mixed,
        Precision::Bf16,
    ][usize::from(knobs.precision % 4)];
    let training_with = |lora: Option<Lora>, sharding: Option<Sharding>| TrainingRequest {
        optimizer,
        precision,
        precision_stated: true,
        lora,
        gradient_checkpointing: knobs.flags & 32 != 0,
        flash_attention: knobs.flags & 64 != 0,
        batch: Some(nonzero(knobs.sequences)),
        context: (knobs.flags & 128 != 0).then_some(tokens),
        sharding,
    };
    let training = |lora: Option<Lora>| training_with(lora, None);
    // Sharded training over any world size: every strategy, with the offload the bits pick.
    let sharded = |strategy: Strategy| Sharding {
        strategy,
        world_size: nonzero(knobs.window),
        gpus_per_node: (knobs.flags & 2 != 0).then_some(1),
        offload: [None, Some(Offload::Optimizer), Some(Offload::Parameters)]
            [usize::from(knobs.kv_bits as u8 % 3)],
        largest_layer_parameters: None,
        comm_reserve: None,
    };
    let lora = Lora {
        rank: nonzero(knobs.lora_rank),
        targets: arch
            .groups
            .iter()
            .filter(|g| g.linear_dims().is_some())
            .map(|g| g.module().to_string())
            .take(2)
            .collect(),
    };
    let requests = [
        Request {
            weights: Some(model(dtype)),
            kv: None,
            training: None,
            reserve: None,
            vision: None,
        },
        // The KV cache alone too: with the weights, the prefill transient may refuse first.
        Request {
            weights: None,
            kv: kv.clone(),
            training: None,
            reserve: None,
            vision: None,
        },
        Request {
            weights: Some(model(dtype)),
            kv,
            training: None,
            reserve: None,
            vision: None,
        },
        Request {
            weights: Some(model(dtype)),
            kv: None,
            training: Some(training(None)),
            reserve: None,
            vision: None,
        },
        Request {
            weights: Some(model(dtype)),
            kv: None,
            training: Some(training(Some(lora))),
            reserve: None,
            vision: None,
        },
    ];
    let requests = requests.into_iter().chain(
        [
            Strategy::Ddp,
            Strategy::Zero1,
            Strategy::Zero2,
            Strategy::Zero3,
            Strategy::Fsdp,
        ]
        .map(|strategy| Request {
            weights: Some(model(dtype)),
            kv: None,
            training: Some(training_with(None, Some(sharded(strategy)))),
            reserve: None,
            vision: None,
        }),
    );
    for request in &requests.collect::<Vec<_>>() {
        match estimate::estimate(request) {
            Ok(est) => {
                check_estimate(&est)?;
                outcome.estimates += 1;
            }
            Err(e) => outcome.refusals.push(e.to_string()),
        }
    }
    if let Some(empty) = outcome.refusals.iter().find(|m| m.trim().is_empty()) {
        return Err(format!("a refusal without a message: {empty:?}"));
    }
    Ok(outcome)
}

fn check_architecture(arch: &Architecture) -> Result<(), String> {
    if arch.kv.layers.len() as u64 > MAX_LAYERS || arch.dims.num_layers > MAX_LAYERS {
        return Err(format!(
            "{} layers accepted, above the bound",
            arch.kv.layers.len()
        ));
    }
    if arch.parameters() > MAX_PARAMETERS as u128 {
        return Err(format!("{} parameters accepted", arch.parameters()));
    }
    if let Some(g) = arch.groups.iter().find(|g| g.checked_numel().is_none()) {
        return Err(format!("tensor {} of shape {:?} accepted", g.name, g.shape));
    }
    Ok(())
}

fn check_estimate(est: &Estimate) -> Result<(), String> {
    let sum = est
        .terms
        .iter()
        .filter(|t| t.in_total)
        .try_fold(0u64, |s, t| s.checked_add(t.bytes.get()));
    if sum != Some(est.total_bytes.get()) {
        return Err(format!(
            "the total {} is not the sum of the counted terms ({sum:?})",
            est.total_bytes.get()
        ));
    }
    Ok(())
}
