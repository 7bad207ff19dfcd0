//! The storage events of a prediction, as the predicting worker streams them (see
//! `measure::events` for the JSON Lines, documented by example).

use serde::{Deserialize, Serialize};

/// What a storage holds (PyTorch MemTracker's categories, plus inputs, KV caches, workspaces).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
#[derive(strum::Display, strum::AsRefStr, strum::VariantArray)]
#[strum(serialize_all = "lowercase")]
pub enum Category {
    Parameter,
    Buffer,
    Gradient,
    #[serde(rename = "optimizer state")]
    #[strum(serialize = "optimizer state")]
    OptimizerState,
    Input,
    /// Saved for backward.
    Activation,
    /// Created inside a forward, a backward or an optimizer step and not kept.
    Temporary,
    #[serde(rename = "kv cache")]
    #[strum(serialize = "kv cache")]
    KvCache,
    /// Held by a library (cuBLAS), not by a tensor of the program.
    Workspace,
    /// A collective's buffer: DDP's gradient buckets, FSDP2's all-gather outputs and
    /// reduce-scatter inputs.
    Communication,
    /// A quantized weight dequantized to the compute dtype for one matmul (bitsandbytes'
    /// `dequantize_4bit`): the estimate's assumed "dequantized weight", seen by the replay.
    #[serde(rename = "dequantized weight")]
    #[strum(serialize = "dequantized weight")]
    DequantizedWeight,
    Other,
}

/// A storage that appeared on the target device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Alloc {
    pub id: u64,
    /// Bytes of the storage as requested (the allocator rounds and may hand out more).
    pub bytes: u64,
    pub category: Category,
    /// The innermost module running when it was created (`(backward)` in a backward pass).
    pub module: Option<String>,
    pub shape: Vec<u64>,
    pub dtype: String,
    /// Produced from a data-dependent op's upper bound: never counted as predicted.
    #[serde(default)]
    pub tainted: bool,
    /// The line of the user's own code that asked for it (outside torch, iteragpu and the
    /// installed libraries): where a predicted out-of-memory points. Absent from older workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// Memory outside PyTorch's caching allocator: CUDA unified memory (`cudaMallocManaged`),
    /// bitsandbytes' paged optimizer states. Never in allocated or reserved, nor in the
    /// capacity check (the driver moves its pages to the host under pressure): each phase's
    /// `peak_managed_bytes`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub managed: bool,
    /// A symbolic trace's allocation (`predict/symbolic.py`): the ids of the expressions of its
    /// bytes and of each dimension of its shape (null: the number above); `bytes` and `shape`
    /// are then their values at the trace's hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exprs: Option<Vec<Option<u64>>>,
}

/// An op the fake tensors could not follow, or one whose output size depends on the data and
/// was taken at a bound.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Unpredictable {
    pub op: String,
    pub file: Option<String>,
    pub line: Option<u64>,
    pub reason: String,
    /// `upper` (the largest outputs its inputs' shapes allow) or `lower` (the smallest): the run
    /// went on with that size and its phases are `bounded`; absent when no bound is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<String>,
    /// The op's output shapes at that bound (the first call at this place, when it runs often).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shapes: Vec<Vec<u64>>,
    /// A bounded op's output shapes at the other end, from the run at the lower bound (set when
    /// the two runs are merged).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lower_shapes: Vec<Vec<u64>>,
}

impl Unpredictable {
    /// An op said without a place or shapes (the tests' events).
    pub fn op(op: &str, reason: &str, bound: Option<&str>) -> Unpredictable {
        Unpredictable {
            op: op.into(),
            file: None,
            line: None,
            reason: reason.into(),
            bound: bound.map(str::to_string),
            shapes: Vec::new(),
            lower_shapes: Vec::new(),
        }
    }
}

/// What a symbolic trace of a sweep's dimensions holds for (`predict/symbolic.py`): each traced
/// field's hint and range, the guards the run took on them (JSON expression trees,
/// `prediction::symbolic`), and why it counts for its hint alone (`pinned`, empty when it counts
/// for every value that passes the guards).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Domain {
    pub fields: std::collections::BTreeMap<String, FieldDomain>,
    #[serde(default)]
    pub guards: Vec<serde_json::Value>,
    #[serde(default)]
    pub pinned: Vec<String>,
}

/// One traced field: its value in the traced run and the range PyTorch kept for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FieldDomain {
    pub hint: u64,
    pub lo: Option<u64>,
    pub hi: Option<u64>,
}
