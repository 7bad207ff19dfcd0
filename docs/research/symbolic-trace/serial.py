"""sympy size/guard expression -> JSON tree a Rust evaluator can walk; plus the reference evaluator."""
import sympy
from torch.utils._sympy import functions as F
OPS = {sympy.Add: "add", sympy.Mul: "mul", F.FloorDiv: "floordiv", F.CleanDiv: "floordiv", F.PythonMod: "mod",
       F.Mod: "mod", sympy.Mod: "mod", F.Max: "max", F.Min: "min", F.CeilDiv: "ceildiv", F.ModularIndexing: "modidx",
       F.PowByNatural: "pow", sympy.Pow: "pow", F.CeilToInt: "ceil", F.FloorToInt: "floor", F.IntTrueDiv: "truediv",
       sympy.Eq: "eq", sympy.Ne: "ne", sympy.Lt: "lt", sympy.Le: "le", sympy.Gt: "gt", sympy.Ge: "ge",
       sympy.And: "and", sympy.Or: "or", sympy.Not: "not"}
def to_json(e):
    if e is sympy.true or e is sympy.false: return bool(e)
    if isinstance(e, sympy.Integer): return int(e)
    if isinstance(e, sympy.Rational): return {"op": "rational", "args": [int(e.p), int(e.q)]}
    if isinstance(e, sympy.Symbol): return {"sym": e.name}
    for cls in type(e).__mro__:
        if cls in OPS: return {"op": OPS[cls], "args": [to_json(a) for a in e.args]}
    raise NotImplementedError(f"{type(e).__name__}: {e}")      # a new sympy function: refuse, never guess
def ev(j, env):   # what Rust would do: i128 arithmetic, Python floor semantics; truediv only under ceil/floor
    if isinstance(j, bool) or isinstance(j, int): return j
    if "sym" in j: return env[j["sym"]]
    op, a = j["op"], j["args"]
    if op == "truediv": return sympy.Rational(ev(a[0], env), ev(a[1], env))
    v = [ev(x, env) for x in a]
    import math, functools
    return {"add": lambda: sum(v), "mul": lambda: functools.reduce(lambda p, q: p * q, v, 1),
            "floordiv": lambda: v[0] // v[1], "mod": lambda: v[0] % v[1], "max": lambda: max(v), "min": lambda: min(v),
            "ceildiv": lambda: -(-v[0] // v[1]), "modidx": lambda: (v[0] // v[1]) % v[2], "pow": lambda: v[0] ** v[1],
            "ceil": lambda: math.ceil(v[0]), "floor": lambda: math.floor(v[0]), "rational": lambda: sympy.Rational(v[0], v[1]),
            "eq": lambda: v[0] == v[1], "ne": lambda: v[0] != v[1], "lt": lambda: v[0] < v[1], "le": lambda: v[0] <= v[1],
            "gt": lambda: v[0] > v[1], "ge": lambda: v[0] >= v[1], "and": lambda: all(v), "or": lambda: any(v), "not": lambda: not v[0]}[op]()
