//! The terminal tables of `iteragpu cards`: the catalog, and the fit of a need on each card.

use super::Card;
use crate::output::table::{Column, Table};
use crate::units::Bytes;

/// The catalog: every capacity figure a card has, with its source.
pub fn catalog(catalog: &[Card]) -> String {
    let mut t = Table::new(vec![
        Column::left("card").min(14),
        Column::left("vendor").min(7),
        Column::left("memory").min(22),
        Column::left("label").min(32),
        Column::right("reported (driver)").min(18),
        Column::right("torch total_memory").min(18),
        Column::right("CUDA total (public)").min(19),
        Column::left("source").gap(2),
    ]);
    let b = |v: Option<u64>| v.map_or("unknown".into(), |x| Bytes(x).grouped());
    for c in catalog {
        t.row([
            c.name.clone(),
            c.vendor.to_string(),
            c.memory_type.to_string(),
            c.label.clone(),
            b(c.reported_bytes),
            b(c.torch_total_bytes),
            c.cuda_total
                .as_ref()
                .and_then(|t| t.lowest())
                .map_or("unknown".into(), |r| r.printed.clone()),
            c.source.to_string(),
        ]);
    }
    t.terminal()
}
