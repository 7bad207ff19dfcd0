//! Which attention a transformers model runs: the config's choice, else transformers' default.
//! The estimates need it because only eager attention keeps the s×s scores for the backward pass.

use serde::{Deserialize, Serialize};

use super::ModelError;
use super::config::Fields;

/// Which attention the layers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, strum::Display)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum AttentionKernel {
    /// transformers' eager attention: the s×s scores materialized per head.
    Eager,
    /// `F.scaled_dot_product_attention`: on a CUDA card a fused kernel (flash or memory-efficient)
    /// that keeps only the softmax's log-sum-exp per row.
    Sdpa,
    /// `flash_attention_2`: the log-sum-exp per row as well.
    FlashAttention2,
}

impl AttentionKernel {
    /// The kernel a transformers config names (`_attn_implementation`, `attn_implementation`),
    /// else transformers' default, SDPA (every family iteragpu reads supports it); with where the
    /// choice comes from.
    pub fn of_config(fields: &Fields<'_>) -> Result<(AttentionKernel, String), ModelError> {
        Self::of_sections(std::slice::from_ref(fields))
    }

    /// The first of `sections` that names a kernel decides (a nested `text_config` or
    /// `vision_config` before the top level, whose choice applies to the whole model); none:
    /// transformers' default.
    pub fn of_sections(sections: &[Fields<'_>]) -> Result<(AttentionKernel, String), ModelError> {
        for fields in sections {
            for key in ["_attn_implementation", "attn_implementation"] {
                if let Some(name) = fields.opt_str(key)? {
                    let kernel = match name {
                        "eager" => AttentionKernel::Eager,
                        "sdpa" => AttentionKernel::Sdpa,
                        "flash_attention_2" | "flash_attention_3" => {
                            AttentionKernel::FlashAttention2
                        }
                        other => {
                            return Err(fields.invalid(
                                key,
                                &format!(
                                    "is `{other}`, an attention iteragpu's estimate does not model; use eager, sdpa or flash_attention_2 (or predict the workload)"
                                ),
                            ));
                        }
                    };
                    return Ok((kernel, format!("the config's {}", fields.name(key))));
                }
            }
        }
        Ok((
            AttentionKernel::Sdpa,
            "transformers' default (the config names none)".into(),
        ))
    }

    /// Whether the s×s scores are materialized.
    pub fn materializes_scores(self) -> bool {
        self == AttentionKernel::Eager
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Config;
    use std::path::Path;

    fn kernel(text: &str) -> Result<(AttentionKernel, String), ModelError> {
        let config = Config::parse(Path::new("config.json"), text)?;
        let root = config.fields();
        let mut sections = Vec::new();
        if let Some(text) = root.section("text_config")? {
            sections.push(text);
        }
        sections.push(root);
        AttentionKernel::of_sections(&sections)
    }

    #[test]
    fn the_config_decides_else_sdpa() {
        let (k, from) = kernel(r#"{"model_type": "llama"}"#).unwrap();
        assert_eq!(k, AttentionKernel::Sdpa);
        assert!(from.contains("transformers' default"), "{from}");
        let (k, from) =
            kernel(r#"{"model_type": "llama", "_attn_implementation": "eager"}"#).unwrap();
        assert_eq!(
            (k, from.as_str()),
            (AttentionKernel::Eager, "the config's _attn_implementation")
        );
        // A nested section's choice comes first, named with its section.
        let (k, from) = kernel(
            r#"{"model_type": "gemma3", "attn_implementation": "sdpa", "text_config": {"attn_implementation": "flash_attention_2"}}"#,
        )
        .unwrap();
        assert_eq!(k, AttentionKernel::FlashAttention2);
        assert_eq!(from, "the config's text_config.attn_implementation");
        let err = kernel(r#"{"model_type": "llama", "attn_implementation": "flex_attention"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`flex_attention`") && err.contains("use eager, sdpa"),
            "{err}"
        );
    }
}
