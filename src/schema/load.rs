//! Reading the files a report or a comparison is made from: the schema and version are checked
//! first, then the content; a truncated or hand-edited file gets a message with its position.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

use crate::estimate::{Kind, TermId};
use crate::schema::measure::MeasureResult;
use crate::schema::series::Series;

/// Why an input file was refused.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("cannot read {}: {reason}", path.display())]
    Read { path: PathBuf, reason: String },
    /// Not a regular file (a FIFO would block, a device never ends) or above the size cap.
    #[error(transparent)]
    File(#[from] crate::model::files::FileError),
    #[error(
        "{path} is not valid JSON (line {line}, column {column}): {message}; the file is truncated or was edited by hand"
    )]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path} has no `schema` field: it was not written by iteragpu")]
    NoSchema { path: PathBuf },
    #[error("{path} is a `{found}` file; {wanted} expected here ({hint})")]
    Schema {
        path: PathBuf,
        found: String,
        wanted: String,
        hint: String,
    },
    #[error(
        "{path} does not match {schema}: {message}; the file was edited by hand or comes from another tool"
    )]
    Content {
        path: PathBuf,
        schema: String,
        message: String,
    },
    /// A valid file refused for what it says beside the others (another workload, another card),
    /// or with nothing a report can be made of: the message says which and what to give instead.
    #[error("{path} ({schema}): {message}")]
    Apart {
        path: PathBuf,
        schema: String,
        message: String,
    },
}

/// One `estimate --json` line, as the report needs it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(try_from = "StoredTerm")]
pub struct EstimateTerm {
    /// What the term is (`weights`, `kv_cache`, …); read back from `name` in files written
    /// before terms had an `id`.
    #[serde(flatten)]
    pub id: TermId,
    /// The English name.
    pub name: String,
    pub bytes: u64,
    pub kind: Kind,
    pub formula: String,
    pub in_total: bool,
    #[serde(default)]
    pub inputs: serde_json::Map<String, serde_json::Value>,
}

/// A term as the file holds it: the id and its parameters among the other fields, or no id at
/// all (files before the ids).
#[derive(Deserialize)]
struct StoredTerm {
    name: String,
    bytes: u64,
    kind: Kind,
    formula: String,
    in_total: bool,
    #[serde(default)]
    inputs: serde_json::Map<String, serde_json::Value>,
    #[serde(flatten)]
    id: serde_json::Map<String, serde_json::Value>,
}

impl TryFrom<StoredTerm> for EstimateTerm {
    type Error = String;
    fn try_from(t: StoredTerm) -> Result<EstimateTerm, String> {
        let id = if t.id.contains_key("id") {
            serde_json::from_value(serde_json::Value::Object(t.id))
                .map_err(|e| format!("term `{}`: {e}", t.name))?
        } else {
            TermId::from_english(&t.name)
        };
        Ok(EstimateTerm {
            id,
            name: t.name,
            bytes: t.bytes,
            kind: t.kind,
            formula: t.formula,
            in_total: t.in_total,
            inputs: t.inputs,
        })
    }
}

/// The parts of an `estimate --json` document a report uses.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EstimateDoc {
    pub schema: String,
    pub terms: Vec<EstimateTerm>,
    pub total_bytes: u64,
    pub left_out: Vec<String>,
    #[serde(default)]
    pub notes: Vec<String>,
    /// The model the estimate read (`--model`), with its parameter count.
    #[serde(default)]
    pub model: Option<serde_json::Value>,
}

impl EstimateDoc {
    /// The parameters the estimate counted: the model's, else the weights term's `--parameters`.
    pub fn parameters(&self) -> Option<u64> {
        self.model
            .as_ref()
            .and_then(|m| m.get("parameters"))
            .and_then(serde_json::Value::as_u64)
            .or_else(|| {
                self.terms
                    .iter()
                    .find(|t| matches!(t.id, TermId::Weights { .. }))
                    .and_then(|t| t.inputs.get("parameters"))
                    .and_then(serde_json::Value::as_u64)
            })
    }
}

/// Any file iteragpu writes.
#[derive(Clone, Debug)]
pub enum InputFile {
    Measure(Box<MeasureResult>),
    Series(Box<Series>),
    Estimate(Box<EstimateDoc>),
    Prediction(Box<crate::schema::prediction::PredictionDoc>),
}

/// A file read from disk, with its raw bytes (attached to reports) and their SHA-256.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub path: PathBuf,
    pub sha256: String,
    pub raw: String,
    pub doc: InputFile,
    /// The other node files of one multi-node job merged into this one (`doc` is the merge).
    pub merged_from: Vec<Loaded>,
}

pub use crate::estimate::SCHEMA as ESTIMATE;
pub use crate::schema::measure::SCHEMA as MEASURE;
pub use crate::schema::prediction::SCHEMA as PREDICTION;
pub use crate::schema::series::SCHEMA as SERIES;

/// The largest iteragpu document read: a result with its timeline summary or a long series stays
/// far below; anything larger is not one of ours (a device, a stray file) and is refused unread.
pub const DOCUMENT_CAP: u64 = 256 << 20;

/// Reads and validates any iteragpu file (a regular file under `DOCUMENT_CAP`, checked first).
pub fn load(path: &Path) -> Result<Loaded, InputError> {
    let bytes = crate::model::files::read_capped(path, DOCUMENT_CAP, "iteragpu document")?;
    let raw = String::from_utf8(bytes).map_err(|e| InputError::Read {
        path: path.to_path_buf(),
        reason: format!("not UTF-8 text ({e}): it was not written by iteragpu"),
    })?;
    let value: serde_json::Value = serde_json::from_str(&raw).map_err(|e| InputError::Json {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let schema = value
        .get("schema")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| InputError::NoSchema {
            path: path.to_path_buf(),
        })?
        .to_string();
    let content = |e: serde_json::Error| InputError::Content {
        path: path.to_path_buf(),
        schema: schema.clone(),
        message: e.to_string(),
    };
    let doc = match schema.as_str() {
        MEASURE => InputFile::Measure(Box::new(serde_json::from_value(value).map_err(content)?)),
        SERIES => InputFile::Series(Box::new(serde_json::from_value(value).map_err(content)?)),
        ESTIMATE => InputFile::Estimate(Box::new(serde_json::from_value(value).map_err(content)?)),
        PREDICTION => {
            InputFile::Prediction(Box::new(serde_json::from_value(value).map_err(content)?))
        }
        other => {
            return Err(InputError::Schema {
                path: path.to_path_buf(),
                found: other.to_string(),
                wanted: format!("{MEASURE}, {SERIES}, {ESTIMATE} or {PREDICTION}"),
                hint: "this version of iteragpu reads only these; use the iteragpu that wrote the file".into(),
            });
        }
    };
    let digest = Sha256::digest(raw.as_bytes());
    Ok(Loaded {
        path: path.to_path_buf(),
        sha256: digest.iter().map(|b| format!("{b:02x}")).collect(),
        raw,
        doc,
        merged_from: Vec::new(),
    })
}

impl Loaded {
    pub fn schema(&self) -> &'static str {
        match self.doc {
            InputFile::Measure(_) => MEASURE,
            InputFile::Series(_) => SERIES,
            InputFile::Estimate(_) => ESTIMATE,
            InputFile::Prediction(_) => PREDICTION,
        }
    }

    /// This file as the estimate beside a result (`--estimate`).
    pub fn as_estimate(&self) -> Result<&EstimateDoc, InputError> {
        match &self.doc {
            InputFile::Estimate(e) => Ok(e),
            _ => Err(self.wrong(
                ESTIMATE,
                "--estimate takes the output of `iteragpu estimate --json`",
            )),
        }
    }

    /// This file as the prediction beside a result (`--prediction`).
    pub fn as_prediction(&self) -> Result<&crate::schema::prediction::PredictionDoc, InputError> {
        match &self.doc {
            InputFile::Prediction(p) => Ok(p),
            _ => Err(self.wrong(
                PREDICTION,
                "--prediction takes the output of `iteragpu predict`",
            )),
        }
    }

    pub fn wrong(&self, wanted: &str, hint: &str) -> InputError {
        InputError::Schema {
            path: self.path.clone(),
            found: self.schema().to_string(),
            wanted: wanted.to_string(),
            hint: hint.to_string(),
        }
    }
}

/// The parameters the measured model had: declared by the workload, else counted at load.
pub fn measured_parameters(r: &MeasureResult) -> Option<u64> {
    r.identity
        .declared
        .get("parameters")
        .and_then(serde_json::Value::as_u64)
        .or_else(|| {
            r.phases
                .iter()
                .find(|p| p.name == "model_load")
                .and_then(|p| p.inputs.get("parameters"))
                .and_then(serde_json::Value::as_u64)
        })
}

/// Refuses an estimate of another model: a gap against it would explain nothing.
pub fn check_estimate_of(r: &MeasureResult, e: &EstimateDoc, l: &Loaded) -> Result<(), InputError> {
    check_estimate_parameters(e, measured_parameters(r), "measured", l)
}

/// Refuses an estimate of another model than the predicted one.
pub fn check_estimate_of_prediction(
    p: &crate::schema::prediction::PredictionDoc,
    e: &EstimateDoc,
    l: &Loaded,
) -> Result<(), InputError> {
    let parameters = p
        .identity
        .declared
        .get("parameters")
        .and_then(serde_json::Value::as_u64);
    check_estimate_parameters(e, parameters, "predicted", l)
}

/// A warning when the estimate counts other parameters than the prediction's model built in
/// `model_load` (the workloads record the count there, before any adapter): likely the estimate of
/// another model. A warning, not a refusal: a multimodal config estimated as its language model
/// counts fewer on purpose.
pub fn estimate_of_another_model(
    p: &crate::schema::prediction::PredictionDoc,
    e: &EstimateDoc,
) -> Option<String> {
    let built = p
        .phases
        .iter()
        .find(|ph| ph.name == "model_load")
        .and_then(|ph| ph.inputs.get("parameters"))
        .and_then(serde_json::Value::as_u64)?;
    let estimated = e.parameters()?;
    (estimated != built).then(|| {
        format!(
            "the estimate counts {} parameters and the predicted model was built with {}: it is likely the estimate of another model (iteragpu estimate --model … --json for the predicted one)",
            crate::units::group_thousands(estimated as u128),
            crate::units::group_thousands(built as u128)
        )
    })
}

/// `run`'s model (`measured`, `predicted`) has `parameters`: the estimate must count as many.
fn check_estimate_parameters(
    e: &EstimateDoc,
    parameters: Option<u64>,
    run: &str,
    l: &Loaded,
) -> Result<(), InputError> {
    if let (Some(estimated), Some(measured)) = (e.parameters(), parameters)
        && estimated != measured
    {
        return Err(InputError::Apart {
            path: l.path.clone(),
            schema: ESTIMATE.into(),
            message: format!(
                "the estimate counts {} parameters and the {run} model has {}: it is the estimate of another model; estimate the {run} one (iteragpu estimate --model … --json)",
                crate::units::group_thousands(estimated as u128),
                crate::units::group_thousands(measured as u128)
            ),
        });
    }
    Ok(())
}

/// Refuses a prediction of another workload or other dimensions than the result's.
pub fn check_prediction_of(
    r: &MeasureResult,
    p: &crate::schema::prediction::PredictionDoc,
    l: &Loaded,
) -> Result<(), InputError> {
    let refuse = |message: String| InputError::Apart {
        path: l.path.clone(),
        schema: PREDICTION.into(),
        message,
    };
    if p.identity.workload != r.identity.workload {
        return Err(refuse(format!(
            "the prediction is of the `{}` workload and the result measured `{}`; predict the measured workload (iteragpu predict with the measure's options)",
            p.identity.workload, r.identity.workload
        )));
    }
    for (key, value) in &r.dimensions {
        if let Some(theirs) = p.dimensions.get(key)
            && theirs != value
        {
            return Err(refuse(format!(
                "the result has {key} = {value} and the prediction {key} = {theirs}; predict with the measure's dimensions"
            )));
        }
    }
    Ok(())
}

/// Measure files of one multi-node torchrun job (the same run id) merged into one, in the order
/// of their first file; every other file as it was. Files of different runs stay apart; a node
/// given twice is refused.
/// The node files must describe one job (same world size and nnodes, node ranks below nnodes,
/// global ranks unique and below the world size, the same workload, dimensions, torch and code),
/// else they are refused with the field named; `allow_mismatch` merges them with a warning.
pub fn gather_nodes(files: Vec<Loaded>, allow_mismatch: bool) -> Result<Vec<Loaded>, InputError> {
    let run_id = |l: &Loaded| match &l.doc {
        InputFile::Measure(r) => r.distributed.as_ref().and_then(|d| d.run_id.clone()),
        _ => None,
    };
    let mut out: Vec<Loaded> = Vec::new();
    let mut groups: Vec<(String, Vec<Loaded>)> = Vec::new();
    let mut slots: Vec<Option<usize>> = Vec::new();
    for l in files {
        match run_id(&l) {
            Some(id) => match groups.iter().position(|(g, _)| *g == id) {
                Some(k) => groups[k].1.push(l),
                None => {
                    slots.push(Some(groups.len()));
                    groups.push((id, vec![l]));
                }
            },
            None => {
                slots.push(None);
                out.push(l);
            }
        }
    }
    let mut merged: Vec<Loaded> = Vec::new();
    for (_, mut group) in groups {
        if group.len() == 1 {
            merged.push(group.remove(0));
            continue;
        }
        let pairs: Vec<(&Path, &MeasureResult)> = group
            .iter()
            .filter_map(|l| match &l.doc {
                InputFile::Measure(r) => Some((l.path.as_path(), r.as_ref())),
                _ => None,
            })
            .collect();
        let doc = crate::schema::nodes::merge_nodes(&pairs, allow_mismatch).map_err(|e| {
            InputError::Content {
                path: group[0].path.clone(),
                schema: MEASURE.into(),
                message: e.to_string(),
            }
        })?;
        let mut first = group.remove(0);
        first.doc = InputFile::Measure(Box::new(doc));
        first.merged_from = group;
        merged.push(first);
    }
    // Back in the order the files were given.
    let mut plain = out.into_iter();
    let mut merged = merged.into_iter();
    Ok(slots
        .into_iter()
        .filter_map(|s| match s {
            Some(_) => merged.next(),
            None => plain.next(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::Shard;

    /// An estimate written before terms had an `id` still loads: each id is read back from the
    /// English name; a file with ids keeps them.
    #[test]
    fn an_estimate_without_ids_gets_them_from_the_names() {
        let term = |name: &str| serde_json::json!({"name": name, "bytes": 1, "kind": "calculated", "formula": "", "in_total": true});
        let old: EstimateDoc = serde_json::from_value(serde_json::json!({
            "schema": ESTIMATE, "total_bytes": 3, "left_out": [],
            "terms": [term("weights (bfloat16)"), term("optimizer states (adamw), FSDP shard"), term("an unknown line")]
        }))
        .unwrap();
        let ids: Vec<&TermId> = old.terms.iter().map(|t| &t.id).collect();
        assert_eq!(
            ids,
            [
                &TermId::Weights {
                    dtype: Some("bfloat16".into()),
                    shard: None
                },
                &TermId::OptimizerStates {
                    optimizer: crate::estimate::Optimizer::Adamw,
                    shard: Some(Shard::FsdpShard)
                },
                &TermId::Other
            ]
        );
        assert_eq!(old.terms[0].kind, Kind::Calculated);
        // With an id the name is not read: the id decides.
        let mut with_id = term("reworded weights");
        with_id["id"] = "reserve".into();
        let new: EstimateTerm = serde_json::from_value(with_id).unwrap();
        assert_eq!(new.id, TermId::Reserve);
        assert_eq!(new.name, "reworded weights");
        // Written back, the id is beside the name.
        let again = serde_json::to_value(&new).unwrap();
        assert_eq!(again["id"], "reserve");
        assert_eq!(again["kind"], "calculated");
    }
}
