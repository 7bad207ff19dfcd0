//! The words of `fiche/verdict.rs`, English and French side by side.

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
        DidNotCompleteStopped =>
            "did not complete: it stopped in",
            "n’a pas abouti : arrêt dans";
        PartialPeakBeforeFailure =>
            "a partial peak before a failure is not the need of a complete run",
            "un pic partiel avant un échec n’est pas le besoin d’une exécution complète";
        PeakMatters =>
            "Peak that matters",
            "Pic qui compte";
        ReservedIn =>
            "reserved, in",
            "réservés, dans";
        LargestTermGap =>
            "Largest term of the gap",
            "Plus gros poste de l’écart";
        StillAssumed =>
            "Still assumed",
            "Encore supposé";
        EstimateAttachedEvaluationExport =>
            "no estimate attached; evaluation, export and variations not covered by a series",
            "aucune estimation jointe ; évaluation, export et variations hors série";
        TermsOfEstimateAndVariations =>
            "term(s) of the estimate, and the variations listed",
            "poste(s) de l’estimation, et les variations listées";
        CapacityMargin =>
            "Capacity and margin",
            "Capacité et marge";
        NvmlTotal =>
            "NVML's total",
            "total de NVML";
        TorchTotalMemory =>
            "PyTorch's total_memory",
            "total_memory de PyTorch";
        Margin =>
            "margin",
            "marge";
        ShortBy =>
            "short by",
            "manque";
        AgainstDriverView =>
            "against the driver's view",
            "face à la vue du pilote";
        AgainstPeakReservedNoContext =>
            "against the peak reserved; the CUDA context is not counted",
            "face au pic réservé ; le contexte CUDA n’est pas compté";
        LargestLoadValidated =>
            "Largest load validated",
            "Plus grande charge validée";
        LoadOnlySeriesAttached =>
            "this load only (no series attached)",
            "cette charge seulement (aucune série jointe)";
        Validated =>
            "validated",
            "validé";
        LoadSeriesCompleted =>
            "no load of the series completed",
            "aucune charge de la série n’a abouti";
        FrontierBetween =>
            "frontier between",
            "frontière entre";
    }
}
