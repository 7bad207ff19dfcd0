//! Where a predicted workload failed: the worker's `done` event carries the exception's type,
//! message and Python traceback; the frame that matters is the innermost one in the user's own
//! code (not iteragpu's package, not the Python installation's libraries), and the traceback's
//! last lines are kept with it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How many of the traceback's last lines are kept.
pub const TAIL_LINES: usize = 12;

/// The workload's exception, as the prediction file keeps it (`failure_detail`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureDetail {
    /// The exception's class name (`ValueError`).
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    /// The innermost frame of the user's code; else the innermost frame outside iteragpu's
    /// package (`user_code` false); null when the traceback names no such frame.
    pub frame: Option<Frame>,
    /// The traceback's last lines (at most 12), as Python wrote them.
    pub traceback_tail: Vec<String>,
}

/// One `File "X", line N, in F` line of a traceback.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    pub file: String,
    pub line: u64,
    #[serde(default)]
    pub function: Option<String>,
    /// Outside iteragpu's package and the Python installation's libraries: the user's code.
    #[serde(default)]
    pub user_code: bool,
}

impl FailureDetail {
    /// From the `done` event's `error` (`{type, message, traceback}`).
    pub fn of(error: &Value) -> FailureDetail {
        let traceback = error["traceback"].as_str().unwrap_or("");
        let lines: Vec<&str> = traceback.trim_end().lines().collect();
        FailureDetail {
            kind: error["type"].as_str().unwrap_or("error").to_string(),
            message: error["message"].as_str().unwrap_or("").to_string(),
            frame: frame(traceback),
            traceback_tail: lines[lines.len().saturating_sub(TAIL_LINES)..]
                .iter()
                .map(|l| l.to_string())
                .collect(),
        }
    }

    /// ` (at FILE:LINE)`, or nothing without a frame.
    pub fn at(&self) -> String {
        self.frame
            .as_ref()
            .map_or_else(String::new, |f| format!(" (at {}:{})", f.file, f.line))
    }
}

/// The frame that matters in `traceback`: the innermost of the user's code, else the innermost
/// not in iteragpu's package. Only the last exception of a chain is read ("During handling of the
/// above exception…" prints the earlier ones first).
pub fn frame(traceback: &str) -> Option<Frame> {
    let last = traceback
        .rfind("Traceback (most recent call last):")
        .map_or(traceback, |at| &traceback[at..]);
    let frames: Vec<Frame> = last.lines().filter_map(parse_frame).collect();
    let user = frames
        .iter()
        .rev()
        .find(|f| !is_tool(&f.file) && !is_library(&f.file));
    match user {
        Some(f) => Some(Frame {
            user_code: true,
            ..f.clone()
        }),
        None => frames.iter().rev().find(|f| !is_tool(&f.file)).cloned(),
    }
}

/// `  File "X", line N, in F` (a frame line of CPython's tracebacks).
fn parse_frame(line: &str) -> Option<Frame> {
    let rest = line.trim_start().strip_prefix("File \"")?;
    let (file, rest) = rest.split_once("\", line ")?;
    let (number, function) = match rest.split_once(", in ") {
        Some((n, f)) => (n, Some(f.trim().to_string())),
        None => (rest, None),
    };
    Some(Frame {
        file: file.to_string(),
        line: number.trim().parse().ok()?,
        function,
        user_code: false,
    })
}

/// iteragpu's own package, written by the CLI into a `iteragpu-python-…` temporary folder.
fn is_tool(file: &str) -> bool {
    file.contains("iteragpu-python-") && file.contains("/iteragpu/")
}

/// The Python installation's libraries (the standard library, site-packages, frozen modules)
/// and code with no file (`<string>`).
fn is_library(file: &str) -> bool {
    file.starts_with('<')
        || file.contains("/lib/python3")
        || file.contains("site-packages")
        || file.contains("dist-packages")
}

#[cfg(test)]
mod tests {
    use super::*;

    const IN_TRANSFORMERS: &str =
        include_str!("../../tests/fixtures/tracebacks/in_transformers.txt");
    const IN_THE_SCRIPT: &str = include_str!("../../tests/fixtures/tracebacks/in_the_script.txt");

    fn error(traceback: &str) -> Value {
        serde_json::json!({"type": "ValueError", "message": "m", "traceback": traceback})
    }

    /// A user script whose `generate` call fails inside transformers' validation: the frame is
    /// the script's line, not transformers' nor iteragpu's wrapper around generate.
    #[test]
    fn a_failure_inside_transformers_points_at_the_users_call() {
        let d = FailureDetail::of(&error(IN_TRANSFORMERS));
        let f = d.frame.as_ref().unwrap();
        assert_eq!(f.file, "/tmp/tb/tf_fail.py");
        assert_eq!(f.line, 10);
        assert_eq!(f.function.as_deref(), Some("<module>"));
        assert!(f.user_code);
        assert_eq!(d.at(), " (at /tmp/tb/tf_fail.py:10)");
        assert_eq!(d.traceback_tail.len(), TAIL_LINES);
        assert_eq!(
            d.traceback_tail.last().unwrap(),
            "ValueError: `max_new_tokens` must be greater than 0, but is -1."
        );
        assert_eq!(d.traceback_tail[0].trim(), "^^^^^^^^^^^^^^^^^^^^^");
        assert!(
            d.traceback_tail[9].ends_with("configuration_utils.py\", line 671, in validate"),
            "{:?}",
            d.traceback_tail
        );
    }

    /// A script failing in its own function through torch's dispatch and iteragpu's tracker: the
    /// innermost frame of the script (its function, not the module level that called it).
    #[test]
    fn a_failure_in_the_script_points_at_its_innermost_line() {
        let d = FailureDetail::of(&error(IN_THE_SCRIPT));
        let f = d.frame.unwrap();
        assert_eq!((f.file.as_str(), f.line), ("/tmp/tb/own_fail.py", 5));
        assert_eq!(f.function.as_deref(), Some("build"));
        assert!(f.user_code);
        assert_eq!(
            d.traceback_tail.last().unwrap(),
            "RuntimeError: a and b must have same reduction dim, but got [8, 8] X [9, 8]."
        );
    }

    /// The worker keeps a traceback's last 4000 characters: when the user's frames were cut off,
    /// the innermost frame outside iteragpu is kept, said not to be the user's.
    #[test]
    fn a_cut_traceback_falls_back_to_the_innermost_frame_outside_iteragpu() {
        let cut = &IN_THE_SCRIPT[IN_THE_SCRIPT.find("tracker.py\", line 349").unwrap() - 40..];
        let f = frame(cut).unwrap();
        assert!(!f.user_code);
        assert!(f.file.ends_with("site-packages/torch/__init__.py"), "{f:?}");
        assert_eq!(f.line, 2145);
        // Only iteragpu's frames: none.
        let ours = "Traceback (most recent call last):\n  File \"/tmp/iteragpu-python-x/iteragpu/worker.py\", line 85, in run_workload\n    code = run_script(spec)\nRuntimeError: the script exited with status 2\n";
        assert_eq!(frame(ours), None);
        let d = FailureDetail::of(&error(ours));
        assert_eq!(d.at(), "");
        assert_eq!(d.traceback_tail.len(), 4);
    }

    /// In a chain, the last exception's frames count; no traceback gives no frame and no tail.
    #[test]
    fn chained_exceptions_and_missing_tracebacks() {
        let chained = "Traceback (most recent call last):\n  File \"/home/u/a.py\", line 3, in <module>\n    x()\nKeyError: 1\n\nDuring handling of the above exception, another exception occurred:\n\nTraceback (most recent call last):\n  File \"/home/u/a.py\", line 5, in <module>\n    y()\n  File \"/usr/lib/python3.12/json/__init__.py\", line 346, in loads\n    return _default_decoder.decode(s)\nValueError: bad\n";
        let f = frame(chained).unwrap();
        assert_eq!((f.file.as_str(), f.line), ("/home/u/a.py", 5));
        let d = FailureDetail::of(&serde_json::json!({"type": "ValueError", "message": "late"}));
        assert_eq!(d.frame, None);
        assert!(d.traceback_tail.is_empty());
        assert_eq!(
            serde_json::to_value(&d).unwrap(),
            serde_json::json!({"type": "ValueError", "message": "late", "frame": null, "traceback_tail": []})
        );
    }
}
