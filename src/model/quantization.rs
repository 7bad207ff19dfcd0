//! `quantization_config` of a checkpoint: which format stores the weights, which modules it
//! leaves alone, and the exact bytes each quantized linear layer takes on the device.
//!
//! Each formula cites the code that defines the stored tensors.

use serde::Serialize;

use super::ModelError;
use super::config::Fields;
use super::inventory::{Role, TensorGroup};
use crate::dtype::Dtype;

pub mod compressed_tensors;
pub mod hqq;

/// A supported storage format and its settings.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum Format {
    /// bitsandbytes 4-bit (`load_in_4bit`): nf4 or fp4 codes, 64-value blocks with an absmax each.
    Bnb4 {
        quant_type: String,
        double_quant: bool,
        compute_dtype: Option<Dtype>,
        /// `bnb_4bit_quant_storage`: the dtype the packed codes are stored in (uint8 by default;
        /// bfloat16 for FSDP-sharded QLoRA).
        quant_storage: Dtype,
    },
    /// bitsandbytes LLM.int8 (`load_in_8bit`): int8 weights with one fp32 scale per output row.
    Bnb8,
    /// GPTQ: packed int32 weights, per-group scales and zeros, and a `g_idx` permutation.
    Gptq { bits: u64, group_size: Option<u64> },
    /// AWQ (GEMM layout): packed int32 weights, per-group scales and zeros.
    Awq { bits: u64, group_size: Option<u64> },
    /// Fine-grained FP8 (DeepSeek-V3 style): 8-bit weights with fp32 inverse scales per block.
    Fp8 { block: Option<(u64, u64)> },
    /// compressed-tensors (llm-compressor, vLLM): packed int, int8 or FP8 weights and scales.
    CompressedTensors(compressed_tensors::Scheme),
    /// HQQ: packed codes with a scale and a zero per group.
    Hqq(hqq::Scheme),
}

/// `--quantize`: what transformers' `BitsAndBytesConfig` is asked to load a float checkpoint as.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Serialize,
    serde::Deserialize,
    clap::ValueEnum,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
#[derive(strum::Display, strum::AsRefStr, strum::EnumString, strum::VariantArray)]
#[strum(serialize_all = "lowercase")]
pub enum QuantizeMethod {
    /// bitsandbytes 4-bit NormalFloat (`load_in_4bit`, `bnb_4bit_quant_type="nf4"`): QLoRA's.
    Nf4,
    /// bitsandbytes 4-bit float (`load_in_4bit`, `bnb_4bit_quant_type="fp4"`).
    Fp4,
    /// bitsandbytes LLM.int8 (`load_in_8bit`).
    Int8,
}

/// A parsed `quantization_config`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Quantization {
    pub format: Format,
    /// Module names the config keeps unquantized (`modules_to_not_convert`, `llm_int8_skip_modules`).
    pub skip_modules: Vec<String>,
    /// GPTQ's `lm_head` flag: the output head is quantized too.
    pub quantize_lm_head: bool,
}

impl Quantization {
    /// What `BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=…,
    /// bnb_4bit_use_double_quant=…, bnb_4bit_compute_dtype=compute)` or
    /// `BitsAndBytesConfig(load_in_8bit=True)` loads: transformers' defaults otherwise (uint8
    /// storage, no skipped module beyond the output head, which `get_keys_to_not_convert` keeps).
    pub fn bitsandbytes(
        method: QuantizeMethod,
        double_quant: bool,
        compute: Dtype,
    ) -> Quantization {
        let format = match method {
            QuantizeMethod::Nf4 | QuantizeMethod::Fp4 => Format::Bnb4 {
                quant_type: method.to_string(),
                double_quant,
                compute_dtype: Some(compute),
                quant_storage: Dtype::Uint8,
            },
            QuantizeMethod::Int8 => Format::Bnb8,
        };
        Quantization {
            format,
            skip_modules: Vec::new(),
            quantize_lm_head: false,
        }
    }

    /// The `--quantize` method and double quantization this config asks bitsandbytes for, if it
    /// is a bitsandbytes config.
    pub fn bnb_method(&self) -> Option<(QuantizeMethod, bool)> {
        match &self.format {
            Format::Bnb4 {
                quant_type,
                double_quant,
                ..
            } => Some((
                if quant_type == "nf4" {
                    QuantizeMethod::Nf4
                } else {
                    QuantizeMethod::Fp4
                },
                *double_quant,
            )),
            Format::Bnb8 => Some((QuantizeMethod::Int8, false)),
            _ => None,
        }
    }

    pub fn from_config(root: &Fields) -> Result<Option<Quantization>, ModelError> {
        let Some(q) = root.section("quantization_config")? else {
            return Ok(None);
        };
        let method = q.opt_str("quant_method")?.unwrap_or("bitsandbytes");
        // The weights' dtype, which the scales of compressed-tensors and HQQ take.
        let weights_dtype = ["torch_dtype", "dtype"]
            .iter()
            .find_map(|k| root.opt_str(k).ok().flatten())
            .and_then(|name| name.parse::<Dtype>().ok());
        let checkpoint = match method {
            "compressed-tensors" => Some(
                compressed_tensors::parse(&q, weights_dtype)
                    .map(|(s, skip)| (Format::CompressedTensors(s), skip))?,
            ),
            "hqq" => Some(hqq::parse(&q, weights_dtype).map(|(s, skip)| (Format::Hqq(s), skip))?),
            _ => None,
        };
        if let Some((format, skip_modules)) = checkpoint {
            // Both convert every `nn.Linear` not listed, the output head included.
            let quantize_lm_head = !skip_modules.iter().any(|m| m == "lm_head");
            return Ok(Some(Quantization {
                format,
                skip_modules,
                quantize_lm_head,
            }));
        }
        let mut skip: Vec<String> = Vec::new();
        for key in ["modules_to_not_convert", "llm_int8_skip_modules"] {
            if let Some(list) = q.opt_strings(key)? {
                skip.extend(list.into_iter().map(str::to_string));
            }
        }
        let group = |key: &str| -> Result<Option<u64>, ModelError> {
            match q.raw(key) {
                None => Ok(Some(128)),
                Some(v) if v.as_i64() == Some(-1) => Ok(None),
                Some(_) => Ok(Some(q.positive(key)?)),
            }
        };
        let format = match method {
            "bitsandbytes" => {
                if q.bool_or("load_in_4bit", false)? {
                    let compute = match q.opt_str("bnb_4bit_compute_dtype")? {
                        Some(name) => Some(
                            name.parse::<Dtype>()
                                .map_err(|e| q.invalid("bnb_4bit_compute_dtype", &e.to_string()))?,
                        ),
                        None => None,
                    };
                    let quant_type = q.opt_str("bnb_4bit_quant_type")?.unwrap_or("fp4");
                    if quant_type != "nf4" && quant_type != "fp4" {
                        return Err(q.invalid(
                            "bnb_4bit_quant_type",
                            &format!("is `{quant_type}`; bitsandbytes has nf4 and fp4"),
                        ));
                    }
                    let quant_storage = match q.opt_str("bnb_4bit_quant_storage")? {
                        Some(name) => name
                            .parse::<Dtype>()
                            .map_err(|e| q.invalid("bnb_4bit_quant_storage", &e.to_string()))?,
                        None => Dtype::Uint8,
                    };
                    Format::Bnb4 {
                        quant_type: quant_type.to_string(),
                        double_quant: q.bool_or("bnb_4bit_use_double_quant", false)?,
                        compute_dtype: compute,
                        quant_storage,
                    }
                } else if q.bool_or("load_in_8bit", false)? {
                    Format::Bnb8
                } else {
                    return Err(q.invalid(
                        "load_in_4bit",
                        "and load_in_8bit are both false or missing; set one of them to true",
                    ));
                }
            }
            "gptq" => Format::Gptq {
                bits: bits(&q)?,
                group_size: group("group_size")?,
            },
            "awq" => {
                if let Some(version) = q.opt_str("version")?
                    && !version.eq_ignore_ascii_case("gemm")
                {
                    return Err(q.invalid(
                        "version",
                        &format!("is `{version}`; iteragpu models the AWQ GEMM layout only"),
                    ));
                }
                Format::Awq {
                    bits: bits(&q)?,
                    group_size: group("group_size")?,
                }
            }
            "fp8" => {
                let block = match q.opt_u64s("weight_block_size")? {
                    Some(v) if v.len() == 2 && v[0] > 0 && v[1] > 0 => Some((v[0], v[1])),
                    Some(_) => {
                        return Err(q.invalid(
                            "weight_block_size",
                            "must be two positive integers such as [128, 128]",
                        ));
                    }
                    None => None,
                };
                Format::Fp8 { block }
            }
            other => {
                return Err(q.invalid(
                    "quant_method",
                    &format!(
                        "is `{other}`, which iteragpu does not model (supported: bitsandbytes, gptq, awq, fp8, compressed-tensors, hqq); estimate with --parameters N --bits B instead"
                    ),
                ));
            }
        };
        Ok(Some(Quantization {
            format,
            skip_modules: skip,
            quantize_lm_head: q.bool_or("lm_head", false)?,
        }))
    }

    /// A short name for tables: `bitsandbytes nf4 (double quant)`, `GPTQ 4-bit, group 128`.
    pub fn label(&self) -> String {
        let group = |g: &Option<u64>| g.map_or("no grouping".to_string(), |g| format!("group {g}"));
        match &self.format {
            Format::Bnb4 {
                quant_type,
                double_quant,
                ..
            } => format!(
                "bitsandbytes 4-bit {quant_type}{}",
                if *double_quant {
                    " with nested (double) quantization"
                } else {
                    ""
                }
            ),
            Format::Bnb8 => "bitsandbytes LLM.int8 8-bit".to_string(),
            Format::Gptq { bits, group_size } => format!("GPTQ {bits}-bit, {}", group(group_size)),
            Format::Awq { bits, group_size } => {
                format!("AWQ {bits}-bit (GEMM), {}", group(group_size))
            }
            Format::Fp8 { block } => match block {
                Some((r, c)) => format!("FP8 e4m3, {r}×{c} block scales"),
                None => "FP8 e4m3, per-tensor scale".to_string(),
            },
            Format::CompressedTensors(s) => s.label(),
            Format::Hqq(s) => s.label(),
        }
    }

    /// A compact name for the table's term column: `bnb nf4 + double quant`, `GPTQ 4-bit g128`.
    pub fn short_label(&self) -> String {
        let group = |g: &Option<u64>| g.map_or(String::new(), |g| format!(" g{g}"));
        match &self.format {
            Format::Bnb4 {
                quant_type,
                double_quant,
                ..
            } => {
                format!(
                    "bnb {quant_type}{}",
                    if *double_quant { " + double quant" } else { "" }
                )
            }
            Format::Bnb8 => "bnb int8".into(),
            Format::Gptq { bits, group_size } => format!("GPTQ {bits}-bit{}", group(group_size)),
            Format::Awq { bits, group_size } => format!("AWQ {bits}-bit{}", group(group_size)),
            Format::Fp8 {
                block: Some((r, c)),
            } => format!("FP8 {r}×{c} blocks"),
            Format::Fp8 { block: None } => "FP8".into(),
            Format::CompressedTensors(s) => s.short_label(),
            Format::Hqq(s) => s.short_label(),
        }
    }

    /// Whether this group is stored quantized: linear weights inside the blocks (bitsandbytes also
    /// converts routers, which are plain `nn.Linear`), never embeddings, norms or biases, the
    /// output head only when the config says so, and nothing named in the skip list.
    pub fn applies_to(&self, group: &TensorGroup) -> bool {
        if self.skip_modules.iter().any(|m| group.matches(m)) {
            return false;
        }
        match group.role {
            Role::Linear | Role::Experts => true,
            // bitsandbytes, compressed-tensors (targets `Linear`) and HQQ convert every
            // `nn.Linear` they are not told to skip.
            Role::Router => matches!(
                self.format,
                Format::Bnb4 { .. } | Format::Bnb8 | Format::CompressedTensors(_) | Format::Hqq(_)
            ),
            Role::LmHead => self.quantize_lm_head,
            _ => false,
        }
    }

    /// Bytes one quantized `[out, in]` linear weight takes, with its scales and metadata.
    pub fn linear_bytes(&self, inp: u64, out: u64) -> u128 {
        let (inp, out) = (inp as u128, out as u128);
        let n = inp * out;
        match &self.format {
            // bitsandbytes functional.quantize_4bit (blocksize 64 in transformers' Params4bit):
            // two 4-bit codes per uint8, one fp32 absmax per block, a 16-entry fp32 code table.
            // Nested quantization (compress_statistics) stores the absmax as uint8 with one fp32
            // absmax per 256 blocks, a 256-entry fp32 code table and an fp32 offset.
            // The packed codes: `torch.empty(((n + 1) // (quant_storage.itemsize * 2), 1))`
            // (bitsandbytes/_ops.py, the fake of `bitsandbytes::quantize_4bit`).
            Format::Bnb4 {
                double_quant,
                quant_storage,
                ..
            } => {
                let blocks = n.div_ceil(64);
                let s = quant_storage.bytes() as u128;
                let codes = (n + 1) / (2 * s) * s + 16 * 4;
                if *double_quant {
                    codes + blocks + blocks.div_ceil(256) * 4 + 256 * 4 + 4
                } else {
                    codes + blocks * 4
                }
            }
            // bitsandbytes Int8Params: CB int8 [out, in] and SCB fp32 [out].
            Format::Bnb8 => n + out * 4,
            // AutoGPTQ/GPTQModel QuantLinear: qweight int32 [in·bits/32, out], qzeros int32
            // [groups, out·bits/32], scales fp16 [groups, out], g_idx int32 [in].
            Format::Gptq { bits, group_size } => {
                let b = *bits as u128;
                let groups = group_size.map_or(1, |g| inp.div_ceil(g as u128));
                (inp * b).div_ceil(32) * out * 4
                    + groups * (out * b).div_ceil(32) * 4
                    + groups * out * 2
                    + inp * 4
            }
            // AutoAWQ WQLinear_GEMM: qweight int32 [in, out·bits/32], qzeros int32
            // [in/group, out·bits/32], scales fp16 [in/group, out].
            Format::Awq { bits, group_size } => {
                let b = *bits as u128;
                let groups = group_size.map_or(1, |g| inp.div_ceil(g as u128));
                inp * (out * b).div_ceil(32) * 4
                    + groups * (out * b).div_ceil(32) * 4
                    + groups * out * 2
            }
            // transformers FP8Linear (finegrained_fp8): weight float8_e4m3fn [out, in] and
            // weight_scale_inv fp32 [ceil(out/br), ceil(in/bc)].
            Format::Fp8 { block } => {
                let scales = match block {
                    Some((br, bc)) => out.div_ceil(*br as u128) * inp.div_ceil(*bc as u128),
                    None => 1,
                };
                n + scales * 4
            }
            Format::CompressedTensors(s) => s.linear_bytes(inp, out),
            Format::Hqq(s) => s.linear_bytes(inp, out),
        }
    }

    /// The formula of `linear_bytes` in words, for the table.
    pub fn formula(&self) -> String {
        match &self.format {
            Format::Bnb4 {
                double_quant: false,
                quant_storage,
                ..
            } => format!(
                "per quantized weight of n values: ⌈n/2⌉ (4-bit codes{}) + 4·⌈n/64⌉ (fp32 absmax) + 64 (code table)",
                storage_words(*quant_storage)
            ),
            Format::Bnb4 {
                double_quant: true,
                quant_storage,
                ..
            } => format!(
                "per quantized weight of n values: ⌈n/2⌉ (4-bit codes{}) + ⌈n/64⌉ (uint8 absmax) + 4·⌈n/64/256⌉ (fp32 nested absmax) + 64 + 1024 + 4 (code tables, offset)",
                storage_words(*quant_storage)
            ),
            Format::Bnb8 => "per weight [out, in]: out·in (int8) + 4·out (fp32 row scales)".into(),
            Format::Gptq { bits, group_size } => format!(
                "per weight [out, in], g = {}: 4·⌈in·{bits}/32⌉·out (qweight) + 4·g·⌈out·{bits}/32⌉ (qzeros) + 2·g·out (fp16 scales) + 4·in (g_idx)",
                group_size.map_or("1".to_string(), |s| format!("⌈in/{s}⌉"))
            ),
            Format::Awq { bits, group_size } => format!(
                "per weight [out, in], g = {}: 4·in·⌈out·{bits}/32⌉ (qweight) + 4·g·⌈out·{bits}/32⌉ (qzeros) + 2·g·out (fp16 scales)",
                group_size.map_or("1".to_string(), |s| format!("⌈in/{s}⌉"))
            ),
            Format::Fp8 {
                block: Some((r, c)),
            } => {
                format!("per weight [out, in]: out·in (fp8) + 4·⌈out/{r}⌉·⌈in/{c}⌉ (fp32 scales)")
            }
            Format::Fp8 { block: None } => {
                "per weight [out, in]: out·in (fp8) + 4 (one fp32 scale)".into()
            }
            Format::CompressedTensors(s) => s.formula(),
            Format::Hqq(s) => s.formula(),
        }
    }
}

/// The packed codes' storage dtype, when it is not bitsandbytes' default uint8.
fn storage_words(storage: Dtype) -> String {
    if storage == Dtype::Uint8 {
        String::new()
    } else {
        format!(" in {storage}, rounded down to whole {storage} elements")
    }
}

fn bits(q: &Fields) -> Result<u64, ModelError> {
    let bits = q.positive_or("bits", 4)?;
    if !(2..=8).contains(&bits) {
        return Err(q.invalid(
            "bits",
            &format!("is {bits}; GPTQ and AWQ use 2, 3, 4 or 8 bits"),
        ));
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(format: Format) -> Quantization {
        Quantization {
            format,
            skip_modules: vec![],
            quantize_lm_head: false,
        }
    }

    #[test]
    fn bnb4_bytes() {
        // 4096×4096: 8,388,608 packed + 262,144 blocks × 4 + 64.
        let plain = q(Format::Bnb4 {
            quant_type: "nf4".into(),
            double_quant: false,
            compute_dtype: None,
            quant_storage: Dtype::Uint8,
        });
        assert_eq!(plain.linear_bytes(4096, 4096), 8_388_608 + 1_048_576 + 64);
        let nested = q(Format::Bnb4 {
            quant_type: "nf4".into(),
            double_quant: true,
            compute_dtype: None,
            quant_storage: Dtype::Uint8,
        });
        assert_eq!(
            nested.linear_bytes(4096, 4096),
            8_388_608 + 64 + 262_144 + 1024 * 4 + 1024 + 4
        );
    }

    fn parsed(quantization: serde_json::Value) -> Result<Option<Quantization>, ModelError> {
        let text = serde_json::json!({"model_type": "llama", "torch_dtype": "bfloat16", "quantization_config": quantization});
        let config = super::super::config::Config::parse(
            std::path::Path::new("config.json"),
            &text.to_string(),
        )
        .unwrap();
        Quantization::from_config(&config.fields())
    }

    #[test]
    fn compressed_tensors_and_hqq_configs_parse() {
        let w4a16 = parsed(serde_json::json!({
            "quant_method": "compressed-tensors", "format": "pack-quantized",
            "ignore": ["lm_head", "re:.*mlp.gate$"],
            "config_groups": {"group_0": {"targets": ["Linear"],
                "weights": {"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group", "group_size": 128}}},
        }))
        .unwrap()
        .unwrap();
        assert_eq!(w4a16.skip_modules, ["lm_head", "mlp.gate"]);
        assert!(!w4a16.quantize_lm_head);
        // The scales take the checkpoint's dtype: bfloat16 here.
        assert_eq!(w4a16.linear_bytes(4096, 4096), 8_388_608 + 16 + 262_144);
        assert_eq!(w4a16.short_label(), "CT int4 g128");
        // An expression that names no module is refused, named.
        let err = parsed(serde_json::json!({
            "quant_method": "compressed-tensors", "ignore": ["re:model.layers.[0-3].*"],
            "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4}}},
        }))
        .unwrap_err()
        .to_string();
        assert!(err.contains("re:model.layers.[0-3].*"), "{err}");
        let err = parsed(
            serde_json::json!({"quant_method": "compressed-tensors", "format": "marlin-24",
            "config_groups": {"g": {"weights": {"num_bits": 4}}}}),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("marlin-24"), "{err}");
        // HQQ as transformers saves it: the compute dtype (bfloat16) holds scale and zero.
        let hqq = parsed(serde_json::json!({
            "quant_method": "hqq", "skip_modules": ["lm_head"],
            "quant_config": {"offload_meta": false, "scale_quant_params": null, "zero_quant_params": null,
                "weight_quant_params": {"nbits": 4, "group_size": 64, "axis": 1, "view_as_float": false}},
        }))
        .unwrap()
        .unwrap();
        assert_eq!(hqq.linear_bytes(4096, 4096), 8_388_608 + 2 * 262_144 * 2);
        assert_eq!(hqq.label(), "HQQ 4-bit, group 64, axis 1");
        let err = parsed(serde_json::json!({"quant_method": "hqq", "quant_config": {"weight_quant_params": {"nbits": 7}}}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("is 7"), "{err}");
    }

    #[test]
    fn gptq_and_awq_bytes() {
        let gptq = q(Format::Gptq {
            bits: 4,
            group_size: Some(128),
        });
        // qweight 512×4096×4, qzeros 32×512×4, scales 32×4096×2, g_idx 4096×4.
        assert_eq!(
            gptq.linear_bytes(4096, 4096),
            8_388_608 + 65_536 + 262_144 + 16_384
        );
        let awq = q(Format::Awq {
            bits: 4,
            group_size: Some(128),
        });
        assert_eq!(awq.linear_bytes(4096, 4096), 8_388_608 + 65_536 + 262_144);
    }
}
