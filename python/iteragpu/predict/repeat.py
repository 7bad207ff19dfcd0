"""A model's repeated call without gradients, fast-forwarded: a decode step that would repeat the
last ones exactly is not run; its storage events are the last call's, replayed, and it returns a
fresh data-less output of the same shapes.

A decode loop calls its model once per token (`generate()`'s, or a hand-written one as torchtune
writes it: a static KV cache, the last token at its position). With a static cache every step
allocates and frees the same storages in the same order: predicting each of them runs every op of
the model on fake tensors again, for events that repeat. A *root* call (a module called from
outside any other module) is watched when gradients are off (`no_grad`, `inference_mode`: no graph
keeps anything of it):

* its *window* is everything the worker emitted during the call; each event's storage is either
  the window's own (allocated in it) or one of the call's input tensors (the tag that says it is
  an input); the window is *steady* when it holds storage events only (no phase boundary, no note,
  no memory query), nothing tainted, no value read from data (tracker reads, as steady.py counts
  them), no known value written into a storage older than the call, no other older storage
  touched, and the call changed no state: the module tree's parameters, buffers and plain
  attributes, and every object among its inputs (a cache: its tensors and numbers), are the same
  objects and values after the call as before;
* its *key* is the module, the call's place (the caller's frames), the modes (grad, inference,
  autocast), the inputs' structure with each tensor's shape, strides, dtype, device and category,
  and each other input's value (numbers) or identity (a cache object);
* its *output* is the same structure each call, every tensor in it a storage of its own the window
  allocated (no known values, no view) and everything else the same objects; what the window
  leaves alive is exactly that output.

After `IDENTICAL` steady windows with the same key and the same events (ids relative to each
window's first, inputs by their place among the call's inputs), a call with that key again is not
run: the last window's events are emitted again with fresh ids (the input tags applied to this
call's inputs), the placeholder counts grow as the call would have grown them, and the output is
rebuilt with fresh data-less tensors that own the replayed output storages. The CLI replays every
call's events through its allocator model, so the figures are those of the whole run; the
prediction says which module's calls were fast-forwarded (a note). `ITERAGPU_PREDICT_STEADY=0`
runs every call (the reference: `tests/integration/predict_speed.rs` holds the documents and event
streams equal but for that note).
"""

from __future__ import annotations

import sys
import threading
import types
import weakref
from typing import Any, Callable

from . import steady as steadiness

IDENTICAL: int = steadiness.IDENTICAL
# Frames of the caller that make a call's place (a decode loop's line, generate()'s own).
_PLACE_DEPTH: int = 24
# A state walk goes this deep into an input object (a cache's layers' tensors) and this wide.
_STATE_DEPTH: int = 4
_STATE_WIDTH: int = 4096
# An older storage a call advances (a counter) holds at most this many elements.
_COUNTER_ELEMENTS: int = 64


class _Same:
    """An object compared by identity (a cache passed to every call), held weakly: a record
    never keeps alive what the script let go (its frees come when they would)."""

    __slots__ = ("ref", "ident")

    def __init__(self, obj: Any) -> None:
        try:
            self.ref = weakref.ref(obj)
        except TypeError:
            raise _Unwatched from None
        self.ident = id(obj)

    @property
    def obj(self) -> Any:
        return self.ref()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Same):
            return False
        mine = self.ref()
        return mine is not None and mine is other.ref()

    def __hash__(self) -> int:
        return self.ident


_PLAIN: tuple[type, ...] = (bool, int, float, str, bytes, type(None))


class _Unwatched(Exception):
    """A call that cannot be fast-forwarded (its key or state cannot be read)."""


class _Call:
    """One root call's window: its events, what it read and wrote, its inputs and output."""

    __slots__ = ("window", "key", "inputs", "state", "storages", "written", "before", "counters")

    def __init__(self, window: steadiness._Window, key: Any, inputs: list[Any], state: Any, storages: set[int]) -> None:
        self.window = window
        self.key = key
        self.inputs = inputs  # the input tensors, in key order
        self.state = state
        self.storages = storages  # the storages of every tensor the state walk met
        self.written = False  # a known value written into an older storage that is not a counter
        # The known values of the state's small storages before the call (copies: an in-place op
        # followed on the CPU writes its base directly), and those the call wrote.
        self.before: dict[int, Any] = {}
        self.counters: set[int] = set()


class _Record:
    """A closed steady window: events as templates, the output's description."""

    __slots__ = ("key", "templates", "count", "placeholders", "loop_hits", "changes", "spec", "leaves", "counters")

    def __init__(self, key: Any, templates: list[tuple[str, str, str, int, str]], count: int, placeholders: dict[Any, int], loop_hits: dict[Any, int], changes: bool, spec: Any, leaves: list[Any], counters: tuple[tuple[int, Any, tuple[int, ...]], ...]) -> None:
        self.key = key
        self.templates = templates  # (kind, head, "own" | "input", index, rest)
        self.count = count
        self.placeholders = placeholders
        self.loop_hits = loop_hits
        self.changes = changes
        self.spec = spec
        self.leaves = leaves  # ("own", rel, size, stride, dtype, device, category) or ("same", _Same) or ("plain", value)
        self.counters = counters  # (storage id, dtype, what each call adds to each element)

    def same(self, other: _Record) -> bool:
        return (
            self.key == other.key
            and self.count == other.count
            and self.templates == other.templates
            and self.placeholders == other.placeholders
            and self.loop_hits == other.loop_hits
            and self.spec == other.spec
            and self.leaves == other.leaves
            and self.counters == other.counters
        )


class Repeats:
    """The worker's watch over root calls without gradients (installed once per prediction)."""

    def __init__(self, steady: steadiness.Steadiness) -> None:
        self.steady = steady
        self.tracker = steady.tracker
        self.local = threading.local()
        self.main = threading.main_thread()
        # module -> the last closed records of its calls (steady ones only; reset otherwise)
        self.records: weakref.WeakKeyDictionary[Any, list[_Record]] = weakref.WeakKeyDictionary()
        self.noted: set[str] = set()
        self.open: list[_Call] = []

    def install(self) -> None:
        import torch

        steady = self.steady
        module_class = torch.nn.Module
        original = module_class.__call__
        this = self

        def call(module: Any, *args: Any, **kwargs: Any) -> Any:
            local = this.local
            if getattr(local, "depth", 0) or torch.is_grad_enabled() or threading.current_thread() is not this.main:
                local.depth = getattr(local, "depth", 0) + 1
                try:
                    return original(module, *args, **kwargs)
                finally:
                    local.depth -= 1
            return this._root(original, module, args, kwargs)

        module_class.__call__ = call
        steadiness.TAP = steady.tap
        values = self.tracker.values
        set_values, drop_values = values.set, values.drop

        def set_known(t: Any, *args: Any, **kwargs: Any) -> None:
            if this.open:
                this._written(t, dropped=False)
            set_values(t, *args, **kwargs)

        def drop_known(t: Any) -> None:
            if this.open:
                this._written(t, dropped=True)
            drop_values(t)

        values.set = set_known  # type: ignore[method-assign]
        values.drop = drop_known  # type: ignore[method-assign]

    # ------------------------------------------------------------------ a root call
    def _root(self, original: Callable[..., Any], module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        import torch

        local = self.local
        tracker = self.tracker
        if tracker.symbolic is not None or getattr(tracker.local, "suspended", 0) or torch._C._current_graph_task_id() != -1:
            local.depth = 1
            try:
                return original(module, *args, **kwargs)
            finally:
                local.depth = 0
        try:
            key, inputs = self._key(module, args, kwargs)
        except _Unwatched:
            key = None
        records = self.records.get(module) if key is not None else None
        if records is not None and len(records) >= IDENTICAL and records[-1].key == key:
            replayed = self._replay(module, records[-1], inputs)
            if replayed is not None:
                return replayed
        if key is None:
            local.depth = 1
            try:
                return original(module, *args, **kwargs)
            finally:
                local.depth = 0
        storages: set[int] = set()
        try:
            before = self._state(module, args, kwargs, storages)
        except _Unwatched:
            before = None
        window = steadiness._Window(tracker.next_id, tracker)
        watched = _Call(window, key, inputs, before, storages)
        bases = tracker.values.bases
        with _no_modes():  # real copies (under the fake mode, a clone would be fake)
            for storage in storages:
                entry = bases.get(storage)
                if entry is not None and entry[1] is None and entry[0].numel() <= _COUNTER_ELEMENTS:
                    watched.before[storage] = entry[0].clone()
        self.open.append(watched)
        self.steady.calls.append(window)
        local.depth = 1
        try:
            output = original(module, *args, **kwargs)
        except BaseException:
            self.records.pop(module, None)
            raise
        finally:
            local.depth = 0
            self.open.remove(watched)
            self.steady.calls.remove(window)
            window.end = tracker.next_id
        record = self._close(module, watched, output, args, kwargs)
        kept = self.records.get(module, [])
        if record is None or (kept and not kept[-1].same(record)):
            kept = []
        if record is not None:
            kept = (kept + [record])[-IDENTICAL:]
        self.records[module] = kept
        return output

    def _written(self, t: Any, dropped: bool) -> None:
        """A known value set (or dropped) on `t`: in a storage older than an open call (one the
        tracker holds, or one of the module's or the inputs' tensors), it is state the call changed."""
        try:
            storage = t.untyped_storage()
        except Exception:  # no storage: nothing is followed on it
            return
        key = id(storage)
        if dropped and key not in self.tracker.values.bases:
            return
        known = self.tracker.live.get(key)
        for call in self.open:
            older = key in call.storages if known is None or known.event is None else known.event < call.window.base
            if not older:
                continue
            if dropped or key not in call.before:
                call.written = True  # not a counter of the call's state: never replayed
            else:
                call.counters.add(key)

    def _key(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, list[Any]]:
        import torch
        from torch._subclasses.fake_tensor import FakeTensor
        from torch.utils._pytree import tree_flatten

        leaves, spec = tree_flatten((args, kwargs))
        described: list[Any] = []
        inputs: list[Any] = []
        storages: dict[int, int] = {}
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                if type(leaf) is not FakeTensor and type(leaf) is not torch.Tensor:
                    raise _Unwatched
                if any(type(d) is not int for d in leaf.shape):
                    raise _Unwatched
                storage = leaf.untyped_storage()
                known = self.tracker.live.get(id(storage))
                share = storages.setdefault(id(storage), len(inputs))
                described.append(
                    (
                        "tensor",
                        tuple(leaf.shape),
                        tuple(leaf.stride()),
                        leaf.storage_offset(),
                        leaf.dtype,
                        str(leaf.device),
                        leaf.requires_grad,
                        type(leaf) is FakeTensor,
                        share,
                        None if known is None else known.category,
                    )
                )
                inputs.append(leaf)
            elif isinstance(leaf, _PLAIN) or isinstance(leaf, (torch.dtype, torch.device)):
                described.append(("plain", type(leaf), leaf))
            else:
                described.append(("same", _Same(leaf)))
        frame = sys._getframe(3)
        place = []
        while frame is not None and len(place) < _PLACE_DEPTH:
            place.append((frame.f_code.co_filename, frame.f_lineno))
            frame = frame.f_back
        modes = (
            torch.is_inference_mode_enabled(),
            torch.is_autocast_enabled("cuda") if _autocast_takes_device() else torch.is_autocast_enabled(),
            torch.get_autocast_dtype("cuda") if hasattr(torch, "get_autocast_dtype") else None,
            tuple(getattr(self.tracker.local, "modules", None) or ()),
            self.tracker.in_optimizer,
        )
        return (tuple(place), modes, spec, tuple(described)), inputs

    def _state(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], storages: set[int]) -> Any:
        """What a call could change that a replay would not: the module tree's parameters,
        buffers and plain attributes; the objects among its inputs, walked."""
        import torch
        from torch.utils._pytree import tree_flatten

        state: list[Any] = []
        for sub in module.modules():
            state.append(id(sub))
            state.append(sub.training)
            for tensors in (sub._parameters, sub._buffers):
                for name, t in tensors.items():
                    state.append((name, id(t)))
                    _storage_of(t, storages)
            for name, value in sub.__dict__.items():
                if isinstance(value, _PLAIN):
                    state.append((name, value))
                elif isinstance(value, torch.Tensor):
                    state.append((name, id(value)))
                    _storage_of(value, storages)
        seen: set[int] = set()
        for leaf in tree_flatten((args, kwargs))[0]:
            if isinstance(leaf, torch.Tensor):
                _storage_of(leaf, storages)
            elif not isinstance(leaf, (torch.nn.Module, torch.dtype, torch.device) + _PLAIN):
                self._walk(leaf, state, seen, 0, storages)
        return state

    def _walk(self, obj: Any, state: list[Any], seen: set[int], depth: int, storages: set[int]) -> None:
        """An input object's tensors (by identity and shape) and plain values, walked through
        dicts, lists, tuples, attributes and slots; deeper than `_STATE_DEPTH`, by identity."""
        import torch

        if id(obj) in seen:
            return
        seen.add(id(obj))
        if len(state) > _STATE_WIDTH:
            raise _Unwatched
        if isinstance(obj, dict):
            items = list(obj.items())
        elif isinstance(obj, (list, tuple)):
            items = list(enumerate(obj))
        else:
            items = list(getattr(obj, "__dict__", {}).items())
            for cls in type(obj).__mro__:
                for name in getattr(cls, "__slots__", ()):
                    if hasattr(obj, name):
                        items.append((name, getattr(obj, name)))
        state.append(("object", id(obj), len(items)))
        for name, value in items:
            if isinstance(value, torch.Tensor):
                state.append((name, id(value), tuple(value.shape)))
                _storage_of(value, storages)
            elif isinstance(value, _PLAIN) or isinstance(value, (torch.dtype, torch.device)):
                state.append((name, value))
            elif depth >= _STATE_DEPTH or isinstance(value, (torch.nn.Module, type, types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.ModuleType)):
                state.append((name, id(value)))
            else:
                self._walk(value, state, seen, depth + 1, storages)

    # ------------------------------------------------------------------ a closed window
    def _close(self, module: Any, call: _Call, output: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Record | None:
        """The window as a record, or None when it is not steady."""
        import torch
        from torch._subclasses.fake_tensor import FakeTensor
        from torch.utils._pytree import tree_flatten

        window = call.window
        tracker = self.tracker
        if window.reads or window.overflow or call.written or call.state is None:
            return None
        try:
            if self._state(module, args, kwargs, set()) != call.state:
                return None
        except _Unwatched:
            return None
        count = window.end - window.base
        inputs: dict[int, int] = {}
        for index, t in enumerate(call.inputs):
            known = tracker.live.get(id(t.untyped_storage()))
            if known is not None and known.event is not None:
                inputs.setdefault(known.event, index)
        templates: list[tuple[str, str, str, int, str]] = []
        allocated: set[int] = set()
        freed: set[int] = set()
        for kind, line in window.lines:
            head = steadiness._HEADS.get(kind)
            if head is None or not line.startswith(head):
                return None
            i = j = len(head)
            while j < len(line) and line[j].isdigit():
                j += 1
            ident = int(line[i:j])
            rest = line[j:]
            rel = ident - window.base
            if 0 <= rel < count:
                if kind == "alloc":
                    if rel in allocated or '"tainted": true' in rest:
                        return None
                    allocated.add(rel)
                elif kind == "free":
                    freed.add(rel)
                templates.append((kind, head, "own", rel, rest))
            elif kind == "tag" and ident in inputs:
                templates.append((kind, head, "input", inputs[ident], rest))
            else:
                return None  # an older storage freed or tagged: state a replay would not change
        if len(allocated) != count or tracker.tainted & set(range(window.base, window.end)):
            return None
        leaves, spec = tree_flatten(output)
        described: list[Any] = []
        owned: set[int] = set()
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                if type(leaf) is not FakeTensor or leaf.requires_grad or leaf.grad_fn is not None or any(type(d) is not int for d in leaf.shape):
                    return None
                storage = leaf.untyped_storage()
                known = tracker.live.get(id(storage))
                if known is None or known.event is None or not 0 <= known.event - window.base < count:
                    return None
                rel = known.event - window.base
                if rel in owned or leaf.storage_offset() != 0 or not leaf.is_contiguous() or storage.nbytes() != leaf.numel() * leaf.element_size():
                    return None
                if tracker.values.get(leaf) is not None:
                    return None  # its values known: a fresh tensor would not know them
                owned.add(rel)
                described.append(("own", rel, tuple(leaf.shape), leaf.dtype, str(leaf.device), known.category))
            elif isinstance(leaf, _PLAIN):
                described.append(("plain", type(leaf), leaf))
            else:
                try:
                    described.append(("same", _Same(leaf)))
                except _Unwatched:
                    return None
        if allocated - freed != owned:
            return None  # something else outlives the call (a cache grown, a global kept)
        counters = self._counters(call)
        if counters is None:
            return None
        from .memory import CHANGES

        return _Record(
            call.key,
            templates,
            count,
            steadiness._delta(window.placeholders, tracker.placeholders),
            steadiness._delta(window.loop_hits, tracker.loop_hits),
            any(kind in CHANGES for kind, _, _, _, _ in templates),
            spec,
            described,
            counters,
        )

    def _counters(self, call: _Call) -> tuple[tuple[int, Any, tuple[int, ...]], ...] | None:
        """What the call added to each older storage whose known values it wrote (a static
        cache's `cumulative_length`, advanced by each token): integers, fully known before and
        after, a few elements; None when a write is anything else."""
        import torch

        counters = []
        for key in sorted(call.counters):
            before = call.before[key]
            after = self.tracker.values.bases.get(key)
            if before is None or after is None or after[1] is not None:
                return None
            after = after[0]
            if after.dtype != before.dtype or after.shape != before.shape or after.numel() > _COUNTER_ELEMENTS:
                return None
            if after.dtype.is_floating_point or after.dtype.is_complex or after.dtype == torch.bool:
                if not torch.equal(after, before):
                    return None  # only integers advance exactly
                counters.append((key, after.dtype, (0,) * after.numel()))
                continue
            with _no_modes():
                delta = (after.to(torch.int64) - before.to(torch.int64)).tolist()
            counters.append((key, after.dtype, tuple(delta)))
        return tuple(counters)

    # ------------------------------------------------------------------ a replayed call
    def _replay(self, module: Any, record: _Record, inputs: list[Any]) -> Any:
        """The call's events again and a fresh output, or None when an input is not tracked."""
        import torch
        from torch.utils._pytree import tree_unflatten

        from .tracker import Live

        tracker = self.tracker
        events: list[int] = []
        for t in inputs:
            known = tracker.live.get(id(t.untyped_storage()))
            events.append(-1 if known is None or known.event is None else known.event)
        for kind, _, where, index, _ in record.templates:
            if where == "input" and events[index] < 0:
                return None
        if any(leaf[0] == "same" and leaf[1].obj is None for leaf in record.leaves):
            return None
        bases = tracker.values.bases
        for key, dtype, delta in record.counters:
            entry = bases.get(key)
            if entry is None or entry[1] is not None or entry[0].dtype != dtype or entry[0].numel() != len(delta):
                return None
        steady = self.steady
        lines: list[tuple[str, str]] = []
        with tracker.lock:
            base = tracker.next_id
            for kind, head, where, index, rest in record.templates:
                ident = base + index if where == "own" else events[index]
                lines.append((kind, f"{head}{ident}{rest}"))
                if where == "input" and kind == "tag":
                    known = tracker.live.get(id(inputs[index].untyped_storage()))
                    if known is not None:
                        known.category = _category(rest, known.category)
            tracker.next_id = base + record.count
            with _no_modes():
                for key, dtype, delta in record.counters:
                    if any(delta):
                        values = bases[key][0]
                        values.copy_((values.to(torch.int64) + torch.tensor(delta, dtype=torch.int64)).to(dtype))
            for site, n in record.placeholders.items():
                tracker.placeholders[site] += n
            for site, n in record.loop_hits.items():
                tracker.loop_hits[site] += n
            leaves: list[Any] = []
            made: list[tuple[Any, int, Any]] = []
            with tracker.suspended():
                for leaf in record.leaves:
                    if leaf[0] == "own":
                        _, rel, shape, dtype, device, category = leaf
                        t = torch.empty(shape, dtype=dtype, device=device)
                        made.append((t, base + rel, category))
                        leaves.append(t)
                    elif leaf[0] == "plain":
                        leaves.append(leaf[2])
                    else:
                        leaves.append(leaf[1].obj)  # alive: the same as this call's input
            for t, ident, category in made:
                storage = t.untyped_storage()
                key = id(storage)
                nbytes = int(storage.nbytes())
                tracker.live[key] = Live(ident, nbytes, category, ident)
                weakref.finalize(storage, tracker._finalized, key, ident)
            many = steady.emit_many
            if many is not None:
                many([line for _, line in lines], record.changes)
            else:
                for kind, line in lines:
                    steady.emit_line(kind, line)
            for kind, line in lines:
                steady.tap(kind, line)  # an enclosing Trainer step holds these events too
        name = type(module).__name__
        if name not in self.noted:
            self.noted.add(name)
            steady.note(
                f"steady state: {name}'s calls without gradients that repeat its last {IDENTICAL} calls exactly (the same place, the same inputs' "
                f"shapes, the same storage events in the same order, no value read from data, no state changed) were not run: each repeats "
                f"the last call's events in the replay and returns a data-less output of the same shapes (ITERAGPU_PREDICT_STEADY=0 runs every call)"
            )
        return tree_unflatten(leaves, record.spec)


def _category(rest: str, current: Any) -> Any:
    """The category a replayed tag event sets (its `rest`: `, "category": "input"}}`)."""
    from .tracker import Category

    start = rest.find('"category": "')
    if start < 0:
        return current
    start += len('"category": "')
    try:
        return Category(rest[start : rest.index('"', start)])
    except ValueError:
        return current


def _no_modes() -> Any:
    from torch.utils._python_dispatch import _disable_current_modes

    return _disable_current_modes()


def _storage_of(t: Any, storages: set[int]) -> None:
    try:
        storages.add(id(t.untyped_storage()))
    except Exception:  # a tensor without storage (a wrapper subclass): nothing of its own is followed
        pass


def _autocast_takes_device() -> bool:
    import torch

    try:
        torch.is_autocast_enabled("cuda")
    except TypeError:
        return False
    return True


def install(steady: steadiness.Steadiness) -> None:
    if steadiness.enabled() and steady.emit_line is not None:
        Repeats(steady).install()
