//! The words of `fiche/series.rs`, English and French side by side: fixed words, and the
//! sentences with figures, each worded whole in each language.

use crate::report::format::Style;
use crate::schema::series::FrontierRecord;

catalog! {
    /// The words of `fiche/series.rs`.
    pub enum SeriesText {
        OutMemory =>
            "out of memory",
            "mémoire saturée";
        PartialNotNeedComplete =>
            "partial: not the need of a complete run",
            "partiel : pas le besoin d’une exécution complète";
        Trial =>
            "trial",
            "essai";
        Duration =>
            "duration",
            "durée";
        EmulatedLimitNotReal =>
            "Emulated limit (not a real card)",
            "Limite émulée (pas une vraie carte)";
        EmulatedLimit =>
            "emulated limit",
            "limite émulée";
        PeakReservedAgainst =>
            "Peak reserved against",
            "Pic réservé en fonction de";
        PeakReservedComma =>
            "peak reserved,",
            "pic réservé,";
        Change =>
            "change",
            "écart";
        NotRun =>
            "not run",
            "non exécuté";
        Unpredictable =>
            "unpredictable (a gap, no figure)",
            "imprévisible (une lacune, aucun chiffre)";
        PredictedToFit =>
            "predicted to fit",
            "tient selon la prédiction";
        PredictedNotToFit =>
            "predicted not to fit",
            "ne tient pas selon la prédiction";
        PredictedSeries =>
            "Predicted, not measured: each trial of this series ran on data-less tensors on the CPU, for the card below; no GPU was involved.",
            "Prédit, pas mesuré : chaque essai de cette série a tourné sur des tenseurs sans données, sur le CPU, pour la carte ci-dessous ; aucun GPU n’a servi.";
        PredictedSeriesHeading =>
            "Predicted series",
            "Série prédite";
        SameFrontier =>
            "The measured and the predicted frontiers agree.",
            "Les frontières mesurée et prédite concordent.";
        PredictedFor =>
            "Predicted for",
            "Prédit pour";
        CapacityPredicted =>
            "Capacity the predictions are held against",
            "Capacité à laquelle les prédictions sont confrontées";
        PeakReservedPredicted =>
            "Predicted peak reserved against",
            "Pic réservé prédit en fonction de";
        Capacity =>
            "capacity",
            "capacité";
        Frontiers =>
            "Measured and predicted frontiers",
            "Frontières mesurée et prédite";
        Measured =>
            "measured",
            "mesurée";
        Predicted =>
            "predicted",
            "prédite";
        LargestFits =>
            "largest value that fits",
            "plus grande valeur qui tient";
        FirstNotFits =>
            "first value that does not",
            "première valeur qui ne tient pas";
        OutsideAllocator =>
            "memory outside PyTorch's allocator counted",
            "mémoire hors de l’allocateur de PyTorch comptée";
    }
}

/// The largest value of `variable` whose trial completed.
pub fn largest_tested(variable: &str, largest: u64, lang: Style) -> String {
    let n = lang.integer(u128::from(largest));
    if lang.fr() {
        format!("Plus grande charge testée avec succès\u{a0}: `{variable}` = {n}")
    } else {
        format!("Largest load tested successfully: `{variable}` = {n}")
    }
}

/// A frontier search's outcome: its bounds, its trials and its resolution.
pub fn frontier(f: &FrontierRecord, lang: Style) -> String {
    let fr = lang.fr();
    let bound = |n: Option<u64>| match n {
        Some(n) => lang.integer(u128::from(n)),
        None if fr => "aucun".into(),
        None => "none".into(),
    };
    let (last, first) = (bound(f.last_success), bound(f.first_failure));
    let (variable, trials) = (&f.variable, lang.integer(f.trials as u128));
    let resolution = lang.integer(u128::from(f.resolution));
    if fr {
        format!(
            "Frontière de `{variable}`\u{a0}: dernier succès {last}, premier échec {first} ({trials} essais, résolution {resolution})"
        )
    } else {
        format!(
            "Frontier of `{variable}`: last success {last}, first failure {first} ({trials} trials, resolution {resolution})"
        )
    }
}

/// The introduction of an allocator A/B: what the change is measured against.
pub fn alloc_confs_compared(first: impl std::fmt::Display, lang: Style) -> String {
    if lang.fr() {
        format!(
            "Réglages de l’allocateur comparés dans des processus neufs ; l’écart est mesuré par rapport à {first} (essais complets seulement : un pic partiel ne se compare pas)."
        )
    } else {
        format!(
            "Allocator settings compared in fresh processes; the change is against {first} (complete trials only: a partial peak compares nothing)."
        )
    }
}

/// A predicted frontier: the largest value predicted to fit, the first predicted not to, and
/// the phase that decides.
pub fn predicted_frontier(f: &FrontierRecord, lang: Style) -> String {
    let fr = lang.fr();
    let bound = |n: Option<u64>| match n {
        Some(n) => lang.integer(u128::from(n)),
        None if fr => "aucune".into(),
        None => "none".into(),
    };
    let (last, first) = (bound(f.last_success), bound(f.first_failure));
    let (variable, trials) = (&f.variable, lang.integer(f.trials as u128));
    let resolution = lang.integer(u128::from(f.resolution));
    let deciding = f.deciding.as_ref().map_or(String::new(), |d| {
        let (view, cap) = (lang.size(d.driver_view_bytes), lang.size(Some(d.capacity_bytes)));
        // The category, the module (or none) and the line of code that asked: the same
        // allocation the verdict names, never "(other, —)" beside a verdict that names the line.
        let category = |a: &crate::schema::series::DecidingAllocation| {
            let module = match (a.module.as_deref(), fr) {
                (Some(m), _) => format!("`{m}`"),
                (None, true) => "hors de tout module".to_string(),
                (None, false) => "no module".to_string(),
            };
            let at = match (&a.file, a.line) {
                (Some(file), Some(line)) => format!(", `{file}:{line}`"),
                (Some(file), None) => format!(", `{file}`"),
                _ => String::new(),
            };
            format!(
                "{}, {module}{at}",
                super::observed::storage_category(&a.category, lang)
            )
        };
        match (&d.allocation, fr) {
            (Some(a), true) => format!(
                " ; décidée dans la phase `{}` par une allocation de {} ({}) qui ne tient pas dans {cap} ; l’exécution entière demande {view} (vue du pilote)",
                d.phase,
                lang.size(Some(a.bytes)),
                category(a),
            ),
            (Some(a), false) => format!(
                "; decided in phase `{}` by an allocation of {} ({}) that does not fit in {cap}; the whole run needs {view} (driver's view)",
                d.phase,
                lang.size(Some(a.bytes)),
                category(a),
            ),
            (None, true) => format!(
                " ; décidée par la phase `{}` (vue du pilote {view} > capacité {cap})",
                d.phase
            ),
            (None, false) => format!(
                "; decided by phase `{}` (driver's view {view} > capacity {cap})",
                d.phase
            ),
        }
    });
    if fr {
        format!(
            "Frontière prédite de `{variable}`\u{a0}: plus grande valeur qui tient {last}, première qui ne tient pas {first} ({trials} prédictions, résolution {resolution}){deciding}"
        )
    } else {
        format!(
            "Predicted frontier of `{variable}`: largest predicted to fit {last}, first predicted not to fit {first} ({trials} predictions, resolution {resolution}){deciding}"
        )
    }
}

/// Why a measured and a predicted frontier differ: the two peaks at a value both tried, and the
/// memory outside the allocator each one counts.
pub fn frontiers_differ(
    variable: &str,
    value: Option<(u64, u64, u64)>,
    outside: (Option<u64>, u64),
    lang: Style,
) -> String {
    let fr = lang.fr();
    let peaks = value.map_or(String::new(), |(v, measured, predicted)| {
        let (v, m, p) = (
            lang.integer(u128::from(v)),
            lang.size(Some(measured)),
            lang.size(Some(predicted)),
        );
        let change = lang.percent(Some(
            (predicted as f64 - measured as f64) / (measured.max(1)) as f64 * 100.0,
        ));
        if fr {
            format!(
                " À `{variable}` = {v}, le pic réservé mesuré est {m} et le prédit {p} ({change})."
            )
        } else {
            format!(
                " At `{variable}` = {v}, the measured peak reserved is {m} and the predicted one {p} ({change})."
            )
        }
    });
    let (measured, predicted) = (lang.size(outside.0), lang.size(Some(outside.1)));
    if fr {
        format!(
            "Les deux frontières diffèrent.{peaks} Hors de l’allocateur, la mesure compte {measured} et la prédiction {predicted}."
        )
    } else {
        format!(
            "The two frontiers differ.{peaks} Outside PyTorch's allocator, the measurement counts {measured} and the prediction {predicted}."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::format::{Lang, Units};

    #[test]
    fn the_series_sentences_in_each_language() {
        let en = Style::new(Lang::En, Units::Gib);
        let fr = Style::new(Lang::Fr, Units::Gib);
        let f: FrontierRecord = serde_json::from_value(serde_json::json!({
            "variable": "batch", "last_success": 1536, "first_failure": null, "resolution": 8,
            "trials": 9, "strategy": "grow-then-bisect", "hint": null, "budget_exhausted": true
        }))
        .unwrap();
        assert_eq!(
            frontier(&f, en),
            "Frontier of `batch`: last success 1,536, first failure none (9 trials, resolution 8)"
        );
        assert_eq!(
            frontier(&f, fr),
            "Frontière de `batch`\u{a0}: dernier succès 1\u{202f}536, premier échec aucun (9 essais, résolution 8)"
        );
        assert_eq!(
            largest_tested("batch", 1536, fr),
            "Plus grande charge testée avec succès\u{a0}: `batch` = 1\u{202f}536"
        );
        assert_eq!(
            alloc_confs_compared("default", en),
            "Allocator settings compared in fresh processes; the change is against default (complete trials only: a partial peak compares nothing)."
        );
    }
}
