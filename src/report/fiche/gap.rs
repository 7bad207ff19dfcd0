//! Why the peak exceeds the estimate: the gap ledger as a table and a waterfall, the allocator's
//! diagnostics, and the out-of-memory post-mortem.

use super::facts::Facts;
use super::words::{colon, in_unit, oom_class};
use crate::ledger::{self, Ledger, LineId, LineKind, Provenance};
use crate::report::catalog::common::CommonText;
use crate::report::catalog::gap::GapText;
use crate::report::document::{Block, Cell, Chart};
use crate::report::format::Style;
use crate::report::names;

/// Why the peak exceeds the estimate: the gap ledger as a table and a waterfall.
pub(super) fn gap(b: &mut Vec<Block>, f: &Facts, lang: Style) {
    let Some(l) = &f.ledger else {
        return;
    };
    if l.lines.is_empty() {
        post_mortem(b, l, lang);
        return;
    }
    b.push(Block::Heading(
        lang.say(CommonText::WhyPeakExceedsEstimate).into(),
    ));
    b.push(Block::Para(format!(
        "{} `{}` #{} (`{}`). {}",
        lang.say(GapText::PhaseHighestPeak),
        l.phase,
        l.phase_index,
        l.device,
        lang.say(GapText::EachFigureSaysWhere)
    )));
    let cell =
        |f: &Option<ledger::Figure>| f.as_ref().map_or("—".into(), |f| Cell::size(Some(f.bytes)));
    b.push(Block::Table {
        header: vec![
            lang.say(GapText::Term).into(),
            in_unit(lang.say(GapText::Estimate), lang),
            in_unit(lang.say(GapText::Predicted), lang),
            in_unit(lang.say(CommonText::Observed), lang),
            lang.say(GapText::Checkpoint).into(),
        ],
        rows: l
            .lines
            .iter()
            .map(|x| {
                let assumed = x
                    .estimate
                    .as_ref()
                    .is_some_and(|f| f.provenance == Provenance::Assumed);
                vec![
                    format!(
                        "{}{}",
                        names::line(x.id, lang),
                        if assumed {
                            lang.say(GapText::AssumedSuffix)
                        } else {
                            ""
                        }
                    )
                    .into(),
                    cell(&x.estimate),
                    cell(&x.predicted),
                    cell(&x.observed),
                    names::checkpoint(&x.checkpoint, lang).into(),
                ]
            })
            .collect(),
    });
    // The waterfall follows the observed chain: weights, what the phase held, its growth, the
    // peak allocated, the peak reserved, what lies outside the allocator, the driver's view.
    let observed = |id: LineId| {
        l.lines
            .iter()
            .find(|x| x.id == id)
            .and_then(|x| x.observed.as_ref())
            .map(|f| f.bytes)
    };
    let mut steps = Vec::new();
    for (id, label) in [
        (LineId::Weights, lang.say(GapText::Weights)),
        (LineId::HeldAtStart, lang.say(GapText::HeldStart)),
        (LineId::Growth, lang.say(GapText::GrowthPeak)),
        (LineId::PeakAllocated, lang.say(CommonText::PeakAllocated)),
        (LineId::PeakReserved, lang.say(CommonText::PeakReserved)),
        (
            LineId::OutsideAllocator,
            lang.say(GapText::OutsideAllocator),
        ),
        (LineId::DriverView, lang.say(CommonText::DriverView)),
    ] {
        if let Some(bytes) = observed(id) {
            steps.push((label.to_string(), bytes, id.kind() == LineKind::Level));
        }
    }
    let mut lines = Vec::new();
    if let Some(est) = l
        .lines
        .iter()
        .find(|x| x.id == LineId::DriverView)
        .and_then(|x| x.estimate.as_ref())
    {
        lines.push((lang.say(GapText::Estimate).to_string(), est.bytes));
    }
    for c in &l.capacities {
        lines.push((capacity_name(&c.name, lang), c.bytes));
    }
    if steps.len() >= 2 {
        b.push(Block::Chart(Chart::Waterfall {
            title: lang.say(GapText::WaterfallTitle).into(),
            steps,
            lines,
        }));
    }
    let diagnostics = ledger::diagnostics_in(f.result, lang.fr());
    if !diagnostics.is_empty() {
        b.push(Block::List(diagnostics));
    }
    post_mortem(b, l, lang);
}

/// A capacity's name (the ledger writes English) in the reader's language.
fn capacity_name(name: &str, lang: Style) -> String {
    if !lang.fr() {
        return name.to_string();
    }
    name.replace("PyTorch's total_memory", "total_memory de PyTorch")
        .replace("NVML's total", "total de NVML")
        .replace("the vendor's label", "l’étiquette du constructeur")
}

/// The out-of-memory post-mortem, when the run ended in one. In English it is the explain
/// command's own text; in French it is said again from the classification's figures (PyTorch's
/// message itself stays in the attached result).
fn post_mortem(b: &mut Vec<Block>, l: &Ledger, lang: Style) {
    use crate::explain::oom::OomClass;
    let lines = if lang.fr() {
        let mut out = Vec::new();
        if let Some(pm) = &l.post_mortem {
            let d = &pm.diagnosis;
            let f = &d.figures;
            let why = match d.class {
                OomClass::Capacity => {
                    "la charge ne tient pas dans ce que ce processus peut utiliser"
                }
                OomClass::Fragmentation => {
                    "la mémoire est là, gardée par PyTorch, mais en morceaux"
                }
                OomClass::AnotherProcess => "la mémoire manquante est tenue ailleurs",
                OomClass::Unknown => "les chiffres du message ne tranchent pas",
            };
            let class = format!("{} : {why}", oom_class(d.class, lang));
            out.push(format!("Classe{} {class}", colon(lang)));
            let request = Some(pm.report.tried_to_allocate.bytes.0);
            out.push(format!(
                "Demande{} {} ; besoin{} {} ; limite{} {}",
                colon(lang),
                lang.size(request),
                colon(lang),
                lang.size(f.need.map(|b| b.0)),
                colon(lang),
                lang.size(f.limit.map(|b| b.0))
            ));
            out.extend(
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
                .map(|a| format!("À essayer{} {a}", colon(lang))),
            );
        }
        if let Some(s) = &l.live_at_oom
            && let Some(live) = &s.live
        {
            out.push(format!(
                "Au manque de mémoire sur `{}`{} {} demandés, {} vivants, plus grand bloc libre {}",
                s.device,
                colon(lang),
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
    };
    if lines.is_empty() {
        return;
    }
    b.push(Block::Heading(lang.say(GapText::PostMortemHeading).into()));
    b.push(Block::List(lines));
}
