//! compressed-tensors checkpoints (llm-compressor, vLLM; `quant_method: compressed-tensors`):
//! the one weight scheme of `config_groups`, and the tensors each quantized `Linear` holds.
//!
//! The tensors are those compressed-tensors 0.20's compressors leave on the module, as
//! transformers' `CompressedTensorsHfQuantizer` builds it before the checkpoint fills it
//! (`apply_quantization_config`, then `compress_model`):
//! * `pack-quantized` (`PackedQuantizationCompressor`): `weight_packed` int32
//!   [out, ⌈in·bits/32⌉], `weight_shape` int64 [2], `weight_scale`, and for an asymmetric group or
//!   channel scheme `weight_zero_point` int32 [⌈out·bits/32⌉, groups] (packed along the rows);
//! * `int-quantized`, `naive-quantized`, `float-quantized` (`NaiveQuantizationCompressor`):
//!   `weight` int8 or float8_e4m3fn [out, in] and `weight_scale` (a zero point, one byte each,
//!   when asymmetric);
//! * `weight_scale` [1] (tensor), [out, 1] (channel) or [out, ⌈in/group⌉] (group), in the
//!   weights' dtype (`initialize_qparams`: the observed dtype); static input activations add one
//!   `input_scale` [1].

use serde::Serialize;

use crate::dtype::Dtype;
use crate::model::ModelError;
use crate::model::config::Fields;

/// How the weights are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Storage {
    /// Integers of `bits` packed into int32 (`pack-quantized`).
    PackQuantized,
    /// int8 codes, one per value (`int-quantized`, `naive-quantized`).
    IntQuantized,
    /// float8_e4m3fn values (`float-quantized`).
    FloatQuantized,
}

/// Which values share one scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    Tensor,
    Channel,
    Group(u64),
}

/// One compressed-tensors weight scheme.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Scheme {
    pub storage: Storage,
    pub bits: u64,
    pub strategy: Strategy,
    pub symmetric: bool,
    /// The scales' dtype: the checkpoint's `torch_dtype` (compressed-tensors makes them in the
    /// weights' dtype).
    pub scale_dtype: Dtype,
    /// Input activations quantized too (W8A8): compressed-tensors' forward quantizes and
    /// dequantizes them (a transient the size of the input).
    pub input_quantized: bool,
    /// Input activations quantized with a static (calibrated) scale: one `input_scale` a layer.
    pub static_input: bool,
    pub static_input_symmetric: bool,
}

/// The scheme and the modules left unquantized (`ignore`), from a `quantization_config`.
pub fn parse(
    q: &Fields,
    weights_dtype: Option<Dtype>,
) -> Result<(Scheme, Vec<String>), ModelError> {
    let format = q.opt_str("format")?.unwrap_or("pack-quantized");
    let storage = match format {
        "pack-quantized" => Storage::PackQuantized,
        "int-quantized" | "naive-quantized" => Storage::IntQuantized,
        "float-quantized" => Storage::FloatQuantized,
        other => {
            return Err(q.invalid(
                "format",
                &format!(
                    "is `{other}`, which iteragpu does not model (supported: pack-quantized, int-quantized, naive-quantized, float-quantized); estimate with --parameters N --bits B instead"
                ),
            ));
        }
    };
    let Some(groups) = q.section("config_groups")? else {
        return Err(q.invalid(
            "config_groups",
            "is missing: a compressed-tensors config names its weight scheme there",
        ));
    };
    let Some(Some(name)) = groups_names(q).map(|names| names.into_iter().next()) else {
        return Err(q.invalid("config_groups", "holds no group"));
    };
    if groups_names(q).is_some_and(|names| names.len() > 1) {
        return Err(q.invalid(
            "config_groups",
            "holds several groups (mixed schemes), which iteragpu does not model; estimate with --parameters N --bits B instead",
        ));
    }
    let group = groups
        .section(&name)?
        .ok_or_else(|| groups.invalid(&name, "must be a JSON object"))?;
    if let Some(targets) = group.opt_strings("targets")?
        && targets != ["Linear"]
    {
        return Err(group.invalid(
            "targets",
            &format!(
                "is {targets:?}; iteragpu models the scheme over every Linear (targets [\"Linear\"]) only"
            ),
        ));
    }
    let w = group
        .section("weights")?
        .ok_or_else(|| group.invalid("weights", "is missing: the weights' scheme"))?;
    let bits = w.positive_or("num_bits", 8)?;
    let kind = w.opt_str("type")?.unwrap_or("int");
    let expected = match storage {
        Storage::PackQuantized => kind == "int" && (1..=8).contains(&bits),
        Storage::IntQuantized => kind == "int" && bits == 8,
        Storage::FloatQuantized => kind == "float" && bits == 8,
    };
    if !expected {
        return Err(w.invalid(
            "num_bits",
            &format!(
                "is {bits} ({kind}) under format `{format}`, which stores 1 to 8-bit int (pack-quantized), 8-bit int (int-quantized) or 8-bit float (float-quantized)"
            ),
        ));
    }
    let group_size = match w.raw("group_size") {
        None => None,
        Some(v) if v.as_i64().is_some_and(|g| g <= 0) => None,
        Some(_) => Some(w.positive("group_size")?),
    };
    let strategy = match (w.opt_str("strategy")?, group_size) {
        (Some("tensor"), _) | (None, None) => Strategy::Tensor,
        (Some("channel"), _) => Strategy::Channel,
        (Some("group"), Some(g)) | (None, Some(g)) => Strategy::Group(g),
        (Some("group"), None) => {
            return Err(w.invalid("group_size", "is missing for strategy `group`"));
        }
        (Some(other), _) => {
            return Err(w.invalid(
                "strategy",
                &format!("is `{other}`; iteragpu models tensor, channel and group"),
            ));
        }
    };
    let input = group.section("input_activations")?;
    let (static_input, static_input_symmetric) = match &input {
        Some(a) => (!a.bool_or("dynamic", false)?, a.bool_or("symmetric", true)?),
        None => (false, true),
    };
    let mut ignore = Vec::new();
    for pattern in q.opt_strings("ignore")?.unwrap_or_default() {
        ignore.push(module_name(q, pattern)?);
    }
    Ok((
        Scheme {
            storage,
            bits,
            strategy,
            symmetric: w.bool_or("symmetric", true)?,
            // compressed-tensors' fallback for a non-float observed dtype is float16.
            scale_dtype: weights_dtype
                .filter(|d| matches!(d, Dtype::Float16 | Dtype::Bfloat16 | Dtype::Float32))
                .unwrap_or(Dtype::Float16),
            input_quantized: input.is_some(),
            static_input,
            static_input_symmetric,
        },
        ignore,
    ))
}

fn groups_names(q: &Fields) -> Option<Vec<String>> {
    q.raw("config_groups")
        .and_then(|v| v.as_object())
        .map(|m| m.keys().cloned().collect())
}

/// An `ignore` entry as a module name: a plain name (`lm_head`), or a `re:` pattern that only
/// anchors one (`re:.*mlp.gate$`, `re:.*lm_head`); any other expression is refused, named.
fn module_name(q: &Fields, pattern: &str) -> Result<String, ModelError> {
    let Some(re) = pattern.strip_prefix("re:") else {
        return Ok(pattern.to_string());
    };
    let core = re.strip_prefix(".*").unwrap_or(re);
    let core = core.strip_suffix('$').unwrap_or(core).replace("\\.", ".");
    if !core.is_empty()
        && core
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    {
        Ok(core.trim_start_matches('.').to_string())
    } else {
        Err(q.invalid(
            "ignore",
            &format!(
                "holds the expression `{pattern}`, which iteragpu does not read (it reads module names and `re:.*NAME$`): list the modules by name"
            ),
        ))
    }
}

impl Scheme {
    /// How many scales one [out, in] weight has.
    fn scales(&self, inp: u128, out: u128) -> u128 {
        match self.strategy {
            Strategy::Tensor => 1,
            Strategy::Channel => out,
            Strategy::Group(g) => out * inp.div_ceil(g as u128),
        }
    }

    /// Bytes one quantized [out, in] weight takes with its scales and metadata.
    pub fn linear_bytes(&self, inp: u128, out: u128) -> u128 {
        let s = self.scale_dtype.bytes() as u128;
        let scales = self.scales(inp, out);
        let weight = match self.storage {
            Storage::PackQuantized => {
                let b = self.bits as u128;
                let zero = match (self.symmetric, self.strategy) {
                    (true, _) => 0,
                    (false, Strategy::Tensor) => 1,
                    (false, Strategy::Channel) => (out * b).div_ceil(32) * 4,
                    (false, Strategy::Group(g)) => {
                        (out * b).div_ceil(32) * inp.div_ceil(g as u128) * 4
                    }
                };
                out * (inp * b).div_ceil(32) * 4 + 16 + zero
            }
            Storage::IntQuantized | Storage::FloatQuantized => {
                inp * out + if self.symmetric { 0 } else { scales }
            }
        };
        let input = if self.static_input {
            s + u128::from(!self.static_input_symmetric)
        } else {
            0
        };
        weight + scales * s + input
    }

    fn scheme_words(&self) -> String {
        let strategy = match self.strategy {
            Strategy::Tensor => "per-tensor scale".to_string(),
            Strategy::Channel => "per-channel scales".to_string(),
            Strategy::Group(g) => format!("group {g}"),
        };
        format!(
            "{strategy}{}",
            if self.symmetric { "" } else { ", asymmetric" }
        )
    }

    pub fn label(&self) -> String {
        match self.storage {
            Storage::PackQuantized => format!(
                "compressed-tensors pack-quantized int{} ({})",
                self.bits,
                self.scheme_words()
            ),
            Storage::IntQuantized => {
                format!("compressed-tensors int8 ({})", self.scheme_words())
            }
            Storage::FloatQuantized => {
                format!("compressed-tensors FP8 e4m3 ({})", self.scheme_words())
            }
        }
    }

    pub fn short_label(&self) -> String {
        let strategy = match self.strategy {
            Strategy::Tensor => String::new(),
            Strategy::Channel => " per-channel".into(),
            Strategy::Group(g) => format!(" g{g}"),
        };
        match self.storage {
            Storage::PackQuantized => format!("CT int{}{strategy}", self.bits),
            Storage::IntQuantized => format!("CT int8{strategy}"),
            Storage::FloatQuantized => format!("CT FP8{strategy}"),
        }
    }

    pub fn formula(&self) -> String {
        let s = self.scale_dtype;
        let n = self.scale_dtype.bytes();
        let scales = match self.strategy {
            Strategy::Tensor => format!("{n} (one {s} weight_scale)"),
            Strategy::Channel => format!("{n}·out ({s} weight_scale)"),
            Strategy::Group(g) => format!("{n}·out·⌈in/{g}⌉ ({s} weight_scale)"),
        };
        let zero = if self.symmetric {
            ""
        } else {
            " + the zero points"
        };
        let input = if self.static_input {
            format!(" + {n} (static input_scale)")
        } else {
            String::new()
        };
        match self.storage {
            Storage::PackQuantized => format!(
                "per weight [out, in]: 4·out·⌈in·{}/32⌉ (int32 weight_packed) + 16 (int64 weight_shape) + {scales}{zero}{input}",
                self.bits
            ),
            Storage::IntQuantized => {
                format!("per weight [out, in]: out·in (int8 weight) + {scales}{zero}{input}")
            }
            Storage::FloatQuantized => format!(
                "per weight [out, in]: out·in (float8_e4m3fn weight) + {scales}{zero}{input}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scheme(storage: Storage, bits: u64, strategy: Strategy) -> Scheme {
        Scheme {
            storage,
            bits,
            strategy,
            symmetric: true,
            scale_dtype: Dtype::Bfloat16,
            input_quantized: false,
            static_input: false,
            static_input_symmetric: true,
        }
    }

    #[test]
    fn w4a16_group_128_bytes() {
        // 4096×4096: weight_packed 4096×512 int32, weight_shape 2 int64, scales 4096×32 bf16.
        let s = scheme(Storage::PackQuantized, 4, Strategy::Group(128));
        assert_eq!(s.linear_bytes(4096, 4096), 8_388_608 + 16 + 262_144);
        // Asymmetric: the zero points packed along the rows, int32 [4096·4/32, 32].
        let asym = Scheme {
            symmetric: false,
            ..s
        };
        assert_eq!(
            asym.linear_bytes(4096, 4096),
            8_388_608 + 16 + 262_144 + 512 * 32 * 4
        );
    }

    #[test]
    fn fp8_and_int8_channel_bytes() {
        // FP8 per-channel (FP8_DYNAMIC): 14336×4096 fp8 + 14336 bf16 scales.
        let fp8 = scheme(Storage::FloatQuantized, 8, Strategy::Channel);
        assert_eq!(fp8.linear_bytes(4096, 14336), 58_720_256 + 28_672);
        // int8 W8A8 with a static per-tensor input scale.
        let int8 = Scheme {
            input_quantized: true,
            static_input: true,
            ..scheme(Storage::IntQuantized, 8, Strategy::Channel)
        };
        assert_eq!(int8.linear_bytes(4096, 4096), 16_777_216 + 8192 + 2);
        // Per-tensor FP8: one scale.
        let tensor = scheme(Storage::FloatQuantized, 8, Strategy::Tensor);
        assert_eq!(tensor.linear_bytes(64, 64), 4096 + 2);
    }
}
