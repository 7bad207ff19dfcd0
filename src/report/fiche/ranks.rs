//! Under torchrun: every rank on its own device, side by side, never added together.

use super::words::{in_unit, status_word};
use crate::report::catalog::common::CommonText;
use crate::report::catalog::ranks::{self, RanksText};
use crate::report::document::{Block, Cell};
use crate::report::format::Style;
use crate::schema::measure::MeasureResult;

/// Under torchrun: every rank on its own device, side by side, never added together.
pub(super) fn ranks(b: &mut Vec<Block>, r: &MeasureResult, lang: Style) {
    let Some(d) = &r.distributed else { return };
    b.push(Block::Heading(lang.say(RanksText::RanksTorchrun).into()));
    b.push(Block::Para(ranks::world(
        d.world_size,
        d.torchrun.nnodes,
        d.torchrun.nproc_per_node,
        lang,
    )));
    let rows = d
        .ranks
        .iter()
        .map(|k| {
            vec![
                lang.integer(u128::from(k.rank)).into(),
                Cell::Code(format!("{} / {}", k.node_rank, k.host)),
                Cell::Code(k.device.clone()),
                status_word(k.status, lang).into(),
                Cell::size(k.peak_allocated()),
                Cell::size(k.peak_reserved()),
                Cell::size(k.outside_allocator()),
                k.stopped_because
                    .as_deref()
                    .map_or(String::new(), |why| ranks::stopped_because(why, lang))
                    .into(),
            ]
        })
        .collect();
    b.push(Block::Table {
        header: vec![
            lang.say(RanksText::Rank).into(),
            lang.say(RanksText::NodeHost).into(),
            lang.say(RanksText::Device).into(),
            lang.say(CommonText::Status).into(),
            in_unit(lang.say(CommonText::PeakAllocated), lang),
            in_unit(lang.say(CommonText::PeakReserved), lang),
            in_unit(lang.say(RanksText::OutsidePytorchAllocator), lang),
            lang.say(RanksText::Note).into(),
        ],
        rows,
    });
    if let Some(i) = &d.imbalance {
        b.push(Block::Para(ranks::imbalance(i, lang)));
    }
    let merged: Vec<String> = r
        .notes
        .iter()
        .filter(|n| n.starts_with("merged from") || n.starts_with("WARNING: merged although"))
        .map(|n| ranks::merged_note(n, lang))
        .collect();
    if !merged.is_empty() {
        b.push(Block::List(merged));
    }
}
