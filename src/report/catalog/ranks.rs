//! The words of `fiche/ranks.rs`, English and French side by side.

use crate::report::format::Style;
use crate::schema::measure::Imbalance;

catalog! {
    /// The words of `fiche/ranks.rs`.
    pub enum RanksText {
        RanksTorchrun =>
            "Ranks (torchrun)",
            "Rangs (torchrun)";
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

/// The world: its size, nodes × ranks per node, and how the ranks are read.
pub fn world(size: u64, nodes: u64, per_node: u64, lang: Style) -> String {
    let size = lang.integer(u128::from(size));
    let nodes = lang.integer(u128::from(nodes));
    let per_node = lang.integer(u128::from(per_node));
    if lang.fr() {
        format!(
            "Taille du monde {size} ({nodes} × {per_node}). Chaque rang est un processus neuf lu sur son propre périphérique ; les chiffres sont par périphérique et ne s’additionnent jamais. Les phases ci-dessus sont celles du rang au pic réservé le plus haut."
        )
    } else {
        format!(
            "World size {size} ({nodes} × {per_node}). Each rank is a fresh worker read on its own device; the figures are per device and are never added together. The phases above are those of the rank with the highest peak reserved."
        )
    }
}

/// The ranks' highest and lowest peaks reserved, and their spread.
pub fn imbalance(i: &Imbalance, lang: Style) -> String {
    let (max_rank, max) = (
        lang.integer(u128::from(i.max_rank)),
        lang.size(Some(i.max_peak_reserved_bytes)),
    );
    let (min_rank, min) = (
        lang.integer(u128::from(i.min_rank)),
        lang.size(Some(i.min_peak_reserved_bytes)),
    );
    let spread = lang.size(Some(i.spread_bytes));
    if lang.fr() {
        format!(
            "Pic réservé le plus haut\u{a0}: rang {max_rank} ({max}); le plus bas\u{a0}: rang {min_rank} ({min}); écart {spread}."
        )
    } else {
        format!(
            "Highest peak reserved: rank {max_rank} ({max}); lowest: rank {min_rank} ({min}); spread {spread}."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::format::{Lang, Units};

    #[test]
    fn the_world_in_each_language() {
        assert!(
            world(8, 2, 4, Style::new(Lang::En, Units::Gib))
                .starts_with("World size 8 (2 × 4). Each rank is a fresh worker")
        );
        assert!(
            world(8, 2, 4, Style::new(Lang::Fr, Units::Gib))
                .starts_with("Taille du monde 8 (2 × 4). Chaque rang est un processus neuf")
        );
    }

    #[test]
    fn the_imbalance_is_one_sentence_in_each_language() {
        let i = Imbalance {
            max_peak_reserved_bytes: 3 << 29,
            max_rank: 3,
            min_peak_reserved_bytes: 1 << 30,
            min_rank: 0,
            spread_bytes: 1 << 29,
        };
        assert_eq!(
            imbalance(&i, Style::new(Lang::En, Units::Gib)),
            "Highest peak reserved: rank 3 (1.50\u{a0}GiB); lowest: rank 0 (1.00\u{a0}GiB); spread 0.50\u{a0}GiB."
        );
        assert_eq!(
            imbalance(&i, Style::new(Lang::Fr, Units::Gib)),
            "Pic réservé le plus haut\u{a0}: rang 3 (1,50\u{a0}Gio); le plus bas\u{a0}: rang 0 (1,00\u{a0}Gio); écart 0,50\u{a0}Gio."
        )
    }
}
