//! Per-phase predictions of the peaks `measure` observes, for the built-in workloads: the sequence
//! of allocations and frees the workload performs, written by hand and replayed through the
//! caching-allocator model (`estimate/allocator.rs`) so that both peaks are predicted.
//!
//! What is modelled is said in each prediction's `basis`; what is not (cuBLAS/cuDNN workspaces,
//! kernels' internal buffers, autograd bookkeeping) shows up as the error measured on a GPU.

use serde::{Deserialize, Serialize};

use crate::estimate::allocator::{Allocation, CachingAllocator};
use crate::model::Architecture;

/// The predicted peaks of one phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhasePrediction {
    pub phase: String,
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// What the prediction includes.
    pub basis: String,
}

struct Sim {
    a: CachingAllocator,
    out: Vec<PhasePrediction>,
}

impl Sim {
    fn new() -> Sim {
        Sim {
            a: CachingAllocator::new(),
            out: Vec::new(),
        }
    }
    fn begin(&mut self) {
        self.a.reset_peaks();
    }
    fn end(&mut self, phase: &str, basis: &str) {
        self.out.push(PhasePrediction {
            phase: phase.to_string(),
            peak_allocated_bytes: self.a.peak_allocated,
            peak_reserved_bytes: self.a.peak_reserved,
            basis: basis.to_string(),
        });
    }
    fn m(&mut self, bytes: u64) -> Allocation {
        self.a.malloc(bytes)
    }
    fn f(&mut self, a: Allocation) {
        self.a.free(a)
    }
}

/// The dense workload as `measure` runs it (one device).
#[derive(Clone, Copy, Debug)]
pub struct DenseSpec {
    pub batch: u64,
    pub context: u64,
    pub width: u64,
    pub depth: u64,
    pub element_bytes: u64,
    pub warmup: u64,
    pub repeats: u64,
    pub train_steps: Option<u64>,
    /// AdamW (two states per parameter) rather than SGD (none).
    pub adamw: bool,
}

const FORWARD_BASIS: &str = "weights + input + each op's output while alive (LayerNorm, Linear, GELU, residual add), through the caching-allocator model; excludes cuBLAS workspace";

/// One no-grad forward pass: returns the output allocation.
fn dense_forward(s: &mut Sim, d: &DenseSpec) -> Allocation {
    let act = d.batch * d.context * d.width * d.element_bytes;
    let mut x: Option<Allocation> = None;
    for _ in 0..d.depth {
        let ln = s.m(act);
        let h = s.m(4 * act);
        s.f(ln);
        let g = s.m(4 * act);
        s.f(h);
        let o = s.m(act);
        s.f(g);
        let sum = s.m(act);
        s.f(o);
        if let Some(prev) = x.take() {
            s.f(prev);
        }
        x = Some(sum);
    }
    x.expect("depth ≥ 1")
}

/// Predicted peaks of every phase of the dense workload, in the order they run.
pub fn dense(d: &DenseSpec) -> Vec<PhasePrediction> {
    let mut s = Sim::new();
    let w = d.width;
    let e = d.element_bytes;
    let act = d.batch * d.context * w * e;
    s.begin();
    for _ in 0..d.depth {
        for numel in [w, w, 4 * w * w, 4 * w, 4 * w * w, w] {
            s.m(numel * e);
        }
    }
    s.end(
        "model_load",
        "every parameter tensor, rounded and packed by the caching-allocator model",
    );
    s.begin();
    let _input = s.m(act);
    s.end("inputs", "the input tensor");
    match d.train_steps {
        None => {
            s.begin();
            let y = dense_forward(&mut s, d);
            s.end("cold_forward", FORWARD_BASIS);
            s.f(y);
            s.begin();
            for _ in 0..d.warmup {
                let y = dense_forward(&mut s, d);
                s.f(y);
            }
            s.end("warmup", FORWARD_BASIS);
            for _ in 0..d.repeats {
                s.begin();
                let y = dense_forward(&mut s, d);
                s.end("warm_forward", FORWARD_BASIS);
                s.f(y);
            }
        }
        Some(steps) => dense_training(&mut s, d, steps),
    }
    s.out
}

fn dense_training(s: &mut Sim, d: &DenseSpec, steps: u64) {
    let w = d.width;
    let e = d.element_bytes;
    let act = d.batch * d.context * w * e;
    let sizes: Vec<u64> = (0..d.depth)
        .flat_map(|_| [w, w, 4 * w * w, 4 * w, 4 * w * w, w])
        .map(|n| n * e)
        .collect();
    let _target = s.m(act);
    let mut states: Vec<Allocation> = Vec::new();
    for step in 0..steps {
        // forward: every block keeps LayerNorm's output, fc1's output and GELU's output for
        // backward (and its input, the previous residual sum).
        s.begin();
        let mut saved = Vec::new();
        let mut x: Option<Allocation> = None;
        for _ in 0..d.depth {
            saved.push(s.m(act)); // LayerNorm output
            saved.push(s.m(4 * act)); // fc1 output
            saved.push(s.m(4 * act)); // GELU output
            let o = s.m(act);
            let sum = s.m(act);
            s.f(o);
            if let Some(prev) = x.replace(sum) {
                saved.push(prev);
            }
        }
        s.end(
            "forward",
            "weights, input, target, activations saved for backward (3 per block + residual sums)",
        );
        // loss: an elementwise squared error then its mean.
        s.begin();
        let tmp = s.m(act);
        let loss = s.m(4);
        s.f(tmp);
        s.end("loss", "elementwise loss buffer, freed after the mean");
        // backward: gradients of the activations flow back (transient), parameter gradients stay.
        s.begin();
        let mut grads = Vec::new();
        let mut upstream = s.m(act);
        for _ in 0..d.depth {
            let g_gelu = s.m(4 * act);
            let g_h = s.m(4 * act);
            s.f(g_gelu);
            let g_ln = s.m(act);
            s.f(g_h);
            let g_x = s.m(act);
            s.f(g_ln);
            s.f(upstream);
            upstream = g_x;
            for _ in 0..3 {
                if let Some(a) = saved.pop() {
                    s.f(a);
                }
            }
        }
        for a in saved.drain(..) {
            s.f(a);
        }
        s.f(upstream);
        for size in &sizes {
            grads.push(s.m(*size));
        }
        if let Some(x) = x.take() {
            s.f(x);
        }
        s.f(loss);
        s.end(
            "backward",
            "parameter gradients + activation gradients in flight, saved activations released",
        );
        s.begin();
        if d.adamw {
            if step == 0 {
                for size in &sizes {
                    states.push(s.m(*size));
                    states.push(s.m(*size));
                }
            }
            // foreach AdamW: one temporary the size of the parameters (sqrt of exp_avg_sq).
            let tmp: Vec<Allocation> = sizes.iter().map(|sz| s.m(*sz)).collect();
            for a in tmp {
                s.f(a);
            }
        }
        s.end(
            "optimizer_step",
            if d.adamw {
                "AdamW: two states per parameter created at the first step, plus one parameter-sized temporary (foreach implementation)"
            } else {
                "SGD without momentum: no state"
            },
        );
        s.begin();
        for g in grads {
            s.f(g);
        }
        s.end("zero_grad", "gradients set to None");
    }
    s.begin();
    let y = dense_forward(s, d);
    let tmp = s.m(act);
    s.f(tmp);
    s.f(y);
    s.end("evaluation", FORWARD_BASIS);
    s.begin();
    s.end("export", "copies to CPU only: no GPU allocation");
}

/// The causal-LM generation as `measure` runs it.
#[derive(Clone, Copy, Debug)]
pub struct CausalLmSpec {
    pub batch: u64,
    pub prompt_tokens: u64,
    pub new_tokens: u64,
    pub element_bytes: u64,
    /// KV-cache bytes after the prefill and after the decode, from the estimate.
    pub kv_after_prefill: u64,
    pub kv_after_decode: u64,
    /// Static cache: the whole cache is allocated at the first update.
    pub static_cache: bool,
}

/// Predicted peaks for model_load, inputs, prefill, decode (cold, then warm).
pub fn causal_lm(arch: &Architecture, c: &CausalLmSpec) -> Vec<PhasePrediction> {
    let mut s = Sim::new();
    let e = c.element_bytes;
    let d = arch.dims;
    s.begin();
    let tensors: u64 = arch.groups.iter().map(|g| g.count).sum();
    if tensors <= 5_000 {
        for group in &arch.groups {
            for _ in 0..group.count {
                s.m(group.numel() * e);
            }
        }
    } else {
        // Thousands of expert tensors: packed without a replay (same totals, no reuse of their
        // segments' leftovers by later requests).
        let sizes: Vec<(u64, u64)> = arch
            .groups
            .iter()
            .map(|g| (g.numel() * e, g.count))
            .collect();
        let allocated: u64 = arch
            .groups
            .iter()
            .map(|g| crate::estimate::allocator::rounded(g.numel() * e) * g.count)
            .sum();
        s.a.preload(
            allocated,
            crate::estimate::allocator::packed_reserved(&sizes),
        );
    }
    s.end("model_load", "every parameter tensor at the compute dtype, rounded and packed by the caching-allocator model");
    s.begin();
    let tokens = c.batch * c.prompt_tokens;
    s.m(tokens * 8);
    s.m(tokens * 8);
    s.end("inputs", "input_ids and attention_mask (int64)");
    let layers = d.num_layers.max(1);
    for suffix in ["", "_warm"] {
        s.begin();
        // The cache, one K and one V tensor per layer.
        let per_layer = if c.static_cache {
            c.kv_after_decode
        } else {
            c.kv_after_prefill
        } / layers
            / 2;
        let cache: Vec<Allocation> = (0..2 * layers).map(|_| s.m(per_layer)).collect();
        // The largest transient of one layer: residual + normed hidden states and the MLP's
        // gate, up and activation outputs (SwiGLU), plus the last position's logits.
        let bp = c.batch * c.prompt_tokens;
        let inter = arch.moe.map_or(d.intermediate_size, |m| {
            m.active * m.expert_intermediate + m.shared_intermediate
        });
        let transient = [
            2 * bp * d.hidden_size * e,
            bp * inter * e,
            bp * inter * e,
            bp * inter * e,
        ];
        let t: Vec<Allocation> = transient.iter().map(|b| s.m(*b)).collect();
        for a in t {
            s.f(a);
        }
        let logits = s.m(c.batch * d.vocab_size * e);
        s.f(logits);
        s.end(
            &format!("prefill{suffix}"),
            "weights + inputs + KV cache after the prompt + one layer's largest transient (2 hidden states and 3 MLP intermediates) + last-position logits; attention workspace not modelled",
        );
        s.begin();
        let mut cache = cache;
        if !c.static_cache {
            // Each step's torch.cat builds a layer's new K and V while the old ones still exist.
            let grown = c.kv_after_decode / layers / 2;
            for slot in cache.iter_mut() {
                let new = s.m(grown);
                s.f(*slot);
                *slot = new;
            }
        }
        let logits = s.m(c.batch * d.vocab_size * e);
        s.f(logits);
        s.end(
            &format!("decode{suffix}"),
            "weights + inputs + KV cache grown to prompt + new tokens (each layer's K and V rebuilt by torch.cat) + logits",
        );
        for a in cache {
            s.f(a);
        }
    }
    s.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_phases_in_order() {
        let spec = DenseSpec {
            batch: 2,
            context: 128,
            width: 1024,
            depth: 4,
            element_bytes: 4,
            warmup: 3,
            repeats: 5,
            train_steps: None,
            adamw: true,
        };
        let p = dense(&spec);
        let names: Vec<&str> = p.iter().map(|x| x.phase.as_str()).collect();
        assert_eq!(
            &names[..4],
            ["model_load", "inputs", "cold_forward", "warmup"]
        );
        assert_eq!(names.len(), 9);
        // Weights: 4 blocks × (8w² + 7w) × 4 bytes, each tensor rounded to 512.
        assert!(p[0].peak_allocated_bytes >= 4 * (8 * 1024 * 1024 + 7 * 1024) * 4);
        // A forward adds at most 10 activations of b·c·w·e.
        let act = 2 * 128 * 1024 * 4;
        let extra = p[2].peak_allocated_bytes - p[1].peak_allocated_bytes;
        assert!(extra >= 9 * act && extra <= 10 * act + 10 * 512, "{extra}");
        assert!(p[2].peak_reserved_bytes >= p[2].peak_allocated_bytes);
    }

    #[test]
    fn dense_training_first_step_creates_states() {
        let spec = DenseSpec {
            batch: 2,
            context: 128,
            width: 256,
            depth: 2,
            element_bytes: 4,
            warmup: 0,
            repeats: 1,
            train_steps: Some(2),
            adamw: true,
        };
        let p = dense(&spec);
        let names: Vec<&str> = p.iter().map(|x| x.phase.as_str()).collect();
        assert_eq!(
            names,
            [
                "model_load",
                "inputs",
                "forward",
                "loss",
                "backward",
                "optimizer_step",
                "zero_grad",
                "forward",
                "loss",
                "backward",
                "optimizer_step",
                "zero_grad",
                "evaluation",
                "export"
            ]
        );
        let params = 2 * (8 * 256 * 256 + 7 * 256) * 4;
        // The first optimizer step holds at least weights + grads + 2 states.
        assert!(p[5].peak_allocated_bytes >= 4 * params);
        // The second step's forward starts above the first's: states now exist.
        assert!(p[7].peak_allocated_bytes > p[2].peak_allocated_bytes);
    }
}

/// A causal-LM training loop as `measure --task train` runs it.
#[derive(Clone, Copy, Debug)]
pub struct CausalLmTrainSpec {
    pub batch: u64,
    pub context: u64,
    pub steps: u64,
    /// Bytes of a parameter, its gradient and an optimizer-state element (4, or 2 in pure bf16).
    pub param_bytes: u64,
    /// torch.autocast to bfloat16 (16-bit activations and weight copies).
    pub mixed: bool,
    pub adamw: bool,
    /// LoRA rank and targets' trainable parameters; `None` for full fine-tuning.
    pub lora_trainable: Option<u64>,
    pub gradient_checkpointing: bool,
}

/// Predicted peaks of a causal-LM training loop: weights, then per step the activations kept for
/// backward (the per-layer model of Korthikanti et al. 2022, adapted as in `estimate --train`),
/// the logits and their fp32 copies for the loss, gradients, the optimizer states created at the
/// first step (and foreach AdamW's parameter-sized temporary), then evaluation and export.
pub fn causal_lm_training(arch: &Architecture, t: &CausalLmTrainSpec) -> Vec<PhasePrediction> {
    let mut s = Sim::new();
    let d = arch.dims;
    let pb = t.param_bytes;
    let act_e: u64 = if t.mixed || pb == 2 { 2 } else { 4 };
    let (b, n) = (t.batch, t.context);
    s.begin();
    for group in &arch.groups {
        for _ in 0..group.count.min(5_000) {
            s.m(group.numel() * pb);
        }
    }
    let trainable = t.lora_trainable.unwrap_or_else(|| arch.parameters() as u64);
    let adapters: Vec<Allocation> = match t.lora_trainable {
        Some(p) => vec![s.m(p * if pb == 2 { 2 } else { 4 })],
        None => Vec::new(),
    };
    s.end(
        "model_load",
        "every parameter tensor (and the LoRA adapters), through the caching-allocator model",
    );
    s.begin();
    s.m(b * n * 8);
    s.m(b * n * 8);
    s.end("inputs", "input_ids and attention_mask (int64)");
    let h = d.hidden_size;
    let inter = arch.moe.map_or(d.intermediate_size, |m| {
        m.active * m.expert_intermediate + m.shared_intermediate
    });
    // Per layer, 16-bit units of s·b: attention 11·h, MLP 2·h + 6·I + h, norms 4·h (no s² term:
    // PyTorch's SDPA does not keep the score matrix).
    let per_layer = b * n * (11 * h + 2 * h + 6 * inter + h + 4 * h) * act_e / 2;
    let logits = b * n * d.vocab_size;
    let mut states: Vec<Allocation> = Vec::new();
    let basis_fwd = if t.gradient_checkpointing {
        "weights + each layer's input (checkpointing) + one layer's activations + logits"
    } else {
        "weights + activations kept for backward (Korthikanti et al. 2022, per layer, adapted) + logits"
    };
    for step in 0..t.steps {
        s.begin();
        let mut saved: Vec<Allocation> = Vec::new();
        let casts = (t.mixed && t.lora_trainable.is_none()).then(|| s.m(trainable * 2));
        for _ in 0..d.num_layers {
            if t.gradient_checkpointing {
                saved.push(s.m(b * n * h * act_e));
            } else {
                saved.push(s.m(per_layer));
            }
        }
        if t.gradient_checkpointing {
            let one = s.m(per_layer);
            s.f(one);
        }
        let logit_tensor = s.m(logits * act_e);
        s.end("forward", basis_fwd);
        s.begin();
        let float_logits = s.m(logits * 4);
        let log_softmax = s.m(logits * 4);
        let loss = s.m(4);
        s.end("loss", "fp32 copy of the logits and the log-softmax kept for backward (transformers' loss upcasts)");
        s.begin();
        let grad_logits = s.m(logits * 4);
        s.f(log_softmax);
        s.f(float_logits);
        s.f(grad_logits);
        s.f(logit_tensor);
        let grads = s.m(trainable * pb);
        if t.gradient_checkpointing {
            let one = s.m(per_layer);
            s.f(one);
        }
        for a in saved.drain(..) {
            s.f(a);
        }
        if let Some(c) = casts {
            s.f(c);
        }
        s.f(loss);
        s.end("backward", "gradients of the trainable parameters, the fp32 logits' gradient in flight, activations released");
        s.begin();
        if t.adamw {
            if step == 0 {
                states.push(s.m(trainable * pb));
                states.push(s.m(trainable * pb));
            }
            let tmp = s.m(trainable * pb);
            s.f(tmp);
        }
        s.end(
            "optimizer_step",
            if t.adamw { "AdamW: two states per trainable parameter at the first step, plus a parameter-sized temporary" } else { "SGD: no state" },
        );
        s.begin();
        s.f(grads);
        s.end("zero_grad", "gradients set to None");
    }
    s.begin();
    let layer = s.m(per_layer);
    s.f(layer);
    let l = s.m(logits * act_e);
    let f = s.m(logits * 4);
    s.f(f);
    s.f(l);
    s.end(
        "evaluation",
        "one layer's activations + logits and their fp32 copy, no gradient",
    );
    s.begin();
    s.end("export", "copies to CPU only: no GPU allocation");
    drop(adapters);
    s.out
}

#[cfg(test)]
mod training_tests {
    use super::*;

    #[test]
    fn causal_lm_training_phases_and_first_step_states() {
        let text = include_str!("../../tests/fixtures/models/llama-style-8l/config.json");
        let config =
            crate::model::Config::parse(std::path::Path::new("config.json"), text).unwrap();
        let arch = Architecture::from_config(&config).unwrap();
        let spec = CausalLmTrainSpec {
            batch: 2,
            context: 256,
            steps: 2,
            param_bytes: 4,
            mixed: true,
            adamw: true,
            lora_trainable: None,
            gradient_checkpointing: false,
        };
        let p = causal_lm_training(&arch, &spec);
        let names: Vec<&str> = p.iter().map(|x| x.phase.as_str()).collect();
        assert_eq!(names.len(), 2 + 2 * 5 + 2);
        assert_eq!(
            names[2..7],
            ["forward", "loss", "backward", "optimizer_step", "zero_grad"]
        );
        let params = arch.parameters() as u64;
        // Weights fp32 + gradients + 2 AdamW states at the first step.
        assert!(p[5].peak_allocated_bytes >= 4 * 4 * params);
        // The second forward starts with the states: above the first one.
        assert!(p[7].peak_allocated_bytes > p[2].peak_allocated_bytes);
        let ckpt = causal_lm_training(
            &arch,
            &CausalLmTrainSpec {
                gradient_checkpointing: true,
                ..spec
            },
        );
        assert!(
            ckpt[2].peak_allocated_bytes < p[2].peak_allocated_bytes,
            "checkpointing keeps less"
        );
        let lora = causal_lm_training(
            &arch,
            &CausalLmTrainSpec {
                lora_trainable: Some(1_000_000),
                ..spec
            },
        );
        assert!(
            lora[5].peak_allocated_bytes < p[5].peak_allocated_bytes,
            "LoRA trains fewer parameters"
        );
    }
}
