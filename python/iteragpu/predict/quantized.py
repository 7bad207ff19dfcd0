"""Quantized weights on data-less tensors: bitsandbytes' own code, run fake.

* A tensor subclass made over a data-less tensor. bitsandbytes' `Params4bit` and `Int8Params`
  (like any `torch.nn.Parameter` subclass that keeps attributes) are made with
  `torch.Tensor._make_subclass(cls, data)`, which refuses a FakeTensor (its TensorImpl already has
  a Python object). Over a FakeTensor, the subclass is made as a FakeTensor of a class that is
  both (`cls` first, so its `to`/`cuda`/`__torch_function__` run: bitsandbytes quantizes on its
  own move to the device), sharing the FakeTensor's storage, as `_make_subclass` shares the
  data's storage: no new allocation, the same storage followed by the tracker.
* bitsandbytes' ops (`bitsandbytes::quantize_4bit`, `dequantize_4bit`, `gemv_4bit`,
  `int8_vectorwise_quant`, `int8_linear_matmul`, `optimizer_update_8bit_blockwise`…) carry their
  own fake kernels in `bitsandbytes/_ops.py` (0.45 on): FakeTensorMode runs them, so each packed
  weight, its absmax, the nested statistics of double quantization, the code tables and every
  dequantized temporary are the storages bitsandbytes itself makes. Where an installed release
  lacks one, the phase is unpredictable with the op named (tracker.py).
* Paged optimizer states (`PagedAdamW`, `PagedAdamW8bit`…) live in CUDA unified memory made by
  `cudaMallocManaged` (`bitsandbytes.functional.get_paged`), outside PyTorch's caching allocator:
  they are made as data-less CUDA tensors, told to the CLI as `paged` allocations, outside the
  allocator's figures, and said in a note.
* The 8-bit outlier path (`llm_int8_threshold` > 0) has a data-dependent number of outlier
  columns: fake kernels give it an unbacked size, which makes the phase unpredictable unless
  bounded; it is bounded here by every column (the largest), tainted, and said.
"""

from __future__ import annotations

from typing import Any, Callable

# class -> its twin that is also a FakeTensor, made once.
_TWINS: dict[type, type] = {}


def install(torch: Any, tracker: Any, note: Callable[[str], None]) -> None:
    from .idioms import after_import

    _subclass_over_fake(torch, tracker)
    _outlier_bounds(torch)
    _gemm_4bit_inside(torch)
    after_import("bitsandbytes.functional", lambda module: _paged(torch, tracker, note, module))
    after_import("transformers.quantizers.auto", lambda module: _checkpoint_formats(tracker, module))
    after_import("bitsandbytes.nn.modules", lambda module: _quantized_roles(tracker, module))
    after_import("transformers.integrations.finegrained_fp8", lambda module: _fp8_reference(torch, tracker, module))
    after_import("peft.tuners.lora.model", lambda module: _lora_on_packed(torch, tracker, module))


def _lora_on_packed(torch: Any, tracker: Any, module: Any) -> None:
    """peft's `get_peft_model` on a packed layer built in place of a missing GPTQ/AWQ library
    (`_packed_quantizer`): peft dispatches its `GPTQLoraLinear` for the libraries' own
    `QuantLinear` only; it is registered for the packed layer with peft's documented hook
    (`LoraConfig._register_custom_module`), so the adapters are peft's own, said once."""
    model_class = getattr(module, "LoraModel", None)  # allowlisted
    original = getattr(model_class, "_create_new_module", None)  # allowlisted
    if model_class is None or original is None or getattr(original, "_iteragpu", False):
        return
    from ..workloads.packed import packed_linear_class

    said: list[bool] = []

    def create(lora_config: Any, adapter_name: Any, target: Any, **kwargs: Any) -> Any:
        packed = packed_linear_class(torch)
        base = target.get_base_layer() if hasattr(target, "get_base_layer") else target
        if isinstance(base, packed) and packed not in (getattr(lora_config, "_custom_modules", None) or {}):
            from peft.tuners.lora.gptq import GPTQLoraLinear

            lora_config._register_custom_module({packed: GPTQLoraLinear})
            if not said:
                said.append(True)
                tracker.note(
                    "peft's LoRA on the packed layers built without the format's library: peft's own GPTQLoraLinear over them "
                    "(registered with LoraConfig._register_custom_module), each weight dequantized for the forward and again for the backward (assumed)"
                )
        return original(lora_config, adapter_name, target, **kwargs)

    create._iteragpu = True  # type: ignore[attr-defined]
    model_class._create_new_module = staticmethod(create)


def fake_twin(cls: type) -> type:
    """`cls` and FakeTensor at once (`cls`'s methods first), made once per class. Its `.data = x`
    (bitsandbytes' `_quantize` puts the packed weight there) also takes `x`'s device: a
    FakeTensor keeps its device in a Python attribute that PyTorch's `set_data` does not touch."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    twin = _TWINS.get(cls)
    if twin is None:
        base_data = torch._C.TensorBase.data

        def get_data(self: Any) -> Any:
            return base_data.__get__(self)

        def set_data(self: Any, value: Any) -> None:
            base_data.__set__(self, value)
            if isinstance(value, FakeTensor):
                self.fake_device = value.fake_device

        namespace = {"__module__": cls.__module__, "_iteragpu_twin_of": cls, "data": property(get_data, set_data)}
        twin = _TWINS[cls] = type(cls.__name__, (cls, FakeTensor), namespace)
    return twin


def _outlier_bounds(torch: Any) -> None:
    """LLM.int8's outlier columns (`llm_int8_threshold` > 0): their number depends on the data
    (bitsandbytes' fake kernels ask for an unbacked size). The largest outputs, with every one of
    the K input columns an outlier, as bitsandbytes' CUDA kernels shape them
    (`backends/cuda/ops.py`: `int8_vectorwise_quant`, `int8_double_quant`; the mixed matmul's
    `subA = A[:, outlier_cols]` in `backends/default/ops.py`, which CUDA runs): the run goes on,
    the phase is bounded (tracker.py's `_upper_bound` says the op); the smallest, with no
    outlier column, when the CLI predicts the lower bound."""
    from .tracker import LARGEST, SMALLEST

    def vectorwise_quant(A: Any, threshold: float = 0.0) -> Any:
        rows, cols = A.numel() // A.shape[-1], A.shape[-1]
        return (
            torch.empty(A.shape, dtype=torch.int8, device=A.device),
            torch.empty(rows, dtype=torch.float32, device=A.device),
            torch.empty(cols, dtype=torch.int64, device=A.device),
        )

    def double_quant(A: Any, threshold: float = 0.0) -> Any:
        rows, cols = A.numel() // A.shape[-1], A.shape[-1]
        return (
            torch.empty(A.shape, dtype=torch.int8, device=A.device),
            torch.empty(A.shape, dtype=torch.int8, device=A.device),
            torch.empty(rows, dtype=torch.float32, device=A.device),
            torch.empty(cols, dtype=torch.float32, device=A.device),
            torch.empty(cols, dtype=torch.int64, device=A.device),
        )

    def mixed_scaled_mm(A: Any, CA: Any, CB: Any, SCA: Any, SCB: Any, outlier_cols: Any = None, bias: Any = None) -> Any:
        n = 0 if outlier_cols is None else outlier_cols.numel()
        out = torch.empty((*CA.shape[:-1], CB.shape[0]), dtype=A.dtype, device=A.device)
        return out, torch.empty((A.shape[0], n), dtype=A.dtype, device=A.device)

    LARGEST["bitsandbytes.int8_vectorwise_quant.default"] = vectorwise_quant
    LARGEST["bitsandbytes.int8_double_quant.default"] = double_quant
    LARGEST["bitsandbytes.int8_mixed_scaled_mm.default"] = mixed_scaled_mm

    # The smallest: no outlier column at all (every activation under the threshold).
    def vectorwise_quant_none(A: Any, threshold: float = 0.0) -> Any:
        out = vectorwise_quant(A, threshold)
        return out[0], out[1], torch.empty(0, dtype=torch.int64, device=A.device)

    def double_quant_none(A: Any, threshold: float = 0.0) -> Any:
        out = double_quant(A, threshold)
        return (*out[:4], torch.empty(0, dtype=torch.int64, device=A.device))

    SMALLEST["bitsandbytes.int8_vectorwise_quant.default"] = vectorwise_quant_none
    SMALLEST["bitsandbytes.int8_double_quant.default"] = double_quant_none
    SMALLEST["bitsandbytes.int8_mixed_scaled_mm.default"] = mixed_scaled_mm


def _gemm_4bit_inside(torch: Any) -> None:
    """bitsandbytes' 4-bit matmul (`gemm_4bit`, 0.49 on) runs its fused kernel for few rows, and
    past bitsandbytes' own threshold (`backends/cuda/ops.py`: more than 1,536 rows on CUDA, a
    per-architecture heuristic below, K not a multiple of the block size) dequantizes the whole
    weight to the activations' dtype, then `F.linear` (`_dequant_linear_fallback`): one weight
    [N, K] alive beside the output, and, with nested absmax, its float32 absmax. The fake kernel
    gives the output alone; this adds what the fallback makes, chosen by bitsandbytes' own
    heuristic on the target's properties (`cuda_api.py` answers them)."""
    from .tracker import INSIDE, Category

    def inside(A: Any, B: Any, shapeB: Any, absmax: Any, blocksize: int, quant_type: str, bias: Any = None, absmax_8bit: Any = None, *rest: Any, **kw: Any) -> list[Any]:
        K = A.shape[-1]
        M = A.numel() // K if K else 0
        N = shapeB[0]
        if M == 0 or not _gemm_4bit_falls_back(torch, A, M, N, K, blocksize):
            return []
        made = [(tuple(int(d) for d in shapeB), A.dtype, Category.DEQUANTIZED_WEIGHT)]
        if absmax_8bit is not None:
            # `absmax_dq` (float32), then `absmax_dq + absmax_offset` (another).
            made += [(tuple(absmax_8bit.shape), torch.float32, Category.TEMPORARY)] * 2
        return made

    INSIDE["bitsandbytes.gemm_4bit.default"] = inside


def _gemm_4bit_falls_back(torch: Any, A: Any, M: int, N: int, K: int, blocksize: int) -> bool:
    """bitsandbytes' own choice between its fused kernel and dequantize-then-linear (its
    `gemm_4bit` CUDA kernel's first lines); the fallback where its heuristic cannot be asked."""
    try:
        from bitsandbytes.backends.cuda import ops
    except Exception:  # noqa: BLE001 (an older release: no gemm_4bit op at all)
        return True
    if M > getattr(ops, "_gemm_4bit_custom_max_m", 0) or K % blocksize:  # allowlisted
        return True
    use_custom = getattr(ops, "_gemm_4bit_use_custom_fn", None)  # allowlisted
    if use_custom is None:
        return True
    try:
        return not use_custom(A.device.index or 0, A.dtype, M, N, K)
    except Exception:  # noqa: BLE001 (the heuristic asked what the fake device cannot say)
        return True


def _subclass_over_fake(torch: Any, tracker: Any) -> None:
    """`torch.Tensor._make_subclass(cls, fake)`: a FakeTensor of `fake_twin(cls)` over the same
    storage (see the module's documentation); anything else as PyTorch does it."""
    from torch._subclasses.fake_tensor import FakeTensor, in_kernel_invocation_manager

    Tensor = torch.Tensor
    original = Tensor._make_subclass
    if getattr(original, "_iteragpu", False):
        return

    def _make_subclass(cls: type, data: Any, require_grad: bool = False, **kwargs: Any) -> Any:
        twin_of = vars(cls).get("_iteragpu_twin_of")
        if kwargs or (twin_of is None and (not isinstance(data, FakeTensor) or issubclass(cls, FakeTensor))):
            return original(cls, data, require_grad, **kwargs)
        if twin_of is not None:
            # A twin's copy (`Params4bit.__copy__`/`__deepcopy__`: `type(self).__new__(type(self))`
            # over an empty CPU tensor, its data set afterwards): a twin too, over fake data.
            cls = twin_of
            if not isinstance(data, FakeTensor):
                data = tracker.to_fake(data.detach(), keep_values=False)
        mode = data.fake_mode
        # The FakeTensor seen as the meta tensor it is: its alias, PyTorch's own `detach`.
        with in_kernel_invocation_manager(mode):
            elem = torch.ops.aten.detach.default(data)
        made = FakeTensor.__new__(fake_twin(cls), mode, elem, data.device)
        if require_grad:
            made.requires_grad_(True)
        return made

    _make_subclass._iteragpu = True  # type: ignore[attr-defined]  # installed once
    Tensor._make_subclass = staticmethod(_make_subclass)
    # `Module._apply` (`.to()`, `.cuda()`) swaps a fake parameter with `Parameter(moved)`; a twin
    # is a Parameter already (bitsandbytes' `Params4bit.to` quantizes and returns the parameter
    # itself): it is kept as it is, as `_make_subclass` would keep its storage.
    Parameter = torch.nn.Parameter
    original_new = Parameter.__new__

    def parameter_new(cls: type, data: Any = None, requires_grad: bool = True) -> Any:
        if cls is Parameter and getattr(type(data), "_iteragpu_twin_of", None) is not None:
            if data.requires_grad != requires_grad:
                data.requires_grad_(requires_grad)
            return data
        return original_new(cls, data, requires_grad)

    Parameter.__new__ = staticmethod(parameter_new)


def _quantized_roles(tracker: Any, modules: Any) -> None:
    """What a quantized weight keeps beside its packed data (`Params4bit`'s quant state: absmax,
    the nested state, the code tables and offset; `Int8Params`' row scales `SCB`) is the weight
    too: tagged `parameter` once quantized, as the packed data is."""

    def tensors(param: Any) -> list[Any]:
        state = getattr(param, "quant_state", None)
        found = [getattr(param, "SCB", None)]
        while state is not None:
            found += [getattr(state, name, None) for name in ("absmax", "code", "offset")]
            state = getattr(state, "state2", None)
        return [t for t in found if t is not None]

    for name in ("Params4bit", "Int8Params"):
        cls = getattr(modules, name, None)
        original = getattr(cls, "_quantize", None)
        if cls is None or original is None or getattr(original, "_iteragpu", False):
            continue

        def _quantize(self: Any, device: Any, _original: Any = original) -> Any:
            result = _original(self, device)
            for t in tensors(self):
                from .tracker import Category

                tracker.tag(t, Category.PARAMETER)
            return result

        _quantize._iteragpu = True  # type: ignore[attr-defined]  # wrapped once
        cls._quantize = _quantize


def _paged(torch: Any, tracker: Any, note: Callable[[str], None], functional: Any) -> None:
    """bitsandbytes' paged buffers (`get_paged`: `cudaMallocManaged` through its C library,
    `fill` and `prefetch_tensor` on their pointers): a data-less CUDA tensor of the same shape,
    dtype and bytes, told to the CLI as unified memory outside PyTorch's allocator
    (`Tracker.managed`); filling and prefetching one move nothing."""
    from torch._subclasses.fake_tensor import FakeTensor

    if getattr(functional, "_iteragpu_paged", False):
        return
    functional._iteragpu_paged = True
    original_get_paged = functional.get_paged
    original_fill = functional.fill
    original_prefetch = functional.prefetch_tensor
    first = torch.device("cuda", 0)

    def get_paged(*shape: int, dtype: Any = torch.float32, device: Any = first) -> Any:
        device = torch.device(device)
        if device.type != "cuda":
            return original_get_paged(*shape, dtype=dtype, device=device)
        with tracker.suspended():
            out = torch.zeros(shape, dtype=dtype, device=device)
        from .tracker import Category

        nbytes = tracker.managed(out, Category.OPTIMIZER_STATE)
        note(
            "bitsandbytes' paged optimizer states are CUDA unified memory (cudaMallocManaged), outside "
            "PyTorch's caching allocator: counted apart, as each phase's peak_managed_bytes, neither in "
            "allocated nor reserved nor in the capacity check; they stay on the GPU while it has room "
            "and the driver moves them to the host under pressure"
        )
        del nbytes
        out.is_paged = True
        out.page_deviceid = device.index or 0
        return out

    def fill(A: Any, value: Any, device: Any = None, prefetch: bool = True) -> Any:
        if isinstance(A, FakeTensor):
            return None  # a data-less tensor: no value to write
        return original_fill(A, value, device, prefetch)

    def prefetch_tensor(A: Any, to_cpu: bool = False) -> Any:
        if isinstance(A, FakeTensor):
            return None  # no page moves on a prediction
        return original_prefetch(A, to_cpu)

    functional.get_paged = get_paged
    functional.fill = fill
    functional.prefetch_tensor = prefetch_tensor


# A quantizer's steps that load its library or check for it (transformers' `HfQuantizer`).
_QUANTIZER_STEPS: tuple[str, ...] = ("__init__", "validate_environment", "preprocess_model", "postprocess_model")


def _missing_library(tracker: Any, what: str, exc: BaseException) -> Exception:
    """`what` needs a library or kernel the predicting Python lacks: the phase is unpredictable
    with the library named and its own message (a GPU machine with the library runs it)."""
    from .tracker import Unpredictable, user_frame

    file, line = user_frame()
    reason = f"its library or kernel is not available in the predicting Python ({type(exc).__name__}: {exc}); install it beside torch to predict this load"
    tracker._emit("unpredictable", {"op": what, "file": file, "line": line, "reason": reason})
    return Unpredictable(f"{what}: {reason}")


def _checkpoint_formats(tracker: Any, auto: Any) -> None:
    """A quantized checkpoint (GPTQ through optimum/gptqmodel, AWQ, compressed-tensors, FP8, …)
    whose quantizer refuses for want of its library: unpredictable, the quant method and the
    library's message said, instead of a failed script."""
    classes = [(method, cls, _QUANTIZER_STEPS) for method, cls in getattr(auto, "AUTO_QUANTIZER_MAPPING", {}).items()]
    # Its config may check for the library first (compressed-tensors' `CompressedTensorsConfig`).
    classes += [(method, cls, ("__init__", "post_init")) for method, cls in getattr(auto, "AUTO_QUANTIZATION_CONFIG_MAPPING", {}).items()]
    mapping = getattr(auto, "AUTO_QUANTIZER_MAPPING", {})
    for method in ("gptq", "awq"):
        cls = mapping.get(method)
        if cls is not None and "_iteragpu_checked" not in vars(cls) and not _format_library(method):
            mapping[method] = _packed_quantizer(cls, method, tracker)
    _without_library(tracker, auto, mapping)
    classes = [(m, c, s) for m, c, s in classes if mapping.get(m) is c or s != _QUANTIZER_STEPS]
    for method, cls, steps in classes:
        if method.startswith("bitsandbytes") or "_iteragpu_checked" in vars(cls):
            continue
        cls._iteragpu_checked = True
        for step in steps:
            original = vars(cls).get(step)
            if original is None:
                continue  # inherited: wrapped where it is defined, if there

            def checked(self: Any, *args: Any, _original: Any = original, _what: str = f"transformers' {method} quantization ({cls.__name__})", **kwargs: Any) -> Any:
                try:
                    return _original(self, *args, **kwargs)
                except ImportError as exc:
                    raise _missing_library(tracker, _what, exc) from exc

            setattr(cls, step, checked)


def _format_library(method: str) -> bool:
    """Whether the library transformers loads `method` with is installed (GPTQ: optimum and
    gptqmodel; AWQ: gptqmodel; compressed-tensors; hqq)."""
    import importlib.util

    needed = {"gptq": ("optimum", "gptqmodel"), "compressed-tensors": ("compressed_tensors",), "hqq": ("hqq",)}.get(method, ("gptqmodel",))
    return all(importlib.util.find_spec(name) is not None for name in needed)


def _without_library(tracker: Any, auto: Any, mapping: dict[str, Any]) -> None:
    """compressed-tensors and HQQ: without their library, transformers' config and quantizer
    replaced by ones that build the checkpoint's layers (`formats_without_library.py`); with
    hqq, what transformers builds of an HQQ checkpoint said."""
    from . import formats_without_library as fallback

    configs = getattr(auto, "AUTO_QUANTIZATION_CONFIG_MAPPING", {})
    for method in ("compressed-tensors", "hqq"):
        cls, config = mapping.get(method), configs.get(method)
        if cls is None or config is None or "_iteragpu_checked" in vars(cls):
            continue
        if _format_library(method):
            if method == "hqq":
                fallback.hqq_note(cls, tracker)
            continue
        what = f"transformers' {method} quantization ({cls.__name__})"
        mapping[method] = fallback.quantizer_class(cls, method, tracker, lambda exc, _what=what: _missing_library(tracker, _what, exc))
        configs[method] = fallback.config_class(config, method)


def _packed_quantizer(cls: Any, method: str, tracker: Any) -> Any:
    """transformers' quantizer for a GPTQ or AWQ checkpoint when the format's library is missing:
    its linear layers become the format's packed layout (`workloads/packed.py`'s `PackedLinear`,
    `qweight`/`qzeros`/`scales` (and GPTQ's `g_idx`) as buffers that the checkpoint's tensors fill,
    data-less), the forward the formats' reference path (a dequantized weight per matmul). Said in
    the notes; peft's LoRA over them is peft's own GPTQLoraLinear (`_lora_on_packed`)."""
    from transformers.quantizers.base import HfQuantizer

    from ..spec import Packed
    from ..workloads.packed import replace_linear

    class PackedFallback(cls):
        requires_calibration = False
        _iteragpu_checked = True

        def __init__(self, quantization_config: Any, **kwargs: Any) -> None:
            HfQuantizer.__init__(self, quantization_config, **kwargs)

        def validate_environment(self, *args: Any, **kwargs: Any) -> None:
            tracker.note(
                f"a {method.upper()} checkpoint loaded without its library ({'optimum and gptqmodel' if method == 'gptq' else 'gptqmodel'} not installed): "
                "its linear layers were built in the format's packed layout (qweight, qzeros, scales"
                + (", g_idx" if method == "gptq" else "")
                + "), the forward the format's reference path (each weight dequantized to the compute dtype for its matmul: assumed; the fused kernels hold less)"
            )

        def update_dtype(self, dtype: Any) -> Any:
            return dtype

        def _process_model_before_weight_loading(self, model: Any, **kwargs: Any) -> Any:
            import torch

            config = self.quantization_config
            skip = list(getattr(config, "modules_to_not_convert", None) or [])
            packed = Packed(method, int(config.bits), getattr(config, "group_size", None), tuple(skip))
            dtype = getattr(model.config, "dtype", None) or torch.float16
            replace_linear(torch, model, packed, dtype, torch.device("meta"))
            return model

        def _process_model_after_weight_loading(self, model: Any, **kwargs: Any) -> Any:
            return model

        @property
        def is_trainable(self) -> bool:
            return False

        def is_serializable(self, *args: Any, **kwargs: Any) -> bool:
            return False

    PackedFallback.__name__ = f"{cls.__name__}WithoutItsLibrary"
    return PackedFallback


def _fp8_reference(torch: Any, tracker: Any, module: Any) -> None:
    """transformers' fine-grained FP8 linear layers (`quant_method: fp8`) under a prediction.
    Their forward runs DeepGEMM or the `finegrained-fp8` Triton kernel, both Hub kernels that a
    prediction never fetches or runs (`hub_kernels.py`). The linear is predicted through
    transformers' own reference, the dequantization its backward uses (`_dequantize_fp8_weight`:
    the weight in the activations' dtype, scaled per block, for this matmul only), then the matmul:
    a transient of one layer's weight that the fused kernels do not hold (they quantize the
    activations instead): assumed, and said. FP4 weights and the experts' grouped matmul keep
    the kernel loaders' own refusal (unpredictable, said)."""
    _kernel_loaders(tracker, module, "finegrained-fp8")
    original = getattr(module, "fp8_linear", None)
    dequantize = getattr(module, "_dequantize_fp8_weight", None)
    if original is None or dequantize is None or getattr(original, "_iteragpu", False):
        return

    def fp8_linear(input: Any, weight: Any, weight_scale_inv: Any, block_size: Any = None, bias: Any = None, *args: Any, **kwargs: Any) -> Any:
        if weight.dtype == torch.int8:  # FP4-packed: no reference dequantization in transformers
            return original(input, weight, weight_scale_inv, block_size, bias, *args, **kwargs)
        tracker.note(
            "FP8 linear layers (transformers' fine-grained FP8) predicted through transformers' own reference: each weight "
            "dequantized to the activations' dtype for its matmul (_dequantize_fp8_weight), where DeepGEMM and the Triton "
            "kernel quantize the activations instead: one layer's weight-sized transient per matmul (assumed; the kernels hold less)"
        )
        w = dequantize(weight, weight_scale_inv, block_size, input.dtype)
        return torch.nn.functional.linear(input, w, bias)

    fp8_linear._iteragpu = True  # type: ignore[attr-defined]
    module.fp8_linear = fp8_linear


def _kernel_loaders(tracker: Any, module: Any, kernel: str) -> None:
    """A checkpoint format's kernel loaded at the first forward (FP8's `finegrained-fp8` hub
    kernel through the `kernels` package): missing, it is said as the checkpoint formats are."""
    for name in dir(module):
        original = getattr(module, name)
        if not (callable(original) and name.startswith(("_load_", "load_")) and name.endswith("_kernel")) or getattr(original, "_iteragpu", False):
            continue

        def checked(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            try:
                return _original(*args, **kwargs)
            except ImportError as exc:
                raise _missing_library(tracker, f"the {kernel} kernel ({module.__name__})", exc) from exc

        checked._iteragpu = True  # type: ignore[attr-defined]  # wrapped once
        setattr(module, name, checked)
