//! The fiche: a short sheet someone can decide from. Identity, dimensions, environment and scope;
//! then what was **calculated**, what was **observed** and what is still **assumed**, kept apart;
//! then the configuration chosen and the raw results attached (path and SHA-256).
//!
//! Reading rules of the guide, enforced here: the gap between reserved and allocated is shown only
//! from two readings of the same checkpoint (never peak reserved − peak allocated); an end level
//! minus a start level is never presented as the volume of temporary tensors; a partial peak
//! before a failure is never presented as the need of a complete run.
//!
//! [`facts::Facts`] is read once from the documents; each section (one file each) words it. The
//! builders have no side effect: a warning is returned with the document, for the command to say.
//! A prediction gets its own fiche (`predicted.rs`): the same verdict's questions, answered
//! "predicted, not measured".

pub mod facts;

mod assumed;
mod calculated;
mod gap;
mod identity;
mod observed;
mod prediction_fiche;
mod ranks;
mod series;
mod timeline;
mod verdict;
mod words;

#[cfg(test)]
mod golden;

use self::facts::{Facts, gpu_name};
use super::document::{Attachment, Block, Document};
use super::format::Style;
use crate::report::catalog::fiche::FicheText;
use crate::schema::load::{self, EstimateDoc, InputError, InputFile as Input, Loaded};
use crate::schema::measure::MeasureResult;
use crate::schema::series::{Series, SeriesStatus};

/// The fiche, and what its reader should be told about the files it was made from.
#[derive(Debug)]
pub struct Fiche {
    pub document: Document,
    pub warnings: Vec<Warning>,
}

/// Something wrong with an input that does not stop the fiche, in the fiche's language.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// The file concerned, as given.
    pub file: String,
    pub text: String,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.file, self.text)
    }
}

/// Builds the fiche from a result, up to two series (a measured one and a predicted one of the
/// same workload: both frontiers are shown then) and an optional estimate.
pub fn build(
    result: &Loaded,
    all_series: &[&Loaded],
    estimate: Option<&Loaded>,
    lang: Style,
) -> Result<Fiche, InputError> {
    // A predicted series is drawn apart, labelled predicted: it never validates a measurement.
    let (predicted_series, series) = series::split(all_series)?;
    let series = series.first().copied();
    let r = match &result.doc {
        Input::Measure(r) => r,
        // The one place a prediction's fiche parts from a measurement's.
        Input::Prediction(p) => {
            // A second run (a prediction, a measurement) is not a series: the fiche is of one run.
            if let Some(m) = series.filter(|m| !matches!(m.doc, Input::Series(_))) {
                return Err(m.wrong(
                    load::SERIES,
                    &format!(
                        "a fiche is of one run, and its later files are sweep series; to set two runs side by side: iteragpu compare {} {}",
                        result.path.display(),
                        m.path.display()
                    ),
                ));
            }
            if let Some(m) = series {
                // Its frontier needs the measurement it was validated against; both frontiers
                // are drawn in the measurement's fiche.
                return Err(InputError::Apart {
                    path: m.path.clone(),
                    schema: load::SERIES.into(),
                    message: format!(
                        "a measured series is reported with a measurement of the same workload, not beside the prediction {}: iteragpu report RESULT.json {} [PSERIES.json] shows both frontiers; beside a prediction, give a predicted series (sweep --predict)",
                        result.path.display(),
                        m.path.display()
                    ),
                });
            }
            return prediction_fiche::build(result, p, predicted_series, estimate, lang);
        }
        // A predicted series alone: the fiche of one of its trials' predictions, with the series.
        Input::Series(s) if s.predicted() && all_series.is_empty() => {
            return prediction_fiche::of_series(result, s, estimate, lang);
        }
        Input::Series(s) => {
            // A predicted series alone took the branch above.
            let hint = if all_series.is_empty() && !s.predicted() {
                "a measured series alone makes no fiche yet: give the measurement of one value first (iteragpu measure … --output RESULT.json), then iteragpu report RESULT.json SERIES.json"
            } else {
                "the run comes first, its series after it: iteragpu report RESULT.json|PRED.json SERIES.json"
            };
            return Err(result.wrong(&format!("{} or {}", load::MEASURE, load::PREDICTION), hint));
        }
        _ => {
            return Err(result.wrong(
                &format!("{} or {}", load::MEASURE, load::PREDICTION),
                "the first file of a report is a measure result or a prediction",
            ));
        }
    };
    let s: Option<&Series> = match series.map(|l| (&l.doc, l)) {
        None => None,
        Some((Input::Series(s), _)) => Some(s),
        Some((_, l)) => {
            return Err(l.wrong(
                load::SERIES,
                "the second file of a report is a sweep series",
            ));
        }
    };
    let e: Option<&EstimateDoc> = estimate.map(Loaded::as_estimate).transpose()?;
    if let (Some(s), Some(l)) = (s, series) {
        check_same_gpu(r, s, l)?;
        check_series_matches(r, s, l)?;
    }
    if let (Some(e), Some(l)) = (e, estimate) {
        load::check_estimate_of(r, e, l)?;
    }
    let ps: Option<&Series> = match predicted_series {
        Some((l, ps)) => {
            series::check_predicted_matches(r, ps, l)?;
            Some(ps)
        }
        None => None,
    };
    let facts = Facts::new(r, s, e);
    let mut b = Vec::new();
    let mut warnings = Vec::new();
    if let Some(s) = s
        && s.status == SeriesStatus::Running
    {
        let warning = lang.say(FicheText::SeriesNeverClosed);
        warnings.push(Warning {
            file: series.map_or(String::new(), |l| l.path.display().to_string()),
            text: warning.into(),
        });
        b.push(Block::Para(warning.into()));
    }
    verdict::verdict(&mut b, &facts, lang);
    identity::identity(&mut b, r, lang);
    identity::environment(&mut b, r, lang);
    calculated::calculated(&mut b, e, lang);
    observed::observed(&mut b, &facts, lang);
    if let Some(ps) = ps {
        series::series_predicted(&mut b, ps, s, lang);
    }
    ranks::ranks(&mut b, r, lang);
    gap::gap(&mut b, &facts, lang);
    timeline::timeline(&mut b, r, lang);
    assumed::assumed(&mut b, &facts, lang);
    assumed::chosen(&mut b, &facts, lang);
    let attachments = attach(&mut b, result, all_series, estimate, lang);
    Ok(Fiche {
        document: Document {
            title: format!("{} — {}", lang.say(FicheText::Title), facts.workload),
            style: lang,
            blocks: b,
            attachments,
        },
        warnings,
    })
}

/// The raw results attached: every input (the node files of a merged run included), listed with
/// its SHA-256 and embedded.
fn attach(
    b: &mut Vec<Block>,
    result: &Loaded,
    series: &[&Loaded],
    estimate: Option<&Loaded>,
    lang: Style,
) -> Vec<Attachment> {
    let mut attachments = Vec::new();
    let mut listed = Vec::new();
    let nodes = result.merged_from.iter();
    for l in std::iter::once(result)
        .chain(series.iter().copied())
        .chain(estimate)
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
        lang.say(FicheText::RawResultsAttached).into(),
    ));
    b.push(Block::List(listed));
    attachments
}

/// One fiche, one GPU: a series measured on another card is refused.
fn check_same_gpu(r: &MeasureResult, s: &Series, l: &Loaded) -> Result<(), InputError> {
    let first = s
        .trials
        .iter()
        .filter_map(|t| t.result.as_ref())
        .find_map(gpu_name);
    if let (Some(a), Some(b)) = (gpu_name(r), first)
        && a != b
    {
        return Err(InputError::Apart {
            path: l.path.clone(),
            schema: load::SERIES.into(),
            message: format!(
                "the result was measured on `{a}` and the series on `{b}`: report one GPU at a time"
            ),
        });
    }
    Ok(())
}

/// A series belongs with a result when every dimension but the varied ones is the same.
fn check_series_matches(r: &MeasureResult, s: &Series, l: &Loaded) -> Result<(), InputError> {
    for t in &s.trials {
        let Some(tr) = &t.result else { continue };
        if let Some((key, ours, theirs)) = series::first_mismatch(&r.dimensions, t, &tr.dimensions)
        {
            return Err(InputError::Apart {
                path: l.path.clone(),
                schema: load::SERIES.into(),
                message: format!(
                    "the result has {key} = {ours} and trial {} of the series has {key} = {theirs}: they are not the same workload besides the varied dimension; report a series of this configuration",
                    t.index + 1
                ),
            });
        }
        if tr.identity.workload != r.identity.workload {
            return Err(InputError::Apart {
                path: l.path.clone(),
                schema: load::SERIES.into(),
                message: format!(
                    "the result measured the `{}` workload and the series `{}`",
                    r.identity.workload, tr.identity.workload
                ),
            });
        }
    }
    Ok(())
}
