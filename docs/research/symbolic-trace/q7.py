# One symbolic Llama train step vs concrete runs: every new storage's nbytes, in order.
import shim, padfix, json, sys, warnings, collections, torch, sympy
warnings.filterwarnings("ignore")
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv, DimDynamic
from torch._dynamo.source import ConstantSource
from transformers import LlamaConfig, LlamaForCausalLM
from serial import to_json, ev
import os
RANGE = os.environ.get('RANGE') == '1'
class FakeCuda(FakeTensorMode): avoid_device_init = property(lambda self: True)
class Allocs(TorchDispatchMode):             # the tracker's job, reduced: new storages' nbytes, in order
    def __init__(self): super().__init__(); self.seen = set(); self.sizes = []; self.keep = []; self.ops = []
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                st = t.untyped_storage(); k = st._cdata
                if k not in self.seen: self.seen.add(k); self.keep.append(st); self.sizes.append(st.nbytes()); self.ops.append(str(func))
        return out
def step(batch, seq, symbolic):
    env = ShapeEnv(specialize_zero_one=False) if symbolic else None
    mode = FakeCuda(shape_env=env, allow_non_fake_inputs=True)
    def sym(h, n):
        s = ConstantSource(n); r = env.create_symintnode(env.create_symbol(h, source=s, dynamic_dim=DimDynamic.DYNAMIC), hint=h, source=s)
        if RANGE: env.constrain_symbol_range(r.node.expr, 1, 1 << 20)
        return r
    if symbolic == "batch": batch = sym(batch, "batch")
    if symbolic == "seq": seq = sym(seq, "seq")
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, attn_implementation=os.environ.get("ATTN", "sdpa"))
    rec = Allocs()
    with mode, padfix.PadFix(), rec:
        with torch.device("cuda"): model = LlamaForCausalLM(cfg)
        opt = torch.optim.AdamW(model.parameters())
        ids = torch.randint(0, 128, (batch, seq), device="cuda")
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids, use_cache=False)
        out.loss.backward(); opt.step(); opt.zero_grad()
    return env, rec.sizes, rec.ops
for vary in os.environ.get("VARY", "batch,seq").split(","):
    env, sizes, ops = step(4, 16, vary)
    exprs = [sympy.expand(sympy.sympify(s.node.expr if isinstance(s, torch.SymInt) else s)) for s in sizes]
    kinds = collections.Counter(type(e).__name__ for e in exprs)
    funcs = sorted({type(f).__name__ for e in exprs for f in sympy.preorder_traversal(e) if isinstance(f, sympy.Function)})
    guards = [to_json(g.expr) for g in env.guards]
    print(f"== symbolic {vary}: {len(sizes)} allocations, {len(set(exprs))} distinct exprs, top-level kinds {dict(kinds)}, functions {funcs}")
    print("   guards", [str(g.expr) for g in env.guards], "range", {str(k): str(v) for k, v in env.var_to_range.items()})
    name = next(iter(env.var_to_range)).name
    js = [to_json(e) for e in exprs]
    print("   json sample:", json.dumps(js[-1]) if not isinstance(js[-1], int) else "", json.dumps(max(js, key=lambda j: len(json.dumps(j)))))
    for v in (2, 3, 7, 100):
        ok = all(ev(g, {name: v}) for g in guards) and v in range(int(env.var_to_range[sympy.Symbol(name, integer=True, positive=True)].lower) if False else 2, 10**9)
        _, real, rops = step(v if vary == "batch" else 4, v if vary == "seq" else 16, None)
        pred = [ev(j, {name: v}) for j in js]
        print(f"   {vary}={v}: guards hold={ok}; concrete run {len(real)} allocs, {sum(real)} B; symbolic evaluated {len(pred)} allocs, {sum(pred)} B; identical sequence={pred == real}")
        if pred != real:
            import difflib
            for l in list(difflib.unified_diff([f"{o} {b}" for o, b in zip(rops, real)], [f"{o} {b}" for o, b in zip(ops, pred)], lineterm="", n=0))[:12]: print("      ", l)
