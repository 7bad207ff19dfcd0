//! The terminal tables of `iteragpu cards`: the catalog, and the fit of a need on each card.

use std::fmt::Write as _;

use super::Card;
use super::need::CardFit;
use crate::units::{Bytes, GIB};

/// The catalog: every capacity figure a card has, with its source.
pub fn catalog(catalog: &[Card]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<14} {:<7} {:<22} {:<32} {:>18} {:>18}  source",
        "card", "vendor", "memory", "label", "reported (driver)", "torch total_memory"
    );
    for c in catalog {
        let b = |v: Option<u64>| v.map_or("unknown".into(), |x| Bytes(x).grouped());
        let _ = writeln!(
            o,
            "{:<14} {:<7} {:<22} {:<32} {:>18} {:>18}  {}",
            c.name,
            c.vendor,
            c.memory_type,
            c.label,
            b(c.reported_bytes),
            b(c.torch_total_bytes),
            c.source
        );
    }
    o
}

/// The need, the overhead and one verdict per card.
pub fn fits(
    need: Bytes,
    source: &str,
    overhead: u64,
    overhead_source: &str,
    fits: &[CardFit],
) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "need per device: {} bytes ({}), from {source}",
        need.grouped(),
        need.both()
    );
    let _ = writeln!(
        o,
        "minus non-PyTorch memory per process: {} bytes ({overhead_source})\n",
        Bytes(overhead).grouped()
    );
    for f in fits {
        let m = f.margin_bytes;
        let margin = format!(
            "{}{:.2} GB = {}{:.2} GiB",
            if m < 0 { "−" } else { "+" },
            m.unsigned_abs() as f64 / 1e9,
            if m < 0 { "−" } else { "+" },
            m.unsigned_abs() as f64 / GIB as f64
        );
        let verdict = match (f.fits, f.devices_if_split) {
            (true, _) => format!("fits on one device, margin {margin}"),
            (false, Some(n)) => format!(
                "does not fit on one device ({margin}): the work must be split over at least {n} devices (tensor or pipeline parallelism, offloading) — how is for you to measure"
            ),
            (false, None) => {
                "does not fit: the memory outside PyTorch's allocator alone fills this card"
                    .to_string()
            }
        };
        let _ = writeln!(
            o,
            "  {:<14} usable {:>8.2} GiB ({})  {verdict}",
            f.card,
            Bytes(f.usable_bytes).gib(),
            f.capacity_source.label()
        );
    }
    let _ = writeln!(
        o,
        "\nSeveral GPUs are never one pool of memory: each device must hold its own share, and a failure on one is not fixed by free memory on another."
    );
    o
}
