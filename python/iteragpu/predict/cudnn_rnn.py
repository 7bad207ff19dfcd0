"""`nn.LSTM`, `nn.GRU` and `nn.RNN` on the target as PyTorch runs them there: through cuDNN.

On a GPU, `aten::lstm` (and `gru`, `rnn_tanh`, `rnn_relu`, packed or not) takes its cuDNN branch
whenever `use_cudnn(input)` holds (aten/src/ATen/native/RNN.cpp), and that branch
(`_cudnn_impl` in aten/src/ATen/native/cudnn/RNN.cpp) asks cuDNN for a handle, the weight space,
the dropout state and its event before any op a fake tensor could answer: without a driver it
fails. Here the same branch is followed in Python, without a CUDA or cuDNN call, and each storage
it makes goes through the tracker as on the GPU:

* the flattened weight buffer: `RNNBase.flatten_parameters` (at `.cuda()`/`.to()`, through
  `_apply` → `_init_flat_weights`) calls `_cudnn_rnn_flatten_weight`, which makes one zeroed
  buffer of cuDNN's weight-space size, copies every weight into it and `set_`s each parameter to
  a view of it (`copy_weights_to_flat_buf_views`): the old storages are freed. PyTorch's
  RNNDescriptor always says `CUDNN_RNN_DOUBLE_BIAS` (aten/src/ATen/cudnn/Descriptors.h), so the
  buffer holds both biases even for `bias=False`. A module whose weights are not views of one
  buffer gets a new buffer at every call (`_cudnn_rnn`: "RNN module weights are not part of
  single contiguous chunk of memory"), kept for backward;
* `_cudnn_rnn`'s own storages, in its order: a contiguous copy of the input when `batch_first`
  (or not contiguous), the output, hy, cy (an empty one for GRU/RNN), the workspace, the reserve
  space (training only, `train=self.training`, kept for backward when a gradient is needed), then
  the workspace is freed;
* its backward (`_cudnn_rnn_backward`): zeros for the gradients not given, the input copy again,
  dx, dhx, dcx and a workspace (`_cudnn_rnn_backward_input`); then a zeroed dw of the weight
  buffer's size and a workspace (`_cudnn_rnn_backward_weight`), whose views become the weights'
  gradients (separate tensors when `bias=False`: their layout differs);
* the dropout state (`get_dropout_state`): made once per device, by `_cudnn_init_dropout_state`,
  at the first call in training with dropout > 0 (and again after the CUDA generator is seeded),
  held until the process ends;
* under CUDA autocast, AutocastRNN.cpp's cast: fp16 (whatever the autocast dtype) input and
  states, the weights copied into a new fp16 flat buffer for the call;
* `pack_padded_sequence` on a cuda tensor with CPU lengths: PackedSequence.cpp's blocks and
  `cat`, its batch sizes the real ones.

Not followed: `backward(retain_graph=True)` makes cuDNN's backward clone the reserve space first
(derivatives.yaml: `retain_variables ? result3.clone() : result3`); the clone is not counted.

What cannot be known here: the workspace and reserve-space sizes come from cuDNN's
`cudnnGetRNNTempSpaceSizes`, and the dropout state's from `cudnnDropoutGetStatesSize`, library
calls that need the GPU. The first two are bounded (`temp_space`); the dropout state is taken as
2 MiB (PyTorch's source: "slightly over 2MB"), an assumption. Each prediction says so in its
notes, with the figures. `torch.backends.cudnn.enabled = False`
keeps PyTorch's native path (the decomposition into ops fake tensors run), as on a GPU.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable

from .tracker import Category

# cudnnRNNMode_t, as torch.backends.cudnn.rnn.get_cudnn_mode gives it.
MODES: dict[str, int] = {"RNN_RELU": 0, "RNN_TANH": 1, "LSTM": 2, "GRU": 3}
_NAMES: dict[int, str] = {v: k for k, v in MODES.items()}
# Gates per cell: cuDNN's "linear layers" per matrix group (RNN.cpp `_num_linear_layers` / 2).
GATES: dict[int, int] = {0: 1, 1: 1, 2: 4, 3: 3}
# PyTorch's RNN.cpp: "Each state is slightly over 2MB" (cudnnDropoutGetStatesSize depends on the device).
DROPOUT_STATE_BYTES: int = 2 << 20
# Distinct shapes whose bounds are said one by one (a script with varying lengths has many).
BOUND_NOTES: int = 4
WEIGHT_FORMAT_WARN: str = (
    "RNN module weights are not part of single contiguous chunk of memory. This means they need to be "
    "compacted at every call, possibly greatly increasing memory usage. To compact weights again call "
    "flatten_parameters()."
)


# ---------------------------------------------------------------------------- sizes
def layer_shapes(mode: int, input_size: int, hidden: int, proj: int, layers: int, bidirectional: bool) -> list[list[tuple[int, ...]]]:
    """Per pseudo-layer (layer × direction), the shapes cuDNN's weight space holds with
    CUDNN_RNN_DOUBLE_BIAS, in `get_parameters`' order: w_ih, w_hh, b_ih, b_hh, then w_hr when
    `proj_size` is set (RNN.cpp `add_projection_weights`)."""
    dirs = 2 if bidirectional else 1
    g = GATES[mode]
    out = proj or hidden
    shapes = []
    for layer in range(layers):
        n_in = input_size if layer == 0 else out * dirs
        for _ in range(dirs):
            one: list[tuple[int, ...]] = [(g * hidden, n_in), (g * hidden, out), (g * hidden,), (g * hidden,)]
            if proj:
                one.append((proj, hidden))
            shapes.append(one)
    return shapes


def weight_numel(mode: int, input_size: int, hidden: int, proj: int, layers: int, bidirectional: bool) -> int:
    """cuDNN's weight space in elements (`get_num_weights`): every matrix and both biases of
    every pseudo-layer, laid out contiguously (`get_parameters` checks each offset)."""
    return sum(math.prod(s) for one in layer_shapes(mode, input_size, hidden, proj, layers, bidirectional) for s in one)


def _offsets(shapes: list[list[tuple[int, ...]]]) -> list[list[int]]:
    offsets, at = [], 0
    for one in shapes:
        row = []
        for s in one:
            row.append(at)
            at += math.prod(s)
        offsets.append(row)
    return offsets


def _pick(stride0: int, has_proj: bool) -> list[int]:
    """Which of a pseudo-layer's cuDNN tensors (w_ih, w_hh, b_ih, b_hh, w_hr) the module's
    `stride0` weights are: without biases, w_ih, w_hh (and w_hr), as `_viewOrCopyParams`."""
    if has_proj:
        return [0, 1, 2, 3, 4] if stride0 == 5 else [0, 1, 4]
    return [0, 1, 2, 3] if stride0 == 4 else [0, 1]


# MIOpen's workspaceScale per mode (ROCm's implementation of the same RNN API, src/rnn.cpp).
MIOPEN_SCALE: dict[int, int] = {0: 1, 1: 1, 2: 6, 3: 4}


def miopen_space(mode: int, hidden: int, layers: int, bidirectional: bool, tokens: int, itemsize: int, dropout: float) -> dict[str, int]:
    """What MIOpen answers for the same call (src/rnn.cpp `GetReserveSize`, `GetWorkspaceSize`,
    default algorithm): the one public implementation of this API whose sizes can be read."""
    dirs = 2 if bidirectional else 1
    scale = MIOPEN_SCALE[mode]
    reserve = 2 * scale * layers * tokens * hidden * itemsize
    if mode == MODES["LSTM"]:
        reserve = reserve // 2 + layers * tokens * hidden * itemsize
    if dropout > 0:
        reserve += (layers - 1) * tokens * hidden * (itemsize + 1)
    workspace = scale * layers * tokens * hidden * itemsize
    return {"reserve": dirs * reserve, "workspace": dirs * workspace}


def temp_space(mode: int, hidden: int, proj: int, layers: int, bidirectional: bool, tokens: int, mini_batch: int, itemsize: int, dropout: float) -> dict[str, int]:
    """Upper bounds of what `cudnnGetRNNTempSpaceSizes` answers (bytes). cuDNN documents no
    layout, so these are bounds, said as such. `tokens` = steps × batch, or the packed length.

    * workspace: cudnn/RNN.cpp allocates a fresh one for each call (the forward, then each of
      the two backward calls) and frees it at once, so cuDNN keeps nothing in it between calls:
      it holds one call's scratch. Counted in the math type (fp32 for fp16/bf16 data, RNN.cpp
      `promote_rnn_math_type`): in inference (CUDNN_FWD_MODE_INFERENCE), the input GEMM of every
      step of one layer (dirs · G·h per token) and two hidden states per direction and batch
      row; in training (CUDNN_FWD_MODE_TRAINING, which RNN.cpp asks for the forward and both
      backward calls alike), the gates' gradients of one layer on top;
    * reserve space (training): what must survive from the forward to both backward calls
      (`_cudnn_rnn_backward_input` writes into it). The larger of (a) per token, layer and
      direction, the gates before and after their nonlinearity (2·G·h), the cell state and its
      tanh (LSTM: 2·h; GRU: the reset-gated recurrent term, h), the layer's output (out), and
      between layers the dropout mask (out), in the math type; and (b) what MIOpen, the open
      implementation of the same API, keeps between its calls: its reserve space and its
      workspace, which its backward calls share (`miopen_space`)."""
    dirs = 2 if bidirectional else 1
    g = GATES[mode]
    out = proj or hidden
    math_size = max(itemsize, 4)
    state = 2 * hidden if mode == MODES["LSTM"] else (hidden if mode == MODES["GRU"] else 0)
    per_token = layers * dirs * (2 * g * hidden + state + out)
    if dropout > 0 and layers > 1:
        per_token += (layers - 1) * dirs * out
    miopen = miopen_space(mode, hidden, layers, bidirectional, tokens, itemsize, dropout)
    inference = (tokens * dirs * g * hidden + 2 * dirs * mini_batch * (hidden + out)) * math_size
    return {
        "reserve": max(tokens * per_token * math_size, miopen["reserve"] + miopen["workspace"]),
        "workspace_inference": inference,
        "workspace_training": inference + tokens * dirs * g * hidden * math_size,
    }


# ---------------------------------------------------------------------------- the install
class CudnnRNN:
    """The cuDNN RNN path, installed once per prediction."""

    def __init__(self, torch: Any, tracker: Any, note: Callable[[str], None], capability: tuple[int, int]) -> None:
        self.torch = torch
        self.tracker = tracker
        self.note = note
        self.capability = capability
        # get_dropout_state's per-device cache: held until the process ends.
        self.dropout_state: dict[int, Any] = {}
        self.reset_dropout = False
        self.said: set[str] = set()
        self.bounded = 0

    def install(self) -> None:
        torch = self.torch
        from torch import _VF
        from torch.nn.modules import rnn

        original_flatten = rnn.RNNBase.flatten_parameters
        fake = self._fake

        def flatten_parameters(module: Any) -> None:
            weights = module._flat_weights
            if not any(fake(w) for w in weights):
                return original_flatten(module)
            return self.flatten_parameters(module)

        rnn.RNNBase.flatten_parameters = flatten_parameters
        for name in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
            routed = self._routed(name, getattr(_VF, name))
            setattr(_VF, name, routed)  # what torch/nn/modules/rnn.py calls
            setattr(torch, name, routed)  # the same op called as torch.lstm
        rnn._rnn_impls = {"RNN_TANH": _VF.rnn_tanh, "RNN_RELU": _VF.rnn_relu}
        original_pack = _VF._pack_padded_sequence

        def pack_padded_sequence(input: Any, lengths: Any, batch_first: bool) -> Any:
            if not fake(input) or fake(lengths) or not isinstance(lengths, torch.Tensor):
                return original_pack(input, lengths, batch_first)
            return _pack_function(torch).apply(input, lengths, batch_first, original_pack)

        _VF._pack_padded_sequence = pack_padded_sequence
        # Seeding the CUDA generator makes the next dropout call re-create the state
        # (CUDAGeneratorImpl::set_current_seed clears no_reset_rnn_state_; RNN.cpp get_dropout_state).
        c = torch.cuda
        for name in ("manual_seed", "manual_seed_all", "seed", "seed_all"):
            setattr(c, name, self._seeding(getattr(c, name)))

    def _seeding(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def seeded(*args: Any, **kwargs: Any) -> Any:
            self.reset_dropout = True
            return original(*args, **kwargs)

        return seeded

    def _fake(self, t: Any) -> bool:
        from torch._subclasses.fake_tensor import FakeTensor

        return isinstance(t, FakeTensor) and t.device.type == "cuda"

    def use_cudnn(self, t: Any) -> bool:
        """RNN.cpp `use_cudnn`: `cudnn_is_acceptable` (run by PyTorch itself: cuDNN enabled, a
        CUDA tensor, not empty) and a dtype cuDNN's RNN takes (bf16 from compute capability 8.0,
        CUDAHooks::supportsBFloat16RNNWithCuDNN)."""
        torch = self.torch
        if not self._fake(t) or not torch.cudnn_is_acceptable(t):
            return False
        if t.dtype == torch.bfloat16:
            return self.capability[0] >= 8
        return t.dtype in (torch.float32, torch.float16, torch.float64)

    def acceptable(self, t: Any) -> bool:
        """`torch.backends.cudnn.is_acceptable` as on a GPU with cuDNN: enabled, a CUDA tensor of
        a dtype it lists (bf16 is not: a bf16 module's weights stay apart, and each call warns
        and copies them, as on the GPU). Here without loading the cuDNN library."""
        torch = self.torch
        from torch.backends import cudnn

        return bool(torch._C._get_cudnn_enabled() and torch._C._has_cudnn and t.device.type == "cuda" and t.dtype in cudnn.CUDNN_TENSOR_DTYPES)

    # ------------------------------------------------------------------------ weights
    def flatten_parameters(self, module: Any) -> None:
        """RNNBase.flatten_parameters with the data-pointer test made on storages (every fake
        tensor's data pointer is 0), then `_cudnn_rnn_flatten_weight`."""
        torch = self.torch
        weights = module._flat_weights
        if len(weights) != len(module._flat_weights_names) or not all(isinstance(w, torch.Tensor) for w in weights):
            return
        dtype = weights[0].dtype
        for w in weights:
            if w.dtype != dtype or not w.is_cuda or not self.acceptable(w):
                return
        places = {(id(w.untyped_storage()), w.storage_offset() * w.element_size()) for w in weights}
        if len(places) != len(weights) or not torch._use_cudnn_rnn_flatten_weight():
            return
        from torch.backends.cudnn import rnn as cudnn_rnn

        stride0 = (4 if module.bias else 2) + (1 if module.proj_size > 0 else 0)
        with torch.no_grad():
            self.flatten_weight(
                weights, stride0, module.input_size, cudnn_rnn.get_cudnn_mode(module.mode), module.hidden_size,
                module.proj_size, module.num_layers, bool(module.bidirectional),
            )

    def flatten_weight(self, weights: list[Any], stride0: int, input_size: int, mode: int, hidden: int, proj: int, layers: int, bidirectional: bool, dtype: Any = None, set_weights: bool = True) -> tuple[Any, list[Any]]:
        """`copy_weights_to_flat_buf_views`: a zeroed buffer of the weight space, each weight copied
        into its view; with `set_weights`, each weight becomes that view (`set_`). Returns the
        buffer and the views in the weights' order."""
        torch = self.torch
        shapes = layer_shapes(mode, input_size, hidden, proj, layers, bidirectional)
        offsets = _offsets(shapes)
        total = sum(math.prod(s) for one in shapes for s in one)
        first = weights[0]
        buf = torch.zeros(total, dtype=dtype or first.dtype, device=first.device)
        if set_weights:
            self.tracker.tag(buf, Category.PARAMETER)
        pick = _pick(stride0, bool(proj))
        views = []
        for layer, (one, offs) in enumerate(zip(shapes, offsets)):
            for j, k in enumerate(pick):
                w = weights[layer * stride0 + j]
                view = buf[offs[k] : offs[k] + math.prod(one[k])].view(w.shape)
                view.copy_(w)
                views.append(view)
        if set_weights:
            for w, view in zip(weights, views):
                w.set_(view)
        return buf, views

    def weight_buf(self, params: list[Any], stride0: int, mode: int, input_size: int, hidden: int, proj: int, layers: int, bidirectional: bool) -> Any:
        """RNN.cpp `try_get_weight_buf`: the parameters' storage as the weight buffer when every
        weight sits where cuDNN's layout puts it (the same storage, at its offset); else None."""
        shapes = layer_shapes(mode, input_size, hidden, proj, layers, bidirectional)
        offsets = _offsets(shapes)
        total = sum(math.prod(s) for one in shapes for s in one)
        first = params[0]
        storage = first.untyped_storage()
        if storage.nbytes() // first.element_size() < total:
            return None
        pick = _pick(stride0, bool(proj))
        for layer, offs in enumerate(offsets):
            for j, k in enumerate(pick):
                p = params[layer * stride0 + j]
                if p.untyped_storage() is not storage:
                    return None
                if p.storage_offset() != offs[k] or p.dtype != first.dtype:
                    return None
        if not params[-1].is_contiguous():
            return None
        # `at::empty({0}).set_(param_storage)` narrowed to the weight space: a view, no new storage.
        return first.detach().as_strided((total,), (1,), 0)

    # ------------------------------------------------------------------------ the call
    def _routed(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        mode = MODES["LSTM" if name == "lstm" else name.upper() if name == "gru" else ("RNN_TANH" if name == "rnn_tanh" else "RNN_RELU")]

        def routed(*args: Any, **kwargs: Any) -> Any:
            if kwargs or not args or not self.use_cudnn(args[0]):
                return original(*args, **kwargs)
            return self.call(mode, *args)

        routed.__name__ = name
        return routed

    def call(self, mode: int, *args: Any) -> Any:
        """`_cudnn_impl` for both overloads: (input, hx, params, has_biases, num_layers, dropout,
        train, bidirectional, batch_first) and (data, batch_sizes, hx, params, has_biases,
        num_layers, dropout, train, bidirectional)."""
        torch = self.torch
        lstm = mode == MODES["LSTM"]
        # The packed overloads take the CPU batch sizes second: hx is then third.
        packed = isinstance(args[1] if lstm else args[2], torch.Tensor)
        if packed:
            data, batch_sizes, hidden, params, has_biases, num_layers, dropout, train, bidirectional = args
            batch_first = False
            sizes = [int(b) for b in batch_sizes.tolist()]
        else:
            data, hidden, params, has_biases, num_layers, dropout, train, bidirectional, batch_first = args
            sizes = []
        hx, cx = (hidden[0], hidden[1]) if lstm else (hidden, None)
        hidden_size, proj = hx.size(2), 0
        if cx is not None and cx.size(2) != hx.size(2):
            hidden_size, proj = cx.size(2), hx.size(2)
        stride0 = (4 if has_biases else 2) + (1 if proj else 0)
        input_size = data.size(-1)
        params = list(params)
        weight_buf = self.weight_buf(params, stride0, mode, input_size, hidden_size, proj, num_layers, bidirectional)
        state = self.get_dropout_state(dropout, train, data.device)
        spec = {
            "mode": mode, "hidden": hidden_size, "proj": proj, "layers": num_layers, "batch_first": bool(batch_first),
            "dropout": float(dropout), "train": bool(train), "bidirectional": bool(bidirectional), "batch_sizes": sizes,
            "stride0": stride0, "input_size": input_size,
        }
        # AutocastRNN.cpp: fp16 (not the autocast dtype) for eligible tensors (floating, not double).
        if torch.is_autocast_enabled("cuda") and data.dtype not in (torch.float16, torch.float64):
            data, hx, cx, params, weight_buf = self._autocast(spec, data, hx, cx, params, weight_buf)
        output, hy, cy = _function(torch).apply(self, spec, weight_buf, state, data, hx, cx, *params)
        if lstm:
            return output, hy, cy
        return output, hy

    def _autocast(self, spec: dict[str, Any], data: Any, hx: Any, cx: Any, params: list[Any], weight_buf: Any) -> tuple[Any, Any, Any, list[Any], Any]:
        """aten/src/ATen/cudnn/AutocastRNN.cpp `_cudnn_rnn_cast_reflatten`: the input and states
        cast to fp16, the weights copied into a new fp16 flat buffer (autograd-exposed)."""
        torch = self.torch
        half = torch.float16
        with torch.autocast("cuda", enabled=False):
            data = data.to(half)
            hx = hx.to(half)
            cx = cx.to(half) if cx is not None else None
            if (weight_buf.dtype if weight_buf is not None else params[0].dtype) != half:
                weight_buf, params = self.flatten_weight(
                    params, spec["stride0"], spec["input_size"], spec["mode"], spec["hidden"], spec["proj"],
                    spec["layers"], spec["bidirectional"], dtype=half, set_weights=False,
                )
        return data, hx, cx, params, weight_buf

    def get_dropout_state(self, dropout: float, train: bool, device: Any) -> Any:
        """RNN.cpp `get_dropout_state`: in training with dropout > 0, the device's state is made
        once (and again after a seed): a scalar long for its seed, then
        `_cudnn_init_dropout_state` (cudnnDropoutGetStatesSize bytes). Held until the end."""
        torch = self.torch
        index = device.index or 0
        state = self.dropout_state.get(index)
        if train and dropout > 0 and (state is None or self.reset_dropout):
            self.reset_dropout = False
            seed = torch.empty((), dtype=torch.long, device=device)  # `random_(gen).item()`: its value is never read
            del seed
            state = torch.empty(DROPOUT_STATE_BYTES, dtype=torch.uint8, device=device)
            self.tracker.tag(state, Category.WORKSPACE)
            self.dropout_state[index] = state
            self.say(
                f"cuDNN RNN dropout state: {DROPOUT_STATE_BYTES:,} bytes per device, held until the process ends "
                "(RNN.cpp get_dropout_state; its true size is cuDNN's cudnnDropoutGetStatesSize on the card, "
                "'slightly over 2MB' per PyTorch's source): assumed, not known"
            )
        return state

    def say(self, text: str, bound: bool = False) -> None:
        """Says `text` once; the bounds of at most BOUND_NOTES shapes, then that more were bounded."""
        if text in self.said:
            return
        self.said.add(text)
        if bound:
            self.bounded += 1
            if self.bounded > BOUND_NOTES:
                if self.bounded == BOUND_NOTES + 1:
                    self.note(f"cuDNN RNN: calls of more shapes than the {BOUND_NOTES} above, their workspace and reserve space bounded the same way")
                return
        self.note(text)


_FUNCTION: list[Any] = []


def _function(torch: Any) -> Any:
    """The autograd.Function standing for `_cudnn_rnn` and its derivative (derivatives.yaml:
    saved are input, weight, hx, cx, output, the reserve space, the weight buffer and the
    dropout state; backward is `_cudnn_rnn_backward`)."""
    if _FUNCTION:
        return _FUNCTION[0]

    class CudnnRnnFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, owner: CudnnRNN, spec: dict[str, Any], weight_buf: Any, dropout_state: Any, data: Any, hx: Any, cx: Any, *weights: Any) -> Any:
            ctx.set_materialize_grads(False)
            out = _cudnn_rnn(owner, spec, weight_buf, data, hx, cx, list(weights))
            output, hy, cy, reserve, buf = out
            if cx is None:
                ctx.mark_non_differentiable(cy)
            ctx.owner, ctx.spec, ctx.has_cx = owner, spec, cx is not None
            ctx.save_for_backward(data, hx, cx, output, reserve, buf, dropout_state, *weights)
            return output, hy, cy

        @staticmethod
        def backward(ctx: Any, grad_output: Any, grad_hy: Any, grad_cy: Any) -> Any:
            data, hx, cx, output, reserve, buf, _state, *weights = ctx.saved_tensors
            owner, spec = ctx.owner, ctx.spec
            needs = ctx.needs_input_grad
            nones = (None,) * 4
            if grad_output is None and grad_hy is None and grad_cy is None:
                return nones + (None, None, None) + (None,) * len(weights)
            dx, dhx, dcx, dw = _cudnn_rnn_backward(
                owner, spec, data, hx, cx if ctx.has_cx else None, output, grad_output, grad_hy, grad_cy, buf, weights,
                weights_needed=any(needs[7:]),
            )
            grads_w = dw if dw is not None else [None] * len(weights)
            return nones + (dx if needs[4] else None, dhx if needs[5] else None, dcx if needs[6] else None) + tuple(
                g if n else None for g, n in zip(grads_w, needs[7:])
            )

    _FUNCTION.append(CudnnRnnFunction)
    return CudnnRnnFunction


_PACK: list[Any] = []


def _pack_function(torch: Any) -> Any:
    """`_pack_padded_sequence` (aten/src/ATen/native/PackedSequence.cpp) over a data-less input
    and the real CPU lengths: the batch sizes from the lengths (PyTorch's own op on an empty CPU
    stand-in, with its checks), the data as its loop makes it (each block of steps made
    contiguous, then one `cat`); backward as `_pack_padded_sequence_backward` (zeros of the
    input's size, each step's rows copied in)."""
    if _PACK:
        return _PACK[0]

    class PackPaddedSequence(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, input: Any, lengths: Any, batch_first: bool, original: Callable[..., Any]) -> Any:
            stand_in = torch.empty(tuple(input.shape[:2]) + (1,), dtype=torch.uint8, device="cpu")
            _, batch_sizes = original(stand_in, lengths, batch_first)
            x = input.transpose(0, 1) if batch_first else input
            steps, sizes = [], batch_sizes.tolist()
            t = 0
            while t < len(sizes):
                current = sizes[t]
                end = t
                while end < len(sizes) and sizes[end] == current:
                    end += 1
                # One block per run of equal batch sizes (the loop over lengths slices the same blocks).
                steps.append(x[t:end, :current].contiguous().view((-1,) + tuple(x.shape[2:])))
                t = end
            data = torch.cat(steps)
            del steps
            ctx.input_size, ctx.batch_first, ctx.sizes = tuple(input.shape), batch_first, sizes
            ctx.mark_non_differentiable(batch_sizes)
            return data, batch_sizes

        @staticmethod
        def backward(ctx: Any, grad: Any, _unused: Any) -> Any:
            size = list(ctx.input_size)
            if ctx.batch_first:
                size[0], size[1] = size[1], size[0]
            grad_input = torch.zeros(size, dtype=grad.dtype, device=grad.device)
            offset = 0
            for i, b in enumerate(ctx.sizes):
                grad_input[i, :b].copy_(grad[offset : offset + b])
                offset += b
            if ctx.batch_first:
                grad_input = grad_input.transpose(0, 1)
            return grad_input, None, None, None

    _PACK.append(PackPaddedSequence)
    return PackPaddedSequence


def _sizes(spec: dict[str, Any], data: Any) -> tuple[list[int], list[int], list[int], int, int]:
    """RNN.cpp `_hidden_size`, `_cell_size`, `_output_size` (seq-major), the tokens and the mini-batch."""
    dirs = 2 if spec["bidirectional"] else 1
    out = spec["proj"] or spec["hidden"]
    sizes = spec["batch_sizes"]
    if sizes:
        mini_batch, tokens = sizes[0], data.size(0)
        output = [tokens, out * dirs]
    else:
        seq, mini_batch = (data.size(1), data.size(0)) if spec["batch_first"] else (data.size(0), data.size(1))
        tokens = seq * mini_batch
        output = [seq, mini_batch, out * dirs]
    hidden = [spec["layers"] * dirs, mini_batch, out]
    cell = [spec["layers"] * dirs, mini_batch, spec["hidden"]]
    return hidden, cell, output, tokens, mini_batch


def _bounds(owner: CudnnRNN, spec: dict[str, Any], data: Any, tokens: int, mini_batch: int) -> dict[str, int]:
    space = temp_space(spec["mode"], spec["hidden"], spec["proj"], spec["layers"], spec["bidirectional"], tokens, mini_batch, data.element_size(), spec["dropout"] if spec["train"] else 0.0)
    shape = f"{_NAMES[spec['mode']]} hidden {spec['hidden']}{', proj ' + str(spec['proj']) if spec['proj'] else ''}, {spec['layers']} layer(s){', bidirectional' if spec['bidirectional'] else ''}, {tokens} tokens in batches of {mini_batch}, {str(data.dtype).replace('torch.', '')}"
    workspace = "the workspace bounded by one call's scratch (the input GEMM of one layer over every token" + (", and its gradients" if spec["train"] else "") + ")"
    reserve = "; the reserve space by every step's gates, states and outputs, and at least what MIOpen keeps for the same call" if spec["train"] else ""
    owner.say(
        f"cuDNN RNN ({shape}): "
        + (
            f"workspace {space['workspace_training']:,} bytes (training: forward and backward), reserve space {space['reserve']:,} bytes"
            if spec["train"]
            else f"workspace {space['workspace_inference']:,} bytes (inference)"
        )
        + f": upper bounds, not known (cuDNN's cudnnGetRNNTempSpaceSizes decides on the card; {workspace}{reserve})",
        bound=True,
    )
    return space


def _cudnn_rnn(owner: CudnnRNN, spec: dict[str, Any], weight_buf: Any, data: Any, hx: Any, cx: Any, weights: list[Any]) -> tuple[Any, Any, Any, Any, Any]:
    """`_cudnn_rnn` (cudnn/RNN.cpp), its storages in its order."""
    torch = owner.torch
    tr = owner.tracker
    packed = bool(spec["batch_sizes"])
    hidden, cell, output_size, tokens, mini_batch = _sizes(spec, data)
    x = data.transpose(0, 1) if spec["batch_first"] and not packed else data
    x = x.contiguous()
    output = torch.empty(output_size, dtype=data.dtype, device=data.device)
    hy = torch.empty(hidden, dtype=hx.dtype, device=hx.device)
    cy = torch.empty(cell, dtype=cx.dtype, device=cx.device) if cx is not None else torch.empty(0, dtype=hx.dtype, device=hx.device)
    if weight_buf is None:
        warnings.warn(WEIGHT_FORMAT_WARN, UserWarning, stacklevel=6)
        weight_buf, _ = owner.flatten_weight(
            weights, spec["stride0"], spec["input_size"], spec["mode"], spec["hidden"], spec["proj"], spec["layers"],
            spec["bidirectional"], set_weights=False,
        )
    space = _bounds(owner, spec, data, tokens, mini_batch)
    workspace = torch.empty(space["workspace_training" if spec["train"] else "workspace_inference"], dtype=torch.uint8, device=data.device)
    tr.tag(workspace, Category.WORKSPACE)
    reserve = torch.empty(space["reserve"] if spec["train"] else 0, dtype=torch.uint8, device=data.device)
    del workspace, x
    if spec["batch_first"] and not packed:
        output.transpose_(0, 1)
    return output, hy, cy, reserve, weight_buf


def _cudnn_rnn_backward(owner: CudnnRNN, spec: dict[str, Any], data: Any, hx: Any, cx: Any, output: Any, grad_output: Any, grad_hy: Any, grad_cy: Any, weight_buf: Any, weights: list[Any], weights_needed: bool) -> tuple[Any, Any, Any, Any]:
    """`_cudnn_rnn_backward`: `_cudnn_rnn_backward_input` always (it mutates the reserve), then
    `_cudnn_rnn_backward_weight` when a weight needs its gradient."""
    torch = owner.torch
    tr = owner.tracker
    if not spec["train"]:
        raise RuntimeError("cudnn RNN backward can only be called in training mode")
    packed = bool(spec["batch_sizes"])
    hidden, cell, _, tokens, mini_batch = _sizes(spec, data)
    space = _bounds(owner, spec, data, tokens, mini_batch)
    if grad_output is None:
        grad_output = torch.zeros_like(output, memory_format=torch.contiguous_format)
    if grad_hy is None:
        grad_hy = torch.zeros_like(hx, memory_format=torch.contiguous_format)
    if cx is not None and grad_cy is None:
        grad_cy = torch.zeros_like(cx, memory_format=torch.contiguous_format)
    transposed = spec["batch_first"] and not packed
    # _cudnn_rnn_backward_input
    x = (data.transpose(0, 1) if transposed else data).contiguous()
    dy = (grad_output.transpose(0, 1) if transposed else grad_output).contiguous()
    dx = torch.empty_like(data.transpose(0, 1) if transposed else data, memory_format=torch.contiguous_format)
    dhy = grad_hy.contiguous().view(hidden)
    dcy = grad_cy.contiguous().view(cell) if grad_cy is not None else None
    dhx = torch.empty(hidden, dtype=hx.dtype, device=hx.device)
    dcx = torch.empty(cell, dtype=cx.dtype, device=cx.device) if cx is not None else None
    workspace = torch.empty(space["workspace_training"], dtype=torch.uint8, device=data.device)
    tr.tag(workspace, Category.WORKSPACE)
    del workspace, x, dy, dhy, dcy
    if transposed:
        dx = dx.transpose_(0, 1)
    dw = None
    if weights_needed:
        # _cudnn_rnn_backward_weight
        x = (data.transpose(0, 1) if transposed else data).contiguous()
        flat = torch.zeros(weight_buf.shape, dtype=weight_buf.dtype, device=weight_buf.device)
        workspace = torch.empty(space["workspace_training"], dtype=torch.uint8, device=data.device)
        tr.tag(workspace, Category.WORKSPACE)
        del workspace, x
        shapes = layer_shapes(spec["mode"], spec["input_size"], spec["hidden"], spec["proj"], spec["layers"], spec["bidirectional"])
        offsets = _offsets(shapes)
        full = 5 if spec["proj"] else 4
        if spec["stride0"] == full:
            # get_parameters on dw, then _viewParams: the gradients are views of dw.
            dw = [flat[o : o + math.prod(s)].view(s) for one, offs in zip(shapes, offsets) for s, o in zip(one, offs)]
        else:
            # Another layout (no biases): each gradient its own tensor, copied from dw.
            pick = _pick(spec["stride0"], bool(spec["proj"]))
            dw = []
            for one, offs in zip(shapes, offsets):
                for k in pick:
                    g = torch.empty(one[k], dtype=flat.dtype, device=flat.device)
                    g.copy_(flat[offs[k] : offs[k] + math.prod(one[k])].view(one[k]))
                    dw.append(g)
        del flat
    return dx, dhx, dcx, dw


def install(torch: Any, tracker: Any, notes: list[str], target: dict[str, Any]) -> CudnnRNN:
    """Installs the cuDNN RNN path for this prediction; says each assumption once in `notes`."""

    def note(text: str) -> None:
        if text not in notes:
            notes.append(text)

    capability = tuple(target.get("capability", (9, 0)))
    rnn = CudnnRNN(torch, tracker, note, (int(capability[0]), int(capability[1])))
    rnn.install()
    return rnn
