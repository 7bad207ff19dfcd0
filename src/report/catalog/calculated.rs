//! The words of `fiche/calculated.rs`, English and French side by side.

catalog! {
    /// The words of `fiche/calculated.rs`.
    pub enum CalculatedText {
        Calculated =>
            "Calculated",
            "Calculé";
        EstimateAttachedGiveEstimate =>
            "No estimate attached: give --estimate EST.json (the output of `iteragpu estimate --json`).",
            "Aucune estimation jointe : ajoutez `--estimate EST.json` (sortie de `iteragpu estimate --json`).";
        NotTotal =>
            "(not in the total)",
            "(hors total)";
        Term =>
            "term",
            "poste";
        Size =>
            "size",
            "taille";
        Formula =>
            "formula",
            "formule";
        PreparationHypothesisCalculatedAssumed =>
            "Preparation hypothesis (calculated and assumed terms together)",
            "Hypothèse de préparation (postes calculés et supposés ensemble)";
    }
}
