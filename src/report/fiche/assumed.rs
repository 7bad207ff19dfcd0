//! What is still assumed, and the configuration chosen.

use super::facts::Facts;
use super::words::labelled;
use crate::estimate::Kind;
use crate::report::catalog::assumed::{self, AssumedText};
use crate::report::catalog::common::CommonText;
use crate::report::catalog::names;
use crate::report::document::Block;
use crate::report::format::Style;
use crate::schema::measure::RunStatus;

pub(super) fn assumed(b: &mut Vec<Block>, f: &Facts, lang: Style) {
    b.push(Block::Heading(lang.say(CommonText::AssumedHeading).into()));
    let mut items: Vec<String> = Vec::new();
    if let Some(e) = f.estimate {
        for t in e.terms.iter().filter(|t| t.kind == Kind::Assumed) {
            let size = format!("{} — `{}`", lang.size(Some(t.bytes)), t.formula);
            items.push(labelled(&names::term(t, lang), lang, size));
        }
        if !e.left_out.is_empty() {
            let left_out = assumed::left_out(&e.left_out, lang);
            items.push(labelled(
                lang.say(AssumedText::LeftOutEstimate),
                lang,
                left_out,
            ));
        }
    }
    if !f.not_measured.is_empty() {
        let phases = format!("`{}`", f.not_measured.join(", "));
        items.push(labelled(
            lang.say(AssumedText::NotMeasuredRun),
            lang,
            phases,
        ));
    }
    items.push(match &f.variations_covered {
        Some(v) => labelled(
            lang.say(AssumedText::VariationsCoveredSeries),
            lang,
            format!("`{v}`"),
        ),
        None => lang.say(AssumedText::VariationWasTestedMargin).into(),
    });
    b.push(Block::List(items));
}

pub(super) fn chosen(b: &mut Vec<Block>, f: &Facts, lang: Style) {
    let r = f.result;
    b.push(Block::Heading(
        lang.say(CommonText::ConfigurationChosen).into(),
    ));
    let frontier = f.validated.as_ref().and_then(|v| v.frontier);
    let text = match (frontier, r.status) {
        (Some(frontier), _) => assumed::below_the_frontier(frontier, lang),
        (None, RunStatus::Ok) if r.phases.is_empty() => {
            lang.say(AssumedText::PhaseWasRecordedResult).into()
        }
        (None, RunStatus::Ok) => lang
            .say(AssumedText::MeasuredConfigurationRanCompletion)
            .into(),
        (None, _) => lang.say(AssumedText::MeasuredConfigurationDidNot).into(),
    };
    b.push(Block::Para(text));
}
