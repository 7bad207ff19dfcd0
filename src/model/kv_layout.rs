//! What each decoder layer keeps in the KV cache per token: widths of K and V (heads × head
//! dimension, the model's KV heads, never silently its query heads) and a sliding window if any.

use serde::Serialize;

/// One attention layer's cache shape per token and per sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct KvLayer {
    /// Elements of K per token: `num_key_value_heads × head_dim` (MLA: heads × (nope + rope)).
    pub key_width: u64,
    /// Elements of V per token: `num_key_value_heads × head_dim` (MLA: heads × v_head_dim).
    pub value_width: u64,
    /// Sliding window in tokens when the layer attends to a window only.
    pub window: Option<u64>,
}

impl KvLayer {
    pub fn width(&self) -> u64 {
        self.key_width + self.value_width
    }
}

/// For multi-head latent attention (deepseek_v3), the other layout: the cache itself holds the
/// compressed latent; `width` is what the decompressed K and V take per token and layer
/// (`heads × (qk_nope + qk_rope + v_head_dim)`), as older transformers versions and eager
/// expansions hold them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LatentLayout {
    /// Decompressed elements per token per layer: heads × (K head dim + V head dim).
    pub width: u64,
    pub kv_lora_rank: u64,
    pub rope_dim: u64,
}

/// Per-layer cache widths for a whole model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KvLayout {
    pub layers: Vec<KvLayer>,
    /// Present for MLA models (deepseek_v3): the decompressed alternative to the cached latent.
    pub latent: Option<LatentLayout>,
    /// The per-layer widths in words (`32 layers × 8 KV heads × 128 head_dim`), for formulas.
    pub description: String,
}

impl KvLayout {
    /// `layers` identical layers of `heads × head_dim` for K and for V.
    pub fn uniform(layers: u64, heads: u64, head_dim: u64, window: Option<u64>) -> KvLayout {
        let width = heads * head_dim;
        KvLayout {
            layers: (0..layers)
                .map(|_| KvLayer {
                    key_width: width,
                    value_width: width,
                    window,
                })
                .collect(),
            latent: None,
            description: format!("{layers} layers × {heads} KV heads × {head_dim} head_dim"),
        }
    }

    /// Elements per token summed over layers, K and V together, ignoring windows.
    pub fn elements_per_token(&self) -> u128 {
        self.layers.iter().map(|l| l.width() as u128).sum()
    }

    /// The window of the sliding layers, if any.
    pub fn window(&self) -> Option<u64> {
        self.layers.iter().find_map(|l| l.window)
    }

    pub fn sliding_layers(&self) -> usize {
        self.layers.iter().filter(|l| l.window.is_some()).count()
    }
}
