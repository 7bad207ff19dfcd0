//! The words of `fiche/ranks.rs`, English and French side by side.

use crate::report::format::Style;

catalog! {
    /// The words of `fiche/ranks.rs`.
    pub enum RanksText {
        RanksTorchrun =>
            "Ranks (torchrun)",
            "Rangs (torchrun)";
        WorldSize =>
            "World size",
            "Taille du monde";
        EachRankFreshWorker =>
            "Each rank is a fresh worker read on its own device; the figures are per device and are never added together. The phases above are those of the rank with the highest peak reserved.",
            "Chaque rang est un processus neuf lu sur son propre périphérique ; les chiffres sont par périphérique et ne s’additionnent jamais. Les phases ci-dessus sont celles du rang au pic réservé le plus haut.";
        Rank =>
            "rank",
            "rang";
        NodeHost =>
            "node / host",
            "nœud / hôte";
        Device =>
            "device",
            "périphérique";
        OutsidePytorchAllocator =>
            "outside PyTorch's allocator (CUDA context, NCCL)",
            "hors de l’allocateur de PyTorch (contexte CUDA, NCCL)";
        Note =>
            "note",
            "note";
        HighestPeakReservedRank =>
            "Highest peak reserved: rank",
            "Pic réservé le plus haut\u{a0}: rang";
        LowestRank =>
            "lowest: rank",
            "le plus bas\u{a0}: rang";
        Spread =>
            "spread",
            "écart";
    }
}

/// Why a rank stopped: the result's English words, or in French a pointer to them.
pub fn stopped_because(why: &str, lang: Style) -> String {
    if lang.fr() {
        "arrêté à cause d’un autre rang (voir le résultat joint)".into()
    } else {
        why.to_string()
    }
}

/// A note of a result merged from several nodes' files (`merged from …`, `WARNING: merged
/// although …`), quoted in French.
pub fn merged_note(note: &str, lang: Style) -> String {
    match (lang.fr(), note.starts_with("WARNING")) {
        (true, false) => format!("fusionné depuis les fichiers de plusieurs nœuds (`{note}`)"),
        (true, true) => format!("ATTENTION : fusionnés malgré un désaccord (`{note}`)"),
        (false, _) => note.to_string(),
    }
}
