//! Reading a Hugging Face `config.json`: locating it, parsing it with precise error positions, and
//! typed access to its fields with the defaults transformers itself applies.

use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

use super::ModelError;
use super::files::{FileError, read_capped, regular_file};
use crate::units::group_thousands;

/// Largest `config.json` read. Real ones are a few kilobytes (the largest, with label maps, well
/// under a megabyte); a bigger file is not a config and parsing it would cost gigabytes.
pub const CONFIG_CAP: u64 = 16 << 20;

/// Largest layer count accepted: published models have at most a few hundred layers. Everything
/// proportional to the layers (the KV layout, per-layer windows) is allocated after this check.
pub const MAX_LAYERS: u64 = 100_000;

/// Largest value accepted for any other size of a config (widths, heads, vocabulary, experts):
/// 2^24, over 60 times the largest published vocabulary (262,208) and 300 times the largest
/// hidden or intermediate width. Products of two such sizes always fit in a `u64`.
pub const MAX_DIMENSION: u64 = 1 << 24;

/// Largest parameter count accepted, 2^50 (about 1.1 × 10^15, hundreds of times the largest
/// published model): any tensor size in bytes, times any element width, fits in a `u64`.
pub const MAX_PARAMETERS: u64 = 1 << 50;

/// Largest position count accepted (`max_position_embeddings`, `n_positions`, `sliding_window`):
/// 2^32, over 400 times the longest published context (10 M). Positions times any size times any
/// layer count then stay far inside a `u128`, and a window or a length sum never wraps a `u64`.
pub const MAX_POSITIONS: u64 = 1 << 32;

/// A parsed `config.json`, with the text model's section selected when the config nests one
/// (`text_config` in multimodal configs such as Gemma 3).
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the file was read from (for messages).
    pub path: PathBuf,
    /// The whole JSON object.
    pub root: Map<String, Value>,
    /// `model_type` of the root.
    pub model_type: String,
}

impl Config {
    /// Reads `config.json` from a file path or from a folder holding one: a regular file of at
    /// most [`CONFIG_CAP`] bytes.
    pub fn load(path: &Path) -> Result<Config, ModelError> {
        let file = if path.is_dir() {
            let candidate = path.join("config.json");
            match regular_file(&candidate) {
                Err(FileError::Missing { .. }) => {
                    return Err(ModelError::NoConfig(path.to_path_buf()));
                }
                Err(e) => return Err(e.into()),
                Ok(_) => candidate,
            }
        } else {
            path.to_path_buf()
        };
        let bytes = read_capped(&file, CONFIG_CAP, "config.json").map_err(|e| match e {
            FileError::Missing { path } => ModelError::NotFound(path),
            e => e.into(),
        })?;
        Config::parse_bytes(&file, &bytes)
    }

    /// Parses config text; `path` is only used in messages.
    pub fn parse(path: &Path, text: &str) -> Result<Config, ModelError> {
        Config::parse_bytes(path, text.as_bytes())
    }

    /// Parses config bytes (invalid UTF-8 is reported with its position, never replaced).
    pub fn parse_bytes(path: &Path, bytes: &[u8]) -> Result<Config, ModelError> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| ModelError::Json {
            path: path.to_path_buf(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        let Value::Object(root) = value else {
            return Err(ModelError::Field {
                path: path.to_path_buf(),
                field: "(top level)".into(),
                problem: "must be a JSON object `{…}`".into(),
            });
        };
        let model_type = match root.get("model_type") {
            Some(Value::String(s)) => s.clone(),
            Some(_) => {
                return Err(ModelError::Field {
                    path: path.to_path_buf(),
                    field: "model_type".into(),
                    problem: "must be a string such as \"llama\"".into(),
                });
            }
            None => return Err(ModelError::NoModelType(path.to_path_buf())),
        };
        Ok(Config {
            path: path.to_path_buf(),
            root,
            model_type,
        })
    }

    /// The positions the model's text part was built for (`max_position_embeddings`, GPT-2's
    /// `n_positions`), when the config states one: the longest request it can take.
    pub fn max_positions(&self) -> Result<Option<u64>, ModelError> {
        let root = self.fields();
        let text = root.section("text_config")?.unwrap_or(root);
        for key in ["max_position_embeddings", "n_positions"] {
            if let Some(n) = text.positive_positions(key)? {
                return Ok(Some(n));
            }
        }
        Ok(None)
    }

    /// Field access on the root object.
    pub fn fields(&self) -> Fields<'_> {
        Fields {
            map: &self.root,
            path: &self.path,
            section: String::new(),
        }
    }
}

/// Typed, error-reporting access to the fields of one config section.
#[derive(Clone)]
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
    path: &'a Path,
    section: String,
}

impl<'a> Fields<'a> {
    pub(crate) fn name(&self, key: &str) -> String {
        if self.section.is_empty() {
            key.to_string()
        } else {
            format!("{}.{}", self.section, key)
        }
    }

    /// Reports a problem with a field.
    pub fn invalid(&self, key: &str, problem: &str) -> ModelError {
        ModelError::Field {
            path: self.path.to_path_buf(),
            field: self.name(key),
            problem: problem.to_string(),
        }
    }

    /// A nested object such as `text_config`, if present and not null.
    pub fn section(&self, key: &str) -> Result<Option<Fields<'a>>, ModelError> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(map)) => Ok(Some(Fields {
                map,
                path: self.path,
                section: self.name(key),
            })),
            Some(_) => Err(self.invalid(key, "must be a JSON object")),
        }
    }

    pub fn raw(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// Whether the key is present with the value `null` (HQQ's `group_size: null`: one group).
    pub fn is_null(&self, key: &str) -> bool {
        matches!(self.map.get(key), Some(Value::Null))
    }

    pub fn has(&self, key: &str) -> bool {
        self.raw(key).is_some()
    }

    /// A non-negative integer field, or `None` when absent or null. Unbounded: only for values
    /// that are compared, never multiplied nor allocated for (a sliding window).
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>, ModelError> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => {
                match v.as_u64() {
                    Some(n) => Ok(Some(n)),
                    // Some configs write integers as floats (`4096.0`).
                    None => match v.as_f64() {
                        Some(f) if f >= 0.0 && f.fract() == 0.0 && f < 1e18 => Ok(Some(f as u64)),
                        _ => Err(self
                            .invalid(key, &format!("must be a non-negative integer, found {v}"))),
                    },
                }
            }
        }
    }

    /// A position count or a window, at most [`MAX_POSITIONS`].
    pub fn positions(&self, key: &str) -> Result<Option<u64>, ModelError> {
        self.bounded(key, MAX_POSITIONS, "for positions")
    }

    /// A model's positions (`max_position_embeddings`): at most [`MAX_POSITIONS`] and never 0 (a
    /// model of no positions takes no request; 0 would become a `max_model_len` of 0).
    pub fn positive_positions(&self, key: &str) -> Result<Option<u64>, ModelError> {
        let n = self.positions(key)?;
        self.nonzero(key, n)
    }

    /// A size (width, heads, vocabulary, experts …), at most [`MAX_DIMENSION`].
    pub fn opt_size(&self, key: &str) -> Result<Option<u64>, ModelError> {
        self.bounded(key, MAX_DIMENSION, "for a size")
    }

    fn bounded(&self, key: &str, bound: u64, what: &str) -> Result<Option<u64>, ModelError> {
        match self.opt_u64(key)? {
            Some(n) if n > bound => Err(self.invalid(
                key,
                &format!(
                    "is {}, above the bound of {} iteragpu accepts {what} (published models stay far below it); fix the config",
                    group_thousands(n as u128),
                    group_thousands(bound as u128)
                ),
            )),
            n => Ok(n),
        }
    }

    fn nonzero(&self, key: &str, value: Option<u64>) -> Result<Option<u64>, ModelError> {
        match value {
            Some(0) => Err(self.invalid(key, "must be greater than 0, found 0")),
            n => Ok(n),
        }
    }

    /// A required positive size.
    pub fn positive(&self, key: &str) -> Result<u64, ModelError> {
        let n = self.opt_size(key)?;
        self.nonzero(key, n)?
            .ok_or_else(|| self.invalid(key, "is missing; this family needs it"))
    }

    /// A positive size with a default used when the field is absent (transformers' default).
    pub fn positive_or(&self, key: &str, default: u64) -> Result<u64, ModelError> {
        let n = self.opt_size(key)?;
        Ok(self.nonzero(key, n)?.unwrap_or(default))
    }

    /// A non-negative size with a default.
    pub fn u64_or(&self, key: &str, default: u64) -> Result<u64, ModelError> {
        Ok(self.opt_size(key)?.unwrap_or(default))
    }

    /// A positive layer count, at most [`MAX_LAYERS`], with a default when absent.
    pub fn layers_or(&self, key: &str, default: Option<u64>) -> Result<u64, ModelError> {
        let n = self.bounded(key, MAX_LAYERS, "for a layer count")?;
        self.nonzero(key, n)?
            .or(default)
            .ok_or_else(|| self.invalid(key, "is missing; this family needs it"))
    }

    pub fn bool_or(&self, key: &str, default: bool) -> Result<bool, ModelError> {
        match self.raw(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(self.invalid(key, &format!("must be true or false, found {v}"))),
        }
    }

    pub fn opt_str(&self, key: &str) -> Result<Option<&'a str>, ModelError> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.invalid(key, &format!("must be a string, found {v}"))),
        }
    }

    /// A list of strings (e.g. `layer_types`), or `None`.
    pub fn opt_strings(&self, key: &str) -> Result<Option<Vec<&'a str>>, ModelError> {
        let wrong = "must be a list of strings";
        self.opt_list(key, Value::as_str, wrong, wrong)
    }

    /// A list of integers, or `None`.
    pub fn opt_u64s(&self, key: &str) -> Result<Option<Vec<u64>>, ModelError> {
        let wrong_item = "must be a list of non-negative integers";
        self.opt_list(key, Value::as_u64, wrong_item, "must be a list of integers")
    }

    /// A list of the values `item` reads, or `None`; `wrong_item` when one of them is not.
    fn opt_list<T>(
        &self,
        key: &str,
        item: impl Fn(&'a Value) -> Option<T>,
        wrong_item: &str,
        not_a_list: &str,
    ) -> Result<Option<Vec<T>>, ModelError> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| item(v).ok_or_else(|| self.invalid(key, wrong_item)))
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(self.invalid(key, not_a_list)),
        }
    }
}
