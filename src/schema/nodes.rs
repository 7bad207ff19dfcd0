//! Several nodes' result files of one multi-node torchrun job, read back as one result; and the
//! spread between ranks that both a node's own result and the merged one report.

use std::path::{Path, PathBuf};

use crate::schema::measure::{Imbalance, MeasureResult, RankResult};

/// The rank with the highest peak reserved, and the spread between ranks.
pub(crate) fn spread(ranks: &[RankResult]) -> (Option<u64>, Option<Imbalance>) {
    let peaks: Vec<(u64, u64)> = ranks
        .iter()
        .filter_map(|r| Some((r.rank, r.peak_reserved()?)))
        .collect();
    let max = peaks
        .iter()
        .max_by_key(|(r, p)| (*p, std::cmp::Reverse(*r)));
    let min = peaks.iter().min_by_key(|(r, p)| (*p, *r));
    let imbalance = max.zip(min).map(|(max, min)| Imbalance {
        max_peak_reserved_bytes: max.1,
        max_rank: max.0,
        min_peak_reserved_bytes: min.1,
        min_rank: min.0,
        spread_bytes: max.1 - min.1,
    });
    (max.map(|m| m.0), imbalance)
}

/// Why node files are not one multi-node job.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    #[error(
        "{} is not a torchrun run (no `distributed`): only the files of one multi-node job are merged",
        .0.display()
    )]
    NotTorchrun(PathBuf),
    #[error("{} has no run id: its nodes cannot be matched", .0.display())]
    NoRunId(PathBuf),
    #[error(
        "{} belongs to run `{id}` and {} to run `{first}`: files of different runs are never merged",
        .path.display(),
        .first_path.display()
    )]
    OtherRun {
        path: PathBuf,
        id: String,
        first_path: PathBuf,
        first: String,
    },
    #[error(
        "{} and {} are both node {node} of run `{id}`: give each node's file once",
        .other.display(),
        .path.display()
    )]
    NodeTwice {
        other: PathBuf,
        path: PathBuf,
        node: u64,
        id: String,
    },
    #[error(
        "{} and {} do not describe one job: {what}; a run id can be reused by another job (give the files of one job, or --allow-mismatch to merge them anyway with a warning)",
        .first_path.display(),
        .path.display()
    )]
    Mismatch {
        first_path: PathBuf,
        path: PathBuf,
        what: String,
    },
}

/// What makes the node files of "one job" disagree, each named by its field: an empty list
/// means they are consistent. `nodes[0]` is the reference.
fn node_mismatches(nodes: &[(&Path, &MeasureResult)]) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let Some((_, first)) = nodes.first() else {
        return found;
    };
    let Some(d0) = &first.distributed else {
        return found;
    };
    let torch = |r: &MeasureResult| {
        r.environment
            .python
            .as_ref()
            .and_then(|e| e.torch_str("version"))
            .map(String::from)
    };
    let mut ranks_seen: std::collections::BTreeMap<u64, usize> = std::collections::BTreeMap::new();
    for (k, (_, r)) in nodes.iter().enumerate() {
        let Some(d) = &r.distributed else { continue };
        let mut say = |what: String| found.push((k, what));
        if k > 0 {
            if d.world_size != d0.world_size {
                say(format!(
                    "`distributed.world_size` is {} here and {} in the first",
                    d.world_size, d0.world_size
                ));
            }
            if d.torchrun.nnodes != d0.torchrun.nnodes {
                say(format!(
                    "`distributed.torchrun.nnodes` is {} here and {} in the first",
                    d.torchrun.nnodes, d0.torchrun.nnodes
                ));
            }
            if r.identity.workload != first.identity.workload {
                say(format!(
                    "`identity.workload` is `{}` here and `{}` in the first",
                    r.identity.workload, first.identity.workload
                ));
            }
            if r.identity.code_hash != first.identity.code_hash {
                say("`identity.code_hash` differs (other code or other script arguments)".into());
            }
            if r.dimensions != first.dimensions {
                say("`dimensions` differ".into());
            }
            if torch(r) != torch(first) {
                say(format!(
                    "torch is {} here and {} in the first",
                    torch(r).unwrap_or_else(|| "unknown".into()),
                    torch(first).unwrap_or_else(|| "unknown".into())
                ));
            }
        }
        if d.torchrun.node_rank >= d.torchrun.nnodes {
            say(format!(
                "`distributed.torchrun.node_rank` {} is not below nnodes {}",
                d.torchrun.node_rank, d.torchrun.nnodes
            ));
        }
        for rank in &d.ranks {
            if rank.rank >= d0.world_size {
                say(format!(
                    "global rank {} is not below the world size {}",
                    rank.rank, d0.world_size
                ));
            }
            if let Some(other) = ranks_seen.insert(rank.rank, k)
                && other != k
            {
                say(format!("global rank {} appears on two nodes", rank.rank));
            }
        }
    }
    found
}

/// The files of one multi-node job (one per node, the same `run_id`) as one result: every rank of
/// every node side by side, the phases shown of the node whose rank peaked highest. Refuses files
/// of different runs, a node given twice, or a file that is not a torchrun run.
pub fn merge_nodes(
    nodes: &[(&Path, &MeasureResult)],
    allow_mismatch: bool,
) -> Result<MeasureResult, MergeError> {
    let mut seen = std::collections::BTreeMap::new();
    let mut run_id: Option<&str> = None;
    for (path, r) in nodes {
        let Some(d) = &r.distributed else {
            return Err(MergeError::NotTorchrun(path.to_path_buf()));
        };
        let id = d
            .run_id
            .as_deref()
            .ok_or_else(|| MergeError::NoRunId(path.to_path_buf()))?;
        match run_id {
            None => run_id = Some(id),
            Some(first) if first != id => {
                return Err(MergeError::OtherRun {
                    path: path.to_path_buf(),
                    id: id.to_string(),
                    first_path: nodes[0].0.to_path_buf(),
                    first: first.to_string(),
                });
            }
            Some(_) => {}
        }
        if let Some(other) = seen.insert(d.torchrun.node_rank, path) {
            return Err(MergeError::NodeTwice {
                other: other.to_path_buf(),
                path: path.to_path_buf(),
                node: d.torchrun.node_rank,
                id: id.to_string(),
            });
        }
    }
    let mismatches = node_mismatches(nodes);
    if let Some((k, what)) = mismatches.first()
        && !allow_mismatch
    {
        return Err(MergeError::Mismatch {
            first_path: nodes[0].0.to_path_buf(),
            path: nodes[*k].0.to_path_buf(),
            what: what.clone(),
        });
    }
    let mut ranks: Vec<RankResult> = nodes
        .iter()
        .flat_map(|(_, r)| r.distributed.iter().flat_map(|d| d.ranks.iter().cloned()))
        .collect();
    ranks.sort_by_key(|r| r.rank);
    let (highest, imbalance) = spread(&ranks);
    let shown = nodes
        .iter()
        .find(|(_, r)| {
            r.distributed
                .iter()
                .any(|d| d.ranks.iter().any(|k| Some(k.rank) == highest))
        })
        .unwrap_or(&nodes[0])
        .1;
    let mut merged = shown.clone();
    if let Some(bad) = nodes.iter().map(|(_, r)| r).find(|r| !r.status.is_ok()) {
        merged.status = bad.status;
        merged.failure = bad.failure.clone();
    }
    let nnodes = nodes[0]
        .1
        .distributed
        .as_ref()
        .map_or(1, |d| d.torchrun.nnodes);
    let missing = nnodes.saturating_sub(nodes.len() as u64);
    merged.notes.push(format!(
        "merged from {} node file(s) of run `{}`{}",
        nodes.len(),
        run_id.unwrap_or(""),
        if missing > 0 {
            format!("; {missing} node(s) of the job are missing")
        } else {
            String::new()
        }
    ));
    for (k, what) in &mismatches {
        merged.notes.push(format!(
            "WARNING: merged although {} does not match {} (--allow-mismatch): {what}",
            nodes[*k].0.display(),
            nodes[0].0.display()
        ));
    }
    if let Some(d) = &mut merged.distributed {
        d.ranks = ranks;
        d.highest_peak_rank = highest;
        d.imbalance = imbalance;
    }
    Ok(merged)
}
