//! The fiche of a prediction (`iteragpu.prediction/1`): the decision without a GPU. The verdict
//! says "predicted, not measured", whether the need fits the target card and by how much, the
//! phase that decides, what is alive at its peak (categories, modules), the target's provenance
//! and the torch it was predicted with. No figure here is called measured or observed: the
//! observed section is a predicted one, and the ledger has no observed column.

use super::series::PredictedSeries;
use super::words::{in_unit, labelled, text};
use super::{Fiche, attach, calculated};
use crate::estimate::Kind;
use crate::ledger::{self, Ledger};
use crate::report::catalog::common::CommonText;
use crate::report::catalog::fiche::FicheText;
use crate::report::catalog::gap::GapText;
use crate::report::catalog::identity::IdentityText;
use crate::report::catalog::observed::storage_category;
use crate::report::catalog::prediction_fiche::{self as predicted, PredictedText};
use crate::report::catalog::series::SeriesText;
use crate::report::catalog::verdict::VerdictText;
use crate::report::catalog::{self as catalog, names};
use crate::report::document::{Block, Cell, Chart, Document, Tone, Verdict};
use crate::report::format::Style;
use crate::schema::load::{self, EstimateDoc, InputError, Loaded};
use crate::schema::prediction::{
    AtPeak, PhaseStatus, PredictedOom, PredictedPhase, PredictionDoc, PredictionStatus,
};
use crate::schema::series::{Series, TrialRecord, TrialStatus};

/// What the prediction's fiche asserts, read once: the deciding phase, the target's capacity, the
/// need compared with it and the margin.
struct PredictedFacts<'a> {
    /// The highest predicted peak allocated (`PredictionDoc::peak_phase`).
    deciding: Option<&'a PredictedPhase>,
    /// The predicted driver's view (peak reserved + outside the allocator), else the peak
    /// reserved; `true` when it is the driver's view.
    need: Option<(u64, bool)>,
    /// The capacity applied: `--memory-limit` when given (`limited`), else the card's
    /// `total_memory`.
    capacity: u64,
    limited: bool,
    /// `capacity` − need: negative when the card is short.
    margin: Option<i128>,
}

impl<'a> PredictedFacts<'a> {
    fn new(p: &'a PredictionDoc) -> PredictedFacts<'a> {
        let deciding = p.peak_phase().map(|(_, ph)| ph);
        let need = match (
            p.max_driver_view(),
            deciding.and_then(|d| d.peak_reserved_bytes),
        ) {
            (Some(d), _) => Some((d, true)),
            (None, Some(r)) => Some((r, false)),
            (None, None) => None,
        };
        let (capacity, limited) = p
            .capacity
            .as_ref()
            .map_or((p.target.total_memory, false), |c| {
                (c.device_bytes, c.memory_fraction)
            });
        PredictedFacts {
            deciding,
            need,
            capacity,
            limited,
            margin: need.map(|(n, _)| i128::from(capacity) - i128::from(n)),
        }
    }
}

/// The fiche of a prediction, with the predicted series of the same workload (its frontier in
/// the verdict, its trials and chart in their own section) and the estimate beside it when given.
pub(super) fn build(
    result: &Loaded,
    p: &PredictionDoc,
    series: Option<PredictedSeries>,
    estimate: Option<&Loaded>,
    lang: Style,
) -> Result<Fiche, InputError> {
    if let Some((l, s)) = series {
        super::series::check_series_of_prediction(p, result, s, l)?;
    }
    made(result, p, series, None, estimate, lang)
}

/// The fiche of a predicted series alone (`report PSERIES.json`): the prediction of its trial at
/// the largest value predicted to fit (else the first predicted not to), with the series.
pub(super) fn of_series(
    file: &Loaded,
    s: &Series,
    estimate: Option<&Loaded>,
    lang: Style,
) -> Result<Fiche, InputError> {
    let at = |v: Option<u64>| {
        let var = s.varied.first()?.name();
        s.trials.iter().find(|t| {
            t.prediction.is_some() && t.values.get(var).and_then(serde_json::Value::as_u64) == v
        })
    };
    let fits = |t: &&TrialRecord| t.status == TrialStatus::Ok && t.prediction.is_some();
    let shown = match &s.frontier {
        Some(f) => at(f.last_success)
            .map(|t| (t, true))
            .or_else(|| at(f.first_failure).map(|t| (t, false))),
        // A list or a grid: its largest trial predicted to fit.
        None => {
            let var = s.varied.first().map(|v| v.name());
            s.trials
                .iter()
                .filter(fits)
                .max_by_key(|t| var.and_then(|v| t.values.get(v)?.as_u64()))
                .map(|t| (t, true))
        }
    };
    let Some((trial, fitting)) = shown else {
        return Err(InputError::Apart {
            path: file.path.clone(),
            schema: load::SERIES.into(),
            message: "no trial of this predicted series holds a prediction that fits or decides its frontier: give a prediction of one value first (iteragpu predict … --output PRED.json), then iteragpu report PRED.json SERIES.json".into(),
        });
    };
    let p = trial
        .prediction
        .as_deref()
        .expect("chosen with a prediction");
    let values = trial
        .values
        .iter()
        .map(|(k, v)| format!("{k}={}", text(v)))
        .collect::<Vec<_>>()
        .join(" ");
    let (var, value) = values.split_once('=').unwrap_or((values.as_str(), ""));
    let note = predicted::trial_shown(var, value, fitting, lang);
    made(file, p, Some((file, s)), Some(note), estimate, lang)
}

/// The fiche itself; `note` says which trial of a series alone is shown (the series is then the
/// one file attached).
fn made(
    result: &Loaded,
    p: &PredictionDoc,
    with: Option<PredictedSeries>,
    note: Option<String>,
    estimate: Option<&Loaded>,
    lang: Style,
) -> Result<Fiche, InputError> {
    let e: Option<&EstimateDoc> = estimate.map(Loaded::as_estimate).transpose()?;
    if let (Some(e), Some(l)) = (e, estimate) {
        load::check_estimate_of_prediction(p, e, l)?;
    }
    let facts = PredictedFacts::new(p);
    let workload = p
        .identity
        .declared
        .get("model")
        .map(text)
        .unwrap_or_else(|| p.identity.workload.clone());
    let series = with.map(|(_, s)| s);
    let mut b = Vec::new();
    if let Some(note) = &note {
        b.push(Block::Para(note.clone()));
    }
    verdict(&mut b, p, &facts, &workload, series, e, lang);
    identity(&mut b, p, lang);
    calculated::calculated(&mut b, e, lang);
    predicted_section(&mut b, p, &facts, lang);
    if let Some(s) = series {
        super::series::series_predicted(&mut b, s, None, lang);
    }
    if let Ok(l) = ledger::of_prediction(p, e) {
        gap(&mut b, &l, lang);
    }
    assumed(&mut b, p, e, lang);
    // A series alone is the result file itself: attached once.
    let attached: Vec<&Loaded> = match (with, note) {
        (Some((l, _)), None) => vec![l],
        _ => Vec::new(),
    };
    let attachments = attach(&mut b, result, &attached, estimate, lang);
    Ok(Fiche {
        document: Document {
            title: format!(
                "{} — {} — {}",
                lang.say(FicheText::Title),
                workload,
                lang.say(PredictedText::PredictedHeading)
            ),
            style: lang,
            blocks: b,
            attachments,
        },
        warnings: Vec::new(),
    })
}

fn verdict(
    b: &mut Vec<Block>,
    p: &PredictionDoc,
    f: &PredictedFacts,
    workload: &str,
    series: Option<&Series>,
    e: Option<&EstimateDoc>,
    lang: Style,
) {
    let heading = lang.say(PredictedText::PredictedHeading).to_string();
    let mut lines = vec![Verdict {
        label: lang.say(VerdictText::Source).into(),
        value: predicted::source(&p.target.name, p.assumptions.torch_version.as_deref(), lang),
        section: Some(lang.say(PredictedText::Prediction).into()),
        tone: Tone::Neutral,
    }];
    let dims: Vec<String> = p
        .dimensions
        .iter()
        .map(|(k, v)| format!("{k}={}", text(v)))
        .collect();
    lines.push(Verdict {
        label: lang.say(VerdictText::Workload).into(),
        value: format!(
            "`{workload}` · {}",
            if dims.is_empty() {
                match &p.spec.workload {
                    crate::schema::spec::WorkloadSpec::Script(s) if !s.script_args.is_empty() => {
                        crate::report::catalog::verdict::undeclared_arguments(
                            &s.script_args.join(" "),
                            lang,
                        )
                    }
                    _ => lang.say(VerdictText::DeclaredDimension).to_string(),
                }
            } else {
                format!("`{}`", dims.join(" · "))
            }
        ),
        section: Some(lang.say(CommonText::Dimensions).into()),
        tone: Tone::Neutral,
    });
    if let Some(oom) = &p.out_of_memory {
        out_of_memory(&mut lines, p, oom, &heading, lang);
    } else if p.status != PredictionStatus::Complete {
        lines.push(Verdict {
            label: lang.say(PredictedText::Prediction).into(),
            value: predicted::incomplete(p.status.as_ref(), p.failure.as_deref(), lang),
            section: Some(heading.clone()),
            tone: Tone::Bad,
        });
    }
    if let (None, Some((_, driver_view)), Some(margin)) = (&p.out_of_memory, f.need, f.margin) {
        lines.push(Verdict {
            label: lang.say(VerdictText::CapacityMargin).into(),
            value: predicted::fit(
                &p.target.name,
                f.capacity,
                f.limited,
                driver_view,
                margin,
                lang,
            ),
            section: Some(lang.say(PredictedText::Target).into()),
            tone: if margin >= 0 { Tone::Good } else { Tone::Bad },
        });
    }
    // The peak that matters is the one the fit is judged on (the highest driver's view); what is
    // alive is read at the highest peak allocated, named when it is another phase.
    let fit_phase = p.driver_view_phase().or(f.deciding);
    if p.out_of_memory.is_none()
        && let Some(d) = f.deciding
        && let Some(fit) = fit_phase
        && let Some(reserved) = fit.peak_reserved_bytes
    {
        lines.push(Verdict {
            label: lang.say(VerdictText::PeakMatters).into(),
            value: predicted::deciding(&fit.name, reserved, fit.driver_view_bytes, lang),
            section: Some(heading.clone()),
            tone: Tone::Neutral,
        });
        let (categories, modules) = largest_at_peak(d, lang);
        if !categories.is_empty() || !modules.is_empty() {
            let elsewhere = (d.name != fit.name).then_some(d.name.as_str());
            lines.push(Verdict {
                label: lang.say(PredictedText::AtPeak).into(),
                value: predicted::at_peak(&categories, &modules, elsewhere, lang),
                section: Some(heading.clone()),
                tone: Tone::Neutral,
            });
        }
    }
    // The series' frontier: which value of the varied dimension the card takes, and why not more.
    if let Some(s) = series
        && let Some(fr) = &s.frontier
    {
        let card = s
            .target
            .as_ref()
            .map_or(p.target.name.as_str(), |t| t.name.as_str());
        lines.push(Verdict {
            label: lang.say(PredictedText::Frontier).into(),
            value: predicted::frontier(fr, card, s.limit.as_ref(), lang),
            section: Some(lang.say(SeriesText::PredictedSeriesHeading).into()),
            tone: Tone::Neutral,
        });
    }
    lines.push(Verdict {
        label: lang.say(PredictedText::Target).into(),
        value: format!(
            "`{}` — {}",
            p.target.name,
            predicted::target(
                &p.target.total_memory_source,
                p.target.context_bytes,
                &p.target.context_source,
                lang
            )
        ),
        section: Some(lang.say(PredictedText::Prediction).into()),
        tone: Tone::Neutral,
    });
    lines.push(Verdict {
        label: lang.say(VerdictText::StillAssumed).into(),
        value: predicted::still_assumed(
            p.assumptions.not_modelled.len(),
            p.assumptions.placeholder_reads.len(),
            e.map(|e| e.terms.iter().filter(|t| t.kind == Kind::Assumed).count()),
            lang,
        ),
        section: Some(lang.say(CommonText::AssumedHeading).into()),
        tone: Tone::Neutral,
    });
    b.push(Block::Verdict(lines));
    b.push(Block::Para(
        lang.say(PredictedText::MeasureToConfirm).into(),
    ));
}

/// A predicted out-of-memory in the verdict: where and which allocation, the post-mortem's class
/// and advice, what was alive then, and what a card needs with unlimited memory.
fn out_of_memory(
    lines: &mut Vec<Verdict>,
    p: &PredictionDoc,
    oom: &PredictedOom,
    heading: &str,
    lang: Style,
) {
    let (capacity, source) = p.capacity.as_ref().map_or(
        (p.target.total_memory, p.target.total_memory_source.as_str()),
        |c| (c.device_bytes, c.source.as_str()),
    );
    let not_reached: Vec<&str> = p
        .phases
        .iter()
        .filter(|ph| ph.status == PhaseStatus::NotReached)
        .map(|ph| ph.name.as_str())
        .collect();
    let category = oom.category.to_string();
    lines.push(Verdict {
        label: lang.say(PredictedText::OutOfMemory).into(),
        value: predicted::out_of_memory(
            &predicted::OomWords {
                card: &p.target.name,
                capacity,
                capacity_source: source,
                phase: oom.phase.as_deref(),
                requested: oom.requested_bytes,
                module: oom.module.as_deref(),
                category: &storage_category(&category, lang),
                at: site(oom),
                free: oom.free_bytes,
                not_reached: &not_reached,
            },
            lang,
        ),
        section: Some(heading.into()),
        tone: Tone::Bad,
    });
    lines.push(Verdict {
        label: lang.say(PredictedText::OomClass).into(),
        value: predicted::oom_class(&oom.post_mortem.diagnosis, lang),
        section: Some(lang.say(GapText::PostMortemHeading).into()),
        tone: Tone::Bad,
    });
    let (categories, modules) = largest(&oom.alive, lang);
    if !categories.is_empty() || !modules.is_empty() {
        lines.push(Verdict {
            label: lang.say(PredictedText::AtOom).into(),
            value: predicted::at_peak(&categories, &modules, None, lang),
            section: Some(heading.into()),
            tone: Tone::Neutral,
        });
    }
    if let (Some(reserved), Some(driver)) = (
        oom.unlimited_peak_reserved_bytes,
        oom.unlimited_driver_view_bytes,
    ) {
        let whole = p
            .capacity
            .as_ref()
            .filter(|c| c.memory_fraction)
            .map(|_| (p.target.name.as_str(), p.target.total_memory));
        lines.push(Verdict {
            label: lang.say(PredictedText::LargerCard).into(),
            value: predicted::larger_card(reserved, driver, capacity, whole, lang),
            section: Some(lang.say(PredictedText::Target).into()),
            tone: Tone::Neutral,
        });
    }
}

/// The user's line that asked for the allocation, as `FILE:LINE`.
fn site(oom: &PredictedOom) -> Option<String> {
    match (&oom.file, oom.line) {
        (Some(f), Some(l)) => Some(format!("{f}:{l}")),
        (Some(f), None) => Some(f.clone()),
        _ => None,
    }
}

/// The three largest categories and modules alive at the phase's peak, worded with their sizes.
fn largest_at_peak(d: &PredictedPhase, lang: Style) -> (Vec<String>, Vec<String>) {
    d.at_peak
        .as_ref()
        .map_or((Vec::new(), Vec::new()), |at| largest(at, lang))
}

/// The three largest categories and modules of the storages alive at one moment, worded.
fn largest(at: &AtPeak, lang: Style) -> (Vec<String>, Vec<String>) {
    let mut categories: Vec<(&String, &u64)> = at.by_category.iter().collect();
    categories.sort_by(|a, b| b.1.cmp(a.1));
    let categories = categories
        .into_iter()
        .take(3)
        .map(|(c, b)| format!("{} {}", storage_category(c, lang), lang.size(Some(*b))))
        .collect();
    let modules = at
        .top_modules
        .iter()
        .take(3)
        .map(|m| format!("`{}` {}", m.module, lang.size(Some(m.bytes))))
        .collect();
    (categories, modules)
}

fn identity(b: &mut Vec<Block>, p: &PredictionDoc, lang: Style) {
    b.push(Block::Heading(lang.say(PredictedText::Prediction).into()));
    let d = &p.identity.declared;
    let code =
        |v: Option<&serde_json::Value>| v.map_or(Cell::Text("—".into()), |v| Cell::Code(text(v)));
    let a = &p.assumptions;
    let versions = [
        ("torch", &a.torch_version),
        ("transformers", &a.transformers_version),
        ("peft", &a.peft_version),
        ("CUDA", &a.cuda_version),
    ]
    .iter()
    .filter_map(|(name, v)| v.as_ref().map(|v| format!("{name} {v}")))
    .collect::<Vec<_>>()
    .join(", ");
    let rows = vec![
        vec![
            lang.say(IdentityText::Workload).into(),
            Cell::Code(p.identity.workload.clone()),
        ],
        vec![
            lang.say(IdentityText::ModelOrCode).into(),
            code(d.get("model")),
        ],
        vec![
            lang.say(PredictedText::CodeHash).into(),
            Cell::Code(p.identity.code_hash.clone()),
        ],
        vec![
            lang.say(CommonText::Status).into(),
            Cell::Code(p.status.to_string()),
        ],
        vec![
            lang.say(PredictedText::Created).into(),
            lang.date(&p.created_at).into(),
        ],
        vec![
            lang.say(PredictedText::Target).into(),
            Cell::Code(format!(
                "{} (sm {}.{}, {})",
                p.target.name,
                p.target.capability.0,
                p.target.capability.1,
                p.target.allocator_backend
            )),
        ],
        vec![
            lang.say(IdentityText::CapacityTorchTotalMemory).into(),
            Cell::size_with_unit(Some(p.target.total_memory)),
        ],
        vec![
            lang.say(PredictedText::Version).into(),
            Cell::Code(versions),
        ],
    ];
    b.push(Block::Table {
        header: vec![String::new(), String::new()],
        rows,
    });
    super::identity::dimensions_table(b, &p.dimensions, lang);
}

/// The predicted phases (in place of the observed ones), what is alive at the deciding peak, and
/// a chart of the predicted peaks.
fn predicted_section(b: &mut Vec<Block>, p: &PredictionDoc, f: &PredictedFacts, lang: Style) {
    b.push(Block::Heading(
        lang.say(PredictedText::PredictedHeading).into(),
    ));
    b.push(Block::Table {
        header: vec![
            "phase".into(),
            lang.say(CommonText::Status).into(),
            in_unit(lang.say(PredictedText::PredictedPeakAllocated), lang),
            in_unit(lang.say(PredictedText::PredictedPeakReserved), lang),
            in_unit(lang.say(PredictedText::PredictedEndAllocated), lang),
            in_unit(lang.say(PredictedText::PredictedEndReserved), lang),
            in_unit(lang.say(PredictedText::PredictedDriverView), lang),
        ],
        rows: p
            .phases
            .iter()
            .flat_map(|ph| {
                // A phase never reached has no figure: said so, never an empty or 0 cell.
                let figure = |v: Option<u64>| {
                    if ph.status == PhaseStatus::NotReached {
                        Cell::Text(lang.say(PredictedText::NotReached).into())
                    } else {
                        Cell::size(v)
                    }
                };
                let mut rows = vec![vec![
                    Cell::Code(format!("{}{}", "  ".repeat(p.depth(ph)), ph.name)),
                    Cell::Code(ph.status.to_string()),
                    figure(ph.peak_allocated_bytes),
                    figure(ph.peak_reserved_bytes),
                    figure(ph.end_allocated_bytes),
                    figure(ph.end_reserved_bytes),
                    figure(ph.driver_view_bytes),
                ]];
                // A bounded phase: the row above at the largest data-dependent sizes, this one
                // at the smallest.
                if let Some(l) = &ph.lower {
                    rows.push(vec![
                        Cell::Code(format!(
                            "{}  {}",
                            "  ".repeat(p.depth(ph)),
                            lang.say(PredictedText::LowerBound)
                        )),
                        Cell::Code(String::new()),
                        Cell::size(l.peak_allocated_bytes),
                        Cell::size(l.peak_reserved_bytes),
                        Cell::size(l.end_allocated_bytes),
                        Cell::size(l.end_reserved_bytes),
                        Cell::size(l.driver_view_bytes),
                    ]);
                }
                // At a published typical size: assumed, between the two bounds.
                if let Some(a) = &ph.assumed {
                    rows.push(vec![
                        Cell::Code(format!(
                            "{}  {} ({}%)",
                            "  ".repeat(p.depth(ph)),
                            lang.say(PredictedText::AssumedTypical),
                            a.fraction * 100.0
                        )),
                        Cell::Code(String::new()),
                        Cell::size(Some(a.peak_allocated_bytes)),
                        Cell::size(Some(a.peak_reserved_bytes)),
                        Cell::Text(String::new()),
                        Cell::Text(String::new()),
                        Cell::Text(String::new()),
                    ]);
                }
                rows
            })
            .collect(),
    });
    if p.phases.iter().any(|ph| {
        matches!(
            ph.status,
            PhaseStatus::OutOfMemory | PhaseStatus::NotReached
        )
    }) {
        b.push(Block::Para(lang.say(PredictedText::StatusNote).into()));
    }
    // What was alive when the card ran out explains an out-of-memory; else the deciding peak.
    let alive = match &p.out_of_memory {
        Some(oom) => Some((
            PredictedText::AtOom,
            oom.phase.as_deref().unwrap_or("?"),
            oom.phase_index,
            &oom.alive,
        )),
        None => f.deciding.and_then(|d| {
            Some((
                PredictedText::AtPeak,
                d.name.as_str(),
                Some(d.index),
                d.at_peak.as_ref()?,
            ))
        }),
    };
    if let Some((label, name, index, at)) = alive {
        let bytes = if p.out_of_memory.is_some() {
            PredictedText::AliveAtOom
        } else {
            PredictedText::Bytes
        };
        let index = index.map_or(String::new(), |i| {
            format!(" #{}", lang.integer(u128::from(i)))
        });
        b.push(Block::Para(labelled(
            lang.say(label),
            lang,
            format!("`{name}`{index}"),
        )));
        let mut categories: Vec<(&String, &u64)> = at.by_category.iter().collect();
        categories.sort_by(|a, b| b.1.cmp(a.1));
        b.push(Block::Table {
            header: vec![
                lang.say(PredictedText::Category).into(),
                in_unit(lang.say(bytes), lang),
            ],
            rows: categories
                .into_iter()
                .map(|(c, bytes)| vec![storage_category(c, lang).into(), Cell::size(Some(*bytes))])
                .collect(),
        });
        b.push(Block::Table {
            header: vec![
                lang.say(PredictedText::Module).into(),
                in_unit(lang.say(bytes), lang),
            ],
            rows: at
                .top_modules
                .iter()
                .map(|m| vec![Cell::Code(m.module.clone()), Cell::size(Some(m.bytes))])
                .collect(),
        });
    }
    let bars: Vec<(String, Vec<Option<u64>>)> = p
        .phases
        .iter()
        .filter(|ph| ph.status.has_figures())
        .map(|ph| {
            (
                format!("{} #{}", ph.name, ph.index),
                vec![
                    ph.peak_allocated_bytes,
                    ph.peak_reserved_bytes,
                    ph.driver_view_bytes,
                ],
            )
        })
        .collect();
    if !bars.is_empty() {
        b.push(Block::Chart(Chart::Bars {
            title: lang.say(PredictedText::ChartTitle).into(),
            series: vec![
                lang.say(PredictedText::PredictedPeakAllocated).into(),
                lang.say(PredictedText::PredictedPeakReserved).into(),
                lang.say(PredictedText::PredictedDriverView).into(),
            ],
            categories: bars,
        }));
    }
}

/// The prediction's ledger: the estimate beside the predicted categories (no observed column).
fn gap(b: &mut Vec<Block>, l: &Ledger, lang: Style) {
    b.push(Block::Heading(
        lang.say(CommonText::WhyPeakExceedsEstimate).into(),
    ));
    let at_oom = l.built_on == ledger::BuiltOn::OutOfMemory;
    b.push(Block::Para(if at_oom {
        predicted::oom_explained(&l.phase, l.phase_index, &l.device, lang)
    } else {
        catalog::ledger::phase_explained(l, lang)
    }));
    let name = if at_oom {
        names::line_at_oom
    } else {
        names::line
    };
    let cell =
        |f: &Option<ledger::Figure>| f.as_ref().map_or("—".into(), |f| Cell::size(Some(f.bytes)));
    b.push(Block::Table {
        header: vec![
            lang.say(GapText::Term).into(),
            in_unit(lang.say(GapText::Estimate), lang),
            in_unit(lang.say(GapText::Predicted), lang),
            lang.say(GapText::Checkpoint).into(),
        ],
        rows: l
            .lines
            .iter()
            .map(|x| {
                vec![
                    name(x.id, lang).into(),
                    cell(&x.estimate),
                    cell(&x.predicted),
                    names::checkpoint(&x.checkpoint, lang).into(),
                ]
            })
            .collect(),
    });
    // The predicted out-of-memory's post-mortem, worded as a measured one's.
    let post_mortem = catalog::ledger::post_mortem(l, lang);
    if !post_mortem.is_empty() {
        b.push(Block::Heading(lang.say(GapText::PostMortemHeading).into()));
        b.push(Block::List(post_mortem));
    }
}

/// What the prediction rests on: the allocator model, what it does not model, the values read
/// from data, its notes, and the estimate's assumed terms.
fn assumed(b: &mut Vec<Block>, p: &PredictionDoc, e: Option<&EstimateDoc>, lang: Style) {
    b.push(Block::Heading(lang.say(CommonText::AssumedHeading).into()));
    let a = &p.assumptions;
    let mut items = vec![labelled(
        lang.say(PredictedText::AllocatorModel),
        lang,
        &a.allocator_model,
    )];
    if !a.not_modelled.is_empty() {
        items.push(labelled(
            lang.say(PredictedText::NotModelled),
            lang,
            a.not_modelled.join("; "),
        ));
    }
    if !a.placeholder_reads.is_empty() {
        let reads: Vec<String> = a
            .placeholder_reads
            .iter()
            .map(|r| {
                format!(
                    "`{}:{}` × {} → {}",
                    r.file.as_deref().unwrap_or("?"),
                    r.line.map_or("?".into(), |l| l.to_string()),
                    lang.integer(u128::from(r.count)),
                    r.answer
                )
            })
            .collect();
        items.push(labelled(
            lang.say(PredictedText::PlaceholderReads),
            lang,
            reads.join("; "),
        ));
    }
    if let Some(e) = e {
        for t in e.terms.iter().filter(|t| t.kind == Kind::Assumed) {
            let mut size = format!("{} — `{}`", lang.size(Some(t.bytes)), t.formula);
            if let (crate::estimate::TermId::DequantizedWeight { .. }, Some(seen)) =
                (&t.id, dequantized_seen(p, lang))
            {
                // The replay saw bitsandbytes' own dequantization: predicted, not assumed.
                size = format!("{seen}; {size}");
            }
            items.push(labelled(&names::term(t, lang), lang, size));
        }
    }
    for n in &p.notes {
        items.push(labelled(lang.say(PredictedText::Notes), lang, n));
    }
    b.push(Block::List(items));
}

/// The dequantized weights the replay saw (bitsandbytes' `dequantize_4bit` outputs): the
/// largest and how many, and how much of them was alive at the predicted peak.
fn dequantized_seen(p: &PredictionDoc, lang: Style) -> Option<String> {
    let seen = p.dequantized.as_ref()?;
    let at_peak = p
        .peak_phase()
        .and_then(|(_, ph)| ph.at_peak.as_ref())
        .and_then(|a| a.by_category.get("dequantized weight").copied())
        .unwrap_or(0);
    Some(format!(
        "{}: {} {} {}, {} {}",
        lang.say(PredictedText::DequantizedPredicted),
        lang.integer(u128::from(seen.count)),
        lang.say(PredictedText::DequantizedMade),
        lang.size(Some(seen.largest_bytes)),
        lang.say(PredictedText::DequantizedAtPeak),
        lang.size(Some(at_peak)),
    ))
}
