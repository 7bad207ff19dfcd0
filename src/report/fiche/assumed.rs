//! What is still assumed, and the configuration chosen.

use super::facts::Facts;
use super::words::colon;
use crate::estimate::Kind;
use crate::report::document::Block;
use crate::report::format::Style;
use crate::report::names;
use crate::schema::measure::RunStatus;

pub(super) fn assumed(b: &mut Vec<Block>, f: &Facts, lang: Style) {
    b.push(Block::Heading(lang.t("Assumed", "Supposé").into()));
    let mut items: Vec<String> = Vec::new();
    if let Some(e) = f.estimate {
        for t in e.terms.iter().filter(|t| t.kind == Kind::Assumed) {
            items.push(format!(
                "{}{} {} — `{}`",
                names::term(t, lang),
                colon(lang),
                lang.size(Some(t.bytes)),
                t.formula
            ));
        }
        if !e.left_out.is_empty() {
            items.push(format!(
                "{}{} {}",
                lang.t("left out of the estimate", "hors de l’estimation"),
                colon(lang),
                if lang.fr() {
                    format!(
                        "{} élément(s), listés dans l’estimation jointe",
                        e.left_out.len()
                    )
                } else {
                    e.left_out.join("; ")
                }
            ));
        }
    }
    if !f.not_measured.is_empty() {
        items.push(format!(
            "{}{} `{}`",
            lang.t("not measured in this run", "non mesuré dans cet essai"),
            colon(lang),
            f.not_measured.join(", ")
        ));
    }
    items.push(match &f.variations_covered {
        Some(v) => format!("{}{} `{v}`", lang.t("variations covered by the series", "variations couvertes par la série"), colon(lang)),
        None => lang
            .t(
                "no variation was tested: a margin must still cover a longer input, the allowed batch, evaluation, export, library versions and other users of the card",
                "aucune variation testée : la marge doit encore couvrir une entrée plus longue, le batch autorisé, l’évaluation, l’export, les versions de bibliothèques et les autres utilisateurs de la carte",
            )
            .into(),
    });
    b.push(Block::List(items));
}

pub(super) fn chosen(b: &mut Vec<Block>, f: &Facts, lang: Style) {
    let r = f.result;
    b.push(Block::Heading(
        lang.t("Configuration chosen", "Choix retenu").into(),
    ));
    let frontier = f.validated.as_ref().and_then(|v| v.frontier);
    let text = match (frontier, r.status) {
        (Some(fr), _) => format!(
            "{} `{}` = {} ({} {}); {}",
            lang.t("Largest value that succeeded:", "Plus grande valeur réussie\u{a0}:"),
            fr.variable,
            fr.last_success.map_or(lang.t("none", "aucune").into(), |v| lang.integer(u128::from(v))),
            lang.t("first failure at", "premier échec à"),
            fr.first_failure.map_or(lang.t("none", "aucun").into(), |v| lang.integer(u128::from(v))),
            lang.t("keep a margin below it for the variations listed as assumed.", "gardez une marge en dessous pour les variations listées comme supposées.")
        ),
        (None, RunStatus::Ok) if r.phases.is_empty() => lang
            .t(
                "No phase was recorded: this result proves nothing about fit; mark the work with `iteragpu.phase(…)` and measure again.",
                "Aucune phase n’a été enregistrée : ce résultat ne prouve rien sur la tenue en mémoire ; marquez le travail avec `iteragpu.phase(…)` et mesurez de nouveau.",
            )
            .into(),
        (None, RunStatus::Ok) => lang
            .t(
                "The measured configuration ran to completion on this GPU; only this load is validated.",
                "La configuration mesurée a abouti sur ce GPU ; seule cette charge est validée.",
            )
            .into(),
        (None, _) => lang
            .t(
                "The measured configuration did not complete: reduce one dimension and search the frontier (`iteragpu sweep --search frontier`).",
                "La configuration mesurée n’a pas abouti : réduisez une seule dimension et cherchez la frontière (`iteragpu sweep --search frontier`).",
            )
            .into(),
    };
    b.push(Block::Para(text));
}
