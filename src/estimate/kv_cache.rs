//! The KV cache: bytes kept for attention keys and values, per cache strategy.
//!
//! Dense and uniform: `2 (K and V) × layers × KV heads × head_dim × tokens × sequences × bytes`.
//! Each strategy changes how many tokens each layer keeps (or how they are stored); the
//! behaviours follow transformers' `cache_utils.py` (DynamicLayer, DynamicSlidingWindowLayer,
//! StaticLayer, StaticSlidingWindowLayer, QuantizedLayer, offloading).

use serde::{Deserialize, Serialize};

use super::{EstimateError, Kind, Term, TermId, g, plural, product, sum};
use crate::model::KvLayout;
use crate::units::{Bytes, Overflow};

/// Cache strategies as the command line and the worker name them.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    clap::ValueEnum,
    strum::Display,
    strum::AsRefStr,
    strum::EnumString,
    strum::VariantArray,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum CacheKind {
    /// Grows with the tokens (sliding layers of the model keep their window).
    Dynamic,
    /// Preallocated to a maximum length.
    Static,
    /// Every layer keeps at most a window of tokens (default: the model's window).
    Sliding,
    /// Quantized tokens with a full-precision residual (transformers' QuantizedCache).
    Quantized,
    /// Layers in host memory; the GPU holds two layers at a time.
    Offloaded,
}

/// A quantized cache's settings; the defaults are transformers' QuantizedCache defaults
/// (`nbits=4`, `q_group_size=64`, `residual_length=128`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantizedSettings {
    pub bits: u64,
    pub group_size: u64,
    pub residual: u64,
}

impl QuantizedSettings {
    pub const DEFAULT: QuantizedSettings = QuantizedSettings {
        bits: 4,
        group_size: 64,
        residual: 128,
    };
    /// The widths transformers' QuantizedCache offers with its default backend (quanto).
    pub const BITS: [u64; 2] = [2, 4];
}

/// What a strategy needs besides its kind.
#[derive(Clone, Copy, Debug)]
pub struct CacheOptions {
    /// Static: the preallocated length (default: the tokens).
    pub max_cache_len: Option<u64>,
    /// Sliding: the window (default: the layout's own sliding window).
    pub window: Option<u64>,
    pub quantized: QuantizedSettings,
}

impl CacheKind {
    /// The one place a cache kind becomes a strategy (estimate and measure both build it here).
    /// `tokens` is the default static length; `layout` gives the model's own window.
    pub fn strategy(
        self,
        options: &CacheOptions,
        tokens: u64,
        layout: &KvLayout,
    ) -> Result<CacheStrategy, CacheError> {
        if options.window.is_some() && self != CacheKind::Sliding {
            return Err(CacheError::WindowWithoutSliding);
        }
        if options.max_cache_len.is_some() && self != CacheKind::Static {
            return Err(CacheError::MaxLenWithoutStatic);
        }
        Ok(match self {
            CacheKind::Dynamic => CacheStrategy::Dynamic,
            CacheKind::Static => CacheStrategy::Static {
                max_cache_len: options.max_cache_len.unwrap_or(tokens),
            },
            CacheKind::Sliding => {
                let Some(window) = options.window.or_else(|| layout.window()) else {
                    return Err(CacheError::NoWindow);
                };
                CacheStrategy::Sliding { window }
            }
            CacheKind::Quantized => {
                let bits = options.quantized.bits;
                if !QuantizedSettings::BITS.contains(&bits) {
                    return Err(CacheError::QuantBits(bits));
                }
                CacheStrategy::Quantized {
                    bits,
                    group_size: options.quantized.group_size,
                    residual: options.quantized.residual,
                }
            }
            CacheKind::Offloaded => CacheStrategy::Offloaded,
        })
    }
}

/// Why a cache kind's options make no strategy.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    #[error("--window applies to --cache sliding; add --cache sliding or drop --window")]
    WindowWithoutSliding,
    #[error(
        "--max-cache-len applies to --cache static; add --cache static or drop --max-cache-len"
    )]
    MaxLenWithoutStatic,
    #[error(
        "--cache sliding needs a window: this layout has no sliding layers, so give --window N"
    )]
    NoWindow,
    #[error("--kv-quant-bits {0} is not a width of transformers' quantized cache: use 2 or 4")]
    QuantBits(u64),
}

/// How the cache keeps tokens.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "strategy", rename_all = "snake_case")]
pub enum CacheStrategy {
    /// Grows with the tokens; a model's sliding layers keep at most their window.
    Dynamic,
    /// Preallocated to `max_cache_len` tokens whatever the tokens processed.
    Static { max_cache_len: u64 },
    /// Every layer keeps at most `window` tokens.
    Sliding { window: u64 },
    /// Tokens quantized to `bits` in groups of `group_size`, the last `residual` at full precision.
    Quantized {
        bits: u64,
        group_size: u64,
        residual: u64,
    },
    /// Layers live in host memory; the GPU holds the layer in use and the one being prefetched.
    Offloaded,
}

impl CacheStrategy {
    /// The kind this strategy was built from (`CacheKind::strategy` the other way).
    pub fn kind(&self) -> CacheKind {
        match self {
            CacheStrategy::Dynamic => CacheKind::Dynamic,
            CacheStrategy::Static { .. } => CacheKind::Static,
            CacheStrategy::Sliding { .. } => CacheKind::Sliding,
            CacheStrategy::Quantized { .. } => CacheKind::Quantized,
            CacheStrategy::Offloaded => CacheKind::Offloaded,
        }
    }
}

/// A KV-cache question: this layout, this many tokens and sequences, this element width.
#[derive(Clone, Debug)]
pub struct KvRequest {
    pub layout: KvLayout,
    /// Tokens per sequence (prompt + generated).
    pub tokens: u64,
    /// Sequences held together (batch, concurrent requests).
    pub sequences: u64,
    /// Bytes per cached element (2 for bf16/fp16).
    pub element_bytes: u64,
    pub strategy: CacheStrategy,
    /// Tokens of the prompt, when known. A sliding layer holds the whole prompt from the prefill
    /// until the first decoding step; without this, the prompt is assumed to be all the tokens.
    pub prompt_tokens: Option<u64>,
    /// Concurrent requests, each with its own cache of its own length (`--requests`): empty for
    /// one batch of `sequences` × `tokens`. When given, `tokens` is the longest request's.
    pub requests: Vec<RequestLengths>,
}

/// One live request: its prompt and the tokens it generates after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RequestLengths {
    pub prompt: u64,
    pub output: u64,
}

impl RequestLengths {
    /// Tokens its cache holds after decoding: the prompt and every generated token.
    pub fn tokens(self) -> u64 {
        self.prompt.saturating_add(self.output)
    }
}

/// The lengths of `n` requests: each list cycled over them (one value: the same for all). Lists
/// longer than `n` are refused by the callers that know `n` was written (a sweep that varies the
/// requests takes the first `n`).
pub fn cycle_lengths(
    n: u64,
    prompts: &[u64],
    outputs: &[u64],
) -> Result<Vec<RequestLengths>, String> {
    if n == 0 {
        return Err(
            "--requests 0: give at least one request (--requests 1 is one generation)".into(),
        );
    }
    for (flag, list) in [("--prompt-lengths", prompts), ("--output-lengths", outputs)] {
        if list.is_empty() {
            return Err(format!(
                "{flag} is empty: give one length, or a comma-separated list"
            ));
        }
        if let Some(zero) = list.iter().find(|&&l| l == 0) {
            return Err(format!(
                "{flag} holds {zero}: every length is at least 1 token"
            ));
        }
    }
    // A request's cache lives on the device: more requests than 2^20 is never a real question.
    if n > MAX_REQUESTS {
        return Err(format!(
            "--requests {n} is above {MAX_REQUESTS}; give the requests alive at once"
        ));
    }
    Ok((0..n as usize)
        .map(|i| RequestLengths {
            prompt: prompts[i % prompts.len()],
            output: outputs[i % outputs.len()],
        })
        .collect())
}

/// The most concurrent requests followed (each is its own cache and its own Python objects).
pub const MAX_REQUESTS: u64 = 1 << 20;

/// Refuses a request longer than the model's positions (`max_position_embeddings`).
pub fn check_positions(
    lengths: &[RequestLengths],
    max_positions: Option<u64>,
) -> Result<(), String> {
    let Some(max) = max_positions else {
        return Ok(());
    };
    match lengths.iter().find(|r| r.tokens() > max) {
        Some(r) => Err(format!(
            "a request of {} prompt + {} output tokens = {} is beyond the model's {max} positions (max_position_embeddings); shorten --prompt-lengths or --output-lengths",
            r.prompt,
            r.output,
            r.tokens()
        )),
        None => Ok(()),
    }
}

impl KvRequest {
    /// Bytes per token per sequence over all layers (no window applied).
    pub fn bytes_per_token(&self) -> Result<u64, Overflow> {
        product(&[self.layout.elements_per_token(), self.element_bytes as u128])
            .and_then(Bytes::from_u128)
            .map(Bytes::get)
    }

    /// Tokens layer `window` keeps under the dynamic or static strategy.
    fn kept(&self, window: Option<u64>) -> u64 {
        match (&self.strategy, window) {
            // DynamicSlidingWindowLayer keeps the last window−1 tokens as a view of the
            // window-sized tensor built by the last update: min(tokens, window) stay allocated.
            (CacheStrategy::Dynamic, Some(w)) => self.tokens.min(w),
            (CacheStrategy::Static { max_cache_len }, Some(w)) => (*max_cache_len).min(w),
            (CacheStrategy::Static { max_cache_len }, None) => *max_cache_len,
            (CacheStrategy::Sliding { window }, own) => {
                self.tokens.min(*window).min(own.unwrap_or(u64::MAX))
            }
            _ => self.tokens,
        }
    }

    /// Bytes of each layer at full precision for its kept tokens.
    fn layers_bytes(&self) -> Result<Vec<u128>, Overflow> {
        let layer_bytes = |layer: &crate::model::KvLayer| {
            product(&[
                layer.width() as u128,
                self.kept(layer.window) as u128,
                self.sequences as u128,
                self.element_bytes as u128,
            ])
        };
        self.layout.layers.iter().map(layer_bytes).collect()
    }
}

/// The KV-cache terms of N live requests, each its own cache (`req.requests`): the caches'
/// bytes summed, request by request, and beside it what one padded batch of the same requests
/// would hold (a note). Only one request prefills at a time, so a prefill surplus is the largest
/// request's, not their sum.
pub fn requests_terms(
    req: &KvRequest,
    notes: &mut Vec<String>,
) -> Result<Vec<Term>, EstimateError> {
    let overflow = || EstimateError::overflow("the KV cache", "--requests and their lengths");
    if !matches!(req.strategy, CacheStrategy::Dynamic) {
        return Err(EstimateError::Input(format!(
            "--requests gives each request its own dynamic cache; --cache {} with --requests is not supported yet: drop --cache",
            req.strategy.kind()
        )));
    }
    let n = req.requests.len() as u64;
    let mut total: u128 = 0;
    let mut surplus: Option<Term> = None;
    let mut scratch = Vec::new();
    for r in &req.requests {
        let one = KvRequest {
            tokens: r.tokens(),
            sequences: 1,
            prompt_tokens: Some(r.prompt),
            requests: Vec::new(),
            ..req.clone()
        };
        for term in terms(&one, &mut scratch)? {
            match term.id {
                TermId::KvCache { .. } => total += term.bytes.get() as u128,
                TermId::KvPrefillSurplus
                    if surplus.as_ref().is_none_or(|s| s.bytes < term.bytes) =>
                {
                    surplus = Some(term)
                }
                _ => {}
            }
        }
    }
    notes.extend(
        scratch
            .into_iter()
            .filter(|n| !notes.contains(n))
            .collect::<Vec<_>>(),
    );
    let tokens: u64 = req.requests.iter().map(|r| r.tokens()).sum();
    let longest = req.requests.iter().map(|r| r.tokens()).max().unwrap_or(0);
    let list = |f: fn(&RequestLengths) -> u64| {
        req.requests
            .iter()
            .map(|r| f(r).to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let sum_words = req
        .requests
        .iter()
        .map(|r| format!("({}+{})", r.prompt, r.output))
        .collect::<Vec<_>>()
        .join(" + ");
    let per_token = req.bytes_per_token().map_err(overflow())?;
    let bytes = Bytes::from_u128(total).map_err(overflow())?;
    let mut out = vec![
        Term::new(
            TermId::KvCache {
                cache: CacheKind::Dynamic,
                bits: None,
            },
            bytes,
            Kind::Calculated,
            format!(
                "Σ over {} of its own cache: {} = {} tokens × {} bytes per token ({} × 2 (K and V) × {} bytes), each request's cache counted as the dynamic cache of one sequence",
                plural(n, "request"),
                if req.requests.len() <= 8 { sum_words } else { "Σ (prompt + output)".to_string() },
                g(tokens),
                g(per_token),
                req.layout.description,
                req.element_bytes
            ),
        )
        .input("requests", n)
        .input("prompt_lengths", list(|r| r.prompt))
        .input("output_lengths", list(|r| r.output))
        .input("tokens", tokens)
        .input("element_bytes", req.element_bytes)
        .input("strategy", CacheKind::Dynamic.as_ref()),
    ];
    if let Some(s) = surplus {
        out.push(s);
    }
    // The batch beside it: one cache of n sequences, each padded to the longest request.
    let batch = KvRequest {
        tokens: longest,
        sequences: n,
        prompt_tokens: None,
        requests: Vec::new(),
        ..req.clone()
    };
    let padded = terms(&batch, &mut Vec::new())?[0].bytes;
    if padded != bytes {
        notes.push(format!(
            "--requests {n}: each request holds its own length, Σ = {} tokens; a --batch {n} of the same requests pads each to the longest ({}) and holds one cache of {n} × {} = {} tokens: {} ({} more than the live requests)",
            g(tokens),
            g(longest),
            g(longest),
            g(n.saturating_mul(longest)),
            words(padded),
            words(Bytes(padded.get().saturating_sub(bytes.get()))),
        ));
    }
    Ok(out)
}

/// `1,234 bytes (0.00 GB = 0.00 GiB)`: exact, and readable for a large cache.
fn words(b: Bytes) -> String {
    format!("{} bytes ({})", b.grouped(), b.both())
}

/// The KV-cache terms of a request.
pub fn terms(req: &KvRequest, notes: &mut Vec<String>) -> Result<Vec<Term>, EstimateError> {
    let overflow =
        || EstimateError::overflow("the KV cache", "--tokens, --sequences and the layout");
    let layout = &req.layout;
    let n = layout.layers.len();
    let tokens = plural(req.tokens, "token");
    let seqs = plural(req.sequences, "sequence");
    let e = req.element_bytes;
    let same_kv = layout.layers.iter().all(|l| l.key_width == l.value_width);
    // When K and V differ in width (multi-head latent attention), the layout's description
    // already gives the per-layer sum of both.
    let base = |kept: &str| {
        if same_kv {
            format!(
                "2 (K and V) × {} × {kept} × {seqs} × {e} bytes",
                layout.description
            )
        } else {
            format!("{} × {kept} × {seqs} × {e} bytes", layout.description)
        }
    };
    let sliding = layout.sliding_layers();
    let window = layout.window().unwrap_or(0);
    if let CacheStrategy::Static { max_cache_len } = req.strategy
        && max_cache_len < req.tokens
    {
        return Err(EstimateError::Input(format!(
            "--max-cache-len {max_cache_len} is shorter than the {} tokens to keep; a static cache cannot hold them: raise --max-cache-len",
            g(req.tokens)
        )));
    }
    let mut out = Vec::new();
    match &req.strategy {
        CacheStrategy::Dynamic | CacheStrategy::Static { .. } | CacheStrategy::Sliding { .. } => {
            // transformers' cache layers also keep one-element int64 tensors on the device: the
            // window of a DynamicSlidingWindowLayer (`_sliding_window_tensor`) and the position
            // of every StaticLayer (`cumulative_length`): 8 bytes each (checked on CPU).
            let (window_tensors, what) = match &req.strategy {
                CacheStrategy::Dynamic => (8 * sliding as u128, "each sliding layer's window"),
                CacheStrategy::Sliding { .. } => (8 * n as u128, "each sliding layer's window"),
                CacheStrategy::Static { .. } => (8 * n as u128, "each static layer's position"),
                _ => (0, ""),
            };
            let layers = req.layers_bytes().map_err(overflow())?;
            let total = sum(layers.into_iter().chain([window_tensors])).map_err(overflow())?;
            let kept = match &req.strategy {
                CacheStrategy::Dynamic if sliding > 0 => {
                    notes.push("transformers' DynamicSlidingWindowLayer keeps window−1 tokens as a view of a window-sized tensor: a sliding layer holds min(tokens, window) tokens after a decoding step, and the whole prompt right after a prefill longer than the window".into());
                    let capped = g(req.tokens.min(window));
                    if sliding == n {
                        format!(
                            "min({tokens}, window {}) = {capped} tokens kept per layer",
                            g(window)
                        )
                    } else {
                        format!(
                            "{} full layers keep {tokens}, {sliding} sliding layers keep min({tokens}, window {}) = {capped}",
                            n - sliding,
                            g(window)
                        )
                    }
                }
                CacheStrategy::Static { max_cache_len } if sliding > 0 => format!(
                    "preallocated: {} full layers × {}, {sliding} sliding layers × min({}, window {})",
                    n - sliding,
                    plural(*max_cache_len, "token"),
                    g(*max_cache_len),
                    g(window)
                ),
                CacheStrategy::Static { max_cache_len } => {
                    format!(
                        "max_cache_len {} (preallocated)",
                        plural(*max_cache_len, "token")
                    )
                }
                CacheStrategy::Sliding { window } => {
                    format!(
                        "min({tokens}, window {}) = {} tokens kept per layer",
                        g(*window),
                        g(req.tokens.min(*window))
                    )
                }
                _ => tokens.clone(),
            };
            let mut formula = base(&kept);
            if window_tensors > 0 {
                formula.push_str(&format!(
                    " + {window_tensors} bytes ({what} as an int64 tensor)"
                ));
            }
            out.push(
                Term::new(
                    TermId::KvCache {
                        cache: req.strategy.kind(),
                        bits: None,
                    },
                    Bytes::from_u128(total).map_err(overflow())?,
                    Kind::Calculated,
                    formula,
                )
                .input("layers", n as u64)
                .input("tokens", req.tokens)
                .input("sequences", req.sequences)
                .input("element_bytes", e)
                .input("strategy", req.strategy.kind().as_ref()),
            );
            // Right after the prefill, a dynamic sliding layer still holds the whole prompt (the
            // window is applied at the first decoding step): that surplus is part of the peak.
            if matches!(
                req.strategy,
                CacheStrategy::Dynamic | CacheStrategy::Sliding { .. }
            ) {
                let prompt = req.prompt_tokens.unwrap_or(req.tokens);
                let per_layer = layout
                    .layers
                    .iter()
                    .map(|l| {
                        let cap = match (&req.strategy, l.window) {
                            (CacheStrategy::Sliding { window }, own) => {
                                (*window).min(own.unwrap_or(u64::MAX))
                            }
                            (_, Some(w)) => w,
                            (_, None) => return Ok(0),
                        };
                        let kept = req.tokens.min(cap);
                        product(&[
                            l.width() as u128,
                            prompt.saturating_sub(kept) as u128,
                            req.sequences as u128,
                            e as u128,
                        ])
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(overflow())?;
                let surplus = sum(per_layer).map_err(overflow())?;
                if surplus > 0 {
                    out.push(
                        Term::new(
                            TermId::KvPrefillSurplus,
                            Bytes::from_u128(surplus).map_err(overflow())?,
                            Kind::Assumed,
                            format!(
                                "sliding layers hold the whole prompt ({}) until the first decoding step, not just their window: (prompt − kept) × width × {seqs} × {e} bytes; {}",
                                plural(prompt, "token"),
                                if req.prompt_tokens.is_some() { "prompt from --prompt-tokens" } else { "the prompt is assumed to be all the tokens; give --prompt-tokens" }
                            ),
                        )
                        .input("prompt_tokens", prompt),
                    );
                }
            }
        }
        CacheStrategy::Quantized {
            bits,
            group_size,
            residual,
        } => {
            // QuantizedLayer (KIVI-style): after the prefill every token is quantized, then up to
            // `residual` new tokens stay in full precision before being requantized together.
            // Upper bound: all tokens quantized + a full residual window, per layer, K and V:
            //   ⌈elements·bits/8⌉ codes + ⌈elements/group⌉ × 2 (scale and zero point) × e bytes.
            let layer_bytes = |width: u64| -> Result<u128, Overflow> {
                let elements =
                    product(&[width as u128, req.tokens as u128, req.sequences as u128])?;
                let codes = product(&[elements, *bits as u128])?.div_ceil(8);
                let meta = product(&[
                    elements.div_ceil((*group_size).max(1) as u128),
                    2,
                    e as u128,
                ])?;
                let full = product(&[
                    width as u128,
                    (*residual).min(req.tokens) as u128,
                    req.sequences as u128,
                    e as u128,
                ])?;
                sum([codes, meta, full])
            };
            let mut total = 0u128;
            for layer in &layout.layers {
                for width in [layer.key_width, layer.value_width] {
                    total =
                        sum([total, layer_bytes(width).map_err(overflow())?]).map_err(overflow())?;
                }
            }
            out.push(
                Term::new(
                    TermId::KvCache {
                        cache: CacheKind::Quantized,
                        bits: Some(*bits),
                    },
                    Bytes::from_u128(total).map_err(overflow())?,
                    Kind::Assumed,
                    format!(
                        "per layer, K and V: ⌈elements × {bits} ÷ 8⌉ codes + ⌈elements ÷ {group_size}⌉ × 2 (scale, zero point) × {e} bytes + min({tokens}, residual {residual}) tokens at {e} bytes; elements = width × {tokens} × {seqs}",
                    ),
                )
                .input("bits", *bits)
                .input("group_size", *group_size)
                .input("residual", *residual)
                .input("tokens", req.tokens)
                .input("sequences", req.sequences),
            );
            notes.push("the quantized-cache figure is an upper bound: the backend (quanto or HQQ) packs codes and stores scales in its own layout, and requantizes all tokens each time the residual fills".into());
        }
        CacheStrategy::Offloaded => {
            let per_layer = req.layers_bytes().map_err(overflow())?;
            let all = sum(per_layer.iter().copied()).map_err(overflow())?;
            // Each pair's sum is at most `all`, which did not overflow.
            let on_gpu = per_layer
                .windows(2)
                .map(|w| w[0] + w[1])
                .max()
                .unwrap_or(all);
            out.push(
                Term::new(
                    TermId::KvCache {
                        cache: CacheKind::Offloaded,
                        bits: None,
                    },
                    Bytes::from_u128(on_gpu).map_err(overflow())?,
                    Kind::Calculated,
                    base(&format!("{tokens}, of which only 2 consecutive layers (the one in use and the one prefetched) stay on the GPU")),
                )
                .input("layers_on_gpu", 2u64.min(n as u64))
                .input("tokens", req.tokens)
                .input("sequences", req.sequences),
            );
            out.push(
                Term::new(
                    TermId::KvCacheHost,
                    Bytes::from_u128(all - on_gpu).map_err(overflow())?,
                    Kind::Calculated,
                    "the other layers, in CPU memory (not GPU memory)",
                )
                .info(),
            );
        }
    }
    if let Some(latent) = layout.latent {
        let bytes = product(&[
            latent.width as u128,
            n as u128,
            req.tokens as u128,
            req.sequences as u128,
            e as u128,
        ])
        .map_err(overflow())?;
        out.push(
            Term::new(
                TermId::KvDecompressed,
                Bytes::from_u128(bytes).map_err(overflow())?,
                Kind::Calculated,
                format!(
                    "{n} layers × {} values (heads × (K + V head dims)) × {tokens} × {seqs} × {e} bytes: what older transformers versions kept; transformers 5 caches the latent (kv_lora_rank {} + rope {}) above",
                    g(latent.width),
                    latent.kv_lora_rank,
                    latent.rope_dim
                ),
            )
            .info(),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(tokens: u64, sequences: u64, strategy: CacheStrategy) -> KvRequest {
        KvRequest {
            layout: KvLayout::uniform(32, 8, 128, None),
            tokens,
            sequences,
            element_bytes: 2,
            strategy,
            prompt_tokens: None,
            requests: Vec::new(),
        }
    }

    fn total(r: &KvRequest) -> u64 {
        terms(r, &mut vec![]).unwrap()[0].bytes.get()
    }

    #[test]
    fn the_guides_example() {
        assert_eq!(total(&req(8192, 1, CacheStrategy::Dynamic)), 1_073_741_824);
        assert_eq!(
            total(&req(8192, 4, CacheStrategy::Dynamic)),
            4 * 1_073_741_824
        );
    }

    #[test]
    fn static_preallocates() {
        let r = req(
            1000,
            1,
            CacheStrategy::Static {
                max_cache_len: 8192,
            },
        );
        assert_eq!(total(&r), 1_073_741_824 + 32 * 8);
        let short = req(
            9000,
            1,
            CacheStrategy::Static {
                max_cache_len: 8192,
            },
        );
        assert!(terms(&short, &mut vec![]).is_err());
    }

    #[test]
    fn sliding_caps_tokens() {
        let r = req(8192, 1, CacheStrategy::Sliding { window: 4096 });
        assert_eq!(total(&r), 1_073_741_824 / 2 + 32 * 8);
    }

    #[test]
    fn offloaded_keeps_two_layers() {
        let r = req(8192, 1, CacheStrategy::Offloaded);
        assert_eq!(total(&r), 1_073_741_824 / 16);
    }

    #[test]
    fn quantized_is_smaller_than_full() {
        let r = req(
            8192,
            1,
            CacheStrategy::Quantized {
                bits: 4,
                group_size: 64,
                residual: 128,
            },
        );
        let q = total(&r);
        assert!(q < 1_073_741_824 / 3, "{q}");
        assert!(q > 1_073_741_824 / 4, "{q}");
    }
}
