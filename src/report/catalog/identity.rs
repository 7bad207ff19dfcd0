//! The words of `fiche/identity.rs`, English and French side by side.

catalog! {
    /// The words of `fiche/identity.rs`.
    pub enum IdentityText {
        Identity =>
            "Identity",
            "Identité de l’essai";
        Workload =>
            "workload",
            "charge";
        ModelOrCode =>
            "model or code",
            "modèle ou code";
        Revision =>
            "revision",
            "révision";
        MeasuringCode =>
            "measuring code",
            "code de mesure";
        Seed =>
            "seed",
            "graine";
        Run =>
            "run",
            "exécution";
        InputsProcessedShapes =>
            "inputs (processed shapes)",
            "entrées (formes traitées)";
        Dimension =>
            "dimension",
            "dimension";
        Value =>
            "value",
            "valeur";
        CapacityTorchTotalMemory =>
            "capacity (PyTorch total_memory)",
            "capacité (total_memory de PyTorch)";
        Driver =>
            "driver",
            "pilote";
        CapacityNvml =>
            "capacity (NVML)",
            "capacité (NVML)";
        NoNvidiaDriverView =>
            "no NVIDIA driver's view in this run",
            "pas de vue du pilote NVIDIA dans cet essai";
        AllocatorBackend =>
            "allocator backend",
            "backend de l’allocateur";
        AllocatorSettings =>
            "allocator settings",
            "réglages de l’allocateur";
        NoneSet =>
            "none set",
            "aucun";
        Scope =>
            "Scope",
            "Périmètre";
        Phases =>
            "phases",
            "phases";
        FirstPass =>
            "first pass",
            "premier passage";
        Protocol =>
            "protocol",
            "protocole";
        WarmUpPasses =>
            "warm-up passes",
            "passages d’échauffement";
        Repeats =>
            "repeats",
            "répétitions";
        Process =>
            "process",
            "processus";
    }
}
