import sys, warnings, torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv, StatelessSymbolicContext, DimDynamic
from torch._dynamo.source import ConstantSource
import torch.nn.functional as F
print("torch", torch.__version__)
env = ShapeEnv(specialize_zero_one=False, duck_shape=False)   # hint 1 must not become a constant
mode = FakeTensorMode(shape_env=env, allow_non_fake_inputs=True)
dev = sys.argv[1] if len(sys.argv) > 1 else "meta"
real = torch.empty(4, 8, device="meta")                     # the hint: batch=4
ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC])
x = mode.from_tensor(real, symbolic_context=ctx, source=ConstantSource("batch"))
if dev == "cuda":
    with mode: x = x.to("cuda") if False else x
print("x", x.shape, x.device, "stride", x.stride())
seen=[0]
def g():
    new=[str(x.expr) for x in env.guards[seen[0]:]]; seen[0]=len(env.guards)
    return f"  guards+={new} repl={ {str(k):str(v) for k,v in env.replacements.items()} }"
def nb(t):
    n = t.untyped_storage().nbytes()
    return type(n).__name__, n
with mode:
    w = torch.empty(16, 8, device=x.device)
    y = F.linear(x, w); print("linear", y.shape, nb(y), g())
    c = torch.cat([x, x, y[:, :8]], 0); print("cat", c.shape, nb(c), g())
    s = torch.softmax(c, -1); print("softmax", s.shape, nb(s), g())
    v = s.view(-1); print("view(-1)", v.shape, nb(v), "same storage", v.untyped_storage()._cdata == s.untyped_storage()._cdata, g())
    r = s.reshape(2, -1, 4); print("reshape(2,-1,4)", r.shape, nb(r), g())
    t = c.t().contiguous(); print("t.contiguous", t.shape, t.stride(), nb(t), g())
    p = F.pad(x, (0, 0, 0, 3)); print("pad", p.shape, nb(p), g())
    u = x.unfold(0, 2, 2); print("unfold", u.shape, g())
    ch = x.chunk(3, 0); print("chunk(3)", [tuple(a.shape) for a in ch], g())
    sm = x.sum(0); print("sum(0)", sm.shape, nb(sm), g())
    mm = x @ x.t(); print("x@x.T", mm.shape, nb(mm), g())
e = nb(mm)[1]
print("expr", e.node.expr, "srepr", __import__("sympy").srepr(e.node.expr))
print("hint", e.node.hint, "eval at s0=7", e.node.expr.subs({e.node.expr.free_symbols.pop(): 7}))
print("guards", [str(g.expr) for g in env.guards])
print("replacements", env.replacements)
print("var_to_range", {str(k): str(v) for k, v in env.var_to_range.items()})
print("deferred", env.deferred_runtime_asserts)
