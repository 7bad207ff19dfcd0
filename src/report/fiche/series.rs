//! A sweep series as observed: its trials, the largest load, the frontier, the emulated limit,
//! and the peak against the varied value (or the allocator settings side by side).

use super::facts::Validated;
use super::words::{colon, in_unit, text, trial_status};
use crate::report::document::{Block, Cell, Chart};
use crate::report::format::Style;
use crate::schema::series::Series;

pub(super) fn series_observed(b: &mut Vec<Block>, s: &Series, v: &Validated, lang: Style) {
    let var = v.variable;
    let rows: Vec<Vec<Cell>> = s
        .trials
        .iter()
        .map(|t| {
            let values: Vec<String> = t
                .values
                .iter()
                .map(|(k, v)| format!("{k}={}", text(v)))
                .chain(t.load.clone())
                .collect();
            let status = if t.out_of_memory {
                lang.t("out of memory", "mémoire saturée")
            } else {
                trial_status(t.status, lang)
            };
            vec![
                Cell::Code(values.join(" ")),
                status.into(),
                Cell::size(t.peak_reserved_bytes),
                if t.status.is_ok() {
                    "".into()
                } else {
                    lang.t(
                        "partial: not the need of a complete run",
                        "partiel : pas le besoin d’une exécution complète",
                    )
                    .into()
                },
                format!(
                    "{}{}s",
                    lang.decimal(t.duration_s, 2),
                    crate::report::format::NBSP
                )
                .into(),
            ]
        })
        .collect();
    b.push(Block::Table {
        header: vec![
            lang.t("trial", "essai").into(),
            lang.t("status", "statut").into(),
            in_unit(lang.t("peak reserved", "pic réservé"), lang),
            String::new(),
            lang.t("duration", "durée").into(),
        ],
        rows,
    });
    if let Some(largest) = v.largest {
        b.push(Block::Para(format!(
            "{} `{var}` = {}",
            lang.t(
                "Largest load tested successfully:",
                "Plus grande charge testée avec succès\u{a0}:"
            ),
            lang.integer(u128::from(largest))
        )));
    }
    if let Some(f) = v.frontier {
        b.push(Block::Para(format!(
            "{} `{}`{} {} {}, {} {} ({} {}, {} {})",
            lang.t("Frontier of", "Frontière de"),
            f.variable,
            colon(lang),
            lang.t("last success", "dernier succès"),
            f.last_success
                .map_or(lang.t("none", "aucun").into(), |v| lang
                    .integer(u128::from(v))),
            lang.t("first failure", "premier échec"),
            f.first_failure
                .map_or(lang.t("none", "aucun").into(), |v| lang
                    .integer(u128::from(v))),
            lang.integer(f.trials as u128),
            lang.t("trials", "essais"),
            lang.t("resolution", "résolution"),
            lang.integer(u128::from(f.resolution))
        )));
    }
    if let Some(l) = &s.limit {
        b.push(Block::Para(format!(
            "{}{} {} (`{}`)",
            lang.t(
                "Emulated limit (not a real card)",
                "Limite émulée (pas une vraie carte)"
            ),
            colon(lang),
            lang.size(Some(l.bytes)),
            l.source
        )));
    }
    if !s.alloc_confs.is_empty() {
        // One chart across two allocators would mix two curves: the settings side by side.
        alloc_conf_comparison(b, s, lang);
        return;
    }
    let points: Vec<(u64, Option<u64>, bool)> = s
        .trials
        .iter()
        .filter_map(|t| {
            Some((
                t.values.get(var)?.as_u64()?,
                t.peak_reserved_bytes,
                t.status.is_ok(),
            ))
        })
        .collect();
    if !points.is_empty() {
        let mut lines: Vec<(String, u64)> = s
            .limit
            .iter()
            .map(|l| {
                (
                    lang.t("emulated limit", "limite émulée").to_string(),
                    l.bytes,
                )
            })
            .chain(v.cards.iter().cloned())
            .collect();
        lines.truncate(6);
        b.push(Block::Chart(Chart::Scatter {
            title: format!(
                "{} {var}",
                lang.t("Peak reserved against", "Pic réservé en fonction de")
            ),
            x_label: var.to_string(),
            points,
            lines,
        }));
    }
}

/// An allocator A/B (`sweep --vary alloc_conf=…`): each setting's peak reserved per value.
fn alloc_conf_comparison(b: &mut Vec<Block>, s: &Series, lang: Style) {
    let first = s.alloc_confs[0];
    b.push(Block::Para(format!(
        "{} {first} ({}).",
        lang.t(
            "Allocator settings compared in fresh processes; the change is against",
            "Réglages de l’allocateur comparés dans des processus neufs ; l’écart est mesuré par rapport à"
        ),
        lang.t(
            "complete trials only: a partial peak compares nothing",
            "essais complets seulement : un pic partiel ne se compare pas"
        )
    )));
    let mut header = vec![
        s.varied
            .first()
            .map_or("—".into(), |v| v.name().to_string()),
    ];
    header.extend(s.alloc_confs.iter().map(|a| {
        in_unit(
            &format!("{} {}", lang.t("peak reserved,", "pic réservé,"), a.name()),
            lang,
        )
    }));
    header.push(lang.t("change", "écart").into());
    let rows: Vec<Vec<Cell>> = s
        .alloc_conf_rows()
        .iter()
        .map(|row| {
            let mut cells: Vec<Cell> = vec![
                row.value
                    .map_or("—".into(), |(_, v)| lang.integer(u128::from(v)))
                    .into(),
            ];
            let mut changes = Vec::new();
            for (k, t) in row.trials.iter().enumerate() {
                cells.push(match t {
                    None => lang.t("not run", "non exécuté").into(),
                    Some(t) if !t.status.is_ok() => trial_status(t.status, lang).into(),
                    Some(t) => Cell::size(t.peak_reserved_bytes),
                });
                if k > 0
                    && let Some(c) = row.change(k)
                {
                    changes.push(format!(
                        "{}{} {}",
                        s.alloc_confs[k].name(),
                        colon(lang),
                        lang.percent(Some(c * 100.0))
                    ));
                }
            }
            cells.push(changes.join("; ").into());
            cells
        })
        .collect();
    b.push(Block::Table { header, rows });
}
