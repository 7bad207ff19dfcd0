//! The words of `fiche/observed.rs`, English and French side by side.

use crate::report::format::Style;
use crate::schema::measure::{CacheCheck, Failure};

catalog! {
    /// The words of `fiche/observed.rs`.
    pub enum ObservedText {
        EndReadingsWorkerEnded =>
            "no end readings: the worker ended during this phase",
            "pas de lecture de fin : le processus s’est arrêté pendant cette phase";
        Device =>
            "device",
            "appareil";
        EndAllocated =>
            "end allocated",
            "alloué en fin";
        EndReserved =>
            "end reserved",
            "réservé en fin";
        ReservedAllocatedEndSame =>
            "reserved − allocated at the end (same checkpoint)",
            "réservé − alloué en fin (même point de contrôle)";
        PeaksAbsoluteOverEach =>
            "Peaks are absolute over each phase and include what already existed at its start. Reserved − allocated is shown only from two readings of the same checkpoint, never as peak reserved − peak allocated, which describes no single moment.",
            "Les pics sont absolus sur chaque phase et incluent ce qui existait à son début. L’écart réservé − alloué n’est montré qu’à partir de deux lectures d’un même point de contrôle, jamais comme pic réservé − pic alloué, qui ne décrit aucun instant.";
        EndLevelMinusStart =>
            "An end level minus a start level is not the volume of the phase's temporary tensors: earlier objects may have been freed during the phase.",
            "Un niveau de fin moins un niveau de départ n’est pas le volume des tenseurs temporaires de la phase : des objets antérieurs ont pu être libérés pendant la phase.";
        DriverView =>
            "Driver's view",
            "Vue du pilote";
        NotSampled =>
            "not sampled",
            "non échantillonnée";
        ProcessPeakNvml =>
            "process peak (NVML)",
            "pic du processus (NVML)";
        OutsidePytorchAllocatorAtEnd =>
            "outside PyTorch's allocator at the end (CUDA context, libraries; not a leak by itself)",
            "hors de l’allocateur PyTorch en fin (contexte CUDA, bibliothèques ; pas une fuite en soi)";
        Samples =>
            "samples",
            "échantillons";
        PredictedSameCodeData =>
            "Predicted (the same code on data-less tensors for this card, run after the measurement; a prediction, not a measurement) next to observed:",
            "Prédit (le même code sur des tenseurs sans données pour cette carte, après la mesure ; une prédiction, pas une mesure) à côté de l’observé :";
        PredictedPeakAllocated =>
            "predicted peak allocated",
            "pic alloué prévu";
        Error =>
            "error",
            "écart";
        PredictedPeakReserved =>
            "predicted peak reserved",
            "pic réservé prévu";
        LargestPredictedPeak =>
            "largest at the predicted peak",
            "le plus gros au pic prévu";
        PeaksPerPhaseFirst =>
            "Peaks per phase (first device)",
            "Pics par phase (premier appareil)";
        DriverViewProcessPeak =>
            "driver's view (process peak)",
            "vue du pilote (pic du processus)";
    }
}

/// Why the driver was not read: the result's English words, or in French a pointer to them.
pub fn driver_reason(why: &str, lang: Style) -> String {
    if lang.fr() {
        "pilote NVIDIA absent ou illisible (la raison exacte est dans le résultat joint)".into()
    } else {
        why.to_string()
    }
}

/// A prediction's storage category in the reader's language.
pub fn storage_category(c: &str, lang: Style) -> String {
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
        "dequantized weight" => "poids déquantifié",
        "allocator rounding" => "arrondi de l’allocateur",
        "other" => "autres",
        other => other,
    }
    .to_string()
}

/// Where the workload failed, with what; PyTorch's message stays English (in French, it is in the
/// attached result).
pub fn failure(f: &Failure, lang: Style) -> String {
    let phase = f.phase.as_deref().unwrap_or("?");
    let error = f.error_type.as_deref().unwrap_or("");
    if lang.fr() {
        format!(
            "Échec dans `{phase}`\u{a0}: `{error}`  — un pic partiel avant une saturation ne constitue pas le besoin mémoire d’une exécution complète."
        )
    } else {
        let message = f.message.as_deref().unwrap_or_default();
        format!(
            "Failure in `{phase}`: `{error}` {message} — a partial peak before a failure is not the memory need of a complete run."
        )
    }
}

/// The KV cache after a phase: observed against estimated.
pub fn kv_cache(c: &CacheCheck, lang: Style) -> String {
    let (phase, observed) = (&c.phase, lang.size(c.observed_bytes));
    let (estimated, difference) = (
        lang.size(Some(c.estimated_bytes)),
        lang.percent(c.difference_pct),
    );
    if lang.fr() {
        format!(
            "Cache KV après `{phase}`\u{a0}: observé {observed} / estimé {estimated} ({difference})"
        )
    } else {
        format!(
            "KV cache after `{phase}`: observed {observed} / estimated {estimated} ({difference})"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::format::{Lang, Units};

    #[test]
    fn the_kv_cache_observed_against_estimated() {
        let c: CacheCheck = serde_json::from_value(serde_json::json!({
            "phase": "decode", "index": 3, "tokens": 4096, "estimated_bytes": 1u64 << 30,
            "observed_bytes": 3u64 << 29, "difference_bytes": 1u64 << 29, "difference_pct": 50.0,
            "basis": "end of decode"
        }))
        .unwrap();
        assert_eq!(
            kv_cache(&c, Style::new(Lang::En, Units::Gib)),
            "KV cache after `decode`: observed 1.50\u{a0}GiB / estimated 1.00\u{a0}GiB (+50.0\u{a0}%)"
        );
        assert_eq!(
            kv_cache(&c, Style::new(Lang::Fr, Units::Gib)),
            "Cache KV après `decode`\u{a0}: observé 1,50\u{a0}Gio / estimé 1,00\u{a0}Gio (+50,0\u{a0}%)"
        );
    }
}
