//! What was calculated: the estimate's calculated terms and its preparation hypothesis.

use super::words::{in_unit, labelled};
use crate::estimate::{Kind, TermId};
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
    formats(b, e, lang);
    b.push(Block::Para(labelled(
        lang.say(CalculatedText::PreparationHypothesisCalculatedAssumed),
        lang,
        lang.size(Some(e.total_bytes)),
    )));
}

/// A quantized model's storage and compute formats apart (the guide: "the storage format and the
/// compute format must appear separately"): the quantized weights in their storage format, the
/// modules kept in another precision, the compute format's dequantization temporary.
fn formats(b: &mut Vec<Block>, e: &EstimateDoc, lang: Style) {
    let mut rows = Vec::new();
    for t in &e.terms {
        let (part, format) = match &t.id {
            TermId::QuantizedWeights { format } => (CalculatedText::StorageFormat, format.clone()),
            TermId::UnquantizedWeights { dtype } => (CalculatedText::KeptModules, dtype.clone()),
            TermId::DequantizedWeight { dtype } => (CalculatedText::ComputeFormat, dtype.clone()),
            _ => continue,
        };
        rows.push(vec![
            lang.say(part).into(),
            Cell::Code(format),
            Cell::size(Some(t.bytes)),
        ]);
    }
    if rows.is_empty() {
        return;
    }
    b.push(Block::Para(lang.say(CalculatedText::Formats).into()));
    b.push(Block::Table {
        header: vec![
            lang.say(CalculatedText::FormatPart).into(),
            lang.say(CalculatedText::FormatName).into(),
            in_unit(lang.say(CalculatedText::Size), lang),
        ],
        rows,
    });
}
