import shim, trap, padfix, torch, warnings, os
warnings.filterwarnings("ignore")
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv, DimDynamic
from torch._dynamo.source import ConstantSource
from transformers import LlamaConfig, LlamaForCausalLM, DynamicCache
class FakeCuda(FakeTensorMode): avoid_device_init = property(lambda self: True)
for vary in ("batch", "prompt"):
    env = ShapeEnv(specialize_zero_one=False); mode = FakeCuda(shape_env=env, allow_non_fake_inputs=True)
    def sym(h, n):
        s = ConstantSource(n); r = env.create_symintnode(env.create_symbol(h, source=s, dynamic_dim=DimDynamic.DYNAMIC), hint=h, source=s)
        env.constrain_symbol_range(r.node.expr, 1, 1 << 20); return r
    B = sym(4, "batch") if vary == "batch" else 2
    P = sym(16, "prompt") if vary == "prompt" else 16
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    with mode, padfix.PadFix(), torch.no_grad():
        with torch.device("cuda"): model = LlamaForCausalLM(cfg)
        ids = torch.randint(0, 128, (B, P), device="cuda"); cache = DynamicCache(config=cfg)
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), past_key_values=cache, use_cache=True, logits_to_keep=1)
        for step in range(3):
            tok = out.logits[:, -1:].argmax(-1)
            out = model(input_ids=tok, past_key_values=out.past_key_values, use_cache=True, logits_to_keep=1)
        k = out.past_key_values.layers[0].keys
    print(f"vary={vary}: cache keys {list(k.shape)} nbytes={k.untyped_storage().nbytes()} guards={sorted({str(g.expr) for g in env.guards})} repl={env.replacements}")
