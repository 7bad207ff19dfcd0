//! The terminal tables of `iteragpu cards`: the catalog, and the fit of a need on each card.

use std::fmt::Write as _;

use super::Card;
use crate::units::Bytes;

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
