//! The names of estimate terms and ledger lines in the fiche's language, keyed on their ids (the
//! files hold English words; French is made here from the id, never by rewriting the English).

use crate::estimate::{Shard, TermId};
use crate::ledger::{Checkpoint, LineId};
use crate::report::format::Style;
use crate::schema::load::EstimateTerm;

/// An estimate term's name: the file's English words, or French made from its id (a term this
/// version does not know keeps its English name).
pub fn term(t: &EstimateTerm, lang: Style) -> String {
    if lang.fr() {
        term_fr(&t.id).unwrap_or_else(|| t.name.clone())
    } else {
        t.name.clone()
    }
}

fn term_fr(id: &TermId) -> Option<String> {
    let p = |base: &str, param: &str| format!("{base} ({param})");
    Some(match id {
        TermId::Weights { dtype: None, .. } => "poids".into(),
        TermId::Weights {
            dtype: Some(d),
            shard,
        } => {
            p("poids", d)
                + match shard {
                    None => "",
                    Some(Shard::Replicated) => ", copie complète sur chaque rang",
                    Some(Shard::Partition) => ", partition ZeRO-3",
                    Some(Shard::FsdpShard) => ", fragment FSDP",
                }
        }
        TermId::QuantizedWeights { format } => p("poids, quantifiés", format),
        TermId::UnquantizedWeights { dtype } => p("poids, modules non quantifiés", dtype),
        TermId::DequantizedWeight { dtype } => p("poids déquantifié", dtype),
        TermId::ComputeCopies => "poids, copies de calcul en 16 bits".into(),
        TermId::StoredWeights => "poids tels que stockés (en-têtes safetensors)".into(),
        TermId::AllocatorSegments => "segments de l’allocateur autour des poids".into(),
        TermId::LoraAdapters { dtype } => p("adaptateurs LoRA", dtype),
        TermId::MasterWeights { shard: None } => "poids maîtres (paramètres fp32)".into(),
        TermId::MasterWeights { shard: Some(_) } => "poids maîtres (fp32), partition".into(),
        TermId::Gradients { dtype, shard } => {
            p("gradients", dtype)
                + match shard {
                    None => "",
                    Some(Shard::Replicated) => ", complets sur chaque rang",
                    Some(Shard::Partition) => ", partition ZeRO-2",
                    Some(Shard::FsdpShard) => ", fragment FSDP",
                }
        }
        TermId::Fp32GradientPartition => "gradients (copie fp32), partition".into(),
        TermId::DdpBuckets { dtype } => p("gradients", dtype) + ", seaux du réducteur DDP",
        TermId::GatheredLargestModule { dtype } => {
            p("poids et gradients", dtype) + " du plus grand module rassemblé"
        }
        TermId::FsdpRootGroup { dtype } => {
            p("poids", dtype) + ", groupe racine FSDP non partitionné"
        }
        TermId::FsdpGatheredBlocks { dtype } => p("poids", dtype) + ", blocs FSDP rassemblés",
        TermId::FsdpBlockGradients { dtype } => p("gradients", dtype) + ", un bloc non partitionné",
        TermId::FsdpReduceScatterInputs { dtype } => {
            p("gradients", dtype) + ", entrées du reduce-scatter FSDP"
        }
        TermId::OptimizerStates { optimizer, shard } => {
            p("états de l’optimiseur", optimizer.as_ref())
                + match shard {
                    None | Some(Shard::Replicated) => "",
                    Some(Shard::Partition) => ", partition",
                    Some(Shard::FsdpShard) => ", fragment FSDP",
                }
        }
        TermId::OptimizerStepTemporaries { optimizer } => {
            p("temporaires du pas de l’optimiseur", optimizer.as_ref())
        }
        TermId::Activations => "activations".into(),
        TermId::LogitsAndLoss => "logits et perte".into(),
        TermId::PrefillTransient => {
            "transitoire du préremplissage (plus grande couche + logits)".into()
        }
        TermId::ImageInputs => "images en entrée (pixels)".into(),
        TermId::ForwardTransient => "transitoire de la passe avant (plus grande couche)".into(),
        TermId::AttentionScores { kernel } => match kernel {
            crate::estimate::vision::AttentionKernel::Eager => {
                "scores d’attention (eager\u{a0}: s×s par tête)".into()
            }
            k => format!("statistiques par ligne de l’attention ({k}\u{a0}: pas de scores s×s)"),
        },
        TermId::KvCache { cache, bits } => match (cache, bits) {
            (crate::estimate::kv_cache::CacheKind::Quantized, Some(b)) => {
                format!("cache KV (quantifié, {b}\u{a0}bits)")
            }
            (crate::estimate::kv_cache::CacheKind::Offloaded, _) => {
                "cache KV (déchargé\u{a0}: sur le GPU)".into()
            }
            (c, _) => p("cache KV", c.as_ref()),
        },
        TermId::KvCacheHost => "cache KV (déchargé\u{a0}: en mémoire de l’hôte)".into(),
        TermId::KvPrefillSurplus => {
            "cache KV, surplus du préremplissage des couches à fenêtre glissante".into()
        }
        TermId::KvDecompressed => {
            "cache KV, K et V décompressés (ce que transformers 5 ne garde pas)".into()
        }
        TermId::ServeActivationPeak => "pic d’activations du passage de profilage".into(),
        TermId::NonTorchMemory => "mémoire hors de PyTorch".into(),
        TermId::CudaGraphs => "graphes CUDA".into(),
        TermId::PagedKvCache { engine } => p("réserve de blocs du cache KV", &engine.to_string()),
        TermId::Reserve => "réserve".into(),
        TermId::NcclBuffers => {
            "tampons des communicateurs NCCL (hors de l’allocateur de PyTorch)".into()
        }
        TermId::HostOffloadedStates => {
            "mémoire HÔTE par nœud (RAM du CPU, pas le GPU)\u{a0}: états déchargés".into()
        }
        TermId::DeepspeedGpu => "estimateur de DeepSpeed, GPU par rang (pour comparaison)".into(),
        TermId::DeepspeedHost => {
            "mémoire HÔTE par nœud (RAM du CPU, pas le GPU), estimateur de DeepSpeed".into()
        }
        TermId::ZeroPaper { stage } => {
            format!("états du modèle ZeRO-{stage} selon l’article ZeRO (pour comparaison)")
        }
        TermId::Other => return None,
    })
}

/// A ledger line's name.
pub fn line(id: LineId, lang: Style) -> &'static str {
    if !lang.fr() {
        return id.english();
    }
    match id {
        LineId::Weights => "poids (tels que chargés)",
        LineId::KvCache => "cache KV (compris dans les niveaux ci-dessous, montré à part)",
        LineId::HeldAtStart => "tenu au début de la phase au-delà des poids",
        LineId::Growth => "croissance dans la phase jusqu’à son pic",
        LineId::Gradients => "gradients (vivants au pic prédit)",
        LineId::OptimizerStates => "états de l’optimiseur (vivants au pic prédit)",
        LineId::Activations => "activations et temporaires (vivants au pic prédit)",
        LineId::OtherTensors => "entrées et autres stockages (vivants au pic prédit)",
        LineId::Workspaces => {
            "dont espaces de travail des bibliothèques (aucun tenseur ne les tient)"
        }
        LineId::PeakAllocated => "pic alloué",
        LineId::PeakReserved => "pic réservé",
        LineId::AllocatorSlack => "marge de l’allocateur (réservé − alloué)",
        LineId::OutsideAllocator => {
            "hors de l’allocateur de PyTorch (contexte CUDA, bibliothèques)"
        }
        LineId::Reserve => "réserve de l’estimation (une marge déclarée)",
        LineId::DriverView => "vue du pilote",
        LineId::Unexplained => "inexpliqué : vue du pilote − (pic réservé + hors allocateur)",
    }
}

/// A ledger line's name when it is read at a prediction's out-of-memory
/// (`LineId::english_at_oom`).
pub fn line_at_oom(id: LineId, lang: Style) -> &'static str {
    if !lang.fr() {
        return id.english_at_oom();
    }
    match id {
        LineId::Gradients => "gradients (vivants au manque de mémoire prédit)",
        LineId::OptimizerStates => "états de l’optimiseur (vivants au manque de mémoire prédit)",
        LineId::Activations => "activations et temporaires (vivants au manque de mémoire prédit)",
        LineId::OtherTensors => "entrées et autres stockages (vivants au manque de mémoire prédit)",
        LineId::Weights => "poids (vivants au manque de mémoire prédit)",
        LineId::PeakAllocated => "alloué quand l’allocation a échoué",
        LineId::PeakReserved => "réservé quand l’allocation a échoué",
        LineId::AllocatorSlack => "réservé mais non alloué (réservé − alloué)",
        LineId::DriverView => "vue du pilote quand l’allocation a échoué",
        _ => line(id, lang),
    }
}

/// Where a ledger line was read; phase names stay as they are (identifiers).
pub fn checkpoint(c: &Checkpoint, lang: Style) -> String {
    if !lang.fr() {
        return c.to_string();
    }
    match c {
        Checkpoint::Start(p) => format!("début de {p}"),
        Checkpoint::End(p) => format!("fin de {p}"),
        Checkpoint::Peak(p) => format!("pic de {p}"),
        Checkpoint::PeakMinusStart(p) => format!("pic de {p} − son début"),
        Checkpoint::PredictedPeak(p) => format!("pic prédit de {p}"),
        Checkpoint::PredictedOom(p) => format!("manque de mémoire prédit dans {p}"),
        Checkpoint::EndOneCheckpoint(p) => format!("fin de {p} (un seul point de contrôle)"),
        Checkpoint::PeakSampled(p) => format!("pic de {p} (échantillonné)"),
        Checkpoint::Stated => "déclaré".into(),
    }
}
