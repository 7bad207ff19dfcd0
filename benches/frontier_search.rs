//! Benchmark: trials needed to locate the success / out-of-memory frontier to the resolution, for
//! deterministic peak curves and capacities (the fake allocator's situation: peak known exactly
//! as a function of the varied value), against the doubling-then-bisection strategy of common
//! batch-size finders. Run with `cargo bench --bench frontier_search`.

mod support {
    pub mod doubling;
}

use iteragpu::sweep::search::{Bounds, Probe, find_guided, find_rounds, round_bound};
use support::doubling::doubling_then_bisection;

struct Case {
    name: &'static str,
    /// Peak bytes at value v.
    peak: fn(u64) -> u64,
    capacity: u64,
    bounds: Bounds,
}

fn threshold(c: &Case) -> u64 {
    let (mut lo, mut hi) = (c.bounds.lo, c.bounds.hi);
    if (c.peak)(lo) > c.capacity {
        return 0;
    }
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if (c.peak)(mid) <= c.capacity {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

fn main() {
    let cases = [
        Case {
            name: "context, linear (dense, 8 GiB)",
            peak: |v| 140 * (1 << 20) + v * 40 * 1024,
            capacity: 8 * (1 << 30),
            bounds: Bounds {
                lo: 1024,
                hi: 262_144,
                resolution: 256,
                max_trials: 64,
            },
        },
        Case {
            name: "context, quadratic (eager attention, 24 GiB)",
            peak: |v| (2 << 30) + v * 64 * 1024 + v * v * 64,
            capacity: 24 * (1 << 30),
            bounds: Bounds {
                lo: 1024,
                hi: 65_536,
                resolution: 256,
                max_trials: 64,
            },
        },
        Case {
            name: "batch, linear (80 GiB)",
            peak: |v| (16u64 << 30) + v * 300 * (1 << 20),
            capacity: 80 * (1 << 30),
            bounds: Bounds {
                lo: 1,
                hi: 4096,
                resolution: 1,
                max_trials: 64,
            },
        },
        Case {
            name: "batch, coarse resolution 8 (141 GiB)",
            peak: |v| (30u64 << 30) + v * 700 * (1 << 20),
            capacity: 141 * (1 << 30),
            bounds: Bounds {
                lo: 8,
                hi: 4096,
                resolution: 8,
                max_trials: 64,
            },
        },
    ];
    println!(
        "{:<46} {:>9} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "case", "frontier", "doubling", "no hint", "exact", "±2%", "+10%", "−10%"
    );
    for c in &cases {
        let t = threshold(c);
        let count = |hint: Option<u64>| {
            let f = find_guided(c.bounds, hint, Some(c.capacity), |v| {
                let p = (c.peak)(v);
                Some(Probe {
                    ok: p <= c.capacity,
                    peak: Some(p),
                })
            });
            assert!(f.last_success.is_none_or(|s| s <= t) && f.first_failure.is_none_or(|x| x > t));
            f.trials.len()
        };
        let classic = doubling_then_bisection(c.bounds, |v| (c.peak)(v) <= c.capacity)
            .trials
            .len();
        let scaled = |pct: i64| Some(((t as i64) * (100 + pct) / 100).max(1) as u64);
        println!(
            "{:<46} {:>9} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8}",
            c.name,
            t,
            classic,
            count(None),
            count(Some(t)),
            count(scaled(2)).max(count(scaled(-2))),
            count(scaled(10)),
            count(scaled(-10)),
        );
    }
    println!(
        "trials to reach the resolution. doubling: double from the start, then bisect (common batch-size finders)."
    );
    println!(
        "iteragpu: the guided search (measured peaks + capacity); hints are the estimator's predicted frontier (exact, ±2%, 10% high, 10% low)."
    );
    // With k GPUs (`sweep --gpus`), k trials a round: the rounds (wall time) and trials it takes.
    println!(
        "\n{:<46} {:>13} {:>13} {:>13} {:>13}",
        "rounds (trials) with k at once, no hint", "k=1", "k=2", "k=4", "k=8"
    );
    for c in &cases {
        let t = threshold(c);
        let rounds = |k: usize| {
            let (f, rounds) = find_rounds(c.bounds, None, Some(c.capacity), k, |values| {
                values
                    .iter()
                    .map(|&v| {
                        let p = (c.peak)(v);
                        Some(Probe {
                            ok: p <= c.capacity,
                            peak: Some(p),
                        })
                    })
                    .collect()
            });
            assert!(f.last_success.is_none_or(|s| s <= t) && f.first_failure.is_none_or(|x| x > t));
            assert!(rounds <= round_bound(&c.bounds, k));
            format!("{rounds} ({})", f.trials.len())
        };
        println!(
            "{:<46} {:>13} {:>13} {:>13} {:>13}",
            c.name,
            rounds(1),
            rounds(2),
            rounds(4),
            rounds(8)
        );
    }
    println!(
        "a round's trials run at once, one per GPU: rounds are the search's wall time in trials."
    );
}
