//! The answer first: the workload, the peak that matters, the capacity and the margin, the
//! largest load validated, the largest term of the gap, what is still assumed — each line linked
//! to the section that backs it.

use super::facts::{CapacityCounter, Facts, NeedCounter};
use super::words::{colon, oom_class, text};
use crate::report::document::{Block, Tone, Verdict};
use crate::report::format::Style;
use crate::report::names;

pub(super) fn verdict(b: &mut Vec<Block>, f: &Facts, lang: Style) {
    let r = f.result;
    let mut lines = Vec::new();
    if f.fake_torch {
        lines.push(Verdict {
            label: lang.t("Source", "Source").into(),
            value: lang
                .t(
                    "the test suite's fake torch: an example, not a GPU measurement",
                    "le faux torch des tests : un exemple, pas une mesure sur GPU",
                )
                .into(),
            section: Some(lang.t("Environment", "Environnement").into()),
            tone: Tone::Bad,
        });
    }
    let dims: Vec<String> = r
        .dimensions
        .iter()
        .map(|(k, v)| format!("{k}={}", text(v)))
        .collect();
    lines.push(Verdict {
        label: lang.t("Workload", "Charge").into(),
        value: format!(
            "`{}` · {}",
            f.workload,
            if dims.is_empty() {
                lang.t("no declared dimension", "aucune dimension déclarée")
                    .to_string()
            } else {
                format!("`{}`", dims.join(" · "))
            }
        ),
        section: Some(lang.t("Dimensions", "Dimensions").into()),
        tone: Tone::Neutral,
    });
    let observed_heading = lang.t("Observed", "Observé").to_string();
    if let Some(stopped) = f.stopped {
        let class = stopped
            .class
            .map(|c| format!(" ({})", oom_class(c, lang)))
            .unwrap_or_default();
        lines.push(Verdict {
            label: lang.t("Run", "Essai").into(),
            value: format!(
                "{} `{}`{class} — {}",
                lang.t(
                    "did not complete: it stopped in",
                    "n’a pas abouti : arrêt dans"
                ),
                stopped.phase.unwrap_or("?"),
                lang.t(
                    "a partial peak before a failure is not the need of a complete run",
                    "un pic partiel avant un échec n’est pas le besoin d’une exécution complète"
                )
            ),
            section: Some(observed_heading.clone()),
            tone: Tone::Bad,
        });
    }
    if let Some(p) = f.peak {
        lines.push(Verdict {
            label: lang.t("Peak that matters", "Pic qui compte").into(),
            value: format!(
                "{} {} `{}`{}",
                lang.size(Some(p.reserved_bytes)),
                lang.t("reserved, in", "réservés, dans"),
                p.phase.name,
                f.driver_peak.map_or(String::new(), |d| format!(
                    " — {} {}",
                    lang.t("driver's view", "vue du pilote"),
                    lang.size(Some(d))
                ))
            ),
            section: Some(observed_heading.clone()),
            tone: Tone::Neutral,
        });
    }
    if let (Some(cap), Some(need), Some(margin)) = (f.capacity, f.need, f.margin) {
        lines.push(capacity_and_margin(
            cap.counter,
            cap.bytes,
            need.counter,
            margin,
            lang,
        ));
    }
    validated(&mut lines, f, &observed_heading, lang);
    if let Some((id, bytes)) = f.largest_gap_term {
        lines.push(Verdict {
            label: lang
                .t("Largest term of the gap", "Plus gros poste de l’écart")
                .into(),
            value: format!(
                "{}{} {}",
                names::line(id, lang),
                colon(lang),
                lang.size(Some(bytes))
            ),
            section: Some(
                lang.t(
                    "Why the peak exceeds the estimate",
                    "Pourquoi le pic dépasse l’estimation",
                )
                .into(),
            ),
            tone: Tone::Neutral,
        });
    }
    lines.push(Verdict {
        label: lang.t("Still assumed", "Encore supposé").into(),
        value: match f.assumed_terms {
            None => lang
                .t(
                    "no estimate attached; evaluation, export and variations not covered by a series",
                    "aucune estimation jointe ; évaluation, export et variations hors série"
                )
                .into(),
            Some(n) => format!(
                "{} {}",
                lang.integer(n as u128),
                lang.t(
                    "term(s) of the estimate, and the variations listed",
                    "poste(s) de l’estimation, et les variations listées"
                )
            ),
        },
        section: Some(lang.t("Assumed", "Supposé").into()),
        tone: Tone::Neutral,
    });
    b.push(Block::Verdict(lines));
}

/// The capacity compared with, named, and the margin.
fn capacity_and_margin(
    counter: CapacityCounter,
    cap: u64,
    need: NeedCounter,
    margin: i128,
    lang: Style,
) -> Verdict {
    let share = 100.0 * margin as f64 / cap as f64;
    Verdict {
        label: lang.t("Capacity and margin", "Capacité et marge").into(),
        value: format!(
            "{} {} — {} {} ({}, {})",
            match counter {
                CapacityCounter::Nvml => lang.t("NVML's total", "total de NVML"),
                CapacityCounter::TorchTotalMemory => {
                    lang.t("PyTorch's total_memory", "total_memory de PyTorch")
                }
            },
            lang.size(Some(cap)),
            if margin >= 0 {
                lang.t("margin", "marge")
            } else {
                lang.t("short by", "manque")
            },
            lang.size(Some(margin.unsigned_abs() as u64)),
            lang.percent(Some(share)).trim_start_matches('+'),
            match need {
                NeedCounter::DriverView => {
                    lang.t("against the driver's view", "face à la vue du pilote")
                }
                NeedCounter::PeakReserved => lang.t(
                    "against the peak reserved; the CUDA context is not counted",
                    "face au pic réservé ; le contexte CUDA n’est pas compté",
                ),
            }
        ),
        section: Some(lang.t("Environment", "Environnement").into()),
        tone: if margin >= 0 { Tone::Good } else { Tone::Bad },
    }
}

/// What a series validated; without a series, only this load (when it completed).
fn validated(lines: &mut Vec<Verdict>, f: &Facts, observed_heading: &str, lang: Style) {
    let label = lang
        .t("Largest load validated", "Plus grande charge validée")
        .to_string();
    let Some(v) = &f.validated else {
        if f.result.status.is_ok() {
            lines.push(Verdict {
                label,
                value: lang
                    .t(
                        "this load only (no series attached)",
                        "cette charge seulement (aucune série jointe)",
                    )
                    .into(),
                section: Some(lang.t("Configuration chosen", "Choix retenu").into()),
                tone: Tone::Neutral,
            });
        }
        return;
    };
    let mut value = match v.largest {
        Some(n) => format!(
            "`{}` = {} {}",
            v.variable,
            lang.integer(u128::from(n)),
            lang.t("validated", "validé")
        ),
        None => lang
            .t(
                "no load of the series completed",
                "aucune charge de la série n’a abouti",
            )
            .into(),
    };
    if let Some(fr) = v.frontier {
        value.push_str(&format!(
            "; {} {} – {}",
            lang.t("frontier between", "frontière entre"),
            fr.last_success
                .map_or("—".into(), |n| lang.integer(u128::from(n))),
            fr.first_failure
                .map_or("—".into(), |n| lang.integer(u128::from(n)))
        ));
    }
    lines.push(Verdict {
        label,
        value,
        section: Some(observed_heading.into()),
        tone: if v.largest.is_some() {
            Tone::Good
        } else {
            Tone::Bad
        },
    });
}
