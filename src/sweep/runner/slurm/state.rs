//! What Slurm says of an array's tasks, read from `scontrol -o show job ID` (one line per task,
//! or per range of pending tasks; kept `MinJobAge` seconds after a task ends, which is all a
//! cluster without accounting has) and from `sacct -n -P -X` (where accounting answers, for as
//! long as its database keeps the job). The states are Slurm's words, kept as Slurm wrote them:
//! a trial's error quotes them.

use std::collections::BTreeMap;

use crate::schema::series::TrialStatus;

/// One array task as Slurm last described it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskState {
    /// `JobState` (`COMPLETED`, `FAILED`, `TIMEOUT`, …), without sacct's "by UID".
    pub state: String,
    /// `Reason` (`NonZeroExitCode`, `Resources`, …; `None` when Slurm has none).
    pub reason: String,
    /// `ExitCode`, `CODE:SIGNAL`.
    pub exit_code: String,
    /// The node(s) it ran on, if it started.
    pub nodes: Option<String>,
    /// The job id of the task itself (`ARRAY_TASK` in sacct, `JobId` in scontrol).
    pub job_id: String,
}

impl TaskState {
    /// Whether the task will change no more.
    pub fn ended(&self) -> bool {
        !matches!(
            self.state.as_str(),
            "PENDING"
                | "RUNNING"
                | "CONFIGURING"
                | "COMPLETING"
                | "SUSPENDED"
                | "REQUEUED"
                | "REQUEUE_FED"
                | "REQUEUE_HOLD"
                | "RESIZING"
                | "SIGNALING"
                | "STAGE_OUT"
                | "STOPPED"
                | "RESV_DEL_HOLD"
        )
    }

    /// The trial status of a task that ended other than by writing its outcome: a time limit is a
    /// timeout, a cancellation a termination (an interruption when this sweep cancelled it on
    /// Ctrl-C, which the runner decides), anything else (a node failure, a preemption, a job
    /// killed for host memory, a non-zero exit) a crash, its state and reason in the error.
    pub fn status(&self) -> TrialStatus {
        match self.state.as_str() {
            "TIMEOUT" | "DEADLINE" => TrialStatus::Timeout,
            "CANCELLED" => TrialStatus::Terminated,
            _ => TrialStatus::Crashed,
        }
    }

    /// "Slurm: TIMEOUT (reason TimeLimit, exit 0:15) on node1, job 12_3".
    pub fn describe(&self, array: &str, task: usize) -> String {
        let mut s = format!("Slurm: {}", self.state);
        let mut said = Vec::new();
        if self.reason != "None" && !self.reason.is_empty() {
            said.push(format!("reason {}", self.reason));
        }
        if !self.exit_code.is_empty() && self.exit_code != "0:0" {
            said.push(format!("exit {}", self.exit_code));
        }
        if !said.is_empty() {
            s.push_str(&format!(" ({})", said.join(", ")));
        }
        if let Some(n) = &self.nodes {
            s.push_str(&format!(" on {n}"));
        }
        s.push_str(&format!(", job {array}_{task}"));
        s
    }
}

/// The tasks of one array from `scontrol -o show job ID`, by task index.
pub fn parse_scontrol(text: &str) -> BTreeMap<usize, TaskState> {
    let mut tasks = BTreeMap::new();
    for line in text.lines() {
        let fields = fields(line);
        let (Some(ids), Some(state)) = (fields.get("ArrayTaskId"), fields.get("JobState")) else {
            continue;
        };
        let nodes = fields
            .get("NodeList")
            .filter(|n| !n.is_empty() && n.as_str() != "(null)")
            .cloned();
        let task = TaskState {
            state: state.clone(),
            reason: fields.get("Reason").cloned().unwrap_or_default(),
            exit_code: fields.get("ExitCode").cloned().unwrap_or_default(),
            nodes,
            job_id: fields.get("JobId").cloned().unwrap_or_default(),
        };
        for i in task_ids(ids) {
            tasks.insert(i, task.clone());
        }
    }
    tasks
}

/// The tasks of one array from `sacct -n -P -X -j ID -o JobID,State,Reason,ExitCode,NodeList`
/// (`12_3|CANCELLED by 0|None|0:15|node1`; pending ranges as `12_[4-7]`).
pub fn parse_sacct(text: &str) -> BTreeMap<usize, TaskState> {
    let mut tasks = BTreeMap::new();
    for line in text.lines() {
        let cols: Vec<&str> = line.split('|').collect();
        let [id, state, reason, exit_code, nodes, ..] = cols.as_slice() else {
            continue;
        };
        let Some((_, ids)) = id.split_once('_') else {
            continue;
        };
        let ids = ids.trim_start_matches('[').trim_end_matches(']');
        let task = TaskState {
            state: state.split_whitespace().next().unwrap_or("").to_string(),
            reason: reason.to_string(),
            exit_code: exit_code.to_string(),
            nodes: Some(nodes.to_string()).filter(|n| !n.is_empty() && n != "None assigned"),
            job_id: id.to_string(),
        };
        for i in task_ids(ids) {
            tasks.insert(i, task.clone());
        }
    }
    tasks
}

/// `3`, `1-5`, `1,3-5`, `0-9%2` (a throttle) → the indices.
fn task_ids(ids: &str) -> Vec<usize> {
    let ids = ids.split('%').next().unwrap_or("");
    let mut out = Vec::new();
    for part in ids.split(',') {
        let part = part.split(':').next().unwrap_or(""); // a step: `0-15:4`, not submitted here
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    out.extend(a..=b);
                }
            }
            None => out.extend(part.parse::<usize>().ok()),
        }
    }
    out
}

/// `Key=value` pairs of a one-line `scontrol` record; a value with spaces (a command, a
/// comment) keeps the words up to the next `Key=`.
fn fields(line: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let mut last: Option<String> = None;
    for word in line.split_whitespace() {
        match word.split_once('=') {
            Some((k, v))
                if !k.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '/' || c == ':') =>
            {
                map.insert(k.to_string(), v.to_string());
                last = Some(k.to_string());
            }
            _ => {
                if let Some(k) = &last
                    && let Some(v) = map.get_mut(k)
                {
                    v.push(' ');
                    v.push_str(word);
                }
            }
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/slurm")
                .join(name),
        )
        .unwrap()
    }

    #[test]
    fn scontrol_ended_tasks_keep_their_state_reason_and_exit() {
        let t = parse_scontrol(&fixture("scontrol-ended.txt"));
        assert_eq!(t.len(), 4);
        assert_eq!(t[&0].state, "COMPLETED");
        assert_eq!(t[&1].state, "FAILED");
        assert_eq!(t[&1].reason, "NonZeroExitCode");
        assert_eq!(t[&1].exit_code, "3:0");
        assert_eq!(t[&1].nodes.as_deref(), Some("vm"));
        assert_eq!(t[&2].state, "RUNNING");
        assert!(!t[&2].ended() && t[&1].ended());
        assert_eq!(t[&1].status(), TrialStatus::Crashed);
        assert_eq!(
            t[&1].describe("5", 1),
            "Slurm: FAILED (reason NonZeroExitCode, exit 3:0) on vm, job 5_1"
        );
    }

    #[test]
    fn pending_ranges_are_every_task_and_cancelled_ones_are_terminated() {
        let p = parse_scontrol(&fixture("scontrol-pending.txt"));
        assert_eq!(p.keys().copied().collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
        assert_eq!(p[&3].state, "PENDING");
        assert_eq!(p[&3].reason, "Resources");
        assert_eq!(p[&0].state, "RUNNING");
        let c = parse_scontrol(&fixture("scontrol-cancelled.txt"));
        assert!(c.values().all(|t| t.state == "CANCELLED" && t.ended()));
        assert_eq!(c[&4].status(), TrialStatus::Terminated);
    }

    #[test]
    fn a_time_limit_is_a_timeout() {
        let t = parse_scontrol(&fixture("scontrol-timeout.txt"));
        let s = t
            .values()
            .find(|t| t.state == "TIMEOUT")
            .expect("a TIMEOUT task");
        assert_eq!(s.status(), TrialStatus::Timeout);
        assert_eq!(s.reason, "TimeLimit");
    }

    #[test]
    fn sacct_states_drop_who_cancelled_and_map_failures_to_crashes() {
        // sacct's columns as a cluster with accounting prints them (this machine has none: no
        // slurmdbd); node failure, preemption and a job's host memory cannot be caused on one
        // local node, so these lines are written in sacct's format.
        let text = "12_0|COMPLETED|None|0:0|node1\n12_1|CANCELLED by 0|None|0:15|node1\n12_2|NODE_FAIL|None|1:0|node2\n12_3|PREEMPTED|None|0:15|node1\n12_4|OUT_OF_MEMORY|None|0:125|node1\n12_5|TIMEOUT|TimeLimit|0:15|node1\n12_[6-7]|PENDING|Priority|0:0|None assigned\n";
        let t = parse_sacct(text);
        assert_eq!(t.len(), 8);
        assert_eq!(t[&1].state, "CANCELLED");
        assert_eq!(t[&1].status(), TrialStatus::Terminated);
        for i in [2, 3, 4] {
            assert_eq!(t[&i].status(), TrialStatus::Crashed, "{:?}", t[&i]);
            assert!(t[&i].ended());
        }
        assert_eq!(t[&5].status(), TrialStatus::Timeout);
        assert_eq!(t[&7].state, "PENDING");
        assert_eq!(t[&7].nodes, None);
        assert_eq!(
            t[&2].describe("12", 2),
            "Slurm: NODE_FAIL (exit 1:0) on node2, job 12_2"
        );
    }

    #[test]
    fn task_ids_read_ranges_lists_and_throttles() {
        assert_eq!(task_ids("3"), [3]);
        assert_eq!(task_ids("1,3-5"), [1, 3, 4, 5]);
        assert_eq!(task_ids("0-2%1"), [0, 1, 2]);
    }
}
