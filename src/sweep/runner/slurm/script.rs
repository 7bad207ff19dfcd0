//! The batch script of an array and the allocation it asks for. A task runs the iteragpu binary
//! on its cell (`iteragpu slurm-task ARRAY_DIR`); a torchrun trial over several nodes asks for the
//! nodes (`--nodes`, one Slurm task per node) and starts one iteragpu per node with `srun`, each
//! told its node rank (`SLURM_NODEID`) and the rendezvous on the allocation's first node (from
//! `scontrol show hostnames`); each node's iteragpu then runs torchrun and measures its ranks as a
//! local run does.

use std::path::Path;

use crate::schema::torchrun::Torchrun;

/// The environment variable a task reads the rendezvous endpoint of a multi-node trial from.
pub const RDZV_ENV: &str = "ITERAGPU_SLURM_RDZV_ENDPOINT";

/// The rendezvous a multi-node plan holds until its task replaces it with the first node's.
pub const RDZV_STANDIN: &str = "first-node-of-the-allocation:29400";

/// The port of the rendezvous on the first node.
const RDZV_PORT: u16 = 29400;

/// sbatch's allocation arguments for a trial: the nodes of a multi-node torchrun job.
pub fn allocation(torchrun: Option<&Torchrun>) -> Vec<String> {
    match torchrun {
        Some(t) if t.nnodes > 1 => vec![
            format!("--nodes={}", t.nnodes),
            "--ntasks-per-node=1".into(),
        ],
        _ => Vec::new(),
    }
}

/// The script every task of the array runs.
pub fn job_script(executable: &Path, array_dir: &Path, torchrun: Option<&Torchrun>) -> String {
    let exe = quote(&executable.display().to_string());
    let dir = quote(&array_dir.display().to_string());
    let mut s = String::from(
        "#!/bin/bash\n# Written by `iteragpu sweep --executor slurm`: each task of the array runs one trial\n# (the cell cells.json names at its index) and writes task-$SLURM_ARRAY_TASK_ID.outcome.json.\n",
    );
    match torchrun {
        Some(t) if t.nnodes > 1 => {
            s.push_str(&format!(
                "# A torchrun trial over {} nodes: one iteragpu per node, the rendezvous on the first.\nfirst=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\nexport {RDZV_ENV}=\"$first:{RDZV_PORT}\"\nexec srun --nodes={} --ntasks-per-node=1 --kill-on-bad-exit=1 {exe} slurm-task {dir}\n",
                t.nnodes, t.nnodes
            ));
        }
        _ => s.push_str(&format!("exec {exe} slurm-task {dir}\n")),
    }
    s
}

/// `text` as one word for bash.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::torchrun::Rendezvous;

    fn torchrun(nnodes: u64) -> Torchrun {
        Torchrun {
            nproc_per_node: 4,
            nnodes,
            node_rank: 0,
            rendezvous: Rendezvous::Standalone,
        }
    }

    #[test]
    fn a_task_runs_the_binary_on_its_array_folder() {
        let s = job_script(
            Path::new("/opt/bin/iteragpu"),
            Path::new("/data/it's.slurm/array-1"),
            None,
        );
        assert!(s.starts_with("#!/bin/bash\n"));
        assert!(
            s.ends_with("exec '/opt/bin/iteragpu' slurm-task '/data/it'\\''s.slurm/array-1'\n"),
            "{s}"
        );
        assert!(allocation(None).is_empty());
        assert!(
            allocation(Some(&torchrun(1))).is_empty(),
            "one node: the local path"
        );
    }

    #[test]
    fn several_nodes_start_one_iteragpu_per_node_with_the_rendezvous_on_the_first() {
        let s = job_script(
            Path::new("/b/iteragpu"),
            Path::new("/d/a"),
            Some(&torchrun(2)),
        );
        assert!(s.contains("first=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)"));
        assert!(s.contains(&format!("export {RDZV_ENV}=\"$first:29400\"")));
        assert!(s.contains("exec srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 '/b/iteragpu' slurm-task '/d/a'"));
        assert_eq!(
            allocation(Some(&torchrun(2))),
            ["--nodes=2", "--ntasks-per-node=1"]
        );
    }
}
