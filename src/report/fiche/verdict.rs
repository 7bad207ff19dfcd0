//! The answer first: the workload, the peak that matters, the capacity and the margin, the
//! largest load validated, the largest term of the gap, what is still assumed — each line linked
//! to the section that backs it.

use super::facts::{CapacityCounter, Facts, NeedCounter};
use super::words::{colon, text};
use crate::report::catalog::common::CommonText;
use crate::report::catalog::ledger::oom_class;
use crate::report::catalog::names;
use crate::report::catalog::verdict::VerdictText;
use crate::report::document::{Block, Tone, Verdict};
use crate::report::format::Style;

pub(super) fn verdict(b: &mut Vec<Block>, f: &Facts, lang: Style) {
    let r = f.result;
    let mut lines = Vec::new();
    if f.fake_torch {
        lines.push(Verdict {
            label: lang.say(VerdictText::Source).into(),
            value: lang.say(VerdictText::FakeTorch).into(),
            section: Some(lang.say(CommonText::Environment).into()),
            tone: Tone::Bad,
        });
    }
    let dims: Vec<String> = r
        .dimensions
        .iter()
        .map(|(k, v)| format!("{k}={}", text(v)))
        .collect();
    lines.push(Verdict {
        label: lang.say(VerdictText::Workload).into(),
        value: format!(
            "`{}` · {}",
            f.workload,
            if dims.is_empty() {
                lang.say(VerdictText::DeclaredDimension).to_string()
            } else {
                format!("`{}`", dims.join(" · "))
            }
        ),
        section: Some(lang.say(CommonText::Dimensions).into()),
        tone: Tone::Neutral,
    });
    let observed_heading = lang.say(CommonText::ObservedHeading).to_string();
    if let Some(stopped) = f.stopped {
        let class = stopped
            .class
            .map(|c| format!(" ({})", oom_class(c, lang)))
            .unwrap_or_default();
        lines.push(Verdict {
            label: lang.say(VerdictText::Run).into(),
            value: format!(
                "{} `{}`{class} — {}",
                lang.say(VerdictText::DidNotCompleteStopped),
                stopped.phase.unwrap_or("?"),
                lang.say(VerdictText::PartialPeakBeforeFailure)
            ),
            section: Some(observed_heading.clone()),
            tone: Tone::Bad,
        });
    }
    if let Some(p) = f.peak {
        lines.push(Verdict {
            label: lang.say(VerdictText::PeakMatters).into(),
            value: format!(
                "{} {} `{}`{}",
                lang.size(Some(p.reserved_bytes)),
                lang.say(VerdictText::ReservedIn),
                p.phase.name,
                f.driver_peak.map_or(String::new(), |d| format!(
                    " — {} {}",
                    lang.say(CommonText::DriverView),
                    lang.size(Some(d))
                ))
            ),
            section: Some(observed_heading.clone()),
            tone: Tone::Neutral,
        });
    }
    if let (Some(cap), Some(need), Some(margin)) = (f.capacity, f.need, f.margin) {
        lines.push(capacity_and_margin(
            cap.counter,
            cap.bytes,
            need.counter,
            margin,
            lang,
        ));
    }
    validated(&mut lines, f, &observed_heading, lang);
    if let Some((id, bytes)) = f.largest_gap_term {
        lines.push(Verdict {
            label: lang.say(VerdictText::LargestTermGap).into(),
            value: format!(
                "{}{} {}",
                names::line(id, lang),
                colon(lang),
                lang.size(Some(bytes))
            ),
            section: Some(lang.say(CommonText::WhyPeakExceedsEstimate).into()),
            tone: Tone::Neutral,
        });
    }
    lines.push(Verdict {
        label: lang.say(VerdictText::StillAssumed).into(),
        value: match f.assumed_terms {
            None => lang
                .say(VerdictText::EstimateAttachedEvaluationExport)
                .into(),
            Some(n) => format!(
                "{} {}",
                lang.integer(n as u128),
                lang.say(VerdictText::TermsOfEstimateAndVariations)
            ),
        },
        section: Some(lang.say(CommonText::AssumedHeading).into()),
        tone: Tone::Neutral,
    });
    b.push(Block::Verdict(lines));
}

/// The capacity compared with, named, and the margin.
fn capacity_and_margin(
    counter: CapacityCounter,
    cap: u64,
    need: NeedCounter,
    margin: i128,
    lang: Style,
) -> Verdict {
    let share = 100.0 * margin as f64 / cap as f64;
    Verdict {
        label: lang.say(VerdictText::CapacityMargin).into(),
        value: format!(
            "{} {} — {} {} ({}, {})",
            match counter {
                CapacityCounter::Nvml => lang.say(VerdictText::NvmlTotal),
                CapacityCounter::TorchTotalMemory => {
                    lang.say(VerdictText::TorchTotalMemory)
                }
            },
            lang.size(Some(cap)),
            if margin >= 0 {
                lang.say(VerdictText::Margin)
            } else {
                lang.say(VerdictText::ShortBy)
            },
            lang.size(Some(margin.unsigned_abs() as u64)),
            lang.percent(Some(share)).trim_start_matches('+'),
            match need {
                NeedCounter::DriverView => {
                    lang.say(VerdictText::AgainstDriverView)
                }
                NeedCounter::PeakReserved => lang.say(VerdictText::AgainstPeakReservedNoContext),
            }
        ),
        section: Some(lang.say(CommonText::Environment).into()),
        tone: if margin >= 0 { Tone::Good } else { Tone::Bad },
    }
}

/// What a series validated; without a series, only this load (when it completed).
fn validated(lines: &mut Vec<Verdict>, f: &Facts, observed_heading: &str, lang: Style) {
    let label = lang.say(VerdictText::LargestLoadValidated).to_string();
    let Some(v) = &f.validated else {
        if f.result.status.is_ok() {
            lines.push(Verdict {
                label,
                value: lang.say(VerdictText::LoadOnlySeriesAttached).into(),
                section: Some(lang.say(CommonText::ConfigurationChosen).into()),
                tone: Tone::Neutral,
            });
        }
        return;
    };
    let mut value = match v.largest {
        Some(n) => format!(
            "`{}` = {} {}",
            v.variable,
            lang.integer(u128::from(n)),
            lang.say(VerdictText::Validated)
        ),
        None => lang.say(VerdictText::LoadSeriesCompleted).into(),
    };
    if let Some(fr) = v.frontier {
        value.push_str(&format!(
            "; {} {} – {}",
            lang.say(VerdictText::FrontierBetween),
            fr.last_success
                .map_or("—".into(), |n| lang.integer(u128::from(n))),
            fr.first_failure
                .map_or("—".into(), |n| lang.integer(u128::from(n)))
        ));
    }
    lines.push(Verdict {
        label,
        value,
        section: Some(observed_heading.into()),
        tone: if v.largest.is_some() {
            Tone::Good
        } else {
            Tone::Bad
        },
    });
}
