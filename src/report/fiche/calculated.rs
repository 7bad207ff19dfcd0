//! What was calculated: the estimate's calculated terms and its preparation hypothesis.

use super::words::{in_unit, labelled};
use crate::estimate::Kind;
use crate::report::catalog::calculated::CalculatedText;
use crate::report::catalog::names;
use crate::report::document::{Block, Cell};
use crate::report::format::Style;
use crate::schema::load::EstimateDoc;

pub(super) fn calculated(b: &mut Vec<Block>, e: Option<&EstimateDoc>, lang: Style) {
    b.push(Block::Heading(lang.say(CalculatedText::Calculated).into()));
    let Some(e) = e else {
        b.push(Block::Para(
            lang.say(CalculatedText::EstimateAttachedGiveEstimate)
                .into(),
        ));
        return;
    };
    let rows: Vec<Vec<Cell>> = e
        .terms
        .iter()
        .filter(|t| t.kind == Kind::Calculated)
        .map(|t| {
            vec![
                names::term(t, lang).into(),
                Cell::size(Some(t.bytes)),
                Cell::Code(t.formula.clone()),
                if t.in_total {
                    ""
                } else {
                    lang.say(CalculatedText::NotTotal)
                }
                .into(),
            ]
        })
        .collect();
    b.push(Block::Table {
        header: vec![
            lang.say(CalculatedText::Term).into(),
            in_unit(lang.say(CalculatedText::Size), lang),
            lang.say(CalculatedText::Formula).into(),
            String::new(),
        ],
        rows,
    });
    b.push(Block::Para(labelled(
        lang.say(CalculatedText::PreparationHypothesisCalculatedAssumed),
        lang,
        lang.size(Some(e.total_bytes)),
    )));
}
