//! The gap ledger's words in the fiche's language: the allocator's diagnostics, the card's
//! capacities and the out-of-memory post-mortem. The ledger holds values; its English words are
//! those of its file and of `explain` (`Display`, `ledger::render`), said as they are; French is
//! worded here from the values, never by rewriting the English.

use crate::explain::oom::{Diagnosis, OomClass, OomRule};
use crate::ledger::{CapacityName, Diagnostic, Ledger};
use crate::report::catalog::common::CommonText;
use crate::report::format::{Style, Units};

/// The phase the ledger explains, and how to read it.
pub fn phase_explained(l: &Ledger, lang: Style) -> String {
    let (phase, index, device) = (&l.phase, l.phase_index, &l.device);
    if lang.fr() {
        format!(
            "La phase au pic le plus haut\u{a0}: `{phase}` #{index} (`{device}`). Chaque chiffre dit d’où il vient ; ce qu’aucun terme n’explique a sa propre ligne."
        )
    } else {
        format!(
            "The phase with the highest peak: `{phase}` #{index} (`{device}`). Each figure says where it comes from; what no term explains is its own line."
        )
    }
}

/// One of the allocator's diagnostics.
pub fn diagnostic(d: &Diagnostic, lang: Style) -> String {
    if !lang.fr() {
        return d.to_string();
    }
    let colon = lang.say(CommonText::Colon);
    match d {
        Diagnostic::AllocRetries {
            phase,
            index,
            retries,
        } => format!(
            "`{phase}` #{index}{colon} {retries} nouvelle(s) tentative(s) d’allocation (cudaMalloc a échoué, le cache a été vidé et la demande relancée){colon} fragmentation, et lenteur"
        ),
        Diagnostic::OomsRaised { phase, index, ooms } => format!(
            "`{phase}` #{index}{colon} {ooms} erreur(s) de manque de mémoire levée(s) par l’allocateur"
        ),
        Diagnostic::Fragmentation {
            phase,
            index,
            split_bytes,
            share_pct,
        } => {
            // In GiB whatever the fiche's unit, as the terminal's ledger says it.
            let gib = Style {
                units: Units::Gib,
                ..lang
            };
            format!(
                "`{phase}` #{index}{colon} fragmentation{colon} jusqu’à {} libres dans des blocs découpés ({}\u{a0}% du pic réservé), inutilisables pour des demandes plus grandes\u{a0}; essayer `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`",
                gib.size(Some(*split_bytes)),
                lang.decimal(*share_pct, 0)
            )
        }
        Diagnostic::MallocAsyncBackend => format!(
            "backend `cudaMallocAsync`{colon} la réserve du pilote gère la mémoire\u{a0}; PyTorch n’y signale ni blocs découpés ni segments, et le réservé est la taille de cette réserve"
        ),
    }
}

/// A capacity's name.
pub fn capacity(name: &CapacityName, lang: Style) -> String {
    if !lang.fr() {
        return name.to_string();
    }
    match name {
        CapacityName::TorchTotalMemory => "total_memory de PyTorch".into(),
        CapacityName::NvmlTotal => "total de NVML".into(),
        CapacityName::VendorLabel(label) => format!("l’étiquette du constructeur ({label})"),
    }
}

/// An out-of-memory's class.
pub fn oom_class(class: OomClass, lang: Style) -> &'static str {
    if !lang.fr() {
        return class.label();
    }
    match class {
        OomClass::Capacity => "capacité",
        OomClass::Fragmentation => "fragmentation",
        OomClass::AnotherProcess => "un autre processus",
        OomClass::Unknown => "indéterminé",
    }
}

/// Why an out-of-memory of this class happens, in a few words.
pub fn oom_why(class: OomClass, lang: Style) -> &'static str {
    match (class, lang.fr()) {
        (OomClass::Capacity, false) => "the load does not fit what this process may use",
        (OomClass::Capacity, true) => {
            "la charge ne tient pas dans ce que ce processus peut utiliser"
        }
        (OomClass::Fragmentation, false) => "the memory is there, held by PyTorch, but in pieces",
        (OomClass::Fragmentation, true) => {
            "la mémoire est là, gardée par PyTorch, mais en morceaux"
        }
        (OomClass::AnotherProcess, false) => "the missing memory is held elsewhere",
        (OomClass::AnotherProcess, true) => "la mémoire manquante est tenue ailleurs",
        (OomClass::Unknown, false) => "the message's figures do not decide",
        (OomClass::Unknown, true) => "les chiffres du message ne tranchent pas",
    }
}

/// What to try after an out-of-memory, most useful first: the diagnosis's own advice in
/// English, said again from its class in French.
pub fn oom_advice(d: &Diagnosis, lang: Style) -> Vec<String> {
    if !lang.fr() {
        return d.advice.clone();
    }
    // A prediction's whole run over the capacity (`prediction::oom::whole_run`): no GPU to
    // measure on, so the advice stays on predictions, as the English one does.
    if d.rule == OomRule::WholeRunOverCapacity {
        let limit = lang.size(d.figures.limit.map(|b| b.0));
        return vec![
            "Chercher la frontière à une charge plus petite, sans GPU : `iteragpu sweep --predict --card NOM --vary DIM=MIN..MAX --search frontier` donne le plus grand batch, contexte ou autre dimension qui tient selon la prédiction.".to_string(),
            format!(
                "Réduire la dimension qui porte le pic (batch, contexte ou longueur de séquence, largeur) ou ses octets par élément (type, quantification, recalcul des activations), jusqu’à ce que les tenseurs vivants tiennent sous {limit}."
            ),
            "Ou une carte plus grande : `iteragpu cards --from PRED.json` classe les cartes pour le pic avec une mémoire illimitée.".to_string(),
        ];
    }
    match d.class {
        OomClass::Capacity => vec![
            "Chercher la frontière à une charge plus petite : `iteragpu sweep --vary DIM=MIN..MAX --search frontier`.",
            "Réduire la dimension qui porte le pic (batch, contexte, largeur) ou ses octets par élément (type, quantification, recalcul des activations).",
            "Ou une carte plus grande : `iteragpu cards --need TAILLE`.",
        ],
        OomClass::Fragmentation => vec![
            "Essayer `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`, comparé dans des processus neufs : `iteragpu sweep --vary alloc_conf=default,expandable_segments`.",
            "Ou libérer le cache entre les phases (`torch.cuda.empty_cache()`).",
        ],
        OomClass::AnotherProcess => vec![
            "Libérer le périphérique (les processus sont nommés dans le message joint) ; vérifier avec `iteragpu environment`.",
        ],
        OomClass::Unknown => vec![
            "Relire le message de PyTorch dans le résultat joint ; mesurer à nouveau avec `--timeline`.",
        ],
    }
    .into_iter()
    .map(String::from)
    .collect()
}

/// The out-of-memory post-mortem, when the run ended in one. In English it is the explain
/// command's own text; in French it is said again from the classification's figures (PyTorch's
/// message itself stays in the attached result).
pub fn post_mortem(l: &Ledger, lang: Style) -> Vec<String> {
    let colon = lang.say(CommonText::Colon);
    if lang.fr() {
        let mut out = Vec::new();
        if let Some(pm) = &l.post_mortem {
            let d = &pm.diagnosis;
            let f = &d.figures;
            let class = format!("{} : {}", oom_class(d.class, lang), oom_why(d.class, lang));
            out.push(format!("Classe{} {class}", colon));
            let request = Some(pm.report.tried_to_allocate.bytes.0);
            out.push(format!(
                "Demande{} {} ; besoin{} {} ; limite{} {}",
                colon,
                lang.size(request),
                colon,
                lang.size(f.need.map(|b| b.0)),
                colon,
                lang.size(f.limit.map(|b| b.0))
            ));
            out.extend(
                oom_advice(d, lang)
                    .into_iter()
                    .map(|a| format!("À essayer{} {a}", colon)),
            );
        }
        if let Some(s) = &l.live_at_oom
            && let Some(live) = &s.live
        {
            out.push(format!(
                "Au manque de mémoire sur `{}`{} {} demandés, {} vivants, plus grand bloc libre {}",
                s.device,
                colon,
                lang.size(Some(s.requested_bytes)),
                lang.size(Some(live.live_bytes)),
                lang.size(Some(live.largest_free_block))
            ));
            for blk in live.largest_live.iter().take(5) {
                out.push(format!(
                    "  vivant {} — `{}`",
                    lang.size(Some(blk.bytes)),
                    blk.frames.first().map_or("?".into(), |f| format!(
                        "{}:{}",
                        crate::ledger::render::short_path(f.filename.as_deref().unwrap_or("?")),
                        f.line.unwrap_or(0)
                    ))
                ));
            }
        }
        out
    } else {
        crate::ledger::render::post_mortem(l.post_mortem.as_ref(), l.live_at_oom.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::format::Lang;
    use crate::units::Bytes;

    /// The words the ledger wrote before its diagnostics were values, in both languages.
    #[test]
    fn diagnostics_are_worded_from_their_values() {
        let en = Style::new(Lang::En, Units::Gib);
        // French sizes stay in Gio even in a fiche written in Go.
        let fr = Style::new(Lang::Fr, Units::Gb);
        let (p, index) = ("forward".to_string(), 2);
        let retries = |retries| Diagnostic::AllocRetries {
            phase: p.clone(),
            index,
            retries,
        };
        assert_eq!(
            diagnostic(&retries(1), en),
            "forward #2: 1 allocation retry (cudaMalloc failed, the cache was freed and the request tried again): fragmentation, and slow"
        );
        assert!(diagnostic(&retries(3), en).contains(": 3 allocation retries ("));
        assert_eq!(
            diagnostic(&retries(3), fr),
            "`forward` #2\u{a0}: 3 nouvelle(s) tentative(s) d’allocation (cudaMalloc a échoué, le cache a été vidé et la demande relancée)\u{a0}: fragmentation, et lenteur"
        );
        let ooms = Diagnostic::OomsRaised {
            phase: p.clone(),
            index,
            ooms: 1,
        };
        assert_eq!(
            diagnostic(&ooms, en),
            "forward #2: 1 out-of-memory error(s) raised by the allocator"
        );
        assert_eq!(
            diagnostic(&ooms, fr),
            "`forward` #2\u{a0}: 1 erreur(s) de manque de mémoire levée(s) par l’allocateur"
        );
        let (p, index) = ("warm_forward".to_string(), 4);
        let fragmentation = Diagnostic::Fragmentation {
            phase: p,
            index,
            split_bytes: 3 << 29,
            share_pct: 12.6,
        };
        assert_eq!(
            diagnostic(&fragmentation, en),
            format!(
                "warm_forward #4: fragmentation: up to {} free inside split blocks (13% of the reserved peak), unusable for larger requests; try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                Bytes(3 << 29).both()
            )
        );
        assert_eq!(
            diagnostic(&fragmentation, fr),
            "`warm_forward` #4\u{a0}: fragmentation\u{a0}: jusqu’à 1,50\u{a0}Gio libres dans des blocs découpés (13\u{a0}% du pic réservé), inutilisables pour des demandes plus grandes\u{a0}; essayer `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`"
        );
        assert_eq!(
            diagnostic(&Diagnostic::MallocAsyncBackend, en),
            "backend cudaMallocAsync: the driver's pool manages the memory; PyTorch reports no split blocks or segments for it, and reserved is the pool's size"
        );
        assert_eq!(
            diagnostic(&Diagnostic::MallocAsyncBackend, fr),
            "backend `cudaMallocAsync`\u{a0}: la réserve du pilote gère la mémoire\u{a0}; PyTorch n’y signale ni blocs découpés ni segments, et le réservé est la taille de cette réserve"
        );
    }

    #[test]
    fn capacities_are_named_from_their_kind() {
        let en = Style::new(Lang::En, Units::Gib);
        let fr = Style::new(Lang::Fr, Units::Gib);
        let vendor = CapacityName::VendorLabel("141 GB HBM3e".into());
        for (name, english, french) in [
            (
                CapacityName::TorchTotalMemory,
                "PyTorch's total_memory",
                "total_memory de PyTorch",
            ),
            (CapacityName::NvmlTotal, "NVML's total", "total de NVML"),
            (
                vendor,
                "the vendor's label (141 GB HBM3e)",
                "l’étiquette du constructeur (141 GB HBM3e)",
            ),
        ] {
            assert_eq!(capacity(&name, en), english);
            assert_eq!(capacity(&name, fr), french);
        }
    }
}
