//! Reading a Hugging Face `config.json`: locating it, parsing it with precise error positions, and
//! typed access to its fields with the defaults transformers itself applies.

use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

use super::ModelError;

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
    /// Reads `config.json` from a file path or from a folder holding one.
    pub fn load(path: &Path) -> Result<Config, ModelError> {
        let file = if path.is_dir() {
            let candidate = path.join("config.json");
            if !candidate.is_file() {
                return Err(ModelError::NoConfig(path.to_path_buf()));
            }
            candidate
        } else {
            path.to_path_buf()
        };
        let text = std::fs::read_to_string(&file).map_err(|source| ModelError::Read {
            path: file.clone(),
            source,
        })?;
        Config::parse(&file, &text)
    }

    /// Parses config text; `path` is only used in messages.
    pub fn parse(path: &Path, text: &str) -> Result<Config, ModelError> {
        let value: Value = serde_json::from_str(text).map_err(|e| ModelError::Json {
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
    fn name(&self, key: &str) -> String {
        if self.section.is_empty() {
            key.to_string()
        } else {
            format!("{}.{}", self.section, key)
        }
    }

    fn error(&self, key: &str, problem: &str) -> ModelError {
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
            Some(_) => Err(self.error(key, "must be a JSON object")),
        }
    }

    pub fn raw(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub fn has(&self, key: &str) -> bool {
        self.raw(key).is_some()
    }

    /// A non-negative integer field, or `None` when absent or null.
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>, ModelError> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) => Ok(Some(n)),
                // Some configs write integers as floats (`4096.0`).
                None => match v.as_f64() {
                    Some(f) if f >= 0.0 && f.fract() == 0.0 && f < 1e18 => Ok(Some(f as u64)),
                    _ => {
                        Err(self.error(key, &format!("must be a non-negative integer, found {v}")))
                    }
                },
            },
        }
    }

    /// A required positive integer.
    pub fn positive(&self, key: &str) -> Result<u64, ModelError> {
        match self.opt_u64(key)? {
            Some(0) => Err(self.error(key, "must be greater than 0, found 0")),
            Some(n) => Ok(n),
            None => Err(self.error(key, "is missing; this family needs it")),
        }
    }

    /// A positive integer with a default used when the field is absent (transformers' default).
    pub fn positive_or(&self, key: &str, default: u64) -> Result<u64, ModelError> {
        match self.opt_u64(key)? {
            Some(0) => Err(self.error(key, "must be greater than 0, found 0")),
            Some(n) => Ok(n),
            None => Ok(default),
        }
    }

    /// A non-negative integer with a default.
    pub fn u64_or(&self, key: &str, default: u64) -> Result<u64, ModelError> {
        Ok(self.opt_u64(key)?.unwrap_or(default))
    }

    pub fn bool_or(&self, key: &str, default: bool) -> Result<bool, ModelError> {
        match self.raw(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(self.error(key, &format!("must be true or false, found {v}"))),
        }
    }

    pub fn opt_str(&self, key: &str) -> Result<Option<&'a str>, ModelError> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.error(key, &format!("must be a string, found {v}"))),
        }
    }

    /// A list of strings (e.g. `layer_types`), or `None`.
    pub fn opt_strings(&self, key: &str) -> Result<Option<Vec<&'a str>>, ModelError> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_str()
                        .ok_or_else(|| self.error(key, "must be a list of strings"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(self.error(key, "must be a list of strings")),
        }
    }

    /// A list of integers, or `None`.
    pub fn opt_u64s(&self, key: &str) -> Result<Option<Vec<u64>>, ModelError> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_u64()
                        .ok_or_else(|| self.error(key, "must be a list of non-negative integers"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(self.error(key, "must be a list of integers")),
        }
    }

    /// Reports a semantic problem with a field.
    pub fn invalid(&self, key: &str, problem: &str) -> ModelError {
        self.error(key, problem)
    }
}
