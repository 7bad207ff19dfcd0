//! Finding the boundary between success and out-of-memory: a pure function of a pass/fail oracle,
//! so it is property-tested without any GPU.
//!
//! Values live on the grid `lo, lo + resolution, …` (plus `lo·2^k` while growing). With a hint
//! (the estimator's predicted frontier) the search checks both sides of it and gallops outward
//! only if the hint was wrong; without one it grows geometrically from `lo` until the first
//! failure, then bisects. It stops when `first_failure − last_success ≤ resolution`.

use serde::{Deserialize, Serialize};

/// The outcome of a search.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frontier {
    /// Largest value seen to succeed (`None`: even `lo` failed).
    pub last_success: Option<u64>,
    /// Smallest value seen to fail (`None`: even `hi` succeeded).
    pub first_failure: Option<u64>,
    /// Every value tried, in order, with its result.
    pub trials: Vec<(u64, bool)>,
    /// `true` when the budget ran out before the resolution was reached.
    pub budget_exhausted: bool,
}

/// Search bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub lo: u64,
    pub hi: u64,
    pub resolution: u64,
    pub max_trials: usize,
}

fn snap(b: &Bounds, v: u64) -> u64 {
    let v = v.clamp(b.lo, b.hi);
    (b.lo + (v - b.lo) / b.resolution * b.resolution).min(b.hi)
}

/// The grid value halfway between a success `ok` and a failure `fail` (snapped down to the grid
/// `lo + k·resolution`, at least one step above `ok`), or `None` once they are one step apart:
/// the one bisection step every search here uses.
pub fn grid_midpoint(b: &Bounds, ok: u64, fail: u64) -> Option<u64> {
    let resolution = b.resolution.max(1);
    if fail <= ok || fail - ok <= resolution {
        return None;
    }
    let mid = ok + (fail - ok) / 2;
    let m = b.lo + (mid.max(b.lo) - b.lo) / resolution * resolution;
    let m = if m <= ok { ok + resolution } else { m };
    (m < fail).then_some(m)
}

/// What one trial tells the guided search: success, and the measured peak when it succeeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub ok: bool,
    /// Peak reserved bytes of a successful trial.
    pub peak: Option<u64>,
}

/// The search used by `iteragpu sweep`. With a hint (the predicted frontier) it checks both sides
/// of it first; without, it grows from `lo`. Each success also reports its peak, so once two
/// successes are known (and the capacity is), the next value is where the measured
/// peak curve (a secant through the two largest successes) reaches the capacity; that value and
/// its neighbour one resolution step away are tried, which closes the frontier when the curve is
/// close to straight. Predictions alternate with plain bisection, so a misleading curve costs
/// at most a factor of two over bisection. An oracle that answers `None` (its trial neither
/// succeeded nor ran out of memory, or the sweep was stopped) ends the search where it stands.
pub fn find_guided(
    b: Bounds,
    hint: Option<u64>,
    capacity: Option<u64>,
    mut oracle: impl FnMut(u64) -> Option<Probe>,
) -> Frontier {
    let b = Bounds {
        resolution: b.resolution.max(1),
        hi: b.hi.max(b.lo),
        ..b
    };
    let mut points: Vec<(u64, u64)> = Vec::new();
    let mut trials: Vec<(u64, bool)> = Vec::new();
    let (mut ok, mut fail): (Option<u64>, Option<u64>) = (None, None);
    let mut test = |v: u64,
                    trials: &mut Vec<(u64, bool)>,
                    ok: &mut Option<u64>,
                    fail: &mut Option<u64>,
                    points: &mut Vec<(u64, u64)>|
     -> Result<bool, bool> {
        if let Some(&(_, r)) = trials.iter().find(|(x, _)| *x == v) {
            return Ok(r);
        }
        if trials.len() >= b.max_trials.max(1) {
            return Err(true);
        }
        let probe = oracle(v).ok_or(false)?;
        trials.push((v, probe.ok));
        if probe.ok {
            *ok = Some(ok.map_or(v, |o| o.max(v)));
            if let Some(p) = probe.peak {
                points.push((v, p));
            }
        } else {
            *fail = Some(fail.map_or(v, |f| f.min(v)));
        }
        Ok(probe.ok)
    };
    // A value's result, or the search as it stands (`Err(true)`: the budget ran out).
    macro_rules! t {
        ($v:expr) => {
            match test($v, &mut trials, &mut ok, &mut fail, &mut points) {
                Ok(r) => r,
                Err(budget_exhausted) => {
                    return Frontier {
                        last_success: ok,
                        first_failure: fail,
                        trials,
                        budget_exhausted,
                    };
                }
            }
        };
    }
    let closed = |ok: Option<u64>, fail: Option<u64>| match (ok, fail) {
        (Some(o), Some(f)) => f <= o || f - o <= b.resolution,
        (None, Some(f)) => f <= b.lo,
        (Some(o), None) => o >= b.hi,
        (None, None) => false,
    };
    let start = hint.map_or(b.lo, |h| snap(&b, h));
    t!(start);
    if hint.is_some() {
        // Both sides of the hint: an accurate estimate costs two trials.
        let other = if ok.is_some() {
            start.saturating_add(b.resolution).min(b.hi)
        } else {
            start.saturating_sub(b.resolution).max(b.lo)
        };
        if other != start {
            t!(other);
        }
    }
    let mut predict_next = true;
    while !closed(ok, fail) {
        let predicted = if predict_next {
            secant(&points, capacity, &b)
        } else {
            None
        };
        let inside = |v: u64, ok: Option<u64>, fail: Option<u64>| {
            ok.is_none_or(|o| v > o) && fail.is_none_or(|f| v < f)
        };
        match predicted.filter(|v| inside(*v, ok, fail)) {
            Some(v) => {
                let r = t!(v);
                // Verify the other side of the predicted frontier.
                let other = if r {
                    v.saturating_add(b.resolution).min(b.hi)
                } else {
                    v.saturating_sub(b.resolution).max(b.lo)
                };
                if other != v && inside(other, ok, fail) {
                    t!(other);
                }
                predict_next = false;
            }
            None => {
                predict_next = true;
                let next = match (ok, fail) {
                    // One measured success and a known capacity: a second point just below it
                    // (certain to succeed) gives the curve's slope for the next prediction.
                    (Some(o), _) if points.len() == 1 && capacity.is_some() && o > b.lo => {
                        let below = o.saturating_sub((o / 20).max(b.resolution)).max(b.lo);
                        b.lo + (below - b.lo) / b.resolution * b.resolution
                    }
                    (Some(o), Some(f)) => grid_midpoint(&b, o, f).unwrap_or(o + b.resolution),
                    (Some(o), None) => o.saturating_mul(2).max(o + b.resolution).min(b.hi),
                    (None, Some(f)) => {
                        // Everything tried failed: step down by a tenth of the hint (an
                        // estimate is rarely further off), doubling the step each time, or
                        // halve towards lo without a hint.
                        let down = match hint {
                            Some(h) => {
                                let tries = trials.len().saturating_sub(2) as u32;
                                f.saturating_sub(
                                    (h / 10)
                                        .max(2 * b.resolution)
                                        .saturating_mul(1u64 << tries.min(40)),
                                )
                            }
                            None => b.lo + (f - b.lo) / 2,
                        };
                        let m = b.lo + (down.max(b.lo) - b.lo) / b.resolution * b.resolution;
                        if m >= f { b.lo } else { m }
                    }
                    (None, None) => b.lo,
                };
                t!(next);
            }
        }
    }
    Frontier {
        last_success: ok,
        first_failure: fail,
        trials,
        budget_exhausted: false,
    }
}

/// The guided search in rounds of up to `k` values tried at once (`sweep --gpus` with k GPUs,
/// a predicted sweep on k cores): `oracle` gets a round's values, ascending, and answers each
/// (`None`: that trial neither succeeded nor ran out of memory, or the sweep stopped; the search
/// then ends where it stands, with the rest of the round taken into account). Returns the
/// frontier and the rounds it took. `k = 1` is [`find_guided`], one value per round.
///
/// With `k ≥ 2` the values are the grid's (`lo + j·resolution`, and `hi`): a round is either
/// *pure*, `k` values splitting the values still unknown into `k + 1` equal parts, or *guided*,
/// the hint (first round; without one but with a capacity, `lo` and the step above it, whose
/// peaks give the curve its slope) or the measured-peak curve's value with its neighbours one
/// step away, the round's other values splitting the rest. A guided round that narrowed the
/// unknown less than a pure one would is followed by a pure one, so the search takes at most
/// [`round_bound`] rounds, however wrong the guidance.
pub fn find_rounds(
    b: Bounds,
    hint: Option<u64>,
    capacity: Option<u64>,
    k: usize,
    mut oracle: impl FnMut(&[u64]) -> Vec<Option<Probe>>,
) -> (Frontier, usize) {
    if k <= 1 {
        let f = find_guided(b, hint, capacity, |v| oracle(&[v]).pop().flatten());
        let rounds = f.trials.len();
        return (f, rounds);
    }
    let b = Bounds {
        resolution: b.resolution.max(1),
        hi: b.hi.max(b.lo),
        ..b
    };
    let grid = Grid::of(&b);
    let mut trials: Vec<(u64, bool)> = Vec::new();
    let mut points: Vec<(u64, u64)> = Vec::new();
    // The indices of the largest success and the smallest failure (`-1` and `n`: none yet).
    let (mut a, mut z): (i64, i64) = (-1, grid.n as i64);
    let mut rounds = 0;
    let mut guided_next = true;
    let end = |trials: Vec<(u64, bool)>, a: i64, z: i64, budget_exhausted: bool| Frontier {
        last_success: (a >= 0).then(|| grid.value(a as u64)),
        first_failure: (z < grid.n as i64).then(|| grid.value(z as u64)),
        trials,
        budget_exhausted,
    };
    while z - a > 1 {
        let room = k.min(b.max_trials.max(1).saturating_sub(trials.len()));
        if room == 0 {
            return (end(trials, a, z, true), rounds);
        }
        // The guidance, as grid indices inside the unknown (a, z).
        let inside = |i: i64| i > a && i < z;
        let centre = match (rounds, guided_next) {
            (0, _) => hint.map(|h| grid.index(snap(&b, h))),
            (_, true) => secant(&points, capacity, &b).map(|v| grid.index(v)),
            _ => None,
        };
        let mut chosen: Vec<i64> = Vec::with_capacity(room);
        let slope = rounds == 0 && hint.is_none() && capacity.is_some();
        if slope {
            // The first two values: their peaks give the curve its slope.
            chosen.extend([0, 1].into_iter().filter(|&i| inside(i)).take(room));
        }
        if let Some(c) = centre {
            // The guess and the step after it (success there and failure one step above close
            // the frontier), then the step below.
            for i in [c, c + 1, c - 1] {
                if chosen.len() < room && inside(i) && !chosen.contains(&i) {
                    chosen.push(i);
                }
            }
        }
        let guided = !chosen.is_empty();
        let unknown = z - a - 1;
        // The rest split the unknown into equal parts.
        let m = (room - chosen.len()) as i64;
        for j in 1..=m {
            let i = a + (j * (z - a)) / (m + 1);
            if chosen.len() < room && inside(i) && !chosen.contains(&i) {
                chosen.push(i);
            }
        }
        chosen.sort_unstable();
        let values: Vec<u64> = chosen.iter().map(|&i| grid.value(i as u64)).collect();
        let answers = oracle(&values);
        rounds += 1;
        let mut stopped = answers.len() < values.len();
        for (&i, (&v, answer)) in chosen.iter().zip(values.iter().zip(answers)) {
            let Some(probe) = answer else {
                stopped = true;
                continue;
            };
            trials.push((v, probe.ok));
            if probe.ok {
                a = a.max(i);
                if let Some(p) = probe.peak {
                    points.push((v, p));
                }
            } else {
                z = z.min(i);
            }
        }
        if stopped {
            return (end(trials, a, z, false), rounds);
        }
        // Guidance again only after a pure round, a guided one that narrowed as much, or the
        // first two values (they only give the curve its slope).
        guided_next = slope || !guided || (z - a - 1) * (k as i64 + 1) <= unknown;
    }
    (end(trials, a, z, false), rounds)
}

/// The most rounds [`find_rounds`] takes over `b` with `k` values a round, before its trial
/// budget: pure rounds shrink the unknown values `n` to at most `n/(k+1)` each, and guided ones
/// that shrink them less alternate with them (the first two rounds may both be guided). With `k = 1`, the guided search's bound.
pub fn round_bound(b: &Bounds, k: usize) -> usize {
    let steps = |base: u128| {
        let n = Grid::of(b).n as u128 + 1;
        let (mut r, mut reach) = (0usize, 1u128);
        while reach < n {
            reach = reach.saturating_mul(base);
            r += 1;
        }
        r
    };
    match k {
        // The guided search costs at most twice a bisection's steps.
        0 | 1 => {
            2 * ((b.hi.saturating_sub(b.lo) / b.resolution.max(1))
                .max(1)
                .ilog2() as usize
                + 1)
                + 2
        }
        k => 2 * steps(k as u128 + 1) + 2,
    }
}

/// The values a search with more than one value a round tries: `lo + j·resolution` below `hi`,
/// then `hi`.
struct Grid {
    lo: u64,
    hi: u64,
    resolution: u64,
    /// How many values.
    n: u64,
}

impl Grid {
    fn of(b: &Bounds) -> Grid {
        let resolution = b.resolution.max(1);
        let hi = b.hi.max(b.lo);
        Grid {
            lo: b.lo,
            hi,
            resolution,
            n: (hi - b.lo).div_ceil(resolution) + 1,
        }
    }

    fn value(&self, i: u64) -> u64 {
        self.lo
            .saturating_add(i.saturating_mul(self.resolution))
            .min(self.hi)
    }

    /// The index of a grid value (a value between two: the one below).
    fn index(&self, v: u64) -> i64 {
        if v >= self.hi {
            return self.n as i64 - 1;
        }
        (v.saturating_sub(self.lo) / self.resolution) as i64
    }
}

/// Where the measured peak curve reaches `capacity`, snapped down to the grid: a parabola through
/// the three largest successful (value, peak) points when it rises there, else the secant through
/// the two largest.
fn secant(points: &[(u64, u64)], capacity: Option<u64>, b: &Bounds) -> Option<u64> {
    let cap = capacity? as f64;
    let mut pts: Vec<(f64, f64)> = {
        let mut p = points.to_vec();
        p.sort_unstable();
        p.dedup_by_key(|q| q.0);
        p.into_iter().map(|(v, y)| (v as f64, y as f64)).collect()
    };
    if pts.len() > 3 {
        pts.drain(..pts.len() - 3);
    }
    let (v2, p2) = *pts.last()?;
    let (v1, p1) = *pts.get(pts.len().checked_sub(2)?)?;
    let line = |x: f64| p2 + (x - v2) * (p2 - p1) / (v2 - v1);
    let curve: Box<dyn Fn(f64) -> f64> = match pts.as_slice() {
        [(a, pa), (bb, pb), (c, pc)] => {
            let (a, pa, bb, pb, c, pc) = (*a, *pa, *bb, *pb, *c, *pc);
            let q = move |x: f64| {
                pa * (x - bb) * (x - c) / ((a - bb) * (a - c))
                    + pb * (x - a) * (x - c) / ((bb - a) * (bb - c))
                    + pc * (x - a) * (x - bb) / ((c - a) * (c - bb))
            };
            // Use the parabola only where it keeps rising.
            if q(c + (c - bb)) > q(c) && q(c) >= q(bb) {
                Box::new(q)
            } else {
                Box::new(line)
            }
        }
        _ => Box::new(line),
    };
    if curve(v2 + 1.0) <= curve(v2) {
        return None;
    }
    if curve(v2) >= cap {
        return Some(snap(b, v2 as u64));
    }
    // Solve curve(x) = cap on [v2, hi] by bisection (the curve rises there).
    let (mut lo, mut hi) = (v2, b.hi as f64);
    if curve(hi) < cap {
        return Some(b.hi);
    }
    for _ in 0..100 {
        let mid = (lo + hi) / 2.0;
        if curve(mid) <= cap {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    if !lo.is_finite() {
        return None;
    }
    Some(snap(b, lo as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds() -> Bounds {
        Bounds {
            lo: 1024,
            hi: 65536,
            resolution: 256,
            max_trials: 64,
        }
    }

    /// A pass/fail oracle that reports no peak.
    fn pass_fail(ok: impl Fn(u64) -> bool) -> impl FnMut(u64) -> Option<Probe> {
        move |v| {
            Some(Probe {
                ok: ok(v),
                peak: None,
            })
        }
    }

    #[test]
    fn accurate_hint_takes_two_trials() {
        let f = find_guided(bounds(), Some(20_000), None, pass_fail(|v| v <= 20_200));
        assert_eq!(f.trials.len(), 2, "{:?}", f.trials);
        assert_eq!(f.last_success, Some(19_968));
        assert_eq!(f.first_failure, Some(20_224));
    }

    #[test]
    fn measured_peaks_close_a_linear_frontier_fast() {
        // peak = 100 MB + 40 KiB per value; capacity 2 GiB (frontier 49,987).
        let peak = |v: u64| 100_000_000 + v * 40 * 1024;
        let cap = 2u64 << 30;
        let f = find_guided(bounds(), None, Some(cap), |v| {
            Some(Probe {
                ok: peak(v) <= cap,
                peak: Some(peak(v)),
            })
        });
        assert!(f.trials.len() <= 5, "{:?}", f.trials);
        let t = (cap - 100_000_000) / (40 * 1024);
        assert!(f.last_success.unwrap() <= t && f.first_failure.unwrap() > t);
    }

    #[test]
    fn failure_at_the_first_value() {
        let f = find_guided(bounds(), None, None, pass_fail(|_| false));
        assert_eq!(f.last_success, None);
        assert_eq!(f.first_failure, Some(1024));
        assert_eq!(f.trials.len(), 1);
    }

    #[test]
    fn the_midpoint_stays_on_the_grid_and_stops_at_the_resolution() {
        let b = bounds();
        assert_eq!(grid_midpoint(&b, 1024, 65536), Some(33_280));
        assert_eq!(grid_midpoint(&b, 1024, 1280), None);
        assert_eq!(grid_midpoint(&b, 1024, 1281), Some(1280));
        assert_eq!(grid_midpoint(&b, 2048, 1024), None);
        for (ok, fail) in [(1024, 5000), (1280, 1800), (30_000, 65_536)] {
            let m = grid_midpoint(&b, ok, fail).unwrap();
            assert!(
                m > ok && m < fail && (m - b.lo).is_multiple_of(b.resolution),
                "{m}"
            );
        }
    }

    #[test]
    fn an_oracle_that_stops_ends_the_search_where_it_stands() {
        let f = find_guided(bounds(), None, None, |v| {
            (v < 4096).then_some(Probe {
                ok: true,
                peak: None,
            })
        });
        assert_eq!(f.trials, [(1024, true), (2048, true)]);
        assert_eq!((f.last_success, f.first_failure), (Some(2048), None));
        assert!(!f.budget_exhausted);
    }

    /// Runs `find_rounds` over `b` with a frontier at `t` (values ≤ t succeed, peak linear).
    fn rounds_at(
        b: Bounds,
        t: u64,
        k: usize,
        hint: Option<u64>,
        capacity: Option<u64>,
    ) -> (Frontier, usize, Vec<usize>) {
        let mut sizes = Vec::new();
        let peak = |v: u64| 1_000 + v * 10;
        let (f, rounds) = find_rounds(b, hint, capacity, k, |values| {
            sizes.push(values.len());
            assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
            values
                .iter()
                .map(|&v| {
                    Some(Probe {
                        ok: v <= t,
                        peak: Some(peak(v)),
                    })
                })
                .collect()
        });
        (f, rounds, sizes)
    }

    #[test]
    fn k_values_a_round_close_within_the_resolution_and_the_bound() {
        let b = Bounds {
            lo: 1,
            hi: 4096,
            resolution: 1,
            max_trials: 1000,
        };
        let coarse = Bounds {
            lo: 1024,
            hi: 65_000,
            resolution: 256,
            max_trials: 1000,
        };
        for b in [b, coarse] {
            for k in [2, 3, 4, 8] {
                let bound = round_bound(&b, k);
                for t in [
                    0,
                    b.lo,
                    b.lo + 1,
                    7,
                    300,
                    2047,
                    4095,
                    30_000,
                    b.hi,
                    b.hi + 5,
                ] {
                    let capacity = Some(1_000 + t * 10 + 5);
                    for (hint, capacity) in [
                        (None, None),
                        (Some(t), None),
                        (Some(b.hi / 3), capacity),
                        (None, capacity),
                    ] {
                        let (f, rounds, sizes) = rounds_at(b, t, k, hint, capacity);
                        let case = format!("k={k} t={t} hint={hint:?} cap={capacity:?}: {f:?}");
                        assert!(rounds <= bound, "{rounds} rounds > {bound}: {case}");
                        assert!(sizes.iter().all(|&n| n >= 1 && n <= k), "{case}");
                        assert_eq!(f.trials.len(), sizes.iter().sum::<usize>(), "{case}");
                        assert!(!f.budget_exhausted, "{case}");
                        match (f.last_success, f.first_failure) {
                            (Some(o), Some(x)) => {
                                assert!(o <= t && x > t && x - o <= b.resolution, "{case}")
                            }
                            (None, Some(x)) => assert!(x == b.lo && t < b.lo, "{case}"),
                            (Some(o), None) => assert!(o == b.hi && t >= b.hi, "{case}"),
                            (None, None) => panic!("nothing found: {case}"),
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn more_values_a_round_take_fewer_rounds_and_an_accurate_hint_one() {
        let b = bounds();
        let rounds = |k| rounds_at(b, 20_000, k, None, None).1;
        assert!(
            rounds(8) < rounds(4) && rounds(4) < rounds(2),
            "{:?}",
            [rounds(2), rounds(4), rounds(8)]
        );
        let (f, r, sizes) = rounds_at(b, 20_000, 4, Some(19_968), None);
        assert_eq!(
            (r, f.last_success, f.first_failure),
            (1, Some(19_968), Some(20_224))
        );
        assert_eq!(sizes, [4]);
        // k = 1 is the guided search itself.
        let one = rounds_at(b, 20_000, 1, None, None);
        let guided = find_guided(b, None, None, pass_fail(|v| v <= 20_000));
        assert_eq!((one.0, one.1), (guided.clone(), guided.trials.len()));
    }

    #[test]
    fn a_round_that_stops_ends_the_k_ary_search_and_the_budget_holds() {
        // A value above 3000 crashes (no answer): the round is kept, no other round runs.
        let mut calls = 0;
        let (f, rounds) = find_rounds(bounds(), None, None, 4, |values| {
            calls += 1;
            values
                .iter()
                .map(|&v| {
                    (v <= 3000).then_some(Probe {
                        ok: true,
                        peak: None,
                    })
                })
                .collect()
        });
        assert_eq!((calls, rounds), (1, 1));
        assert!(f.first_failure.is_none() && !f.budget_exhausted);
        assert_eq!(
            f.trials.len(),
            0,
            "every value of the first round is above 3000: {f:?}"
        );
        // A budget of 6 trials with 4 a round: two rounds, the second of 2.
        let b = Bounds {
            max_trials: 6,
            ..bounds()
        };
        let (f, rounds, sizes) = rounds_at(b, 20_000, 4, None, None);
        assert_eq!((rounds, sizes), (2, vec![4, 2]));
        assert!(f.budget_exhausted && f.trials.len() == 6);
    }

    #[test]
    fn success_at_the_last_value() {
        let f = find_guided(bounds(), None, None, pass_fail(|_| true));
        assert_eq!(f.last_success, Some(65536));
        assert_eq!(f.first_failure, None);
    }
}
