//! `iteragpu cards`: the catalog, and whether a need fits on one device of each card.

use anyhow::{Result, bail};
use serde::Serialize;
use std::fmt::Write as _;
use std::io::Write;

use crate::cards::{self, CapacitySource};
use crate::cli::CardsArgs;
use crate::exit;
use crate::report::inputs::{self, Document};
use crate::units::{Bytes, GIB};

#[derive(Serialize)]
struct Fit {
    card: String,
    capacity_bytes: u64,
    capacity_source: CapacitySource,
    usable_bytes: u64,
    fits: bool,
    /// usable − need (negative when it does not fit).
    margin_bytes: i128,
    /// Devices needed at least if the work is split (for you to measure; never one pool).
    devices_if_split: u64,
}

/// The need per device and where it came from, plus a measured overhead if the file has one.
fn need_from(args: &CardsArgs) -> Result<Option<(Bytes, String, Option<u64>)>> {
    if let Some(n) = args.need {
        return Ok(Some((n, format!("--need {}", n.grouped()), None)));
    }
    let Some(path) = &args.from else {
        return Ok(None);
    };
    let l = inputs::load(path)?;
    let outside = |r: &crate::measure::result::MeasureResult| {
        r.phases
            .iter()
            .flat_map(|p| p.driver.iter().flatten())
            .filter_map(|d| d.outside_allocator_at_end_bytes)
            .max()
    };
    Ok(Some(match &l.doc {
        Document::Estimate(e) => (
            Bytes(e.total_bytes),
            format!("the preparation hypothesis of {}", path.display()),
            None,
        ),
        Document::Measure(r) => {
            if r.status != "ok" {
                bail!(
                    "{} is a {} run: a partial peak before a failure is not the memory need of a complete run; measure a configuration that completes",
                    path.display(),
                    r.status
                );
            }
            let peak = r
                .phases
                .iter()
                .flat_map(|p| p.devices.iter())
                .filter_map(|d| d.peak_reserved_bytes)
                .max();
            let Some(peak) = peak else {
                bail!("{} has no peak reserved reading", path.display())
            };
            (
                Bytes(peak),
                format!(
                    "the highest peak reserved of one device in {}",
                    path.display()
                ),
                outside(r),
            )
        }
        Document::Series(s) => {
            let best = s
                .trials
                .iter()
                .filter(|t| t.status == "ok")
                .max_by_key(|t| t.peak_reserved_bytes);
            let Some(t) = best.and_then(|t| Some((t, t.peak_reserved_bytes?))) else {
                bail!(
                    "{} has no successful trial: nothing to size a card from",
                    path.display()
                )
            };
            let values: Vec<String> = t.0.values.iter().map(|(k, v)| format!("{k}={v}")).collect();
            (
                Bytes(t.1),
                format!(
                    "the largest successful trial ({}) of {}",
                    values.join(" "),
                    path.display()
                ),
                s.trials
                    .iter()
                    .filter_map(|t| t.result.as_ref())
                    .filter_map(outside)
                    .max(),
            )
        }
    }))
}

pub fn run(args: &CardsArgs, out: &mut dyn Write) -> Result<u8> {
    let catalog = cards::catalog();
    let mut o = String::new();
    let Some((need, source, measured)) = need_from(args)? else {
        if args.json {
            out.write_all((serde_json::to_string_pretty(&catalog)? + "\n").as_bytes())?;
            return Ok(exit::OK);
        }
        let _ = writeln!(
            o,
            "{:<14} {:<7} {:<22} {:<32} {:>18} {:>18}  source",
            "card", "vendor", "memory", "label", "reported (driver)", "torch total_memory"
        );
        for c in &catalog {
            let b = |v: Option<u64>| v.map_or("unknown".into(), |x| Bytes(x).grouped());
            let _ = writeln!(
                o,
                "{:<14} {:<7} {:<22} {:<32} {:>18} {:>18}  {}",
                c.name,
                c.vendor,
                c.memory_type,
                c.label,
                b(c.reported_bytes),
                b(c.torch_total_bytes),
                c.source
            );
        }
        out.write_all(o.as_bytes())?;
        return Ok(exit::OK);
    };
    let (overhead, overhead_source) = match (args.overhead, measured) {
        (Some(b), _) => (b.get(), format!("--overhead {}", b.grouped())),
        (None, Some(m)) => (m, "measured: memory outside PyTorch's allocator seen by NVML in the file".into()),
        (None, None) => (GIB, "assumed 1 GiB for the CUDA context and libraries (612 MiB was read on an H200 with torch 2.11); say yours with --overhead".into()),
    };
    let fits: Vec<Fit> = catalog
        .iter()
        .map(|c| {
            let (cap, src) = c.device_capacity();
            let usable = cap.get().saturating_sub(overhead);
            Fit {
                card: c.name.clone(),
                capacity_bytes: cap.get(),
                capacity_source: src,
                usable_bytes: usable,
                fits: need.get() <= usable,
                margin_bytes: usable as i128 - need.get() as i128,
                devices_if_split: if usable == 0 {
                    0
                } else {
                    need.get().div_ceil(usable)
                },
            }
        })
        .collect();
    if args.json {
        let doc = serde_json::json!({"need_bytes": need.get(), "need_source": source, "overhead_bytes": overhead, "overhead_source": overhead_source, "cards": fits});
        out.write_all((serde_json::to_string_pretty(&doc)? + "\n").as_bytes())?;
        return Ok(exit::OK);
    }
    let _ = writeln!(
        o,
        "need per device: {} bytes ({}), from {source}",
        need.grouped(),
        need.both()
    );
    let _ = writeln!(
        o,
        "minus non-PyTorch memory per process: {} bytes ({overhead_source})\n",
        Bytes(overhead).grouped()
    );
    for f in &fits {
        let m = f.margin_bytes;
        let margin = format!(
            "{}{:.2} GB = {}{:.2} GiB",
            if m < 0 { "−" } else { "+" },
            m.unsigned_abs() as f64 / 1e9,
            if m < 0 { "−" } else { "+" },
            m.unsigned_abs() as f64 / GIB as f64
        );
        let verdict = if f.fits {
            format!("fits on one device, margin {margin}")
        } else {
            format!(
                "does not fit on one device ({margin}): the work must be split over at least {} devices (tensor or pipeline parallelism, offloading) — how is for you to measure",
                f.devices_if_split
            )
        };
        let _ = writeln!(
            o,
            "  {:<14} usable {:>8.2} GiB ({:?})  {verdict}",
            f.card,
            Bytes(f.usable_bytes).gib(),
            f.capacity_source
        );
    }
    let _ = writeln!(
        o,
        "\nSeveral GPUs are never one pool of memory: each device must hold its own share, and a failure on one is not fixed by free memory on another."
    );
    out.write_all(o.as_bytes())?;
    Ok(exit::OK)
}
