//! The words of `fiche.rs`, English and French side by side.

catalog! {
    /// The words of `fiche.rs`.
    pub enum FicheText {
        SeriesNeverClosed =>
            "Warning: this series was never closed (status `running`): its sweep is still running or was killed. Its finished trials are shown; the frontier and the fit may be missing.",
            "Attention : cette série n’a jamais été close (statut `running`) : son balayage tourne encore ou a été tué. Ses essais terminés sont montrés ; la frontière et l’ajustement peuvent manquer.";
        Title =>
            "iteragpu memory fiche",
            "Fiche mémoire iteragpu";
        RawResultsAttached =>
            "Raw results attached",
            "Résultats bruts joints";
    }
}
