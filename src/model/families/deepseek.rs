//! DeepSeek-V3: multi-head latent attention, whose cache holds the compressed latent, and
//! DeepSeekMoE with shared experts.

use super::*;

/// modeling_deepseek_v3.py: multi-head latent attention (MLA) and DeepSeekMoE with shared experts.
pub(super) fn deepseek_v3(f: &Fields, notes: &mut Vec<String>) -> Result<Architecture, ModelError> {
    let vocab = f.positive_or("vocab_size", 129280)?;
    let hidden = f.positive_or("hidden_size", 7168)?;
    let layers = f.layers_or("num_hidden_layers", Some(61))?;
    let heads = f.positive_or("num_attention_heads", 128)?;
    let q_lora = f.u64_or("q_lora_rank", 1536)?;
    let kv_lora = f.positive_or("kv_lora_rank", 512)?;
    let nope = f.positive_or("qk_nope_head_dim", 128)?;
    let rope = f.positive_or("qk_rope_head_dim", 64)?;
    let v_dim = f.positive_or("v_head_dim", 128)?;
    let inter = f.positive_or("intermediate_size", 18432)?;
    let moe_inter = f.positive_or("moe_intermediate_size", 2048)?;
    let experts = f.u64_or("n_routed_experts", 256)?;
    let shared = f.u64_or("n_shared_experts", 1)?;
    let active = f.positive_or("num_experts_per_tok", 8)?;
    let first_dense = f.u64_or("first_k_dense_replace", 3)?;
    let freq = f.positive_or("moe_layer_freq", 1)?;
    let attn_bias = f.bool_or("attention_bias", false)?;
    let tied = f.bool_or("tie_word_embeddings", false)?;
    let qk_dim = nope + rope;

    let mut b = Builder::default();
    embedding(&mut b, "model.embed_tokens.weight", vocab, hidden);
    let mut attn = if q_lora > 0 {
        vec![
            Linear("q_a_proj", hidden, q_lora, attn_bias),
            Norm("q_a_layernorm", q_lora, false),
            Linear("q_b_proj", q_lora, heads * qk_dim, false),
        ]
    } else {
        vec![Linear("q_proj", hidden, heads * qk_dim, false)]
    };
    attn.extend([
        Linear("kv_a_proj_with_mqa", hidden, kv_lora + rope, attn_bias),
        Norm("kv_a_layernorm", kv_lora, false),
        Linear("kv_b_proj", kv_lora, heads * (nope + v_dim), false),
        Linear("o_proj", heads * v_dim, hidden, attn_bias),
    ]);
    template(&mut b, "model.layers.*.self_attn", layers, attn);
    let norms = [
        Norm("input_layernorm", hidden, false),
        Norm("post_attention_layernorm", hidden, false),
    ];
    template(&mut b, "model.layers.*", layers, norms);
    let moe_layers = (0..layers)
        .filter(|i| experts > 0 && *i >= first_dense && i % freq == 0)
        .count() as u64;
    gated_mlp(
        &mut b,
        "model.layers.*.mlp",
        hidden,
        inter,
        layers - moe_layers,
        false,
    );
    let mlp = "model.layers.*.mlp";
    b.moe(mlp, experts, hidden, moe_inter, moe_layers);
    if shared > 0 {
        gated_mlp(
            &mut b,
            &format!("{mlp}.shared_experts"),
            hidden,
            moe_inter * shared,
            moe_layers,
            false,
        );
    }
    b.norm("model.norm", hidden, 1, false);
    head(&mut b, "lm_head.weight", vocab, hidden, tied);
    if moe_layers > 0 && experts > 0 {
        notes.push(format!(
            "each MoE router also holds an e_score_correction_bias of {experts} values, a buffer in transformers (not counted as parameters; DeepSeek's own code counts it, giving {} more)",
            crate::units::group_thousands((experts * moe_layers) as u128)
        ));
    }
    if let Some(n) = f.opt_u64("num_nextn_predict_layers")?.filter(|n| *n > 0) {
        notes.push(format!(
            "the checkpoint also stores {n} multi-token-prediction layer(s) that transformers does not load; they are not counted"
        ));
    }
    // modeling_deepseek_v3.py (transformers 5.x, checked with 5.24): the cache is updated while
    // the latent is still compressed — `kv_nope` (kv_lora_rank) in the key slot and `k_rot`
    // (qk_rope_head_dim) in the value slot — so it holds kv_lora_rank + rope values per token
    // and layer, as vLLM and SGLang do. The decompressed K and V are shown apart.
    let kv = KvLayout {
        layers: (0..layers)
            .map(|_| KvLayer {
                key_width: kv_lora,
                value_width: rope,
                window: None,
            })
            .collect(),
        latent: Some(LatentLayout {
            width: heads * (qk_dim + v_dim),
            kv_lora_rank: kv_lora,
            rope_dim: rope,
        }),
        description: format!(
            "{layers} layers × {} values (latent {kv_lora} + rope {rope}: K and V compressed, as transformers 5 caches them)",
            kv_lora + rope
        ),
    };
    let dims = Dims {
        hidden_size: hidden,
        num_layers: layers,
        num_heads: heads,
        num_kv_heads: heads,
        head_dim: qk_dim,
        vocab_size: vocab,
        intermediate_size: inter,
        gated_mlp: true,
    };
    Ok(Architecture {
        moe: Some(Moe {
            experts,
            active,
            moe_layers,
            expert_intermediate: moe_inter,
            shared_intermediate: moe_inter * shared,
        }),
        kv,
        ..simple(Family::DeepseekV3, b, Vec::new(), dims, tied)
    })
}
