//! The words of `fiche/timeline.rs`, English and French side by side.

use std::path::Path;

use crate::report::format::Style;

catalog! {
    /// The words of `fiche/timeline.rs`.
    pub enum TimelineText {
        Timeline =>
            "Timeline",
            "Chronologie";
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

/// Where PyTorch's snapshot was written, its size, and where to open it.
pub fn snapshot_written(path: &Path, bytes: Option<u64>, lang: Style) -> String {
    let (path, size) = (path.display(), lang.mebibytes(bytes));
    if lang.fr() {
        format!(
            "instantané de PyTorch\u{a0}: `{path}` ({size}) — à ouvrir dans https://pytorch.org/memory_viz"
        )
    } else {
        format!("PyTorch's snapshot: `{path}` ({size}) — open it in https://pytorch.org/memory_viz")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::format::{Lang, Units};

    #[test]
    fn where_the_snapshot_was_written() {
        let path = Path::new("run.timeline.pickle");
        assert_eq!(
            snapshot_written(path, Some(12_897_485), Style::new(Lang::En, Units::Gib)),
            "PyTorch's snapshot: `run.timeline.pickle` (12.3\u{a0}MiB) — open it in https://pytorch.org/memory_viz"
        );
        assert_eq!(
            snapshot_written(path, None, Style::new(Lang::Fr, Units::Gib)),
            "instantané de PyTorch\u{a0}: `run.timeline.pickle` (?\u{a0}Mio) — à ouvrir dans https://pytorch.org/memory_viz"
        );
    }
}
