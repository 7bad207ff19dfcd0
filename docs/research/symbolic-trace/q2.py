import shim
import torch, sympy, torch.nn as nn, torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv, DimDynamic
from torch._dynamo.source import ConstantSource
class FakeCuda(FakeTensorMode):                     # as session.py's FakeCudaMode
    avoid_device_init = property(lambda self: True)
def batch_symbol(env, hint, name="batch"):
    src = ConstantSource(name)
    sym = env.create_symbol(hint, source=src, dynamic_dim=DimDynamic.DYNAMIC)
    return env.create_symintnode(sym, hint=hint, source=src)
for zo in (True, False):
    env = ShapeEnv(specialize_zero_one=zo)
    b = batch_symbol(env, 4)
    print(f"specialize_zero_one={zo}: b={b!r} type={type(b).__name__} range={env.var_to_range[b.node.expr]} hint={env.backed_var_to_val}")
env = ShapeEnv(specialize_zero_one=False)
mode = FakeCuda(shape_env=env, allow_non_fake_inputs=True)
b = batch_symbol(env, 4)
with mode:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64, device="cuda"), nn.GELU(), nn.Linear(64, 10, device="cuda"))
    x = torch.randn(b, 32, device="cuda"); y = torch.randint(0, 10, (b,), device="cuda")
    print("x", x.shape, x.device, "storage", x.untyped_storage().nbytes(), "| param", model[0].weight.untyped_storage().nbytes())
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    print("loss", loss.shape, "grad w0", model[0].weight.grad.shape, model[0].weight.grad.untyped_storage().nbytes())
    opt = torch.optim.AdamW(model.parameters()); opt.step()
    print("adam state", opt.state[model[0].weight]["exp_avg"].untyped_storage().nbytes())
print("guards", [str(g.expr) for g in env.guards], "repl", env.replacements, "range", env.var_to_range)
print("cache", FakeTensorMode.cache_hits, FakeTensorMode.cache_misses, dict(FakeTensorMode.cache_bypasses), "shape_env cache entries", len(env.fake_tensor_cache))
