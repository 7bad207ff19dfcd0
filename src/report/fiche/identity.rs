//! Who ran what, where: identity, dimensions, environment and scope.

use serde_json::Value;

use super::facts::{gpu_name, torch_total_memory};
use super::words::{colon, status_word, text, value_cell};
use crate::report::document::{Block, Cell};
use crate::report::format::Style;
use crate::schema::measure::MeasureResult;

pub(super) fn identity(b: &mut Vec<Block>, r: &MeasureResult, lang: Style) {
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

pub(super) fn environment(b: &mut Vec<Block>, r: &MeasureResult, lang: Style) {
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
    if let Some(total) = torch_total_memory(r) {
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
