//! The value parsers of the command line's options: each turns one argument's text into a
//! checked value or a message that names the value and the fix (clap prints it with the option).

use crate::estimate::kv_cache::QuantizedSettings;
use crate::estimate::{Optimizer, Precision};
use crate::model::config::{MAX_DIMENSION, MAX_LAYERS};
use crate::schema::spec::{TrainOptimizer, TrainPrecision};
use crate::units::parse_count as positive_u64;
use crate::units::{self, Bytes, Decimal};

pub(super) fn fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!(
            "{text} is not a fraction in (0, 1]; vLLM's default is 0.9"
        )),
    }
}

pub(super) fn block_size(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(b) if [1, 8, 16, 32, 64, 128, 256].contains(&b) => Ok(b),
        _ => Err(format!(
            "{text} is not a vLLM block size: 1, 8, 16, 32, 64, 128 or 256"
        )),
    }
}

/// `--activation-peak`: the log's figure as a size, or `predict`.
pub(super) fn activation_peak(text: &str) -> Result<super::ActivationPeakArg, String> {
    if text.trim().eq_ignore_ascii_case("predict") {
        return Ok(super::ActivationPeakArg::Predict);
    }
    units::parse_size(text)
        .map(super::ActivationPeakArg::Size)
        .map_err(|e| {
            format!("{e}; or `predict` to run the profile run's forward on data-less tensors")
        })
}

pub(super) fn bits(text: &str) -> Result<Decimal, String> {
    let d = Decimal::parse(text).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err("0 bits stores nothing; give the stored width such as 16, 8, 4 or 4.5".into());
    }
    if d.to_f64() > 64.0 {
        return Err(format!(
            "{d} bits is wider than any element type (at most 64)"
        ));
    }
    Ok(d)
}

pub(super) fn gib(text: &str) -> Result<(Bytes, String), String> {
    let d = Decimal::parse(text).map_err(|e| e.to_string())?;
    let bytes = d
        .mul_div_ceil(units::GIB as u128, 1)
        .ok_or_else(|| format!("{text} GiB is too large"))?;
    let bytes = Bytes::from_u128(bytes).map_err(|e| format!("{text} GiB: {e}"))?;
    Ok((bytes, format!("--reserve-gib {d}")))
}

/// What the training loop runs; the estimate's other optimizers are named as such.
pub(super) fn train_optimizer(text: &str) -> Result<TrainOptimizer, String> {
    use clap::ValueEnum;
    TrainOptimizer::from_str(text, true).map_err(|_| {
        match Optimizer::from_str(text, true) {
            Ok(_) => format!(
                "{text} is estimated (iteragpu estimate --train --optimizer {text}) but not run by the training loop; run adamw, sgd, adamw-8bit or paged-adamw-8bit"
            ),
            Err(_) => format!("`{text}` is not an optimizer iteragpu runs; use adamw, sgd, adamw-8bit or paged-adamw-8bit (bitsandbytes')"),
        }
    })
}

/// What the training loop runs (the estimate's other precisions are refused with the list).
pub(super) fn train_precision(text: &str) -> Result<TrainPrecision, String> {
    use clap::ValueEnum;
    TrainPrecision::from_str(text, true).map_err(|_| match Precision::from_str(text, true) {
        Ok(_) => {
            format!(
                "{text} is estimated but not measured yet; use fp32, bf16-mixed, fp16-mixed or bf16"
            )
        }
        Err(_) => format!(
            "`{text}` is not a training precision; use fp32, bf16-mixed, fp16-mixed or bf16"
        ),
    })
}

pub(super) fn positive_size(text: &str) -> Result<Bytes, String> {
    match units::parse_size(text).map_err(|e| e.to_string())? {
        b if b.get() == 0 => Err(format!(
            "`{text}` is no memory at all; give the capacity to emulate, e.g. 8GiB"
        )),
        b => Ok(b),
    }
}

/// `cuda:N` (or `cuda`, meaning cuda:0).
pub fn device(text: &str) -> Result<String, String> {
    let t = text.trim();
    let index = match t.split_once(':') {
        None if t == "cuda" => "0",
        Some(("cuda", i)) if !i.is_empty() && i.chars().all(|c| c.is_ascii_digit()) => i,
        _ => {
            return Err(format!(
                "`{text}` is not a GPU device: write cuda:0, cuda:1, … (ROCm builds use the cuda name too)"
            ));
        }
    };
    let n: u32 = index
        .parse()
        .map_err(|_| format!("`{text}` has an index too large"))?;
    Ok(format!("cuda:{n}"))
}

/// Exactly the widths the help names: those of transformers' quantized cache.
pub(super) fn kv_quant_bits(text: &str) -> Result<u64, String> {
    let n = positive_u64(text)?;
    if !QuantizedSettings::BITS.contains(&n) {
        return Err(format!(
            "{n} bits is not a width of transformers' quantized cache (quanto packs 2 or 4 bits); use 2 or 4"
        ));
    }
    Ok(n)
}

/// An image size in pixels: `N` (square) or `HxW`, each side from 1 to 65,536.
pub(super) fn image_size(text: &str) -> Result<(u64, Option<u64>), String> {
    let side = |t: &str| -> Result<u64, String> {
        let n = t.trim().parse::<u64>().map_err(|_| {
            format!(
                "`{text}` is not an image size; give N (square, e.g. 224) or HxW (e.g. 384x512)"
            )
        })?;
        if !(1..=65_536).contains(&n) {
            return Err(format!(
                "{n} pixels is not an image side; give a side from 1 to 65,536 (e.g. 224 or 384x512)"
            ));
        }
        Ok(n)
    };
    match text.split_once(['x', 'X']) {
        Some((h, w)) => Ok((side(h)?, Some(side(w)?))),
        None => Ok((side(text)?, None)),
    }
}

/// A layer count, bounded like a config's before anything per layer is allocated.
pub(super) fn layer_count(text: &str) -> Result<u64, String> {
    bounded(text, MAX_LAYERS, "for a layer count")
}

/// A width (heads, head dimension, LoRA rank), bounded like a config's sizes.
pub(super) fn dimension(text: &str) -> Result<u64, String> {
    bounded(text, MAX_DIMENSION, "for a size")
}

/// A whole number from `MIN` to `MAX` (0 allowed for a seed or a count of tokens kept), worded
/// like every other number iteragpu reads.
pub(super) fn whole<const MIN: u64, const MAX: u64>(text: &str) -> Result<u64, String> {
    let n = if MIN == 0 && text.trim().trim_start_matches('0').is_empty() && !text.trim().is_empty()
    {
        0
    } else {
        positive_u64(text)?
    };
    if !(MIN..=MAX).contains(&n) {
        return Err(format!(
            "{} is not allowed; give a whole number from {} to {}",
            units::group_thousands(n as u128),
            units::group_thousands(MIN as u128),
            units::group_thousands(MAX as u128)
        ));
    }
    Ok(n)
}

pub(super) fn bounded(text: &str, bound: u64, what: &str) -> Result<u64, String> {
    let n = positive_u64(text)?;
    if n > bound {
        return Err(format!(
            "{} is above the bound of {} iteragpu accepts {what} (published models stay far below it); check the value",
            units::group_thousands(n as u128),
            units::group_thousands(bound as u128)
        ));
    }
    Ok(n)
}

/// Bytes of one cached value: no element type is wider than 8 bytes (float64).
pub(super) fn element_bytes(text: &str) -> Result<u64, String> {
    let n = positive_u64(text)?;
    if n > 8 {
        return Err(format!(
            "{n} bytes per value is wider than any element type (float64 takes 8); use 2 for bf16/fp16, 1 for fp8/int8, 4 for fp32"
        ));
    }
    Ok(n)
}
