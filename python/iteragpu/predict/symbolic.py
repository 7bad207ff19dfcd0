"""One trace for every value of a predicted sweep's dimension: the batch, the context or the
prompt's length handed to a built-in workload as a PyTorch symbol, not a number.

The CLI asks for it on one trial of a sweep (`ENV`: each field's range of values). At the
workload's build point (`built_once.resume`, where nothing the field decides has been read yet),
`begin` puts a `ShapeEnv` behind the session's FakeTensorMode, as dynamo does, and gives the
workload a backed SymInt for each field (its hint: the trial's own value; its range: the sweep's).
The run is then the workload's own code on fake tensors whose sizes are expressions of the
symbols:

* each storage's size and shape are sent as expressions (`expr` events, JSON trees the CLI
  evaluates exactly, `prediction/symbolic.rs`), beside their values at the hint;
* every decision the run took on a symbol (`if batch > 8:`, a contiguity test at size 1) is a
  guard PyTorch records; `finish` sends them, with each field's range, in the `domain` event. A
  value outside them gets its own run: the trace is never stretched past what it saw;
* a symbol made concrete (`int(batch)`, `range(batch)`, an op whose kernel reads the sizes as
  numbers), an expression this module cannot write, or a run that does not end normally sends no
  domain, or one `pinned` with the reason: the CLI then predicts each value on its own.

`aten.constant_pad_nd` (the causal loss's label shift) is run through its Python meta: its C++
kernel reads the sizes as numbers and would make the symbol concrete.

Verified on torch 2.15 (docs/research/symbolic-trace/README.md); older releases make the symbol
concrete inside `F.linear` (torch 2.6) and are predicted value by value (`unsupported`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable

# The variable that asks for a symbolic trace: a JSON object, each field's [lowest, highest] value.
ENV: str = "ITERAGPU_PREDICT_SYMBOLIC_TRACE"
# The spec's fields a sweep may trace symbolically.
FIELDS: frozenset[str] = frozenset({"batch", "context", "prompt_tokens"})
# The oldest torch on which one symbolic trace was checked equal to per-value runs.
OLDEST: tuple[int, int] = (2, 15)

# The trace of this process (None when no symbolic trace was asked or began).
ACTIVE: Trace | None = None
# Why a trace was asked and not made (this torch, a field that is not a number).
REFUSED: str | None = None


class Unsupported(Exception):
    """An expression this module cannot write exactly: the trace counts for its hint alone."""


def unsupported(torch: Any) -> str | None:
    """Why this torch cannot trace a dimension symbolically, or None."""
    try:
        version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    except ValueError:
        return f"torch {torch.__version__}'s version could not be read"
    if version < OLDEST:
        return f"torch {torch.__version__} makes the symbol concrete inside F.linear; one trace for every value was checked from torch {OLDEST[0]}.{OLDEST[1]}"
    try:
        from torch._meta_registrations import _constant_pad_nd_meta  # noqa: F401
    except ImportError:
        return f"torch {torch.__version__} has no Python meta for constant_pad_nd"
    return None


class Trace:
    """The symbols of one run, the expressions sent so far and why the trace cannot be reused."""

    def __init__(self, env: Any, emit: Callable[[str, Any], None], fields: dict[str, Any]) -> None:
        self.env = env
        self.emit = emit
        self.fields = fields  # field -> its sympy symbol
        self.names = {sym.name: field for field, sym in fields.items()}  # symbol -> field
        self.ids: dict[Any, int] = {}
        self.pinned: list[str] = []

    def ref(self, value: Any) -> Any:
        """`value`'s expression id ({"$expr": id}) when it depends on a symbol, else the number."""
        got = self.expr_id(value)
        return hint(value) if got is None else {"$expr": got}

    def expr_id(self, value: Any) -> int | None:
        """The id of `value`'s expression, sent once; None when it is a plain number."""
        import sympy

        if type(value) is int:
            return None
        expr = sympy.expand(value.node.expr)
        if isinstance(expr, sympy.Integer):
            return None
        got = self.ids.get(expr)
        if got is None:
            try:
                tree = self.tree(expr)
            except Unsupported as exc:
                self.pin(str(exc))
                return None
            got = len(self.ids)
            self.ids[expr] = got
            self.emit("expr", {"id": got, "tree": tree})
        return got

    def alloc(self, nbytes: Any, shape: list[Any]) -> tuple[int, list[int], list[int | None] | None]:
        """An allocation's bytes and shape at the hint, and their expression ids (None: none)."""
        ids = [self.expr_id(nbytes), *(self.expr_id(d) for d in shape)]
        return hint(nbytes), [hint(d) for d in shape], ids if any(i is not None for i in ids) else None

    def pin(self, why: str) -> None:
        if why not in self.pinned:
            self.pinned.append(why)

    def tree(self, e: Any) -> Any:
        """`e` as the JSON tree `prediction/symbolic.rs` evaluates; Unsupported for anything else."""
        import sympy
        from torch.utils._sympy import functions as F

        if e is sympy.true or e is sympy.false:
            return bool(e)
        if isinstance(e, sympy.Integer):
            return int(e)
        if isinstance(e, sympy.Symbol):
            field = self.names.get(e.name)
            if field is None:
                raise Unsupported(f"a size depends on the data ({e.name}), not only on the traced dimensions")
            return {"sym": field}
        if isinstance(e, sympy.Rational):
            return {"op": "rational", "args": [int(e.p), int(e.q)]}
        ops: dict[Any, str] = {
            sympy.Add: "add", sympy.Mul: "mul", sympy.Pow: "pow", F.PowByNatural: "pow",
            F.FloorDiv: "floordiv", F.CleanDiv: "floordiv", F.CeilDiv: "ceildiv",
            F.PythonMod: "mod", F.Mod: "mod", sympy.Mod: "mod", F.ModularIndexing: "modidx",
            F.Max: "max", F.Min: "min", F.CeilToInt: "ceil", F.FloorToInt: "floor", F.IntTrueDiv: "truediv",
            sympy.Eq: "eq", sympy.Ne: "ne", sympy.Lt: "lt", sympy.Le: "le", sympy.Gt: "gt", sympy.Ge: "ge",
            sympy.And: "and", sympy.Or: "or", sympy.Not: "not",
        }  # fmt: skip
        for cls in type(e).__mro__:
            op = ops.get(cls)
            if op is not None:
                return {"op": op, "args": [self.tree(a) for a in e.args]}
        raise Unsupported(f"an expression iteragpu does not evaluate ({type(e).__name__}: {e})")

    def domain(self) -> dict[str, Any]:
        """Each field's symbol, hint and range, the guards the run took, and why the trace counts
        for its hint alone (empty when it counts for every value that passes the guards)."""
        import sympy

        env = self.env
        fields: dict[str, Any] = {}
        for field, sym in self.fields.items():
            replaced = env.replacements.get(sym)
            if replaced is not None:
                self.pin(f"the run made {field} {'concrete' if isinstance(replaced, sympy.Integer) else 'equal to another dimension'} ({sym} = {replaced})")
            bounds = env.var_to_range.get(sym)
            low = int(bounds.lower) if bounds is not None and bounds.lower.is_finite else None
            high = int(bounds.upper) if bounds is not None and bounds.upper.is_finite else None
            fields[field] = {"hint": int(_hints(env)[sym]), "lo": low, "hi": high}
        guards: list[Any] = []
        for guard in env.guards:
            try:
                tree = self.tree(guard.expr)
            except Unsupported as exc:
                self.pin(f"a guard: {exc}")
                continue
            if tree not in guards:
                guards.append(tree)
        return {"fields": fields, "guards": guards, "pinned": list(self.pinned)}


def _hints(env: Any) -> dict[Any, Any]:
    """The symbols' values at the hint (renamed from `var_to_val` in recent torch)."""
    return getattr(env, "backed_var_to_val", None) or env.var_to_val


def hint(value: Any) -> int:
    """A size's value at the hint, without making a symbol concrete."""
    if type(value) is int:
        return value
    got = value.node.hint
    return int(got) if got is not None else int(value)


def begin(torch: Any, mode: Any, emit: Callable[[str, Any], None], tracker: Any, notes: list[str], spec: Any) -> Any:
    """`spec` with the fields `ENV` names as symbols, when this trial was asked to trace them and
    this torch can; `spec` itself otherwise (with a note saying why, when asked)."""
    global ACTIVE
    text = os.environ.get(ENV)
    if not text or ACTIVE is not None:
        return spec
    try:
        asked = json.loads(text)
        ranges = {str(k): (int(v[0]), int(v[1])) for k, v in asked.items()}
    except (ValueError, TypeError, IndexError, AttributeError):
        notes.append(f"{ENV}={text!r} is not a JSON object of [lowest, highest] per field: this trial was predicted at its own values only")
        return spec
    why = unsupported(torch)
    bad = sorted(set(ranges) - FIELDS) or [f for f in ranges if type(getattr(spec, f, None)) is not int]
    if why is None and bad:
        why = f"{', '.join(bad)} cannot be traced symbolically"
    if why is not None:
        global REFUSED
        REFUSED = why
        return spec
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

    env = ShapeEnv(specialize_zero_one=False)
    # Only the traced fields are symbols: a real tensor made fake keeps its sizes as numbers.
    mode.shape_env = env
    mode.static_shapes = True
    symbols: dict[str, Any] = {}
    values: dict[str, Any] = {}
    for field, (low, high) in sorted(ranges.items()):
        value = getattr(spec, field)
        source = ConstantSource(f"iteragpu_{field}")
        sym = env.create_symbol(value, source=source, dynamic_dim=DimDynamic.DYNAMIC)
        # A finite range: an unbounded one takes general paths (a full slice kept as a slice).
        env.constrain_symbol_range(sym, min(low, value), max(high, value))
        symbols[field] = sym
        values[field] = env.create_symintnode(sym, hint=value, source=source)
    ACTIVE = Trace(env, emit, symbols)
    tracker.symbolic = ACTIVE
    return dataclasses.replace(spec, **values)


def finish(emit: Callable[[str, Any], None]) -> None:
    """Sends the trace's domain (once), after a run that ended normally."""
    global ACTIVE, REFUSED
    trace = ACTIVE
    if trace is None:
        if REFUSED is not None:
            # A run of the values as given: a domain without fields, pinned to them.
            emit("domain", {"fields": {}, "guards": [], "pinned": [REFUSED]})
            REFUSED = None
        return
    ACTIVE = None
    emit("domain", trace.domain())


def json_default(value: Any) -> Any:
    """The events' JSON for what json cannot write: a symbol's expression id, else its text."""
    trace = ACTIVE
    if trace is not None and type(value).__name__ == "SymInt":
        return trace.ref(value)
    return str(value)


def adjust(func: Any, args: tuple[Any, ...]) -> tuple[Callable[..., Any] | None, tuple[Any, ...]]:
    """What a symbolic trace runs for `func(*args)`: a Python function to call instead (None: the
    op itself), and the arguments.

    * `constant_pad_nd`'s C++ kernel reads the sizes as numbers, making the symbol concrete: its
      Python meta keeps it;
    * the C++ `cat` skips legacy empty 1-d tensors (a DynamicCache's first layer state), which the
      decomposition a symbolic run takes refuses: they are left out, as the kernel does.
    """
    import torch

    aten = torch.ops.aten
    if func is aten.constant_pad_nd.default and args[0]._has_symbolic_sizes_strides:
        from torch._meta_registrations import _constant_pad_nd_meta

        return _constant_pad_nd_meta, args
    if func is aten.cat.default:
        kept = [t for t in args[0] if not (t.dim() == 1 and type(t.shape[0]) is int and t.shape[0] == 0)]
        if kept and len(kept) < len(args[0]):
            return None, (kept, *args[1:])
    return None, args
