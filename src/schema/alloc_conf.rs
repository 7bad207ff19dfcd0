//! The caching allocator's setting a worker starts with (`--alloc-conf`, and the A/B of
//! `sweep --vary alloc_conf=default,expandable_segments`). It is an environment variable read
//! once when CUDA starts, so each setting needs its own fresh process — which every trial is.

use serde::{Deserialize, Serialize};

/// The key of the allocator setting in a trial's values (a sweep over `alloc-conf`).
pub const ALLOC_CONF: &str = "alloc-conf";

/// The variables PyTorch reads its allocator settings from (the newest first); a trial with a
/// setting clears all of them, so nothing the user exported mixes into the comparison.
pub const VARIABLES: [&str; 3] = [
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_HIP_ALLOC_CONF",
];

/// One allocator setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::Display, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum AllocConf {
    /// PyTorch's defaults: no variable set.
    Default,
    /// `expandable_segments:True`: segments grow in place instead of new ones being cut.
    ExpandableSegments,
    /// `backend:cudaMallocAsync`: CUDA's own pool allocator instead of PyTorch's.
    #[serde(rename = "cudaMallocAsync")]
    #[strum(serialize = "cudaMallocAsync")]
    CudaMallocAsync,
}

impl AllocConf {
    /// `default`, `expandable_segments` or `cudaMallocAsync` (the derived name; the method
    /// stays for its callers).
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// The value of `PYTORCH_CUDA_ALLOC_CONF` the worker gets (`None`: unset).
    pub fn value(self) -> Option<&'static str> {
        match self {
            AllocConf::Default => None,
            AllocConf::ExpandableSegments => Some("expandable_segments:True"),
            AllocConf::CudaMallocAsync => Some("backend:cudaMallocAsync"),
        }
    }

    /// The allocator model a prediction uses for this setting.
    pub fn backend(self) -> &'static str {
        match self {
            AllocConf::Default => "native",
            AllocConf::ExpandableSegments => "expandable_segments",
            AllocConf::CudaMallocAsync => "cudaMallocAsync",
        }
    }

    /// The worker's environment for this setting: every allocator variable cleared, then the one
    /// PyTorch has read since 1.x set (`PYTORCH_CUDA_ALLOC_CONF`; the newer `PYTORCH_ALLOC_CONF`
    /// would be ignored by older releases).
    pub fn environment(self) -> Vec<(String, Option<String>)> {
        let mut env: Vec<(String, Option<String>)> =
            VARIABLES.iter().map(|v| (v.to_string(), None)).collect();
        if let Some(value) = self.value() {
            env.push(("PYTORCH_CUDA_ALLOC_CONF".into(), Some(value.into())));
        }
        env
    }

    /// `default`, `expandable_segments` (or `expandable_segments:True`), `cudaMallocAsync` (or
    /// `backend:cudaMallocAsync`); anything else gets the list.
    pub fn parse(text: &str) -> Result<AllocConf, String> {
        let t = text.trim();
        let key = t.to_ascii_lowercase();
        let found = match key.as_str() {
            "default" | "native" => Some(AllocConf::Default),
            "expandable_segments" | "expandable_segments:true" | "expandable-segments" => {
                Some(AllocConf::ExpandableSegments)
            }
            "cudamallocasync" | "backend:cudamallocasync" => Some(AllocConf::CudaMallocAsync),
            _ => None,
        };
        found.ok_or_else(|| {
            format!(
                "`{t}` is not an allocator setting iteragpu can set; choose one of {} (other settings: export PYTORCH_CUDA_ALLOC_CONF yourself, the result records it)",
                <AllocConf as strum::VariantArray>::VARIANTS
                    .iter()
                    .map(|a| a.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_files() {
        for a in <AllocConf as strum::VariantArray>::VARIANTS {
            assert_eq!(serde_json::to_value(a).unwrap(), a.name());
        }
    }

    #[test]
    fn names_parse_back_and_set_exactly_one_variable() {
        for &a in <AllocConf as strum::VariantArray>::VARIANTS {
            assert_eq!(AllocConf::parse(a.name()), Ok(a));
            let env = a.environment();
            for v in VARIABLES {
                assert!(env.contains(&(v.to_string(), None)), "{v} is cleared first");
            }
            let set: Vec<_> = env.iter().filter(|(_, v)| v.is_some()).collect();
            assert_eq!(set.len(), usize::from(a.value().is_some()));
        }
        assert_eq!(
            AllocConf::parse("expandable_segments:True"),
            Ok(AllocConf::ExpandableSegments)
        );
        assert_eq!(
            AllocConf::parse("backend:cudaMallocAsync"),
            Ok(AllocConf::CudaMallocAsync)
        );
        let e = AllocConf::parse("max_split_size_mb:128").unwrap_err();
        assert!(e.contains("max_split_size_mb:128") && e.contains("expandable_segments"));
    }
}
