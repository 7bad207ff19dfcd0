"""Real values of small fake tensors, followed wherever they are knowable.

A fake tensor has a shape and a device but no data. Yet scripts read values back: `generate()`
stops when `unfinished.max() == 0`, a mask of ones decides whether attention needs a mask at all,
`cache_position[-1]` picks a branch. Those values do not depend on the model's data: they come
from Python numbers, shapes, `arange`, `full`, `ones`, `randint` inputs, masks and lengths. So
every small fake storage (at most `SMALL` elements) made by an op whose inputs are all known gets a
real CPU *base* holding its values, computed by running the same op on the CPU; every view of the
storage reads its values through `as_strided` on that base, and in-place ops update it, as memory
would.

Unknown values (an argmax of logits, anything computed from weights) have no base. Boolean logic
still knows what absorption decides: `known_true | unknown` is True, `known_false & unknown` is
False, so `generate()`'s `is_done = max_length_reached | eos_seen` is known once the length is
reached, and it stops exactly where the GPU would (with the policy "no sequence ends early" for the
unknown EOS part, see tracker.py's reads).

One op's written value is decided by a stated policy instead: the AMP check of the gradients for
inf/NaN (`GradScaler.unscale_`/`step`) leaves `found_inf` as it was, i.e. the gradients are assumed
finite, so the optimizer steps and the loss scale grows as in a run without overflow (a skipped
step would allocate no optimizer state: never the longest case).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

# Largest storage (in elements) whose values are followed: masks, lengths, positions, token ids.
# A batch's labels must stay known (their mask decides an SFT loss's selection, sizes.py): 2^18
# covers 256K tokens per micro-batch (32 × 8192, 64 × 4096, 2 × 131072), at most 2 MiB of int64
# per followed storage; at 2^16 a 32 × 4096 SFT batch was unpredictable. Measured: a tiny Llama's
# generate at 1 × 4096 (its rotary tables now followed) took no longer (17 s against 22 s, noise).
SMALL: int = 1 << 18
# Largest real CPU input an op may read to compute a followed value.
REAL_INPUT: int = 1 << 20

aten: Any = torch.ops.aten

# Boolean ops whose result can be known although an input is not (absorption).
_OR: set[str] = {"bitwise_or", "logical_or", "__or__", "__ior__", "bitwise_or_", "logical_or_"}
_AND: set[str] = {"bitwise_and", "logical_and", "__and__", "__iand__", "bitwise_and_", "logical_and_"}
_NOT: set[str] = {"bitwise_not", "logical_not", "bitwise_not_", "logical_not_"}
PARTIAL: set[str] = _OR | _AND | _NOT

# In-place ops whose named written arguments keep their values whatever the data (the policy above):
# op name -> (argument names, the note said once).
KEEPS: dict[str, tuple[tuple[str, ...], str]] = {
    "_amp_foreach_non_finite_check_and_unscale_": (
        ("found_inf",),
        "GradScaler: gradients assumed finite (the inf/NaN check finds none): every optimizer step runs and the loss scale grows as in a run without overflow",
    ),
}


class Values:
    """id(storage) -> [base (real 1-D CPU tensor), known mask (same shape, bool) or None = all known]."""

    def __init__(self) -> None:
        self.bases: dict[int, list[Any]] = {}

    def _entry(self, t: Any) -> tuple[int | None, Any]:
        """(id of `t`'s storage, the storage), or (None, None) when it has none."""
        try:
            st = t.untyped_storage()
        except Exception:  # a tensor subclass may refuse its storage with any error: not followed
            return None, None
        return id(st), st

    def _view(self, base: Any, t: Any) -> Any:
        try:
            return base.as_strided(t.size(), t.stride(), t.storage_offset())
        except Exception:  # a view beyond the base (a resized storage), or any tensor subclass's refusal: not followed
            return None

    def get(self, t: Any) -> tuple[Any, Any] | None:
        """(values, known mask or None) of fake tensor `t`, or None when nothing is known."""
        key, _ = self._entry(t)
        if key is None:
            return None
        entry = self.bases.get(key)
        if entry is None or entry[0].dtype != t.dtype:
            return None
        with _disable_current_modes():
            values = self._view(entry[0], t)
            if values is None:
                return None
            mask = None if entry[1] is None else self._view(entry[1], t)
            if mask is not None and bool(mask.all()):
                mask = None
        return values, mask

    def known(self, t: Any) -> Any:
        """The real values of `t` when every element is known, else None."""
        got = self.get(t)
        if got is None or got[1] is not None:
            return None
        return got[0]

    def set(self, t: Any, values: Any, mask: Any = None) -> None:
        """Records `values` (a real CPU tensor of t's shape) as the content of fake tensor `t`."""
        key, st = self._entry(t)
        if key is None:
            return
        nbytes = st.nbytes()
        itemsize = t.element_size()
        # On a symbolic size (symbolic.py) these tests are guards the trace records.
        if nbytes == 0 or nbytes // itemsize > SMALL:
            self.drop(t)
            return
        nbytes = int(nbytes)
        with _disable_current_modes():
            entry = self.bases.get(key)
            if entry is None or entry[0].dtype != t.dtype or entry[0].numel() != nbytes // itemsize:
                base = torch.zeros(nbytes // itemsize, dtype=t.dtype, device="cpu")
                entry = [base, torch.zeros(base.shape, dtype=torch.bool, device="cpu")]
                self.bases[key] = entry
                weakref.finalize(st, self.bases.pop, key, None)
            view = self._view(entry[0], t)
            if view is None:
                self.bases.pop(key, None)
                return
            # An expanded tensor (a stride 0: every element of that dimension is one location) is
            # written once per location; any other overlap is not followed.
            once = tuple(0 if (st == 0 and n > 1) else slice(None) for st, n in zip(view.stride(), view.shape))
            try:
                view[once].copy_(values.to(t.dtype).expand(t.shape)[once])
            except RuntimeError:  # memory overlap beyond an expansion: values unknown, never wrong
                self.bases.pop(key, None)
                return
            if mask is None:
                if entry[1] is not None:
                    known = self._view(entry[1], t)
                    known.fill_(True)
                    if bool(entry[1].all()):
                        entry[1] = None
            else:
                if entry[1] is None:
                    entry[1] = torch.ones(entry[0].shape, dtype=torch.bool, device="cpu")
                self._view(entry[1], t)[once].copy_(mask.expand(t.shape)[once])

    def drop(self, t: Any) -> None:
        """`t`'s storage was written with values nobody knows."""
        key, _ = self._entry(t)
        if key is not None:
            self.bases.pop(key, None)


def known_mask(name: str, inputs: list[tuple[Any, Any]], shape: Any) -> Any:
    """Which elements of a boolean op's result are known when some input is only partly known
    (absorption), or None when the op decides nothing. `inputs` are (values, mask) pairs, the
    unknown elements' values filled with zeros and their mask False; the caller computes the
    values with the op itself on those filled inputs (right wherever the mask is True)."""
    if name in _NOT and len(inputs) == 1:
        return inputs[0][1].expand(shape)
    if len(inputs) != 2 or (name not in _OR and name not in _AND):
        return None
    (a, ka), (b, kb) = ((v.expand(shape), k.expand(shape)) for v, k in inputs)
    if name in _OR:
        if a.dtype != torch.bool or b.dtype != torch.bool:
            return ka & kb  # an integer OR is decided by both sides only
        return (ka & kb) | (ka & a) | (kb & b)
    return (ka & kb) | (ka & (a == 0)) | (kb & (b == 0))


def base_name(func: Any) -> str:
    """`aten.bitwise_or.Tensor` -> `bitwise_or`."""
    return func.__name__.split(".")[0] if hasattr(func, "__name__") else str(func)
