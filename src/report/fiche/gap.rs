//! Why the peak exceeds the estimate: the gap ledger as a table and a waterfall, the allocator's
//! diagnostics, and the out-of-memory post-mortem.

use super::facts::Facts;
use super::words::in_unit;
use crate::ledger::{self, Ledger, LineId, LineKind, Provenance};
use crate::report::catalog::common::CommonText;
use crate::report::catalog::gap::GapText;
use crate::report::catalog::{self, names};
use crate::report::document::{Block, Cell, Chart};
use crate::report::format::Style;

/// Why the peak exceeds the estimate: the gap ledger as a table and a waterfall.
pub(super) fn gap(b: &mut Vec<Block>, f: &Facts, lang: Style) {
    let Some(l) = &f.ledger else {
        return;
    };
    if l.lines.is_empty() {
        post_mortem(b, l, lang);
        return;
    }
    b.push(Block::Heading(
        lang.say(CommonText::WhyPeakExceedsEstimate).into(),
    ));
    b.push(Block::Para(catalog::ledger::phase_explained(l, lang)));
    let cell =
        |f: &Option<ledger::Figure>| f.as_ref().map_or("—".into(), |f| Cell::size(Some(f.bytes)));
    b.push(Block::Table {
        header: vec![
            lang.say(GapText::Term).into(),
            in_unit(lang.say(GapText::Estimate), lang),
            in_unit(lang.say(GapText::Predicted), lang),
            in_unit(lang.say(CommonText::Observed), lang),
            lang.say(GapText::Checkpoint).into(),
        ],
        rows: l
            .lines
            .iter()
            .map(|x| {
                let assumed = x
                    .estimate
                    .as_ref()
                    .is_some_and(|f| f.provenance == Provenance::Assumed);
                vec![
                    format!(
                        "{}{}",
                        names::line(x.id, lang),
                        if assumed {
                            lang.say(GapText::AssumedSuffix)
                        } else {
                            ""
                        }
                    )
                    .into(),
                    cell(&x.estimate),
                    cell(&x.predicted),
                    cell(&x.observed),
                    names::checkpoint(&x.checkpoint, lang).into(),
                ]
            })
            .collect(),
    });
    // The waterfall follows the observed chain: weights, what the phase held, its growth, the
    // peak allocated, the peak reserved, what lies outside the allocator, the driver's view.
    let observed = |id: LineId| {
        l.lines
            .iter()
            .find(|x| x.id == id)
            .and_then(|x| x.observed.as_ref())
            .map(|f| f.bytes)
    };
    let mut steps = Vec::new();
    for (id, label) in [
        (LineId::Weights, lang.say(GapText::Weights)),
        (LineId::HeldAtStart, lang.say(GapText::HeldStart)),
        (LineId::Growth, lang.say(GapText::GrowthPeak)),
        (LineId::PeakAllocated, lang.say(CommonText::PeakAllocated)),
        (LineId::PeakReserved, lang.say(CommonText::PeakReserved)),
        (
            LineId::OutsideAllocator,
            lang.say(GapText::OutsideAllocator),
        ),
        (LineId::DriverView, lang.say(CommonText::DriverView)),
    ] {
        if let Some(bytes) = observed(id) {
            steps.push((label.to_string(), bytes, id.kind() == LineKind::Level));
        }
    }
    let mut lines = Vec::new();
    if let Some(est) = l
        .lines
        .iter()
        .find(|x| x.id == LineId::DriverView)
        .and_then(|x| x.estimate.as_ref())
    {
        lines.push((lang.say(GapText::Estimate).to_string(), est.bytes));
    }
    for c in &l.capacities {
        lines.push((catalog::ledger::capacity(&c.name, lang), c.bytes));
    }
    if steps.len() >= 2 {
        b.push(Block::Chart(Chart::Waterfall {
            title: lang.say(GapText::WaterfallTitle).into(),
            steps,
            lines,
        }));
    }
    let diagnostics = ledger::diagnostics(f.result);
    if !diagnostics.is_empty() {
        b.push(Block::List(
            diagnostics
                .iter()
                .map(|d| catalog::ledger::diagnostic(d, lang))
                .collect(),
        ));
    }
    post_mortem(b, l, lang);
}

/// The out-of-memory post-mortem, when the run ended in one.
fn post_mortem(b: &mut Vec<Block>, l: &Ledger, lang: Style) {
    let lines = catalog::ledger::post_mortem(l, lang);
    if lines.is_empty() {
        return;
    }
    b.push(Block::Heading(lang.say(GapText::PostMortemHeading).into()));
    b.push(Block::List(lines));
}
