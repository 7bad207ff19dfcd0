//! What was observed: the phases' readings, the driver's view, the failure, the prediction next
//! to the observation, the KV cache, and the series.

use super::facts::Facts;
use super::words::{colon, in_unit, status_word};
use crate::report::document::{Block, Cell, Chart};
use crate::report::format::Style;
use crate::schema::measure::MeasureResult;

pub(super) fn observed(b: &mut Vec<Block>, f: &Facts, lang: Style) {
    let r = f.result;
    b.push(Block::Heading(lang.t("Observed", "Observé").into()));
    let mut rows: Vec<Vec<Cell>> = Vec::new();
    for p in &r.phases {
        if p.devices.is_empty() {
            rows.push(vec![
                Cell::Code(p.name.clone()),
                "—".into(),
                status_word(p.status, lang).into(),
                lang.t(
                    "no end readings: the worker ended during this phase",
                    "pas de lecture de fin : le processus s’est arrêté pendant cette phase",
                )
                .into(),
                "".into(),
                "".into(),
                "".into(),
                "".into(),
            ]);
        }
        for d in &p.devices {
            let gap = match (d.end_reserved_bytes, d.end_allocated_bytes) {
                (Some(rv), Some(a)) if rv >= a => Some(rv - a),
                _ => None,
            };
            rows.push(vec![
                Cell::Code(p.name.clone()),
                Cell::Code(d.device.clone()),
                status_word(p.status, lang).into(),
                Cell::size(d.peak_allocated_bytes),
                Cell::size(d.peak_reserved_bytes),
                Cell::size(d.end_allocated_bytes),
                Cell::size(d.end_reserved_bytes),
                Cell::size(gap),
            ]);
        }
    }
    b.push(Block::Table {
        header: vec![
            "phase".into(),
            lang.t("device", "appareil").into(),
            lang.t("status", "statut").into(),
            in_unit(lang.t("peak allocated", "pic alloué"), lang),
            in_unit(lang.t("peak reserved", "pic réservé"), lang),
            in_unit(lang.t("end allocated", "alloué en fin"), lang),
            in_unit(lang.t("end reserved", "réservé en fin"), lang),
            in_unit(
                lang.t(
                    "reserved − allocated at the end (same checkpoint)",
                    "réservé − alloué en fin (même point de contrôle)",
                ),
                lang,
            ),
        ],
        rows,
    });
    b.push(Block::List(vec![
        lang.t(
            "Peaks are absolute over each phase and include what already existed at its start. Reserved − allocated is shown only from two readings of the same checkpoint, never as peak reserved − peak allocated, which describes no single moment.",
            "Les pics sont absolus sur chaque phase et incluent ce qui existait à son début. L’écart réservé − alloué n’est montré qu’à partir de deux lectures d’un même point de contrôle, jamais comme pic réservé − pic alloué, qui ne décrit aucun instant.",
        )
        .into(),
        lang.t(
            "An end level minus a start level is not the volume of the phase's temporary tensors: earlier objects may have been freed during the phase.",
            "Un niveau de fin moins un niveau de départ n’est pas le volume des tenseurs temporaires de la phase : des objets antérieurs ont pu être libérés pendant la phase.",
        )
        .into(),
    ]));
    // The driver's view.
    let driver: Vec<Vec<Cell>> = r
        .phases
        .iter()
        .flat_map(|p| p.driver.iter().flatten().map(move |d| (p, d)))
        .filter(|(_, d)| d.peak_process_used_bytes.is_some())
        .map(|(p, d)| {
            vec![
                Cell::Code(p.name.clone()),
                Cell::Code(d.device.clone()),
                Cell::size(d.peak_process_used_bytes),
                Cell::size(d.outside_allocator_at_end_bytes),
                lang.integer(d.samples as u128).into(),
            ]
        })
        .collect();
    if driver.is_empty() {
        b.push(Block::Para(format!(
            "{}{} {}",
            lang.t("Driver's view", "Vue du pilote"),
            colon(lang),
            match &r.environment.driver_reason {
                Some(why) if !lang.fr() => why.clone(),
                Some(_) => "pilote NVIDIA absent ou illisible (la raison exacte est dans le résultat joint)".into(),
                None => lang.t("not sampled", "non échantillonnée").into(),
            }
        )));
    } else {
        b.push(Block::Table {
            header: vec![
                "phase".into(),
                lang.t("device", "appareil").into(),
                in_unit(lang.t("process peak (NVML)", "pic du processus (NVML)"), lang),
                in_unit(lang.t("outside PyTorch's allocator at the end (CUDA context, libraries; not a leak by itself)", "hors de l’allocateur PyTorch en fin (contexte CUDA, bibliothèques ; pas une fuite en soi)"), lang),
                lang.t("samples", "échantillons").into(),
            ],
            rows: driver,
        });
    }
    if let Some(f) = &r.failure {
        b.push(Block::Para(format!(
            "{} `{}`{} `{}` {} — {}",
            lang.t("Failure in", "Échec dans"),
            f.phase.as_deref().unwrap_or("?"),
            colon(lang),
            f.error_type.as_deref().unwrap_or(""),
            if lang.fr() {
                String::new()
            } else {
                f.message.clone().unwrap_or_default()
            },
            lang.t(
                "a partial peak before a failure is not the memory need of a complete run.",
                "un pic partiel avant une saturation ne constitue pas le besoin mémoire d’une exécution complète.",
            )
        )));
    }
    if !r.predictions.is_empty() {
        b.push(Block::Para(lang.t(
            "Predicted (the same code on data-less tensors for this card, run after the measurement; a prediction, not a measurement) next to observed:",
            "Prédit (le même code sur des tenseurs sans données pour cette carte, après la mesure ; une prédiction, pas une mesure) à côté de l’observé :",
        ).into()));
        let mut seen: std::collections::HashMap<&str, usize> = Default::default();
        b.push(Block::Table {
            header: vec![
                "phase".into(),
                in_unit(lang.t("predicted peak allocated", "pic alloué prévu"), lang),
                in_unit(lang.t("observed", "observé"), lang),
                lang.t("error", "écart").into(),
                in_unit(lang.t("predicted peak reserved", "pic réservé prévu"), lang),
                in_unit(lang.t("observed", "observé"), lang),
                lang.t("error", "écart").into(),
                lang.t("largest at the predicted peak", "le plus gros au pic prévu")
                    .into(),
            ],
            rows: r
                .predictions
                .iter()
                .map(|c| {
                    let n = seen.entry(c.phase.as_str()).or_default();
                    let k = *n;
                    *n += 1;
                    vec![
                        Cell::Code(c.phase.clone()),
                        Cell::size(Some(c.predicted_peak_allocated_bytes)),
                        Cell::size(c.observed_peak_allocated_bytes),
                        Cell::Percent(c.error_allocated_pct),
                        Cell::size(Some(c.predicted_peak_reserved_bytes)),
                        Cell::size(c.observed_peak_reserved_bytes),
                        Cell::Percent(c.error_reserved_pct),
                        largest_at_peak(r, &c.phase, k, lang).into(),
                    ]
                })
                .collect(),
        });
    }
    for c in &r.kv_cache {
        b.push(Block::Para(format!(
            "{} `{}`{} {} {} / {} {} ({})",
            lang.t("KV cache after", "Cache KV après"),
            c.phase,
            colon(lang),
            lang.t("observed", "observé"),
            lang.size(c.observed_bytes),
            lang.t("estimated", "estimé"),
            lang.size(Some(c.estimated_bytes)),
            lang.percent(c.difference_pct)
        )));
    }
    let bars: Vec<(String, Vec<Option<u64>>)> = r
        .phases
        .iter()
        .filter_map(|p| {
            let d = p.devices.first()?;
            let drv = p
                .driver
                .as_ref()
                .and_then(|v| v.first())
                .and_then(|x| x.peak_process_used_bytes);
            Some((
                format!("{} #{}", p.name, p.index),
                vec![d.peak_allocated_bytes, d.peak_reserved_bytes, drv],
            ))
        })
        .collect();
    if !bars.is_empty() {
        b.push(Block::Chart(Chart::Bars {
            title: lang
                .t(
                    "Peaks per phase (first device)",
                    "Pics par phase (premier appareil)",
                )
                .into(),
            series: vec![
                lang.t("peak allocated", "pic alloué").into(),
                lang.t("peak reserved", "pic réservé").into(),
                lang.t(
                    "driver's view (process peak)",
                    "vue du pilote (pic du processus)",
                )
                .into(),
            ],
            categories: bars,
        }));
    }
    if let (Some(s), Some(v)) = (f.series, &f.validated) {
        super::series::series_observed(b, s, v, lang);
    }
}

/// The two largest categories alive at the predicted peak of the `k`-th phase named `name`.
fn largest_at_peak(r: &MeasureResult, name: &str, k: usize, lang: Style) -> String {
    let Some(at) = r
        .prediction
        .as_ref()
        .and_then(|p| p.phases.iter().filter(|ph| ph.name == name).nth(k))
        .and_then(|ph| ph.at_peak.as_ref())
    else {
        return "—".into();
    };
    let mut categories: Vec<(&String, &u64)> = at.by_category.iter().collect();
    categories.sort_by(|a, b| b.1.cmp(a.1));
    categories
        .iter()
        .take(2)
        .map(|(c, b)| format!("{} {}", category_name(c, lang), lang.size(Some(**b))))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A prediction's storage category in the reader's language.
fn category_name(c: &str, lang: Style) -> String {
    if !lang.fr() {
        return c.to_string();
    }
    match c {
        "parameter" => "paramètres",
        "buffer" => "tampons",
        "gradient" => "gradients",
        "optimizer state" => "états de l’optimiseur",
        "input" => "entrées",
        "activation" => "activations",
        "temporary" => "temporaires",
        "kv cache" => "cache KV",
        "workspace" => "espaces de travail",
        "communication" => "communication",
        "allocator rounding" => "arrondi de l’allocateur",
        "other" => "autres",
        other => other,
    }
    .to_string()
}
