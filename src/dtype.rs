//! Element types as PyTorch names them, with their width. Used for compute formats, KV caches and
//! the `--dtype` option; the stored format of a checkpoint comes from its safetensors headers.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A PyTorch floating-point or integer element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    Float64,
    Float32,
    Float16,
    Bfloat16,
    Float8E4m3fn,
    Float8E5m2,
    Int8,
    Uint8,
}

impl Dtype {
    pub const ALL: [Dtype; 8] = [
        Dtype::Float64,
        Dtype::Float32,
        Dtype::Float16,
        Dtype::Bfloat16,
        Dtype::Float8E4m3fn,
        Dtype::Float8E5m2,
        Dtype::Int8,
        Dtype::Uint8,
    ];

    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Float64 => 8,
            Dtype::Float32 => 4,
            Dtype::Float16 | Dtype::Bfloat16 => 2,
            Dtype::Float8E4m3fn | Dtype::Float8E5m2 | Dtype::Int8 | Dtype::Uint8 => 1,
        }
    }

    /// The name `torch` uses (`torch.bfloat16` → `bfloat16`).
    pub fn torch_name(self) -> &'static str {
        match self {
            Dtype::Float64 => "float64",
            Dtype::Float32 => "float32",
            Dtype::Float16 => "float16",
            Dtype::Bfloat16 => "bfloat16",
            Dtype::Float8E4m3fn => "float8_e4m3fn",
            Dtype::Float8E5m2 => "float8_e5m2",
            Dtype::Int8 => "int8",
            Dtype::Uint8 => "uint8",
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.torch_name())
    }
}

/// An element type name nobody recognises.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown dtype `{0}`: use float32 (fp32), float16 (fp16, half), bfloat16 (bf16), float8_e4m3fn (fp8), float8_e5m2, int8, uint8 or float64"
)]
pub struct UnknownDtype(pub String);

impl FromStr for Dtype {
    type Err = UnknownDtype;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        let name = lower.strip_prefix("torch.").unwrap_or(&lower);
        Ok(match name {
            "float64" | "fp64" | "double" | "f64" => Dtype::Float64,
            "float32" | "fp32" | "float" | "f32" => Dtype::Float32,
            "float16" | "fp16" | "half" | "f16" => Dtype::Float16,
            "bfloat16" | "bf16" => Dtype::Bfloat16,
            "float8_e4m3fn" | "fp8" | "f8_e4m3" | "float8_e4m3" | "e4m3" => Dtype::Float8E4m3fn,
            "float8_e5m2" | "f8_e5m2" | "e5m2" => Dtype::Float8E5m2,
            "int8" | "i8" => Dtype::Int8,
            "uint8" | "u8" => Dtype::Uint8,
            _ => return Err(UnknownDtype(s.to_string())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_aliases() {
        assert_eq!("bf16".parse::<Dtype>().unwrap(), Dtype::Bfloat16);
        assert_eq!("torch.float16".parse::<Dtype>().unwrap(), Dtype::Float16);
        assert_eq!("float32".parse::<Dtype>().unwrap().bytes(), 4);
        let err = "float12".parse::<Dtype>().unwrap_err().to_string();
        assert!(err.contains("float12") && err.contains("bfloat16"));
        for d in Dtype::ALL {
            assert_eq!(d.torch_name().parse::<Dtype>().unwrap(), d);
        }
    }
}
