//! The words several parts of the fiche share (headings, statuses, units), English and French
//! side by side.

catalog! {
    /// Words used in more than one file.
    pub enum CommonText {
        NullNotRead =>
            "null (not read)",
            "null (non lu)";
        Verdict =>
            "Verdict",
            "Verdict";
        Colon =>
            ":",
            "\u{a0}:";
        AssumedHeading =>
            "Assumed",
            "Supposé";
        ConfigurationChosen =>
            "Configuration chosen",
            "Choix retenu";
        WhyPeakExceedsEstimate =>
            "Why the peak exceeds the estimate",
            "Pourquoi le pic dépasse l’estimation";
        Observed =>
            "observed",
            "observé";
        PeakAllocated =>
            "peak allocated",
            "pic alloué";
        PeakReserved =>
            "peak reserved",
            "pic réservé";
        DriverView =>
            "driver's view",
            "vue du pilote";
        Dimensions =>
            "Dimensions",
            "Dimensions";
        Environment =>
            "Environment",
            "Environnement";
        ObservedHeading =>
            "Observed",
            "Observé";
        Status =>
            "status",
            "statut";
        Ok =>
            "ok",
            "réussi";
        Failed =>
            "failed",
            "échoué";
        Crashed =>
            "crashed",
            "planté";
        TimedOut =>
            "timed out",
            "délai dépassé";
        Interrupted =>
            "interrupted",
            "interrompu";
        Terminated =>
            "terminated",
            "arrêté";
        PytorchOrGpuMissing =>
            "PyTorch or GPU missing",
            "PyTorch ou GPU absent";
        ByteSymbol =>
            "B",
            "o";
    }
}
