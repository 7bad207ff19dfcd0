//! The driver's view beside PyTorch's: which NVML device a CUDA device is, and what NVML saw of
//! the worker process during each phase (peaks, the level at the end, and the memory outside
//! PyTorch's caching allocator).

use crate::environment::DriverView;
use crate::measure::sampler::Sampler;
use crate::schema::events::{DriverPhase, PhaseRecord};

/// CUDA device → NVML index, honouring CUDA_VISIBLE_DEVICES (indices or UUIDs): the worker's own
/// (`visible`, a sweep's GPU) when it is given one, else the one it inherits from ours.
pub fn nvml_indices(
    devices: &[String],
    visible: Option<&str>,
    driver: Option<&DriverView>,
) -> Vec<Option<u32>> {
    let visible = visible
        .map(str::to_string)
        .or_else(|| std::env::var("CUDA_VISIBLE_DEVICES").ok());
    devices
        .iter()
        .map(|d| {
            let index = crate::environment::device_index(d).unwrap_or(0);
            match &visible {
                None => Some(index as u32),
                Some(list) => {
                    let entry = list.split(',').nth(index)?.trim().to_string();
                    if let Ok(n) = entry.parse::<u32>() {
                        return Some(n);
                    }
                    driver?
                        .gpus
                        .iter()
                        .find(|g| g.uuid.as_deref().is_some_and(|u| u.starts_with(&entry)))
                        .map(|g| g.index)
                }
            }
        })
        .collect()
}

/// The driver's view of one phase, per device; null with a reason where NVML could not see.
pub(crate) fn driver_phase(
    sampler: Option<&Sampler>,
    record: &PhaseRecord,
    devices: &[String],
    indices: &[Option<u32>],
    driver_reason: &Option<String>,
) -> Vec<DriverPhase> {
    let Some(s) = sampler else {
        let reason = driver_reason.clone().unwrap_or_else(|| {
            "a CUDA device could not be matched to an NVML device (CUDA_VISIBLE_DEVICES)".into()
        });
        return devices
            .iter()
            .zip(indices)
            .map(|(d, i)| DriverPhase {
                device: d.clone(),
                nvml_index: *i,
                samples: 0,
                peak_device_used_bytes: None,
                peak_process_used_bytes: None,
                process_used_at_end_bytes: None,
                outside_allocator_at_end_bytes: None,
                reason: Some(reason.clone()),
            })
            .collect();
    };
    let (peaks, now) = s.leave(record.index);
    devices
        .iter()
        .enumerate()
        .map(|(k, d)| {
            let peak = peaks.get(k).copied().unwrap_or_default();
            let at_end = now.get(k).copied().flatten();
            let reserved = record.devices.get(k).and_then(|r| r.end_reserved_bytes);
            let outside = match (at_end, reserved) {
                (Some(a), Some(r)) if a >= r => Some(a - r),
                _ => None,
            };
            DriverPhase {
                device: d.clone(),
                nvml_index: s.indices().get(k).copied(),
                samples: peak.samples,
                peak_device_used_bytes: peak.device_used,
                peak_process_used_bytes: peak.process_used,
                process_used_at_end_bytes: at_end,
                outside_allocator_at_end_bytes: outside,
                reason: match (at_end, reserved, outside) {
                    (None, _, _) => Some("NVML did not report this process's memory on this device".into()),
                    (Some(_), None, _) => Some("end_reserved_bytes was not read".into()),
                    (Some(_), Some(_), None) => Some("the driver's reading was below reserved: levels changed between the two readings".into()),
                    _ => None,
                },
            }
        })
        .collect()
}
