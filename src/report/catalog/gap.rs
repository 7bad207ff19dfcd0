//! The words of `fiche/gap.rs`, English and French side by side.

catalog! {
    /// The words of `fiche/gap.rs`.
    pub enum GapText {
        Term =>
            "term",
            "terme";
        Estimate =>
            "estimate",
            "estimation";
        Predicted =>
            "predicted",
            "prédit";
        Checkpoint =>
            "checkpoint",
            "point de lecture";
        AssumedSuffix =>
            " (assumed)",
            " (supposé)";
        Weights =>
            "weights",
            "poids";
        HeldStart =>
            "held at start",
            "tenu au début";
        GrowthPeak =>
            "growth to the peak",
            "croissance au pic";
        OutsideAllocator =>
            "outside the allocator",
            "hors allocateur";
        WaterfallTitle =>
            "From the weights to the driver's view (observed)",
            "Des poids à la vue du pilote (observé)";
        PostMortemHeading =>
            "Out-of-memory post-mortem",
            "Autopsie du manque de mémoire";
    }
}
