//! The GPUs of one node a sweep spreads its trials over (`sweep --gpus LIST|all`), and what each
//! one is, read once before any trial: NVML's index, name and UUID where NVML sees the GPU, and
//! PyTorch's name, UUID and `total_memory` from one probe started with `CUDA_VISIBLE_DEVICES` set
//! to exactly those GPUs (PyTorch then lists them in that order). Each trial's worker then sees
//! only its own GPU, as `cuda:0`.

use std::path::Path;
use std::str::FromStr;

use anyhow::{Result, bail};
use serde_json::Value;

use crate::environment::nvml::{self, GpuInfo};
use crate::schema::series::{Devices, Gpu};
use crate::signals::StopRequest;

/// `--gpus`: every GPU NVML lists, or the ones named (indices, or UUIDs as `CUDA_VISIBLE_DEVICES`
/// takes them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gpus {
    All,
    List(Vec<String>),
}

impl FromStr for Gpus {
    type Err = String;

    fn from_str(s: &str) -> Result<Gpus, String> {
        if s.trim() == "all" {
            return Ok(Gpus::All);
        }
        let mut list: Vec<String> = Vec::new();
        for entry in s.split(',').map(str::trim) {
            let uuid = ["GPU-", "MIG-"]
                .iter()
                .any(|p| entry.len() > p.len() && entry.starts_with(p));
            if entry.parse::<u32>().is_err() && !uuid {
                return Err(format!(
                    "{entry:?} is not a GPU: give indices (0,1,2,3), UUIDs (GPU-…) or all"
                ));
            }
            if list.iter().any(|e| e == entry) {
                return Err(format!(
                    "GPU {entry} is listed twice: a GPU runs one trial at a time"
                ));
            }
            list.push(entry.to_string());
        }
        Ok(Gpus::List(list))
    }
}

/// The GPUs `choice` names, each with its identity; refused when one does not exist here.
/// PyTorch missing or broken is not refused here: the first trial says it, as without `--gpus`.
pub fn resolve(choice: &Gpus, python: &Path, stop: &'static StopRequest) -> Result<Vec<Gpu>> {
    let (view, nvml_reason) = match nvml::open() {
        Ok(n) => (Some(nvml::read(&n)), None),
        Err(reason) => (None, Some(reason)),
    };
    let entries: Vec<String> = match (choice, &view) {
        (Gpus::List(list), _) => list.clone(),
        (Gpus::All, None) => bail!(
            "--gpus all takes every GPU NVML lists, and NVML is not available here ({}): list the GPUs instead, e.g. --gpus 0,1",
            nvml_reason.unwrap_or_default()
        ),
        (Gpus::All, Some(v)) if v.gpus.is_empty() => bail!("--gpus all: NVML lists no GPU"),
        (Gpus::All, Some(v)) => v
            .gpus
            .iter()
            .map(|g| g.uuid.clone().unwrap_or_else(|| g.index.to_string()))
            .collect(),
    };
    let joined = entries.join(",");
    let probe = crate::environment::probe_seeing(
        python,
        &[],
        Some(&joined),
        crate::environment::PROBE_TIMEOUT,
        Some(stop),
    )
    .ok();
    let torch = probe.as_ref().and_then(|p| p.torch.as_ref());
    let seen: Vec<Value> = torch
        .and_then(|t| t.get("devices")?.as_array().cloned())
        .unwrap_or_default();
    if torch.is_some_and(|t| t["cuda_available"] == true) && seen.len() < entries.len() {
        bail!(
            "--gpus {joined}: PyTorch sees {} of these {} GPUs (CUDA_VISIBLE_DEVICES={joined}); CUDA ignores an entry that names no GPU and every entry after it",
            seen.len(),
            entries.len()
        );
    }
    let mut gpus = Vec::with_capacity(entries.len());
    for (k, entry) in entries.iter().enumerate() {
        let declared = seen.get(k);
        let torch_uuid = declared.and_then(|d| d.get("uuid")?.as_str());
        let found = view
            .as_ref()
            .and_then(|v| nvml_of(&v.gpus, entry, torch_uuid));
        if let (Some(v), None) = (&view, found) {
            bail!(
                "--gpus {entry}: NVML lists no such GPU here (it lists {})",
                v.gpus
                    .iter()
                    .map(|g| match &g.uuid {
                        Some(u) => format!("{} ({u})", g.index),
                        None => g.index.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let text = |key: &str| declared.and_then(|d| Some(d.get(key)?.as_str()?.to_string()));
        gpus.push(Gpu {
            visible: entry.clone(),
            nvml_index: found.map(|g| g.index),
            name: found.and_then(|g| g.name.clone()).or_else(|| text("name")),
            uuid: found.and_then(|g| g.uuid.clone()).or_else(|| text("uuid")),
            total_memory: declared.and_then(|d| d.get("total_memory")?.as_u64()),
            source: if found.is_some() { "NVML" } else { "PyTorch" }.into(),
        });
    }
    Ok(gpus)
}

/// NVML's GPU for a `CUDA_VISIBLE_DEVICES` entry: by PyTorch's UUID of it when known (CUDA's
/// order can differ from NVML's), else by index or UUID prefix as CUDA reads the entry.
fn nvml_of<'a>(gpus: &'a [GpuInfo], entry: &str, torch_uuid: Option<&str>) -> Option<&'a GpuInfo> {
    let bare = |u: &str| u.trim_start_matches("GPU-").to_string();
    if let Some(t) = torch_uuid
        && let Some(g) = gpus
            .iter()
            .find(|g| g.uuid.as_deref().is_some_and(|u| bare(u) == bare(t)))
    {
        return Some(g);
    }
    gpus.iter().find(|g| match entry.parse::<u32>() {
        Ok(i) => g.index == i,
        Err(_) => g.uuid.as_deref().is_some_and(|u| u.starts_with(entry)),
    })
}

/// Where the trials run: `4 × NVIDIA H200`, or each model's count when they differ, which is
/// refused unless `allow_mixed` (a peak measured on one model is not another's: its CUDA context
/// and libraries' workspaces differ, and so may its capacity).
pub fn devices(gpus: Vec<Gpu>, allow_mixed: bool) -> Result<Devices> {
    let mut models: Vec<(String, usize)> = Vec::new();
    for g in &gpus {
        let name = g.name.clone().unwrap_or_else(|| "an unnamed GPU".into());
        match models.iter_mut().find(|(m, _)| *m == name) {
            Some((_, n)) => *n += 1,
            None => models.push((name, 1)),
        }
    }
    let said = models
        .iter()
        .map(|(m, n)| format!("{n} × {m}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mixed = models.len() > 1;
    if mixed && !allow_mixed {
        bail!(
            "--gpus names GPUs of different models ({said}): a peak measured on one is not another's (its CUDA context, its libraries' workspaces and its capacity differ); list GPUs of one model, or give --allow-mixed to run on them anyway, said in the series"
        );
    }
    Ok(Devices {
        gpus,
        models: said,
        mixed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(visible: &str, name: &str) -> Gpu {
        Gpu {
            visible: visible.into(),
            nvml_index: visible.parse().ok(),
            name: Some(name.into()),
            uuid: None,
            total_memory: None,
            source: "NVML".into(),
        }
    }

    #[test]
    fn lists_indices_uuids_or_all_and_refuses_the_rest() {
        assert_eq!("all".parse::<Gpus>(), Ok(Gpus::All));
        assert_eq!(
            "0, 1,GPU-5a1b".parse::<Gpus>(),
            Ok(Gpus::List(vec!["0".into(), "1".into(), "GPU-5a1b".into()]))
        );
        assert!("0,0".parse::<Gpus>().unwrap_err().contains("twice"));
        assert!("cuda:1".parse::<Gpus>().unwrap_err().contains("not a GPU"));
        assert!("".parse::<Gpus>().is_err());
    }

    #[test]
    fn one_model_is_counted_and_different_models_are_refused_unless_allowed() {
        let same = devices(
            vec![gpu("0", "NVIDIA H200"), gpu("1", "NVIDIA H200")],
            false,
        )
        .unwrap();
        assert_eq!(
            (same.models.as_str(), same.mixed),
            ("2 × NVIDIA H200", false)
        );
        let two = || {
            vec![
                gpu("0", "NVIDIA H200"),
                gpu("1", "NVIDIA A100"),
                gpu("2", "NVIDIA H200"),
            ]
        };
        let refused = devices(two(), false).unwrap_err().to_string();
        assert!(
            refused.contains("2 × NVIDIA H200, 1 × NVIDIA A100"),
            "{refused}"
        );
        assert!(refused.contains("--allow-mixed"), "{refused}");
        let mixed = devices(two(), true).unwrap();
        assert!(mixed.mixed);
    }

    #[test]
    fn nvml_is_matched_by_pytorch_uuid_before_the_index() {
        let info = |index: u32, uuid: &str| GpuInfo {
            index,
            name: None,
            uuid: Some(uuid.into()),
            total_bytes: None,
            used_bytes: None,
            free_bytes: None,
            compute_capability: None,
            processes: Vec::new(),
        };
        let gpus = [info(0, "GPU-aaaa"), info(1, "GPU-bbbb")];
        // CUDA's device 0 is NVML's 1 (another order).
        assert_eq!(nvml_of(&gpus, "0", Some("bbbb")).unwrap().index, 1);
        assert_eq!(nvml_of(&gpus, "0", None).unwrap().index, 0);
        assert_eq!(nvml_of(&gpus, "GPU-bb", None).unwrap().index, 1);
        assert!(nvml_of(&gpus, "7", None).is_none());
    }
}
