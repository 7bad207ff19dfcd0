//! The fiche: a short sheet someone can decide from. Identity, dimensions, environment and scope;
//! then what was **calculated**, what was **observed** and what is still **assumed**, kept apart;
//! then the configuration chosen and the raw results attached (path and SHA-256).
//!
//! Reading rules of the guide, enforced here: the gap between reserved and allocated is shown only
//! from two readings of the same checkpoint (never peak reserved − peak allocated); an end level
//! minus a start level is never presented as the volume of temporary tensors; a partial peak
//! before a failure is never presented as the need of a complete run.

use serde_json::Value;

use crate::cards;
use crate::report::document::{Attachment, Block, Cell, Chart, Document, Tone, Verdict};
use crate::schema::load::{EstimateDoc, InputError, InputFile as Input, Loaded};
use crate::schema::measure::{MeasureResult, RunStatus};
use crate::schema::series::Series;

use crate::estimate::Kind;
use crate::report::format::Style;
use crate::report::names;

/// A size in the fiche's one unit, or `null (not read)` (never 0) for a value not read.
fn both(v: Option<u64>, lang: Style) -> String {
    lang.size(v)
}

/// The size cell of a column whose header names the unit.
fn size(v: Option<u64>) -> Cell {
    Cell::size(v)
}

/// A column header with the fiche's unit: `peak reserved (GiB)`.
fn in_unit(header: &str, lang: Style) -> String {
    format!("{header} ({})", lang.unit())
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
    lang: Style,
) -> Result<Document, InputError> {
    let Input::Measure(r) = &result.doc else {
        return Err(result.wrong(
            crate::schema::load::MEASURE,
            "the first file of a report is a measure result",
        ));
    };
    let s: Option<&Series> = match series.map(|l| (&l.doc, l)) {
        None => None,
        Some((Input::Series(s), _)) => Some(s),
        Some((_, l)) => {
            return Err(l.wrong(
                crate::schema::load::SERIES,
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
                schema: crate::schema::load::SERIES.into(),
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
        crate::schema::load::check_estimate_of(r, e, l)?;
    }
    let mut b = Vec::new();
    if let Some(s) = s
        && s.status == crate::schema::series::SeriesStatus::Running
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
    // The gap ledger, read by the verdict and by its own section.
    let ledger = crate::ledger::of_result(r, e, None).ok();
    verdict(&mut b, r, s, e, ledger.as_ref(), lang);
    identity(&mut b, r, lang);
    environment(&mut b, r, lang);
    calculated(&mut b, e, lang);
    observed(&mut b, r, s, lang);
    ranks(&mut b, r, lang);
    gap(&mut b, r, ledger.as_ref(), lang);
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
        listed.push(format!("`{}` — SHA-256 `{}`", l.path.display(), l.sha256));
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
        style: lang,
        blocks: b,
        attachments,
    })
}

/// The answer first: the workload, the peak that matters, the capacity and the margin, the
/// largest load validated, the largest term of the gap, what is still assumed — each line linked
/// to the section that backs it.
fn verdict(
    b: &mut Vec<Block>,
    r: &MeasureResult,
    s: Option<&Series>,
    e: Option<&EstimateDoc>,
    ledger: Option<&crate::ledger::Ledger>,
    lang: Style,
) {
    let mut lines = Vec::new();
    let fake = r
        .environment
        .python
        .as_ref()
        .and_then(|p| p.torch_str("version"))
        .is_some_and(|v| v.contains("fake"));
    if fake {
        lines.push(Verdict {
            label: lang.t("Source", "Source").into(),
            value: lang
                .t(
                    "the test suite's fake torch: an example, not a GPU measurement",
                    "le faux torch des tests : un exemple, pas une mesure sur GPU",
                )
                .into(),
            section: Some(lang.t("Environment", "Environnement").into()),
            tone: Tone::Bad,
        });
    }
    let dims: Vec<String> = r
        .dimensions
        .iter()
        .map(|(k, v)| format!("{k}={}", text(v)))
        .collect();
    lines.push(Verdict {
        label: lang.t("Workload", "Charge").into(),
        value: format!(
            "`{}` · {}",
            r.identity
                .declared
                .get("model")
                .map(text)
                .unwrap_or_else(|| r.identity.workload.clone()),
            if dims.is_empty() {
                lang.t("no declared dimension", "aucune dimension déclarée")
                    .to_string()
            } else {
                format!("`{}`", dims.join(" · "))
            }
        ),
        section: Some(lang.t("Dimensions", "Dimensions").into()),
        tone: Tone::Neutral,
    });
    let observed_heading = lang.t("Observed", "Observé").to_string();
    // The peak that matters: the highest peak reserved of a completed phase, and the driver's view.
    let peak = r
        .phases
        .iter()
        .filter(|p| p.status.is_ok())
        .filter_map(|p| Some((p, p.devices.first()?.peak_reserved_bytes?)))
        .max_by_key(|(p, b)| (*b, std::cmp::Reverse(p.index)));
    let driver_peak = r
        .phases
        .iter()
        .filter(|p| p.status.is_ok())
        .flat_map(|p| p.driver.iter().flatten())
        .filter_map(|d| d.peak_process_used_bytes)
        .max();
    if !r.status.is_ok() {
        let class = r
            .failure
            .as_ref()
            .and_then(|f| f.post_mortem.as_ref())
            .map(|pm| match (pm.diagnosis.class, lang.fr()) {
                (c, false) => format!(" ({})", c.label()),
                (crate::explain::oom::OomClass::Capacity, true) => " (capacité)".into(),
                (crate::explain::oom::OomClass::Fragmentation, true) => " (fragmentation)".into(),
                (crate::explain::oom::OomClass::AnotherProcess, true) => {
                    " (un autre processus)".into()
                }
                (crate::explain::oom::OomClass::Unknown, true) => " (indéterminé)".into(),
            })
            .unwrap_or_default();
        lines.push(Verdict {
            label: lang.t("Run", "Essai").into(),
            value: format!(
                "{} `{}`{class} — {}",
                lang.t(
                    "did not complete: it stopped in",
                    "n’a pas abouti : arrêt dans"
                ),
                r.failure
                    .as_ref()
                    .and_then(|f| f.phase.clone())
                    .unwrap_or_else(|| "?".into()),
                lang.t(
                    "a partial peak before a failure is not the need of a complete run",
                    "un pic partiel avant un échec n’est pas le besoin d’une exécution complète"
                )
            ),
            section: Some(observed_heading.clone()),
            tone: Tone::Bad,
        });
    }
    if let Some((p, reserved)) = peak {
        lines.push(Verdict {
            label: lang.t("Peak that matters", "Pic qui compte").into(),
            value: format!(
                "{} {} `{}`{}",
                both(Some(reserved), lang),
                lang.t("reserved, in", "réservés, dans"),
                p.name,
                driver_peak.map_or(String::new(), |d| format!(
                    " — {} {}",
                    lang.t("driver's view", "vue du pilote"),
                    both(Some(d), lang)
                ))
            ),
            section: Some(observed_heading.clone()),
            tone: Tone::Neutral,
        });
    }
    // The capacity compared with, named, and the margin.
    let nvml = r
        .environment
        .driver
        .as_ref()
        .and_then(|d| d.gpus.first())
        .and_then(|g| g.total_bytes);
    let torch_total = first_device(r)
        .and_then(|d| d.get("total_memory"))
        .and_then(Value::as_u64);
    let capacity = match (nvml, torch_total) {
        (Some(n), _) => Some((lang.t("NVML's total", "total de NVML"), n)),
        (None, Some(t)) => Some((
            lang.t("PyTorch's total_memory", "total_memory de PyTorch"),
            t,
        )),
        _ => None,
    };
    let need = driver_peak.or(peak.map(|p| p.1));
    if let (Some((name, cap)), Some(need)) = (capacity, need) {
        let margin = cap as i128 - need as i128;
        let share = 100.0 * margin as f64 / cap as f64;
        lines.push(Verdict {
            label: lang.t("Capacity and margin", "Capacité et marge").into(),
            value: format!(
                "{name} {} — {} {} ({}, {})",
                both(Some(cap), lang),
                if margin >= 0 {
                    lang.t("margin", "marge")
                } else {
                    lang.t("short by", "manque")
                },
                both(Some(margin.unsigned_abs() as u64), lang),
                lang.percent(Some(share)).trim_start_matches('+'),
                if driver_peak.is_some() {
                    lang.t("against the driver's view", "face à la vue du pilote")
                } else {
                    lang.t(
                        "against the peak reserved; the CUDA context is not counted",
                        "face au pic réservé ; le contexte CUDA n’est pas compté",
                    )
                }
            ),
            section: Some(lang.t("Environment", "Environnement").into()),
            tone: if margin >= 0 { Tone::Good } else { Tone::Bad },
        });
    }
    // What a series validated.
    if let Some(s) = s {
        let var = s.varied.first().map_or("", |v| v.name());
        let largest = s
            .trials
            .iter()
            .filter(|t| t.status.is_ok())
            .filter_map(|t| t.values.get(var).and_then(Value::as_u64))
            .max();
        let mut value = match largest {
            Some(v) => format!(
                "`{var}` = {} {}",
                lang.integer(u128::from(v)),
                lang.t("validated", "validé")
            ),
            None => lang
                .t(
                    "no load of the series completed",
                    "aucune charge de la série n’a abouti",
                )
                .into(),
        };
        if let Some(f) = &s.frontier {
            value.push_str(&format!(
                "; {} {} – {}",
                lang.t("frontier between", "frontière entre"),
                f.last_success
                    .map_or("—".into(), |v| lang.integer(u128::from(v))),
                f.first_failure
                    .map_or("—".into(), |v| lang.integer(u128::from(v)))
            ));
        }
        lines.push(Verdict {
            label: lang
                .t("Largest load validated", "Plus grande charge validée")
                .into(),
            value,
            section: Some(observed_heading.clone()),
            tone: if largest.is_some() {
                Tone::Good
            } else {
                Tone::Bad
            },
        });
    } else if r.status.is_ok() {
        lines.push(Verdict {
            label: lang
                .t("Largest load validated", "Plus grande charge validée")
                .into(),
            value: lang
                .t(
                    "this load only (no series attached)",
                    "cette charge seulement (aucune série jointe)",
                )
                .into(),
            section: Some(lang.t("Configuration chosen", "Choix retenu").into()),
            tone: Tone::Neutral,
        });
    }
    // The largest term of the gap.
    if let Some(l) = ledger {
        use crate::ledger::LineKind;
        if let Some(term) = l
            .lines
            .iter()
            .filter(|x| x.kind == LineKind::Term)
            .filter_map(|x| Some((x, x.observed.as_ref()?.bytes)))
            .max_by_key(|(_, b)| *b)
        {
            lines.push(Verdict {
                label: lang
                    .t("Largest term of the gap", "Plus gros poste de l’écart")
                    .into(),
                value: format!(
                    "{}{} {}",
                    names::line(term.0.id, lang),
                    colon(lang),
                    both(Some(term.1), lang)
                ),
                section: Some(
                    lang.t(
                        "Why the peak exceeds the estimate",
                        "Pourquoi le pic dépasse l’estimation",
                    )
                    .into(),
                ),
                tone: Tone::Neutral,
            });
        }
    }
    // What is still assumed.
    let assumed = e.map_or(0, |e| {
        e.terms.iter().filter(|t| t.kind == Kind::Assumed).count()
    });
    lines.push(Verdict {
        label: lang.t("Still assumed", "Encore supposé").into(),
        value: match (assumed, e.is_some()) {
            (_, false) => lang
                .t(
                    "no estimate attached; evaluation, export and variations not covered by a series",
                    "aucune estimation jointe ; évaluation, export et variations hors série"
                )
                .into(),
            (n, true) => format!(
                "{} {}",
                lang.integer(n as u128),
                lang.t(
                    "term(s) of the estimate, and the variations listed",
                    "poste(s) de l’estimation, et les variations listées"
                )
            ),
        },
        section: Some(lang.t("Assumed", "Supposé").into()),
        tone: Tone::Neutral,
    });
    b.push(Block::Verdict(lines));
}

/// The two largest categories alive at the predicted peak of the `k`-th phase named `name`.
fn largest_at_peak(r: &MeasureResult, name: &str, k: usize, lang: Style) -> String {
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
        .map(|(c, b)| format!("{} {}", category_name(c, lang), both(Some(**b), lang)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A prediction's storage category in the reader's language.
fn category_name(c: &str, lang: Style) -> String {
    if !lang.fr() {
        return c.to_string();
    }
    match c {
        "parameter" => "paramètres",
        "buffer" => "tampons",
        "gradient" => "gradients",
        "optimizer state" => "états de l’optimiseur",
        "input" => "entrées",
        "activation" => "activations",
        "temporary" => "temporaires",
        "kv cache" => "cache KV",
        "workspace" => "espaces de travail",
        "communication" => "communication",
        "allocator rounding" => "arrondi de l’allocateur",
        "other" => "autres",
        other => other,
    }
    .to_string()
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
                    schema: crate::schema::load::SERIES.into(),
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
                schema: crate::schema::load::SERIES.into(),
                message: format!(
                    "the result measured the `{}` workload and the series `{}`",
                    r.identity.workload, tr.identity.workload
                ),
            });
        }
    }
    Ok(())
}

fn identity(b: &mut Vec<Block>, r: &MeasureResult, lang: Style) {
    b.push(Block::Heading(
        lang.t("Identity", "Identité de l’essai").into(),
    ));
    let d = &r.identity.declared;
    let code = |v: Option<&Value>| v.map_or(Cell::Text("—".into()), |v| Cell::Code(text(v)));
    let mut rows: Vec<Vec<Cell>> = vec![
        vec![
            lang.t("workload", "charge").into(),
            Cell::Code(r.identity.workload.clone()),
        ],
        vec![
            lang.t("model or code", "modèle ou code").into(),
            code(d.get("model")),
        ],
        vec![
            lang.t("revision", "révision").into(),
            code(d.get("revision")),
        ],
        vec![
            lang.t("measuring code", "code de mesure").into(),
            Cell::Code(r.identity.code_hash.clone()),
        ],
        vec![
            lang.t("seed", "graine").into(),
            r.identity
                .seed
                .map_or("—".into(), |s| lang.integer(u128::from(s)))
                .into(),
        ],
        vec![
            lang.t("run", "exécution").into(),
            format!(
                "{} → {} ({})",
                lang.date(&r.started_at),
                lang.date(&r.ended_at),
                status_word(r.status, lang)
            )
            .into(),
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
            Cell::Code(shapes.join("; ")),
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
            .map(|(k, v)| vec![Cell::Code(k.clone()), value_cell(v, lang)])
            .collect(),
    });
}

/// A dimension's value: a number in the fiche's style, anything else as an identifier.
fn value_cell(v: &Value, lang: Style) -> Cell {
    match v {
        Value::Number(n) if n.is_u64() => lang.integer(u128::from(n.as_u64().unwrap_or(0))).into(),
        Value::Number(n) => lang.decimal(n.as_f64().unwrap_or(0.0), 2).into(),
        other => Cell::Code(text(other)),
    }
}

/// A run's status in the reader's language (the identifier in the JSON stays English).
fn status_word(status: crate::schema::measure::RunStatus, lang: Style) -> &'static str {
    use crate::schema::measure::RunStatus as S;
    match status {
        S::Ok => lang.t("ok", "réussi"),
        S::Failed => lang.t("failed", "échoué"),
        S::Crashed => lang.t("crashed", "planté"),
        S::Timeout => lang.t("timed out", "délai dépassé"),
        S::Interrupted => lang.t("interrupted", "interrompu"),
        S::Terminated => lang.t("terminated", "arrêté"),
    }
}

fn environment(b: &mut Vec<Block>, r: &MeasureResult, lang: Style) {
    b.push(Block::Heading(
        lang.t("Environment", "Environnement").into(),
    ));
    let mut rows: Vec<Vec<Cell>> = Vec::new();
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
        Cell::Code(format!(
            "{} ({})",
            gpu_name(r).unwrap_or_else(|| "null".into()),
            r.scope.devices.join(", ")
        )),
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
            Cell::size_with_unit(Some(total)),
        ]);
    }
    match &r.environment.driver {
        Some(d) => {
            rows.push(vec![
                lang.t("driver", "pilote").into(),
                Cell::Code(format!(
                    "{} (CUDA {})",
                    d.driver_version.as_deref().unwrap_or("?"),
                    d.cuda_driver_version.as_deref().unwrap_or("?")
                )),
            ]);
            if let Some(g) = d.gpus.first() {
                rows.push(vec![
                    lang.t("capacity (NVML)", "capacité (NVML)").into(),
                    Cell::size_with_unit(g.total_bytes),
                ]);
            }
        }
        None => rows.push(vec![
            lang.t("driver", "pilote").into(),
            lang.t(
                "no NVIDIA driver's view in this run",
                "pas de vue du pilote NVIDIA dans cet essai",
            )
            .into(),
        ]),
    }
    rows.push(vec![
        "Python".into(),
        Cell::Code(
            py.map(|p| {
                format!(
                    "{} {}",
                    text(&p.python["executable"]),
                    text(&p.python["version"])
                )
            })
            .unwrap_or_else(|| "null".into()),
        ),
    ]);
    rows.push(vec!["PyTorch".into(), Cell::Code(tget("version"))]);
    rows.push(vec![
        "CUDA / HIP".into(),
        Cell::Code(format!(
            "{} (cuda {}, hip {})",
            tget("backend"),
            tget("cuda_version"),
            tget("hip_version")
        )),
    ]);
    rows.push(vec![
        lang.t("allocator backend", "backend de l’allocateur")
            .into(),
        Cell::Code(tget("allocator_backend")),
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
                Cell::Code(set.join(", "))
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
            "{}{} `{}`",
            lang.t("phases", "phases"),
            colon(lang),
            r.scope.phases.join(", ")
        ),
        format!(
            "{}{} `{}`",
            lang.t("first pass", "premier passage"),
            colon(lang),
            r.scope.first_pass
        ),
        format!(
            "{}{} `{}`, {} {}, {} {}, `empty_cache {}`",
            lang.t("protocol", "protocole"),
            colon(lang),
            p.protocol,
            lang.integer(u128::from(p.warmup)),
            lang.t("warm-up passes", "passages d’échauffement"),
            lang.integer(u128::from(p.repeats)),
            lang.t("repeats", "répétitions"),
            p.empty_cache
        ),
        format!(
            "{}{} `{}`",
            lang.t("process", "processus"),
            colon(lang),
            p.process
        ),
    ]));
}

/// `:` in English, ` :` with a no-break space in French.
fn colon(lang: Style) -> &'static str {
    lang.t(":", "\u{a0}:")
}

fn calculated(b: &mut Vec<Block>, e: Option<&EstimateDoc>, lang: Style) {
    b.push(Block::Heading(lang.t("Calculated", "Calculé").into()));
    let Some(e) = e else {
        b.push(Block::Para(
            lang.t(
                "No estimate attached: give --estimate EST.json (the output of `iteragpu estimate --json`).",
                "Aucune estimation jointe : ajoutez `--estimate EST.json` (sortie de `iteragpu estimate --json`).",
            )
            .into(),
        ));
        return;
    };
    let rows: Vec<Vec<Cell>> = e
        .terms
        .iter()
        .filter(|t| t.kind == Kind::Calculated)
        .map(|t| {
            vec![
                names::term(t, lang).into(),
                size(Some(t.bytes)),
                Cell::Code(t.formula.clone()),
                if t.in_total {
                    ""
                } else {
                    lang.t("(not in the total)", "(hors total)")
                }
                .into(),
            ]
        })
        .collect();
    b.push(Block::Table {
        header: vec![
            lang.t("term", "poste").into(),
            in_unit(lang.t("size", "taille"), lang),
            lang.t("formula", "formule").into(),
            String::new(),
        ],
        rows,
    });
    b.push(Block::Para(format!(
        "{}{} {}",
        lang.t(
            "Preparation hypothesis (calculated and assumed terms together)",
            "Hypothèse de préparation (postes calculés et supposés ensemble)"
        ),
        colon(lang),
        both(Some(e.total_bytes), lang)
    )));
}

fn observed(b: &mut Vec<Block>, r: &MeasureResult, s: Option<&Series>, lang: Style) {
    b.push(Block::Heading(lang.t("Observed", "Observé").into()));
    let mut rows: Vec<Vec<Cell>> = Vec::new();
    for p in &r.phases {
        if p.devices.is_empty() {
            rows.push(vec![
                Cell::Code(p.name.clone()),
                "—".into(),
                status_word(p.status, lang).into(),
                lang.t(
                    "no end readings: the worker ended during this phase",
                    "pas de lecture de fin : le processus s’est arrêté pendant cette phase",
                )
                .into(),
                "".into(),
                "".into(),
                "".into(),
                "".into(),
            ]);
        }
        for d in &p.devices {
            let gap = match (d.end_reserved_bytes, d.end_allocated_bytes) {
                (Some(rv), Some(a)) if rv >= a => Some(rv - a),
                _ => None,
            };
            rows.push(vec![
                Cell::Code(p.name.clone()),
                Cell::Code(d.device.clone()),
                status_word(p.status, lang).into(),
                size(d.peak_allocated_bytes),
                size(d.peak_reserved_bytes),
                size(d.end_allocated_bytes),
                size(d.end_reserved_bytes),
                size(gap),
            ]);
        }
    }
    b.push(Block::Table {
        header: vec![
            "phase".into(),
            lang.t("device", "appareil").into(),
            lang.t("status", "statut").into(),
            in_unit(lang.t("peak allocated", "pic alloué"), lang),
            in_unit(lang.t("peak reserved", "pic réservé"), lang),
            in_unit(lang.t("end allocated", "alloué en fin"), lang),
            in_unit(lang.t("end reserved", "réservé en fin"), lang),
            in_unit(
                lang.t(
                    "reserved − allocated at the end (same checkpoint)",
                    "réservé − alloué en fin (même point de contrôle)",
                ),
                lang,
            ),
        ],
        rows,
    });
    b.push(Block::List(vec![
        lang.t(
            "Peaks are absolute over each phase and include what already existed at its start. Reserved − allocated is shown only from two readings of the same checkpoint, never as peak reserved − peak allocated, which describes no single moment.",
            "Les pics sont absolus sur chaque phase et incluent ce qui existait à son début. L’écart réservé − alloué n’est montré qu’à partir de deux lectures d’un même point de contrôle, jamais comme pic réservé − pic alloué, qui ne décrit aucun instant.",
        )
        .into(),
        lang.t(
            "An end level minus a start level is not the volume of the phase's temporary tensors: earlier objects may have been freed during the phase.",
            "Un niveau de fin moins un niveau de départ n’est pas le volume des tenseurs temporaires de la phase : des objets antérieurs ont pu être libérés pendant la phase.",
        )
        .into(),
    ]));
    // The driver's view.
    let driver: Vec<Vec<Cell>> = r
        .phases
        .iter()
        .flat_map(|p| p.driver.iter().flatten().map(move |d| (p, d)))
        .filter(|(_, d)| d.peak_process_used_bytes.is_some())
        .map(|(p, d)| {
            vec![
                Cell::Code(p.name.clone()),
                Cell::Code(d.device.clone()),
                size(d.peak_process_used_bytes),
                size(d.outside_allocator_at_end_bytes),
                lang.integer(d.samples as u128).into(),
            ]
        })
        .collect();
    if driver.is_empty() {
        b.push(Block::Para(format!(
            "{}{} {}",
            lang.t("Driver's view", "Vue du pilote"),
            colon(lang),
            match &r.environment.driver_reason {
                Some(why) if !lang.fr() => why.clone(),
                Some(_) => "pilote NVIDIA absent ou illisible (la raison exacte est dans le résultat joint)".into(),
                None => lang.t("not sampled", "non échantillonnée").into(),
            }
        )));
    } else {
        b.push(Block::Table {
            header: vec![
                "phase".into(),
                lang.t("device", "appareil").into(),
                in_unit(lang.t("process peak (NVML)", "pic du processus (NVML)"), lang),
                in_unit(lang.t("outside PyTorch's allocator at the end (CUDA context, libraries; not a leak by itself)", "hors de l’allocateur PyTorch en fin (contexte CUDA, bibliothèques ; pas une fuite en soi)"), lang),
                lang.t("samples", "échantillons").into(),
            ],
            rows: driver,
        });
    }
    if let Some(f) = &r.failure {
        b.push(Block::Para(format!(
            "{} `{}`{} `{}` {} — {}",
            lang.t("Failure in", "Échec dans"),
            f.phase.as_deref().unwrap_or("?"),
            colon(lang),
            f.error_type.as_deref().unwrap_or(""),
            if lang.fr() {
                String::new()
            } else {
                f.message.clone().unwrap_or_default()
            },
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
                in_unit(lang.t("predicted peak allocated", "pic alloué prévu"), lang),
                in_unit(lang.t("observed", "observé"), lang),
                lang.t("error", "écart").into(),
                in_unit(lang.t("predicted peak reserved", "pic réservé prévu"), lang),
                in_unit(lang.t("observed", "observé"), lang),
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
                        Cell::Code(c.phase.clone()),
                        size(Some(c.predicted_peak_allocated_bytes)),
                        size(c.observed_peak_allocated_bytes),
                        Cell::Percent(c.error_allocated_pct),
                        size(Some(c.predicted_peak_reserved_bytes)),
                        size(c.observed_peak_reserved_bytes),
                        Cell::Percent(c.error_reserved_pct),
                        largest_at_peak(r, &c.phase, k, lang).into(),
                    ]
                })
                .collect(),
        });
    }
    for c in &r.kv_cache {
        b.push(Block::Para(format!(
            "{} `{}`{} {} {} / {} {} ({})",
            lang.t("KV cache after", "Cache KV après"),
            c.phase,
            colon(lang),
            lang.t("observed", "observé"),
            both(c.observed_bytes, lang),
            lang.t("estimated", "estimé"),
            both(Some(c.estimated_bytes), lang),
            lang.percent(c.difference_pct)
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
                lang.t("peak allocated", "pic alloué").into(),
                lang.t("peak reserved", "pic réservé").into(),
                lang.t(
                    "driver's view (process peak)",
                    "vue du pilote (pic du processus)",
                )
                .into(),
            ],
            categories: bars,
        }));
    }
    if let Some(s) = s {
        series_observed(b, s, lang);
    }
}

/// A sweep trial's status in the reader's language.
fn trial_status(status: crate::schema::series::TrialStatus, lang: Style) -> &'static str {
    use crate::schema::measure::RunStatus as S;
    use crate::schema::series::TrialStatus as T;
    let run = match status {
        T::Unavailable => return lang.t("PyTorch or GPU missing", "PyTorch ou GPU absent"),
        T::Ok => S::Ok,
        T::Failed => S::Failed,
        T::Crashed => S::Crashed,
        T::Timeout => S::Timeout,
        T::Interrupted => S::Interrupted,
        T::Terminated => S::Terminated,
    };
    status_word(run, lang)
}

fn series_observed(b: &mut Vec<Block>, s: &Series, lang: Style) {
    // A list, grid or frontier varies a dimension; loads and processes have none.
    let var = s.varied.first().map_or("", |v| v.name());
    let rows: Vec<Vec<Cell>> = s
        .trials
        .iter()
        .map(|t| {
            let values: Vec<String> = t
                .values
                .iter()
                .map(|(k, v)| format!("{k}={}", text(v)))
                .chain(t.load.clone())
                .collect();
            let status = if t.out_of_memory {
                lang.t("out of memory", "mémoire saturée")
            } else {
                trial_status(t.status, lang)
            };
            vec![
                Cell::Code(values.join(" ")),
                status.into(),
                size(t.peak_reserved_bytes),
                if t.status.is_ok() {
                    "".into()
                } else {
                    lang.t(
                        "partial: not the need of a complete run",
                        "partiel : pas le besoin d’une exécution complète",
                    )
                    .into()
                },
                format!(
                    "{}{}s",
                    lang.decimal(t.duration_s, 2),
                    crate::report::format::NBSP
                )
                .into(),
            ]
        })
        .collect();
    b.push(Block::Table {
        header: vec![
            lang.t("trial", "essai").into(),
            lang.t("status", "statut").into(),
            in_unit(lang.t("peak reserved", "pic réservé"), lang),
            String::new(),
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
            "{} `{var}` = {}",
            lang.t(
                "Largest load tested successfully:",
                "Plus grande charge testée avec succès\u{a0}:"
            ),
            lang.integer(u128::from(v))
        )));
    }
    if let Some(f) = &s.frontier {
        b.push(Block::Para(format!(
            "{} `{}`{} {} {}, {} {} ({} {}, {} {})",
            lang.t("Frontier of", "Frontière de"),
            f.variable,
            colon(lang),
            lang.t("last success", "dernier succès"),
            f.last_success
                .map_or(lang.t("none", "aucun").into(), |v| lang
                    .integer(u128::from(v))),
            lang.t("first failure", "premier échec"),
            f.first_failure
                .map_or(lang.t("none", "aucun").into(), |v| lang
                    .integer(u128::from(v))),
            lang.integer(f.trials as u128),
            lang.t("trials", "essais"),
            lang.t("resolution", "résolution"),
            lang.integer(u128::from(f.resolution))
        )));
    }
    if let Some(l) = &s.limit {
        b.push(Block::Para(format!(
            "{}{} {} (`{}`)",
            lang.t(
                "Emulated limit (not a real card)",
                "Limite émulée (pas une vraie carte)"
            ),
            colon(lang),
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
                lang.t("Peak reserved against", "Pic réservé en fonction de")
            ),
            x_label: var.to_string(),
            points,
            lines,
        }));
    }
}

/// An allocator A/B (`sweep --vary alloc_conf=…`): each setting's peak reserved per value.
fn alloc_conf_comparison(b: &mut Vec<Block>, s: &Series, lang: Style) {
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
    header.extend(s.alloc_confs.iter().map(|a| {
        in_unit(
            &format!("{} {}", lang.t("peak reserved,", "pic réservé,"), a.name()),
            lang,
        )
    }));
    header.push(lang.t("change", "écart").into());
    let rows: Vec<Vec<Cell>> = s
        .alloc_conf_rows()
        .iter()
        .map(|row| {
            let mut cells: Vec<Cell> = vec![
                row.value
                    .map_or("—".into(), |(_, v)| lang.integer(u128::from(v)))
                    .into(),
            ];
            let mut changes = Vec::new();
            for (k, t) in row.trials.iter().enumerate() {
                cells.push(match t {
                    None => lang.t("not run", "non exécuté").into(),
                    Some(t) if !t.status.is_ok() => trial_status(t.status, lang).into(),
                    Some(t) => size(t.peak_reserved_bytes),
                });
                if k > 0
                    && let Some(c) = row.change(k)
                {
                    changes.push(format!(
                        "{}{} {}",
                        s.alloc_confs[k].name(),
                        colon(lang),
                        lang.percent(Some(c * 100.0))
                    ));
                }
            }
            cells.push(changes.join("; ").into());
            cells
        })
        .collect();
    b.push(Block::Table { header, rows });
}

/// Under torchrun: every rank on its own device, side by side, never added together.
fn ranks(b: &mut Vec<Block>, r: &MeasureResult, lang: Style) {
    let Some(d) = &r.distributed else { return };
    b.push(Block::Heading(
        lang.t("Ranks (torchrun)", "Rangs (torchrun)").into(),
    ));
    b.push(Block::Para(format!(
        "{} {} ({} × {}). {}",
        lang.t("World size", "Taille du monde"),
        lang.integer(u128::from(d.world_size)),
        lang.integer(u128::from(d.torchrun.nnodes)),
        lang.integer(u128::from(d.torchrun.nproc_per_node)),
        lang.t(
            "Each rank is a fresh worker read on its own device; the figures are per device and are never added together. The phases above are those of the rank with the highest peak reserved.",
            "Chaque rang est un processus neuf lu sur son propre périphérique ; les chiffres sont par périphérique et ne s’additionnent jamais. Les phases ci-dessus sont celles du rang au pic réservé le plus haut.",
        )
    )));
    let rows = d
        .ranks
        .iter()
        .map(|k| {
            vec![
                lang.integer(u128::from(k.rank)).into(),
                Cell::Code(format!("{} / {}", k.node_rank, k.host)),
                Cell::Code(k.device.clone()),
                status_word(k.status, lang).into(),
                size(k.peak_allocated()),
                size(k.peak_reserved()),
                size(k.outside_allocator()),
                match (&k.stopped_because, lang.fr()) {
                    (None, _) => "".into(),
                    (Some(why), false) => why.clone().into(),
                    (Some(_), true) => {
                        "arrêté à cause d’un autre rang (voir le résultat joint)".into()
                    }
                },
            ]
        })
        .collect();
    b.push(Block::Table {
        header: vec![
            lang.t("rank", "rang").into(),
            lang.t("node / host", "nœud / hôte").into(),
            lang.t("device", "périphérique").into(),
            lang.t("status", "statut").into(),
            in_unit(lang.t("peak allocated", "pic alloué"), lang),
            in_unit(lang.t("peak reserved", "pic réservé"), lang),
            in_unit(
                lang.t(
                    "outside PyTorch's allocator (CUDA context, NCCL)",
                    "hors de l’allocateur de PyTorch (contexte CUDA, NCCL)",
                ),
                lang,
            ),
            lang.t("note", "note").into(),
        ],
        rows,
    });
    if let Some(i) = &d.imbalance {
        b.push(Block::Para(format!(
            "{} {} ({}); {} {} ({}); {} {}.",
            lang.t(
                "Highest peak reserved: rank",
                "Pic réservé le plus haut\u{a0}: rang"
            ),
            lang.integer(u128::from(i.max_rank)),
            both(Some(i.max_peak_reserved_bytes), lang),
            lang.t("lowest: rank", "le plus bas\u{a0}: rang"),
            lang.integer(u128::from(i.min_rank)),
            both(Some(i.min_peak_reserved_bytes), lang),
            lang.t("spread", "écart"),
            both(Some(i.spread_bytes), lang)
        )));
    }
    let merged: Vec<String> = r
        .notes
        .iter()
        .filter(|n| n.starts_with("merged from") || n.starts_with("WARNING: merged although"))
        .map(|n| match (lang.fr(), n.starts_with("WARNING")) {
            (true, false) => format!("fusionné depuis les fichiers de plusieurs nœuds (`{n}`)"),
            (true, true) => format!("ATTENTION : fusionnés malgré un désaccord (`{n}`)"),
            (false, _) => n.clone(),
        })
        .collect();
    if !merged.is_empty() {
        b.push(Block::List(merged));
    }
}

/// Why the peak exceeds the estimate: the gap ledger as a table and a waterfall.
fn gap(b: &mut Vec<Block>, r: &MeasureResult, ledger: Option<&crate::ledger::Ledger>, lang: Style) {
    use crate::ledger::{self, LineId, LineKind, Provenance};
    let Some(l) = ledger else {
        return;
    };
    if l.lines.is_empty() {
        post_mortem(b, l, lang);
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
        "{} `{}` #{} (`{}`). {}",
        lang.t(
            "The phase with the highest peak:",
            "La phase au pic le plus haut\u{a0}:"
        ),
        l.phase,
        l.phase_index,
        l.device,
        lang.t(
            "Each figure says where it comes from; what no term explains is its own line.",
            "Chaque chiffre dit d’où il vient ; ce qu’aucun terme n’explique a sa propre ligne.",
        )
    )));
    let cell =
        |f: &Option<ledger::Figure>| f.as_ref().map_or("—".into(), |f| size(Some(f.bytes)));
    b.push(Block::Table {
        header: vec![
            lang.t("term", "terme").into(),
            in_unit(lang.t("estimate", "estimation"), lang),
            in_unit(lang.t("predicted", "prédit"), lang),
            in_unit(lang.t("observed", "observé"), lang),
            lang.t("checkpoint", "point de lecture").into(),
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
                            lang.t(" (assumed)", " (supposé)")
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
        (LineId::Weights, lang.t("weights", "poids")),
        (
            LineId::HeldAtStart,
            lang.t("held at start", "tenu au début"),
        ),
        (
            LineId::Growth,
            lang.t("growth to the peak", "croissance au pic"),
        ),
        (
            LineId::PeakAllocated,
            lang.t("peak allocated", "pic alloué"),
        ),
        (LineId::PeakReserved, lang.t("peak reserved", "pic réservé")),
        (
            LineId::OutsideAllocator,
            lang.t("outside the allocator", "hors allocateur"),
        ),
        (LineId::DriverView, lang.t("driver's view", "vue du pilote")),
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
        lines.push((lang.t("estimate", "estimation").to_string(), est.bytes));
    }
    for c in &l.capacities {
        lines.push((capacity_name(&c.name, lang), c.bytes));
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
    let diagnostics = crate::ledger::diagnostics_in(r, lang.fr());
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

/// At most this many phase starts are marked on the timeline chart.
const TIMELINE_MARKS: usize = 40;

/// `measure --timeline`: allocated and reserved over time with the phases marked, and per phase
/// the largest allocation alive at its peak and the line that made it.
fn timeline(b: &mut Vec<Block>, r: &MeasureResult, lang: Style) {
    use crate::explain::snapshot::{BEFORE_FIRST_PHASE, BETWEEN_PHASES};
    let Some(t) = &r.timeline else { return };
    b.push(Block::Heading(lang.t("Timeline", "Chronologie").into()));
    b.push(Block::List(vec![match (&t.path, t.bytes) {
        (Some(path), bytes) => format!(
            "{} `{}` ({}{}) {}",
            lang.t("PyTorch's snapshot:", "instantané de PyTorch\u{a0}:"),
            path.display(),
            bytes.map_or("?".into(), |b| lang
                .decimal(b as f64 / f64::from(1u32 << 20), 1)),
            lang.t("\u{a0}MiB", "\u{a0}Mio"),
            lang.t(
                "— open it in https://pytorch.org/memory_viz",
                "— à ouvrir dans https://pytorch.org/memory_viz"
            )
        ),
        (None, _) => lang
            .t("no snapshot was written", "aucun instantané écrit")
            .into(),
    }]));
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
                    "Phases marquées sur le graphique\u{a0}:"
                ),
                lang.integer(real.len() as u128)
            )));
        }
        let rows: Vec<Vec<Cell>> = real
            .iter()
            .map(|p| {
                let top = p.largest_at_peak.first();
                vec![
                    Cell::Code(format!(
                        "{} #{}",
                        p.name,
                        p.index.map_or("?".into(), |i| i.to_string())
                    )),
                    size(Some(p.peak_allocated_bytes)),
                    size(Some(p.peak_reserved_bytes)),
                    size(top.map(|a| a.size_bytes)),
                    top.and_then(|a| a.user_frame.as_ref().or(a.stack_top.first()))
                        .map_or("—".into(), |f| {
                            Cell::Code(crate::ledger::render::frame(f))
                        }),
                ]
            })
            .collect();
        b.push(Block::Table {
            header: vec![
                lang.t("phase", "phase").into(),
                in_unit(lang.t("peak allocated (trace)", "pic alloué (trace)"), lang),
                in_unit(lang.t("peak reserved (trace)", "pic réservé (trace)"), lang),
                in_unit(
                    lang.t(
                        "largest alive at the peak",
                        "plus grande allocation vivante au pic",
                    ),
                    lang,
                ),
                lang.t("allocated at", "allouée à").into(),
            ],
            rows,
        });
    }
}

/// The out-of-memory post-mortem, when the run ended in one. In English it is the explain
/// command's own text; in French it is said again from the classification's figures (PyTorch's
/// message itself stays in the attached result).
fn post_mortem(b: &mut Vec<Block>, l: &crate::ledger::Ledger, lang: Style) {
    use crate::explain::oom::OomClass;
    let lines = if lang.fr() {
        let mut out = Vec::new();
        if let Some(pm) = &l.post_mortem {
            let d = &pm.diagnosis;
            let f = &d.figures;
            let class = match d.class {
                OomClass::Capacity => {
                    "capacité : la charge ne tient pas dans ce que ce processus peut utiliser"
                }
                OomClass::Fragmentation => {
                    "fragmentation : la mémoire est là, gardée par PyTorch, mais en morceaux"
                }
                OomClass::AnotherProcess => {
                    "un autre processus : la mémoire manquante est tenue ailleurs"
                }
                OomClass::Unknown => "indéterminé : les chiffres du message ne tranchent pas",
            };
            out.push(format!("Classe{} {class}", colon(lang)));
            let request = Some(pm.report.tried_to_allocate.bytes.0);
            out.push(format!(
                "Demande{} {} ; besoin{} {} ; limite{} {}",
                colon(lang),
                both(request, lang),
                colon(lang),
                both(f.need.map(|b| b.0), lang),
                colon(lang),
                both(f.limit.map(|b| b.0), lang)
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
                both(Some(s.requested_bytes), lang),
                both(Some(live.live_bytes), lang),
                both(Some(live.largest_free_block), lang)
            ));
            for blk in live.largest_live.iter().take(5) {
                out.push(format!(
                    "  vivant {} — `{}`",
                    both(Some(blk.bytes), lang),
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
    lang: Style,
) {
    b.push(Block::Heading(lang.t("Assumed", "Supposé").into()));
    let mut items: Vec<String> = Vec::new();
    if let Some(e) = e {
        for t in e.terms.iter().filter(|t| t.kind == Kind::Assumed) {
            items.push(format!(
                "{}{} {} — `{}`",
                names::term(t, lang),
                colon(lang),
                both(Some(t.bytes), lang),
                t.formula
            ));
        }
        if !e.left_out.is_empty() {
            items.push(format!(
                "{}{} {}",
                lang.t("left out of the estimate", "hors de l’estimation"),
                colon(lang),
                if lang.fr() {
                    format!(
                        "{} élément(s), listés dans l’estimation jointe",
                        e.left_out.len()
                    )
                } else {
                    e.left_out.join("; ")
                }
            ));
        }
    }
    let scope: Vec<&str> = ["evaluation", "export"]
        .into_iter()
        .filter(|p| !r.scope.phases.iter().any(|x| x == p))
        .collect();
    if !scope.is_empty() {
        items.push(format!(
            "{}{} `{}`",
            lang.t("not measured in this run", "non mesuré dans cet essai"),
            colon(lang),
            scope.join(", ")
        ));
    }
    let covered = s
        .map(|s| {
            s.varied
                .iter()
                .map(|v| v.name())
                .chain((!s.alloc_confs.is_empty()).then_some(crate::schema::alloc_conf::ALLOC_CONF))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .filter(|v| !v.is_empty());
    items.push(match covered {
        Some(v) => format!("{}{} `{v}`", lang.t("variations covered by the series", "variations couvertes par la série"), colon(lang)),
        None => lang
            .t(
                "no variation was tested: a margin must still cover a longer input, the allowed batch, evaluation, export, library versions and other users of the card",
                "aucune variation testée : la marge doit encore couvrir une entrée plus longue, le batch autorisé, l’évaluation, l’export, les versions de bibliothèques et les autres utilisateurs de la carte",
            )
            .into(),
    });
    b.push(Block::List(items));
}

fn chosen(b: &mut Vec<Block>, r: &MeasureResult, s: Option<&Series>, lang: Style) {
    b.push(Block::Heading(
        lang.t("Configuration chosen", "Choix retenu").into(),
    ));
    let frontier = s.and_then(|s| s.frontier.as_ref());
    let text = match (frontier, r.status) {
        (Some(f), _) => format!(
            "{} `{}` = {} ({} {}); {}",
            lang.t("Largest value that succeeded:", "Plus grande valeur réussie\u{a0}:"),
            f.variable,
            f.last_success.map_or(lang.t("none", "aucune").into(), |v| lang.integer(u128::from(v))),
            lang.t("first failure at", "premier échec à"),
            f.first_failure.map_or(lang.t("none", "aucun").into(), |v| lang.integer(u128::from(v))),
            lang.t("keep a margin below it for the variations listed as assumed.", "gardez une marge en dessous pour les variations listées comme supposées.")
        ),
        (None, RunStatus::Ok) if r.phases.is_empty() => lang
            .t(
                "No phase was recorded: this result proves nothing about fit; mark the work with `iteragpu.phase(…)` and measure again.",
                "Aucune phase n’a été enregistrée : ce résultat ne prouve rien sur la tenue en mémoire ; marquez le travail avec `iteragpu.phase(…)` et mesurez de nouveau.",
            )
            .into(),
        (None, RunStatus::Ok) => lang
            .t(
                "The measured configuration ran to completion on this GPU; only this load is validated.",
                "La configuration mesurée a abouti sur ce GPU ; seule cette charge est validée.",
            )
            .into(),
        (None, _) => lang
            .t(
                "The measured configuration did not complete: reduce one dimension and search the frontier (`iteragpu sweep --search frontier`).",
                "La configuration mesurée n’a pas abouti : réduisez une seule dimension et cherchez la frontière (`iteragpu sweep --search frontier`).",
            )
            .into(),
    };
    b.push(Block::Para(text));
}
