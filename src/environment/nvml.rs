//! The driver's view through NVML, loaded at run time (`libnvidia-ml.so.1`): no driver means a
//! clear reason, never a crash. The CLI samples it while a worker runs (see `measure::sampler`).

use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;
use serde::{Deserialize, Serialize};

/// One GPU as NVML declares it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// NVML index (may differ from PyTorch's index when CUDA_VISIBLE_DEVICES reorders devices).
    pub index: u32,
    pub name: Option<String>,
    pub uuid: Option<String>,
    /// `nvmlDeviceGetMemoryInfo().total`: not the vendor's label, not PyTorch's total_memory.
    pub total_bytes: Option<u64>,
    pub used_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
    pub compute_capability: Option<String>,
    /// Every process with a compute context on this GPU and its memory.
    pub processes: Vec<GpuProcess>,
}

/// A process using a GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    pub name: Option<String>,
    /// `null` when the driver does not report it (e.g. some containers, WDDM).
    pub used_bytes: Option<u64>,
}

/// The driver and its GPUs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverView {
    pub driver_version: Option<String>,
    /// CUDA version the driver supports, e.g. `12.8`.
    pub cuda_driver_version: Option<String>,
    pub gpus: Vec<GpuInfo>,
}

/// Opens NVML, or explains why it cannot be opened.
pub fn open() -> Result<Nvml, String> {
    Nvml::init().map_err(|e| match e {
        nvml_wrapper::error::NvmlError::LibloadingError(_)
        | nvml_wrapper::error::NvmlError::LibraryNotFound => {
            "no NVIDIA driver found (libnvidia-ml.so.1 could not be loaded)".to_string()
        }
        nvml_wrapper::error::NvmlError::DriverNotLoaded => {
            "no NVIDIA driver found (the driver is not loaded)".to_string()
        }
        other => format!("NVML could not be initialised: {other}"),
    })
}

/// Reads the driver's view of every GPU.
pub fn read(nvml: &Nvml) -> DriverView {
    let count = nvml.device_count().unwrap_or(0);
    let gpus = (0..count)
        .map(|index| {
            let Ok(device) = nvml.device_by_index(index) else {
                return GpuInfo {
                    index,
                    name: None,
                    uuid: None,
                    total_bytes: None,
                    used_bytes: None,
                    free_bytes: None,
                    compute_capability: None,
                    processes: Vec::new(),
                };
            };
            let memory = device.memory_info().ok();
            let processes = device
                .running_compute_processes()
                .unwrap_or_default()
                .into_iter()
                .map(|p| GpuProcess {
                    pid: p.pid,
                    name: nvml.sys_process_name(p.pid, 256).ok(),
                    used_bytes: match p.used_gpu_memory {
                        UsedGpuMemory::Used(b) => Some(b),
                        UsedGpuMemory::Unavailable => None,
                    },
                })
                .collect();
            GpuInfo {
                index,
                name: device.name().ok(),
                uuid: device.uuid().ok(),
                total_bytes: memory.as_ref().map(|m| m.total),
                used_bytes: memory.as_ref().map(|m| m.used),
                free_bytes: memory.as_ref().map(|m| m.free),
                compute_capability: device
                    .cuda_compute_capability()
                    .ok()
                    .map(|c| format!("{}.{}", c.major, c.minor)),
                processes,
            }
        })
        .collect();
    DriverView {
        driver_version: nvml.sys_driver_version().ok(),
        cuda_driver_version: nvml.sys_cuda_driver_version().ok().map(|v| {
            format!(
                "{}.{}",
                nvml_wrapper::cuda_driver_version_major(v),
                nvml_wrapper::cuda_driver_version_minor(v)
            )
        }),
        gpus,
    }
}

/// One sample: device used bytes and the given process's used bytes on that device.
pub fn sample(nvml: &Nvml, index: u32, pid: u32) -> (Option<u64>, Option<u64>) {
    let Ok(device) = nvml.device_by_index(index) else {
        return (None, None);
    };
    let used = device.memory_info().ok().map(|m| m.used);
    let process = device.running_compute_processes().ok().and_then(|procs| {
        procs
            .into_iter()
            .find(|p| p.pid == pid)
            .and_then(|p| match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => Some(b),
                UsedGpuMemory::Unavailable => None,
            })
    });
    (used, process)
}
