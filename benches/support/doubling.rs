//! The strategy of common batch-size finders, kept outside the product as the baseline that the
//! frontier benchmark and a property test compare `find_guided` with.

use iteragpu::sweep::search::{Bounds, Frontier, grid_midpoint};

/// The strategy of common batch-size finders, for comparison: double from `lo` until the first
/// failure, then binary search between the last success and it.
pub fn doubling_then_bisection(b: Bounds, mut oracle: impl FnMut(u64) -> bool) -> Frontier {
    let mut trials = Vec::new();
    let mut test = |v: u64, trials: &mut Vec<(u64, bool)>| {
        let r = oracle(v);
        trials.push((v, r));
        r
    };
    let (mut ok, mut fail) = (None, None);
    let mut v = b.lo;
    loop {
        if test(v, &mut trials) {
            ok = Some(v);
            if v >= b.hi {
                break;
            }
            v = v.saturating_mul(2).max(v + 1).min(b.hi);
        } else {
            fail = Some(v);
            break;
        }
    }
    if let (Some(mut lo), Some(mut hi)) = (ok, fail) {
        while let Some(mid) = grid_midpoint(&b, lo, hi) {
            if test(mid, &mut trials) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        ok = Some(lo);
        fail = Some(hi);
    }
    Frontier {
        last_success: ok,
        first_failure: fail,
        trials,
        budget_exhausted: false,
    }
}
