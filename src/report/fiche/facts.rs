//! What the fiche asserts, read once from the documents and worded nowhere: the peak that
//! matters, the capacity compared with and the margin, what a series validated, the largest term
//! of the gap, what is still assumed. The verdict and the sections word these; none of them
//! derives a figure again.

use serde_json::Value;

use crate::cards;
use crate::estimate::Kind;
use crate::explain::oom::OomClass;
use crate::ledger::{self, Ledger, LineId, LineKind};
use crate::schema::load::EstimateDoc;
use crate::schema::measure::{MeasureResult, PeakPhase};
use crate::schema::series::{FrontierRecord, Series};

/// The counter a capacity was read from; never folded into one number with another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapacityCounter {
    /// `nvmlDeviceGetMemoryInfo().total`, preferred: the driver's own count.
    Nvml,
    /// `torch.cuda.get_device_properties().total_memory`, when the driver was not read.
    TorchTotalMemory,
}

/// The capacity of the run's card that the need is compared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    pub counter: CapacityCounter,
    pub bytes: u64,
}

/// The counter the need was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NeedCounter {
    /// The driver's view of the process (NVML): the CUDA context included.
    DriverView,
    /// The peak reserved: the CUDA context is not counted.
    PeakReserved,
}

/// What the run needed, compared with the capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    pub counter: NeedCounter,
    pub bytes: u64,
}

/// A run that did not complete: where it stopped and, after an out-of-memory, its class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stopped<'a> {
    pub phase: Option<&'a str>,
    pub class: Option<OomClass>,
}

/// What a series validated.
#[derive(Clone, Debug)]
pub struct Validated<'a> {
    /// The dimension varied (empty for loads and processes, which vary none).
    pub variable: &'a str,
    /// The largest value of the variable whose trial completed.
    pub largest: Option<u64>,
    pub frontier: Option<&'a FrontierRecord>,
    /// The catalog's cards drawn against the series' curve, by name and capacity: those from
    /// half to four times its highest peak (at least 1 GiB), else, without an emulated limit to
    /// draw either, the smallest card, so the curve is seen against a real capacity.
    pub cards: Vec<(String, u64)>,
}

/// Phases a fiche expects to see measured before it calls a load validated.
const PHASES_OUTSIDE_A_TRAINING_STEP: [&str; 2] = ["evaluation", "export"];

/// Everything the fiche asserts, built once by [`Facts::new`].
#[derive(Debug)]
pub struct Facts<'a> {
    pub result: &'a MeasureResult,
    pub series: Option<&'a Series>,
    pub estimate: Option<&'a EstimateDoc>,
    /// The declared model, else the workload's name.
    pub workload: String,
    /// Measured with the test suite's fake torch: an example, not a GPU measurement.
    pub fake_torch: bool,
    /// `Some` when the run did not complete (its peak is partial, never a need).
    pub stopped: Option<Stopped<'a>>,
    pub peak: Option<PeakPhase<'a>>,
    /// The driver's highest reading of the process over completed phases.
    pub driver_peak: Option<u64>,
    pub capacity: Option<Capacity>,
    pub need: Option<Need>,
    /// Capacity − need: negative when the card is short; `None` when either is unknown (never 0).
    pub margin: Option<i128>,
    pub validated: Option<Validated<'a>>,
    /// The gap ledger, read by the verdict and by its own section.
    pub ledger: Option<Ledger>,
    /// The ledger's term line with the largest observed figure.
    pub largest_gap_term: Option<(LineId, u64)>,
    /// The estimate's assumed terms; `None` without an estimate.
    pub assumed_terms: Option<usize>,
    /// Phases outside this run's scope (`evaluation`, `export`).
    pub not_measured: Vec<&'static str>,
    /// The variables a series covered (the allocator settings included); `None` without any.
    pub variations_covered: Option<String>,
}

impl<'a> Facts<'a> {
    pub fn new(
        result: &'a MeasureResult,
        series: Option<&'a Series>,
        estimate: Option<&'a EstimateDoc>,
    ) -> Facts<'a> {
        let r = result;
        let peak = r.peak_phase();
        let driver_peak = r.driver_peak();
        let capacity = capacity(r);
        let need = match (driver_peak, peak) {
            (Some(bytes), _) => Some(Need {
                counter: NeedCounter::DriverView,
                bytes,
            }),
            (None, Some(p)) => Some(Need {
                counter: NeedCounter::PeakReserved,
                bytes: p.reserved_bytes,
            }),
            (None, None) => None,
        };
        let ledger = ledger::of_result(r, estimate, None).ok();
        Facts {
            result,
            series,
            estimate,
            workload: r
                .identity
                .declared
                .get("model")
                .map(super::words::text)
                .unwrap_or_else(|| r.identity.workload.clone()),
            fake_torch: r
                .environment
                .python
                .as_ref()
                .and_then(|p| p.torch_str("version"))
                .is_some_and(|v| v.contains("fake")),
            stopped: (!r.status.is_ok()).then(|| Stopped {
                phase: r.failure.as_ref().and_then(|f| f.phase.as_deref()),
                class: r
                    .failure
                    .as_ref()
                    .and_then(|f| f.post_mortem.as_ref())
                    .map(|pm| pm.diagnosis.class),
            }),
            peak,
            driver_peak,
            capacity,
            need,
            margin: capacity
                .zip(need)
                .map(|(c, n)| i128::from(c.bytes) - i128::from(n.bytes)),
            validated: series.map(validated),
            largest_gap_term: ledger.as_ref().and_then(largest_gap_term),
            ledger,
            assumed_terms: estimate
                .map(|e| e.terms.iter().filter(|t| t.kind == Kind::Assumed).count()),
            not_measured: PHASES_OUTSIDE_A_TRAINING_STEP
                .into_iter()
                .filter(|p| !r.scope.phases.iter().any(|x| x == p))
                .collect(),
            variations_covered: series.and_then(variations_covered),
        }
    }
}

/// What PyTorch declared about the run's first device.
fn first_device(r: &MeasureResult) -> Option<&Value> {
    r.environment
        .python
        .as_ref()?
        .device(r.scope.devices.first()?)
}

pub fn gpu_name(r: &MeasureResult) -> Option<String> {
    first_device(r)?.get("name")?.as_str().map(String::from)
}

/// PyTorch's `total_memory` of the first device.
pub fn torch_total_memory(r: &MeasureResult) -> Option<u64> {
    first_device(r)?.get("total_memory")?.as_u64()
}

/// NVML's total of the first GPU, else PyTorch's total_memory.
fn capacity(r: &MeasureResult) -> Option<Capacity> {
    let nvml = r
        .environment
        .driver
        .as_ref()
        .and_then(|d| d.gpus.first())
        .and_then(|g| g.total_bytes);
    match (nvml, torch_total_memory(r)) {
        (Some(bytes), _) => Some(Capacity {
            counter: CapacityCounter::Nvml,
            bytes,
        }),
        (None, Some(bytes)) => Some(Capacity {
            counter: CapacityCounter::TorchTotalMemory,
            bytes,
        }),
        (None, None) => None,
    }
}

/// The largest value of a series' variable whose trial completed, and its frontier.
fn validated(s: &Series) -> Validated<'_> {
    // A list, grid or frontier varies a dimension; loads and processes have none.
    let variable = s.varied.first().map_or("", |v| v.name());
    Validated {
        variable,
        largest: s
            .trials
            .iter()
            .filter(|t| t.status.is_ok())
            .filter_map(|t| t.values.get(variable).and_then(Value::as_u64))
            .max(),
        frontier: s.frontier.as_ref(),
        cards: cards_near(s, variable),
    }
}

fn cards_near(s: &Series, variable: &str) -> Vec<(String, u64)> {
    let max_peak = s
        .trials
        .iter()
        .filter(|t| t.values.get(variable).and_then(Value::as_u64).is_some())
        .filter_map(|t| t.peak_reserved_bytes)
        .max()
        .unwrap_or(0);
    let mut near: Vec<(String, u64)> = cards::catalog()
        .into_iter()
        .map(|card| {
            let bytes = card.device_capacity().0.get();
            (card.name, bytes)
        })
        .filter(|(_, cap)| *cap >= max_peak / 2 && *cap <= max_peak.saturating_mul(4).max(1 << 30))
        .collect();
    if near.is_empty()
        && s.limit.is_none()
        && let Some(smallest) = cards::catalog()
            .into_iter()
            .min_by_key(|c| c.device_capacity().0)
    {
        near.push((smallest.name.clone(), smallest.device_capacity().0.get()));
    }
    near
}

fn largest_gap_term(l: &Ledger) -> Option<(LineId, u64)> {
    l.lines
        .iter()
        .filter(|x| x.kind == LineKind::Term)
        .filter_map(|x| Some((x.id, x.observed.as_ref()?.bytes)))
        .max_by_key(|(_, b)| *b)
}

fn variations_covered(s: &Series) -> Option<String> {
    Some(
        s.varied
            .iter()
            .map(|v| v.name())
            .chain((!s.alloc_confs.is_empty()).then_some(crate::schema::alloc_conf::ALLOC_CONF))
            .collect::<Vec<_>>()
            .join(", "),
    )
    .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests;
