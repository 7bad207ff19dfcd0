//! The words of `report/snapshot.rs` (`explain --snapshot`), English and French side by side.

use crate::explain::snapshot::view::PhasesFrom;
use crate::report::format::Style;

catalog! {
    /// The words of `report/snapshot.rs`.
    pub enum SnapshotText {
        Title =>
            "PyTorch memory snapshot",
            "Instantané mémoire de PyTorch";
        AtDump =>
            "At dump time (the file's own numbers)",
            "Au moment de l’instantané (les nombres du fichier)";
        Quantity =>
            "quantity",
            "grandeur";
        Value =>
            "figure",
            "chiffre";
        Segments =>
            "segments",
            "segments";
        Reserved =>
            "reserved (Σ segments' total_size)",
            "réservé (Σ total_size des segments)";
        Allocated =>
            "allocated (Σ active_allocated blocks)",
            "alloué (Σ blocs active_allocated)";
        ReservedMinusAllocated =>
            "reserved − allocated (fragmentation and cache)",
            "réservé − alloué (fragmentation et cache)";
        FreeBlocks =>
            "free (inactive) blocks",
            "blocs libres (inactifs)";
        FreeInSplit =>
            "free in split segments (empty_cache cannot return it)",
            "libre dans des segments découpés (empty_cache ne peut le rendre)";
        LargestFreeBlock =>
            "largest free block",
            "plus grand bloc libre";
        Peak =>
            "Peak (derived by replaying the trace)",
            "Pic (déduit en rejouant la trace)";
        When =>
            "when (s since the first entry)",
            "quand (s depuis la première entrée)";
        OverTime =>
            "allocated and reserved over time (derived from the trace)",
            "alloué et réservé au fil du temps (déduit de la trace)";
        Seconds =>
            "seconds since the first entry",
            "secondes depuis la première entrée";
        Entries =>
            "entry of the trace",
            "entrée de la trace";
        Phases =>
            "Phases",
            "Phases";
        Start =>
            "start (s)",
            "début (s)";
        LargestAlive =>
            "Largest allocations alive at the peak",
            "Plus grandes allocations vivantes au pic";
        Size =>
            "block size",
            "taille du bloc";
        UserFrame =>
            "allocated at (user code)",
            "allouée à (code de l’utilisateur)";
        StackTop =>
            "innermost Python frame",
            "cadre Python le plus interne";
        SegmentMap =>
            "Segment map (largest segments)",
            "Carte des segments (les plus grands)";
        Address =>
            "address",
            "adresse";
        Kind =>
            "type",
            "type";
        TotalSize =>
            "total_size",
            "total_size";
        AllocatedSize =>
            "allocated_size",
            "allocated_size";
        FreeBlockCount =>
            "free blocks",
            "blocs libres";
        LargestAtDump =>
            "Largest allocations at dump time",
            "Plus grandes allocations au moment de l’instantané";
        NoTrace =>
            "No timeline: the snapshot holds no trace for this device (history not recorded, or max_entries=0); only the state at dump time is known.",
            "Pas de chronologie\u{a0}: l’instantané ne contient aucune trace pour ce périphérique (historique non enregistré, ou max_entries=0)\u{a0}; seul l’état au moment de l’instantané est connu.";
        Truncated =>
            "The trace's first entries are missing:",
            "Les premières entrées de la trace manquent\u{a0}:";
        Notes =>
            "Notes of the reader",
            "Remarques du lecteur";
        NoneAlive =>
            "none of the trace's allocations was alive at the peak",
            "aucune allocation de la trace n’était vivante au pic";
    }
}

/// Where the phases come from, in one sentence.
pub fn phases_from(from: PhasesFrom, lang: Style) -> &'static str {
    match (from, lang.fr()) {
        (PhasesFrom::Markers, false) => "Phases: the iteragpu phase markers the trace carries.",
        (PhasesFrom::Markers, true) => {
            "Phases\u{a0}: les marqueurs de phase d’iteragpu que porte la trace."
        }
        (PhasesFrom::RecordFunction, false) => {
            "Phases: torch's record_function scopes (external_annotations), the outermost ones."
        }
        (PhasesFrom::RecordFunction, true) => {
            "Phases\u{a0}: les portées record_function de torch (external_annotations), les plus externes."
        }
        (PhasesFrom::TimeWindows, false) => {
            "Phases: the trace carries no marker, so it is cut into 10 equal time windows."
        }
        (PhasesFrom::TimeWindows, true) => {
            "Phases\u{a0}: la trace ne porte aucun marqueur, elle est donc découpée en 10 fenêtres de temps égales."
        }
        (PhasesFrom::NoTrace, false) => {
            "No trace in the file: the timeline is missing, only the state at dump time is known."
        }
        (PhasesFrom::NoTrace, true) => {
            "Aucune trace dans le fichier\u{a0}: la chronologie manque, seul l’état au moment de l’instantané est connu."
        }
    }
}
