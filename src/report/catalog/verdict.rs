//! The words of `fiche/verdict.rs`, English and French side by side: the labels, and the values
//! with figures, each worded whole in each language.

use crate::explain::oom::OomClass;
use crate::report::catalog::ledger::oom_class;
use crate::report::fiche::facts::{Capacity, CapacityCounter, NeedCounter};
use crate::report::format::{Lang, Style};
use crate::schema::series::FrontierRecord;

catalog! {
    /// The words of `fiche/verdict.rs`.
    pub enum VerdictText {
        Source =>
            "Source",
            "Source";
        FakeTorch =>
            "the test suite's fake torch: an example, not a GPU measurement",
            "le faux torch des tests : un exemple, pas une mesure sur GPU";
        Workload =>
            "Workload",
            "Charge";
        DeclaredDimension =>
            "no declared dimension",
            "aucune dimension déclarée";
        Run =>
            "Run",
            "Essai";
        PeakMatters =>
            "Peak that matters",
            "Pic qui compte";
        LargestTermGap =>
            "Largest term of the gap",
            "Plus gros poste de l’écart";
        StillAssumed =>
            "Still assumed",
            "Encore supposé";
        CapacityMargin =>
            "Capacity and margin",
            "Capacité et marge";
        LargestLoadValidated =>
            "Largest load validated",
            "Plus grande charge validée";
        LoadOnlySeriesAttached =>
            "this load only (no series attached)",
            "cette charge seulement (aucune série jointe)";
    }
}

/// A verdict's value with its figures.
pub enum VerdictValue<'a> {
    /// The run did not complete: it stopped in `phase`, after an out-of-memory of `class`.
    Stopped {
        phase: &'a str,
        class: Option<OomClass>,
    },
    /// The peak that matters: reserved in `phase`, and the driver's peak when it was read.
    Peak {
        reserved: u64,
        phase: &'a str,
        driver_peak: Option<u64>,
    },
    /// The capacity compared with, and the margin (negative: short by).
    CapacityAndMargin {
        capacity: Capacity,
        need: NeedCounter,
        margin: i128,
    },
    /// The largest value of `variable` a series validated, and its frontier.
    Validated {
        variable: &'a str,
        largest: Option<u64>,
        frontier: Option<&'a FrontierRecord>,
    },
    /// How many terms of the estimate are assumed (`None`: no estimate attached).
    StillAssumed { terms: Option<usize> },
}

impl VerdictValue<'_> {
    pub fn word(&self, lang: Style) -> String {
        let fr = lang.lang == Lang::Fr;
        match *self {
            VerdictValue::Stopped { phase, class } => {
                let class = class.map_or(String::new(), |c| format!(" ({})", oom_class(c, lang)));
                if fr {
                    format!("n’a pas abouti : arrêt dans `{phase}`{class} — un pic partiel avant un échec n’est pas le besoin d’une exécution complète")
                } else {
                    format!("did not complete: it stopped in `{phase}`{class} — a partial peak before a failure is not the need of a complete run")
                }
            }
            VerdictValue::Peak {
                reserved,
                phase,
                driver_peak,
            } => {
                let reserved = lang.size(Some(reserved));
                let driver = driver_peak.map_or(String::new(), |d| {
                    let d = lang.size(Some(d));
                    if fr {
                        format!(" — vue du pilote {d}")
                    } else {
                        format!(" — driver's view {d}")
                    }
                });
                if fr {
                    format!("{reserved} réservés, dans `{phase}`{driver}")
                } else {
                    format!("{reserved} reserved, in `{phase}`{driver}")
                }
            }
            VerdictValue::CapacityAndMargin {
                capacity,
                need,
                margin,
            } => {
                let share = 100.0 * margin as f64 / capacity.bytes as f64;
                let cap = lang.size(Some(capacity.bytes));
                let abs = lang.size(Some(margin.unsigned_abs() as u64));
                let pct = lang.percent(Some(share));
                let pct = pct.trim_start_matches('+');
                let counter = match (capacity.counter, fr) {
                    (CapacityCounter::Nvml, false) => "NVML's total",
                    (CapacityCounter::Nvml, true) => "total de NVML",
                    (CapacityCounter::TorchTotalMemory, false) => "PyTorch's total_memory",
                    (CapacityCounter::TorchTotalMemory, true) => "total_memory de PyTorch",
                };
                let against = match (need, fr) {
                    (NeedCounter::DriverView, false) => "against the driver's view",
                    (NeedCounter::DriverView, true) => "face à la vue du pilote",
                    (NeedCounter::PeakReserved, false) => {
                        "against the peak reserved; the CUDA context is not counted"
                    }
                    (NeedCounter::PeakReserved, true) => {
                        "face au pic réservé ; le contexte CUDA n’est pas compté"
                    }
                };
                match (margin >= 0, fr) {
                    (true, false) => format!("{counter} {cap} — margin {abs} ({pct}, {against})"),
                    (false, false) => format!("{counter} {cap} — short by {abs} ({pct}, {against})"),
                    (true, true) => format!("{counter} {cap} — marge {abs} ({pct}, {against})"),
                    (false, true) => format!("{counter} {cap} — manque {abs} ({pct}, {against})"),
                }
            }
            VerdictValue::Validated {
                variable,
                largest,
                frontier,
            } => {
                let mut value = match (largest, fr) {
                    (Some(n), false) => format!("`{variable}` = {} validated", lang.integer(u128::from(n))),
                    (Some(n), true) => format!("`{variable}` = {} validé", lang.integer(u128::from(n))),
                    (None, false) => "no load of the series completed".into(),
                    (None, true) => "aucune charge de la série n’a abouti".into(),
                };
                if let Some(f) = frontier {
                    let bound = |n: Option<u64>| n.map_or("—".into(), |n| lang.integer(u128::from(n)));
                    let (last, first) = (bound(f.last_success), bound(f.first_failure));
                    value += &if fr {
                        format!("; frontière entre {last} – {first}")
                    } else {
                        format!("; frontier between {last} – {first}")
                    };
                }
                value
            }
            VerdictValue::StillAssumed { terms } => match (terms, fr) {
                (None, false) => "no estimate attached; evaluation, export and variations not covered by a series".into(),
                (None, true) => "aucune estimation jointe ; évaluation, export et variations hors série".into(),
                (Some(n), false) => format!("{} term(s) of the estimate, and the variations listed", lang.integer(n as u128)),
                (Some(n), true) => format!("{} poste(s) de l’estimation, et les variations listées", lang.integer(n as u128)),
            },
        }
    }
}

/// No dimension declared by a script that was given arguments (`-- --batch 8`): the arguments
/// are shown, and how to make them dimensions.
pub fn undeclared_arguments(args: &str, lang: Style) -> String {
    if lang.fr() {
        format!(
            "aucune dimension déclarée ; arguments du script `{args}`, passés tels quels (pour qu’ils deviennent des dimensions : iteragpu.describe(batch=…) dans le script, ou `--batch N -- --batch {{batch}}`)"
        )
    } else {
        format!(
            "no declared dimension; the script's arguments `{args}` were passed as written (to make them dimensions: iteragpu.describe(batch=…) in the script, or `--batch N -- --batch {{batch}}`)"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::format::Units;

    const GIB: u64 = 1 << 30;

    /// The values the fiche's snapshots do not reach, in both languages.
    #[test]
    fn values_the_snapshots_do_not_reach() {
        let en = Style::new(Lang::En, Units::Gib);
        let fr = Style::new(Lang::Fr, Units::Gib);
        let peak = VerdictValue::Peak {
            reserved: 3 * GIB / 4,
            phase: "forward",
            driver_peak: Some(GIB / 4),
        };
        assert_eq!(
            peak.word(en),
            "0.75\u{a0}GiB reserved, in `forward` — driver's view 0.25\u{a0}GiB"
        );
        assert_eq!(
            peak.word(fr),
            "0,75\u{a0}Gio réservés, dans `forward` — vue du pilote 0,25\u{a0}Gio"
        );
        let short = VerdictValue::CapacityAndMargin {
            capacity: Capacity {
                counter: CapacityCounter::Nvml,
                bytes: GIB,
            },
            need: NeedCounter::DriverView,
            margin: -(GIB as i128) / 2,
        };
        assert_eq!(
            short.word(en),
            "NVML's total 1.00\u{a0}GiB — short by 0.50\u{a0}GiB (−50.0\u{a0}%, against the driver's view)"
        );
        assert_eq!(
            short.word(fr),
            "total de NVML 1,00\u{a0}Gio — manque 0,50\u{a0}Gio (−50,0\u{a0}%, face à la vue du pilote)"
        );
        let frontier: FrontierRecord = serde_json::from_value(serde_json::json!({
            "variable": "batch", "last_success": 16, "first_failure": 1024, "resolution": 1,
            "trials": 7, "strategy": "grow-then-bisect", "hint": null, "budget_exhausted": false
        }))
        .unwrap();
        let validated = |largest| VerdictValue::Validated {
            variable: "batch",
            largest,
            frontier: Some(&frontier),
        };
        assert_eq!(
            validated(Some(16)).word(en),
            "`batch` = 16 validated; frontier between 16 – 1,024"
        );
        assert_eq!(
            validated(None).word(fr),
            "aucune charge de la série n’a abouti; frontière entre 16 – 1\u{202f}024"
        );
    }
}
