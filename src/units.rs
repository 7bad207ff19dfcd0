//! Bytes and the two ways people count them: GB (10^9) and GiB (2^30), always side by side.
//!
//! Raw byte counts are `u64`; products are computed in `u128` and checked on the way back, so an
//! absurd input (10^30 parameters) is an error, never a wrap-around. User-typed sizes and widths
//! are parsed as exact decimals so `4.5` bits or `13.04GiB` never lose precision to a float.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One gigabyte: 10^9 bytes (SI, as vendors label cards).
pub const GB: u64 = 1_000_000_000;
/// One gibibyte: 2^30 bytes (as PyTorch and drivers count).
pub const GIB: u64 = 1 << 30;

/// A number of bytes. Serialized as a bare integer.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Bytes(pub u64);

impl Bytes {
    pub fn get(self) -> u64 {
        self.0
    }
    pub fn gb(self) -> f64 {
        self.0 as f64 / GB as f64
    }
    pub fn gib(self) -> f64 {
        self.0 as f64 / GIB as f64
    }
    /// `14,000,000,000` — raw bytes with thousands separators.
    pub fn grouped(self) -> String {
        group_thousands(self.0 as u128)
    }
    /// `14.00 GB = 13.04 GiB`
    pub fn both(self) -> String {
        format!("{:.2} GB = {:.2} GiB", self.gb(), self.gib())
    }
    pub fn checked_add(self, other: Bytes) -> Option<Bytes> {
        self.0.checked_add(other.0).map(Bytes)
    }
    /// Converts a `u128` intermediate back to bytes, refusing anything past `u64::MAX`.
    pub fn from_u128(value: u128) -> Result<Bytes, Overflow> {
        u64::try_from(value).map(Bytes).map_err(|_| Overflow)
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes ({})", self.grouped(), self.both())
    }
}

/// A result larger than 2^64 − 1 bytes (about 18.4 EB): the inputs cannot describe a real GPU load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the result exceeds 18,446,744,073,709,551,615 bytes (about 18.4 EB)")]
pub struct Overflow;

/// Sum of byte counts, refusing overflow.
pub fn checked_sum<I: IntoIterator<Item = Bytes>>(items: I) -> Result<Bytes, Overflow> {
    items
        .into_iter()
        .try_fold(Bytes(0), |acc, b| acc.checked_add(b))
        .ok_or(Overflow)
}

/// Formats an integer with `,` every three digits.
pub fn group_thousands(value: u128) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// An exact non-negative decimal such as `4.5` (= 45 / 10^1), parsed from user text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decimal {
    /// All digits, without the point.
    pub mantissa: u128,
    /// Number of digits after the point.
    pub scale: u32,
}

/// Why a decimal number typed by a user was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecimalError {
    #[error("`{0}` is not a number: write digits with an optional decimal point, e.g. 16 or 4.5")]
    NotANumber(String),
    #[error("`{0}` is negative: a size or a count must be positive")]
    Negative(String),
    #[error("`{0}` has too many digits: at most 30 digits and 9 decimals are accepted")]
    TooLong(String),
}

impl Decimal {
    /// Parses `16`, `4.5`, `0.25`, `1e9` is refused (write the digits out; exponents hide typos).
    pub fn parse(text: &str) -> Result<Decimal, DecimalError> {
        let t = text.trim();
        if t.starts_with('-') {
            return Err(DecimalError::Negative(text.to_string()));
        }
        let t = t.strip_prefix('+').unwrap_or(t);
        let (int, frac) = match t.split_once('.') {
            Some((i, f)) => (i, f),
            None => (t, ""),
        };
        let valid = |s: &str| s.chars().all(|c| c.is_ascii_digit() || c == '_');
        if (int.is_empty() && frac.is_empty()) || !valid(int) || !valid(frac) {
            return Err(DecimalError::NotANumber(text.to_string()));
        }
        let int: String = int.chars().filter(|c| *c != '_').collect();
        let frac: String = frac.chars().filter(|c| *c != '_').collect();
        if int.len() + frac.len() > 30 || frac.len() > 9 {
            return Err(DecimalError::TooLong(text.to_string()));
        }
        let digits = format!("{int}{frac}");
        let mantissa = if digits.is_empty() {
            0
        } else {
            digits
                .parse::<u128>()
                .map_err(|_| DecimalError::NotANumber(text.to_string()))?
        };
        Ok(Decimal {
            mantissa,
            scale: frac.len() as u32,
        })
    }

    pub fn is_zero(self) -> bool {
        self.mantissa == 0
    }

    fn denominator(self) -> u128 {
        10u128.pow(self.scale)
    }

    /// `ceil(self × numerator ÷ divisor)`, exact; `None` on overflow.
    pub fn mul_div_ceil(self, numerator: u128, divisor: u128) -> Option<u128> {
        let top = self.mantissa.checked_mul(numerator)?;
        let bottom = self.denominator().checked_mul(divisor)?;
        Some(top.div_ceil(bottom))
    }

    /// Whether `self × numerator ÷ divisor` is a whole number (no rounding happened).
    pub fn mul_div_is_exact(self, numerator: u128, divisor: u128) -> bool {
        match (
            self.mantissa.checked_mul(numerator),
            self.denominator().checked_mul(divisor),
        ) {
            (Some(top), Some(bottom)) => top.is_multiple_of(bottom),
            _ => false,
        }
    }

    /// The integer value if the decimal has no fractional part.
    pub fn as_integer(self) -> Option<u128> {
        self.mantissa
            .is_multiple_of(self.denominator())
            .then(|| self.mantissa / self.denominator())
    }

    pub fn to_f64(self) -> f64 {
        self.mantissa as f64 / self.denominator() as f64
    }
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.scale == 0 {
            return write!(f, "{}", self.mantissa);
        }
        let den = self.denominator();
        let frac = format!(
            "{:0width$}",
            self.mantissa % den,
            width = self.scale as usize
        );
        let frac = frac.trim_end_matches('0');
        if frac.is_empty() {
            write!(f, "{}", self.mantissa / den)
        } else {
            write!(f, "{}.{}", self.mantissa / den, frac)
        }
    }
}

/// Why a size typed by a user was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error(
        "`{0}` is ambiguous: `{1}` could mean 10^x or 2^x bytes; write {2}GB (10^9 bytes) or {2}GiB (2^30 bytes)"
    )]
    Ambiguous(String, String, String),
    #[error(
        "`{0}` has an unknown unit `{1}`: use B, KB, MB, GB, TB (powers of 10) or KiB, MiB, GiB, TiB (powers of 2)"
    )]
    UnknownUnit(String, String),
    #[error("{0}")]
    Number(#[from] DecimalError),
    #[error("`{0}` is a fraction of a byte: raw byte counts must be whole numbers")]
    FractionalBytes(String),
    #[error("`{0}` is too large: {1}")]
    TooLarge(String, Overflow),
}

/// Parses `14000000000`, `14GB`, `13.04GiB`, `512 MiB`. A bare `G`, `M`, `K` or `T` is refused as
/// ambiguous. Fractional results are rounded up to the next whole byte.
pub fn parse_size(text: &str) -> Result<Bytes, SizeError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_' || c == '-' || c == '+'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let unit = unit.trim();
    // Quote what the user typed, not the part before the unit (empty for `٣GiB`).
    let value = Decimal::parse(number).map_err(|e| match e {
        DecimalError::NotANumber(_) => DecimalError::NotANumber(text.to_string()),
        DecimalError::Negative(_) => DecimalError::Negative(text.to_string()),
        DecimalError::TooLong(_) => DecimalError::TooLong(text.to_string()),
    })?;
    let multiplier: u128 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        "k" | "m" | "g" | "t" | "ki" | "mi" | "gi" | "ti" => {
            return Err(SizeError::Ambiguous(
                text.to_string(),
                unit.to_string(),
                value.to_string(),
            ));
        }
        _ => return Err(SizeError::UnknownUnit(text.to_string(), unit.to_string())),
    };
    if multiplier == 1 && value.as_integer().is_none() {
        return Err(SizeError::FractionalBytes(text.to_string()));
    }
    let bytes = value
        .mul_div_ceil(multiplier, 1)
        .ok_or(SizeError::TooLarge(text.to_string(), Overflow))?;
    Bytes::from_u128(bytes).map_err(|o| SizeError::TooLarge(text.to_string(), o))
}

/// A count that must be a whole number greater than zero.
pub fn parse_count(text: &str) -> Result<u64, String> {
    let t = text.trim().replace('_', "");
    if t.starts_with('-') {
        return Err(format!(
            "`{text}` is negative; give a whole number greater than 0"
        ));
    }
    if t.is_empty() || !t.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "`{text}` is not a whole number; write the digits out (7000000000, not 7e9 or 7B)"
        ));
    }
    match t.parse::<u64>() {
        Ok(0) => Err("0 is not allowed; give a whole number greater than 0".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "`{text}` is larger than {}; no real workload has that many",
            group_thousands(u64::MAX as u128)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_thousands() {
        assert_eq!(group_thousands(0), "0");
        assert_eq!(group_thousands(999), "999");
        assert_eq!(group_thousands(1000), "1,000");
        assert_eq!(group_thousands(14_000_000_000), "14,000,000,000");
    }

    #[test]
    fn shows_gb_and_gib() {
        assert_eq!(Bytes(14_000_000_000).both(), "14.00 GB = 13.04 GiB");
        assert_eq!(Bytes(18_294_967_296).both(), "18.29 GB = 17.04 GiB");
    }

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_size("14000000000").unwrap(), Bytes(14_000_000_000));
        assert_eq!(parse_size("14GB").unwrap(), Bytes(14_000_000_000));
        assert_eq!(parse_size("4GiB").unwrap(), Bytes(4 * GIB));
        assert_eq!(parse_size("4.5GB").unwrap(), Bytes(4_500_000_000));
        assert_eq!(parse_size("512 MiB").unwrap(), Bytes(512 << 20));
        // 13.04 × 2^30 = 14,001,593,384.96 → rounded up.
        assert_eq!(parse_size("13.04GiB").unwrap(), Bytes(14_001_593_385));
    }

    #[test]
    fn refuses_bad_sizes() {
        let err = parse_size("4G").unwrap_err().to_string();
        assert!(err.contains("ambiguous") && err.contains("4GiB"), "{err}");
        assert!(matches!(parse_size("4XB"), Err(SizeError::UnknownUnit(..))));
        assert!(matches!(parse_size("-4GB"), Err(SizeError::Number(_))));
        assert!(matches!(
            parse_size("1.5"),
            Err(SizeError::FractionalBytes(_))
        ));
        assert!(matches!(
            parse_size("99999999999TB"),
            Err(SizeError::TooLarge(..))
        ));
        assert!(matches!(parse_size("nanGB"), Err(SizeError::Number(_))));
        // The message quotes the whole value, even when no ASCII digit starts it.
        let err = parse_size("٣GiB").unwrap_err().to_string();
        assert!(err.starts_with("`٣GiB` is not a number"), "{err}");
    }

    #[test]
    fn decimals_are_exact() {
        let d = Decimal::parse("4.5").unwrap();
        assert_eq!(d.mul_div_ceil(7, 8), Some(4)); // 31.5/8 = 3.9375 → 4
        assert_eq!(d.to_string(), "4.5");
        assert_eq!(Decimal::parse("16").unwrap().as_integer(), Some(16));
        assert_eq!(Decimal::parse("0.10").unwrap().to_string(), "0.1");
        assert!(Decimal::parse("1e9").is_err());
        assert!(Decimal::parse("NaN").is_err());
        assert!(Decimal::parse(".").is_err());
    }
}
