//! Under torchrun: every rank on its own device, side by side, never added together.

use super::words::{in_unit, status_word};
use crate::report::document::{Block, Cell};
use crate::report::format::Style;
use crate::schema::measure::MeasureResult;

/// Under torchrun: every rank on its own device, side by side, never added together.
pub(super) fn ranks(b: &mut Vec<Block>, r: &MeasureResult, lang: Style) {
    let Some(d) = &r.distributed else { return };
    b.push(Block::Heading(
        lang.t("Ranks (torchrun)", "Rangs (torchrun)").into(),
    ));
    b.push(Block::Para(format!(
        "{} {} ({} × {}). {}",
        lang.t("World size", "Taille du monde"),
        lang.integer(u128::from(d.world_size)),
        lang.integer(u128::from(d.torchrun.nnodes)),
        lang.integer(u128::from(d.torchrun.nproc_per_node)),
        lang.t(
            "Each rank is a fresh worker read on its own device; the figures are per device and are never added together. The phases above are those of the rank with the highest peak reserved.",
            "Chaque rang est un processus neuf lu sur son propre périphérique ; les chiffres sont par périphérique et ne s’additionnent jamais. Les phases ci-dessus sont celles du rang au pic réservé le plus haut.",
        )
    )));
    let rows = d
        .ranks
        .iter()
        .map(|k| {
            vec![
                lang.integer(u128::from(k.rank)).into(),
                Cell::Code(format!("{} / {}", k.node_rank, k.host)),
                Cell::Code(k.device.clone()),
                status_word(k.status, lang).into(),
                Cell::size(k.peak_allocated()),
                Cell::size(k.peak_reserved()),
                Cell::size(k.outside_allocator()),
                match (&k.stopped_because, lang.fr()) {
                    (None, _) => "".into(),
                    (Some(why), false) => why.clone().into(),
                    (Some(_), true) => {
                        "arrêté à cause d’un autre rang (voir le résultat joint)".into()
                    }
                },
            ]
        })
        .collect();
    b.push(Block::Table {
        header: vec![
            lang.t("rank", "rang").into(),
            lang.t("node / host", "nœud / hôte").into(),
            lang.t("device", "périphérique").into(),
            lang.t("status", "statut").into(),
            in_unit(lang.t("peak allocated", "pic alloué"), lang),
            in_unit(lang.t("peak reserved", "pic réservé"), lang),
            in_unit(
                lang.t(
                    "outside PyTorch's allocator (CUDA context, NCCL)",
                    "hors de l’allocateur de PyTorch (contexte CUDA, NCCL)",
                ),
                lang,
            ),
            lang.t("note", "note").into(),
        ],
        rows,
    });
    if let Some(i) = &d.imbalance {
        b.push(Block::Para(format!(
            "{} {} ({}); {} {} ({}); {} {}.",
            lang.t(
                "Highest peak reserved: rank",
                "Pic réservé le plus haut\u{a0}: rang"
            ),
            lang.integer(u128::from(i.max_rank)),
            lang.size(Some(i.max_peak_reserved_bytes)),
            lang.t("lowest: rank", "le plus bas\u{a0}: rang"),
            lang.integer(u128::from(i.min_rank)),
            lang.size(Some(i.min_peak_reserved_bytes)),
            lang.t("spread", "écart"),
            lang.size(Some(i.spread_bytes))
        )));
    }
    let merged: Vec<String> = r
        .notes
        .iter()
        .filter(|n| n.starts_with("merged from") || n.starts_with("WARNING: merged although"))
        .map(|n| match (lang.fr(), n.starts_with("WARNING")) {
            (true, false) => format!("fusionné depuis les fichiers de plusieurs nœuds (`{n}`)"),
            (true, true) => format!("ATTENTION : fusionnés malgré un désaccord (`{n}`)"),
            (false, _) => n.clone(),
        })
        .collect();
    if !merged.is_empty() {
        b.push(Block::List(merged));
    }
}
