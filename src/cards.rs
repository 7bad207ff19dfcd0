//! The GPU catalog (data/cards.json, embedded): name, vendor, memory type, the capacity as the
//! vendor labels it and as devices report it where known, with the source of each figure.
//! `render` draws the tables; whether a need fits on one device of each card is `report::need`.

pub mod render;

use serde::{Deserialize, Serialize};

use crate::units::{Bytes, GB};

/// One card of the catalog.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Card {
    pub name: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    pub vendor: String,
    pub memory_type: String,
    /// The vendor's label, e.g. `80 GB`.
    pub label: String,
    /// Total memory one device reports to the driver tools (NVML / rocm-smi), when known.
    pub reported_bytes: Option<u64>,
    /// `torch.cuda.get_device_properties().total_memory`, when iteragpu read it on the card.
    pub torch_total_bytes: Option<u64>,
    /// CUDA's total (`torch.cuda.mem_get_info()[1]`) as public logs printed it, when any did.
    #[serde(default)]
    pub cuda_total: Option<CudaTotal>,
    /// Devices the card appears as (MI250X: two).
    pub devices_per_card: u64,
    /// CUDA compute capability (`9.0`); null for a card that is not a CUDA device.
    #[serde(default)]
    pub compute_capability: Option<String>,
    pub source: String,
}

/// Public readings of CUDA's total for one card: `cudaMemGetInfo`'s total, which
/// `torch.cuda.mem_get_info()[1]` returns and `get_device_properties().total_memory` equals.
/// vLLM sizes its pool from it; PyTorch's out-of-memory message prints it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CudaTotal {
    pub readings: Vec<CudaReading>,
}

/// One reading, kept as printed: `23.58 GiB` (vLLM's `total_gpu_memory`, PyTorch's "total
/// capacity of …": two decimals, so ±0.005 GiB) or `42298834944 bytes` (deviceQuery: exact).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CudaReading {
    pub printed: String,
    /// What printed it.
    pub read_in: String,
    /// Where it was printed (a public issue or pull request).
    pub source: String,
}

/// Half the last printed digit of a `… GiB` figure with two decimals: 0.005 GiB.
pub const GIB_2DP_HALF_STEP: u64 = 5_368_709;

impl CudaReading {
    /// The bytes of the printed figure and how far the true total may lie from it.
    pub fn bytes(&self) -> Option<(u64, u64)> {
        let (number, unit) = self.printed.split_once(' ')?;
        match unit {
            "bytes" => Some((number.parse().ok()?, 0)),
            "GiB" => {
                // Two decimals, read as hundredths to stay exact.
                let (whole, hundredths) = number.split_once('.')?;
                if hundredths.len() != 2 {
                    return None;
                }
                let cents: u64 =
                    whole.parse::<u64>().ok()? * 100 + hundredths.parse::<u64>().ok()?;
                // The nearest byte to the printed figure.
                Some((((cents << 30) + 50) / 100, GIB_2DP_HALF_STEP))
            }
            _ => None,
        }
    }
}

impl CudaTotal {
    /// The lowest reading: what a process can count on under every driver seen.
    pub fn lowest(&self) -> Option<&CudaReading> {
        self.readings
            .iter()
            .filter(|r| r.bytes().is_some())
            .min_by_key(|r| r.bytes().map(|b| b.0))
    }

    /// The lowest and highest printed figures, in bytes.
    pub fn range(&self) -> Option<(u64, u64)> {
        let all: Vec<u64> = self
            .readings
            .iter()
            .filter_map(|r| r.bytes().map(|b| b.0))
            .collect();
        Some((*all.iter().min()?, *all.iter().max()?))
    }

    /// In words: the figure used, its precision, its source, and the range of the others.
    pub fn describe(&self) -> Option<String> {
        let low = self.lowest()?;
        let (_, precision) = low.bytes()?;
        let precision = if precision == 0 {
            "exact".to_string()
        } else {
            "±0.005 GiB as printed".to_string()
        };
        let (min, max) = self.range()?;
        let others = if self.readings.len() > 1 {
            format!(
                "; the lowest of {} public readings, {:.2}–{:.2} GiB across drivers",
                self.readings.len(),
                min as f64 / (1u64 << 30) as f64,
                max as f64 / (1u64 << 30) as f64
            )
        } else {
            String::new()
        };
        Some(format!(
            "{} ({precision}) in {}, {}{others}",
            low.printed, low.read_in, low.source
        ))
    }
}

#[derive(Deserialize)]
struct Catalog {
    cards: Vec<Card>,
}

/// Which figure a capacity comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CapacitySource {
    TorchTotalMemory,
    /// CUDA's total as a public log printed it (the card's `cuda_total`).
    CudaTotalPublic,
    DriverReported,
    VendorLabel,
}

impl CapacitySource {
    /// What the figure is, in words.
    pub fn label(self) -> &'static str {
        match self {
            CapacitySource::TorchTotalMemory => "PyTorch's total_memory",
            CapacitySource::CudaTotalPublic => "CUDA's total as public logs printed it",
            CapacitySource::DriverReported => "as the driver reports it",
            CapacitySource::VendorLabel => "the vendor's label",
        }
    }
}

impl Card {
    /// Capacity of one device: PyTorch's figure read by iteragpu if known, else CUDA's total as
    /// public logs printed it (the lowest reading), else the driver's, else the label read as
    /// decimal GB divided by the devices per card.
    pub fn device_capacity(&self) -> (Bytes, CapacitySource) {
        if let Some(b) = self.torch_total_bytes {
            return (Bytes(b), CapacitySource::TorchTotalMemory);
        }
        if let Some((b, _)) = self.cuda_total.as_ref().and_then(|t| t.lowest()?.bytes()) {
            return (Bytes(b), CapacitySource::CudaTotalPublic);
        }
        if let Some(b) = self.reported_bytes {
            return (Bytes(b), CapacitySource::DriverReported);
        }
        (
            Bytes((self.label_gb() * GB as f64) as u64 / self.devices_per_card.max(1)),
            CapacitySource::VendorLabel,
        )
    }

    /// Which capacity `device_capacity` used, in words; for CUDA's total from public logs, with
    /// the reading's precision and source (`CUDA's total as public logs printed it: 23.56 GiB
    /// (±0.005 GiB as printed) in PyTorch's out-of-memory message, …`).
    pub fn capacity_words(&self) -> String {
        let (_, source) = self.device_capacity();
        match (
            source,
            self.cuda_total.as_ref().and_then(CudaTotal::describe),
        ) {
            (CapacitySource::CudaTotalPublic, Some(how)) => format!("{}: {how}", source.label()),
            _ => source.label().to_string(),
        }
    }

    /// The decimal gigabytes of the vendor's label (`80 GB` → 80), 0 when it has none.
    pub fn label_gb(&self) -> f64 {
        self.label
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0.0)
    }

    /// The compute capability as (major, minor).
    pub fn compute_capability(&self) -> Option<(u32, u32)> {
        let (major, minor) = self.compute_capability.as_deref()?.split_once('.')?;
        Some((major.parse().ok()?, minor.parse().ok()?))
    }

    fn matches(&self, query: &str) -> bool {
        let q = normalized(query);
        normalized(&self.name) == q || self.aliases.iter().any(|a| normalized(a) == q)
    }
}

/// A card's name as it is compared: case, spaces, dashes and underscores ignored.
fn normalized(name: &str) -> String {
    name.to_ascii_lowercase().replace([' ', '-', '_'], "")
}

/// The embedded catalog.
pub fn catalog() -> Vec<Card> {
    let catalog: Catalog = serde_json::from_str(include_str!("../data/cards.json"))
        .expect("data/cards.json is valid (tested)");
    catalog.cards
}

/// A name the catalog does not know (with the names it knows), or one that names several cards
/// (an `A100` is 40 or 80 GB): never resolved silently to one of them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnknownCard {
    #[error("unknown card `{query}`; the catalog has: {}", .known.join(", "))]
    Unknown { query: String, known: Vec<String> },
    #[error(
        "`{query}` names several cards: {}; give one of them (`iteragpu cards` lists their capacities)",
        .choices.join(", ")
    )]
    Ambiguous { query: String, choices: Vec<String> },
}

/// Finds a card by its name or an alias (case, spaces and dashes ignored). A name that only
/// begins several cards' names (`A100`, `V100`, `H100`) is refused with the choices.
pub fn find(query: &str) -> Result<Card, UnknownCard> {
    let cards = catalog();
    if let Some(card) = cards.iter().find(|c| c.matches(query)) {
        return Ok(card.clone());
    }
    let q = normalized(query);
    let family: Vec<String> = cards
        .iter()
        .filter(|c| q.len() >= 2 && normalized(&c.name).starts_with(&q))
        .map(|c| c.name.clone())
        .collect();
    if family.len() >= 2 {
        return Err(UnknownCard::Ambiguous {
            query: query.to_string(),
            choices: family,
        });
    }
    Err(UnknownCard::Unknown {
        query: query.to_string(),
        known: cards.iter().map(|c| c.name.clone()).collect(),
    })
}

/// The catalog card a device name as the driver declares it denotes
/// (`NVIDIA H200`, `NVIDIA A100-SXM4-80GB`, `NVIDIA GeForce RTX 4090`,
/// `AMD Instinct MI300X`), or `None` when the name is not specific enough:
/// an `A100` without its memory size could be either of two cards, and a
/// wrong card would put a wrong capacity in the ledger.
pub fn identify(device_name: &str) -> Option<Card> {
    let mut rest = device_name.trim();
    for prefix in ["NVIDIA ", "GeForce ", "Tesla ", "AMD ", "Instinct "] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    if let Ok(card) = find(rest) {
        return Some(card);
    }
    let tokens: Vec<&str> = rest.split([' ', '-']).filter(|t| !t.is_empty()).collect();
    let model = *tokens.first()?;
    let size = tokens
        .iter()
        .find(|t| t.len() > 2 && t.to_ascii_uppercase().ends_with("GB"));
    if let Some(size) = size {
        return find(&format!("{model}-{size}")).ok();
    }
    let same_model = catalog()
        .iter()
        .filter(|c| normalized(&c.name).starts_with(&normalized(model)))
        .count();
    if same_model == 1 {
        find(model).ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_from_the_driver_identify_their_card() {
        let name = |d: &str| identify(d).map(|c| c.name);
        assert_eq!(name("NVIDIA H200").as_deref(), Some("H200 141GB"));
        assert_eq!(name("NVIDIA A100-SXM4-80GB").as_deref(), Some("A100 80GB"));
        assert_eq!(name("NVIDIA A100-SXM4-40GB").as_deref(), Some("A100 40GB"));
        assert_eq!(name("Tesla V100-SXM2-32GB").as_deref(), Some("V100 32GB"));
        assert_eq!(name("NVIDIA GeForce RTX 4090").as_deref(), Some("RTX 4090"));
        assert_eq!(name("AMD Instinct MI300X").as_deref(), Some("MI300X"));
        assert_eq!(name("NVIDIA L40S").as_deref(), Some("L40S"));
        // Two A100s exist: without the size the name is not enough.
        assert_eq!(name("NVIDIA A100-PCIE"), None);
        assert_eq!(name("Some Future GPU"), None);
    }

    /// Issue 42, item 4: CUDA's total as public logs printed it, kept as printed, with its
    /// precision; the lowest reading is the card's capacity, and says so.
    #[test]
    fn cuda_totals_are_read_as_printed_and_the_lowest_is_used() {
        let reading = |printed: &str| CudaReading {
            printed: printed.into(),
            read_in: "test".into(),
            source: "test".into(),
        };
        assert_eq!(
            reading("23.58 GiB").bytes(),
            Some((25_318_832_210, GIB_2DP_HALF_STEP))
        );
        assert_eq!(
            reading("42298834944 bytes").bytes(),
            Some((42_298_834_944, 0))
        );
        // Only two decimals, as vLLM and PyTorch print them; anything else is not a reading.
        for bad in ["23.5 GiB", "23.580 GiB", "24259 MB", "23.58GiB", "x.yz GiB"] {
            assert_eq!(reading(bad).bytes(), None, "{bad}");
        }
        let rtx3090 = find("RTX 3090").unwrap();
        let (cap, source) = rtx3090.device_capacity();
        assert_eq!(
            (cap.get(), source),
            (25_297_357_373, CapacitySource::CudaTotalPublic)
        );
        // Below the driver's 24,576 MiB, within the readings' range.
        let cuda = rtx3090.cuda_total.as_ref().unwrap();
        assert_eq!(cuda.range(), Some((25_297_357_373, 25_447_681_229)));
        assert!(cap.get() < rtx3090.reported_bytes.unwrap());
        let words = rtx3090.capacity_words();
        assert!(
            words.starts_with("CUDA's total as public logs printed it: 23.56 GiB (±0.005 GiB as printed) in PyTorch's out-of-memory message")
                && words.contains("the lowest of 5 public readings, 23.56–23.70 GiB"),
            "{words}"
        );
        // An exact reading says so; a card without readings keeps the driver's figure.
        assert!(
            find("RTX 5090")
                .unwrap()
                .capacity_words()
                .contains("33677180928 bytes (exact)")
        );
        assert_eq!(
            find("L4").unwrap().capacity_words(),
            "as the driver reports it"
        );
        // PyTorch's total_memory read by iteragpu on the card comes first.
        assert_eq!(
            find("H200").unwrap().capacity_words(),
            "PyTorch's total_memory"
        );
        // Every reading of the catalog parses, says what printed it and where, and lies below
        // the driver's total of its card.
        for card in catalog() {
            for r in card.cuda_total.iter().flat_map(|t| &t.readings) {
                let (b, _) = r.bytes().unwrap_or_else(|| panic!("{}: {r:?}", card.name));
                assert!(
                    !r.read_in.is_empty() && r.source.starts_with("https://"),
                    "{r:?}"
                );
                assert!(b < card.reported_bytes.unwrap(), "{}: {r:?}", card.name);
            }
        }
    }

    #[test]
    fn catalog_loads_and_finds() {
        let cards = catalog();
        assert!(cards.len() >= 17);
        assert_eq!(find("h200").unwrap().name, "H200 141GB");
        assert_eq!(find("RTX-4090").unwrap().name, "RTX 4090");
        assert!(
            find("gtx 480")
                .unwrap_err()
                .to_string()
                .contains("H100 80GB")
        );
        // A family name is never resolved silently to one of its cards.
        for (query, choices) in [
            ("A100", vec!["A100 40GB", "A100 80GB"]),
            ("V100", vec!["V100 16GB", "V100 32GB"]),
            ("H100", vec!["H100 80GB", "H100 NVL"]),
        ] {
            assert_eq!(
                find(query).unwrap_err(),
                UnknownCard::Ambiguous {
                    query: query.into(),
                    choices: choices.into_iter().map(String::from).collect()
                }
            );
        }
        for (query, name) in [
            ("b200", "B200"),
            ("GB200", "GB200"),
            ("h100 nvl", "H100 NVL"),
            ("H20", "H20"),
            ("l40", "L40"),
            ("l40s", "L40S"),
            ("MI325X", "MI325X"),
            ("rtx pro 6000", "RTX PRO 6000"),
        ] {
            assert_eq!(find(query).unwrap().name, name, "{query}");
        }
        // Every card says where its capacity comes from, in a file of this repository.
        for card in &cards {
            assert!(!card.source.is_empty(), "{}", card.name);
            assert!(
                !card.source.contains("shared/"),
                "{}: {}",
                card.name,
                card.source
            );
        }
        let (cap, source) = find("H200").unwrap().device_capacity();
        assert_eq!(
            (cap.get(), source),
            (150_109_880_320, CapacitySource::TorchTotalMemory)
        );
        let (cap, source) = find("MI250X").unwrap().device_capacity();
        assert_eq!(
            (cap.get(), source),
            (64_000_000_000, CapacitySource::VendorLabel)
        );
    }
}
