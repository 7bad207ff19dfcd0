//! Whether a memory need fits on one device of each card: the need (given, or read from an
//! estimate, a result or a series), the memory a process holds outside PyTorch's allocator, and
//! the margin per card. Several GPUs are never one pool: a card that is too small gets the number
//! of devices a split would need at least, for the user to measure.

use anyhow::{Result, bail};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

use crate::cards::{CapacitySource, Card};
use crate::output::table::{Column, Table};
use crate::schema::load::{self, InputFile};
use crate::schema::prediction::PredictionStatus;
use crate::units::{Bytes, GIB};

/// One card's answer.
#[derive(Clone, Debug, Serialize)]
pub struct CardFit {
    pub card: String,
    pub capacity_bytes: u64,
    pub capacity_source: CapacitySource,
    pub usable_bytes: u64,
    pub fits: bool,
    /// usable − need (negative when it does not fit).
    pub margin_bytes: i128,
    /// Devices needed at least if the work is split (for you to measure; never one pool); null
    /// when the overhead alone fills the card.
    pub devices_if_split: Option<u64>,
}

/// A need per device, where it came from, and the memory outside PyTorch's allocator the file
/// measured (if it holds a driver's view).
pub struct Need {
    pub bytes: Bytes,
    pub source: String,
    /// The memory outside PyTorch's allocator the file holds, and where it comes from.
    pub overhead: Option<(u64, String)>,
}

/// The largest need compared with the cards: 2^63 − 1 bytes (8 EiB), a million times any card's
/// memory, and the largest margin a document's signed integer holds.
pub const MAX_NEED: u64 = i64::MAX as u64;

/// The need, refused past [`MAX_NEED`] with its value and where it came from: a need no card is
/// near is a mistyped unit or a corrupt file, and the margins beside it would not be numbers.
pub fn bounded(need: Need) -> Result<Need> {
    if need.bytes.get() > MAX_NEED {
        bail!(
            "the need {} bytes ({}) from {} is beyond any device: iteragpu compares needs up to {} bytes (8 EiB); check the value and its unit (18GB, 17.04GiB)",
            need.bytes.grouped(),
            need.bytes.both(),
            need.source,
            Bytes(MAX_NEED).grouped()
        );
    }
    Ok(need)
}

/// Reads the need from an estimate (its preparation hypothesis), a measure result (its highest
/// peak reserved; a failed run is refused), a series (its largest successful trial) or a
/// prediction (its highest predicted peak reserved, said to be a prediction).
pub fn from_file(path: &Path) -> Result<Need> {
    let l = load::load(path)?;
    Ok(match &l.doc {
        InputFile::Estimate(e) => Need {
            bytes: Bytes(e.total_bytes),
            source: format!("the preparation hypothesis of {}", path.display()),
            overhead: None,
        },
        InputFile::Prediction(p) => {
            if p.status == PredictionStatus::Failed || p.stopped() {
                bail!(
                    "{} is the prediction of a workload that stopped ({}): it is not the need of a complete run",
                    path.display(),
                    p.failure.as_deref().unwrap_or("failed")
                );
            }
            // Out of the simulated card's memory: the need is the peak with unlimited memory.
            if let Some(oom) = &p.out_of_memory {
                let Some(peak) = oom.unlimited_peak_reserved_bytes else {
                    bail!("{} predicts no phase (all unpredictable)", path.display())
                };
                return Ok(Need {
                    bytes: Bytes(peak),
                    source: format!(
                        "the PREDICTED highest peak reserved in {} with unlimited memory (predicted out of memory in phase {} within {}; a prediction, not a measurement)",
                        path.display(),
                        oom.phase.as_deref().unwrap_or("(outside any phase)"),
                        p.capacity
                            .as_ref()
                            .map_or(p.target.name.as_str(), |c| c.source.as_str())
                    ),
                    overhead: Some((
                        p.target.context_bytes,
                        format!(
                            "the prediction's memory outside PyTorch's allocator ({})",
                            p.target.context_source
                        ),
                    )),
                });
            }
            let Some(peak) = p.max_peak_reserved() else {
                bail!("{} predicts no phase (all unpredictable)", path.display())
            };
            let unpredictable = p
                .phases
                .iter()
                .filter(|ph| !ph.status.has_figures())
                .count();
            Need {
                bytes: Bytes(peak),
                source: format!(
                    "the PREDICTED highest peak reserved in {} (for {}; a prediction, not a measurement{})",
                    path.display(),
                    p.target.name,
                    if unpredictable > 0 {
                        format!(
                            "; {unpredictable} phase(s) could not be predicted and are not in it"
                        )
                    } else {
                        String::new()
                    } + &bounded_words(p)
                ),
                overhead: Some((
                    p.target.context_bytes,
                    format!(
                        "the prediction's memory outside PyTorch's allocator ({})",
                        p.target.context_source
                    ),
                )),
            }
        }
        InputFile::Measure(r) => {
            if !r.status.is_ok() {
                bail!(
                    "{} is a {} run: a partial peak before a failure is not the memory need of a complete run; measure a configuration that completes",
                    path.display(),
                    r.status
                );
            }
            let Some(peak) = r.max_peak_reserved() else {
                bail!("{} has no peak reserved reading", path.display())
            };
            Need {
                bytes: Bytes(peak),
                source: format!(
                    "the highest peak reserved of one device in {}",
                    path.display()
                ),
                overhead: r.max_outside_allocator().map(|b| {
                    (
                        b,
                        "measured: memory outside PyTorch's allocator seen by NVML in the file"
                            .to_string(),
                    )
                }),
            }
        }
        InputFile::Series(s) => {
            let best = s
                .trials
                .iter()
                .filter(|t| t.status.is_ok())
                .max_by_key(|t| t.peak_reserved_bytes);
            let Some((t, peak)) = best.and_then(|t| Some((t, t.peak_reserved_bytes?))) else {
                bail!(
                    "{} has no successful trial: nothing to size a card from",
                    path.display()
                )
            };
            let values: Vec<String> = t.values.iter().map(|(k, v)| format!("{k}={v}")).collect();
            Need {
                bytes: Bytes(peak),
                source: format!(
                    "the largest successful trial ({}) of {}",
                    values.join(" "),
                    path.display()
                ),
                overhead: s.max_outside_allocator().map(|b| {
                    (
                        b,
                        "measured: memory outside PyTorch's allocator seen by NVML in the file"
                            .to_string(),
                    )
                }),
            }
        }
    })
}

/// The memory a process holds outside PyTorch's allocator: stated, from the file, or assumed
/// 1 GiB. A stated overhead that fills even the largest card is refused: it cannot be that memory.
pub fn overhead(
    catalog: &[Card],
    stated: Option<Bytes>,
    from_file: Option<(u64, String)>,
) -> Result<(u64, String)> {
    let largest = catalog
        .iter()
        .map(|c| c.device_capacity().0.get())
        .max()
        .unwrap_or(0);
    if let Some(b) = stated
        && b.get() >= largest
    {
        bail!(
            "--overhead {} fills even the largest card of the catalog ({}): it is the memory one process holds outside PyTorch's allocator (CUDA context and libraries, about 0.6 to 1 GiB); check the value",
            b.both(),
            Bytes(largest).both()
        );
    }
    Ok(match (stated, from_file) {
        (Some(b), _) => (b.get(), format!("--overhead {}", b.grouped())),
        (None, Some(known)) => known,
        (None, None) => (
            GIB,
            "assumed 1 GiB for the CUDA context and libraries (612 MiB was read on an H200 with torch 2.11); say yours with --overhead".into(),
        ),
    })
}

/// Each card's capacity minus the overhead, against the need.
pub fn fits(catalog: &[Card], need: Bytes, overhead: u64) -> Vec<CardFit> {
    let mut ranked: Vec<CardFit> = catalog
        .iter()
        .map(|c| {
            let (cap, src) = c.device_capacity();
            let usable = cap.get().saturating_sub(overhead);
            CardFit {
                card: c.name.clone(),
                capacity_bytes: cap.get(),
                capacity_source: src,
                usable_bytes: usable,
                fits: need.get() <= usable,
                margin_bytes: usable as i128 - need.get() as i128,
                devices_if_split: (usable > 0).then(|| need.get().div_ceil(usable)),
            }
        })
        .collect();
    // Ranked for the need: the cards that hold it first, the tightest fit (the smallest card that
    // will do) at the top; then those that do not, the closest first. Equal margins keep the
    // catalog's order.
    ranked.sort_by_key(|f| {
        if f.fits {
            (0u8, f.margin_bytes)
        } else {
            (1u8, -f.margin_bytes)
        }
    });
    ranked
}

/// The need, the overhead and one verdict per card.
pub fn render_fits(
    need: Bytes,
    source: &str,
    overhead: u64,
    overhead_source: &str,
    fits: &[CardFit],
) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "need per device: {} bytes ({}), from {source}",
        need.grouped(),
        need.both()
    );
    let _ = writeln!(
        o,
        "minus non-PyTorch memory per process: {} bytes ({overhead_source})",
        Bytes(overhead).grouped()
    );
    let _ = writeln!(
        o,
        "ranked: the cards that hold it first, the tightest fit at the top; then those that do not, the closest first\n"
    );
    let mut cards = Table::new(vec![
        Column::left("").min(14),
        Column::left(""),
        Column::right("").min(12),
        Column::left(""),
    ])
    .indent(2);
    for f in fits {
        let m = f.margin_bytes;
        let margin = format!(
            "{}{:.2} GB = {}{:.2} GiB",
            if m < 0 { "−" } else { "+" },
            m.unsigned_abs() as f64 / 1e9,
            if m < 0 { "−" } else { "+" },
            m.unsigned_abs() as f64 / GIB as f64
        );
        let verdict = match (f.fits, f.devices_if_split) {
            (true, _) => format!("fits on one device, margin {margin}"),
            (false, Some(n)) => format!(
                "does not fit on one device ({margin}): the work must be split over at least {n} devices (tensor or pipeline parallelism, offloading) — how is for you to measure"
            ),
            (false, None) => {
                "does not fit: the memory outside PyTorch's allocator alone fills this card"
                    .to_string()
            }
        };
        cards.row([
            f.card.clone(),
            "usable".into(),
            format!("{:.2} GiB", Bytes(f.usable_bytes).gib()),
            format!("({})  {verdict}", f.capacity_source.label()),
        ]);
    }
    o.push_str(&cards.terminal());
    let _ = writeln!(
        o,
        "\nSeveral GPUs are never one pool of memory: each device must hold its own share, and a failure on one is not fixed by free memory on another."
    );
    o
}

/// A prediction with bounded phases: the need is at the largest data-dependent sizes; the one at
/// the smallest, said beside it.
fn bounded_words(p: &crate::schema::prediction::PredictionDoc) -> String {
    use crate::schema::prediction::PhaseStatus;
    if !p.phases.iter().any(|ph| ph.status == PhaseStatus::Bounded) {
        return String::new();
    }
    let lowest = p
        .phases
        .iter()
        .filter(|ph| ph.status.has_figures())
        .filter_map(|ph| {
            ph.lower
                .as_ref()
                .and_then(|l| l.peak_reserved_bytes)
                .or(ph.peak_reserved_bytes)
        })
        .max();
    format!(
        "; bounded by data-dependent sizes: this is the need at the largest, {} at the smallest",
        lowest.map_or("not predicted".into(), |b| Bytes(b).both())
    )
}
