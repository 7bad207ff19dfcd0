import shim, torch, warnings, contextlib, sys
warnings.filterwarnings("ignore")
from torch.utils._python_dispatch import TorchDispatchMode
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv, DimDynamic
from torch._dynamo.source import ConstantSource
class FakeCuda(FakeTensorMode): avoid_device_init = property(lambda self: True)
class Above(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.size.default: print("      Above saw aten.size.default")
        return func(*args, **(kwargs or {}))
for above in (False, True):
  for dev in ("cuda", "meta"):
    env = ShapeEnv(); mode = FakeCuda(shape_env=env, allow_non_fake_inputs=True)
    s = ConstantSource("b"); B = env.create_symintnode(env.create_symbol(4, source=s, dynamic_dim=DimDynamic.DYNAMIC), hint=4, source=s)
    with mode, (Above() if above else contextlib.nullcontext()):
        x = torch.empty(B, 3, 8, device=dev); w = torch.empty(16, 8, device=dev)
        y = torch.nn.functional.linear(x, w)
    print(f"torch {torch.__version__} mode above fake={above} device={dev}: linear 3-D -> {list(y.shape)} replacements={env.replacements}")
