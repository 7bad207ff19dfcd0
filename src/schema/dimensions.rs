//! The dimensions of a workload that a sweep may vary, one variable at a time.

use serde::{Deserialize, Serialize};

/// A dimension a sweep may vary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(strum::Display, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "kebab-case")]
pub enum Variable {
    Batch,
    Context,
    Width,
    Depth,
    PromptTokens,
    NewTokens,
    Steps,
    /// Vision: the images' side in pixels (a sweep varies square images; `--resolution HxW` for
    /// others).
    Resolution,
    /// Vision: the images processed together.
    Images,
    /// Concurrent generation requests, each with its own KV cache (`--requests`).
    Requests,
    /// vlm: the images in each request's prompt.
    ImagesPerRequest,
}

impl Variable {
    /// Every variable, in the help's order (strum's list of the variants).
    pub const ALL: &[Variable] = <Variable as strum::VariantArray>::VARIANTS;

    /// The option's name: `batch`, `prompt-tokens`, … (the derived name; the method stays for
    /// its callers).
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// `batch`, `prompt-tokens` or `prompt_tokens`; an unknown name gets the list.
    pub fn parse(name: &str) -> Result<Variable, String> {
        let wanted = name.trim().replace('_', "-");
        Variable::ALL
            .iter()
            .copied()
            .find(|v| v.name() == wanted)
            .ok_or_else(|| {
                format!(
                    "`{wanted}` cannot be varied; choose one of {}",
                    Variable::ALL
                        .iter()
                        .map(|v| v.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
    }
}

/// Every dimension of a measurement, whatever the workload uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dimensions {
    pub batch: u64,
    pub context: u64,
    pub width: u64,
    pub depth: u64,
    pub prompt_tokens: u64,
    pub new_tokens: u64,
    pub steps: u64,
    /// Vision: the images' height in pixels (what `--vary resolution` varies).
    pub resolution: u64,
    /// Vision: the images' width when not square (`--resolution HxW`); `None`: square.
    pub resolution_width: Option<u64>,
    pub images: u64,
    pub requests: u64,
    pub images_per_request: u64,
}

impl Dimensions {
    /// The recorded `resolution`: the side of a square image, `"HxW"` otherwise (the height alone
    /// would pass a 384×256 run for a 384×384 one).
    pub fn resolution_value(&self) -> serde_json::Value {
        match self.resolution_width {
            Some(w) if w != self.resolution => format!("{}x{w}", self.resolution).into(),
            _ => self.resolution.into(),
        }
    }

    pub fn get(&self, v: Variable) -> u64 {
        *self.clone().slot(v)
    }

    /// Sets one dimension; a resolution set this way is square (what a sweep varies).
    pub fn set(&mut self, v: Variable, value: u64) {
        if v == Variable::Resolution {
            self.resolution_width = None;
        }
        *self.slot(v) = value;
    }

    /// Vision: (height, width) of the images in pixels.
    pub fn image_size(&self) -> (u64, u64) {
        (
            self.resolution,
            self.resolution_width.unwrap_or(self.resolution),
        )
    }

    /// The one place a variable names its field.
    fn slot(&mut self, v: Variable) -> &mut u64 {
        match v {
            Variable::Batch => &mut self.batch,
            Variable::Context => &mut self.context,
            Variable::Width => &mut self.width,
            Variable::Depth => &mut self.depth,
            Variable::PromptTokens => &mut self.prompt_tokens,
            Variable::NewTokens => &mut self.new_tokens,
            Variable::Steps => &mut self.steps,
            Variable::Resolution => &mut self.resolution,
            Variable::Images => &mut self.images,
            Variable::Requests => &mut self.requests,
            Variable::ImagesPerRequest => &mut self.images_per_request,
        }
    }

    /// Replaces `{batch}`, `{context}`, `{width}`, `{depth}`, `{prompt-tokens}`, `{new-tokens}`,
    /// `{steps}` and `{requests}` in a script argument with these values.
    pub fn substitute(&self, arg: &str) -> String {
        Variable::ALL.iter().fold(arg.to_string(), |acc, v| {
            acc.replace(&format!("{{{}}}", v.name()), &self.get(*v).to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_files() {
        for v in Variable::ALL {
            assert_eq!(serde_json::to_value(v).unwrap(), v.name());
        }
    }

    #[test]
    fn names_round_trip_and_substitute() {
        for &v in Variable::ALL {
            assert_eq!(Variable::parse(v.name()), Ok(v));
            assert_eq!(Variable::parse(&v.name().replace('-', "_")), Ok(v));
        }
        assert!(
            Variable::parse("colour")
                .unwrap_err()
                .contains("cannot be varied")
        );
        let mut d = Dimensions {
            batch: 1,
            context: 2,
            width: 3,
            depth: 4,
            prompt_tokens: 5,
            new_tokens: 6,
            steps: 7,
            resolution: 384,
            resolution_width: Some(512),
            images: 8,
            requests: 8,
            images_per_request: 9,
        };
        assert_eq!(d.image_size(), (384, 512));
        assert_eq!(d.resolution_value(), "384x512");
        d.set(Variable::Resolution, 224);
        assert_eq!(d.image_size(), (224, 224), "a set resolution is square");
        assert_eq!(d.resolution_value(), 224);
        d.set(Variable::PromptTokens, 50);
        assert_eq!(
            d.substitute("--b {batch} --p {prompt-tokens}"),
            "--b 1 --p 50"
        );
    }
}
