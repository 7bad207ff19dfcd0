//! A model as a list of parameter tensors grouped by role, built from its config's real shapes.
//! Parameter counts, quantized storage, LoRA adapters and Adafactor's factored states all read
//! this one list, so they cannot disagree about what the model contains.

use serde::Serialize;

/// What a tensor does; decides whether quantization touches it and how optimizers treat it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Token (or position) embedding table: never quantized by the supported formats.
    Embedding,
    /// Output projection to the vocabulary: left unquantized unless the config says otherwise.
    LmHead,
    /// Weight of a linear layer inside the decoder blocks (or the vision tower): quantizable.
    Linear,
    /// Router of a mixture-of-experts layer (a small linear layer).
    Router,
    /// The routed experts of one MoE layer fused into one 3-D parameter `[experts, out, in]`, as
    /// transformers 5 stores them (`experts.gate_up_proj`, `experts.down_proj`): each slice is
    /// one expert's linear weight.
    Experts,
    /// Bias vector of a linear layer.
    Bias,
    /// Normalization weight or bias.
    Norm,
    /// Anything else stored as a parameter (convolution, projection matrix, correction bias).
    Other,
}

/// `count` tensors of the same `shape`, e.g. every layer's `q_proj.weight`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TensorGroup {
    /// Dotted path with `*` for repeated indices, e.g. `model.layers.*.self_attn.q_proj.weight`.
    pub name: String,
    /// Shape of one tensor (PyTorch order: a linear weight is `[out_features, in_features]`).
    pub shape: Vec<u64>,
    /// How many tensors of this shape (layers × experts).
    pub count: u64,
    pub role: Role,
}

impl TensorGroup {
    /// Elements in one tensor (saturating; `Architecture::from_config` refuses shapes whose
    /// count does not fit, so a real model never reaches the saturation).
    pub fn numel(&self) -> u64 {
        self.checked_numel().unwrap_or(u64::MAX)
    }
    /// Elements in one tensor, or `None` when the count does not fit in a `u64`.
    pub fn checked_numel(&self) -> Option<u64> {
        self.shape.iter().try_fold(1u64, |n, d| n.checked_mul(*d))
    }
    /// Elements in the whole group (u128: no overflow even for absurd configs).
    pub fn total(&self) -> u128 {
        self.numel() as u128 * self.count as u128
    }
    /// The module's short name (`q_proj` for `model.layers.*.self_attn.q_proj.weight`), which is
    /// what LoRA targets and quantization skip lists match.
    pub fn module(&self) -> &str {
        let base = self
            .name
            .strip_suffix(".weight")
            .or_else(|| self.name.strip_suffix(".bias"))
            .unwrap_or(&self.name);
        base.rsplit('.').next().unwrap_or(base)
    }
    /// `(in_features, out_features)` of one linear weight (one expert's slice for fused experts).
    pub fn linear_dims(&self) -> Option<(u64, u64)> {
        match (self.role, self.shape.as_slice()) {
            (Role::Linear | Role::LmHead | Role::Router, [out, inp]) => Some((*inp, *out)),
            (Role::Experts, [_, out, inp]) => Some((*inp, *out)),
            _ => None,
        }
    }

    /// How many linear weights of `linear_dims` the group holds (experts count each slice).
    pub fn linear_count(&self) -> u64 {
        match (self.role, self.shape.as_slice()) {
            (Role::Experts, [experts, _, _]) => self.count * experts,
            _ => self.count,
        }
    }
    /// Whether a name pattern from a config (`lm_head`, `gate`, `model.layers.0.mlp`) designates
    /// this tensor: module short name equality or a dotted-path prefix/segment match.
    pub fn matches(&self, pattern: &str) -> bool {
        if pattern.is_empty() {
            return false;
        }
        if self.module() == pattern {
            return true;
        }
        let padded = format!(".{}.", self.name);
        padded.contains(&format!(".{pattern}."))
    }
}

/// Accumulates tensor groups while a family describes its modules.
#[derive(Default)]
pub struct Builder {
    pub groups: Vec<TensorGroup>,
}

impl Builder {
    pub fn push(&mut self, name: impl Into<String>, shape: &[u64], count: u64, role: Role) {
        if count == 0 || shape.contains(&0) {
            return;
        }
        self.groups.push(TensorGroup {
            name: name.into(),
            shape: shape.to_vec(),
            count,
            role,
        });
    }
    /// A `nn.Linear(in_features, out_features, bias)` repeated `count` times.
    pub fn linear(&mut self, prefix: &str, inp: u64, out: u64, count: u64, bias: bool) {
        self.push(format!("{prefix}.weight"), &[out, inp], count, Role::Linear);
        if bias {
            self.push(format!("{prefix}.bias"), &[out], count, Role::Bias);
        }
    }
    /// The router (`mlp.gate`) and the routed experts of `layers` MoE layers, the experts fused
    /// as transformers 5 does: `gate_up_proj [experts, 2·inter, hidden]`, `down_proj
    /// [experts, hidden, inter]`.
    pub fn moe(&mut self, mlp: &str, experts: u64, hidden: u64, inter: u64, layers: u64) {
        self.push(
            format!("{mlp}.gate.weight"),
            &[experts, hidden],
            layers,
            Role::Router,
        );
        let prefix = format!("{mlp}.experts");
        self.push(
            format!("{prefix}.gate_up_proj"),
            &[experts, 2 * inter, hidden],
            layers,
            Role::Experts,
        );
        self.push(
            format!("{prefix}.down_proj"),
            &[experts, hidden, inter],
            layers,
            Role::Experts,
        );
    }

    /// A normalization layer of width `dim`, with or without a bias (LayerNorm vs RMSNorm).
    pub fn norm(&mut self, prefix: &str, dim: u64, count: u64, bias: bool) {
        self.push(format!("{prefix}.weight"), &[dim], count, Role::Norm);
        if bias {
            self.push(format!("{prefix}.bias"), &[dim], count, Role::Norm);
        }
    }
}

/// Total parameters in a list of groups.
pub fn total_parameters(groups: &[TensorGroup]) -> u128 {
    groups.iter().map(TensorGroup::total).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names_and_matching() {
        let g = TensorGroup {
            name: "model.layers.*.self_attn.q_proj.weight".into(),
            shape: vec![4096, 4096],
            count: 32,
            role: Role::Linear,
        };
        assert_eq!(g.module(), "q_proj");
        assert!(g.matches("q_proj"));
        assert!(g.matches("self_attn"));
        assert!(!g.matches("proj"));
        assert!(!g.matches(""));
        assert_eq!(g.linear_dims(), Some((4096, 4096)));
        assert_eq!(g.total(), 4096 * 4096 * 32);
    }
}
