//! The terminal report of `iteragpu environment`.

use std::fmt::Write as _;

use super::Environment;
use crate::output::table::{Column, Table};
use crate::units::Bytes;

fn bytes(v: Option<u64>) -> String {
    v.map_or("unknown".into(), |b| {
        format!("{} bytes ({})", Bytes(b).grouped(), Bytes(b).both())
    })
}

/// The human report: the driver's view, the interpreter's, and whether measure can run.
pub fn report(env: &Environment, devices: &[String]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "iteragpu environment\n\nGPUs as the driver declares them (NVML):"
    );
    match (&env.driver, &env.driver_reason) {
        (Some(d), _) => {
            let _ = writeln!(
                o,
                "  driver {}, CUDA driver {}",
                d.driver_version.as_deref().unwrap_or("unknown"),
                d.cuda_driver_version.as_deref().unwrap_or("unknown")
            );
            if d.gpus.is_empty() {
                let _ = writeln!(o, "  no GPU listed by the driver");
            }
            for g in &d.gpus {
                let _ = writeln!(
                    o,
                    "  [{}] {} ({}), compute capability {}",
                    g.index,
                    g.name.as_deref().unwrap_or("unknown"),
                    g.uuid.as_deref().unwrap_or("no UUID"),
                    g.compute_capability.as_deref().unwrap_or("unknown"),
                );
                let mut memory = Table::new(vec![Column::left(""), Column::left("")]).indent(6);
                memory.row(["total".into(), bytes(g.total_bytes)]);
                memory.row(["used".into(), bytes(g.used_bytes)]);
                memory.row(["free".into(), bytes(g.free_bytes)]);
                o.push_str(&memory.terminal());
                if g.processes.is_empty() {
                    let _ = writeln!(o, "      no other process on this GPU");
                }
                for p in &g.processes {
                    let _ = writeln!(
                        o,
                        "      process {} {}: {} (another user of the card changes what fits)",
                        p.pid,
                        p.name.as_deref().unwrap_or(""),
                        bytes(p.used_bytes)
                    );
                }
            }
        }
        (None, reason) => {
            let _ = writeln!(
                o,
                "  {}",
                reason.as_deref().unwrap_or("no NVIDIA driver found")
            );
        }
    }
    let _ = writeln!(o, "\nPython and PyTorch (as the interpreter reports them):");
    let verdict = match (&env.python, &env.python_reason) {
        (Some(p), _) => {
            let _ = writeln!(
                o,
                "  python {} {}",
                p.python["executable"].as_str().unwrap_or("?"),
                p.python["version"].as_str().unwrap_or("?")
            );
            match &p.torch {
                Some(t) => {
                    let s = |k: &str| t.get(k).and_then(|v| v.as_str()).map(String::from);
                    let _ = writeln!(o, "  torch {}", s("version").unwrap_or_else(|| "?".into()));
                    let _ = writeln!(
                        o,
                        "  backend {} (torch.version.cuda = {}, torch.version.hip = {})",
                        s("backend").unwrap_or_else(|| "none (CPU-only build)".into()),
                        s("cuda_version").unwrap_or_else(|| "None".into()),
                        s("hip_version").unwrap_or_else(|| "None".into())
                    );
                    let _ = writeln!(
                        o,
                        "  cuDNN {}",
                        t.get("cudnn_version")
                            .map_or("unknown".into(), |v| v.to_string())
                    );
                    let _ = writeln!(
                        o,
                        "  torch.cuda.is_available() = {}, device_count = {}",
                        t["cuda_available"], t["device_count"]
                    );
                    for d in t["devices"].as_array().into_iter().flatten() {
                        let _ = writeln!(
                            o,
                            "  cuda:{} {}: total_memory {}",
                            d["index"],
                            d["name"].as_str().unwrap_or("?"),
                            bytes(d["total_memory"].as_u64())
                        );
                    }
                    let _ = writeln!(
                        o,
                        "  allocator backend {}",
                        s("allocator_backend").unwrap_or_else(|| "unknown".into())
                    );
                }
                None => {
                    let _ = writeln!(o, "  torch: not importable");
                }
            }
            let _ = writeln!(o, "  settings:");
            if let Some(map) = p.settings.as_object() {
                for (k, v) in map {
                    let _ = writeln!(o, "    {k} = {}", v.as_str().unwrap_or("(unset)"));
                }
            }
            let _ = writeln!(
                o,
                "  transformers {}",
                p.transformers_version.as_deref().unwrap_or("not installed")
            );
            if p.can_measure {
                format!("yes, measure can run on {}", devices.join(", "))
            } else {
                format!("no: {}", p.reason.as_deref().unwrap_or("unknown reason"))
            }
        }
        (None, reason) => {
            let reason = reason
                .as_deref()
                .unwrap_or("the interpreter did not answer");
            let _ = writeln!(o, "  {reason}");
            format!("no: {reason}")
        }
    };
    let _ = writeln!(o, "\ncan measure run here? {verdict}");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GPU's memory is a small table: its figures start in one column, as they always did.
    #[test]
    fn a_gpus_memory_lines_up() {
        let env: Environment = serde_json::from_value(serde_json::json!({
            "driver": {"driver_version": "580", "cuda_driver_version": "13.0", "gpus": [{
                "index": 0, "name": "NVIDIA H200", "uuid": "GPU-1",
                "total_bytes": 150754820096u64, "used_bytes": 612368384, "free_bytes": null,
                "compute_capability": "9.0", "processes": []
            }]},
            "driver_reason": null, "python": null, "python_reason": "not probed"
        }))
        .unwrap();
        let text = report(&env, &[]);
        assert!(
            text.contains(
                "  [0] NVIDIA H200 (GPU-1), compute capability 9.0\n      total 150,754,820,096 bytes ("
            ),
            "{text}"
        );
        assert!(text.contains("\n      used  612,368,384 bytes ("), "{text}");
        assert!(text.contains("\n      free  unknown\n"), "{text}");
    }
}
