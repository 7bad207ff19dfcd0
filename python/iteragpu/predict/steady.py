"""A `Trainer` epoch's steady state, fast-forwarded: the remaining steps of an epoch that would
repeat the last ones exactly are not run; their storage events are the last step's, replayed.

A training loop's steps are alike: once the optimizer's state exists, each step allocates and
frees the same storages in the same order. Predicting every step of a long epoch costs minutes
(every op of the forward, the backward and the optimizer runs on fake tensors), for events that
repeat. transformers' `Trainer` (and the trainers built on it: TRL's) says where a step ends
(`CallbackHandler.on_step_end`) and where its inputs come from (`Trainer.get_batch_samples`), which
makes the repetition checkable:

* a *window* is everything the worker emitted between two step ends (the step's data loading,
  forward, backward, clipping, optimizer step, zero_grad); the window is *steady* when it holds
  storage events only (alloc, free, tag: no phase boundary, no note, no unpredictable op), nothing
  tainted, and no value read from data (an `.item()`, a `bool()`, a read back to the host answered
  from known values, a size decided by known values: anything through which the batch's values
  could steer the step) — a read of an unknown value answered by the placeholder policy is the
  same answer every step, and its count is carried;
* after `IDENTICAL` steady windows that are equal (the same events, sizes, categories, modules,
  shapes, dtypes and sites, with storage ids relative to each window's first), in which every id
  referred to is the window's own or the previous window's, and what a window leaves alive is
  exactly what the next one frees (nothing accumulates);
* the remaining steps of the epoch (bounded by `max_steps`; with gradient accumulation a step
  is its micro-batches, and an epoch whose last step holds fewer of them is not fast-forwarded,
  since that step must run and the loop's micro-batch count cannot be advanced from here) are
  fast-forwarded only if each of
  their batches has the same structure, shapes and dtypes as the batches of those windows (the
  batches are drawn from the epoch's iterator as the loop would draw them, and given back to it if
  they do not), if transformers' own flow callback would not log, evaluate or save at any of them
  but the last, and if every callback is one of transformers' own that do not touch tensors;
* then each remaining step's window is emitted again (fresh ids, in the same order), the storages
  the last real step left alive take the ids the last replayed step gave them, the placeholder
  counts grow as those steps would have grown them, the learning-rate scheduler steps and the
  `Trainer`'s step, epoch and FLOs counters advance, and the loop ends its epoch there: the last
  step's flow flags, the epoch's end, evaluation, saving, logging and everything after the loop run
  as usual.

The CLI replays every step's events through its allocator model, so the figures are those of the
whole run. What the skipped steps would have changed in values only (the loss accumulated, the
optimizer's step count followed as a known value) is that of the last step run; the prediction says
how many steps of which epoch were fast-forwarded (a note, in the table's notes and the file).
`ITERAGPU_PREDICT_STEADY=0` runs every step (the reference: `tests/integration/predict_speed.rs`
holds the documents equal but for that note).
"""

from __future__ import annotations

import math
import os
import weakref
from typing import Any, Callable

# Set to "0" to run every step.
ENV: str = "ITERAGPU_PREDICT_STEADY"
# Equal steady windows seen before the rest of an epoch is fast-forwarded.
IDENTICAL: int = 3
_STORAGE: tuple[str, ...] = ("alloc", "free", "tag")
_HEADS: dict[str, str] = {kind: f'{{"type": "{kind}", "data": {{"id": ' for kind in _STORAGE}

# A window longer than this many events is not kept (a long run after the last step: never steady).
WINDOW_LIMIT: int = 200_000
# The worker's tap on every event it emits (set while a Trainer's steps are watched).
TAP: Callable[[str, str], None] | None = None


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


class _Window:
    """What was emitted between two step ends, with the storage ids it allocated."""

    __slots__ = ("lines", "base", "end", "reads", "placeholders", "loop_hits", "batches", "overflow")

    def __init__(self, base: int, tracker: Any) -> None:
        self.lines: list[tuple[str, str]] = []
        self.base = base
        self.end = base
        self.reads = 0
        self.placeholders = dict(tracker.placeholders)
        self.loop_hits = dict(tracker.loop_hits)
        self.batches: list[Any] = []
        self.overflow = False


class _Steady:
    """A closed window's storage events relative to its first id, or why it is not steady."""

    def __init__(self, window: _Window, tracker: Any) -> None:
        self.why: str | None = None
        self.count = window.end - window.base
        self.templates: list[tuple[str, str, int, str]] = []
        self.batches = window.batches
        self.placeholders = _delta(window.placeholders, tracker.placeholders)
        self.loop_hits = _delta(window.loop_hits, tracker.loop_hits)
        if window.reads:
            self.why = "a value read from data"
            return
        if window.overflow:
            self.why = "too many events"
            return
        allocated: set[int] = set()
        freed: set[int] = set()
        earlier: set[int] = set()
        for kind, line in window.lines:
            head = _HEADS.get(kind)
            if head is None or not line.startswith(head):
                self.why = f"a {kind} event"
                return
            i = j = len(head)
            while j < len(line) and line[j].isdigit():
                j += 1
            rel = int(line[i:j]) - window.base
            rest = line[j:]
            if not -self.count <= rel < self.count:
                self.why = "an older storage"
                return
            if kind == "alloc":
                if rel < 0 or rel in allocated or '"tainted": true' in rest:
                    self.why = "a tainted or repeated allocation"
                    return
                allocated.add(rel)
            elif kind == "free":
                (freed if rel >= 0 else earlier).add(rel)
            self.templates.append((kind, head, rel, rest))
        if len(allocated) != self.count:
            self.why = "ids allocated elsewhere"
            return
        # Whether its events change what the allocator model answers the script (memory.py).
        from .memory import CHANGES

        self.changes = any(kind in CHANGES for kind, _, _, _ in self.templates)
        # What this window leaves alive (relative to the next window's first id), and what it
        # frees of the previous window's (relative to its own): equal when nothing accumulates.
        self.escapes = {rel - self.count for rel in allocated - freed}
        self.earlier = earlier

    def key(self) -> tuple[Any, ...]:
        return (self.count, self.templates, self.placeholders, self.loop_hits)


def _delta(before: dict[Any, int], after: Any) -> dict[Any, int]:
    return {site: n - before.get(site, 0) for site, n in after.items() if n != before.get(site, 0)}


def _fingerprint(batch: Any) -> Any:
    """A batch's structure, with its tensors' shapes, dtypes and devices (values aside)."""
    import torch

    if isinstance(batch, torch.Tensor):
        return ("tensor", tuple(batch.shape), batch.dtype, batch.device.type, type(batch).__name__)
    if isinstance(batch, dict) or (hasattr(batch, "keys") and hasattr(batch, "__getitem__") and not isinstance(batch, type)):
        return (type(batch).__name__, tuple((k, _fingerprint(batch[k])) for k in batch.keys()))
    if isinstance(batch, (list, tuple)):
        return (type(batch).__name__, tuple(_fingerprint(x) for x in batch))
    if batch is None or isinstance(batch, (bool, int, float, str)):
        return (type(batch).__name__, batch)
    return ("other", type(batch).__name__, id(batch))  # never equal to another batch's


def _tensors(batch: Any) -> list[Any]:
    """The tensors in a batch (`_fingerprint`'s walk)."""
    import torch

    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, dict) or (hasattr(batch, "keys") and hasattr(batch, "__getitem__") and not isinstance(batch, type)):
        return [t for k in batch.keys() for t in _tensors(batch[k])]
    if isinstance(batch, (list, tuple)):
        return [t for x in batch for t in _tensors(x)]
    return []


class _Raise:
    """An error the epoch's iterator raised while batches were drawn ahead."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Pushback:
    """An epoch's iterator with batches given back in front of it: drawn untracked, each is
    registered when the loop takes it, as it would have been when drawn then."""

    def __init__(self, iterator: Any, front: list[Any], tracker: Any) -> None:
        self.iterator = iterator
        self.front = front
        self.tracker = tracker

    def __iter__(self) -> _Pushback:
        return self

    def __next__(self) -> Any:
        if self.front:
            batch = self.front.pop(0)
            if isinstance(batch, _Raise):
                raise batch.error
            for t in _tensors(batch):
                self.tracker.register(t)
            return batch
        return next(self.iterator)


class Watch:
    """One Trainer's steps: windows, the steady check, the fast-forward."""

    def __init__(self, steady: Steadiness, trainer: Any) -> None:
        self.steady = steady
        self.trainer = weakref.ref(trainer)
        self.window: _Window | None = None
        self.closed: list[_Steady] = []
        self.iterator: Any = None
        self.front: list[Any] = []
        self.refused: Callable[[], Any] = lambda: None  # the epoch iterator for which a fast-forward was refused

    def batches(self, iterator: Any, taken: list[Any]) -> None:
        # Held weakly: the loop's iterator (a generator suspended on its last batch) dies with
        # the epoch, as it would without this watch.
        try:
            self.iterator = weakref.ref(iterator)
        except TypeError:
            self.iterator = None
        if self.window is not None:
            self.window.batches.extend(_fingerprint(b) for b in taken)

    def step_end(self, handler: Any, args: Any, state: Any, control: Any) -> None:
        tracker = self.steady.tracker
        window = self.window
        self.window = self.steady.current = None
        if window is not None:
            window.end = tracker.next_id
            self.closed = (self.closed + [_Steady(window, tracker)])[-IDENTICAL:]
            try:
                self._fast_forward(handler, args, state, control)
            except _Refuse:
                pass
        self.window = _Window(tracker.next_id, tracker)
        self.steady.current = self.window

    def _fast_forward(self, handler: Any, args: Any, state: Any, control: Any) -> None:
        try:
            plan = self._plan(handler, args, state)
        except _Refuse:
            raise
        except Exception:  # a Trainer unlike transformers' own (a subclass, another version): every step runs
            raise _Refuse from None
        self._run(plan, handler, state, control)

    def _plan(self, handler: Any, args: Any, state: Any) -> tuple[Any, ...]:
        """What a fast-forward from this step would be (refused when any check fails)."""
        from transformers import trainer_callback

        windows = self.closed
        if len(windows) < IDENTICAL or any(w.why is not None for w in windows):
            raise _Refuse
        last = windows[-1]
        if any(w.key() != last.key() for w in windows) or not last.batches or last.earlier != last.escapes:
            raise _Refuse
        if any(b != last.batches[0] for w in windows for b in w.batches):
            raise _Refuse
        tracker = self.steady.tracker
        # The storages the last step left alive: those the next step frees.
        alive = {known.event - tracker.next_id for known in tracker.live.values() if known.event is not None and known.event >= tracker.next_id - last.count}
        if alive != last.escapes or tracker.tainted & set(range(tracker.next_id - last.count, tracker.next_id)):
            raise _Refuse
        trainer = self.trainer()
        iterator = self.iterator() if self.iterator is not None else None
        if trainer is None or iterator is None or iterator is self.refused():
            raise _Refuse
        allowed = (trainer_callback.DefaultFlowCallback, trainer_callback.ProgressCallback, trainer_callback.PrinterCallback)
        if any(type(cb) not in allowed for cb in handler.callbacks) or getattr(args, "include_num_input_tokens_seen", False) not in (False, "no", None):
            raise _Refuse
        flow = next(cb for cb in handler.callbacks if type(cb) is trainer_callback.DefaultFlowCallback)
        loader = handler.train_dataloader
        try:
            per_epoch = len(loader)
        except TypeError:
            raise _Refuse from None
        # With gradient accumulation a step is `accumulate` micro-batches (the loader's batches):
        # each window drew that many, and the epoch's progress counts micro-batches.
        accumulate = max(1, int(args.gradient_accumulation_steps))
        if per_epoch <= 0 or len(last.batches) != accumulate:
            raise _Refuse
        epoch = math.floor(state.epoch)
        done = round((state.epoch - epoch) * per_epoch)
        if not 0 < done < per_epoch or not math.isclose(epoch + done / per_epoch, state.epoch):
            raise _Refuse
        left = per_epoch - done
        remaining = min(left // accumulate, state.max_steps - state.global_step)
        # An epoch whose last step has fewer micro-batches: that step must run, which the loop
        # (its micro-batch count a local of its own) cannot be made to do after a fast-forward.
        if remaining < 2 or (remaining == left // accumulate and left % accumulate):
            raise _Refuse
        # transformers' flow callback: nothing logged, evaluated or saved at this step (its flags
        # are set after this hook) nor at any of them but the last.
        import copy

        for step in range(state.global_step, state.global_step + remaining):
            probe, flags = copy.copy(state), trainer_callback.TrainerControl()
            probe.global_step = step
            flow.on_step_end(args, probe, flags)
            if flags.should_log or flags.should_evaluate or flags.should_save or flags.should_training_stop or flags.should_epoch_stop:
                raise _Refuse
        return trainer, iterator, last, epoch, done, remaining, per_epoch, accumulate

    def _run(self, plan: tuple[Any, ...], handler: Any, state: Any, control: Any) -> None:
        trainer, iterator, last, epoch, done, remaining, per_epoch, accumulate = plan
        tracker = self.steady.tracker
        # Their batches, drawn as the loop would draw them (a loader that moves them to the device
        # does it untracked: each replayed step holds its own batch's storages); given back unless
        # all alike (then tracked when the loop takes them: see `Steadiness._trainer`).
        drawn: list[Any] = []
        alike = True
        with tracker.suspended():
            for _ in range(remaining * accumulate):
                try:
                    batch = next(iterator)
                except StopIteration:
                    alike = False
                    break
                except Exception as exc:  # the loader's own error: raised when the loop reaches that batch
                    drawn.append(_Raise(exc))
                    alike = False
                    break
                drawn.append(batch)
                if _fingerprint(batch) != last.batches[0]:
                    alike = False
                    break
        flos: list[float] = []
        if alike:
            try:
                flos = [float(trainer.floating_point_ops(batch)) for batch in drawn]
            except Exception:  # a model that cannot count them: every step runs
                alike = False
        if not alike:
            self.front[:0] = drawn
            self.refused = weakref.ref(iterator)
            raise _Refuse
        self._replay(last, remaining)
        for each in flos:  # added one by one, as the loop adds them
            trainer.current_flos += each
        scheduler = handler.lr_scheduler
        if scheduler is not None and not _plateau(scheduler):
            for _ in range(remaining):
                scheduler.step()
        state.global_step += remaining
        state.epoch = epoch + (done + remaining * accumulate) / per_epoch
        control.should_epoch_stop = True
        self.closed = []
        micro = f", {accumulate} micro-batches each" if accumulate > 1 else ""
        self.steady.note(
            f"steady state: steps {state.global_step - remaining + 1} to {state.global_step} of epoch {epoch + 1} ({remaining} steps{micro}) were not run: "
            f"the last {IDENTICAL} steps run were identical (the same storage events, in the same order, no value read from data) and these steps' batches have "
            f"the same shapes; each repeats step {state.global_step - remaining}'s events in the replay (values they would have changed, such as the loss and "
            f"the optimizer's step count, are those of the last step run; ITERAGPU_PREDICT_STEADY=0 runs every step)"
        )

    def _replay(self, last: _Steady, times: int) -> None:
        tracker = self.steady.tracker
        emit = self.steady.emit_line
        many = self.steady.emit_many
        first = tracker.next_id
        with tracker.lock:
            base = first
            for _ in range(times):
                if many is not None:
                    many([f"{head}{base + rel}{rest}" for _, head, rel, rest in last.templates], last.changes)
                else:
                    for kind, head, rel, rest in last.templates:
                        emit(kind, f"{head}{base + rel}{rest}")
                base += last.count
            tracker.next_id = base
            shift = base - first
            for known in tracker.live.values():
                if known.event is not None and first - last.count <= known.event < first:
                    known.event += shift
            for site, n in last.placeholders.items():
                tracker.placeholders[site] += n * times
            for site, n in last.loop_hits.items():
                tracker.loop_hits[site] += n * times


class _Refuse(Exception):
    """No fast-forward now."""


def _plateau(scheduler: Any) -> bool:
    import torch

    return isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau) or type(scheduler).__name__ == "GreedyLR"


class Steadiness:
    """The worker's watch over `Trainer` loops (installed once per prediction)."""

    def __init__(self, tracker: Any, note: Callable[[str], None]) -> None:
        self.tracker = tracker
        self.note = note
        self.current: _Window | None = None
        self.emit_line: Callable[[str, str], None] = tracker._emit_line
        self.emit_many: Callable[[list[str], bool], None] | None = getattr(tracker._emit, "encoded_many", None)
        self.watches: weakref.WeakKeyDictionary[Any, Watch] = weakref.WeakKeyDictionary()
        self.handlers: weakref.WeakKeyDictionary[Any, Watch] = weakref.WeakKeyDictionary()
        # The windows of root calls being watched (repeat.py), inside the Trainer's or not.
        self.calls: list[_Window] = []

    def tap(self, kind: str, line: str) -> None:
        for window in (self.current, *self.calls) if self.calls else (self.current,):
            if window is not None and not window.overflow:
                window.lines.append((kind, line))
                if len(window.lines) > WINDOW_LIMIT:
                    window.lines.clear()
                    window.overflow = True

    def read(self) -> None:
        for window in (self.current, *self.calls):
            if window is not None:
                window.reads += 1

    def install(self) -> None:
        if not enabled() or self.emit_line is None:
            return
        self._count_reads()
        from .idioms import after_import

        after_import("transformers.trainer", self._trainer)

    def _count_reads(self) -> None:
        """A value read from data (known values, or a real tensor's) makes its window unsteady; a
        placeholder answer (an unknown value, by the stated policy) does not."""
        tracker = self.tracker
        steady = self

        def counted(name: str) -> None:
            original = getattr(tracker, name)

            def wrapper(*args: Any, **kwargs: Any) -> Any:
                before = sum(tracker.placeholders.values())
                result = original(*args, **kwargs)
                if sum(tracker.placeholders.values()) == before and (name != "_known_shape" or result is not None):
                    steady.read()
                return result

            setattr(tracker, name, wrapper)

        for name in ("_scalar", "_host_value", "_known_shape"):
            counted(name)

    def _trainer(self, module: Any) -> None:
        trainer_class = getattr(module, "Trainer", None)
        handler_class = getattr(module, "CallbackHandler", None)
        if trainer_class is None or handler_class is None or not callable(getattr(trainer_class, "get_batch_samples", None)):
            return
        steady = self
        original_batches = trainer_class.get_batch_samples
        original_step_end = handler_class.on_step_end

        def get_batch_samples(trainer: Any, epoch_iterator: Any, num_batches: int, device: Any) -> Any:
            global TAP
            watch = steady.watches.get(trainer)
            if watch is None:
                # Every event is seen from the first Trainer's first batch on.
                TAP = steady.tap
                watch = steady.watches[trainer] = Watch(steady, trainer)
                steady.handlers[trainer.callback_handler] = watch
            # Batches drawn for a fast-forward that did not happen come first, in their order.
            source = _Pushback(epoch_iterator, watch.front, steady.tracker) if watch.front and watch.refused() is epoch_iterator else epoch_iterator
            result = original_batches(trainer, source, num_batches, device)
            watch.batches(epoch_iterator, list(result[0]) if isinstance(result, tuple) and result and isinstance(result[0], list) else [object()])
            return result

        def on_step_end(handler: Any, args: Any, state: Any, control: Any, *rest: Any, **kwargs: Any) -> Any:
            watch = steady.handlers.get(handler)
            if watch is not None:
                watch.step_end(handler, args, state, control)
            return original_step_end(handler, args, state, control, *rest, **kwargs)

        trainer_class.get_batch_samples = get_batch_samples
        handler_class.on_step_end = on_step_end
