import json, torch, sympy
from h import fresh
from serial import to_json, ev
env, mode, x = fresh()
s = x.shape[0]
with mode:
    outs = {"chunk": x.chunk(3, 0)[0], "unfold": x.unfold(0, 2, 2), "pad": torch.empty(torch.sym_max(s, 8) + s // 3, 8),
            "ceil": torch.empty(32 * ((s + 31) // 32)), "effattn_lse": torch.empty(-(-s // 32) * 32, 4)}
    outs["reshape"] = x.reshape(2, -1, 4)
    outs["ceiltoint"] = torch.empty(__import__("math").ceil(s / 3))
sym = next(iter(env.var_to_range))
for name, t in outs.items():
    n = t.numel() * t.element_size()       # bytes of a fresh contiguous tensor of this shape
    e = sympy.sympify(n.node.expr if isinstance(n, torch.SymInt) else n)
    j = to_json(e)
    bad = [v for v in range(1, 200) if ev(j, {sym.name: v}) != int(e.xreplace({sym: v}))]
    print(f"{name:12s} {str(e):44s} json={json.dumps(j)[:90]} mismatches={bad[:3]}")
gj = [to_json(g.expr) for g in env.guards]
print("guards:", [str(g.expr) for g in env.guards])
print("valid values 1..40:", [v for v in range(1, 41) if all(ev(g, {sym.name: v}) for g in gj)])
