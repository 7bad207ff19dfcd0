import torch, sympy, warnings
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv, StatelessSymbolicContext, DimDynamic
from torch._dynamo.source import ConstantSource
def fresh(hint=4, shape=(None, 8), device="meta"):
    env = ShapeEnv(specialize_zero_one=False, duck_shape=False)
    mode = FakeTensorMode(shape_env=env, allow_non_fake_inputs=True)
    real = torch.empty([hint if d is None else d for d in shape], device=device)
    dyn = [DimDynamic.DYNAMIC if d is None else DimDynamic.STATIC for d in shape]
    x = mode.from_tensor(real, symbolic_context=StatelessSymbolicContext(dynamic_sizes=dyn), source=ConstantSource("batch"))
    return env, mode, x
def _loc(sl):
    f = sl.framework_loc
    if f is None: return ''
    if isinstance(f, str): return f.split('/')[-1]
    return f"{f.filename.split('/')[-1]}:{f.lineno}"
def report(env, name, out=None, err=None):
    line = f"{name:28s}"
    if err is not None: line += f" RAISES {type(err).__name__}: {str(err).splitlines()[0][:110]}"
    elif isinstance(out, torch.Tensor):
        line += f" shape={list(out.shape)} nbytes={out.untyped_storage().nbytes()}"
    else: line += f" -> {out!r}"
    gs = [f"{g.expr} @{_loc(g.sloc)}" for g in env.guards]
    if gs: line += f"\n{'':28s} guards={gs}"
    if env.replacements: line += f" repl={ {str(k): str(v) for k, v in env.replacements.items()} }"
    dra = [str(r.expr) for v in env.deferred_runtime_asserts.values() for r in v]
    if dra: line += f" deferred={dra}"
    print(line)
def run(name, fn, **kw):
    env, mode, x = fresh(**kw)
    try:
        with mode: out = fn(x)
        report(env, name, out)
    except Exception as e:
        report(env, name, err=e)
