//! The weights term: from a parameter count and a bit width, or from a model's real tensors with
//! the storage format (quantized or not) and the compute format kept apart.

use super::{EstimateError, Kind, Term, TermId, g};
use crate::dtype::Dtype;
use crate::model::Architecture;
use crate::model::quantization::Format;
use crate::model::safetensors::Stored;
use crate::units::{Bytes, Decimal};

/// Where the weight figure comes from.
#[derive(Clone, Debug)]
pub enum WeightsSource {
    /// `--parameters N --bits B`: a uniform compact storage of B bits per parameter.
    Numbers { parameters: u64, bits: Decimal },
    /// `--model PATH`.
    Model(Box<ModelWeights>),
}

/// A model read from disk and the format it will compute in.
#[derive(Clone, Debug)]
pub struct ModelWeights {
    pub path: String,
    pub architecture: Architecture,
    pub stored: Option<Stored>,
    /// The dtype the unquantized weights are loaded in and activations computed in.
    pub compute_dtype: Dtype,
    /// Where `compute_dtype` came from (`--dtype`, the config's torch_dtype, …).
    pub dtype_source: String,
}

impl ModelWeights {
    /// A model folder (or config file) and its stored checkpoint's headers: the dtype it computes
    /// in is `dtype` (`--dtype`), else `default` (a dtype and where it comes from, such as a
    /// serving engine's rule), else the config's own, else the stored format's widest float. The
    /// safetensors dtype names (`BF16`, `F16`, `F32`) are mapped here, the one place that reads them.
    pub fn load(
        path: &std::path::Path,
        dtype: Option<Dtype>,
        default: Option<(Dtype, String)>,
    ) -> Result<ModelWeights, EstimateError> {
        let config = crate::model::Config::load(path)?;
        let architecture = Architecture::from_config(&config)?;
        let stored = if path.is_dir() {
            crate::model::safetensors::scan_folder(path)?
        } else {
            None
        };
        let stored_float = stored.as_ref().and_then(|s| {
            s.by_dtype
                .iter()
                .filter_map(|(name, t)| {
                    let d = match name.as_str() {
                        "BF16" => Dtype::Bfloat16,
                        "F16" => Dtype::Float16,
                        "F32" => Dtype::Float32,
                        _ => return None,
                    };
                    Some((t.bytes, d))
                })
                .max_by_key(|(bytes, _)| *bytes)
                .map(|(_, d)| d)
        });
        let found = (dtype, default, architecture.config_dtype, stored_float);
        let (compute_dtype, dtype_source) = match found {
            (Some(d), _, _, _) => (d, "--dtype".to_string()),
            (None, Some(by_precision), _, _) => by_precision,
            (None, None, Some(d), _) => (d, "config.json torch_dtype".to_string()),
            (None, None, None, Some(d)) => (d, "the stored format".to_string()),
            (None, None, None, None) => (
                Dtype::Float32,
                "default float32: the config names no dtype; pass --dtype".to_string(),
            ),
        };
        Ok(ModelWeights {
            path: path.display().to_string(),
            architecture,
            stored,
            compute_dtype,
            dtype_source,
        })
    }
}

/// `ceil(parameters × bits ÷ 8)`: bytes are rounded up, never truncated.
pub fn bytes_for_bits(parameters: u64, bits: Decimal) -> Option<u128> {
    bits.mul_div_ceil(parameters as u128, 8)
}

/// The weights terms for inference.
pub fn terms(source: &WeightsSource, notes: &mut Vec<String>) -> Result<Vec<Term>, EstimateError> {
    base_terms(source, notes, false)
}

/// The frozen base of LoRA training. On a quantized base, QLoRA's recipe runs peft's
/// `prepare_model_for_kbit_training` first, which casts every float16/bfloat16 parameter that is
/// not a `Params4bit` to float32 (peft/utils/other.py: the embeddings, norms and output head;
/// skipped for GPTQ, whose model peft leaves alone), so those are counted in float32.
pub fn frozen_base_terms(
    source: &WeightsSource,
    notes: &mut Vec<String>,
) -> Result<Vec<Term>, EstimateError> {
    base_terms(source, notes, true)
}

fn base_terms(
    source: &WeightsSource,
    notes: &mut Vec<String>,
    lora_base: bool,
) -> Result<Vec<Term>, EstimateError> {
    let overflow = || EstimateError::overflow("the weights", "--parameters and --bits");
    match source {
        WeightsSource::Numbers { parameters, bits } => {
            let bytes = bytes_for_bits(*parameters, *bits)
                .ok_or_else(|| overflow()(crate::units::Overflow))
                .and_then(|b| Bytes::from_u128(b).map_err(overflow()))?;
            let mut formula = format!("{} parameters × {bits} bits ÷ 8", g(*parameters));
            if !bits.mul_div_is_exact(*parameters as u128, 8) {
                formula.push_str(", rounded up to a whole byte");
            }
            if bits.to_f64() < 16.0 {
                notes.push(format!(
                    "{bits} bits per parameter assumes a uniform compact storage; a real quantized load adds scales and zero points and keeps some modules (embeddings, norms, output head) in higher precision: use --model with the checkpoint's config for those"
                ));
            }
            Ok(vec![
                Term::new(
                    TermId::Weights {
                        dtype: None,
                        shard: None,
                    },
                    bytes,
                    Kind::Calculated,
                    formula,
                )
                .input("parameters", *parameters)
                .input("bits", bits.to_string()),
            ])
        }
        WeightsSource::Model(m) => model_terms(m, notes, lora_base),
    }
}

fn model_terms(
    m: &ModelWeights,
    notes: &mut Vec<String>,
    lora_base: bool,
) -> Result<Vec<Term>, EstimateError> {
    let arch = &m.architecture;
    let e = m.compute_dtype.bytes() as u128;
    let overflow = || EstimateError::overflow("the weights", "the config's sizes");
    let mut terms = Vec::new();
    match &arch.quantization {
        None => {
            let params = arch.parameters();
            let bytes = Bytes::from_u128(params * e).map_err(overflow())?;
            let sizes = arch
                .groups
                .iter()
                .map(|g| Some((g.checked_numel()?.checked_mul(e as u64)?, g.count)))
                .collect::<Option<Vec<(u64, u64)>>>()
                .ok_or_else(|| overflow()(crate::units::Overflow))?;
            let reserved = super::allocator::packed_reserved(&sizes) as u128;
            let tensors: u64 = arch.groups.iter().map(|g| g.count).sum();
            terms.push(
                Term::new(
                    TermId::Weights {
                        dtype: Some(m.compute_dtype.to_string()),
                        shard: None,
                    },
                    bytes,
                    Kind::Calculated,
                    format!(
                        "{} parameters × {e} bytes ({}, {})",
                        g(params),
                        m.compute_dtype,
                        m.dtype_source
                    ),
                )
                .input("parameters", params as u64)
                .input("dtype", m.compute_dtype.torch_name()),
            );
            terms.push(
                Term::new(
                    TermId::AllocatorSegments,
                    Bytes::from_u128(reserved.saturating_sub(params * e)).map_err(overflow())?,
                    Kind::Assumed,
                    format!(
                        "{} weight tensors through PyTorch's caching allocator: each rounded up to 512 B, ≤ 1 MiB ones packed in 2 MiB segments, < 10 MiB ones in 20 MiB segments, larger ones rounded up to 2 MiB (reserved {} − allocated {})",
                        g(tensors),
                        g(reserved),
                        g(params * e)
                    ),
                )
                .input("reserved_bytes", reserved as u64),
            );
        }
        Some(q) => {
            let mut quantized_params = 0u128;
            let mut quantized_bytes = 0u128;
            let mut quantized_tensors = 0u64;
            let mut largest = 0u128;
            let mut other_params = 0u128;
            for group in &arch.groups {
                match group.linear_dims().filter(|_| q.applies_to(group)) {
                    Some((inp, out)) => {
                        quantized_params += group.total();
                        quantized_bytes += q.linear_bytes(inp, out) * group.linear_count() as u128;
                        quantized_tensors += group.linear_count();
                        largest = largest.max(inp as u128 * out as u128);
                    }
                    None => other_params += group.total(),
                }
            }
            let storage = Bytes::from_u128(quantized_bytes).map_err(overflow())?;
            terms.push(
                Term::new(
                    TermId::QuantizedWeights {
                        format: q.short_label(),
                    },
                    storage,
                    Kind::Calculated,
                    format!(
                        "{}: {}; over {} weights holding {} parameters",
                        q.label(),
                        q.formula(),
                        g(quantized_tensors),
                        g(quantized_params)
                    ),
                )
                .input("quantized_parameters", quantized_params as u64)
                .input("format", q.label()),
            );
            // QLoRA's prepare_model_for_kbit_training upcasts the float16/bfloat16 ones.
            let upcast = lora_base
                && !matches!(q.format, Format::Gptq { .. })
                && matches!(m.compute_dtype, Dtype::Float16 | Dtype::Bfloat16);
            let kept = if upcast {
                Dtype::Float32
            } else {
                m.compute_dtype
            };
            let ke = kept.bytes() as u128;
            let others = Bytes::from_u128(other_params * ke).map_err(overflow())?;
            terms.push(
                Term::new(
                    TermId::UnquantizedWeights {
                        dtype: kept.to_string(),
                    },
                    others,
                    Kind::Calculated,
                    format!(
                        "{} parameters (embeddings, norms, biases{}) × {ke} bytes ({kept}{})",
                        g(other_params),
                        if q.quantize_lm_head {
                            ""
                        } else {
                            ", output head"
                        },
                        if upcast {
                            format!(
                                ", upcast from {} by peft's prepare_model_for_kbit_training",
                                m.compute_dtype
                            )
                        } else {
                            String::new()
                        }
                    ),
                )
                .input("parameters", other_params as u64),
            );
            if upcast {
                notes.push(format!(
                    "QLoRA: peft's prepare_model_for_kbit_training (the recipe's first step, which the causal-lm workload runs) casts the {} unquantized parameters from {} to float32: {} more than leaving them in {}",
                    g(other_params),
                    m.compute_dtype,
                    g(other_params * (ke - e)),
                    m.compute_dtype
                ));
            }
            if let Some(note) = loading_note(q, quantized_params) {
                notes.push(note);
            }
            let compute = match &q.format {
                Format::Bnb4 {
                    compute_dtype: Some(d),
                    ..
                } => *d,
                _ => m.compute_dtype,
            };
            let transient =
                Bytes::from_u128(largest * compute.bytes() as u128).map_err(overflow())?;
            terms.push(
                Term::new(
                    TermId::DequantizedWeight {
                        dtype: compute.to_string(),
                    },
                    transient,
                    Kind::Assumed,
                    format!(
                        "compute format {compute}: largest quantized weight {} values × {} bytes, one weight dequantized at a time",
                        g(largest),
                        compute.bytes()
                    ),
                )
                .input("compute_dtype", compute.torch_name()),
            );
            notes.push(format!(
                "storage format {} and compute format {compute} are different: the kernels dequantize on the fly, so the stored bytes are not the bytes multiplied",
                q.label()
            ));
        }
    }
    if let Some(stored) = &m.stored {
        let mut parts: Vec<String> = stored
            .by_dtype
            .iter()
            .map(|(dtype, t)| format!("{dtype} {}", g(t.bytes)))
            .collect();
        parts.sort();
        terms.push(
            Term::new(
                TermId::StoredWeights,
                Bytes(stored.data_bytes),
                Kind::Calculated,
                format!("{} shard(s): {}", stored.shards.len(), parts.join(", ")),
            )
            .info()
            .input("elements", stored.elements),
        );
        let counted = arch.parameters();
        if arch.quantization.is_none() && stored.elements as u128 != counted {
            let tied = if arch.tied_embeddings {
                " (tied embeddings are stored once)"
            } else {
                ""
            };
            notes.push(format!(
                "the checkpoint stores {} values but the config describes {} parameters{tied}: extra or missing tensors (buffers, extra heads) are in the files",
                g(stored.elements),
                g(counted)
            ));
        }
        if !stored.unlisted.is_empty() {
            notes.push(format!(
                "not listed by model.safetensors.index.json, so not counted (transformers does not load them either): {}",
                stored.unlisted.join(", ")
            ));
        }
        if let Some(total) = stored.index_total_size
            && total != stored.data_bytes
        {
            notes.push(format!(
                "model.safetensors.index.json declares total_size {} but the shard headers describe {} bytes",
                g(total),
                g(stored.data_bytes)
            ));
        }
    }
    Ok(terms)
}

/// What transformers does with a checkpoint format beyond loading its stored tensors, said
/// beside the figure (which is the format's own layout).
fn loading_note(q: &crate::model::quantization::Quantization, params: u128) -> Option<String> {
    match &q.format {
        Format::CompressedTensors(s) => Some(format!(
            "compressed-tensors through transformers: the weights load compressed (this figure), then the model's first forward decompresses every quantized layer to {} (compressed-tensors' decompression hook, `dequantize=False`): {} bytes of dense weights from then on; vLLM runs them compressed",
            s.scale_dtype,
            g(params * s.scale_dtype.bytes() as u128)
        )),
        Format::Hqq(s) => Some(format!(
            "HQQ: this figure is HQQLinear's layout as hqq's own loader holds it (hqq 0.2.8); transformers 5.24 and 5.25 build no HQQ layer from a checkpoint (their HQQ quantizer has no load operation): `from_pretrained` leaves float nn.Linear layers, newly initialized, {} bytes",
            g(params * s.compute_dtype.bytes() as u128)
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up() {
        let bits = Decimal::parse("4.5").unwrap();
        assert_eq!(bytes_for_bits(7, bits), Some(4)); // 3.9375 → 4
        assert_eq!(
            bytes_for_bits(7_000_000_000, Decimal::parse("16").unwrap()),
            Some(14_000_000_000)
        );
        assert_eq!(bytes_for_bits(3, Decimal::parse("1").unwrap()), Some(1));
    }
}
