//! The versions a prediction rests on: the PyTorch releases `predict` supports (one range, checked
//! as soon as the predicting worker reports its environment), and the comparison of the
//! prediction's torch, transformers, peft and CUDA with those of the GPU machine (`--like`).
//!
//! What is known of the effect of versions (docs/measurements/h200-2026-11-29.md,
//! "Versions"): the same scripts predicted with torch 2.15 / transformers 5.24 and with the H200's
//! own torch 2.11 / transformers 5.17 differed by up to ~3% per phase and ~4% on peak reserved;
//! with the machine's versions the predictions matched its readings. That is what was observed,
//! never a correction to apply.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A PyTorch `major.minor` release.
pub type Release = (u32, u32);

/// The torch releases `predict` supports, both ends included: the torch row of the tested-versions
/// table (docs/tested-versions.md, the one place the range is declared; CI installs its two ends).
pub fn supported_torch() -> TorchRange {
    match crate::environment::tested::torch_range() {
        Some((min, max)) => TorchRange { min, max },
        // No torch row: nothing is supported (environment::tested's tests keep the row there).
        None => TorchRange {
            min: (u32::MAX, u32::MAX),
            max: (0, 0),
        },
    }
}

/// An inclusive range of torch releases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TorchRange {
    pub min: Release,
    pub max: Release,
}

impl TorchRange {
    pub fn contains(self, release: Release) -> bool {
        self.min <= release && release <= self.max
    }
}

impl std::fmt::Display for TorchRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}.{} to {}.{}",
            self.min.0, self.min.1, self.max.0, self.max.1
        )
    }
}

/// The `major.minor` of a torch version string: `2.15.0+cu132`, `2.6.0`, `2.11.0a0+git1234`,
/// `2.16.0.dev20270101` (the minor's digits end at the first character that is not one).
pub fn torch_release(version: &str) -> Option<Release> {
    let mut parts = version.trim().splitn(3, '.');
    let major = parts.next()?.parse().ok()?;
    let minor: String = parts
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((major, minor.parse().ok()?))
}

/// The test suite's fake torch, exempt from the range.
pub fn is_fake(version: &str) -> bool {
    version.contains("fake")
}

/// Why a prediction with this torch is refused, or `None` when it is supported (or the test
/// suite's fake torch). `None` for the version when torch did not say one.
pub fn refuse_torch(version: Option<&str>) -> Option<String> {
    let fix = "install one of those in the interpreter given with --python";
    match version {
        Some(v) if is_fake(v) => None,
        Some(v) => match torch_release(v) {
            Some(release) if supported_torch().contains(release) => None,
            Some(_) => Some(format!(
                "torch {v} is not supported by predict (supported: {}); {fix}",
                supported_torch()
            )),
            None => Some(format!(
                "torch's version `{v}` cannot be read as a release, so predict cannot tell whether it supports it (supported: {}); {fix}",
                supported_torch()
            )),
        },
        None => Some(format!(
            "torch did not report its version (torch.__version__), so predict cannot tell whether it supports it (supported: {}); {fix}",
            supported_torch()
        )),
    }
}

/// What was observed when the versions differed; said as an observation, never a correction.
pub const OBSERVED: &str = "predictions made with torch 2.15/transformers 5.24 against an H200 running torch 2.11/transformers 5.17 differed from its readings by up to ~3% per phase and ~4% on peak reserved (observed on the scripts compared, not a correction to apply; with the machine's own versions they matched to within a few hundredths of a percent)";

/// The note of a prediction made without `--like`.
pub fn unchecked_note(torch: Option<&str>, transformers: Option<&str>) -> String {
    format!(
        "predicted with torch {}, transformers {}: a GPU run with other versions can differ by a few percent (seen: up to ~3% per phase, ~4% on peak reserved); give --like RESULT.json or ENV.json to compare",
        torch.unwrap_or("(unknown)"),
        transformers.unwrap_or("(not installed)")
    )
}

/// The four versions compared, in the order they are said.
pub const COMPARED: [&str; 4] = ["torch", "transformers", "peft", "cuda"];

/// torch, transformers, peft and the CUDA torch was built with (`hip X` for ROCm), on one side.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Versions {
    pub torch: Option<String>,
    pub transformers: Option<String>,
    pub peft: Option<String>,
    pub cuda: Option<String>,
}

impl Versions {
    pub fn of(env: &crate::environment::PythonEnvironment) -> Versions {
        Versions {
            torch: env.torch_str("version").map(String::from),
            transformers: env.transformers_version.clone(),
            peft: env.peft_version.clone(),
            cuda: cuda_version(env),
        }
    }

    fn get(&self, name: &str) -> Option<&str> {
        match name {
            "torch" => self.torch.as_deref(),
            "transformers" => self.transformers.as_deref(),
            "peft" => self.peft.as_deref(),
            _ => self.cuda.as_deref(),
        }
    }
}

/// The CUDA version PyTorch was built with, or `hip X` for a ROCm build.
pub fn cuda_version(env: &crate::environment::PythonEnvironment) -> Option<String> {
    env.torch_str("cuda_version")
        .map(String::from)
        .or_else(|| env.torch_str("hip_version").map(|v| format!("hip {v}")))
}

/// One version on both sides.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionPair {
    /// The prediction's (the interpreter given to `predict`).
    pub prediction: Option<String>,
    /// The `--like` file's (the GPU machine's).
    pub target: Option<String>,
}

impl VersionPair {
    /// Whether the two differ: torch by its release (the `+cu…` tag is the CUDA build, compared
    /// as `cuda`), the others exactly; null on both sides is no difference.
    pub fn differs(&self, name: &str) -> bool {
        let key = |v: &Option<String>| {
            v.as_deref().map(|v| match name {
                "torch" => v.split('+').next().unwrap_or(v).trim().to_string(),
                _ => v.trim().to_string(),
            })
        };
        key(&self.prediction) != key(&self.target)
    }
}

/// The `--like` comparison stored in the prediction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Like {
    /// The file given to `--like`, as given.
    pub file: String,
    /// SHA-256 of its bytes.
    #[serde(default)]
    pub sha256: Option<String>,
    /// `measurement` (iteragpu.measure/1) or `environment` (`iteragpu environment --json`).
    pub kind: String,
    /// The GPU the file names (its first device), when it names one.
    #[serde(default)]
    pub device: Option<String>,
    /// `torch`, `transformers`, `peft`, `cuda` (the CUDA torch was built with): the prediction's
    /// and the file's.
    pub versions: BTreeMap<String, VersionPair>,
    /// The names of the versions that differ (keys of `versions`), in the order torch,
    /// transformers, peft, cuda.
    pub differences: Vec<String>,
}

impl Like {
    pub fn compare(
        file: String,
        sha256: Option<String>,
        kind: &str,
        device: Option<String>,
        prediction: &Versions,
        target: &Versions,
    ) -> Like {
        let mut versions = BTreeMap::new();
        let mut differences = Vec::new();
        for name in COMPARED {
            let pair = VersionPair {
                prediction: prediction.get(name).map(String::from),
                target: target.get(name).map(String::from),
            };
            if pair.differs(name) {
                differences.push(name.to_string());
            }
            versions.insert(name.to_string(), pair);
        }
        Like {
            file,
            sha256,
            kind: kind.into(),
            device,
            versions,
            differences,
        }
    }

    /// `torch 2.15.0 here vs 2.11.0 there`, for one compared name.
    pub fn difference(&self, name: &str) -> String {
        let side = |v: Option<&Option<String>>| {
            v.and_then(|v| v.as_deref())
                .map_or_else(|| "none".to_string(), String::from)
        };
        let pair = self.versions.get(name);
        format!(
            "{} {} here vs {} there",
            label(name),
            side(pair.map(|p| &p.prediction)),
            side(pair.map(|p| &p.target))
        )
    }

    /// `torch 2.11.0, transformers 5.17.0, CUDA 13.0` (what both sides have, when they agree).
    pub fn agreed(&self) -> String {
        COMPARED
            .iter()
            .filter_map(|name| {
                let v = self.versions.get(*name)?.prediction.as_deref()?;
                Some(format!("{} {v}", label(name)))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// One warning per difference, with what is known of its effect.
    pub fn warnings(&self) -> Vec<String> {
        self.differences
            .iter()
            .map(|name| {
                let effect = match name.as_str() {
                    "torch" => format!(
                        "PyTorch's choices by device (SDPA backend, foreach paths, autocast casts) can move between releases; {OBSERVED}"
                    ),
                    "transformers" => format!(
                        "the model code can move between releases; {OBSERVED}"
                    ),
                    "peft" => "the adapters' code can change what is allocated; no difference was measured for peft alone".into(),
                    _ => "PyTorch's kernels and the memory outside its allocator (CUDA context, libraries) can change with the CUDA build; no difference was measured for CUDA alone".into(),
                };
                format!(
                    "{} (in {}): {effect}",
                    self.difference(name),
                    self.file
                )
            })
            .collect()
    }
}

fn label(name: &str) -> &str {
    match name {
        "cuda" => "CUDA",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_read_from_every_form_of_version() {
        for (text, release) in [
            ("2.15.0+cu132", Some((2, 15))),
            ("2.6.0", Some((2, 6))),
            ("2.11.0a0+git1234abc", Some((2, 11))),
            ("2.16.0.dev20270101+cu132", Some((2, 16))),
            ("2.5.1", Some((2, 5))),
            ("2.7", Some((2, 7))),
            ("10.0.0", Some((10, 0))),
            ("2", None),
            ("two.six", None),
            ("", None),
            ("2.x", None),
        ] {
            assert_eq!(torch_release(text), release, "{text}");
        }
    }

    #[test]
    fn the_range_includes_both_ends_and_nothing_else() {
        assert_eq!(supported_torch().to_string(), "2.6 to 2.15");
        for ok in [
            "2.6.0",
            "2.6.0+cpu",
            "2.10.1",
            "2.11.0a0+git",
            "2.15.0+cu132",
        ] {
            assert_eq!(refuse_torch(Some(ok)), None, "{ok}");
        }
        for refused in ["2.5.1", "1.13.1+cu117", "2.16.0", "3.0.0"] {
            let why = refuse_torch(Some(refused)).unwrap();
            assert!(
                why.starts_with(&format!(
                    "torch {refused} is not supported by predict (supported: 2.6 to 2.15)"
                )),
                "{why}"
            );
            assert!(why.ends_with("--python"), "{why}");
        }
        assert_eq!(
            refuse_torch(Some("2.5.1")).unwrap(),
            "torch 2.5.1 is not supported by predict (supported: 2.6 to 2.15); install one of those in the interpreter given with --python"
        );
        // The test suite's fake torch is exempt; a version that cannot be read is refused.
        assert_eq!(refuse_torch(Some("0.0.0+fake")), None);
        assert!(refuse_torch(Some("nightly")).unwrap().contains("`nightly`"));
        assert!(refuse_torch(None).unwrap().contains("did not report"));
    }

    fn versions(torch: &str, transformers: Option<&str>, cuda: &str) -> Versions {
        Versions {
            torch: Some(torch.into()),
            transformers: transformers.map(String::from),
            peft: Some("0.18.0".into()),
            cuda: Some(cuda.into()),
        }
    }

    #[test]
    fn differences_are_named_and_explained() {
        let here = versions("2.15.0+cu132", Some("5.24.0"), "13.2");
        let there = versions("2.11.0+cu130", Some("5.17.0"), "13.0");
        let like = Like::compare(
            "h200.json".into(),
            None,
            "measurement",
            Some("NVIDIA H200".into()),
            &here,
            &there,
        );
        assert_eq!(like.differences, ["torch", "transformers", "cuda"]);
        assert_eq!(
            like.difference("torch"),
            "torch 2.15.0+cu132 here vs 2.11.0+cu130 there"
        );
        assert_eq!(like.difference("cuda"), "CUDA 13.2 here vs 13.0 there");
        let warnings = like.warnings();
        assert_eq!(warnings.len(), 3);
        assert!(
            warnings[0]
                .starts_with("torch 2.15.0+cu132 here vs 2.11.0+cu130 there (in h200.json): ")
        );
        assert!(warnings[0].contains("up to ~3% per phase and ~4% on peak reserved"));
        assert!(warnings[0].contains("not a correction"));
        assert!(warnings[1].contains("model code"));
        // Serialized as documented.
        let json = serde_json::to_value(&like).unwrap();
        assert_eq!(json["versions"]["torch"]["prediction"], "2.15.0+cu132");
        assert_eq!(json["versions"]["transformers"]["target"], "5.17.0");
        assert_eq!(json["differences"][0], "torch");
    }

    #[test]
    fn the_same_release_with_another_cuda_build_differs_only_by_cuda() {
        let like = Like::compare(
            "env.json".into(),
            None,
            "environment",
            None,
            &versions("2.11.0+cu130", Some("5.17.0"), "13.0"),
            &versions("2.11.0+cu128", Some("5.17.0"), "12.8"),
        );
        assert_eq!(like.differences, ["cuda"]);
        let same = Like::compare(
            "env.json".into(),
            None,
            "environment",
            None,
            &versions("2.11.0", Some("5.17.0"), "13.0"),
            &versions("2.11.0", Some("5.17.0"), "13.0"),
        );
        assert!(same.differences.is_empty());
        assert_eq!(
            same.agreed(),
            "torch 2.11.0, transformers 5.17.0, peft 0.18.0, CUDA 13.0"
        );
        // Installed on one side only is a difference; on neither, none.
        let missing = Like::compare(
            "env.json".into(),
            None,
            "environment",
            None,
            &versions("2.11.0", Some("5.17.0"), "13.0"),
            &versions("2.11.0", None, "13.0"),
        );
        assert_eq!(missing.differences, ["transformers"]);
        assert_eq!(
            missing.difference("transformers"),
            "transformers 5.17.0 here vs none there"
        );
    }

    #[test]
    fn the_note_without_like_names_the_versions() {
        assert_eq!(
            unchecked_note(Some("2.15.0+cu132"), Some("5.24.0")),
            "predicted with torch 2.15.0+cu132, transformers 5.24.0: a GPU run with other versions can differ by a few percent (seen: up to ~3% per phase, ~4% on peak reserved); give --like RESULT.json or ENV.json to compare"
        );
    }
}
