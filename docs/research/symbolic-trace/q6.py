import shim, trap, torch, warnings
warnings.filterwarnings("ignore")
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv, DimDynamic
from torch._dynamo.source import ConstantSource
class FakeCuda(FakeTensorMode): avoid_device_init = property(lambda self: True)
def sym(env, hint, name):
    src = ConstantSource(name)
    return env.create_symintnode(env.create_symbol(hint, source=src, dynamic_dim=DimDynamic.DYNAMIC), hint=hint, source=src)
a = torch.ops.aten
for name in ("flash", "efficient", "cudnn"):
    env = ShapeEnv(specialize_zero_one=False); mode = FakeCuda(shape_env=env, allow_non_fake_inputs=True)
    B, L = sym(env, 4, "batch"), sym(env, 128, "seq")
    try:
        with mode:
            q = torch.randn(B, 8, L, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            if name == "flash": out = a._scaled_dot_product_flash_attention(q, q, q, 0.0, True)
            elif name == "efficient": out = a._scaled_dot_product_efficient_attention(q, q, q, None, True, 0.0, True)
            else: out = a._scaled_dot_product_cudnn_attention(q, q, q, None, True, 0.0, True)
            sizes = [(list(o.shape), o.untyped_storage().nbytes()) for o in out if isinstance(o, torch.Tensor) and o.dim() > 0]
            out[0].sum().backward()
            g = q.grad.untyped_storage().nbytes()
        print(name, "OK outputs", sizes, "grad", g)
    except Exception as e:
        print(name, "RAISES", type(e).__name__, str(e).splitlines()[0][:150])
    print("   guards", sorted({str(g.expr) for g in env.guards}), "repl", env.replacements)
