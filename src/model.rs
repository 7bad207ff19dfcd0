//! What a model is, read from its files: `config.json` families turned into a parameter inventory
//! and a KV-cache layout, its quantization settings, and the stored format from safetensors headers.

pub mod attention;
pub mod config;
pub mod families;
pub mod files;
pub mod hub;
pub mod hub_cache;
pub mod inventory;
pub mod kv_layout;
pub mod quantization;
pub mod safetensors;

use std::path::PathBuf;

pub use attention::AttentionKernel;
pub use config::Config;
pub use families::{Architecture, Family};
pub use inventory::{Role, TensorGroup};
pub use kv_layout::{KvLayer, KvLayout};
pub use quantization::Quantization;

/// Everything that can be wrong with a model given by `--model`.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    File(#[from] files::FileError),
    #[error(
        "{0} does not exist; check the path (--model takes a config.json, a folder holding one, or a Hugging Face Hub id ORG/NAME[@REVISION])"
    )]
    NotFound(PathBuf),
    #[error(
        "{0} holds no config.json; point --model at a Hugging Face model folder or at its config.json"
    )]
    NoConfig(PathBuf),
    #[error(
        "{path} is not valid JSON (line {line}, column {column}): {message}; fix the file or download it again"
    )]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error(
        "{0} has no `model_type` field, so its family is unknown; give the size with --parameters N --bits B instead"
    )]
    NoModelType(PathBuf),
    #[error("{path}: field `{field}` {problem}")]
    Field {
        path: PathBuf,
        field: String,
        problem: String,
    },
    #[error(
        "{path}: tensor `{tensor}` of shape {shape:?} would hold more than 18,446,744,073,709,551,615 values; these sizes are not a real model's: fix the config"
    )]
    TensorTooLarge {
        path: PathBuf,
        tensor: String,
        shape: Vec<u64>,
    },
    #[error(
        "{path}: the config describes {} parameters, above the bound of {} iteragpu accepts (hundreds of times the largest published model); fix the config",
        crate::units::group_thousands(*parameters),
        crate::units::group_thousands(config::MAX_PARAMETERS as u128)
    )]
    TooManyParameters { path: PathBuf, parameters: u128 },
    #[error(
        "{path}: unknown model_type `{model_type}`. Supported families: {supported}. For another architecture, give its size with --parameters N --bits B (and the KV cache with --kv-layers, --kv-heads, --head-dim)"
    )]
    UnknownFamily {
        path: PathBuf,
        model_type: String,
        supported: String,
    },
    #[error(transparent)]
    Safetensors(#[from] safetensors::HeaderError),
}

/// The multimodal families whose image-token rule the vlm worker follows
/// (`workloads/vlm.py::RULES`), by `model_type`.
pub const VLM_FAMILIES: [&str; 5] = ["llava", "qwen2_vl", "qwen2_5_vl", "gemma3", "mllama"];
