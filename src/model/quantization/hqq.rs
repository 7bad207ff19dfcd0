//! HQQ checkpoints (`quant_method: hqq`, transformers' `HqqConfig`): the tensors each
//! `HQQLinear` holds (hqq 0.2.8, `hqq/core/quantize.py`).
//!
//! `Quantizer.quantize` reshapes the n = out·in values into groups of `group_size` (along
//! `axis` 1: [n/g, g]; axis 0: [g, n/g]), packs the codes along the first dimension
//! (`bitpack.py`: 8, 6 and 5 bits one uint8 each; 4 bits two a uint8; 2 bits four; 1 bit eight;
//! 3 bits ten an int32, the rows padded to a multiple of 10), and keeps one `scale` and one
//! `zero` per group in its `meta`, moved to the compute dtype by `Quantizer.cuda`. `view_as_float`
//! reinterprets the packed bytes; it does not change their size.

use serde::Serialize;

use crate::dtype::Dtype;
use crate::model::ModelError;
use crate::model::config::Fields;

/// One HQQ weight configuration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Scheme {
    pub bits: u64,
    /// `None`: one group per row (axis 1) or column (axis 0).
    pub group_size: Option<u64>,
    pub axis: u64,
    /// The dtype of `scale` and `zero`: the layer's compute dtype (the checkpoint's
    /// `torch_dtype`; HQQLinear's default float16 where the config has none).
    pub compute_dtype: Dtype,
}

/// The scheme and `skip_modules`, from transformers' saved `quantization_config`
/// (`{"quant_config": {"weight_quant_params": …}, "skip_modules": […]}`) or `HqqConfig`'s
/// own keys (`nbits`, `group_size`, `axis`).
pub fn parse(
    q: &Fields,
    weights_dtype: Option<Dtype>,
) -> Result<(Scheme, Vec<String>), ModelError> {
    let params = match q.section("quant_config")? {
        Some(config) => {
            for key in ["scale_quant_params", "zero_quant_params"] {
                if config.has(key) {
                    return Err(config.invalid(
                        key,
                        "is set: quantized scales or zeros (deprecated in hqq, not serializable) are not modelled; estimate with --parameters N --bits B instead",
                    ));
                }
            }
            config.section("weight_quant_params")?.ok_or_else(|| {
                config.invalid(
                    "weight_quant_params",
                    "is missing: a per-layer (dynamic) HQQ config is not modelled; estimate with --parameters N --bits B instead",
                )
            })?
        }
        None => q.clone(),
    };
    let bits = params.positive_or("nbits", 4)?;
    if ![1, 2, 3, 4, 5, 6, 8].contains(&bits) {
        return Err(params.invalid(
            "nbits",
            &format!("is {bits}; HQQ stores 1, 2, 3, 4, 5, 6 or 8 bits"),
        ));
    }
    let group_size = match params.raw("group_size") {
        None if params.is_null("group_size") => None,
        None => Some(64),
        Some(_) => Some(params.positive("group_size")?),
    };
    let axis = params.u64_or("axis", 1)?;
    if axis > 1 {
        return Err(params.invalid("axis", &format!("is {axis}; HQQ groups along axis 0 or 1")));
    }
    let skip = q
        .opt_strings("skip_modules")?
        .map(|v| v.into_iter().map(str::to_string).collect())
        .unwrap_or_else(|| vec!["lm_head".to_string()]);
    Ok((
        Scheme {
            bits,
            group_size,
            axis,
            compute_dtype: weights_dtype
                .filter(|d| matches!(d, Dtype::Float16 | Dtype::Bfloat16 | Dtype::Float32))
                .unwrap_or(Dtype::Float16),
        },
        skip,
    ))
}

impl Scheme {
    /// Bytes one quantized [out, in] weight takes: the packed `W_q`, then `scale` and `zero`.
    pub fn linear_bytes(&self, inp: u128, out: u128) -> u128 {
        let n = inp * out;
        let g = self
            .group_size
            .map_or(if self.axis == 1 { inp } else { out }, |g| g as u128);
        let groups = n.div_ceil(g);
        // The packed dimension: the groups (axis 1) or a group's values (axis 0).
        let (packed, other) = if self.axis == 1 {
            (groups, g)
        } else {
            (g, groups)
        };
        let codes = match self.bits {
            4 => packed / 2 * other,
            2 => packed / 4 * other,
            1 => packed / 8 * other,
            3 => packed.div_ceil(10) * other * 4,
            _ => n,
        };
        codes + 2 * groups * self.compute_dtype.bytes() as u128
    }

    pub fn label(&self) -> String {
        format!(
            "HQQ {}-bit, {}, axis {}",
            self.bits,
            self.group_size
                .map_or("one group per row".to_string(), |g| format!("group {g}")),
            self.axis
        )
    }

    pub fn short_label(&self) -> String {
        format!(
            "HQQ {}-bit{}",
            self.bits,
            self.group_size.map_or(String::new(), |g| format!(" g{g}"))
        )
    }

    pub fn formula(&self) -> String {
        let g = self
            .group_size
            .map_or("the row".to_string(), |g| g.to_string());
        let codes = match self.bits {
            4 => "out·in/2 (uint8 W_q, two codes a byte)".to_string(),
            2 => "out·in/4 (uint8 W_q, four codes a byte)".to_string(),
            1 => "out·in/8 (uint8 W_q, eight codes a byte)".to_string(),
            3 => "4·⌈rows/10⌉·cols (int32 W_q, ten codes a word)".to_string(),
            b => format!("out·in (uint8 W_q, one {b}-bit code a byte)"),
        };
        let c = self.compute_dtype;
        format!(
            "per weight [out, in], groups of {g} along axis {}: {codes} + 2·{}·out·in/{g} ({c} scale and zero per group)",
            self.axis,
            c.bytes()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scheme(bits: u64, group_size: Option<u64>, axis: u64) -> Scheme {
        Scheme {
            bits,
            group_size,
            axis,
            compute_dtype: Dtype::Float16,
        }
    }

    #[test]
    fn four_bit_group_64_bytes() {
        // 4096×4096: W_q uint8 [262144/2, 64], scale and zero fp16 [262144, 1] each.
        let s = scheme(4, Some(64), 1);
        assert_eq!(s.linear_bytes(4096, 4096), 8_388_608 + 2 * 262_144 * 2);
        // Axis 0 packs a group's values instead: the same bytes for even groups.
        assert_eq!(
            scheme(4, Some(64), 0).linear_bytes(4096, 4096),
            8_388_608 + 2 * 262_144 * 2
        );
    }

    #[test]
    fn other_widths_bytes() {
        // 8 bits: one byte a code; 2 bits: four a byte.
        assert_eq!(
            scheme(8, Some(64), 1).linear_bytes(64, 64),
            4096 + 2 * 64 * 2
        );
        assert_eq!(
            scheme(2, Some(64), 1).linear_bytes(64, 64),
            1024 + 2 * 64 * 2
        );
        // 3 bits: the 64 groups padded to 70 rows, ten codes an int32: [7, 64] int32.
        assert_eq!(
            scheme(3, Some(64), 1).linear_bytes(64, 64),
            7 * 64 * 4 + 2 * 64 * 2
        );
        // No group size: one group per row of in_features.
        assert_eq!(scheme(4, None, 1).linear_bytes(128, 64), 4096 + 2 * 64 * 2);
    }
}
