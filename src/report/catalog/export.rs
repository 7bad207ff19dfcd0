//! The words of `export/` (Markdown, HTML, SVG charts), English and French side by side.

catalog! {
    /// The words of `export/` (Markdown, HTML, SVG charts).
    pub enum ExportText {
        RawBytes =>
            "Raw bytes",
            "Octets bruts";
        Section =>
            "section",
            "section";
        Row =>
            "row",
            "ligne";
        Column =>
            "column",
            "colonne";
        Bytes =>
            "bytes",
            "octets";
        Adds =>
            "adds",
            "s’ajoute";
        Level =>
            "level",
            "niveau";
        FailedSuffix =>
            " (failed)",
            " (échec)";
        Completed =>
            "completed",
            "réussi";
        FailedPartialPeak =>
            "failed (partial peak)",
            "échec (pic partiel)";
        Points =>
            "points",
            "points";
        HighestAllocated =>
            "highest allocated",
            "alloué le plus haut";
        HighestReserved =>
            "highest reserved",
            "réservé le plus haut";
        Reserved =>
            "reserved",
            "réservé";
        Allocated =>
            "allocated",
            "alloué";
    }
}
