//! Peak against the varied dimension: least squares, linear or quadratic (chosen by the residual
//! per degree of freedom), and the value at which a given capacity would be reached — an
//! extrapolation, labelled so, with a range from the residual's spread.

use serde::{Deserialize, Serialize};

/// A fitted curve `peak ≈ c0 + c1·x (+ c2·x²)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    /// `linear` or `quadratic`.
    pub model: String,
    pub coefficients: Vec<f64>,
    /// Residual standard deviation, in bytes.
    pub residual_std_bytes: f64,
    pub points: usize,
    pub x_min: u64,
    pub x_max: u64,
    /// The measured x values (for the prediction interval, which widens away from them).
    #[serde(default)]
    pub xs: Vec<u64>,
}

/// How far beyond the largest measured value a fit may be extrapolated: past it, the fit says
/// nothing (allocator thresholds, attention kernels and fragmentation change the curve).
pub const EXTRAPOLATION_FACTOR: f64 = 4.0;

/// The spread assumed on any measured peak reserved even when the points fit perfectly: the
/// caching allocator reserves in 2 MiB (and 20 MiB) steps.
pub const PEAK_GRANULARITY_BYTES: f64 = 2.0 * 1024.0 * 1024.0;

/// Solves the normal equations of a polynomial least-squares fit of degree `deg`.
fn polyfit(xs: &[f64], ys: &[f64], deg: usize) -> Option<Vec<f64>> {
    let n = deg + 1;
    let mut a = vec![vec![0.0; n + 1]; n];
    for (x, y) in xs.iter().zip(ys) {
        let powers: Vec<f64> = (0..=2 * deg).map(|k| x.powi(k as i32)).collect();
        for (r, row) in a.iter_mut().enumerate() {
            for (c, cell) in row.iter_mut().enumerate().take(n) {
                *cell += powers[r + c];
            }
            row[n] += y * powers[r];
        }
    }
    // Gaussian elimination with partial pivoting.
    for col in 0..n {
        let pivot = (col..n).max_by(|i, j| a[*i][col].abs().total_cmp(&a[*j][col].abs()))?;
        if a[pivot][col].abs() < 1e-300 {
            return None;
        }
        a.swap(col, pivot);
        let pivot_row = a[col].clone();
        for (row, r) in a.iter_mut().enumerate() {
            if row != col {
                let f = r[col] / pivot_row[col];
                for (cell, p) in r.iter_mut().zip(&pivot_row).skip(col) {
                    *cell -= f * p;
                }
            }
        }
    }
    Some((0..n).map(|i| a[i][n] / a[i][i]).collect())
}

fn eval(c: &[f64], x: f64) -> f64 {
    c.iter().rev().fold(0.0, |acc, k| acc * x + k)
}

/// Fits `points` (x, peak bytes). Needs at least 2 distinct x; quadratic needs 4 points and must
/// lower the residual per degree of freedom to be chosen.
pub fn fit(points: &[(u64, u64)]) -> Option<Fit> {
    let mut distinct: Vec<u64> = points.iter().map(|p| p.0).collect();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < 2 {
        return None;
    }
    // Scale x to [0, 1] for numerical stability, then unscale the coefficients.
    let (x_min, x_max) = (distinct[0], *distinct.last()?);
    let span = (x_max - x_min) as f64;
    let xs: Vec<f64> = points.iter().map(|p| (p.0 - x_min) as f64 / span).collect();
    let ys: Vec<f64> = points.iter().map(|p| p.1 as f64).collect();
    let rss = |c: &[f64]| {
        xs.iter()
            .zip(&ys)
            .map(|(x, y)| (y - eval(c, *x)).powi(2))
            .sum::<f64>()
    };
    let lin = polyfit(&xs, &ys, 1)?;
    let n = points.len() as f64;
    let lin_score = rss(&lin) / (n - 2.0).max(1.0);
    let (model, c, score) = match (points.len() >= 4).then(|| polyfit(&xs, &ys, 2)).flatten() {
        Some(quad) if rss(&quad) / (n - 3.0).max(1.0) < lin_score * 0.5 => {
            ("quadratic", quad.clone(), rss(&quad) / (n - 3.0).max(1.0))
        }
        _ => ("linear", lin, lin_score),
    };
    // Unscale: x' = (x − m)/s.
    let m = x_min as f64;
    let coefficients = match c.as_slice() {
        [a, b] => vec![a - b * m / span, b / span],
        [a, b, q] => {
            let q2 = q / (span * span);
            vec![a - b * m / span + q2 * m * m, b / span - 2.0 * q2 * m, q2]
        }
        _ => return None,
    };
    Some(Fit {
        model: model.into(),
        coefficients,
        residual_std_bytes: score.sqrt(),
        points: points.len(),
        x_min,
        x_max,
        xs: points.iter().map(|p| p.0).collect(),
    })
}

impl Fit {
    pub fn predict(&self, x: f64) -> f64 {
        eval(&self.coefficients, x)
    }

    /// Half-width of a ~95% prediction interval of the peak at `x`: 2σ·√(1 + 1/n + (x − x̄)²/Sxx),
    /// σ at least the allocator's granularity, so it grows with the distance from the data.
    pub fn spread(&self, x: f64) -> f64 {
        let n = self.xs.len().max(1) as f64;
        let mean = self.xs.iter().map(|&v| v as f64).sum::<f64>() / n;
        let sxx: f64 = self
            .xs
            .iter()
            .map(|&v| (v as f64 - mean).powi(2))
            .sum::<f64>()
            .max(f64::MIN_POSITIVE);
        let sigma = self.residual_std_bytes.max(PEAK_GRANULARITY_BYTES);
        2.0 * sigma * (1.0 + 1.0 / n + (x - mean).powi(2) / sxx).sqrt()
    }

    /// Where the fit reaches `capacity`, and the range where it could (the prediction interval);
    /// `Err` with the reason when that lies past [`EXTRAPOLATION_FACTOR`] × the largest measured
    /// value (or the curve never gets there).
    pub fn frontier(&self, capacity: f64) -> Result<(f64, (f64, f64)), String> {
        let limit = self.x_max.max(1) as f64 * EXTRAPOLATION_FACTOR;
        let beyond = || {
            format!(
                "beyond {EXTRAPOLATION_FACTOR}× the largest value measured ({}): not extrapolated; measure closer to it",
                self.x_max
            )
        };
        let Some(x) = self.solve(capacity).filter(|x| *x <= limit) else {
            return Err(beyond());
        };
        // Low end: where the upper band reaches the capacity; high end: where the lower one does.
        let reach = |band: &dyn Fn(f64) -> f64| -> Option<f64> {
            let (mut lo, mut hi) = (0.0f64, limit);
            if band(hi) < capacity {
                return None;
            }
            if band(lo) >= capacity {
                return Some(0.0);
            }
            for _ in 0..200 {
                let mid = (lo + hi) / 2.0;
                if band(mid) < capacity {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            Some(lo)
        };
        let low = reach(&|v| self.predict(v) + self.spread(v)).unwrap_or(0.0);
        let Some(high) = reach(&|v| self.predict(v) - self.spread(v)) else {
            return Err(beyond());
        };
        Ok((x, (low.min(x), high.max(x))))
    }

    /// The x at which the fitted peak reaches `capacity` (searching upward from 0), if the curve
    /// grows to it.
    pub fn solve(&self, capacity: f64) -> Option<f64> {
        let (mut lo, mut hi) = (0.0f64, (self.x_max.max(1) as f64) * 2.0);
        let mut grow = 0;
        while self.predict(hi) < capacity {
            hi *= 2.0;
            grow += 1;
            if grow > 60 {
                return None;
            }
        }
        if self.predict(lo) >= capacity {
            return Some(0.0);
        }
        for _ in 0..200 {
            let mid = (lo + hi) / 2.0;
            if self.predict(mid) < capacity {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Some(lo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_a_line_and_a_parabola() {
        let line: Vec<(u64, u64)> = (1..=6)
            .map(|x| (x * 1000, 5_000_000 + 3_000 * x * 1000))
            .collect();
        let f = fit(&line).unwrap();
        assert_eq!(f.model, "linear");
        assert!((f.predict(10_000.0) - 35_000_000.0).abs() < 1.0);
        let frontier = f.solve(35_000_000.0).unwrap();
        assert!((frontier - 10_000.0).abs() < 0.01, "{frontier}");
        let parabola: Vec<(u64, u64)> = (1..=6)
            .map(|x| (x * 1024, 1_000_000 + 2 * (x * 1024) * (x * 1024)))
            .collect();
        let f = fit(&parabola).unwrap();
        assert_eq!(f.model, "quadratic");
        assert!((f.predict(8192.0) - (1_000_000.0 + 2.0 * 8192.0 * 8192.0)).abs() < 10.0);
        assert!(fit(&[(1, 5), (1, 6)]).is_none());
    }

    #[test]
    fn extrapolation_is_bounded_and_its_range_grows_with_distance() {
        // 100 MiB per unit, measured at 1, 2, 4.
        let mib = 1024.0 * 1024.0;
        let points: Vec<(u64, u64)> = [1u64, 2, 4]
            .iter()
            .map(|&x| (x, 1_000_000_000 + x * 100 * (1 << 20)))
            .collect();
        let f = fit(&points).unwrap();
        // Far past 4 × 4: withheld, with the reason.
        let err = f.frontier(141e9).unwrap_err();
        assert!(
            err.contains("beyond 4× the largest value measured (4)"),
            "{err}"
        );
        // Close: a value, and a range that widens with the distance from the data.
        let (near, (a, b)) = f.frontier(1e9 + 6.0 * 100.0 * mib).unwrap();
        assert!((near - 6.0).abs() < 1e-6);
        let (far, (c, d)) = f.frontier(1e9 + 14.0 * 100.0 * mib).unwrap();
        assert!((far - 14.0).abs() < 1e-6);
        assert!(a < near && near < b && c < far && far < d);
        assert!(d - c > b - a, "{}..{} vs {}..{}", c, d, a, b);
    }
}
