//! The words of `fiche/series.rs`, English and French side by side.

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
        LargestLoadTestedSuccessfully =>
            "Largest load tested successfully:",
            "Plus grande charge testée avec succès\u{a0}:";
        FrontierOf =>
            "Frontier of",
            "Frontière de";
        LastSuccess =>
            "last success",
            "dernier succès";
        FirstFailure =>
            "first failure",
            "premier échec";
        Trials =>
            "trials",
            "essais";
        Resolution =>
            "resolution",
            "résolution";
        EmulatedLimitNotReal =>
            "Emulated limit (not a real card)",
            "Limite émulée (pas une vraie carte)";
        EmulatedLimit =>
            "emulated limit",
            "limite émulée";
        PeakReservedAgainst =>
            "Peak reserved against",
            "Pic réservé en fonction de";
        AllocatorSettingsComparedFresh =>
            "Allocator settings compared in fresh processes; the change is against",
            "Réglages de l’allocateur comparés dans des processus neufs ; l’écart est mesuré par rapport à";
        CompleteTrialsOnlyPartial =>
            "complete trials only: a partial peak compares nothing",
            "essais complets seulement : un pic partiel ne se compare pas";
        PeakReservedComma =>
            "peak reserved,",
            "pic réservé,";
        Change =>
            "change",
            "écart";
        NotRun =>
            "not run",
            "non exécuté";
    }
}
