use super::fsdp::{FsdpLayout, block_of};
use super::*;
use crate::estimate::Shard;
use crate::model::{Role, TensorGroup};

const LLAMA3_8B: u128 = 8_030_261_248;
const LLAMA3_8B_L: u128 = 128_256 * 4096;

#[test]
fn deepspeed_anchors_llama3_8b() {
    // research-issue13.md §5, from the transcribed estimators (1 node × 8 GPUs).
    assert_eq!(
        deepspeed_zero2(LLAMA3_8B, 8, 1, false),
        Some((385_452_539_904, 34_128_610_304))
    );
    assert_eq!(
        deepspeed_zero2(LLAMA3_8B, 8, 1, true),
        Some((385_452_539_904, 16_060_522_496))
    );
    assert_eq!(
        deepspeed_zero3(LLAMA3_8B, LLAMA3_8B_L, 8, 1, false, false),
        Some((25_216_155_648, 20_169_434_112))
    );
    assert_eq!(
        deepspeed_zero3(LLAMA3_8B, LLAMA3_8B_L, 8, 1, true, false),
        Some((192_726_269_952, 4_108_911_616))
    );
    assert_eq!(
        deepspeed_zero3(LLAMA3_8B, LLAMA3_8B_L, 8, 1, true, true),
        Some((216_817_053_696, 2_101_346_304))
    );
    // 8 nodes × 8 GPUs.
    assert_eq!(
        deepspeed_zero2(LLAMA3_8B, 8, 8, false).map(|f| f.1),
        Some(18_319_033_472)
    );
    assert_eq!(
        deepspeed_zero3(LLAMA3_8B, LLAMA3_8B_L, 8, 8, false, false).map(|f| f.1),
        Some(4_359_857_280)
    );
    // Past u128: None, never a wrap.
    assert_eq!(
        deepspeed_zero2(u64::MAX as u128, u64::MAX as u128, u64::MAX as u128, true),
        None
    );
}

#[test]
fn fsdp_padding() {
    // 10 rows over 4 ranks: 3 rows each, 12 once gathered.
    assert_eq!(fsdp_shard_numel(&[10, 7], 4), 21);
    assert_eq!(fsdp_unsharded_numel(&[10, 7], 4), 84);
    assert_eq!(fsdp_shard_numel(&[8, 7], 4), 14);
    assert_eq!(fsdp_shard_numel(&[], 4), 1);
    assert_eq!(fsdp_shard_numel(&[3], 8), 1);
    assert_eq!(partition(10, 4), 3);
    assert_eq!(partition(8, 4), 2);
}

fn grp(name: &str, shape: &[u64], count: u64) -> TensorGroup {
    TensorGroup {
        name: name.into(),
        shape: shape.to_vec(),
        count,
        role: Role::Other,
    }
}

#[test]
fn blocks_and_modules() {
    assert_eq!(
        block_of("model.layers.*.self_attn.q_proj.weight"),
        Some("model.layers.*")
    );
    assert_eq!(
        block_of("transformer.h.*.attn.c_attn.weight"),
        Some("transformer.h.*")
    );
    assert_eq!(block_of("model.embed_tokens.weight"), None);
    let groups = vec![
        grp("model.embed_tokens.weight", &[100, 8], 1),
        grp("model.layers.*.attn.weight", &[8, 8], 4),
        grp("model.layers.*.mlp.weight", &[16, 8], 1),
        grp("model.layers.*.moe.experts.up", &[4, 16, 8], 3),
        grp("model.layers.*.moe.experts.down", &[4, 8, 16], 3),
        grp("model.norm.weight", &[8], 1),
    ];
    let m = largest_module(&groups).unwrap();
    assert_eq!(
        (m.name.as_str(), m.parameters),
        ("model.layers.*.moe.experts", 1024)
    );
    let layout = FsdpLayout::of(&groups);
    // Every layer: attention 64; plus the heavier of the dense MLP (128) and the MoE (1024).
    assert_eq!(layout.largest_block(1), Some(("model.layers.*", 64 + 1024)));
    assert_eq!(layout.root_unsharded(1), 808);
    // Padding: 100 rows over 3 ranks → 34 rows each, 102 gathered; 8 → 3 each, 9.
    assert_eq!(layout.root_unsharded(3), 102 * 8 + 9);
}

#[test]
fn gpus_per_node_defaults_and_checks() {
    let sh = |n, gpn| Sharding {
        strategy: Strategy::Fsdp,
        world_size: n,
        gpus_per_node: gpn,
        offload: None,
        largest_layer_parameters: None,
        comm_reserve: None,
    };
    assert_eq!(sh(1, None).resolved_gpus_per_node().unwrap(), 1);
    assert_eq!(sh(6, None).resolved_gpus_per_node().unwrap(), 6);
    assert_eq!(sh(64, None).resolved_gpus_per_node().unwrap(), 8);
    assert_eq!(sh(16, Some(4)).resolved_gpus_per_node().unwrap(), 4);
    let e = sh(12, None)
        .resolved_gpus_per_node()
        .unwrap_err()
        .to_string();
    assert!(e.contains("--gpus-per-node") && e.contains("e.g. 6"), "{e}");
    let e = sh(12, Some(5))
        .resolved_gpus_per_node()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--gpus-per-node 5 does not divide --world-size 12"),
        "{e}"
    );
    assert!(sh(4, Some(0)).resolved_gpus_per_node().is_err());
}

use crate::estimate::{Estimate, Request, estimate};
use crate::units::Decimal;
use proptest::prelude::{Just, any, prop_assert, prop_oneof, proptest};
use proptest::strategy::Strategy as PropStrategy;

fn sharding(strategy: Strategy, world_size: u64) -> Sharding {
    Sharding {
        strategy,
        world_size,
        gpus_per_node: None,
        offload: None,
        largest_layer_parameters: None,
        comm_reserve: None,
    }
}

fn training(sh: Option<Sharding>, optimizer: Optimizer, precision: Precision) -> TrainingRequest {
    TrainingRequest {
        optimizer,
        precision,
        precision_stated: true,
        lora: None,
        gradient_checkpointing: false,
        flash_attention: false,
        batch: Some(1),
        context: None,
        sharding: sh,
    }
}

fn numbers(
    parameters: u64,
    sh: Option<Sharding>,
    optimizer: Optimizer,
    precision: Precision,
) -> Result<Estimate, EstimateError> {
    estimate(&Request {
        weights: Some(WeightsSource::Numbers {
            parameters,
            bits: Decimal::parse("16").unwrap(),
        }),
        kv: None,
        training: Some(training(sh, optimizer, precision)),
        reserve: None,
        vision: None,
    })
}

/// `numbers` sharded over `world_size` ranks with no other setting; the estimate must succeed.
fn sharded(
    parameters: u64,
    strategy: Strategy,
    world_size: u64,
    optimizer: Optimizer,
    precision: Precision,
) -> Estimate {
    numbers(
        parameters,
        Some(sharding(strategy, world_size)),
        optimizer,
        precision,
    )
    .unwrap()
}

fn model(
    name: &str,
    sh: Option<Sharding>,
    optimizer: Optimizer,
    precision: Precision,
) -> Result<Estimate, EstimateError> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/models")
        .join(name);
    let config = crate::model::Config::load(&path).unwrap();
    let architecture = crate::model::Architecture::from_config(&config).unwrap();
    estimate(&Request {
        weights: Some(WeightsSource::Model(Box::new(
            crate::estimate::weights::ModelWeights {
                path: name.into(),
                architecture,
                stored: None,
                compute_dtype: crate::dtype::Dtype::Bfloat16,
                dtype_source: "test".into(),
            },
        ))),
        kv: None,
        training: Some(training(sh, optimizer, precision)),
        reserve: None,
        vision: None,
    })
}

fn bytes_of(est: &Estimate, id: TermId) -> u64 {
    est.terms
        .iter()
        .find(|t| t.id == id)
        .unwrap_or_else(|| panic!("no term {id:?} in {:?}", est.terms))
        .bytes
        .get()
}

fn summary(est: &Estimate) -> &ShardingSummary {
    est.sharding
        .as_ref()
        .expect("a sharded estimate has a summary")
}

/// The model-state terms equal DeepSpeed's gpu_mem for mixed-precision AdamW (Llama-3-8B,
/// 8 and 64 GPUs), with and without offload; the host figures are DeepSpeed's cpu_mem.
#[test]
fn zero_terms_equal_deepspeed() {
    let p = LLAMA3_8B as u64;
    let l = LLAMA3_8B_L as u64;
    let cases: [(Strategy, u64, Option<Offload>, u64, u64); 7] = [
        (Strategy::Zero2, 8, None, 34_128_610_304, 385_452_539_904),
        (
            Strategy::Zero2,
            8,
            Some(Offload::Optimizer),
            16_060_522_496,
            385_452_539_904,
        ),
        (Strategy::Zero3, 8, None, 20_169_434_112, 25_216_155_648),
        (
            Strategy::Zero3,
            8,
            Some(Offload::Optimizer),
            4_108_911_616,
            192_726_269_952,
        ),
        (
            Strategy::Zero3,
            8,
            Some(Offload::Parameters),
            2_101_346_304,
            216_817_053_696,
        ),
        (
            Strategy::Zero2,
            64,
            None,
            18_319_033_472,
            385_452_539_904 / 8 * 8,
        ),
        (Strategy::Zero3, 64, None, 4_359_857_280, 25_216_155_648),
    ];
    for (strategy, n, offload, gpu, cpu) in cases {
        let mut sh = sharding(strategy, n);
        sh.offload = offload;
        if strategy == Strategy::Zero3 {
            sh.largest_layer_parameters = Some(l);
        }
        let est = numbers(p, Some(sh), Optimizer::Adamw, Precision::Bf16Mixed).unwrap();
        let s = summary(&est);
        let ds = s.deepspeed.as_ref().unwrap();
        assert_eq!(
            s.model_states_bytes.get(),
            gpu,
            "{strategy:?} N={n} {offload:?}"
        );
        assert_eq!(ds.gpu_bytes.get(), gpu, "{strategy:?} N={n} {offload:?}");
        if n == 8 {
            assert_eq!(ds.cpu_bytes_per_node.get(), cpu, "{strategy:?} {offload:?}");
        }
        // The in-total terms are the model states plus NCCL's assumed term.
        assert_eq!(est.total_bytes.get(), gpu + GIB);
    }
}

/// The ZeRO paper's closed forms (Ψ = 7.5 B, N_d = 64: 31.4, 16.6 and 1.9 GB), and the
/// difference to DeepSpeed's accounting: the fp32 gradient partition, and 4L for ZeRO-3.
#[test]
fn zero_paper_closed_forms() {
    let p = 7_500_000_000u64;
    let part = p / 64;
    let l = 1_000_000u64;
    for (strategy, paper) in [
        (Strategy::Zero1, 4 * p + 12 * part),
        (Strategy::Zero2, 2 * p + 14 * part),
        (Strategy::Zero3, 16 * part),
    ] {
        let mut sh = sharding(strategy, 64);
        if strategy == Strategy::Zero3 {
            sh.largest_layer_parameters = Some(l);
        }
        let est = numbers(p, Some(sh), Optimizer::Adamw, Precision::Bf16Mixed).unwrap();
        let s = summary(&est);
        assert_eq!(s.zero_paper_bytes.unwrap().get(), paper, "{strategy:?}");
        // ZeRO-1/2: + the fp32 gradient partition; ZeRO-3: its gradient partition is fp32
        // instead of 16-bit, + the gathered module.
        let extra = if strategy == Strategy::Zero3 {
            2 * part + 4 * l
        } else {
            4 * part
        };
        assert_eq!(s.model_states_bytes.get(), paper + extra);
    }
    assert_eq!(31_406_250_000, 4 * p + 12 * part);
    assert_eq!(16_640_625_000, 2 * p + 14 * part);
    assert_eq!(1_875_000_000, 16 * part);
}

/// When N does not divide P each rank holds ⌈P/N⌉: at most 17 bytes above DeepSpeed's
/// estimator, which divides exactly.
#[test]
fn partitions_round_up() {
    let est = sharded(
        1_000_003,
        Strategy::Zero2,
        8,
        Optimizer::Adamw,
        Precision::Bf16Mixed,
    );
    let s = summary(&est);
    let ds = s.deepspeed.as_ref().unwrap().gpu_bytes.get();
    let ours = s.model_states_bytes.get();
    assert!(ours >= ds && ours - ds < 18, "{ours} vs {ds}");
    assert_eq!(ours, 2 * 1_000_003 + 18 * 125_001);
}

/// DDP: the unsharded estimate plus the buckets, one flat gradient copy.
#[test]
fn ddp_is_the_replica_plus_buckets() {
    let p = 1_000_000u64;
    let plain = numbers(p, None, Optimizer::Adamw, Precision::Bf16Mixed).unwrap();
    let ddp = sharded(p, Strategy::Ddp, 4, Optimizer::Adamw, Precision::Bf16Mixed);
    assert_eq!(
        bytes_of(
            &ddp,
            TermId::DdpBuckets {
                dtype: "fp32".into()
            }
        ),
        4 * p
    );
    assert_eq!(ddp.total_bytes.get(), plain.total_bytes.get() + 4 * p + GIB);
    assert_eq!(summary(&ddp).model_states_bytes.get(), 18 * p + 4 * p);
    // Pure bf16: bf16 buckets.
    let bf16 = sharded(p, Strategy::Ddp, 1, Optimizer::Adamw, Precision::Bf16);
    assert_eq!(
        bytes_of(
            &bf16,
            TermId::DdpBuckets {
                dtype: "bf16".into()
            }
        ),
        2 * p
    );
    // World size 1: no NCCL.
    assert!(bf16.terms.iter().all(|t| t.id != TermId::NcclBuffers));
}

/// Other optimizers: our per-optimizer states on the partition, labelled as generalised.
#[test]
fn generalised_optimizers() {
    let p = 8_000_000u64;
    let sgd = sharded(p, Strategy::Zero2, 8, Optimizer::Sgd, Precision::Bf16Mixed);
    assert_eq!(
        bytes_of(
            &sgd,
            TermId::OptimizerStates {
                optimizer: Optimizer::Sgd,
                shard: Some(Shard::Partition)
            }
        ),
        0
    );
    let master = sgd
        .terms
        .iter()
        .find(|t| {
            t.id == TermId::MasterWeights {
                shard: Some(Shard::Partition),
            }
        })
        .unwrap();
    assert!(master.formula.contains("generalised"), "{}", master.formula);
    assert!(summary(&sgd).deepspeed.is_none());
    assert_eq!(summary(&sgd).model_states_bytes.get(), 2 * p + 10 * (p / 8));
    let momentum = sharded(
        p,
        Strategy::Zero1,
        8,
        Optimizer::SgdMomentum,
        Precision::Fp32,
    );
    // fp32: 4P weights + 4P gradients + (4 + 4 + 4)·P/N.
    assert_eq!(
        summary(&momentum).model_states_bytes.get(),
        8 * p + 12 * (p / 8)
    );
    let eight = numbers(
        p,
        Some(sharding(Strategy::Zero3, 8)).map(|mut s| {
            s.largest_layer_parameters = Some(1000);
            s
        }),
        Optimizer::Adamw8bit,
        Precision::Bf16Mixed,
    )
    .unwrap();
    let part = p / 8;
    assert_eq!(
        bytes_of(
            &eight,
            TermId::OptimizerStates {
                optimizer: Optimizer::Adamw8bit,
                shard: Some(Shard::Partition)
            }
        ),
        2 * (part + part.div_ceil(256) * 4)
    );
}

/// FSDP with shapes: 16 bytes per padded shard element (bf16-mixed AdamW), the root group
/// and the blocks unsharded; without shapes P/N and no transient terms.
#[test]
fn fsdp_terms() {
    let est = model(
        "llama-3-8b",
        Some(sharding(Strategy::Fsdp, 8)),
        Optimizer::Adamw,
        Precision::Bf16Mixed,
    )
    .unwrap();
    let p = LLAMA3_8B as u64;
    assert_eq!(summary(&est).model_states_bytes.get(), 16 * p / 8);
    assert_eq!(summary(&est).padding_counted, Some(true));
    let root = 2 * 128_256 * 4096 + 4096;
    let bf16 = || "bf16".to_string();
    assert_eq!(
        bytes_of(&est, TermId::FsdpRootGroup { dtype: bf16() }),
        2 * root
    );
    let layer: u64 = 2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14_336 * 4096 + 2 * 4096;
    assert_eq!(
        bytes_of(&est, TermId::FsdpGatheredBlocks { dtype: bf16() }),
        8 * layer
    );
    assert_eq!(
        bytes_of(&est, TermId::FsdpBlockGradients { dtype: bf16() }),
        2 * layer
    );
    assert_eq!(
        bytes_of(
            &est,
            TermId::FsdpReduceScatterInputs {
                dtype: "fp32".into()
            }
        ),
        8 * layer
    );
    // 6 ranks do not divide 4096 rows: the shards are padded.
    let six = model(
        "llama-3-8b",
        Some(sharding(Strategy::Fsdp, 6)),
        Optimizer::Adamw,
        Precision::Bf16Mixed,
    )
    .unwrap();
    assert!(summary(&six).model_states_bytes.get() > 16 * p / 6);
    // Without shapes: ⌈P/N⌉, padding not counted, no transients.
    let plain = sharded(p, Strategy::Fsdp, 8, Optimizer::Adamw, Precision::Bf16Mixed);
    assert_eq!(summary(&plain).model_states_bytes.get(), 16 * p / 8);
    assert_eq!(summary(&plain).padding_counted, Some(false));
    assert!(
        plain
            .left_out
            .iter()
            .any(|l| l.contains("FSDP's unsharded root group"))
    );
    // CPUOffloadPolicy: the shards on the host, per node.
    let mut sh = sharding(Strategy::Fsdp, 8);
    sh.offload = Some(Offload::Parameters);
    let off = model(
        "llama-3-8b",
        Some(sh),
        Optimizer::Adamw,
        Precision::Bf16Mixed,
    )
    .unwrap();
    assert_eq!(summary(&off).model_states_bytes.get(), 0);
    assert_eq!(
        summary(&off).host_memory_per_node_bytes.unwrap().get(),
        8 * (16 * p / 8)
    );
}

/// ZeRO-3 at world size 1: the unsharded bytes plus the gathered module (4·L), no NCCL, and
/// without torch's foreach temporaries (DeepSpeed's fused Adam steps in place).
#[test]
fn zero3_on_one_rank() {
    let plain = model("llama-3-8b", None, Optimizer::Adamw, Precision::Bf16Mixed).unwrap();
    let one = model(
        "llama-3-8b",
        Some(sharding(Strategy::Zero3, 1)),
        Optimizer::Adamw,
        Precision::Bf16Mixed,
    )
    .unwrap();
    let foreach = bytes_of(
        &plain,
        TermId::OptimizerStepTemporaries {
            optimizer: Optimizer::Adamw,
        },
    );
    assert_eq!(foreach, 4 * LLAMA3_8B as u64);
    assert_eq!(
        one.total_bytes.get(),
        plain.total_bytes.get() - foreach + 4 * LLAMA3_8B_L as u64
    );
    assert_eq!(
        summary(&one).largest_module.as_ref().unwrap().name,
        "model.embed_tokens"
    );
}

#[test]
fn refusals_name_the_fix() {
    let refuse = |sh: Sharding, opt: Optimizer, prec: Precision, needle: &str| {
        let e = numbers(1_000_000, Some(sh), opt, prec)
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{needle:?} not in {e}");
    };
    let (a, m) = (Optimizer::Adamw, Precision::Bf16Mixed);
    refuse(
        sharding(Strategy::Zero3, 8),
        a,
        m,
        "--largest-layer-parameters N",
    );
    let mut sh = sharding(Strategy::Zero3, 8);
    sh.largest_layer_parameters = Some(2_000_000);
    refuse(sh, a, m, "more than the model's --parameters");
    let mut sh = sharding(Strategy::Zero2, 8);
    sh.offload = Some(Offload::Parameters);
    refuse(sh, a, m, "--shard zero3 --offload parameters");
    let mut sh = sharding(Strategy::Ddp, 8);
    sh.offload = Some(Offload::Optimizer);
    refuse(sh, a, m, "drop --offload");
    let mut sh = sharding(Strategy::Fsdp, 8);
    sh.offload = Some(Offload::Optimizer);
    refuse(sh, a, m, "use --offload parameters");
    let mut sh = sharding(Strategy::Zero1, 8);
    sh.offload = Some(Offload::Optimizer);
    refuse(sh, a, m, "--shard zero2 --offload optimizer");
    let mut sh = sharding(Strategy::Fsdp, 12);
    sh.gpus_per_node = Some(5);
    refuse(sh, a, m, "does not divide");
    refuse(sharding(Strategy::Fsdp, 0), a, m, "--world-size 1 or more");
    let mut sh = sharding(Strategy::Fsdp, 1);
    sh.comm_reserve = Some(Bytes(1));
    refuse(sh, a, m, "drop --comm-reserve");
    let mut sh = sharding(Strategy::Ddp, 8);
    sh.largest_layer_parameters = Some(10);
    refuse(sh, a, m, "drop it");
    refuse(
        sharding(Strategy::Zero2, 8),
        a,
        Precision::Bf16,
        "bf16-mixed",
    );
    refuse(
        sharding(Strategy::Fsdp, 8),
        Optimizer::Adafactor,
        m,
        "adafactor",
    );
    let quantized = estimate(&Request {
        weights: Some(WeightsSource::Numbers {
            parameters: 1000,
            bits: Decimal::parse("4").unwrap(),
        }),
        kv: None,
        training: Some(training(Some(sharding(Strategy::Fsdp, 8)), a, m)),
        reserve: None,
        vision: None,
    })
    .unwrap_err()
    .to_string();
    assert!(quantized.contains("--bits 16 or 32"), "{quantized}");
}

#[test]
fn huge_inputs_are_errors_not_wraps() {
    for strategy in [
        Strategy::Ddp,
        Strategy::Zero1,
        Strategy::Zero2,
        Strategy::Fsdp,
    ] {
        let e = numbers(
            u64::MAX,
            Some(sharding(strategy, 1)),
            Optimizer::Adamw,
            Precision::Bf16Mixed,
        )
        .unwrap_err();
        assert!(
            matches!(e, EstimateError::Overflow { .. }),
            "{strategy:?}: {e}"
        );
    }
    let mut sh = sharding(Strategy::Zero3, u64::MAX);
    sh.gpus_per_node = Some(1);
    sh.largest_layer_parameters = Some(u64::MAX);
    let e = numbers(u64::MAX, Some(sh), Optimizer::Adamw, Precision::Bf16Mixed).unwrap_err();
    assert!(matches!(e, EstimateError::Overflow { .. }), "{e}");
    // DeepSpeed's host formula multiplies P by 4·N: checked too.
    let mut sh = sharding(Strategy::Zero2, u64::MAX);
    sh.gpus_per_node = Some(1);
    sh.offload = Some(Offload::Optimizer);
    let e = numbers(1 << 62, Some(sh), Optimizer::Adamw, Precision::Bf16Mixed).unwrap_err();
    assert!(matches!(e, EstimateError::Overflow { .. }), "{e}");
    // A huge world size is fine: the partitions shrink.
    let mut sh = sharding(Strategy::Zero2, u64::MAX);
    sh.gpus_per_node = Some(1);
    assert!(numbers(1000, Some(sh), Optimizer::Adamw, Precision::Bf16Mixed).is_ok());
}

fn any_strategy() -> impl PropStrategy<Value = (Strategy, Option<Offload>)> {
    prop_oneof![
        Just((Strategy::Ddp, None)),
        Just((Strategy::Zero1, None)),
        Just((Strategy::Zero2, None)),
        Just((Strategy::Zero2, Some(Offload::Optimizer))),
        Just((Strategy::Zero3, None)),
        Just((Strategy::Zero3, Some(Offload::Optimizer))),
        Just((Strategy::Zero3, Some(Offload::Parameters))),
        Just((Strategy::Fsdp, None)),
        Just((Strategy::Fsdp, Some(Offload::Parameters))),
    ]
}

fn states(
    parameters: u64,
    (strategy, offload): (Strategy, Option<Offload>),
    world_size: u64,
    optimizer: Optimizer,
    precision: Precision,
    shapes: bool,
) -> u64 {
    let mut sh = sharding(strategy, world_size);
    sh.gpus_per_node = Some(1);
    sh.offload = offload;
    let est = if shapes {
        model("llama-style-8l", Some(sh), optimizer, precision)
    } else {
        if strategy == Strategy::Zero3 {
            sh.largest_layer_parameters = Some(parameters.div_ceil(3));
        }
        numbers(parameters, Some(sh), optimizer, precision)
    };
    est.unwrap().sharding.unwrap().model_states_bytes.get()
}

/// Every term of every sharded layout has its own id in its estimate, and its English name
/// reads back to that id (what a file without ids is loaded with).
#[test]
fn every_term_has_its_own_id() {
    let offloads = [None, Some(Offload::Optimizer), Some(Offload::Parameters)];
    let optimizers = [Optimizer::Adamw, Optimizer::Sgd, Optimizer::Adamw8bit];
    let precisions = [Precision::Fp32, Precision::Bf16Mixed, Precision::Bf16];
    let mut made = 0;
    for strategy in <Strategy as strum::VariantArray>::VARIANTS {
        for (n, offload, optimizer, precision, shapes) in
            combinations(&[1, 8], &offloads, &optimizers, &precisions, &[false, true])
        {
            let mut sh = sharding(*strategy, n);
            sh.offload = offload;
            let est = if shapes {
                model("llama-style-8l", Some(sh), optimizer, precision)
            } else {
                if *strategy == Strategy::Zero3 {
                    sh.largest_layer_parameters = Some(1000);
                }
                numbers(1_000_000, Some(sh), optimizer, precision)
            };
            let Ok(est) = est else { continue };
            made += 1;
            let mut keys: Vec<&str> = est.terms.iter().map(|t| t.id.key()).collect();
            keys.sort();
            keys.dedup();
            assert_eq!(keys.len(), est.terms.len(), "{:?}", est.terms);
            for t in &est.terms {
                assert_eq!(TermId::from_english(&t.name), t.id, "{}", t.name);
            }
        }
    }
    assert!(made > 50, "{made} estimates");
}

fn combinations<A: Copy, B: Copy, C: Copy, D: Copy, E: Copy>(
    a: &[A],
    b: &[B],
    c: &[C],
    d: &[D],
    e: &[E],
) -> Vec<(A, B, C, D, E)> {
    let mut out = Vec::new();
    for &a in a {
        for &b in b {
            for &c in c {
                for &d in d {
                    for &e in e {
                        out.push((a, b, c, d, e));
                    }
                }
            }
        }
    }
    out
}

/// The one exception to the property below: bitsandbytes keeps fp32 states for a tensor
/// under 4,096 values (min_8bit_size), so a partition that falls below it holds more.
#[test]
fn adamw_8bit_partitions_below_4096_values_keep_fp32_states() {
    let at = |n| {
        let mut sh = sharding(Strategy::Zero2, n);
        sh.gpus_per_node = Some(1);
        numbers(
            8 * 4096,
            Some(sh),
            Optimizer::Adamw8bit,
            Precision::Bf16Mixed,
        )
        .unwrap()
        .sharding
        .unwrap()
        .model_states_bytes
        .get()
    };
    assert!(at(9) > at(8), "{} vs {}", at(9), at(8));
}

proptest! {
    /// Per-rank model states never grow with the world size, for every strategy, offload,
    /// optimizer (those sharding accepts; adamw-8bit apart, see above) and precision, with
    /// and without tensor shapes (FSDP's padded shards included).
    #[test]
    fn model_states_never_grow_with_world_size(
        parameters in 1u64..50_000_000_000,
        strategy in any_strategy(),
        n in 1u64..3000,
        more in 0u64..3000,
        optimizer in prop_oneof![
            Just(Optimizer::Adamw), Just(Optimizer::Adam), Just(Optimizer::Sgd),
            Just(Optimizer::SgdMomentum),
        ],
        precision in prop_oneof![
            Just(Precision::Fp32), Just(Precision::Bf16Mixed), Just(Precision::Fp16Mixed),
            Just(Precision::Bf16),
        ],
        shapes in any::<bool>(),
    ) {
        let zero = matches!(strategy.0, Strategy::Zero1 | Strategy::Zero2 | Strategy::Zero3);
        // ZeRO refuses pure bf16 (DeepSpeed keeps an fp32 master partition).
        let precision = if zero && precision == Precision::Bf16 { Precision::Bf16Mixed } else { precision };
        let small = states(parameters, strategy, n, optimizer, precision, shapes);
        let large = states(parameters, strategy, n + more, optimizer, precision, shapes);
        prop_assert!(large <= small, "{strategy:?} {optimizer:?} {precision:?}: N={n} → {small}, N={} → {large}", n + more);
    }
}

/// The refused offloads come from a table: each message, word for word, as the match before it
/// wrote them, and every other pairing accepted.
#[test]
fn refused_offloads_are_worded_as_before() {
    let refused = [
        (
            Strategy::Ddp,
            Offload::Optimizer,
            "--offload optimizer with --shard ddp: DistributedDataParallel keeps every state on each GPU; offloading is part of zero2, zero3 and fsdp: choose one of them, or drop --offload",
        ),
        (
            Strategy::Ddp,
            Offload::Parameters,
            "--offload parameters with --shard ddp: DistributedDataParallel keeps every state on each GPU; offloading is part of zero2, zero3 and fsdp: choose one of them, or drop --offload",
        ),
        (
            Strategy::Zero1,
            Offload::Optimizer,
            "--offload optimizer with --shard zero1 is not estimated (DeepSpeed publishes estimators for ZeRO-2 and ZeRO-3 only); use --shard zero2 --offload optimizer (the same optimizer offload, with the gradients partitioned too), or drop --offload",
        ),
        (
            Strategy::Zero1,
            Offload::Parameters,
            "--offload parameters with --shard zero1 is not estimated (DeepSpeed publishes estimators for ZeRO-2 and ZeRO-3 only); use --shard zero2 --offload optimizer (the same optimizer offload, with the gradients partitioned too), or drop --offload",
        ),
        (
            Strategy::Zero2,
            Offload::Parameters,
            "--offload parameters with --shard zero2: only stages that partition the parameters can keep them on the host; use --shard zero3 --offload parameters, or --offload optimizer",
        ),
        (
            Strategy::Fsdp,
            Offload::Optimizer,
            "--offload optimizer with --shard fsdp: FSDP2's CPUOffloadPolicy moves the sharded parameters, gradients and optimizer states to the host together; use --offload parameters",
        ),
    ];
    let source = WeightsSource::Numbers {
        parameters: 1_000_000,
        bits: Decimal::parse("16").unwrap(),
    };
    let req = training(None, Optimizer::Adamw, Precision::Bf16Mixed);
    for strategy in [
        Strategy::Ddp,
        Strategy::Zero1,
        Strategy::Zero2,
        Strategy::Zero3,
        Strategy::Fsdp,
    ] {
        for offload in [Offload::Optimizer, Offload::Parameters] {
            let sh = Sharding {
                offload: Some(offload),
                largest_layer_parameters: (strategy == Strategy::Zero3).then_some(1000),
                ..sharding(strategy, 8)
            };
            let expected = refused
                .iter()
                .find(|(s, o, _)| *s == strategy && *o == offload)
                .map(|(_, _, m)| m.to_string());
            let got = sh.check(&source, &req).err().map(|e| e.to_string());
            assert_eq!(got, expected, "{strategy} {offload}");
        }
    }
}
