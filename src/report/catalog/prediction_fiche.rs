//! The words of `fiche/prediction_fiche.rs` (the fiche of a prediction), English and French side by side:
//! every figure there is said to be predicted, never measured or observed.

use crate::report::format::{Lang, Style};

catalog! {
    /// The words of `fiche/prediction_fiche.rs`.
    pub enum PredictedText {
        PredictedHeading =>
            "Predicted (not measured)",
            "Prédit (pas mesuré)";
        Target =>
            "Target",
            "Cible";
        AtPeak =>
            "At the predicted peak",
            "Au pic prédit";
        Prediction =>
            "Prediction",
            "Prédiction";
        Created =>
            "created",
            "créée";
        LowerBound =>
            "lower bound (the data-dependent sizes at their smallest)",
            "borne basse (tailles dépendant des données au plus petit)";
        AssumedTypical =>
            "assumed, at a published typical share of the data-dependent sizes",
            "supposé, à une part typique publiée des tailles dépendant des données";
        DequantizedPredicted =>
            "predicted, not assumed (the replay ran the library's own dequantization)",
            "prédit, pas supposé (le rejeu a exécuté la déquantification de la bibliothèque)";
        DequantizedMade =>
            "dequantized weights made, the largest",
            "poids déquantifiés créés, le plus grand";
        DequantizedAtPeak =>
            "alive at the predicted peak",
            "vivants au pic prédit";
        PredictedPeakAllocated =>
            "predicted peak allocated",
            "pic alloué prédit";
        PredictedPeakReserved =>
            "predicted peak reserved",
            "pic réservé prédit";
        PredictedEndAllocated =>
            "predicted end allocated",
            "alloué en fin prédit";
        PredictedEndReserved =>
            "predicted end reserved",
            "réservé en fin prédit";
        PredictedDriverView =>
            "predicted driver's view",
            "vue du pilote prédite";
        Category =>
            "category",
            "catégorie";
        Module =>
            "module",
            "module";
        Bytes =>
            "alive at the peak",
            "vivants au pic";
        ChartTitle =>
            "Predicted peaks per phase (not measured)",
            "Pics prédits par phase (pas mesurés)";
        AllocatorModel =>
            "Allocator model",
            "Modèle de l’allocateur";
        NotModelled =>
            "Not modelled",
            "Non modélisé";
        PlaceholderReads =>
            "Values read from data, answered with placeholders",
            "Valeurs lues dans les données, remplacées par des valeurs types";
        Notes =>
            "Notes of the prediction",
            "Notes de la prédiction";
        MeasureToConfirm =>
            "Predicted, not measured: only a measurement on the card (iteragpu measure) confirms it.",
            "Prédit, pas mesuré : seule une mesure sur la carte (iteragpu measure) le confirme.";
        Version =>
            "Versions",
            "Versions";
        CodeHash =>
            "code (SHA-256)",
            "code (SHA-256)";
        OutOfMemory =>
            "Predicted out of memory",
            "Manque de mémoire prédit";
        OomClass =>
            "Out-of-memory class",
            "Classe du manque de mémoire";
        LargerCard =>
            "What a card needs",
            "Ce qu’il faut à une carte";
        AtOom =>
            "At the predicted out-of-memory",
            "Au manque de mémoire prédit";
        StatusNote =>
            "`out_of_memory`: the figures stop before the allocation that did not fit (not a peak of the whole phase); `not_reached`: the phase would start after the out-of-memory, so it has no figure (not 0).",
            "`out_of_memory` : les chiffres s’arrêtent avant l’allocation qui n’a pas tenu (ce n’est pas le pic de toute la phase) ; `not_reached` : la phase commencerait après le manque de mémoire, elle n’a donc aucun chiffre (pas 0).";
        AliveAtOom =>
            "alive at the out-of-memory",
            "vivants au manque de mémoire";
        NotReached =>
            "not reached",
            "non atteinte";
        Frontier =>
            "Predicted frontier",
            "Frontière prédite";
    }
}

/// The verdict's predicted frontier (`sweep --predict --search frontier`): the largest value
/// predicted to fit the card at the series' capacity, the first predicted not to, and the phase
/// and allocation that decide.
pub fn frontier(
    f: &crate::schema::series::FrontierRecord,
    card: &str,
    capacity: Option<&crate::schema::series::Limit>,
    lang: Style,
) -> String {
    let fr = lang.fr();
    let n = |v: u64| lang.integer(u128::from(v));
    let variable = f.variable.name();
    let on = capacity.map_or(card.to_string(), |l| {
        format!("{card} ({}, `{}`)", lang.size(Some(l.bytes)), l.source)
    });
    let why = f.deciding.as_ref().map_or(String::new(), |d| {
        let phase = &d.phase;
        match &d.allocation {
            Some(a) => {
                let category = super::observed::storage_category(&a.category, lang);
                let shape = a
                    .shape
                    .iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                let module = match (a.module.as_deref(), fr) {
                    (Some(m), true) => format!("dans `{m}`"),
                    (Some(m), false) => format!("in `{m}`"),
                    (None, true) => "hors de tout module".to_string(),
                    (None, false) => "outside any module".to_string(),
                };
                let at = match (&a.file, a.line) {
                    (Some(f), Some(l)) => format!(", `{f}:{l}`"),
                    (Some(f), None) => format!(", `{f}`"),
                    _ => String::new(),
                };
                let size = lang.size(Some(a.bytes));
                let dtype = &a.dtype;
                if fr {
                    format!(
                        " (phase `{phase}`, allocation de {size} {dtype} [{shape}] {category} {module}{at})"
                    )
                } else {
                    format!(
                        " (phase `{phase}`, allocation of {size} {dtype} [{shape}] {category} {module}{at})"
                    )
                }
            }
            None => {
                let view = lang.size(d.driver_view_bytes);
                if fr {
                    format!(" (phase `{phase}`, vue du pilote {view} au-delà de la capacité)")
                } else {
                    format!(" (phase `{phase}`, driver's view {view} over the capacity)")
                }
            }
        }
    });
    match (f.last_success, f.first_failure, fr) {
        (Some(last), Some(first), false) => format!(
            "predicted: `{variable}` up to {} fits {on}; {} does not{why}",
            n(last),
            n(first)
        ),
        (Some(last), Some(first), true) => format!(
            "prédit : `{variable}` jusqu’à {} tient sur {on} ; {} ne tient pas{why}",
            n(last),
            n(first)
        ),
        (Some(last), None, false) => format!(
            "predicted: `{variable}` up to {} fits {on}, the whole range searched: no value predicted not to fit",
            n(last)
        ),
        (Some(last), None, true) => format!(
            "prédit : `{variable}` jusqu’à {} tient sur {on}, toute la plage cherchée : aucune valeur prédite hors capacité",
            n(last)
        ),
        (None, Some(first), false) => format!(
            "predicted: not even `{variable}` = {} fits {on}{why}",
            n(first)
        ),
        (None, Some(first), true) => format!(
            "prédit : même `{variable}` = {} ne tient pas sur {on}{why}",
            n(first)
        ),
        (None, None, false) => format!(
            "predicted: no value of `{variable}` decided on {on} (every prediction a gap; see the series)"
        ),
        (None, None, true) => format!(
            "prédit : aucune valeur de `{variable}` tranchée sur {on} (chaque prédiction est une lacune ; voir la série)"
        ),
    }
}

/// A fiche made of a predicted series alone: the run shown is one of its trials.
pub fn trial_shown(variable: &str, value: &str, fits: bool, lang: Style) -> String {
    match (lang.fr(), fits) {
        (false, true) => format!(
            "Made of a predicted series alone: the prediction shown is its trial at `{variable}` = {value}, the largest predicted to fit."
        ),
        (false, false) => format!(
            "Made of a predicted series alone: the prediction shown is its trial at `{variable}` = {value}, the first predicted not to fit (none fits)."
        ),
        (true, true) => format!(
            "Faite d’une série prédite seule : la prédiction montrée est son essai à `{variable}` = {value}, la plus grande valeur qui tient selon la prédiction."
        ),
        (true, false) => format!(
            "Faite d’une série prédite seule : la prédiction montrée est son essai à `{variable}` = {value}, la première valeur qui ne tient pas selon la prédiction (aucune ne tient)."
        ),
    }
}

/// The verdict's source line: what a prediction is, for which card and with which torch.
pub fn source(card: &str, torch: Option<&str>, lang: Style) -> String {
    let torch = torch.unwrap_or("?");
    match lang.lang {
        Lang::En => format!(
            "predicted, not measured: the workload's own code on data-less (fake) CUDA tensors for {card}, with torch {torch}, replayed through the caching-allocator model"
        ),
        Lang::Fr => format!(
            "prédit, pas mesuré : le code même de la charge sur des tenseurs CUDA sans données (factices) pour {card}, avec torch {torch}, rejoué dans le modèle de l’allocateur"
        ),
    }
}

/// Whether the need fits the target: `margin` = capacity − need (negative: short by); `limited`
/// when the capacity is a `--memory-limit` on the card, not its whole `total_memory`.
pub fn fit(
    card: &str,
    capacity: u64,
    limited: bool,
    need_is_driver_view: bool,
    margin: i128,
    lang: Style,
) -> String {
    let cap = format!(
        "{} {}",
        if limited {
            "--memory-limit"
        } else {
            "total_memory"
        },
        lang.size(Some(capacity))
    );
    let abs = lang.size(Some(margin.unsigned_abs() as u64));
    let pct = lang.percent(Some(100.0 * margin as f64 / capacity as f64));
    let pct = pct.trim_start_matches('+');
    let fr = lang.lang == Lang::Fr;
    let against = match (need_is_driver_view, fr) {
        (true, false) => "against the predicted driver's view",
        (true, true) => "face à la vue du pilote prédite",
        (false, false) => "against the predicted peak reserved; the CUDA context is not counted",
        (false, true) => "face au pic réservé prédit ; le contexte CUDA n’est pas compté",
    };
    match (margin >= 0, fr) {
        (true, false) => {
            format!("predicted to fit {card} ({cap}) — margin {abs} ({pct}, {against})")
        }
        (false, false) => {
            format!("predicted NOT to fit {card} ({cap}) — short by {abs} ({pct}, {against})")
        }
        (true, true) => {
            format!("prédit pour tenir sur {card} ({cap}) — marge {abs} ({pct}, {against})")
        }
        (false, true) => {
            format!("prédit pour NE PAS tenir sur {card} ({cap}) — manque {abs} ({pct}, {against})")
        }
    }
}

/// The phase that decides: its predicted peak reserved, and the driver's view when predicted.
pub fn deciding(phase: &str, reserved: u64, driver_view: Option<u64>, lang: Style) -> String {
    let reserved = lang.size(Some(reserved));
    let driver = driver_view.map_or(String::new(), |d| {
        let d = lang.size(Some(d));
        match lang.lang {
            Lang::En => format!(" — predicted driver's view {d}"),
            Lang::Fr => format!(" — vue du pilote prédite {d}"),
        }
    });
    match lang.lang {
        Lang::En => format!("{reserved} reserved, predicted, in `{phase}`{driver}"),
        Lang::Fr => format!("{reserved} réservés, prédits, dans `{phase}`{driver}"),
    }
}

/// The largest categories and modules alive at the deciding peak, already worded; `elsewhere`:
/// that peak's phase when it is not the phase of the peak that matters.
pub fn at_peak(
    categories: &[String],
    modules: &[String],
    elsewhere: Option<&str>,
    lang: Style,
) -> String {
    let (c, m, sep) = match lang.lang {
        Lang::En => ("categories", "modules", "; "),
        Lang::Fr => ("catégories", "modules", "\u{a0}; "),
    };
    let mut parts = Vec::new();
    if let Some(phase) = elsewhere {
        parts.push(match lang.lang {
            Lang::En => format!("at the highest peak allocated, in `{phase}`:"),
            Lang::Fr => format!("au plus haut pic alloué, dans `{phase}` :"),
        });
    }
    if !categories.is_empty() {
        parts.push(format!("{c} {}", categories.join(sep)));
    }
    if !modules.is_empty() {
        parts.push(format!("{m} {}", modules.join(sep)));
    }
    match parts.split_first() {
        Some((head, rest)) if elsewhere.is_some() => format!("{head} {}", rest.join(" — ")),
        _ => parts.join(" — "),
    }
}

/// Where the target's figures come from.
pub fn target(capacity_source: &str, context: u64, context_source: &str, lang: Style) -> String {
    let context = lang.size(Some(context));
    match lang.lang {
        Lang::En => format!(
            "total_memory: {capacity_source}; outside PyTorch's allocator {context} ({context_source})"
        ),
        Lang::Fr => format!(
            "total_memory : {capacity_source} ; hors de l’allocateur de PyTorch {context} ({context_source})"
        ),
    }
}

/// A prediction that did not complete: its status, and where it stopped.
pub fn incomplete(status: &str, failure: Option<&str>, lang: Style) -> String {
    let failure = failure.map_or(String::new(), |f| format!(" ({f})"));
    match lang.lang {
        Lang::En => format!(
            "the prediction is `{status}`{failure}: its phases not predicted are not in the peak"
        ),
        Lang::Fr => format!(
            "la prédiction est `{status}`{failure} : ses phases non prédites ne sont pas dans le pic"
        ),
    }
}

/// What a prediction still assumes: its allocator model, what it leaves out, the values it read
/// from data, and the estimate's assumed terms (`None`: no estimate attached).
pub fn still_assumed(
    not_modelled: usize,
    placeholder_reads: usize,
    estimate_terms: Option<usize>,
    lang: Style,
) -> String {
    let (n, r) = (
        lang.integer(not_modelled as u128),
        lang.integer(placeholder_reads as u128),
    );
    let estimate = estimate_terms.map(|t| lang.integer(t as u128));
    match (lang.lang, estimate) {
        (Lang::En, None) => format!(
            "the allocator model, {n} thing(s) not modelled, {r} value(s) read from data; no estimate attached"
        ),
        (Lang::En, Some(t)) => format!(
            "the allocator model, {n} thing(s) not modelled, {r} value(s) read from data; {t} term(s) of the estimate"
        ),
        (Lang::Fr, None) => format!(
            "le modèle de l’allocateur, {n} élément(s) non modélisé(s), {r} valeur(s) lue(s) dans les données ; aucune estimation jointe"
        ),
        (Lang::Fr, Some(t)) => format!(
            "le modèle de l’allocateur, {n} élément(s) non modélisé(s), {r} valeur(s) lue(s) dans les données ; {t} poste(s) de l’estimation"
        ),
    }
}

/// A predicted out-of-memory: on which card and capacity, in which phase, the allocation that did
/// not fit (its size, module, category and the user's line), the memory still free, and the
/// phases after it not reached.
pub struct OomWords<'a> {
    pub card: &'a str,
    pub capacity: u64,
    pub capacity_source: &'a str,
    pub phase: Option<&'a str>,
    pub requested: u64,
    pub module: Option<&'a str>,
    /// Already worded in the fiche's language.
    pub category: &'a str,
    pub at: Option<String>,
    pub free: u64,
    pub not_reached: &'a [&'a str],
}

pub fn out_of_memory(w: &OomWords, lang: Style) -> String {
    let (cap, req, free) = (
        lang.size(Some(w.capacity)),
        lang.size(Some(w.requested)),
        lang.size(Some(w.free)),
    );
    let fr = lang.fr();
    let phase = w.phase.map_or_else(
        || {
            if fr {
                "hors de toute phase"
            } else {
                "outside any phase"
            }
            .to_string()
        },
        |p| {
            if fr {
                format!("dans la phase `{p}`")
            } else {
                format!("in phase `{p}`")
            }
        },
    );
    let module = w.module.map_or_else(
        || {
            if fr {
                "hors de tout module"
            } else {
                "outside any module"
            }
            .to_string()
        },
        |m| format!("`{m}`"),
    );
    let at = w.at.as_ref().map_or(String::new(), |a| format!(", `{a}`"));
    let later = if w.not_reached.is_empty() {
        String::new()
    } else {
        let names = w
            .not_reached
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ");
        if fr {
            format!(" — phases suivantes non atteintes ({names})")
        } else {
            format!(" — later phases not reached ({names})")
        }
    };
    let (card, source) = (w.card, w.capacity_source);
    if fr {
        format!(
            "prédit en manque de mémoire sur {card} ({cap}, {source}) {phase} : une allocation de {req} (module {module}, catégorie {}{at}) avec {free} libres{later}",
            w.category
        )
    } else {
        format!(
            "predicted out of memory on {card} ({cap}, {source}) {phase}: a {req} allocation (module {module}, category {}{at}) with {free} free{later}",
            w.category
        )
    }
}

/// The post-mortem's class, why, and the first thing to try.
pub fn oom_class(d: &crate::explain::oom::Diagnosis, lang: Style) -> String {
    let class = super::ledger::oom_class(d.class, lang);
    let why = super::ledger::oom_why(d.class, lang);
    let first = super::ledger::oom_advice(d, lang).into_iter().next();
    match (first, lang.fr()) {
        (Some(a), true) => format!("{class} : {why} — {a}"),
        (Some(a), false) => format!("{class}: {why} — try: {a}"),
        (None, true) => format!("{class} : {why}"),
        (None, false) => format!("{class}: {why}"),
    }
}

/// What a card needs to hold the whole workload: the peak with unlimited memory, against the
/// capacity the prediction applied and, under `--memory-limit`, the whole card's.
pub fn larger_card(
    reserved: u64,
    driver_view: u64,
    capacity: u64,
    card: Option<(&str, u64)>,
    lang: Style,
) -> String {
    let (r, d) = (lang.size(Some(reserved)), lang.size(Some(driver_view)));
    let fr = lang.fr();
    let against = if driver_view > capacity {
        let short = lang.size(Some(driver_view - capacity));
        if fr {
            format!("manque {short} à la capacité appliquée")
        } else {
            format!("short by {short} of the capacity applied")
        }
    } else if fr {
        "dans la capacité appliquée : c’est le découpage du cache, pas le total, qui échoue".into()
    } else {
        "within the capacity applied: the cache's pieces fail, not the total".into()
    };
    let whole = card.map_or(String::new(), |(name, total)| {
        let t = lang.size(Some(total));
        match (driver_view <= total, fr) {
            (true, false) => format!("; {name}'s whole total_memory ({t}) would hold it"),
            (false, false) => {
                format!("; {name}'s whole total_memory ({t}) would not hold it either")
            }
            (true, true) => {
                format!(" ; toute la mémoire de {name} (total_memory {t}) la tiendrait")
            }
            (false, true) => format!(
                " ; toute la mémoire de {name} (total_memory {t}) ne la tiendrait pas non plus"
            ),
        }
    });
    if fr {
        format!(
            "avec une mémoire illimitée, pic prédit de {r} réservés, vue du pilote {d} : {against}{whole} (`iteragpu cards --from` lit ce besoin)"
        )
    } else {
        format!(
            "with unlimited memory the predicted peak is {r} reserved, a driver's view of {d}: {against}{whole} (`iteragpu cards --from` reads this need)"
        )
    }
}

/// The ledger of a predicted out-of-memory: what it is built on, and how to read it.
pub fn oom_explained(phase: &str, index: u64, device: &str, lang: Style) -> String {
    if lang.fr() {
        format!(
            "La prédiction s’arrête sur un manque de mémoire dans `{phase}` #{index} (`{device}`)\u{a0}: ce tableau est ce qui était vivant quand l’allocation n’a pas tenu — c’est ce moment qui explique l’échec, pas le pic des phases qui ont tourné avant. L’allocation elle-même n’y figure pas : elle n’a jamais été faite."
        )
    } else {
        format!(
            "The prediction stops at an out-of-memory in `{phase}` #{index} (`{device}`): this table is what was alive when the allocation did not fit — that moment explains the failure, not the peak of the phases that ran before it. The allocation itself is not in it: it was never made."
        )
    }
}
