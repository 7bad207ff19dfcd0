import shim, trap, padfix, sys, os, traceback, warnings, torch, time
warnings.filterwarnings("ignore")
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv, DimDynamic
from torch._dynamo.source import ConstantSource
import transformers
from transformers import LlamaConfig, LlamaForCausalLM
class FakeCuda(FakeTensorMode):
    avoid_device_init = property(lambda self: True)
def sym(env, hint, name):
    src = ConstantSource(name)
    return env.create_symintnode(env.create_symbol(hint, source=src, dynamic_dim=DimDynamic.DYNAMIC), hint=hint, source=src)
def loc(g):
    f = g.sloc.framework_loc
    if f is None: return "?"
    if isinstance(f, str): return f
    p = f.filename; p = p.split("site-packages/")[-1]
    return f"{p}:{f.lineno}"
def trial(vary, attn, mask, backward=True):
    env = ShapeEnv(specialize_zero_one=False)
    mode = FakeCuda(shape_env=env, allow_non_fake_inputs=True)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, attn_implementation=attn)
    B = sym(env, 4, "batch") if vary == "batch" else 2
    L = sym(env, 16, "seq") if vary == "seq" else 16
    t0 = time.time(); step = "build"
    try:
        with mode, (padfix.PadFix() if os.environ.get('PADFIX') else __import__('contextlib').nullcontext()):
            with torch.device("cuda"): model = LlamaForCausalLM(cfg)
            step = "inputs"
            ids = torch.randint(0, 128, (B, L), device="cuda")
            kw = dict(attention_mask=torch.ones_like(ids)) if mask else {}
            step = "forward"
            out = model(input_ids=ids, labels=ids, use_cache=False, **kw)
            step = f"logits {list(out.logits.shape)} nbytes={out.logits.untyped_storage().nbytes()}; backward"
            if backward: out.loss.backward()
            step += " ok"
        res = "OK"
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)
        where = [f"{fr.filename.split('site-packages/')[-1]}:{fr.lineno}" for fr in tb if "transformers" in fr.filename][-1:]
        res = f"RAISES {type(e).__name__}: {str(e).splitlines()[0][:150]} at {where}"
    print(f"== vary={vary} attn={attn} mask={mask}: {res} ({time.time()-t0:.1f}s) [{step}]")
    print("   replacements:", {str(k): str(v) for k, v in env.replacements.items()}, "range:", {str(k): str(v) for k, v in env.var_to_range.items() if str(k)[0] == 's'})
    seen = {}
    for g in env.guards: seen.setdefault(str(g.expr), loc(g))
    for e_, l in list(seen.items())[:14]: print(f"   guard {e_:40s} @ {l}")
    if len(seen) > 14: print(f"   ... {len(seen)} distinct guards")
print("transformers", transformers.__version__, "torch", torch.__version__)
for args in [a.split(",") for a in sys.argv[1:]]:
    trial(args[0], args[1], args[2] == "1")
