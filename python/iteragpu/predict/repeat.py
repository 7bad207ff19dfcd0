"""Calls without gradients that repeat, fast-forwarded: a decode step, or a decoder layer, that
would repeat the last ones exactly is not run; its storage events are the last call's, replayed,
and it returns a fresh data-less output of the same shapes.

An inference forward is a stack of identical blocks (a transformer's decoder layers), and a decode
loop calls its model once per token (`generate()`'s, or a hand-written one as torchtune writes it).
Predicting each runs every op on fake tensors again, for events that repeat. Two kinds of calls
are watched when gradients are off (`no_grad`, `inference_mode`: no graph keeps anything of them):
a *root* call (a module called from outside any other module), compared with that module's last
calls; and a *block* call (a child of a `ModuleList` or `Sequential` holding at least four modules
of its class), compared with the calls of the blocks before it in that list.

* a call's *window* is everything the worker emitted during it; each event's storage is either the
  window's own (allocated in it), one of the call's input tensors (the tag that says it is an
  input), or a tensor of the state it reaches (a KV cache's layer: by its path from an input, the
  block's own index written as such); the window is *steady* when it holds storage events only (no
  phase boundary, no note, no memory query), nothing tainted, no value read from data (tracker
  reads, as steady.py counts them), no known value written into an older storage but integer
  counters of its state, and the call changed no state but by giving a state slot a storage of its
  own (a dynamic cache's `keys`, grown): the module tree's parameters, buffers and plain
  attributes, and every object among its inputs (walked: a cache's tensors and numbers), are the
  same objects and values after the call as before;
* its *key* is the call's place (the caller's frames), the modes (grad, inference, autocast, the
  enclosing modules), the inputs' structure with each tensor's shape, strides, dtype, device and
  category, each other input's value (numbers) or identity (a cache object); for a block, also its
  class, its tree's parameter shapes and plain attributes (its index aside), and the types, numbers
  and tensor shapes of the state at its index (a sliding layer of the cache is not a full one);
* its *output* is the same structure each call, every tensor in it a storage of its own the window
  allocated (no known values, no view) and everything else the same objects; what the window
  leaves alive is exactly that output and the slots it gave new storages.

After `IDENTICAL` steady windows with the same key and the same events (ids relative to each
window's first, inputs by their place, state by its path, a block's module names relative to the
block), a call with that key again is not run: the last window's events are emitted again with
fresh ids (on this call's inputs, state and module names), the counters advance as they did, the
placeholder counts grow as the call would have grown them, the reassigned slots get fresh
data-less tensors of the same shapes, and the output is rebuilt with fresh data-less tensors that
own the replayed storages. Within one decode step every layer sees the same sequence length, so a
layer's sizes are its neighbours'. The CLI replays every call's events through its allocator
model, so the figures are those of the whole run; the prediction says which module's calls were
fast-forwarded (a note). `ITERAGPU_PREDICT_STEADY=0` runs every call (the reference:
`tests/integration/predict_speed.rs` holds documents and event streams equal but for that note).
"""

from __future__ import annotations

import os
import sys
import threading
import types
import weakref
from typing import Any, Callable

from . import encoded
from . import steady as steadiness

IDENTICAL: int = steadiness.IDENTICAL
# A list holding at least this many blocks of one class is a stack whose calls are compared.
_STACK: int = IDENTICAL + 1
# Frames of the caller that make a call's place (a decode loop's line, generate()'s own).
_PLACE_DEPTH: int = 24
# A state walk goes this deep into an input object (a cache's layers' tensors) and this wide.
_STATE_DEPTH: int = 4
_STATE_WIDTH: int = 20_000
# An older storage a call advances (a counter) holds at most this many elements.
_COUNTER_ELEMENTS: int = 64
# A path's element that is the block's own index; a template's module name that is the block's.
INDEX: str = "<index>"
_NAME: str = "\x00"  # never in json.dumps's output (escaped as \\u0000)

_PLAIN: tuple[type, ...] = (bool, int, float, str, bytes, type(None))
_PLAIN_TYPES: frozenset[type] = frozenset(_PLAIN)
_OPAQUE: tuple[type, ...] = (type, types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.ModuleType)

Path = tuple[Any, ...]


class _Unwatched(Exception):
    """A call that cannot be fast-forwarded (its key or state cannot be read)."""


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


def _abstract(path: Path, index: int | None) -> Path:
    """`path` with the block's own index written as `INDEX`."""
    if index is None:
        return path
    return tuple((kind, INDEX) if kind in ("item", "key") and type(name) is int and name == index else (kind, name) for kind, name in path)


def _concrete(path: Path, index: int | None) -> Path:
    if index is None:
        return path
    return tuple((kind, index) if name == INDEX else (kind, name) for kind, name in path)


class _State:
    """What a call could change, walked: the module tree's parameters, buffers and plain
    attributes; the objects among its inputs, their tensors and numbers."""

    __slots__ = ("items", "tensors", "objects", "storages", "limit")

    def __init__(self) -> None:
        self.limit = _STATE_WIDTH  # items beyond which the inputs' walk gives up
        self.items: dict[Path, Any] = {}  # path -> plain value, or a tensor's or an object's identity
        self.tensors: dict[Path, Any] = {}
        self.objects: dict[Path, Any] = {}
        self.storages: dict[int, Path] = {}  # storage id -> the first path to it

    def tensor(self, path: Path, t: Any) -> None:
        self.items[path] = ("tensor", id(t), tuple(t.shape), t.dtype)
        self.tensors[path] = t
        try:
            self.storages.setdefault(id(t.untyped_storage()), path)
        except Exception:  # a tensor without storage (a wrapper subclass): nothing of its own is followed
            pass

    def release(self) -> None:
        """Keeps the paths, lets go of the tensors and objects: a state held during a call must
        not keep alive what the call lets go (a cache's old keys, freed when they are replaced)."""
        self.tensors = dict.fromkeys(self.tensors)
        self.objects = {}

    def shape(self, index: int | None, indexes: frozenset[tuple[str, str]]) -> tuple[Any, ...]:
        """For a block's key: its own tree and what lies at its index, without identities; the
        attributes that hold its index (`indexes`: `layer_idx`) as `INDEX`."""
        shape = []
        for path, item in self.items.items():
            inside = path[0][0] == "module"
            apath = path if inside else _abstract(path, index)
            if not inside and apath == path:
                continue
            if type(item) is tuple and item and item[0] in ("tensor", "object", "ref", "alias"):
                item = (item[0],) + item[2:]
            if inside and path[-1][0] == "attr" and (path[0][1], path[-1][1]) in indexes:
                item = INDEX
            shape.append((apath, item))
        return tuple(shape)


class _Call:
    """One call's window: its events, what it read and wrote, its inputs and state."""

    __slots__ = ("window", "key", "inputs", "state", "written", "before", "counters", "held")

    def __init__(self, window: steadiness._Window, key: Any, inputs: list[Any], state: _State) -> None:
        self.window = window
        self.key = key
        self.inputs = inputs  # the input tensors, in key order
        self.state = state
        self.written = False  # a known value written into an older storage that is not a counter
        # The known values of the state's small storages before the call (copies: an in-place op
        # followed on the CPU writes its base directly), and those the call wrote.
        self.before: dict[int, Any] = {}
        self.counters: set[int] = set()
        self.held: dict[int, Path] = {}  # event id -> the path of a state storage, at the call's start


class _Record:
    """A closed steady window: events as templates, the output's and the slots' description."""

    __slots__ = ("key", "templates", "count", "placeholders", "loop_hits", "changes", "spec", "leaves", "counters", "slots", "steps")

    def __init__(self, key: Any, templates: list[tuple[str, str, str, Any, str]], count: int, placeholders: dict[Any, int], loop_hits: dict[Any, int], changes: bool, spec: Any, leaves: list[Any], counters: tuple[Any, ...], slots: tuple[Any, ...], steps: tuple[Any, ...]) -> None:
        self.key = key
        self.templates = templates  # (kind, head, "own" | "input" | "slot", rel | input index | path, rest)
        self.count = count
        self.placeholders = placeholders
        self.loop_hits = loop_hits
        self.changes = changes
        self.spec = spec
        self.leaves = leaves  # ("own", *what `_own` says), ("same", _Same) or ("plain", type, value)
        self.counters = counters  # (path, dtype, what each call adds to each element)
        self.slots = slots  # (path, *what `_own` says): given a storage of the call's own
        self.steps = steps  # (path, what each call adds): a plain integer of the state

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
            and self.slots == other.slots
            and self.steps == other.steps
        )


class Repeats:
    """The worker's watch over calls without gradients (installed once per prediction)."""

    def __init__(self, steady: steadiness.Steadiness, name_of: Callable[[Any], str]) -> None:
        self.steady = steady
        self.tracker = steady.tracker
        self.name_of = name_of
        self.local = threading.local()
        self.main = threading.main_thread()
        # a root module, or a stack (its list) -> the last closed records of its calls (steady
        # ones only; reset otherwise)
        self.records: weakref.WeakKeyDictionary[Any, list[_Record]] = weakref.WeakKeyDictionary()
        # id(block) -> (its list, its index, itself), weakly; found at its root's first call
        self.blocks: dict[int, tuple[Any, int, Any, frozenset[tuple[str, str]]]] = {}
        self.rooted: weakref.WeakSet[Any] = weakref.WeakSet()
        # a root module -> its last call's key (a call like it is watched)
        self.last: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
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
            depth = getattr(local, "depth", 0)
            if not torch.is_grad_enabled() and threading.current_thread() is this.main:
                if depth == 0:
                    return this._call(original, module, args, kwargs, module, None, frozenset())
                block = this.blocks.get(id(module))
                if block is not None and block[2]() is module:
                    stack = block[0]()
                    if stack is not None:
                        return this._call(original, module, args, kwargs, stack, block[1], block[3])
            local.depth = depth + 1
            try:
                return original(module, *args, **kwargs)
            finally:
                local.depth = depth

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

        values.set = set_known
        values.drop = drop_known

    # ------------------------------------------------------------------ a call
    def _call(self, original: Callable[..., Any], module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], scope: Any, index: int | None, indexes: frozenset[tuple[str, str]]) -> Any:
        import torch

        local = self.local
        depth = getattr(local, "depth", 0)
        tracker = self.tracker

        def run() -> Any:
            local.depth = depth + 1
            try:
                return original(module, *args, **kwargs)
            finally:
                local.depth = depth

        if tracker.symbolic is not None or tracker.local.suspended or torch._C._current_graph_task_id() != -1 or not _only_our_global_hooks():
            return run()
        records = self.records.get(scope)
        try:
            if index is None:
                # A root call's key needs no state: a call unlike the one before it (a prefill,
                # a step whose mask grew) is only remembered, its state never walked.
                self._find_stacks(module)
                key, inputs = self._key(module, args, kwargs, None, None, indexes)
                if not (records and records[-1].key == key) and self.last.get(module) != key:
                    self.last[module] = key
                    self.records.pop(scope, None)
                    return run()
                state = self._state(module, args, kwargs)
            else:
                # A block's key and its replay need only what lies at its index: the other
                # elements of the lists walked (the cache's other layers) are left out.
                state = self._state(module, args, kwargs, index)
                key, inputs = self._key(module, args, kwargs, state, index, indexes)
        except Exception:  # any object the walk cannot read (a tensor without sizes): the call runs
            return run()
        if records is not None and len(records) >= IDENTICAL and records[-1].key == key:
            try:
                replayed = self._replay(module, records[-1], inputs, state, index)
            except Exception:  # raised before the tracker was touched: the call runs instead
                replayed = None
            if replayed is not None:
                return replayed
        if index is not None:
            try:
                state = self._state(module, args, kwargs)
            except Exception:  # as above
                return run()
        state.release()
        window = steadiness._Window(tracker.next_id, tracker)
        watched = _Call(window, key, inputs, state)
        bases = tracker.values.bases
        with _no_modes():  # real copies (under the fake mode, a clone would be fake)
            for storage, path in state.storages.items():
                known = tracker.live.get(storage)
                if known is not None and known.event is not None:
                    watched.held.setdefault(known.event, _abstract(path, index))
                entry = bases.get(storage)
                if entry is not None and entry[1] is None and entry[0].numel() <= _COUNTER_ELEMENTS:
                    watched.before[storage] = entry[0].clone()
        self.open.append(watched)
        self.steady.calls.append(window)
        try:
            output = run()
        except BaseException:
            self.records.pop(scope, None)
            raise
        finally:
            self.open.remove(watched)
            self.steady.calls.remove(window)
            window.end = tracker.next_id
        try:
            record = self._close(module, watched, output, args, kwargs, index)
        except Exception:  # the state after the call cannot be read: not steady
            record = None
        kept = self.records.get(scope, [])
        if record is None or (kept and not kept[-1].same(record)):
            kept = []
        if record is not None:
            kept = (kept + [record])[-IDENTICAL:]
        self.records[scope] = kept
        return output

    def _find_stacks(self, root: Any) -> None:
        """The blocks of a root module's stacks (found once per root), each with the attributes
        of its tree that hold its own index in every block of its class (`layer_idx`)."""
        import torch

        try:
            if root in self.rooted:
                return
            self.rooted.add(root)
        except TypeError:  # a module that cannot be weakly referenced: no stack of it is watched
            return
        for sub in root.modules():
            if not isinstance(sub, (torch.nn.ModuleList, torch.nn.Sequential)):
                continue
            children = list(sub._modules.values())
            for cls in {type(c) for c in children}:
                members = [(position, child) for position, child in enumerate(children) if type(child) is cls]
                if len(members) < _STACK:
                    continue
                indexes: set[tuple[str, str]] | None = None
                for position, child in members:
                    mine = {
                        (qualified, name)
                        for qualified, part in child.named_modules()
                        for name, value in part.__dict__.items()
                        if type(value) is int and value == position
                    }
                    indexes = mine if indexes is None else indexes & mine
                held = frozenset(indexes or ())
                for position, child in members:
                    try:
                        self.blocks[id(child)] = (weakref.ref(sub), position, weakref.ref(child), held)
                    except TypeError:
                        pass

    def _written(self, t: Any, dropped: bool) -> None:
        """A known value set (or dropped) on `t`: in a storage older than an open call (one the
        tracker holds, or one of the state's tensors), it is state the call changed; only an
        integer counter of the state, fully known, may change (`_counters`)."""
        try:
            storage = t.untyped_storage()
        except Exception:  # no storage: nothing is followed on it
            return
        key = id(storage)
        if dropped and key not in self.tracker.values.bases:
            return
        known = self.tracker.live.get(key)
        for call in self.open:
            older = key in call.state.storages if known is None or known.event is None else known.event < call.window.base
            if not older:
                continue
            if dropped or key not in call.before:
                call.written = True
            else:
                call.counters.add(key)

    def _key(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], state: _State | None, index: int | None, indexes: frozenset[tuple[str, str]]) -> tuple[Any, list[Any]]:
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
        frame: Any = sys._getframe(3)
        place: list[tuple[str, int]] = []
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
        block = None if index is None or state is None else (type(module), state.shape(index, indexes))
        return (tuple(place), modes, spec, tuple(described), block), inputs

    def _state(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], only: int | None = None) -> _State:
        """The state a call could change; with `only`, the lists walked give their element at
        that index alone."""
        import torch
        from torch.utils._pytree import tree_flatten

        state = _State()
        items = state.items
        internals = _module_internals()
        seen: dict[int, Path] = {}
        for qualified, sub in module.named_modules():
            if sub._forward_hooks or sub._forward_pre_hooks or "forward" in sub.__dict__:
                # A hook or a forward of its own (accelerate's) may keep or change what a replay
                # would not: such a call always runs.
                raise _Unwatched
            place = ("module", qualified)
            items[(place, ("attr", "training"))] = sub.training
            items[(place, ("attr", "__class__"))] = ("object", id(sub), type(sub).__qualname__, None)
            for kind, tensors in (("param", sub._parameters), ("buffer", sub._buffers)):
                for name, t in tensors.items():
                    if t is not None:
                        state.tensor((place, (kind, name)), t)
            for name, value in sub.__dict__.items():
                if name in internals:
                    continue  # torch's own bookkeeping (hooks, parameters, submodules: seen above)
                if type(value) in _PLAIN_TYPES or isinstance(value, _PLAIN):
                    items[(place, ("attr", name))] = value
                elif isinstance(value, torch.Tensor):
                    state.tensor((place, ("attr", name)), value)
                elif isinstance(value, (list, dict)) and not isinstance(value, torch.nn.Module):
                    self._walk(value, (place, ("attr", name)), state, seen, 1, None)
        state.limit = len(items) + _STATE_WIDTH
        for position, leaf in enumerate(tree_flatten((args, kwargs))[0]):
            path = (("input", position),)
            if isinstance(leaf, torch.Tensor):
                state.tensor(path, leaf)
            elif not isinstance(leaf, (torch.nn.Module, torch.dtype, torch.device) + _PLAIN + _OPAQUE):
                self._walk(leaf, path, state, seen, 0, only)
        return state

    def _walk(self, obj: Any, path: Path, state: _State, seen: dict[int, Path], depth: int, only: int | None) -> None:
        """An input object's tensors (by identity and shape) and plain values, walked through
        dicts, lists, tuples, attributes and slots; deeper than `_STATE_DEPTH`, by identity."""
        import torch

        if id(obj) in seen:
            state.items[path] = ("alias", seen[id(obj)])
            return
        seen[id(obj)] = path
        if len(state.items) > state.limit:
            raise _Unwatched
        state.items[path] = ("object", id(obj), type(obj).__qualname__, len(obj) if isinstance(obj, (list, tuple, dict)) else None)
        state.objects[path] = obj
        if isinstance(obj, dict):
            items = [(("key", k), v) for k, v in obj.items()]
        elif isinstance(obj, (list, tuple)):
            if only is None:
                items = [(("item", i), v) for i, v in enumerate(obj)]
            else:
                items = [(("item", only), obj[only])] if only < len(obj) else []
        else:
            items = [(("attr", k), v) for k, v in getattr(obj, "__dict__", {}).items()]
            for cls in type(obj).__mro__:
                for name in getattr(cls, "__slots__", ()):
                    if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                        items.append((("attr", name), getattr(obj, name)))
        for step, value in items:
            child = path + (step,)
            if isinstance(value, torch.Tensor):
                state.tensor(child, value)
            elif isinstance(value, _PLAIN) or isinstance(value, (torch.dtype, torch.device)):
                state.items[child] = value
            elif depth >= _STATE_DEPTH or isinstance(value, (torch.nn.Module,) + _OPAQUE):
                state.items[child] = ("ref", id(value))
            else:
                self._walk(value, child, state, seen, depth + 1, only)

    # ------------------------------------------------------------------ a closed window
    def _close(self, module: Any, call: _Call, output: Any, args: tuple[Any, ...], kwargs: dict[str, Any], index: int | None) -> _Record | None:
        """The window as a record, or None when it is not steady."""
        import torch
        from torch._subclasses.fake_tensor import FakeTensor
        from torch.utils._pytree import tree_flatten

        window = call.window
        tracker = self.tracker
        if window.reads or window.overflow or call.written:
            return None
        count = window.end - window.base
        before = call.state
        after = self._state(module, args, kwargs)
        # State slots given a storage of the call's own (a dynamic cache's keys, grown).
        slots: list[Any] = []
        slot_rels: set[int] = set()
        steps: list[Any] = []  # plain integers of the state advanced (a sliding cache's length)
        for path in before.items.keys() | after.items.keys():
            was, now = before.items.get(path), after.items.get(path)
            if was == now:
                continue
            if path[0][0] == "module" or path[-1][0] == "item" and type(after.objects.get(path[:-1])) is tuple:
                return None
            if type(was) is int and type(now) is int:
                steps.append((_abstract(path, index), now - was))
                continue
            t = after.tensors.get(path)
            if t is None or path not in before.tensors:
                return None
            own = self._own(t, window, count)
            if own is None or own[0] in slot_rels:
                return None
            slot_rels.add(own[0])
            slots.append((_abstract(path, index), *own))
        slots.sort(key=repr)
        steps.sort(key=repr)
        inputs: dict[int, int] = {}
        for position, t in enumerate(call.inputs):
            known = tracker.live.get(id(t.untyped_storage()))
            if known is not None and known.event is not None:
                inputs.setdefault(known.event, position)
        held = call.held
        freed_slots = {_abstract(path, index) for path in before.tensors if after.items.get(path) != before.items.get(path)}
        name = None
        if index is not None:
            name = encoded.json_string(self.name_of(module))
            long_name, short_name = f'"module": {name[:-1]}.', f'"module": {name}'
        templates: list[tuple[str, str, str, Any, str]] = []
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
            if name is not None:
                rest = rest.replace(long_name, f'"module": "{_NAME}.').replace(short_name, f'"module": "{_NAME}"')
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
            elif ident in held and (kind == "tag" or kind == "free" and held[ident] in freed_slots):
                templates.append((kind, head, "slot", held[ident], rest))
            else:
                return None  # another older storage freed or tagged: state a replay would not change
        if len(allocated) != count or tracker.tainted & set(range(window.base, window.end)):
            return None
        leaves, spec = tree_flatten(output)
        described: list[Any] = []
        owned: set[int] = set()
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                if type(leaf) is not FakeTensor or leaf.requires_grad or leaf.grad_fn is not None:
                    return None
                own = self._own(leaf, window, count)
                if own is None or own[0] in owned or own[0] in slot_rels or tracker.values.get(leaf) is not None:
                    return None  # an older storage, one already out, or values known (a fresh tensor would not know them)
                owned.add(own[0])
                described.append(("own", *own))
            elif isinstance(leaf, _PLAIN):
                described.append(("plain", type(leaf), leaf))
            else:
                described.append(("same", _Same(leaf)))
        if allocated - freed != owned | slot_rels:
            return None  # something else outlives the call (a global kept)
        counters = self._counters(call, index)
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
            tuple(slots),
            tuple(steps),
        )

    def _own(self, t: Any, window: steadiness._Window, count: int) -> tuple[Any, ...] | None:
        """(window-relative id, storage bytes, shape, strides, offset, dtype, device, category)
        of `t` when the window allocated its storage, else None (a view of it: a sliding cache's
        last tokens, rebuilt as the same view of a fresh storage)."""
        if any(type(d) is not int for d in t.shape) or t.element_size() == 0:
            return None
        storage = t.untyped_storage()
        known = self.tracker.live.get(id(storage))
        nbytes = storage.nbytes()
        if known is None or known.event is None or not 0 <= known.event - window.base < count or type(nbytes) is not int or nbytes % t.element_size():
            return None
        return (known.event - window.base, nbytes, tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype, str(t.device), known.category)

    def _counters(self, call: _Call, index: int | None) -> tuple[tuple[Path, Any, tuple[int, ...]], ...] | None:
        """What the call added to each state storage whose known values it wrote (a static
        cache's `cumulative_length`, advanced by each token): integers, fully known before and
        after, a few elements; None when a write is anything else."""
        import torch

        counters = []
        for key in call.counters:
            before = call.before[key]
            after = self.tracker.values.bases.get(key)
            if after is None or after[1] is not None:
                return None
            after = after[0]
            if after.dtype != before.dtype or after.shape != before.shape:
                return None
            path = _abstract(call.state.storages[key], index)
            if after.dtype.is_floating_point or after.dtype.is_complex or after.dtype == torch.bool:
                if not torch.equal(after, before):
                    return None  # only integers advance exactly
                counters.append((path, after.dtype, (0,) * after.numel()))
                continue
            with _no_modes():
                delta = (after.to(torch.int64) - before.to(torch.int64)).tolist()
            counters.append((path, after.dtype, tuple(delta)))
        return tuple(sorted(counters, key=repr))

    # ------------------------------------------------------------------ a replayed call
    def _replay(self, module: Any, record: _Record, inputs: list[Any], state: _State, index: int | None) -> Any:
        """The call's events again and a fresh output, or None when what they refer to is not
        there now (an input or a state tensor not tracked, a counter not known)."""
        import torch
        from torch.utils._pytree import tree_unflatten

        from .tracker import Live

        tracker = self.tracker
        live = tracker.live
        events: list[int] = []
        for t in inputs:
            known = live.get(id(t.untyped_storage()))
            events.append(-1 if known is None or known.event is None else known.event)
        slot_events: dict[Path, tuple[int, int]] = {}  # path -> (event, storage id)
        for _, _, where, ref, _ in record.templates:
            if where == "input" and events[ref] < 0:
                return None
            if where == "slot" and ref not in slot_events:
                t = state.tensors.get(_concrete(ref, index))
                if t is None:
                    return None
                known = live.get(id(t.untyped_storage()))
                if known is None or known.event is None:
                    return None
                slot_events[ref] = (known.event, id(t.untyped_storage()))
        if any(leaf[0] == "same" and leaf[1].obj is None for leaf in record.leaves):
            return None
        bases = tracker.values.bases
        counters: list[tuple[Any, Any, tuple[int, ...]]] = []
        for path, dtype, delta in record.counters:
            t = state.tensors.get(_concrete(path, index))
            entry = None if t is None else bases.get(id(t.untyped_storage()))
            if entry is None or entry[1] is not None or entry[0].dtype != dtype or entry[0].numel() != len(delta):
                return None
            counters.append((entry[0], dtype, delta))
        setters: list[tuple[Any, Any, Any]] = []
        for path, *_ in record.slots + record.steps:
            concrete = _concrete(path, index)
            container = state.objects.get(concrete[:-1])
            if container is None or type(container) is tuple:
                return None
            setters.append((container, concrete[-1][0], concrete[-1][1]))
        advanced: list[int] = []
        for (container, kind, name_or_index), (_, delta) in zip(setters[len(record.slots) :], record.steps):
            value = getattr(container, name_or_index, None) if kind == "attr" else container[name_or_index]
            if type(value) is not int:
                return None
            advanced.append(value + delta)
        steady = self.steady
        name = None if index is None else encoded.json_string(self.name_of(module))[:-1]
        # Everything that may fail comes first, before the tracker is touched: the fresh tensors.
        leaves: list[Any] = []
        made: list[tuple[Any, int, Any]] = []  # (tensor, window-relative id, category)
        fresh: list[Any] = []
        with tracker.suspended():
            for leaf in record.leaves:
                if leaf[0] == "own":
                    t = _fresh(tracker.fake_mode, *leaf[1:])
                    made.append((t, leaf[1], leaf[-1]))
                    leaves.append(t)
                elif leaf[0] == "plain":
                    leaves.append(leaf[2])
                else:
                    leaves.append(leaf[1].obj)  # alive: checked above
            for _, *own in record.slots:
                t = _fresh(tracker.fake_mode, *own)
                made.append((t, own[0], own[-1]))
                fresh.append(t)
        fresh.extend(advanced)
        output = tree_unflatten(leaves, record.spec)
        lines: list[tuple[str, str]] = []
        with tracker.lock:
            base = tracker.next_id
            for kind, head, where, ref, rest in record.templates:
                if where == "own":
                    ident = base + ref
                elif where == "input":
                    ident = events[ref]
                    if kind == "tag":
                        known = live.get(id(inputs[ref].untyped_storage()))
                        if known is not None:
                            known.category = _category(rest, known.category)
                else:
                    ident, storage = slot_events[ref]
                    known = live.get(storage)
                    if kind == "free":
                        live.pop(storage, None)  # its tensor dies below, freed here already
                    elif known is not None:
                        known.category = _category(rest, known.category)
                if name is not None:
                    rest = rest.replace(f'"module": "{_NAME}', f'"module": {name}')
                lines.append((kind, f"{head}{ident}{rest}"))
            tracker.next_id = base + record.count
            with _no_modes():
                for values, dtype, delta in counters:
                    if any(delta):
                        values.copy_((values.to(torch.int64) + torch.tensor(delta, dtype=torch.int64)).to(dtype))
            for site, n in record.placeholders.items():
                tracker.placeholders[site] += n
            for site, n in record.loop_hits.items():
                tracker.loop_hits[site] += n
            for t, rel, category in made:
                storage = t.untyped_storage()
                key = id(storage)
                live[key] = Live(base + rel, int(storage.nbytes()), category, base + rel)
                weakref.finalize(storage, tracker._finalized, key, base + rel)
            many = steady.emit_many
            if many is not None:
                many([line for _, line in lines], record.changes)
            else:
                for kind, line in lines:
                    steady.emit_line(kind, line)
            for kind, line in lines:
                steady.tap(kind, line)  # an enclosing call or Trainer step holds these events too
            for (container, kind, name_or_index), value in zip(setters, fresh, strict=True):
                if kind == "attr":
                    setattr(container, name_or_index, value)
                else:
                    container[name_or_index] = value
        what = type(module).__name__
        if what not in self.noted:
            self.noted.add(what)
            steady.note(
                f"steady state: {what}'s calls without gradients that repeat the last {IDENTICAL} "
                f"{'calls of its stack' if index is not None else 'calls'} exactly (the same place, the same inputs' shapes, the same "
                f"storage events in the same order, no value read from data, no state changed but counters advanced and cache slots "
                f"given new storages) were not run: each repeats the last call's events in the replay and returns a data-less output "
                f"of the same shapes (ITERAGPU_PREDICT_STEADY=0 runs every call)"
            )
        return output


def _fresh(fake_mode: Any, rel: int, nbytes: int, shape: tuple[int, ...], stride: tuple[int, ...], offset: int, dtype: Any, device: str, category: Any) -> Any:
    """A data-less tensor with its own storage of `nbytes`, viewed as the recorded one was: made
    on the meta device and wrapped as FakeTensorMode wraps its own (no op dispatched for it)."""
    import torch

    itemsize = dtype.itemsize
    numel = 1
    for n in shape:
        numel *= n
    expected = 1
    contiguous = []
    for n in reversed(shape):
        contiguous.append(expected)
        expected *= max(n, 1)
    with _no_modes():
        meta = torch.empty(nbytes // itemsize, dtype=dtype, device="meta")
        if not (offset == 0 and numel * itemsize == nbytes and tuple(reversed(contiguous)) == stride):
            meta = meta.as_strided(shape, stride, offset)
        elif meta.shape != shape:
            meta = meta.view(shape)
        return fake_mode.fake_tensor_converter.from_meta_and_device(fake_mode, meta, torch.device(device))


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


_HERE: str = os.path.dirname(os.path.abspath(__file__))
_INTERNALS: list[frozenset[str]] = []


def _module_internals() -> frozenset[str]:
    """The attributes every `nn.Module` has (its hooks, parameters, buffers, submodules)."""
    if not _INTERNALS:
        import torch

        with _no_modes():
            _INTERNALS.append(frozenset(torch.nn.Module().__dict__))
    return _INTERNALS[0]


def _only_our_global_hooks() -> bool:
    """Whether every global module hook is the worker's own (its module names and phases): a
    script's global hook runs on every call, which a replay would skip."""
    from torch.nn.modules import module

    for hooks in (module._global_forward_hooks, module._global_forward_pre_hooks):
        for hook in hooks.values():
            code = getattr(hook, "__code__", None)
            if code is None or not code.co_filename.startswith(_HERE):
                return False
    return True


def _no_modes() -> Any:
    from torch.utils._python_dispatch import _disable_current_modes

    return _disable_current_modes()


_AUTOCAST_TAKES_DEVICE: list[bool] = []


def _autocast_takes_device() -> bool:
    """Whether `torch.is_autocast_enabled` takes a device (newer torch): asked once."""
    if not _AUTOCAST_TAKES_DEVICE:
        import torch

        try:
            torch.is_autocast_enabled("cuda")
            _AUTOCAST_TAKES_DEVICE.append(True)
        except TypeError:
            _AUTOCAST_TAKES_DEVICE.append(False)
    return _AUTOCAST_TAKES_DEVICE[0]


def install(steady: steadiness.Steadiness, name_of: Callable[[Any], str]) -> None:
    if steadiness.enabled() and steady.emit_line is not None:
        Repeats(steady, name_of).install()
