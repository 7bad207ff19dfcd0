//! The GPT lineage: GPT-2, GPT-NeoX (Pythia) and Falcon, each a tensor template over its
//! `config.json`.

use super::*;

/// modeling_gpt2.py: Conv1D layers stored as `[in, out]`, learned positions, tied head.
pub(super) fn gpt2(f: &Fields) -> Result<Architecture, ModelError> {
    let vocab = f.positive_or("vocab_size", 50257)?;
    let hidden = f.positive_or("n_embd", 768)?;
    let layers = f.layers_or("n_layer", Some(12))?;
    let heads = f.positive_or("n_head", 12)?;
    let head_dim = head_dim_of(f, ("n_head", heads), ("n_embd", hidden))?;
    let positions = f.positive_or("n_positions", 1024)?;
    let inner = f
        .opt_size("n_inner")?
        .filter(|n| *n > 0)
        .unwrap_or(4 * hidden);
    let mut b = Builder::default();
    embedding(&mut b, "transformer.wte.weight", vocab, hidden);
    embedding(&mut b, "transformer.wpe.weight", positions, hidden);
    template(
        &mut b,
        "transformer.h.*",
        layers,
        [
            Norm("ln_1", hidden, true),
            Linear("attn.c_attn", hidden, 3 * hidden, true),
            Linear("attn.c_proj", hidden, hidden, true),
            Norm("ln_2", hidden, true),
            Linear("mlp.c_fc", hidden, inner, true),
            Linear("mlp.c_proj", inner, hidden, true),
        ],
    );
    b.norm("transformer.ln_f", hidden, 1, true);
    let tied = f.bool_or("tie_word_embeddings", true)?;
    head(&mut b, "lm_head.weight", vocab, hidden, tied);
    Ok(simple(
        Family::Gpt2,
        b,
        vec![None; layers as usize],
        Dims {
            hidden_size: hidden,
            num_layers: layers,
            num_heads: heads,
            num_kv_heads: heads,
            head_dim,
            vocab_size: vocab,
            intermediate_size: inner,
            gated_mlp: false,
        },
        tied,
    ))
}

/// modeling_gpt_neox.py (Pythia, GPT-NeoX-20B): fused QKV, separate `embed_out`.
pub(super) fn gpt_neox(f: &Fields) -> Result<Architecture, ModelError> {
    let vocab = f.positive("vocab_size")?;
    let hidden = f.positive("hidden_size")?;
    let layers = f.layers_or("num_hidden_layers", None)?;
    let heads = f.positive("num_attention_heads")?;
    let head_dim = head_dim_of(f, ("num_attention_heads", heads), ("hidden_size", hidden))?;
    let inter = f.positive("intermediate_size")?;
    let bias = f.bool_or("attention_bias", true)?;
    let tied = f.bool_or("tie_word_embeddings", false)?;
    let mut b = Builder::default();
    embedding(&mut b, "gpt_neox.embed_in.weight", vocab, hidden);
    template(
        &mut b,
        "gpt_neox.layers.*",
        layers,
        [
            Norm("input_layernorm", hidden, true),
            Norm("post_attention_layernorm", hidden, true),
            Linear("attention.query_key_value", hidden, 3 * hidden, bias),
            Linear("attention.dense", hidden, hidden, bias),
            Linear("mlp.dense_h_to_4h", hidden, inter, true),
            Linear("mlp.dense_4h_to_h", inter, hidden, true),
        ],
    );
    b.norm("gpt_neox.final_layer_norm", hidden, 1, true);
    head(&mut b, "embed_out.weight", vocab, hidden, tied);
    Ok(simple(
        Family::GptNeox,
        b,
        vec![None; layers as usize],
        Dims {
            hidden_size: hidden,
            num_layers: layers,
            num_heads: heads,
            num_kv_heads: heads,
            head_dim,
            vocab_size: vocab,
            intermediate_size: inter,
            gated_mlp: false,
        },
        tied,
    ))
}

/// modeling_falcon.py: multi-query (7B), grouped KV with `new_decoder_architecture` (40B, 180B).
pub(super) fn falcon(f: &Fields) -> Result<Architecture, ModelError> {
    let vocab = f.positive_or("vocab_size", 65024)?;
    let hidden = f.positive_or("hidden_size", 4544)?;
    let layers = f.layers_or("num_hidden_layers", Some(f.layers_or("n_layer", Some(32))?))?;
    let heads = f.positive_or("num_attention_heads", f.positive_or("n_head", 71)?)?;
    let head_dim = head_dim_of(f, ("num_attention_heads", heads), ("hidden_size", hidden))?;
    let new_arch = f.bool_or("new_decoder_architecture", false)?;
    let multi_query = f.bool_or("multi_query", true)?;
    let parallel = f.bool_or("parallel_attn", true)?;
    let bias = f.bool_or("bias", false)?;
    let ffn = f
        .opt_size("ffn_hidden_size")?
        .filter(|n| *n > 0)
        .unwrap_or(4 * hidden);
    let kv_heads = if new_arch {
        let kv_heads = f.positive_or("num_kv_heads", heads)?;
        check_kv_groups(f, "num_kv_heads", kv_heads, heads)?;
        kv_heads
    } else if multi_query {
        1
    } else {
        heads
    };
    let qkv_out = if new_arch {
        (heads + 2 * kv_heads) * head_dim
    } else if multi_query {
        hidden + 2 * head_dim
    } else {
        3 * hidden
    };
    let mut b = Builder::default();
    embedding(&mut b, "transformer.word_embeddings.weight", vocab, hidden);
    let norms = if new_arch && f.u64_or("num_ln_in_parallel_attn", 2)? == 2 {
        vec![Norm("ln_attn", hidden, true), Norm("ln_mlp", hidden, true)]
    } else if parallel {
        vec![Norm("input_layernorm", hidden, true)]
    } else {
        vec![
            Norm("input_layernorm", hidden, true),
            Norm("post_attention_layernorm", hidden, true),
        ]
    };
    template(&mut b, "transformer.h.*", layers, norms);
    template(
        &mut b,
        "transformer.h.*",
        layers,
        [
            Linear("self_attention.query_key_value", hidden, qkv_out, bias),
            Linear("self_attention.dense", hidden, hidden, bias),
            Linear("mlp.dense_h_to_4h", hidden, ffn, bias),
            Linear("mlp.dense_4h_to_h", ffn, hidden, bias),
        ],
    );
    b.norm("transformer.ln_f", hidden, 1, true);
    let tied = f.bool_or("tie_word_embeddings", true)?;
    head(&mut b, "lm_head.weight", vocab, hidden, tied);
    let mut arch = simple(
        Family::Falcon,
        b,
        vec![None; layers as usize],
        Dims {
            hidden_size: hidden,
            num_layers: layers,
            num_heads: heads,
            num_kv_heads: kv_heads,
            head_dim,
            vocab_size: vocab,
            intermediate_size: ffn,
            gated_mlp: false,
        },
        tied,
    );
    if new_arch && kv_heads < heads {
        // transformers 5.25 (modeling_falcon.py with repeat_kv in the attention) caches the
        // `num_kv_heads` heads the model computes; 5.24 and earlier broadcast K and V to every
        // query head before the cache update (`_split_heads`), caching heads ÷ num_kv_heads
        // times more. The newest tested release is followed (docs/tested-versions.md).
        arch.kv.description = format!(
            "{} (transformers ≥ 5.25; up to 5.24 the {kv_heads} KV heads were broadcast to the {heads} query heads before caching: {}× these bytes)",
            arch.kv.description,
            heads / kv_heads
        );
    }
    Ok(arch)
}
