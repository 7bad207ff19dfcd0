//! The fiche: a short sheet someone can decide from. Identity, dimensions, environment and scope;
//! then what was **calculated**, what was **observed** and what is still **assumed**, kept apart;
//! then the configuration chosen and the raw results attached (path and SHA-256).
//!
//! Reading rules of the guide, enforced here: the gap between reserved and allocated is shown only
//! from two readings of the same checkpoint (never peak reserved − peak allocated); an end level
//! minus a start level is never presented as the volume of temporary tensors; a partial peak
//! before a failure is never presented as the need of a complete run.

use serde_json::Value;

use super::document::{Attachment, Block, Chart, Document};
use super::inputs::{EstimateDoc, InputError, InputFile as Input, Loaded};
use crate::cards;
use crate::measure::result::MeasureResult;
use crate::sweep::series::Series;
use crate::units::Bytes;

/// English or French.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    En,
    Fr,
}

impl Lang {
    fn t(self, en: &'static str, fr: &'static str) -> &'static str {
        match self {
            Lang::En => en,
            Lang::Fr => fr,
        }
    }
    fn code(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Fr => "fr",
        }
    }
}

/// `1.23 GB · 1.15 GiB · 1,234,567,890 B`, or `null` (never 0) for a value not read.
fn both(v: Option<u64>, lang: Lang) -> String {
    match v {
        None => lang.t("null (not read)", "null (non lu)").into(),
        Some(b) => {
            let b = Bytes(b);
            let (gb, gib) = (format!("{:.2}", b.gb()), format!("{:.2}", b.gib()));
            match lang {
                Lang::En => format!("{gb} GB · {gib} GiB · {} B", b.grouped()),
                Lang::Fr => format!(
                    "{} Go · {} Gio · {} o",
                    gb.replace('.', ","),
                    gib.replace('.', ","),
                    b.grouped().replace(',', "\u{202f}")
                ),
            }
        }
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

/// What PyTorch declared about the run's first device.
fn first_device(r: &MeasureResult) -> Option<&Value> {
    r.environment
        .python
        .as_ref()?
        .device(r.scope.devices.first()?)
}

fn gpu_name(r: &MeasureResult) -> Option<String> {
    first_device(r)?.get("name")?.as_str().map(String::from)
}

/// Builds the fiche from a result, an optional series and an optional estimate.
pub fn build(
    result: &Loaded,
    series: Option<&Loaded>,
    estimate: Option<&Loaded>,
    lang: Lang,
) -> Result<Document, InputError> {
    let Input::Measure(r) = &result.doc else {
        return Err(result.wrong(
            super::inputs::MEASURE,
            "the first file of a report is a measure result",
        ));
    };
    let s: Option<&Series> = match series.map(|l| (&l.doc, l)) {
        None => None,
        Some((Input::Series(s), _)) => Some(s),
        Some((_, l)) => {
            return Err(l.wrong(
                super::inputs::SERIES,
                "the second file of a report is a sweep series",
            ));
        }
    };
    let e: Option<&EstimateDoc> = estimate.map(Loaded::as_estimate).transpose()?;
    if let Some(s) = s {
        let first = s
            .trials
            .iter()
            .filter_map(|t| t.result.as_ref())
            .find_map(gpu_name);
        if let (Some(a), Some(b)) = (gpu_name(r), first)
            && a != b
        {
            return Err(InputError::Content {
                path: series.map(|l| l.path.clone()).unwrap_or_default(),
                schema: super::inputs::SERIES.into(),
                message: format!(
                    "the result was measured on `{a}` and the series on `{b}`: report one GPU at a time"
                ),
            });
        }
    }
    if let (Some(s), Some(l)) = (s, series) {
        check_series_matches(r, s, l)?;
    }
    if let (Some(e), Some(l)) = (e, estimate) {
        super::inputs::check_estimate_of(r, e, l)?;
    }
    let mut b = Vec::new();
    if let Some(s) = s
        && s.status == crate::sweep::series::SeriesStatus::Running
    {
        let warning = lang.t(
            "Warning: this series was never closed (status `running`): its sweep is still running or was killed. Its finished trials are shown; the frontier and the fit may be missing.",
            "Attention : cette série n’a jamais été close (statut `running`) : son balayage tourne encore ou a été tué. Ses essais terminés sont montrés ; la frontière et l’ajustement peuvent manquer.",
        );
        eprintln!(
            "warning: {}: {warning}",
            series.map_or(String::new(), |l| l.path.display().to_string())
        );
        b.push(Block::Para(warning.into()));
    }
    identity(&mut b, r, lang);
    environment(&mut b, r, lang);
    calculated(&mut b, e, lang);
    observed(&mut b, r, s, lang);
    ranks(&mut b, r, lang);
    gap(&mut b, r, e, lang);
    timeline(&mut b, r, lang);
    assumed(&mut b, r, s, e, lang);
    chosen(&mut b, r, s, lang);
    let mut attachments = Vec::new();
    let mut listed = Vec::new();
    let nodes = result.merged_from.iter();
    for l in [Some(result), series, estimate]
        .into_iter()
        .flatten()
        .chain(nodes)
    {
        listed.push(format!("{} — SHA-256 {}", l.path.display(), l.sha256));
        attachments.push(Attachment {
            path: l.path.display().to_string(),
            sha256: l.sha256.clone(),
            raw: l.raw.clone(),
        });
    }
    b.push(Block::Heading(
        lang.t("Raw results attached", "Résultats bruts joints")
            .into(),
    ));
    b.push(Block::List(listed));
    Ok(Document {
        title: format!(
            "{} — {}",
            lang.t("iteragpu memory fiche", "Fiche mémoire iteragpu"),
            r.identity
                .declared
                .get("model")
                .map(text)
                .unwrap_or_else(|| r.identity.workload.clone())
        ),
        lang: lang.code(),
        blocks: b,
        attachments,
    })
}

/// The two largest categories alive at the predicted peak of the `k`-th phase named `name`.
fn largest_at_peak(r: &MeasureResult, name: &str, k: usize, lang: Lang) -> String {
    let Some(at) = r
        .prediction
        .as_ref()
        .and_then(|p| p.phases.iter().filter(|ph| ph.name == name).nth(k))
        .and_then(|ph| ph.at_peak.as_ref())
    else {
        return "—".into();
    };
    let mut categories: Vec<(&String, &u64)> = at.by_category.iter().collect();
    categories.sort_by(|a, b| b.1.cmp(a.1));
    categories
        .iter()
        .take(2)
        .map(|(c, b)| format!("{c} {}", both(Some(**b), lang)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A series belongs with a result when every dimension but the varied ones is the same.
fn check_series_matches(r: &MeasureResult, s: &Series, l: &Loaded) -> Result<(), InputError> {
    for t in &s.trials {
        let Some(tr) = &t.result else { continue };
        let varied: Vec<String> = t.values.keys().map(|k| k.replace('-', "_")).collect();
        for (key, value) in &r.dimensions {
            if varied.contains(key) {
                continue;
            }
            let theirs = tr.dimensions.get(key);
            if theirs != Some(value) {
                return Err(InputError::Content {
                    path: l.path.clone(),
                    schema: super::inputs::SERIES.into(),
                    message: format!(
                        "the result has {key} = {} and trial {} of the series has {key} = {}: they are not the same workload besides the varied dimension; report a series of this configuration",
                        text(value),
                        t.index + 1,
                        theirs.map_or("null".into(), text)
                    ),
                });
            }
        }
        if tr.identity.workload != r.identity.workload {
            return Err(InputError::Content {
                path: l.path.clone(),
                schema: super::inputs::SERIES.into(),
                message: format!(
                    "the result measured the `{}` workload and the series `{}`",
                    r.identity.workload, tr.identity.workload
                ),
            });
        }
    }
    Ok(())
}

fn identity(b: &mut Vec<Block>, r: &MeasureResult, lang: Lang) {
    b.push(Block::Heading(
        lang.t("Identity", "Identité de l’essai").into(),
    ));
    let d = &r.identity.declared;
    let mut rows = vec![
        vec![
            lang.t("workload", "charge").into(),
            r.identity.workload.clone(),
        ],
        vec![
            lang.t("model or code", "modèle ou code").into(),
            d.get("model").map(text).unwrap_or_else(|| "—".into()),
        ],
        vec![
            lang.t("revision", "révision").into(),
            d.get("revision").map(text).unwrap_or_else(|| "—".into()),
        ],
        vec![
            lang.t("measuring code", "code de mesure").into(),
            r.identity.code_hash.clone(),
        ],
        vec![
            lang.t("seed", "graine").into(),
            r.identity.seed.map_or("—".into(), |s| s.to_string()),
        ],
        vec![
            lang.t("run", "exécution").into(),
            format!("{} → {} ({})", r.started_at, r.ended_at, r.status),
        ],
    ];
    let shapes: Vec<String> = r
        .phases
        .iter()
        .filter_map(|p| {
            p.inputs
                .get("processed_shape")
                .map(|s| format!("{}: {}", p.name, text(s)))
        })
        .take(3)
        .collect();
    if !shapes.is_empty() {
        rows.push(vec![
            lang.t("inputs (processed shapes)", "entrées (formes traitées)")
                .into(),
            shapes.join("; "),
        ]);
    }
    b.push(Block::Table {
        header: vec![String::new(), String::new()],
        rows,
    });
    b.push(Block::Heading(lang.t("Dimensions", "Dimensions").into()));
    b.push(Block::Table {
        header: vec![
            lang.t("dimension", "dimension").into(),
            lang.t("value", "valeur").into(),
        ],
        rows: r
            .dimensions
            .iter()
            .map(|(k, v)| vec![k.clone(), text(v)])
            .collect(),
    });
}

fn environment(b: &mut Vec<Block>, r: &MeasureResult, lang: Lang) {
    b.push(Block::Heading(
        lang.t("Environment", "Environnement").into(),
    ));
    let mut rows = Vec::new();
    let py = r.environment.python.as_ref();
    let torch = py.and_then(|p| p.torch.as_ref());
    let tget = |k: &str| {
        torch
            .and_then(|t| t.get(k))
            .map(text)
            .unwrap_or_else(|| "null".into())
    };
    rows.push(vec![
        "GPU".into(),
        format!(
            "{} ({})",
            gpu_name(r).unwrap_or_else(|| "null".into()),
            r.scope.devices.join(", ")
        ),
    ]);
    if let Some(total) = first_device(r)
        .and_then(|d| d.get("total_memory"))
        .and_then(Value::as_u64)
    {
        rows.push(vec![
            lang.t(
                "capacity (PyTorch total_memory)",
                "capacité (total_memory de PyTorch)",
            )
            .into(),
            both(Some(total), lang),
        ]);
    }
    match &r.environment.driver {
        Some(d) => {
            rows.push(vec![
                lang.t("driver", "pilote").into(),
                format!(
                    "{} (CUDA {})",
                    d.driver_version.as_deref().unwrap_or("?"),
                    d.cuda_driver_version.as_deref().unwrap_or("?")
                ),
            ]);
            if let Some(g) = d.gpus.first() {
                rows.push(vec![
                    lang.t("capacity (NVML)", "capacité (NVML)").into(),
                    both(g.total_bytes, lang),
                ]);
            }
        }
        None => rows.push(vec![
            lang.t("driver", "pilote").into(),
            r.environment
                .driver_reason
                .clone()
                .unwrap_or_else(|| "null".into()),
        ]),
    }
    rows.push(vec![
        "Python".into(),
        py.map(|p| {
            format!(
                "{} {}",
                text(&p.python["executable"]),
                text(&p.python["version"])
            )
        })
        .unwrap_or_else(|| "null".into()),
    ]);
    rows.push(vec!["PyTorch".into(), tget("version")]);
    rows.push(vec![
        "CUDA / HIP".into(),
        format!(
            "{} (cuda {}, hip {})",
            tget("backend"),
            tget("cuda_version"),
            tget("hip_version")
        ),
    ]);
    rows.push(vec![
        lang.t("allocator backend", "backend de l’allocateur")
            .into(),
        tget("allocator_backend"),
    ]);
    if let Some(settings) = py.and_then(|p| p.settings.as_object()) {
        let set: Vec<String> = settings
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| format!("{k}={}", text(v)))
            .collect();
        rows.push(vec![
            lang.t("allocator settings", "réglages de l’allocateur")
                .into(),
            if set.is_empty() {
                lang.t("none set", "aucun").into()
            } else {
                set.join(", ")
            },
        ]);
    }
    b.push(Block::Table {
        header: vec![String::new(), String::new()],
        rows,
    });
    b.push(Block::Heading(lang.t("Scope", "Périmètre").into()));
    let p = &r.policies;
    b.push(Block::List(vec![
        format!(
            "{}: {}",
            lang.t("phases", "phases"),
            r.scope.phases.join(", ")
        ),
        format!(
            "{}: {}",
            lang.t("first pass", "premier passage"),
            r.scope.first_pass
        ),
        format!(
            "{}: {}, {} {}, {} {}, empty_cache {}",
            lang.t("protocol", "protocole"),
            p.protocol,
            p.warmup,
            lang.t("warm-up passes", "passages d’échauffement"),
            p.repeats,
            lang.t("repeats", "répétitions"),
            p.empty_cache.as_str()
        ),
        format!("{}: {}", lang.t("process", "processus"), p.process),
    ]));
}

fn calculated(b: &mut Vec<Block>, e: Option<&EstimateDoc>, lang: Lang) {
    b.push(Block::Heading(lang.t("Calculated", "Calculé").into()));
    let Some(e) = e else {
        b.push(Block::Para(
            lang.t(
                "No estimate attached: give --estimate EST.json (the output of `iteragpu estimate --json`).",
                "Aucune estimation jointe : ajoutez --estimate EST.json (sortie de `iteragpu estimate --json`).",
            )
            .into(),
        ));
        return;
    };
    let rows: Vec<Vec<String>> = e
        .terms
        .iter()
        .filter(|t| t.kind == "calculated")
        .map(|t| {
            vec![
                t.name.clone(),
                both(Some(t.bytes), lang),
                t.formula.clone(),
                if t.in_total { "" } else { "(info)" }.into(),
            ]
        })
        .collect();
    b.push(Block::Table {
        header: vec![
            lang.t("term", "poste").into(),
            lang.t("bytes", "octets").into(),
            lang.t("formula", "formule").into(),
            String::new(),
        ],
        rows,
    });
    b.push(Block::Para(format!(
        "{}: {}",
        lang.t(
            "Preparation hypothesis (calculated and assumed terms together)",
            "Hypothèse de préparation (postes calculés et supposés ensemble)"
        ),
        both(Some(e.total_bytes), lang)
    )));
}

fn observed(b: &mut Vec<Block>, r: &MeasureResult, s: Option<&Series>, lang: Lang) {
    b.push(Block::Heading(lang.t("Observed", "Observé").into()));
    let mut rows = Vec::new();
    for p in &r.phases {
        if p.devices.is_empty() {
            rows.push(vec![
                p.name.clone(),
                "—".into(),
                p.status.to_string(),
                p.note.clone().unwrap_or_default(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]);
        }
        for d in &p.devices {
            let gap = match (d.end_reserved_bytes, d.end_allocated_bytes) {
                (Some(rv), Some(a)) if rv >= a => both(Some(rv - a), lang),
                _ => "null".into(),
            };
            rows.push(vec![
                p.name.clone(),
                d.device.clone(),
                p.status.to_string(),
                both(d.peak_allocated_bytes, lang),
                both(d.peak_reserved_bytes, lang),
                both(d.end_allocated_bytes, lang),
                both(d.end_reserved_bytes, lang),
                gap,
            ]);
        }
    }
    b.push(Block::Table {
        header: vec![
            "phase".into(),
            lang.t("device", "appareil").into(),
            lang.t("status", "statut").into(),
            lang.t("peak allocated", "pic allocated").into(),
            lang.t("peak reserved", "pic reserved").into(),
            lang.t("end allocated", "allocated fin").into(),
            lang.t("end reserved", "reserved fin").into(),
            lang.t(
                "reserved − allocated at the end (same checkpoint)",
                "reserved − allocated en fin (même point de contrôle)",
            )
            .into(),
        ],
        rows,
    });
    b.push(Block::List(vec![
        lang.t(
            "Peaks are absolute over each phase and include what already existed at its start. Reserved − allocated is shown only from two readings of the same checkpoint, never as peak reserved − peak allocated, which describes no single moment.",
            "Les pics sont absolus sur chaque phase et incluent ce qui existait à son début. L’écart reserved − allocated n’est montré qu’à partir de deux lectures d’un même point de contrôle, jamais comme pic reserved − pic allocated, qui ne décrit aucun instant.",
        )
        .into(),
        lang.t(
            "An end level minus a start level is not the volume of the phase's temporary tensors: earlier objects may have been freed during the phase.",
            "Un niveau de fin moins un niveau de départ n’est pas le volume des tenseurs temporaires de la phase : des objets antérieurs ont pu être libérés pendant la phase.",
        )
        .into(),
    ]));
    // The driver's view.
    let driver: Vec<Vec<String>> = r
        .phases
        .iter()
        .flat_map(|p| p.driver.iter().flatten().map(move |d| (p, d)))
        .filter(|(_, d)| d.peak_process_used_bytes.is_some())
        .map(|(p, d)| {
            vec![
                p.name.clone(),
                d.device.clone(),
                both(d.peak_process_used_bytes, lang),
                both(d.outside_allocator_at_end_bytes, lang),
                d.samples.to_string(),
            ]
        })
        .collect();
    if driver.is_empty() {
        b.push(Block::Para(format!(
            "{}: {}",
            lang.t("Driver's view", "Vue du pilote"),
            r.environment
                .driver_reason
                .clone()
                .unwrap_or_else(|| lang.t("not sampled", "non échantillonnée").into())
        )));
    } else {
        b.push(Block::Table {
            header: vec![
                "phase".into(),
                lang.t("device", "appareil").into(),
                lang.t("process peak (NVML)", "pic du processus (NVML)").into(),
                lang.t("outside PyTorch's allocator at the end (CUDA context, libraries; not a leak by itself)", "hors de l’allocateur PyTorch en fin (contexte CUDA, bibliothèques ; pas une fuite en soi)").into(),
                lang.t("samples", "échantillons").into(),
            ],
            rows: driver,
        });
    }
    if let Some(f) = &r.failure {
        b.push(Block::Para(format!(
            "{} {}: {} {} — {}",
            lang.t("Failure in", "Échec dans"),
            f.phase.as_deref().unwrap_or("?"),
            f.error_type.as_deref().unwrap_or(""),
            f.message.as_deref().unwrap_or(""),
            lang.t(
                "a partial peak before a failure is not the memory need of a complete run.",
                "un pic partiel avant une saturation ne constitue pas le besoin mémoire d’une exécution complète.",
            )
        )));
    }
    if !r.predictions.is_empty() {
        b.push(Block::Para(lang.t(
            "Predicted (the same code on data-less tensors for this card, run after the measurement; a prediction, not a measurement) next to observed:",
            "Prédit (le même code sur des tenseurs sans données pour cette carte, après la mesure ; une prédiction, pas une mesure) à côté de l’observé :",
        ).into()));
        let mut seen: std::collections::HashMap<&str, usize> = Default::default();
        b.push(Block::Table {
            header: vec![
                "phase".into(),
                lang.t("predicted peak allocated", "pic allocated prévu")
                    .into(),
                lang.t("observed", "observé").into(),
                lang.t("error", "écart").into(),
                lang.t("predicted peak reserved", "pic reserved prévu")
                    .into(),
                lang.t("observed", "observé").into(),
                lang.t("error", "écart").into(),
                lang.t("largest at the predicted peak", "le plus gros au pic prévu")
                    .into(),
            ],
            rows: r
                .predictions
                .iter()
                .map(|c| {
                    let n = seen.entry(c.phase.as_str()).or_default();
                    let k = *n;
                    *n += 1;
                    vec![
                        c.phase.clone(),
                        both(Some(c.predicted_peak_allocated_bytes), lang),
                        both(c.observed_peak_allocated_bytes, lang),
                        c.error_allocated_pct
                            .map_or("null".into(), |p| format!("{p:+.1} %")),
                        both(Some(c.predicted_peak_reserved_bytes), lang),
                        both(c.observed_peak_reserved_bytes, lang),
                        c.error_reserved_pct
                            .map_or("null".into(), |p| format!("{p:+.1} %")),
                        largest_at_peak(r, &c.phase, k, lang),
                    ]
                })
                .collect(),
        });
    }
    for c in &r.kv_cache {
        b.push(Block::Para(format!(
            "{} {}: {} {} / {} {} ({})",
            lang.t("KV cache after", "Cache KV après"),
            c.phase,
            lang.t("observed", "observé"),
            both(c.observed_bytes, lang),
            lang.t("estimated", "estimé"),
            both(Some(c.estimated_bytes), lang),
            c.difference_pct
                .map_or("null".into(), |p| format!("{p:+.2} %"))
        )));
    }
    let bars: Vec<(String, Vec<Option<u64>>)> = r
        .phases
        .iter()
        .filter_map(|p| {
            let d = p.devices.first()?;
            let drv = p
                .driver
                .as_ref()
                .and_then(|v| v.first())
                .and_then(|x| x.peak_process_used_bytes);
            Some((
                format!("{} #{}", p.name, p.index),
                vec![d.peak_allocated_bytes, d.peak_reserved_bytes, drv],
            ))
        })
        .collect();
    if !bars.is_empty() {
        b.push(Block::Chart(Chart::Bars {
            title: lang
                .t(
                    "Peaks per phase (first device)",
                    "Pics par phase (premier appareil)",
                )
                .into(),
            series: vec![
                lang.t("peak allocated", "pic allocated").into(),
                lang.t("peak reserved", "pic reserved").into(),
                lang.t("process peak (driver)", "pic du processus (pilote)")
                    .into(),
            ],
            categories: bars,
        }));
    }
    if let Some(s) = s {
        series_observed(b, s, lang);
    }
}

fn series_observed(b: &mut Vec<Block>, s: &Series, lang: Lang) {
    // A list, grid or frontier varies a dimension; loads and processes have none.
    let var = s.varied.first().map_or("", |v| v.name());
    let rows: Vec<Vec<String>> = s
        .trials
        .iter()
        .map(|t| {
            let values: Vec<String> = t
                .values
                .iter()
                .map(|(k, v)| format!("{k}={}", text(v)))
                .chain(t.load.clone())
                .collect();
            let status = crate::sweep::render::status_label(t).to_string();
            let peak = if t.status.is_ok() {
                both(t.peak_reserved_bytes, lang)
            } else {
                format!(
                    "{} ({})",
                    both(t.peak_reserved_bytes, lang),
                    lang.t(
                        "partial: not the need of a complete run",
                        "partiel : pas le besoin d’une exécution complète"
                    )
                )
            };
            vec![
                values.join(" "),
                status,
                peak,
                format!("{:.2} s", t.duration_s),
            ]
        })
        .collect();
    b.push(Block::Table {
        header: vec![
            lang.t("trial", "essai").into(),
            lang.t("status", "statut").into(),
            lang.t("peak reserved", "pic reserved").into(),
            lang.t("duration", "durée").into(),
        ],
        rows,
    });
    let largest = s
        .trials
        .iter()
        .filter(|t| t.status.is_ok())
        .filter_map(|t| t.values.get(var).and_then(Value::as_u64))
        .max();
    if let Some(v) = largest {
        b.push(Block::Para(format!(
            "{} {var} = {v}",
            lang.t(
                "Largest load tested successfully:",
                "Plus grande charge testée avec succès :"
            )
        )));
    }
    if let Some(f) = &s.frontier {
        b.push(Block::Para(format!(
            "{} {}: {} {}, {} {} ({} {}, {} {})",
            lang.t("Frontier of", "Frontière de"),
            f.variable,
            lang.t("last success", "dernier succès"),
            f.last_success.map_or("none".into(), |v| v.to_string()),
            lang.t("first failure", "premier échec"),
            f.first_failure.map_or("none".into(), |v| v.to_string()),
            f.trials,
            lang.t("trials", "essais"),
            lang.t("resolution", "résolution"),
            f.resolution
        )));
    }
    if let Some(l) = &s.limit {
        b.push(Block::Para(format!(
            "{}: {} ({})",
            lang.t(
                "Emulated limit (not a real card)",
                "Limite émulée (pas une vraie carte)"
            ),
            both(Some(l.bytes), lang),
            l.source
        )));
    }
    if !s.alloc_confs.is_empty() {
        // One chart across two allocators would mix two curves: the settings side by side.
        alloc_conf_comparison(b, s, lang);
        return;
    }
    let points: Vec<(u64, Option<u64>, bool)> = s
        .trials
        .iter()
        .filter_map(|t| {
            Some((
                t.values.get(var)?.as_u64()?,
                t.peak_reserved_bytes,
                t.status.is_ok(),
            ))
        })
        .collect();
    if !points.is_empty() {
        let max_peak = points.iter().filter_map(|p| p.1).max().unwrap_or(0);
        let mut lines: Vec<(String, u64)> = s
            .limit
            .iter()
            .map(|l| {
                (
                    lang.t("emulated limit", "limite émulée").to_string(),
                    l.bytes,
                )
            })
            .collect();
        for card in cards::catalog() {
            let (cap, _) = card.device_capacity();
            if cap.get() >= max_peak / 2 && cap.get() <= max_peak.saturating_mul(4).max(1 << 30) {
                lines.push((card.name, cap.get()));
            }
        }
        if lines.is_empty()
            && let Some(smallest) = cards::catalog()
                .into_iter()
                .min_by_key(|c| c.device_capacity().0)
        {
            // At least one card, so the curve is seen against a real capacity.
            lines.push((smallest.name.clone(), smallest.device_capacity().0.get()));
        }
        lines.truncate(6);
        b.push(Block::Chart(Chart::Scatter {
            title: format!(
                "{} {var}",
                lang.t("Peak reserved against", "Pic reserved en fonction de")
            ),
            x_label: var.to_string(),
            points,
            lines,
        }));
    }
}

/// An allocator A/B (`sweep --vary alloc_conf=…`): each setting's peak reserved per value.
fn alloc_conf_comparison(b: &mut Vec<Block>, s: &Series, lang: Lang) {
    let first = s.alloc_confs[0];
    b.push(Block::Para(format!(
        "{} {first} ({}).",
        lang.t(
            "Allocator settings compared in fresh processes; the change is against",
            "Réglages de l’allocateur comparés dans des processus neufs ; l’écart est mesuré par rapport à"
        ),
        lang.t(
            "complete trials only: a partial peak compares nothing",
            "essais complets seulement : un pic partiel ne se compare pas"
        )
    )));
    let mut header = vec![
        s.varied
            .first()
            .map_or("—".into(), |v| v.name().to_string()),
    ];
    header.extend(s.alloc_confs.iter().map(|a| a.name().to_string()));
    let rows = s
        .alloc_conf_rows()
        .iter()
        .map(|row| {
            let mut cells = vec![row.value.map_or("—".into(), |(_, v)| v.to_string())];
            for (k, t) in row.trials.iter().enumerate() {
                cells.push(match t {
                    None => lang.t("not run", "non exécuté").into(),
                    Some(t) if !t.status.is_ok() => {
                        crate::sweep::render::status_label(t).to_string()
                    }
                    Some(t) => match (k, row.change(k)) {
                        (0, _) | (_, None) => both(t.peak_reserved_bytes, lang),
                        (_, Some(c)) => {
                            format!(
                                "{} ({:+.1} %)",
                                both(t.peak_reserved_bytes, lang),
                                c * 100.0
                            )
                        }
                    },
                });
            }
            cells
        })
        .collect();
    b.push(Block::Table { header, rows });
}

/// Under torchrun: every rank on its own device, side by side, never added together.
fn ranks(b: &mut Vec<Block>, r: &MeasureResult, lang: Lang) {
    let Some(d) = &r.distributed else { return };
    b.push(Block::Heading(
        lang.t("Ranks (torchrun)", "Rangs (torchrun)").into(),
    ));
    b.push(Block::Para(format!(
        "{} {} ({} × {}). {}",
        lang.t("World size", "Taille du monde"),
        d.world_size,
        d.torchrun.nnodes,
        d.torchrun.nproc_per_node,
        lang.t(
            "Each rank is a fresh worker read on its own device; the figures are per device and are never added together. The phases above are those of the rank with the highest peak reserved.",
            "Chaque rang est un processus neuf lu sur son propre périphérique ; les chiffres sont par périphérique et ne s’additionnent jamais. Les phases ci-dessus sont celles du rang au pic réservé le plus haut.",
        )
    )));
    let rows = d
        .ranks
        .iter()
        .map(|k| {
            let readings = k.phases.iter().flat_map(|p| p.devices.iter());
            let outside = k
                .phases
                .iter()
                .flat_map(|p| p.driver.iter().flatten())
                .filter_map(|x| x.outside_allocator_at_end_bytes)
                .max();
            vec![
                k.rank.to_string(),
                format!("{} / {}", k.node_rank, k.host),
                k.device.clone(),
                k.status.to_string(),
                both(
                    readings
                        .clone()
                        .filter_map(|x| x.peak_allocated_bytes)
                        .max(),
                    lang,
                ),
                both(readings.filter_map(|x| x.peak_reserved_bytes).max(), lang),
                both(outside, lang),
                k.stopped_because.clone().unwrap_or_default(),
            ]
        })
        .collect();
    b.push(Block::Table {
        header: vec![
            lang.t("rank", "rang").into(),
            lang.t("node / host", "nœud / hôte").into(),
            lang.t("device", "périphérique").into(),
            lang.t("status", "statut").into(),
            "peak allocated".into(),
            "peak reserved".into(),
            lang.t(
                "outside PyTorch's allocator (CUDA context, NCCL)",
                "hors de l’allocateur de PyTorch (contexte CUDA, NCCL)",
            )
            .into(),
            lang.t("note", "note").into(),
        ],
        rows,
    });
    if let Some(i) = &d.imbalance {
        b.push(Block::Para(format!(
            "{} {} ({}); {} {} ({}); {} {}.",
            lang.t(
                "Highest peak reserved: rank",
                "Pic réservé le plus haut : rang"
            ),
            i.max_rank,
            both(Some(i.max_peak_reserved_bytes), lang),
            lang.t("lowest: rank", "le plus bas : rang"),
            i.min_rank,
            both(Some(i.min_peak_reserved_bytes), lang),
            lang.t("spread", "écart"),
            both(Some(i.spread_bytes), lang)
        )));
    }
    let merged: Vec<String> = r
        .notes
        .iter()
        .filter(|n| n.starts_with("merged from"))
        .cloned()
        .collect();
    if !merged.is_empty() {
        b.push(Block::List(merged));
    }
}

/// Why the peak exceeds the estimate: the gap ledger as a table and a waterfall.
fn gap(b: &mut Vec<Block>, r: &MeasureResult, e: Option<&EstimateDoc>, lang: Lang) {
    use crate::explain::ledger::{self, LineKind, Provenance};
    let Ok(l) = ledger::of_result(r, e, None) else {
        return;
    };
    if l.lines.is_empty() {
        post_mortem(b, &l, lang);
        return;
    }
    b.push(Block::Heading(
        lang.t(
            "Why the peak exceeds the estimate",
            "Pourquoi le pic dépasse l’estimation",
        )
        .into(),
    ));
    b.push(Block::Para(format!(
        "{} {} #{} ({}). {}",
        lang.t(
            "The phase with the highest peak:",
            "La phase au pic le plus haut :"
        ),
        l.phase,
        l.phase_index,
        l.device,
        lang.t(
            "Each figure says where it comes from; what no term explains is its own line.",
            "Chaque chiffre dit d’où il vient ; ce qu’aucun terme n’explique a sa propre ligne.",
        )
    )));
    let cell = |f: &Option<ledger::Figure>| match f {
        None => "—".to_string(),
        Some(f) => format!(
            "{} ({})",
            both(Some(f.bytes), lang),
            match f.provenance {
                Provenance::Calculated => lang.t("calculated", "calculé"),
                Provenance::Assumed => lang.t("assumed", "supposé"),
                Provenance::Predicted => lang.t("predicted", "prédit"),
                Provenance::Observed => lang.t("observed", "observé"),
            }
        ),
    };
    b.push(Block::Table {
        header: vec![
            lang.t("term", "terme").into(),
            lang.t("estimate", "estimation").into(),
            lang.t("predicted", "prédit").into(),
            lang.t("observed", "observé").into(),
            lang.t("checkpoint", "point de lecture").into(),
        ],
        rows: l
            .lines
            .iter()
            .map(|x| {
                vec![
                    x.term.clone(),
                    cell(&x.estimate),
                    cell(&x.predicted),
                    cell(&x.observed),
                    x.checkpoint.clone(),
                ]
            })
            .collect(),
    });
    // The waterfall follows the observed chain: weights, what the phase held, its growth, the
    // peak allocated, the peak reserved, what lies outside the allocator, the driver's view.
    let observed = |term: &str| {
        l.lines
            .iter()
            .find(|x| x.term.starts_with(term))
            .and_then(|x| x.observed.as_ref())
            .map(|f| f.bytes)
    };
    let mut steps = Vec::new();
    for (term, label, level) in [
        ("weights", lang.t("weights", "poids"), false),
        ("held at", lang.t("held at start", "tenu au début"), false),
        (
            "growth",
            lang.t("growth to the peak", "croissance au pic"),
            false,
        ),
        ("peak allocated", "peak allocated", true),
        ("peak reserved", "peak reserved", true),
        (
            "outside",
            lang.t("outside the allocator", "hors allocateur"),
            false,
        ),
        (
            "the driver's view",
            lang.t("driver's view", "vue du pilote"),
            true,
        ),
    ] {
        if let Some(bytes) = observed(term) {
            steps.push((label.to_string(), bytes, level));
        }
    }
    let mut lines = Vec::new();
    if let Some(est) = l
        .lines
        .iter()
        .find(|x| x.kind == LineKind::Level && x.term.starts_with("the driver's view"))
        .and_then(|x| x.estimate.as_ref())
    {
        lines.push((lang.t("estimate", "estimation").to_string(), est.bytes));
    }
    for c in &l.capacities {
        lines.push((c.name.clone(), c.bytes));
    }
    if steps.len() >= 2 {
        b.push(Block::Chart(Chart::Waterfall {
            title: lang
                .t(
                    "From the weights to the driver's view (observed)",
                    "Des poids à la vue du pilote (observé)",
                )
                .into(),
            steps,
            lines,
        }));
    }
    if !l.diagnostics.is_empty() {
        b.push(Block::List(l.diagnostics.clone()));
    }
    post_mortem(b, &l, lang);
}

/// At most this many phase starts are marked on the timeline chart.
const TIMELINE_MARKS: usize = 40;

/// `measure --timeline`: allocated and reserved over time with the phases marked, and per phase
/// the largest allocation alive at its peak and the line that made it.
fn timeline(b: &mut Vec<Block>, r: &MeasureResult, lang: Lang) {
    use crate::explain::snapshot::{BEFORE_FIRST_PHASE, BETWEEN_PHASES};
    let Some(t) = &r.timeline else { return };
    b.push(Block::Heading(lang.t("Timeline", "Chronologie").into()));
    b.push(Block::List(
        crate::explain::render::timeline(t)
            .iter()
            .map(|l| l.trim_start().to_string())
            .collect(),
    ));
    let Some(s) = &t.summary else { return };
    for d in &s.devices {
        let Some(trace) = &d.trace else { continue };
        let origin = trace.first_time_us;
        let x = |event: u64, time: Option<i64>| match (origin, time) {
            (Some(o), Some(t)) => (t - o) as f64 / 1e6,
            _ => event as f64,
        };
        let x_label = if origin.is_some() {
            lang.t(
                "seconds since the first recorded event",
                "secondes depuis le premier événement enregistré",
            )
        } else {
            lang.t(
                "event of the allocator's trace",
                "événement de la trace de l’allocateur",
            )
        };
        let points: Vec<(f64, u64, u64)> = trace
            .series
            .iter()
            .map(|p| (x(p.event, p.time_us), p.allocated_bytes, p.reserved_bytes))
            .collect();
        let real: Vec<_> = trace
            .phases
            .iter()
            .filter(|p| p.name != BEFORE_FIRST_PHASE && p.name != BETWEEN_PHASES)
            .collect();
        let marks: Vec<(f64, String)> = real
            .iter()
            .take(TIMELINE_MARKS)
            .map(|p| (x(p.first_event, p.start_time_us), p.name.clone()))
            .collect();
        if points.len() >= 2 {
            b.push(Block::Chart(Chart::Timeline {
                title: format!(
                    "cuda:{} — {}",
                    d.device,
                    lang.t(
                        "allocated and reserved over time (the allocator's trace)",
                        "alloué et réservé au fil du temps (trace de l’allocateur)"
                    )
                ),
                x_label: x_label.into(),
                points,
                marks,
            }));
        }
        if real.len() > TIMELINE_MARKS {
            b.push(Block::Para(format!(
                "{} {TIMELINE_MARKS} / {}.",
                lang.t(
                    "Phases marked on the chart:",
                    "Phases marquées sur le graphique :"
                ),
                real.len()
            )));
        }
        let rows = real
            .iter()
            .map(|p| {
                let top = p.largest_at_peak.first();
                vec![
                    format!(
                        "{} #{}",
                        p.name,
                        p.index.map_or("?".into(), |i| i.to_string())
                    ),
                    both(Some(p.peak_allocated_bytes), lang),
                    both(Some(p.peak_reserved_bytes), lang),
                    top.map_or("—".into(), |a| both(Some(a.size_bytes), lang)),
                    top.and_then(|a| a.user_frame.as_ref().or(a.stack_top.first()))
                        .map_or("—".into(), crate::explain::render::frame),
                ]
            })
            .collect();
        b.push(Block::Table {
            header: vec![
                lang.t("phase", "phase").into(),
                lang.t("peak allocated (trace)", "pic alloué (trace)")
                    .into(),
                lang.t("peak reserved (trace)", "pic réservé (trace)")
                    .into(),
                lang.t(
                    "largest alive at the peak",
                    "plus grande allocation vivante au pic",
                )
                .into(),
                lang.t("allocated at", "allouée à").into(),
            ],
            rows,
        });
    }
}

/// The out-of-memory post-mortem, when the run ended in one (its text is in English: it quotes
/// and reasons on PyTorch's English message).
fn post_mortem(b: &mut Vec<Block>, l: &crate::explain::ledger::Ledger, lang: Lang) {
    let lines = crate::explain::render::post_mortem(l.post_mortem.as_ref(), l.live_at_oom.as_ref());
    if lines.is_empty() {
        return;
    }
    b.push(Block::Heading(
        lang.t("Out-of-memory post-mortem", "Autopsie du manque de mémoire")
            .into(),
    ));
    b.push(Block::List(lines));
}

fn assumed(
    b: &mut Vec<Block>,
    r: &MeasureResult,
    s: Option<&Series>,
    e: Option<&EstimateDoc>,
    lang: Lang,
) {
    b.push(Block::Heading(lang.t("Assumed", "Supposé").into()));
    let mut items: Vec<String> = Vec::new();
    if let Some(e) = e {
        for t in e.terms.iter().filter(|t| t.kind == "assumed") {
            items.push(format!(
                "{}: {} — {}",
                t.name,
                both(Some(t.bytes), lang),
                t.formula
            ));
        }
        if !e.left_out.is_empty() {
            items.push(format!(
                "{}: {}",
                lang.t("left out of the estimate", "hors de l’estimation"),
                e.left_out.join("; ")
            ));
        }
    }
    let scope: Vec<&str> = ["evaluation", "export"]
        .into_iter()
        .filter(|p| !r.scope.phases.iter().any(|x| x == p))
        .collect();
    if !scope.is_empty() {
        items.push(format!(
            "{}: {}",
            lang.t("not measured in this run", "non mesuré dans cet essai"),
            scope.join(", ")
        ));
    }
    let covered = s
        .map(|s| {
            s.varied
                .iter()
                .map(|v| v.name())
                .chain((!s.alloc_confs.is_empty()).then_some(crate::sweep::vary::ALLOC_CONF))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .filter(|v| !v.is_empty());
    items.push(match covered {
        Some(v) => format!("{}: {v}", lang.t("variations covered by the series", "variations couvertes par la série")),
        None => lang
            .t(
                "no variation was tested: a margin must still cover a longer input, the allowed batch, evaluation, export, library versions and other users of the card",
                "aucune variation testée : la marge doit encore couvrir une entrée plus longue, le batch autorisé, l’évaluation, l’export, les versions de bibliothèques et les autres utilisateurs de la carte",
            )
            .into(),
    });
    b.push(Block::List(items));
}

fn chosen(b: &mut Vec<Block>, r: &MeasureResult, s: Option<&Series>, lang: Lang) {
    b.push(Block::Heading(
        lang.t("Configuration chosen", "Choix retenu").into(),
    ));
    let frontier = s.and_then(|s| s.frontier.as_ref());
    let text = match (frontier, r.status.as_str()) {
        (Some(f), _) => format!(
            "{} {} = {} ({} {}); {}",
            lang.t("Largest value that succeeded:", "Plus grande valeur réussie :"),
            f.variable,
            f.last_success.map_or("none".into(), |v| v.to_string()),
            lang.t("first failure at", "premier échec à"),
            f.first_failure.map_or("none".into(), |v| v.to_string()),
            lang.t("keep a margin below it for the variations listed as assumed.", "gardez une marge en dessous pour les variations listées comme supposées.")
        ),
        (None, "ok") if r.phases.is_empty() => lang
            .t(
                "No phase was recorded: this result proves nothing about fit; mark the work with iteragpu.phase(…) and measure again.",
                "Aucune phase n’a été enregistrée : ce résultat ne prouve rien sur la tenue en mémoire ; marquez le travail avec iteragpu.phase(…) et mesurez de nouveau.",
            )
            .into(),
        (None, "ok") => lang
            .t(
                "The measured configuration ran to completion on this GPU; only this load is validated.",
                "La configuration mesurée a abouti sur ce GPU ; seule cette charge est validée.",
            )
            .into(),
        (None, _) => lang
            .t(
                "The measured configuration did not complete: reduce one dimension and search the frontier (iteragpu sweep --search frontier).",
                "La configuration mesurée n’a pas abouti : réduisez une seule dimension et cherchez la frontière (iteragpu sweep --search frontier).",
            )
            .into(),
    };
    b.push(Block::Para(text));
}
