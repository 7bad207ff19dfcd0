# Prints the Python stack (and the op being dispatched) when a symbol is specialised to a constant.
import traceback, sympy
from torch.fx.experimental.symbolic_shapes import ShapeEnv
_orig = ShapeEnv._set_replacement
def _set_replacement(self, a, tgt, msg):
    if isinstance(tgt, sympy.Integer):
        st = [f"{f.filename.split('site-packages/')[-1]}:{f.lineno} {f.name}" for f in traceback.extract_stack()[:-1]]
        st = [s for s in st if "fx/experimental" not in s and "sym_node" not in s][-14:]
        import sys as _s
        f = _s._getframe(); op = None
        while f is not None:
            if f.f_code.co_name == "_dispatch_impl" and "func" in f.f_locals: op = f.f_locals["func"]; break
            f = f.f_back
        print(f"   op={op}")
        print(f"   SPECIALISED {a} -> {tgt} ({msg})\n      " + "\n      ".join(st))
    return _orig(self, a, tgt, msg)
ShapeEnv._set_replacement = _set_replacement
