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
        Formats =>
            "Storage and compute formats",
            "Formats de stockage et de calcul";
        FormatPart =>
            "part",
            "partie";
        FormatName =>
            "format",
            "format";
        StorageFormat =>
            "quantized linear weights (storage format, with their scales)",
            "poids linéaires quantifiés (format de stockage, avec leurs échelles)";
        KeptModules =>
            "modules kept in another precision (embeddings, norms, output head)",
            "modules gardés dans une autre précision (plongements, normalisations, tête de sortie)";
        ComputeFormat =>
            "compute format: dequantization temporary (one weight at a time, assumed)",
            "format de calcul : temporaire de déquantification (un poids à la fois, supposé)";
        PreparationHypothesisCalculatedAssumed =>
            "Preparation hypothesis (calculated and assumed terms together)",
            "Hypothèse de préparation (postes calculés et supposés ensemble)";
    }
}
