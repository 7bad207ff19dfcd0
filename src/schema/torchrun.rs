//! Several ranks under torchrun (`python -m torch.distributed.run`, PyTorch's own launcher; we
//! write none): the command line, the environment it must not inherit, and the run's identity.
//!
//! Each rank is a fresh `iteragpu.worker`. torchrun gives its ranks only file descriptors 0–2 and
//! shares its stdout between them (lines interleave), so the events travel over one Unix socket
//! the CLI listens on, one connection per rank (`ITERAGPU_EVENTS_SOCKET`). Ranks run in their own
//! sessions, out of reach of the CLI's process group: each asks to die with torchrun
//! (`PR_SET_PDEATHSIG`) and reports its pid, which the CLI kills as a group at the end.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// The environment variable that names the CLI's event socket for the ranks.
pub const EVENTS_SOCKET: &str = "ITERAGPU_EVENTS_SOCKET";

/// How the ranks of this node meet the others.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Rendezvous {
    /// One node: a c10d store on a free local port (`--standalone`).
    Standalone,
    /// Several nodes: every node's CLI is given the same endpoint and id.
    C10d { endpoint: String, id: String },
}

/// One node's share of a torchrun job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Torchrun {
    pub nproc_per_node: u64,
    pub nnodes: u64,
    pub node_rank: u64,
    pub rendezvous: Rendezvous,
}

impl Torchrun {
    pub fn world_size(&self) -> u64 {
        self.nproc_per_node * self.nnodes
    }

    /// torchrun's arguments before the worker's module, every option explicit (a `PET_*`
    /// variable in the environment would otherwise change it silently).
    pub fn args(&self, log_dir: &Path) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "-m".into(),
            "torch.distributed.run".into(),
            "--nnodes".into(),
            self.nnodes.to_string(),
            "--nproc-per-node".into(),
            self.nproc_per_node.to_string(),
            "--node-rank".into(),
            self.node_rank.to_string(),
            "--max-restarts".into(),
            "0".into(),
            "--monitor-interval".into(),
            "0.1".into(),
            // Without a log folder torchrun leaves a /tmp/torchelastic_* folder behind each run.
            "--log-dir".into(),
            log_dir.display().to_string(),
        ];
        match &self.rendezvous {
            Rendezvous::Standalone => args.push("--standalone".into()),
            Rendezvous::C10d { endpoint, id } => args.extend([
                "--rdzv-backend".into(),
                "c10d".into(),
                "--rdzv-endpoint".into(),
                endpoint.clone(),
                "--rdzv-id".into(),
                id.clone(),
            ]),
        }
        args
    }

    /// Variables removed from torchrun's environment: its options (`PET_*`), a previous job's
    /// (`TORCHELASTIC_*`, the ranks' own variables) and the interpreter override.
    pub fn scrubbed(vars: impl Iterator<Item = String>) -> Vec<String> {
        const EXACT: [&str; 9] = [
            "PYTHON_EXEC",
            "RANK",
            "LOCAL_RANK",
            "WORLD_SIZE",
            "LOCAL_WORLD_SIZE",
            "GROUP_RANK",
            "ROLE_RANK",
            "MASTER_ADDR",
            "MASTER_PORT",
        ];
        vars.filter(|k| {
            k.starts_with("PET_") || k.starts_with("TORCHELASTIC_") || EXACT.contains(&k.as_str())
        })
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_is_explicit_and_the_environment_is_scrubbed() {
        let t = Torchrun {
            nproc_per_node: 2,
            nnodes: 1,
            node_rank: 0,
            rendezvous: Rendezvous::Standalone,
        };
        let args = t.args(Path::new("/tmp/logs"));
        let joined = args.join(" ");
        assert!(joined.starts_with("-m torch.distributed.run --nnodes 1 --nproc-per-node 2"));
        assert!(joined.contains("--max-restarts 0") && joined.ends_with("--standalone"));
        assert!(joined.contains("--log-dir /tmp/logs"));
        let multi = Torchrun {
            nnodes: 2,
            node_rank: 1,
            rendezvous: Rendezvous::C10d {
                endpoint: "10.0.0.1:29400".into(),
                id: "job7".into(),
            },
            ..t
        };
        assert_eq!(multi.world_size(), 4);
        assert!(
            multi
                .args(Path::new("/l"))
                .join(" ")
                .ends_with("--rdzv-backend c10d --rdzv-endpoint 10.0.0.1:29400 --rdzv-id job7")
        );
        let removed = Torchrun::scrubbed(
            [
                "PET_NNODES",
                "PATH",
                "TORCHELASTIC_RUN_ID",
                "RANK",
                "PYTHON_EXEC",
                "HOME",
            ]
            .map(String::from)
            .into_iter(),
        );
        assert_eq!(
            removed,
            ["PET_NNODES", "TORCHELASTIC_RUN_ID", "RANK", "PYTHON_EXEC"]
        );
    }
}
