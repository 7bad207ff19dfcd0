import shim, torch, warnings
warnings.filterwarnings("ignore")
from torch.utils._python_dispatch import TorchDispatchMode
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv, DimDynamic
from torch._dynamo.source import ConstantSource
class FakeCuda(FakeTensorMode): avoid_device_init = property(lambda self: True)
class Ops(TorchDispatchMode):
    def __init__(self): super().__init__(); self.ops = []
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func).replace("prim.device","prim").replace("aten.", "").replace(".default", "").replace(".Tensor", "")); return func(*args, **(kwargs or {}))
cases = {"x[:, 0:]": lambda x: x[:, 0:], "x[:, -n:] (n=L)": lambda x: x[:, -x.shape[1]:], "x[:, :L]": lambda x: x[:, :x.shape[1]],
         "x[:B]": lambda x: x[:x.shape[0]], "x[:, :8]": lambda x: x[:, :8], "x.narrow(1,0,L)": lambda x: x.narrow(1, 0, x.shape[1])}
for name, f in cases.items():
    row = []
    for symbolic in (False, True):
        env = ShapeEnv() if symbolic else None
        B = 4
        if symbolic:
            s = ConstantSource("b"); B = env.create_symintnode(env.create_symbol(4, source=s, dynamic_dim=DimDynamic.DYNAMIC), hint=4, source=s); env.constrain_symbol_range(B.node.expr, 2, 1 << 20)
        mode = FakeCuda(shape_env=env, allow_non_fake_inputs=True)
        with mode:
            w = torch.empty(B, 16, device="cuda", requires_grad=True)
            rec = Ops()
            with rec:
                f(w * 2).sum().backward()
        row.append(" ".join(o for o in rec.ops if o not in ("mul", "sum", "ones_like", "expand", "detach", "prim")))
    print(f"{name:18s} concrete: {row[0]:40s} | symbolic: {row[1]}")
