//! What was calculated: the estimate's calculated terms and its preparation hypothesis.

use super::words::{colon, in_unit};
use crate::estimate::Kind;
use crate::report::document::{Block, Cell};
use crate::report::format::Style;
use crate::report::names;
use crate::schema::load::EstimateDoc;

pub(super) fn calculated(b: &mut Vec<Block>, e: Option<&EstimateDoc>, lang: Style) {
    b.push(Block::Heading(lang.t("Calculated", "Calculé").into()));
    let Some(e) = e else {
        b.push(Block::Para(
            lang.t(
                "No estimate attached: give --estimate EST.json (the output of `iteragpu estimate --json`).",
                "Aucune estimation jointe : ajoutez `--estimate EST.json` (sortie de `iteragpu estimate --json`).",
            )
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
                    lang.t("(not in the total)", "(hors total)")
                }
                .into(),
            ]
        })
        .collect();
    b.push(Block::Table {
        header: vec![
            lang.t("term", "poste").into(),
            in_unit(lang.t("size", "taille"), lang),
            lang.t("formula", "formule").into(),
            String::new(),
        ],
        rows,
    });
    b.push(Block::Para(format!(
        "{}{} {}",
        lang.t(
            "Preparation hypothesis (calculated and assumed terms together)",
            "Hypothèse de préparation (postes calculés et supposés ensemble)"
        ),
        colon(lang),
        lang.size(Some(e.total_bytes))
    )));
}
