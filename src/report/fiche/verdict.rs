//! The answer first: the workload, the peak that matters, the capacity and the margin, the
//! largest load validated, the largest term of the gap, what is still assumed — each line linked
//! to the section that backs it.

use super::facts::Facts;
use super::words::{labelled, text};
use crate::report::catalog::common::CommonText;
use crate::report::catalog::names;
use crate::report::catalog::verdict::{VerdictText, VerdictValue};
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
        lines.push(Verdict {
            label: lang.say(VerdictText::Run).into(),
            value: VerdictValue::Stopped {
                phase: stopped.phase.unwrap_or("?"),
                class: stopped.class,
            }
            .word(lang),
            section: Some(observed_heading.clone()),
            tone: Tone::Bad,
        });
    }
    if let Some(p) = f.peak {
        lines.push(Verdict {
            label: lang.say(VerdictText::PeakMatters).into(),
            value: VerdictValue::Peak {
                reserved: p.reserved_bytes,
                phase: &p.phase.name,
                driver_peak: f.driver_peak,
            }
            .word(lang),
            section: Some(observed_heading.clone()),
            tone: Tone::Neutral,
        });
    }
    if let (Some(cap), Some(need), Some(margin)) = (f.capacity, f.need, f.margin) {
        lines.push(Verdict {
            label: lang.say(VerdictText::CapacityMargin).into(),
            value: VerdictValue::CapacityAndMargin {
                capacity: cap,
                need: need.counter,
                margin,
            }
            .word(lang),
            section: Some(lang.say(CommonText::Environment).into()),
            tone: if margin >= 0 { Tone::Good } else { Tone::Bad },
        });
    }
    validated(&mut lines, f, &observed_heading, lang);
    if let Some((id, bytes)) = f.largest_gap_term {
        lines.push(Verdict {
            label: lang.say(VerdictText::LargestTermGap).into(),
            value: labelled(names::line(id, lang), lang, lang.size(Some(bytes))),
            section: Some(lang.say(CommonText::WhyPeakExceedsEstimate).into()),
            tone: Tone::Neutral,
        });
    }
    lines.push(Verdict {
        label: lang.say(VerdictText::StillAssumed).into(),
        value: VerdictValue::StillAssumed {
            terms: f.assumed_terms,
        }
        .word(lang),
        section: Some(lang.say(CommonText::AssumedHeading).into()),
        tone: Tone::Neutral,
    });
    b.push(Block::Verdict(lines));
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
    lines.push(Verdict {
        label,
        value: VerdictValue::Validated {
            variable: v.variable,
            largest: v.largest,
            frontier: v.frontier,
        }
        .word(lang),
        section: Some(observed_heading.into()),
        tone: if v.largest.is_some() {
            Tone::Good
        } else {
            Tone::Bad
        },
    });
}
