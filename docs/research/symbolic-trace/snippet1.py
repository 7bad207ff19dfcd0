import torch, torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv, DimDynamic, StatelessSymbolicContext
from torch._dynamo.source import ConstantSource

env = ShapeEnv(specialize_zero_one=False)              # 1 stays a value to test, not a constant
mode = FakeTensorMode(shape_env=env, allow_non_fake_inputs=True)
src = ConstantSource("batch")
sym = env.create_symbol(4, source=src, dynamic_dim=DimDynamic.DYNAMIC)   # backed: hint 4
env.constrain_symbol_range(sym, 1, 1 << 20)            # finite: see "slices" below
b = env.create_symintnode(sym, hint=4, source=src)     # a SymInt the workload gets as `batch`
with mode:
    x = torch.randn(b, 8, device="meta")
    w = torch.randn(16, 8, device="meta")
    steps = {"x": x, "linear": F.linear(x, w)}
    steps["cat"] = torch.cat([x, steps["linear"]], 1)
    steps["softmax"] = steps["cat"].softmax(-1)
    steps["view(-1)"] = steps["softmax"].view(-1)
    steps["x@x.T"] = x @ x.T
for k, t in steps.items():
    n = t.untyped_storage().nbytes()                   # a SymInt: n.node.expr is sympy
    print(f"{k:9s} sizes={[getattr(d, 'node', d) and (d.node.expr if isinstance(d, torch.SymInt) else d) for d in t.shape]} "
          f"nbytes={n.node.expr if isinstance(n, torch.SymInt) else n} (hint {n.node.hint if isinstance(n, torch.SymInt) else n})")
print("guards", [str(g.expr) for g in env.guards], "replacements", env.replacements, "range", env.var_to_range[sym])
# from_tensor variant: sizes symbolic, but the storage keeps the real tensor's byte count
y = mode.from_tensor(torch.empty(4, 8), source=ConstantSource("y"),
                     symbolic_context=StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC]))
print("from_tensor:", y.shape, "storage nbytes", y.untyped_storage().nbytes())
