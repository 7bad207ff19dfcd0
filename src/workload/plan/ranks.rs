//! The ranks a plan runs: torchrun's options as given (`--nproc-per-node`, `--nnodes`, the
//! rendezvous) or as a launcher's command line resolved them (`-- torchrun …`, `accelerate
//! launch …`, `deepspeed …`): split from `plan.rs`.

use anyhow::{Result, bail};

use super::*;

/// The torchrun job that runs a command's ranks for real, validated as `--nproc-per-node` and
/// the multi-node options are (`launch::node_options`).
pub(super) fn launched_torchrun(
    args: &RunOptions,
    l: &crate::workload::launch::Launched,
) -> Result<Option<Torchrun>> {
    match crate::workload::launch::node_options(args, l).map_err(anyhow::Error::msg)? {
        None => torchrun(args),
        Some(node) => torchrun(&node).map_err(|e| {
            anyhow::anyhow!(
                "-- {}: its ranks run under torchrun on this node: {e}",
                args.script_args.join(" ")
            )
        }),
    }
}

/// `--nproc-per-node` and the multi-node options, validated.
pub(super) fn torchrun(args: &RunOptions) -> Result<Option<Torchrun>> {
    let Some(nproc_per_node) = args.nproc_per_node else {
        return Ok(None);
    };
    let nnodes = args.nnodes.unwrap_or(1);
    let node_rank = args.node_rank.unwrap_or(0);
    if node_rank >= nnodes {
        bail!(
            "--node-rank {node_rank} with --nnodes {nnodes}: a node's rank goes from 0 to {}",
            nnodes - 1
        );
    }
    let rendezvous = match (nnodes, &args.rdzv_endpoint, &args.rdzv_id) {
        (1, None, None) => Rendezvous::Standalone,
        (1, _, _) => bail!(
            "--rdzv-endpoint and --rdzv-id are for several nodes; with --nnodes 1 the ranks meet on this machine (drop them)"
        ),
        (_, Some(endpoint), Some(id)) => {
            let port = endpoint
                .rsplit_once(':')
                .map(|(host, port)| (host, port.parse::<u16>()));
            if !matches!(port, Some((host, Ok(_))) if !host.is_empty()) {
                bail!("--rdzv-endpoint {endpoint}: write HOST:PORT (e.g. node0.cluster:29400)");
            }
            if id.is_empty()
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                bail!(
                    "--rdzv-id `{id}`: use letters, digits, `-`, `_` or `.` (the same id on every node)"
                );
            }
            Rendezvous::C10d {
                endpoint: endpoint.clone(),
                id: id.clone(),
            }
        }
        (n, _, _) => bail!(
            "--nnodes {n} needs --rdzv-endpoint HOST:PORT and --rdzv-id ID, the same on every node"
        ),
    };
    if args.timeline {
        bail!(
            "--timeline with --nproc-per-node is not supported yet: record one rank's timeline with a single-process run of the same workload"
        );
    }
    Ok(Some(Torchrun {
        nproc_per_node,
        nnodes,
        node_rank,
        rendezvous,
    }))
}
