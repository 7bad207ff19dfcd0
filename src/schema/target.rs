//! The card a prediction is for, and what no tensor shows there: the libraries' workspaces and the
//! memory a process holds outside PyTorch's allocator (CUDA context). Each figure says whether it
//! was measured (and where) or is assumed.

use serde::{Deserialize, Serialize};

use crate::cards::{self, Card, UnknownCard};

/// H200, torch 2.11.0+cu130: `memory_reserved` 2 MiB right after CUDA initialisation while NVML
/// showed 641,728,512 bytes for the process (docs/measurements/h200-2026-11-29.md).
pub const H200_CONTEXT_BYTES: u64 = 641_728_512;
/// The same reading with `backend:cudaMallocAsync`.
pub const H200_CONTEXT_ASYNC_BYTES: u64 = 746_586_112;
/// H200, torch 2.11: 34,603,008 bytes stayed allocated from the first matmul on, held by no
/// tensor: cuBLAS's workspace (32 MiB on sm90: `:4096:8`) and cuBLASLt's (1 MiB).
pub const SM90_WORKSPACES: [(u64, &str); 2] = [
    (33_554_432, "cuBLAS workspace"),
    (1_048_576, "cuBLASLt workspace"),
];
/// PyTorch's default cuBLAS workspace before sm90 (`:4096:2:16:8` = 8,519,680 bytes) and
/// cuBLASLt's 1 MiB: from PyTorch's defaults, not measured by this project.
pub const PRE_SM90_WORKSPACES: [(u64, &str); 2] = [
    (8_519_680, "cuBLAS workspace"),
    (1_048_576, "cuBLASLt workspace"),
];

/// What the predicting worker is told about the card.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Target {
    pub name: String,
    /// Compute capability (major, minor): decides bf16 support, SDPA backends, workspaces.
    pub capability: (u32, u32),
    /// `get_device_properties().total_memory` as the script will see it.
    pub total_memory: u64,
    /// Where `total_memory` comes from.
    pub total_memory_source: String,
    /// Memory outside PyTorch's allocator (CUDA context, libraries), added for the driver's view.
    pub context_bytes: u64,
    pub context_source: String,
    /// Allocated through the caching allocator on a thread's first BLAS call, never freed.
    pub workspaces: Vec<(u64, String)>,
    pub workspaces_source: String,
    /// `native`, `expandable_segments` or `cudaMallocAsync`.
    pub allocator_backend: String,
    pub cudnn_version: Option<u64>,
}

/// The catalog's H200, the default target.
pub const DEFAULT_CARD: &str = "H200";

/// Why there is no target: the card is unknown, not a CUDA card, or the device cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error(transparent)]
    UnknownCard(#[from] UnknownCard),
    #[error("{name} is a {vendor} card: predictions run for CUDA devices only")]
    NotCuda { name: String, vendor: String },
    /// The interpreter could not report its environment.
    #[error(transparent)]
    Probe(#[from] crate::environment::ProbeError),
    #[error(
        "--device {device}: {reason}; predict for a card of the catalog with --card NAME instead"
    )]
    NoDevice { device: String, reason: String },
    #[error("PyTorch did not report {device}'s {property}")]
    Unreported {
        device: String,
        property: &'static str,
    },
}

impl Target {
    /// A card of the catalog; `Err` for a card predictions cannot target (not CUDA, or no
    /// compute capability known).
    pub fn for_card(card: &Card, allocator_backend: &str) -> Result<Target, TargetError> {
        let Some(capability) = card.compute_capability() else {
            return Err(TargetError::NotCuda {
                name: card.name.clone(),
                vendor: card.vendor.to_string(),
            });
        };
        let (total, _) = card.device_capacity();
        let measured_h200 = card.name.starts_with("H200");
        // One H200 reading per backend, said measured only on an H200.
        let asynchronous = allocator_backend == "cudaMallocAsync";
        let context_bytes = if asynchronous {
            H200_CONTEXT_ASYNC_BYTES
        } else {
            H200_CONTEXT_BYTES
        };
        let context_source = match (measured_h200, asynchronous) {
            (true, true) => "measured on an H200 with torch 2.11 (cudaMallocAsync)".to_string(),
            (true, false) => "measured on an H200 with torch 2.11".to_string(),
            (false, _) => format!(
                "assumed: the H200's reading (torch 2.11{}); not measured on {}",
                if asynchronous {
                    ", cudaMallocAsync"
                } else {
                    ""
                },
                card.name
            ),
        };
        let (workspaces, workspaces_source) = if capability.0 >= 9 {
            (
                SM90_WORKSPACES
                    .iter()
                    .map(|(b, w)| (*b, w.to_string()))
                    .collect(),
                if measured_h200 {
                    "measured on an H200 with torch 2.11: 34,603,008 bytes from the first matmul on (split into cuBLAS 32 MiB and cuBLASLt 1 MiB by PyTorch's defaults)".to_string()
                } else {
                    format!(
                        "assumed: the H200's reading for sm{}{} (torch 2.11); not measured on {}",
                        capability.0, capability.1, card.name
                    )
                },
            )
        } else {
            (
                PRE_SM90_WORKSPACES.iter().map(|(b, w)| (*b, w.to_string())).collect(),
                "assumed: PyTorch's default cuBLAS workspace before sm90 (:4096:2:16:8) and 1 MiB for cuBLASLt; not measured".to_string(),
            )
        };
        Ok(Target {
            name: card.name.clone(),
            capability,
            total_memory: total.get(),
            total_memory_source: card.capacity_words(),
            context_bytes,
            context_source,
            workspaces,
            workspaces_source,
            allocator_backend: allocator_backend.to_string(),
            cudnn_version: None,
        })
    }

    /// The target named on the command line, or the catalog's H200.
    pub fn named(name: Option<&str>, allocator_backend: &str) -> Result<Target, TargetError> {
        let card = cards::find(name.unwrap_or(DEFAULT_CARD))?;
        Target::for_card(&card, allocator_backend)
    }
}

impl Target {
    /// The card of a device of this machine, as its PyTorch declares it (the catalog's figures
    /// for what no tensor shows when the card is in it, the H200's otherwise, said so).
    pub fn of_device(
        python: &std::path::Path,
        device: &str,
        backend: &str,
        stop: Option<&crate::signals::StopRequest>,
    ) -> Result<Target, TargetError> {
        let env = crate::environment::probe(
            python,
            &[device.to_string()],
            crate::environment::PROBE_TIMEOUT,
            stop,
        )?;
        let Some(props) = env.device(device).filter(|_| env.can_measure) else {
            return Err(TargetError::NoDevice {
                device: device.to_string(),
                reason: env
                    .reason
                    .clone()
                    .unwrap_or_else(|| "this machine has no such device".into()),
            });
        };
        let unreported = |property| TargetError::Unreported {
            device: device.to_string(),
            property,
        };
        let name = props
            .get("name")
            .and_then(|v| v.as_str())
            .unwrap_or("this device")
            .to_string();
        let capability = props
            .get("capability")
            .and_then(|c| Some((c.get(0)?.as_u64()? as u32, c.get(1)?.as_u64()? as u32)))
            .ok_or_else(|| unreported("compute capability"))?;
        let total = props
            .get("total_memory")
            .and_then(|v| v.as_u64())
            .ok_or_else(|| unreported("total_memory"))?;
        let mut target = match cards::identify(&name) {
            Some(card) => Target::for_card(&card, backend)?,
            None => Target::named(None, backend)?,
        };
        target.name = format!("{name} ({device} of this machine)");
        target.capability = capability;
        target.total_memory = total;
        target.total_memory_source = "PyTorch's total_memory, read on this machine".into();
        Ok(target)
    }
}

/// The allocator backend the settings of this process's environment ask for
/// (`PYTORCH_CUDA_ALLOC_CONF` / `PYTORCH_ALLOC_CONF`).
pub fn allocator_backend_from_env() -> String {
    let values: Vec<String> = ["PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .collect();
    allocator_backend_of(&values)
}

/// The allocator backend a list of allocator settings asks for.
pub fn allocator_backend_of(values: &[String]) -> String {
    let conf = values.join(",").replace(' ', "");
    if conf.contains("cudaMallocAsync") {
        "cudaMallocAsync".into()
    } else if conf.contains("expandable_segments:True") || conf.contains("expandable_segments:true")
    {
        "expandable_segments".into()
    } else {
        "native".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_h200_is_measured_and_others_are_said_assumed() {
        let h200 = Target::named(None, "native").unwrap();
        assert_eq!(h200.capability, (9, 0));
        assert_eq!(h200.total_memory, 150_109_880_320);
        assert_eq!(h200.context_bytes, 641_728_512);
        assert_eq!(h200.workspaces.iter().map(|w| w.0).sum::<u64>(), 34_603_008);
        assert!(h200.workspaces_source.starts_with("measured"));
        let a100 = Target::named(Some("A100 80GB"), "native").unwrap();
        assert_eq!(a100.capability, (8, 0));
        assert!(a100.context_source.starts_with("assumed"));
        assert!(a100.workspaces_source.starts_with("assumed"));
        assert!(
            Target::named(Some("MI300X"), "native")
                .unwrap_err()
                .to_string()
                .contains("CUDA devices only")
        );
    }
}
