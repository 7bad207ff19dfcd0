//! A measurement or a prediction, read alike: every command that reads one run (`report`,
//! `explain`, `compare`, `cards`) takes either through [`RunDoc`], and says which it holds —
//! "measured" or "predicted" — never a refusal, and never a predicted figure called measured.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::schema::load::InputFile;
use crate::schema::measure::MeasureResult;
use crate::schema::prediction::PredictionDoc;

/// Where a run's figures come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::Display, strum::AsRefStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum Origin {
    /// Read on a GPU by PyTorch (and the driver): `iteragpu.measure/1`.
    Measured,
    /// The workload's code on data-less tensors, replayed through the allocator model:
    /// `iteragpu.prediction/1`.
    Predicted,
}

/// One phase of a run on one device, with its figures (`None`: not read or not predicted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseFigures<'a> {
    pub name: &'a str,
    pub index: u64,
    pub device: &'a str,
    /// The phase's status as its file words it (`ok`, `failed` / `predicted`, `unpredictable`).
    pub status: String,
    /// Completed (measured) or predicted: its peaks are a need, not a partial figure.
    pub complete: bool,
    pub start_allocated_bytes: Option<u64>,
    pub start_reserved_bytes: Option<u64>,
    pub peak_allocated_bytes: Option<u64>,
    pub peak_reserved_bytes: Option<u64>,
    pub end_allocated_bytes: Option<u64>,
    pub end_reserved_bytes: Option<u64>,
}

/// One run, measured or predicted.
#[derive(Clone, Copy, Debug)]
pub enum RunDoc<'a> {
    Measured(&'a MeasureResult),
    Predicted(&'a PredictionDoc),
}

impl<'a> RunDoc<'a> {
    /// The run a file holds; `None` for a series or an estimate.
    pub fn of(doc: &'a InputFile) -> Option<RunDoc<'a>> {
        match doc {
            InputFile::Measure(r) => Some(RunDoc::Measured(r)),
            InputFile::Prediction(p) => Some(RunDoc::Predicted(p)),
            InputFile::Series(_) | InputFile::Estimate(_) => None,
        }
    }

    pub fn origin(self) -> Origin {
        match self {
            RunDoc::Measured(_) => Origin::Measured,
            RunDoc::Predicted(_) => Origin::Predicted,
        }
    }

    /// The workload's name (`dense`, `causal-lm`, `script`).
    pub fn workload(self) -> &'a str {
        match self {
            RunDoc::Measured(r) => &r.identity.workload,
            RunDoc::Predicted(p) => &p.identity.workload,
        }
    }

    pub fn dimensions(self) -> &'a Map<String, Value> {
        match self {
            RunDoc::Measured(r) => &r.dimensions,
            RunDoc::Predicted(p) => &p.dimensions,
        }
    }

    /// The torch the figures were read (or predicted) with.
    pub fn torch_version(self) -> Option<&'a str> {
        match self {
            RunDoc::Measured(r) => r.environment.python.as_ref()?.torch_str("version"),
            RunDoc::Predicted(p) => p.assumptions.torch_version.as_deref(),
        }
    }

    /// The card: the GPU measured on (as PyTorch names it), or the card predicted for.
    pub fn card(self) -> Option<&'a str> {
        match self {
            RunDoc::Measured(r) => r
                .environment
                .python
                .as_ref()?
                .device(r.scope.devices.first()?)?
                .get("name")?
                .as_str(),
            RunDoc::Predicted(p) => Some(&p.target.name),
        }
    }

    /// Every phase on every device, in the file's order (a prediction follows one device).
    pub fn phases(self) -> Vec<PhaseFigures<'a>> {
        match self {
            RunDoc::Measured(r) => r
                .phases
                .iter()
                .flat_map(|p| {
                    p.devices.iter().map(move |d| PhaseFigures {
                        name: &p.name,
                        index: p.index,
                        device: &d.device,
                        status: p.status.to_string(),
                        complete: p.status.is_ok(),
                        start_allocated_bytes: d.start_allocated_bytes,
                        start_reserved_bytes: d.start_reserved_bytes,
                        peak_allocated_bytes: d.peak_allocated_bytes,
                        peak_reserved_bytes: d.peak_reserved_bytes,
                        end_allocated_bytes: d.end_allocated_bytes,
                        end_reserved_bytes: d.end_reserved_bytes,
                    })
                })
                .collect(),
            RunDoc::Predicted(p) => {
                let device = p.spec.devices.first().map_or("cuda:0", String::as_str);
                p.phases
                    .iter()
                    .map(|ph| PhaseFigures {
                        name: &ph.name,
                        index: ph.index,
                        device,
                        status: ph.status.to_string(),
                        complete: ph.status.has_figures(),
                        start_allocated_bytes: ph.start_allocated_bytes,
                        start_reserved_bytes: ph.start_reserved_bytes,
                        peak_allocated_bytes: ph.peak_allocated_bytes,
                        peak_reserved_bytes: ph.peak_reserved_bytes,
                        end_allocated_bytes: ph.end_allocated_bytes,
                        end_reserved_bytes: ph.end_reserved_bytes,
                    })
                    .collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::VariantArray;

    #[test]
    fn an_origin_is_its_word() {
        for o in Origin::VARIANTS {
            assert_eq!(serde_json::to_value(o).unwrap(), o.as_ref());
            assert_eq!(o.to_string(), o.as_ref());
        }
        assert_eq!(Origin::Predicted.to_string(), "predicted");
    }
}
