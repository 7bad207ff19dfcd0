//! The fiche's small words: column headers in its one unit, values as identifiers, statuses in
//! the reader's language, `label: value` with French spacing.

use crate::report::catalog::common::CommonText;
use serde_json::Value;

use crate::report::document::Cell;
use crate::report::format::Style;

/// A column header with the fiche's unit: `peak reserved (GiB)`.
pub(super) fn in_unit(header: &str, lang: Style) -> String {
    format!("{header} ({})", lang.unit())
}

pub(super) fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

/// A dimension's value: a number in the fiche's style, anything else as an identifier.
pub(super) fn value_cell(v: &Value, lang: Style) -> Cell {
    match v {
        Value::Number(n) if n.is_u64() => lang.integer(u128::from(n.as_u64().unwrap_or(0))).into(),
        Value::Number(n) => lang.decimal(n.as_f64().unwrap_or(0.0), 2).into(),
        other => Cell::Code(text(other)),
    }
}

/// A run's status in the reader's language (the identifier in the JSON stays English).
pub(super) fn status_word(status: crate::schema::measure::RunStatus, lang: Style) -> &'static str {
    use crate::schema::measure::RunStatus as S;
    match status {
        S::Ok => lang.say(CommonText::Ok),
        S::Failed => lang.say(CommonText::Failed),
        S::Crashed => lang.say(CommonText::Crashed),
        S::Timeout => lang.say(CommonText::TimedOut),
        S::Interrupted => lang.say(CommonText::Interrupted),
        S::Terminated => lang.say(CommonText::Terminated),
    }
}

/// `label: value`, the colon spaced as the reader's language spaces it (` :` in French).
pub(super) fn labelled(label: &str, lang: Style, value: impl std::fmt::Display) -> String {
    format!("{label}{} {value}", lang.say(CommonText::Colon))
}

/// A sweep trial's status in the reader's language.
pub(super) fn trial_status(
    status: crate::schema::series::TrialStatus,
    lang: Style,
) -> &'static str {
    use crate::schema::measure::RunStatus as S;
    use crate::schema::series::TrialStatus as T;
    let run = match status {
        T::Unavailable => return lang.say(CommonText::PytorchOrGpuMissing),
        T::Unpredictable => {
            return lang.say(crate::report::catalog::series::SeriesText::Unpredictable);
        }
        T::Ok => S::Ok,
        T::Failed => S::Failed,
        T::Crashed => S::Crashed,
        T::Timeout => S::Timeout,
        T::Interrupted => S::Interrupted,
        T::Terminated => S::Terminated,
    };
    status_word(run, lang)
}
