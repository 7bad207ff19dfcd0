//! Who ran what, where: identity, dimensions, environment and scope.

use crate::report::catalog::common::CommonText;
use crate::report::catalog::identity::IdentityText;
use serde_json::Value;

use super::facts::{gpu_name, torch_total_memory};
use super::words::{labelled, status_word, text, value_cell};
use crate::report::document::{Block, Cell};
use crate::report::format::Style;
use crate::schema::measure::MeasureResult;

pub(super) fn identity(b: &mut Vec<Block>, r: &MeasureResult, lang: Style) {
    b.push(Block::Heading(lang.say(IdentityText::Identity).into()));
    let d = &r.identity.declared;
    let code = |v: Option<&Value>| v.map_or(Cell::Text("—".into()), |v| Cell::Code(text(v)));
    let mut rows: Vec<Vec<Cell>> = vec![
        vec![
            lang.say(IdentityText::Workload).into(),
            Cell::Code(r.identity.workload.clone()),
        ],
        vec![
            lang.say(IdentityText::ModelOrCode).into(),
            code(d.get("model")),
        ],
        vec![
            lang.say(IdentityText::Revision).into(),
            code(d.get("revision")),
        ],
        vec![
            lang.say(IdentityText::MeasuringCode).into(),
            Cell::Code(r.identity.code_hash.clone()),
        ],
        vec![
            lang.say(IdentityText::Seed).into(),
            r.identity
                .seed
                .map_or("—".into(), |s| lang.integer(u128::from(s)))
                .into(),
        ],
        vec![
            lang.say(IdentityText::Run).into(),
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
            lang.say(IdentityText::InputsProcessedShapes).into(),
            Cell::Code(shapes.join("; ")),
        ]);
    }
    b.push(Block::Table {
        header: vec![String::new(), String::new()],
        rows,
    });
    dimensions_table(b, &r.dimensions, lang);
}

/// The "Dimensions" heading and its table, a row per recorded dimension (measured or predicted).
pub(super) fn dimensions_table(
    b: &mut Vec<Block>,
    dimensions: &serde_json::Map<String, serde_json::Value>,
    lang: Style,
) {
    b.push(Block::Heading(lang.say(CommonText::Dimensions).into()));
    b.push(Block::Table {
        header: vec![
            lang.say(IdentityText::Dimension).into(),
            lang.say(IdentityText::Value).into(),
        ],
        rows: dimensions
            .iter()
            .map(|(k, v)| vec![Cell::Code(k.clone()), value_cell(v, lang)])
            .collect(),
    });
}

pub(super) fn environment(b: &mut Vec<Block>, r: &MeasureResult, lang: Style) {
    b.push(Block::Heading(lang.say(CommonText::Environment).into()));
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
            lang.say(IdentityText::CapacityTorchTotalMemory).into(),
            Cell::size_with_unit(Some(total)),
        ]);
    }
    match &r.environment.driver {
        Some(d) => {
            rows.push(vec![
                lang.say(IdentityText::Driver).into(),
                Cell::Code(format!(
                    "{} (CUDA {})",
                    d.driver_version.as_deref().unwrap_or("?"),
                    d.cuda_driver_version.as_deref().unwrap_or("?")
                )),
            ]);
            if let Some(g) = d.gpus.first() {
                rows.push(vec![
                    lang.say(IdentityText::CapacityNvml).into(),
                    Cell::size_with_unit(g.total_bytes),
                ]);
            }
        }
        None => rows.push(vec![
            lang.say(IdentityText::Driver).into(),
            lang.say(IdentityText::NoNvidiaDriverView).into(),
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
        lang.say(IdentityText::AllocatorBackend).into(),
        Cell::Code(tget("allocator_backend")),
    ]);
    if let Some(settings) = py.and_then(|p| p.settings.as_object()) {
        let set: Vec<String> = settings
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| format!("{k}={}", text(v)))
            .collect();
        rows.push(vec![
            lang.say(IdentityText::AllocatorSettings).into(),
            if set.is_empty() {
                lang.say(IdentityText::NoneSet).into()
            } else {
                Cell::Code(set.join(", "))
            },
        ]);
    }
    b.push(Block::Table {
        header: vec![String::new(), String::new()],
        rows,
    });
    b.push(Block::Heading(lang.say(IdentityText::Scope).into()));
    let p = &r.policies;
    b.push(Block::List(vec![
        labelled(
            lang.say(IdentityText::Phases),
            lang,
            format!("`{}`", r.scope.phases.join(", ")),
        ),
        labelled(
            lang.say(IdentityText::FirstPass),
            lang,
            format!("`{}`", r.scope.first_pass),
        ),
        labelled(
            lang.say(IdentityText::Protocol),
            lang,
            format!(
                "`{}`, {} {}, {} {}, `empty_cache {}`",
                p.protocol,
                lang.integer(u128::from(p.warmup)),
                lang.say(IdentityText::WarmUpPasses),
                lang.integer(u128::from(p.repeats)),
                lang.say(IdentityText::Repeats),
                p.empty_cache
            ),
        ),
        labelled(
            lang.say(IdentityText::Process),
            lang,
            format!("`{}`", p.process),
        ),
    ]));
}
