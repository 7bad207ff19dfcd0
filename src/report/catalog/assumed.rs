//! The words of `fiche/assumed.rs`, English and French side by side.

use crate::report::format::Style;
use crate::schema::series::FrontierRecord;

catalog! {
    /// The words of `fiche/assumed.rs`.
    pub enum AssumedText {
        LeftOutEstimate =>
            "left out of the estimate",
            "hors de l’estimation";
        NotMeasuredRun =>
            "not measured in this run",
            "non mesuré dans cet essai";
        VariationsCoveredSeries =>
            "variations covered by the series",
            "variations couvertes par la série";
        VariationWasTestedMargin =>
            "no variation was tested: a margin must still cover a longer input, the allowed batch, evaluation, export, library versions and other users of the card",
            "aucune variation testée : la marge doit encore couvrir une entrée plus longue, le batch autorisé, l’évaluation, l’export, les versions de bibliothèques et les autres utilisateurs de la carte";
        PhaseWasRecordedResult =>
            "No phase was recorded: this result proves nothing about fit; mark the work with `iteragpu.phase(…)` and measure again.",
            "Aucune phase n’a été enregistrée : ce résultat ne prouve rien sur la tenue en mémoire ; marquez le travail avec `iteragpu.phase(…)` et mesurez de nouveau.";
        MeasuredConfigurationRanCompletion =>
            "The measured configuration ran to completion on this GPU; only this load is validated.",
            "La configuration mesurée a abouti sur ce GPU ; seule cette charge est validée.";
        MeasuredConfigurationDidNot =>
            "The measured configuration did not complete: reduce one dimension and search the frontier (`iteragpu sweep --search frontier`).",
            "La configuration mesurée n’a pas abouti : réduisez une seule dimension et cherchez la frontière (`iteragpu sweep --search frontier`).";
    }
}

/// What the estimate left out: its English words, or in French how many (listed in the attached
/// estimate).
pub fn left_out(items: &[String], lang: Style) -> String {
    if lang.fr() {
        format!(
            "{} élément(s), listés dans l’estimation jointe",
            items.len()
        )
    } else {
        items.join("; ")
    }
}

/// The configuration chosen from a frontier search: its last success, its first failure, and
/// the margin still to keep.
pub fn below_the_frontier(f: &FrontierRecord, lang: Style) -> String {
    let fr = lang.fr();
    let value = |n: Option<u64>, none: [&str; 2]| {
        n.map_or(none[usize::from(fr)].into(), |n| {
            lang.integer(u128::from(n))
        })
    };
    let last = value(f.last_success, ["none", "aucune"]);
    let first = value(f.first_failure, ["none", "aucun"]);
    let variable = &f.variable;
    if fr {
        format!(
            "Plus grande valeur réussie\u{a0}: `{variable}` = {last} (premier échec à {first}); gardez une marge en dessous pour les variations listées comme supposées."
        )
    } else {
        format!(
            "Largest value that succeeded: `{variable}` = {last} (first failure at {first}); keep a margin below it for the variations listed as assumed."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::format::{Lang, Units};

    #[test]
    fn the_configuration_below_the_frontier() {
        let f: FrontierRecord = serde_json::from_value(serde_json::json!({
            "variable": "batch", "last_success": null, "first_failure": 1, "resolution": 1,
            "trials": 1, "strategy": "grow-then-bisect", "hint": null, "budget_exhausted": false
        }))
        .unwrap();
        assert_eq!(
            below_the_frontier(&f, Style::new(Lang::En, Units::Gib)),
            "Largest value that succeeded: `batch` = none (first failure at 1); keep a margin below it for the variations listed as assumed."
        );
        assert_eq!(
            below_the_frontier(&f, Style::new(Lang::Fr, Units::Gib)),
            "Plus grande valeur réussie\u{a0}: `batch` = aucune (premier échec à 1); gardez une marge en dessous pour les variations listées comme supposées."
        );
    }
}
