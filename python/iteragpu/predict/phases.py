"""Automatic phases: most scripts mark nothing, yet a prediction must say where the memory goes.

Outside the workload's own markers (markers win: inside a marked phase the tool adds nothing), the
prediction opens a phase around:
* the whole run of a script (`run <script>`), so that its overall peak is always there;
* each call of a root module (a module called from outside any other module): `GPT2LMHeadModel.forward #2`,
  unless it runs on the CPU only (CPU inputs, CPU or no weights: a data pipeline's transforms);
* each `backward()` (`backward #1`), each `optimizer.step()` (`AdamW.step #1`) and `zero_grad()`;
* each `generate()` (`generate #1`), split into its prefill (the first forward) and its decode
  steps (every later forward, one phase), as a GPU serves them.

A phase the workload raised in (a forward, backward, step, zero_grad, generate) closes `failed`
with the figures reached until then, never `predicted`; so do automatic phases still open when the
workload stops. They are numbered from 1 per name, like MemTracker's module phases, and marked `automatic` in the
file. After `PER_NAME` phases of one name, later calls are covered by the enclosing phases only
(said once): a long training loop is not a thousand phases.
"""

from __future__ import annotations

import collections
import functools
import sys
import threading
from typing import Any, Literal

from ..recorder import Record, Recorder

PER_NAME: int = 16


def _on_device(module: Any, args: Any) -> bool:
    """Whether a root module's call can touch the target device: a fake tensor among its positional
    inputs, or a fake parameter or buffer (its inputs may all be keywords, which the global hook
    does not see). A module on CPU data with CPU weights opens no phase."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._pytree import tree_flatten

    if any(isinstance(a, FakeTensor) and a.device.type != "cpu" for a in tree_flatten(args)[0]):
        return True
    for tensors in (module.parameters(), module.buffers()):
        first = next(tensors, None)
        # Weights built on the CPU are data-less too: only the device tells.
        if first is not None and first.device.type != "cpu":
            return True
    return False


def _raised_in_forward() -> BaseException | None:
    """The exception leaving a module's forward when its `always_call` forward hook runs for it.

    `Module._call_impl` calls an `always_call` hook from its `except` clause when the forward
    raised, and from its inner function after a normal return: the hook's caller tells which, and
    only then is the exception being handled the forward's own (a forward called from a user's own
    `except` clause returns normally from `inner`)."""
    caller: Any = sys._getframe(1)
    while caller is not None and caller.f_code.co_filename == __file__:
        caller = caller.f_back
    if caller is None or caller.f_code.co_name != "_call_impl":
        return None
    return sys.exc_info()[1]


class AutoPhases:
    """The automatic phases of one prediction, opened by hooks on modules, backward, optimizers and generate()."""

    def __init__(self, torch: Any, rec: Recorder, tracker: Any, notes: list[str]) -> None:
        self.torch = torch
        self.rec = rec
        self.tracker = tracker
        self.notes = notes
        self.counts: collections.Counter[str] = collections.Counter()
        self.mine: list[Record] = []  # the automatic phases open now (their recorder states)
        self.generating: list[dict[str, Any]] = []  # per generate() call: {"name", "forwards", "decode"}
        self.depth = threading.local()  # module calls open on this thread

    # ------------------------------------------------------------ when a phase may open
    def _free(self) -> bool:
        """No user marker is open (automatic phases nest only in automatic ones)."""
        return all(p["automatic"] for p in self.rec.open_phases())

    def _open(self, base: str) -> Record | None:
        """Opens `base #n`, the n-th automatic phase of that name."""
        if not self._free():
            return None
        self.counts[base] += 1
        n = self.counts[base]
        if n > PER_NAME:
            if n == PER_NAME + 1:
                self.notes.append(
                    f"automatic phases: {base} called more than {PER_NAME} times; later calls are in the enclosing phases only"
                )
            return None
        return self._open_named(f"{base} #{n}")

    def _open_named(self, name: str) -> Record | None:
        if not self._free():
            return None
        state = self.rec.begin(name, automatic=True)
        self.mine.append(state)
        return state

    def _close(self, state: Record | None, error: BaseException | None = None) -> None:
        if state is None or state not in self.mine:
            return
        self.mine.remove(state)
        self.rec.end(state, error)

    def close_all(self, error: BaseException | None = None) -> None:
        """At the run's end (or its failure: `error`), every automatic phase still open is closed
        (failed when the workload stopped inside it)."""
        while self.mine:
            self._close(self.mine[-1], error)

    # ------------------------------------------------------------ hooks
    def install(self) -> AutoPhases:
        torch = self.torch
        M = torch.nn.modules.module
        this = self

        depth = self.depth

        def pre(module: Any, args: Any) -> None:
            level = getattr(depth, "n", 0)
            depth.n = level + 1
            if level or torch._C._current_graph_task_id() != -1:
                return
            if this.generating:
                g = this.generating[-1]
                g["forwards"] += 1
                if g["forwards"] == 1 and g["name"]:
                    module.__dict__["_iteragpu_auto"] = this._open_named(f"{g['name']} prefill")
                elif g["forwards"] == 2 and g["name"]:
                    g["decode"] = this._open_named(f"{g['name']} decode")
                return
            if not _on_device(module, args):
                return  # a CPU module on CPU data (a torchvision transform in the data pipeline)
            module.__dict__["_iteragpu_auto"] = this._open(f"{type(module).__name__}.forward")

        def post(module: Any, args: Any, output: Any) -> None:
            depth.n = max(0, getattr(depth, "n", 1) - 1)
            state = module.__dict__.pop("_iteragpu_auto", None)
            if state is not None and depth.n == 0:
                this._close(state, _raised_in_forward())

        # Root modules are found by this hook's own depth count (the session's hooks keep names).
        M.register_module_forward_pre_hook(lambda m, a: pre(m, a))
        M.register_module_forward_hook(lambda m, a, o: post(m, a, o), always_call=True)

        original_backward = torch.Tensor.backward

        @functools.wraps(original_backward)
        def backward(t: Any, *args: Any, **kwargs: Any) -> Any:
            state = this._open("backward")
            try:
                result = original_backward(t, *args, **kwargs)
            except BaseException as exc:
                this._close(state, exc)
                raise
            this._close(state)
            return result

        torch.Tensor.backward = backward
        import torch.optim.optimizer as optimizer

        steps: dict[int, Record | None] = {}

        def step_pre(opt: Any, args: Any, kwargs: Any) -> None:
            steps[id(opt)] = this._open(f"{type(opt).__name__}.step")

        def step_post(opt: Any, args: Any, kwargs: Any) -> None:
            this._close(steps.pop(id(opt), None))

        optimizer.register_optimizer_step_pre_hook(step_pre)
        optimizer.register_optimizer_step_post_hook(step_post)
        original_zero_grad = optimizer.Optimizer.zero_grad

        @functools.wraps(original_zero_grad)
        def zero_grad(opt: Any, *args: Any, **kwargs: Any) -> Any:
            state = this._open(f"{type(opt).__name__}.zero_grad")
            try:
                result = original_zero_grad(opt, *args, **kwargs)
            except BaseException as exc:
                this._close(state, exc)
                raise
            this._close(state)
            return result

        optimizer.Optimizer.zero_grad = zero_grad
        from . import idioms

        idioms.after_import("transformers.generation.utils", self._generate)
        return self

    def _generate(self, module: Any) -> None:
        mixin = getattr(module, "GenerationMixin", None)
        if mixin is None or getattr(mixin.generate, "_iteragpu", False):
            return
        original = mixin.generate
        this = self

        @functools.wraps(original)
        def generate(model: Any, *args: Any, **kwargs: Any) -> Any:
            outer = this._open("generate")
            name = outer["name"] if outer is not None else None
            g: dict[str, Any] = {"name": name, "forwards": 0, "decode": None}
            if name is not None:
                this.generating.append(g)
            try:
                result = original(model, *args, **kwargs)
            except BaseException as exc:
                if name is not None:
                    this.generating.remove(g)
                this._close(g["decode"], exc)
                this._close(outer, exc)
                raise
            if name is not None:
                this.generating.remove(g)
            this._close(g["decode"])
            this._close(outer)
            return result

        generate._iteragpu = True  # type: ignore[attr-defined]  # marks the wrapper: installed once
        mixin.generate = generate

    def whole_run(self, label: str) -> Whole:
        """The phase around a whole script (`run train.py`)."""
        return Whole(self, label)


class Whole:
    """The automatic phase around a whole script, as a context manager."""

    def __init__(self, phases: AutoPhases, label: str) -> None:
        self.phases = phases
        self.label = label

    def __enter__(self) -> Whole:
        this = self.phases
        self.state = this.rec.begin(f"run {self.label}", automatic=True)
        this.mine.append(self.state)
        return self

    def __exit__(self, kind: object, value: BaseException | None, tb: object) -> Literal[False]:
        this = self.phases
        # Phases left open by the script close first (inside end()).
        if self.state in this.mine:
            this.mine.remove(self.state)
            this.rec.end(self.state, value)
        for s in list(this.mine):
            if s not in this.rec.open_phases():
                this.mine.remove(s)
        return False
