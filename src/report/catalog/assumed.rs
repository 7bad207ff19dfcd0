//! The words of `fiche/assumed.rs`, English and French side by side.

use crate::report::format::Style;

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
        LargestValueSucceeded =>
            "Largest value that succeeded:",
            "Plus grande valeur réussie\u{a0}:";
        NoneFeminine =>
            "none",
            "aucune";
        FirstFailure =>
            "first failure at",
            "premier échec à";
        KeepMarginBelowVariations =>
            "keep a margin below it for the variations listed as assumed.",
            "gardez une marge en dessous pour les variations listées comme supposées.";
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
