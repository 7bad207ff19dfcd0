//! The words of `fiche/timeline.rs`, English and French side by side.

catalog! {
    /// The words of `fiche/timeline.rs`.
    pub enum TimelineText {
        Timeline =>
            "Timeline",
            "Chronologie";
        PytorchSnapshot =>
            "PyTorch's snapshot:",
            "instantané de PyTorch\u{a0}:";
        OpenInMemoryViz =>
            "— open it in https://pytorch.org/memory_viz",
            "— à ouvrir dans https://pytorch.org/memory_viz";
        SnapshotWasWritten =>
            "no snapshot was written",
            "aucun instantané écrit";
        SecondsSinceFirstRecorded =>
            "seconds since the first recorded event",
            "secondes depuis le premier événement enregistré";
        EventAllocatorTrace =>
            "event of the allocator's trace",
            "événement de la trace de l’allocateur";
        AllocatedReservedOverTime =>
            "allocated and reserved over time (the allocator's trace)",
            "alloué et réservé au fil du temps (trace de l’allocateur)";
        PhasesMarkedChart =>
            "Phases marked on the chart:",
            "Phases marquées sur le graphique\u{a0}:";
        Phase =>
            "phase",
            "phase";
        PeakAllocatedTrace =>
            "peak allocated (trace)",
            "pic alloué (trace)";
        PeakReservedTrace =>
            "peak reserved (trace)",
            "pic réservé (trace)";
        LargestAlivePeak =>
            "largest alive at the peak",
            "plus grande allocation vivante au pic";
        AllocatedAt =>
            "allocated at",
            "allouée à";
    }
}
