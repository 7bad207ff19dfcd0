//! The words of `fiche/observed.rs`, English and French side by side.

use crate::report::format::Style;

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
        FailureIn =>
            "Failure in",
            "Échec dans";
        PartialPeakBeforeFailure =>
            "a partial peak before a failure is not the memory need of a complete run.",
            "un pic partiel avant une saturation ne constitue pas le besoin mémoire d’une exécution complète.";
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
        KvCacheAfter =>
            "KV cache after",
            "Cache KV après";
        Estimated =>
            "estimated",
            "estimé";
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
        "allocator rounding" => "arrondi de l’allocateur",
        "other" => "autres",
        other => other,
    }
    .to_string()
}
