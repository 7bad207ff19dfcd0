//! The ranks of one node under torchrun, gathered into one result: each rank's status from its
//! own events (torchrun's exit status is only 0 or 1, and a rank that raised may end by SIGABRT),
//! the rank that failed first named as the cause, the others said to have been stopped because
//! of it, and the phases of the rank with the highest peak reserved as the result's `phases` —
//! every rank's are kept apart in `distributed.ranks`, never added together.

use crate::measure::build::TrialOutcome;
use crate::measure::build::{DriverSide, Ended, Origin, Source, build};
use crate::schema::measure::{Distributed, MeasureResult, RankResult, RunStatus};
use crate::schema::nodes::spread;
use crate::schema::torchrun::Torchrun;
use crate::signals::Stop;
use crate::workload::plan::Trial;
use crate::workload::process::{Exit, StartError};

/// The error type a rank's worker reports when torchrun (or the CLI) stopped it by a signal.
pub const RANK_STOPPED: &str = "RankStopped";

/// How one rank ended, from its own events and the run's end.
fn rank_status(p: &Source, exit: &Exit) -> RunStatus {
    let error_type = p
        .done
        .as_ref()
        .and_then(|(_, e)| e.as_ref())
        .and_then(|e| e.get("type"))
        .and_then(serde_json::Value::as_str);
    match (&p.done, exit) {
        (Some((s, _)), _) if s == "ok" => RunStatus::Ok,
        (_, Exit::Timeout) => RunStatus::Timeout,
        (_, Exit::Stopped(Stop::Interrupt)) => RunStatus::Interrupted,
        (_, Exit::Stopped(Stop::Terminate(_))) => RunStatus::Terminated,
        (Some(_), _) if error_type == Some(RANK_STOPPED) => RunStatus::Terminated,
        (Some(_), _) => RunStatus::Failed,
        (None, _) => RunStatus::Crashed,
    }
}

/// Gathers the ranks' sources (in connection order) into the node's result.
pub(crate) fn combine(
    sources: Vec<Source>,
    torchrun: &Torchrun,
    trial: &Trial,
    side: &DriverSide,
    ended: &Ended,
) -> Result<TrialOutcome, StartError> {
    let run = &ended.run;
    let stopped = run.stopped();
    let tail = run.stderr_said();
    if sources.iter().all(|p| p.pid.is_none()) && stopped.is_none() {
        return Ok(TrialOutcome::Unavailable {
            reason: format!(
                "torchrun (`{} -m torch.distributed.run`) started no rank that reached iteragpu ({}){tail}; it needs PyTorch in that interpreter (choose one with --python)",
                trial.python.display(),
                run.exit
            ),
        });
    }
    if stopped.is_none()
        && let Some(p) = sources.iter().find(|p| p.unavailable.is_some())
    {
        return Ok(TrialOutcome::Unavailable {
            reason: format!(
                "rank {}: {}",
                p.rank.as_ref().map_or("?".into(), |r| r.rank.to_string()),
                p.unavailable.clone().unwrap_or_default()
            ),
        });
    }
    // The rank whose channel closed first among those that failed is the cause.
    let closed_at = |k: usize| {
        run.closed
            .iter()
            .position(|c| *c == k)
            .unwrap_or(usize::MAX)
    };
    let mut statuses: Vec<RunStatus> = sources.iter().map(|p| rank_status(p, &run.exit)).collect();
    // torchrun itself killed by a signal (not by this CLI): its ranks ended because it died, and
    // no rank failed first.
    let launcher_died = match run.exit {
        Exit::Signal(signal) if stopped.is_none() => Some(signal),
        _ => None,
    };
    if launcher_died.is_some() {
        for status in statuses.iter_mut() {
            if *status == RunStatus::Crashed {
                *status = RunStatus::Terminated;
            }
        }
    }
    let cause = (0..sources.len())
        .filter(|k| matches!(statuses[*k], RunStatus::Failed | RunStatus::Crashed))
        .min_by_key(|k| (closed_at(*k), sources[*k].done_order.unwrap_or(usize::MAX)));
    // A rank that ended without a word after the cause was stopped because of it (torchrun's
    // SIGTERM, or the CLI's SIGKILL of a rank blocked in a collective).
    if let Some(c) = cause {
        for (k, status) in statuses.iter_mut().enumerate() {
            if k != c && *status == RunStatus::Crashed && closed_at(k) > closed_at(c) {
                *status = RunStatus::Terminated;
            }
        }
    }
    let cause_rank = cause.and_then(|k| sources[k].rank.as_ref().map(|r| r.rank));
    let reported = sources.iter().filter(|p| p.rank.is_some()).count() as u64;
    let exit_codes = torchrun_exit_codes(&run.stderr_tail);
    let run_id = sources
        .iter()
        .find_map(|p| p.rank.as_ref().and_then(|r| r.run_id.clone()));
    let mut results: Vec<(RankResult, MeasureResult)> = Vec::new();
    let origin = Origin::of(trial);
    for (k, p) in sources.into_iter().enumerate() {
        let Some(hello) = p.rank.clone() else {
            continue;
        };
        let status = statuses[k];
        let mut r = build(p, status, stopped, &origin, side, ended);
        if status == RunStatus::Crashed
            && let Some(f) = &mut r.failure
            && f.message.is_none()
        {
            f.message = Some(match exit_codes.get(&hello.rank) {
                Some(code) => format!(
                    "the rank's worker ended without reporting its end; torchrun's summary: exitcode {code}{}",
                    if *code < 0 {
                        format!(" (killed by signal {})", -code)
                    } else {
                        String::new()
                    }
                ),
                None => "the rank's worker ended without reporting its end (killed, or its process died)".into(),
            });
        }
        let after_cause = cause.is_some_and(|c| c != k && closed_at(k) > closed_at(c));
        let stopped_because = match (status, cause_rank) {
            (RunStatus::Terminated, Some(c)) if c != hello.rank => Some(format!(
                "rank {c} failed first; torchrun stops every rank when one ends"
            )),
            (RunStatus::Failed | RunStatus::Crashed, Some(c)) if after_cause => Some(format!(
                "rank {c} failed first; this rank's own end followed it (a collective lost its peer, or torchrun stopped it)"
            )),
            (RunStatus::Interrupted | RunStatus::Terminated | RunStatus::Timeout, _)
                if stopped.is_some() || run.exit == Exit::Timeout =>
            {
                // The signal the CLI received, whatever torchrun passed on to the rank.
                Some(match stopped {
                    Some(signal) => format!(
                        "the run was stopped by {} (received by iteragpu; torchrun passed it on to every rank)",
                        signal.name()
                    ),
                    None => format!("the run was stopped ({})", run.exit),
                })
            }
            (RunStatus::Terminated, None) if launcher_died.is_some() => Some(format!(
                "torchrun itself was killed by signal {}: its ranks ended with it",
                launcher_died.unwrap_or_default()
            )),
            _ => None,
        };
        results.push((
            RankResult {
                rank: hello.rank,
                local_rank: hello.local_rank,
                node_rank: hello.node_rank,
                host: hello.host.clone(),
                device: hello.device.clone(),
                pid: r.worker.pid,
                status,
                stopped_because,
                phases: r.phases.clone(),
                failure: r.failure.clone(),
                oom_snapshots: r.oom_snapshots.clone(),
                notes: r.notes.clone(),
            },
            r,
        ));
    }
    results.sort_by_key(|(rank, _)| rank.rank);
    let ranks: Vec<RankResult> = results.iter().map(|(r, _)| r.clone()).collect();
    let (highest, imbalance) = spread(&ranks);
    let shown = highest.or(cause_rank).or(results.first().map(|r| r.0.rank));
    let Some(k) = results
        .iter()
        .position(|(rank, _)| Some(rank.rank) == shown)
    else {
        return Ok(TrialOutcome::Unavailable {
            reason: format!("no rank reported under torchrun ({}){tail}", run.exit),
        });
    };
    let mut top = results[k].1.clone();
    let overall = match (&run.exit, cause) {
        (Exit::Timeout, _) => RunStatus::Timeout,
        (Exit::Stopped(Stop::Interrupt), _) => RunStatus::Interrupted,
        (Exit::Stopped(Stop::Terminate(_)), _) => RunStatus::Terminated,
        (_, Some(c)) => statuses[c],
        _ if reported < torchrun.nproc_per_node => RunStatus::Crashed,
        _ if results.iter().all(|(r, _)| r.status == RunStatus::Ok) => RunStatus::Ok,
        _ => RunStatus::Crashed,
    };
    top.status = overall;
    top.failure = match cause_rank {
        Some(c) => results
            .iter()
            .find(|(r, _)| r.rank == c)
            .and_then(|(_, r)| r.failure.clone()),
        None if overall.is_ok() => None,
        None => top.failure.clone(),
    };
    if let Some(signal) = launcher_died
        && cause.is_none()
    {
        top.status = RunStatus::Crashed;
        let message = format!(
            "torchrun itself (pid {}) was killed by signal {signal}: no rank failed first, its ranks ended with it",
            run.pid
        );
        match &mut top.failure {
            Some(f) => {
                f.message = Some(message);
                f.rank = None;
            }
            None => {
                top.failure = Some(crate::schema::measure::Failure {
                    phase: top.phases.last().map(|p| p.name.clone()),
                    error_type: Some("LauncherKilled".into()),
                    message: Some(message),
                    out_of_memory: false,
                    rank: None,
                    post_mortem: None,
                    caution:
                        "a partial peak before a failure is not the memory need of a complete run"
                            .into(),
                })
            }
        }
    }
    if reported < torchrun.nproc_per_node {
        top.notes.push(format!(
            "{reported} of the {} ranks of this node reported; the others never reached iteragpu (torchrun's output: {})",
            torchrun.nproc_per_node,
            run.stderr_tail.join(" | ")
        ));
    }
    top.notes.push(format!(
        "the phases above are rank {}'s (the highest peak reserved on this node); each rank's are in `distributed.ranks`, read on its own device and never added to another's",
        results[k].0.rank
    ));
    top.worker = run.info(None);
    top.distributed = Some(Distributed {
        launcher: "torchrun (python -m torch.distributed.run)".into(),
        torchrun: torchrun.clone(),
        run_id,
        world_size: torchrun.world_size(),
        highest_peak_rank: highest,
        imbalance,
        torchrun_exit: run.exit.to_string(),
        ranks: results.into_iter().map(|(r, _)| r).collect(),
    });
    Ok(TrialOutcome::Measured(Box::new(top)))
}

/// Each failed rank's exit code from torchrun's summary on stderr (`rank : 1 (local_rank: 1)` then
/// `exitcode : -9 (pid: 2087)`): the only place a rank killed before its last word is explained.
fn torchrun_exit_codes(lines: &[String]) -> std::collections::BTreeMap<u64, i64> {
    let mut out = std::collections::BTreeMap::new();
    let mut rank: Option<u64> = None;
    for line in lines {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key.trim() {
            "rank" => rank = value.split_whitespace().next().and_then(|r| r.parse().ok()),
            "exitcode" => {
                if let (Some(r), Some(code)) = (
                    rank.take(),
                    value.split_whitespace().next().and_then(|c| c.parse().ok()),
                ) {
                    out.insert(r, code);
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torchrun_summary_gives_each_failed_rank_its_exit_code() {
        let summary = "Failures:\n[1]:\n  time      : 2026-11-30_06:44:18\n  host      : localhost\n  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 8696)\n  error_file: <N/A>\nRoot Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n  exitcode  : 2 (pid: 8695)";
        let lines: Vec<String> = summary.lines().map(String::from).collect();
        let codes = torchrun_exit_codes(&lines);
        assert_eq!(codes.get(&1), Some(&-9));
        assert_eq!(codes.get(&0), Some(&2));
        assert_eq!(codes.len(), 2);
    }
}
