"""Which kernel `F.scaled_dot_product_attention` runs on a CUDA card, and running it on fake tensors.

Without a driver PyTorch's own choice (`_fused_sdp_choice`) sees no device and falls back to the
math path, so `choose` re-implements `select_sdp_backend` with the card given as an argument, and
`call` does what the C++ `scaled_dot_product_attention` does once the backend is known (mask
conversion, padding, unbatched inputs), so that the very ops, and so the very allocations and
saved tensors, of the real card are seen. The fused ops have meta kernels: `call` works on fake
tensors of any device.

Sources (the rules differ between releases, so two rule sets are kept, chosen by `torch_version`,
default the installed torch):
* torch 2.15.0+cu132 (git d0f2af8b), the installed one: its headers
  (`include/ATen/native/transformers/sdp_utils_cpp.h`, `cuda/sdp_utils.h`) and
  `aten/src/ATen/native/transformers/cuda/sdp_utils.cpp` at pytorch commit 001f694a (read in
  full; the 2.15 binary has four checks more, taken from its messages and probed: flash grid
  size, FA4 constraints, the cuDNN decode and SM90 NaN guards); `attention.cpp`'s dispatch as
  traced from the 2.15 binary (which ops, in which order, on which shapes).
* torch 2.11.0+cu130 (git 70d99e99; its wheel pins cuDNN 9.19.0): its `sdp_utils_cpp.h`, a
  2.10/2.11-era `sdp_utils.cpp` (same messages and check lists as the 2.11 binary), and the
  2.11 binary's traced dispatch.
Both rule sets were then checked case by case against the real `select_sdp_backend` of each
binary, run on fake CUDA tensors over a test-only stand-in for the CUDA runtime (capability and
cuDNN version set per run): ~47,000 (release, card, cuDNN, case) combinations, no disagreement.

Not modelled: ROCm, XPU/MPS/CPU dispatch (`choose` answers for a CUDA card whatever the tensors'
device), nested-tensor checks that read per-sequence lengths (data), and the C++ one-shot
cuDNN-first priority initialisation overwriting a user order set before the first SDPA call.
"""

from __future__ import annotations

import math
import os
from typing import Any, Iterable, Sequence

import torch

__all__ = ["choose", "call", "BACKENDS"]

# at::SDPBackend numbering (as torch.nn.attention.SDPBackend).
_MATH, _FLASH, _EFFICIENT, _CUDNN, _OVERRIDEABLE = 0, 1, 2, 3, 4
BACKENDS: dict[int, str] = {_MATH: "math", _FLASH: "flash", _EFFICIENT: "efficient", _CUDNN: "cudnn"}
_DEFAULT_ORDER: list[int] = [_FLASH, _EFFICIENT, _MATH, _CUDNN, _OVERRIDEABLE]  # Context.h sdp_priority_order
# The installed torch's own order before any workload ran (2.6 has no overrideable backend and
# repeats math: [1, 2, 0, 3, 0]): an order still equal to it is untouched too.
_INSTALLED_ORDER: list[int] = list(torch._C._get_sdp_priority_order())
_MAX_GRID: int = 65535  # CUDA grid y/z limit used by both the flash and cuDNN batch/head checks


# ----------------------------------------------------------------------------- rule sets


class _Rules:
    """What differs between the releases ported; every field is named after the 2.15 change."""

    def __init__(self, version: tuple[int, ...]) -> None:
        self.version = version
        new = version >= (2, 15)
        # sdp_utils_cpp.h normalize_unbatched_input (2.15): 3-D q/k/v get a batch dimension
        # before the checks and the kernel; 2.11 sends 3-D inputs to math.
        self.normalize_unbatched = new
        # check_batch_size_and_num_heads_dense<.., supports_mqa> (2.15): k/v with one head
        # broadcast without enable_gqa, for flash, efficient and cuDNN.
        self.mqa = new
        # can_use_mem_efficient_attention: supports_gqa true in 2.15, false in 2.11.
        self.efficient_gqa = new
        # check_data_ptr_alignment_mem_efficient (2.15): sm80+ storage offsets aligned.
        self.efficient_ptr_alignment = new
        # check_flash_attention_grid_size (2.15): batch and heads <= 65535.
        self.flash_grid = new
        # cuDNN, 2.15 only: dropout in 1/16 steps, batch/heads <= 65535, head dim 256 on
        # sm90/sm10x (cuDNN > 9.22; 2.11: sm90 only, cuDNN >= 9.10) with its backward table,
        # the decode and SM90 NaN guards.
        self.cudnn_dropout_16 = new
        self.cudnn_grid = new
        self.cudnn_d256 = new
        self.cudnn_decode_guard = new
        self.cudnn_sm90_nan_guard = new
        # check_prefer_cudnn_attention: 2.11 (and CUDA < 13 builds of 2.15) also require
        # minor 0 or 3 (so no cuDNN-first on sm107 etc.); a cu13 2.15 build does not.
        self.prefer_any_minor = new
        # attention.cpp: the cuDNN bool-mask fill value, and the is_causal + attn_mask error
        # that 2.15 raises on every path (2.11 only on math).
        self.cudnn_mask_fill = -math.inf if new else -65504.0
        self.causal_mask_error_all = new


def _rules(torch_version: Sequence[int] | None) -> _Rules:
    torch_version = _installed_version() if torch_version is None else tuple(torch_version)[:2]
    if torch_version not in ((2, 11), (2, 15)):
        # 2.12-2.14 hold a mix of both rule sets that was never checked; take the closer one.
        torch_version = (2, 15) if torch_version >= (2, 13) else (2, 11)
    return _Rules(torch_version)


# Default cuDNN version per release: what its CUDA wheel pins (2.11.0+cu130: nvidia-cudnn-cu13
# 9.19.0.56); the installed one is asked directly (cudnnGetVersion needs no driver).
_CUDNN_OF_RELEASE: dict[tuple[int, ...], int] = {(2, 11): 91900}


def _default_cudnn(rules: _Rules, asked: bool = False) -> int | None:
    # The pinned cuDNN of a release asked for by name; the installed torch (whatever rule set
    # stands in for it: 2.6-2.10 take 2.11's) keeps its own cuDNN.
    if asked and rules.version in _CUDNN_OF_RELEASE and rules.version != _installed_version():
        return _CUDNN_OF_RELEASE[rules.version]
    try:
        return torch.backends.cudnn.version()
    except Exception:  # a torch without a loadable cuDNN may fail in any way: the version is unknown
        return None


def _installed_version() -> tuple[int, ...]:
    return tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])


# ----------------------------------------------------------------------------- symbolic helpers


def _gof(cond: Any) -> bool:
    """TORCH_GUARD_OR_FALSE: false unless provably true (symbolic sizes from torch.compile)."""
    if isinstance(cond, bool):
        return cond
    try:
        from torch.fx.experimental.symbolic_shapes import guard_or_false
    except ImportError:
        return bool(cond)
    return guard_or_false(cond)


def _got(cond: Any) -> bool:
    """TORCH_GUARD_OR_TRUE."""
    if isinstance(cond, bool):
        return cond
    try:
        from torch.fx.experimental.symbolic_shapes import guard_or_true
    except ImportError:
        return bool(cond)
    return guard_or_true(cond)


def _const(x: Any) -> int | None:
    """SymInt::maybe_as_int."""
    if isinstance(x, int):
        return x
    try:
        return x.node.maybe_as_int()
    except AttributeError:
        return None


class _T:
    """A tensor's metadata, as the C++ checks read it (so that no op runs while choosing)."""

    __slots__ = ("dim", "sizes", "strides", "offset", "dtype", "nested", "rg", "elsize")
    # Sizes and strides may be symbolic (torch.compile) or None (a ragged nested dimension).
    sizes: list[Any]
    strides: Any  # None for a nested tensor

    def __init__(self, t: Any, unsqueeze: int = 0) -> None:
        self.nested = bool(getattr(t, "is_nested", False)) and t.layout == torch.strided
        self.dtype = t.dtype
        self.rg = bool(t.requires_grad)
        self.elsize = t.element_size()
        if self.nested:
            self.dim = t.dim()
            self.sizes = [_nested_size(t, i) for i in range(self.dim)]
            self.strides = None
            self.offset = 0
            return
        sizes, strides = list(t.shape), list(t.stride())
        for _ in range(unsqueeze):  # Tensor::unsqueeze(0)
            strides.insert(0, sizes[0] * strides[0] if sizes else 1)
            sizes.insert(0, 1)
        self.dim, self.sizes, self.strides = len(sizes), sizes, strides
        self.offset = t.storage_offset()

    def size(self, i: int) -> Any:
        return self.sizes[i]

    def stride(self, i: int) -> Any:
        return self.strides[i]

    def numel(self) -> Any:
        n = 1
        for s in self.sizes:
            n = n * s
        return n


def _nested_size(t: Any, i: int) -> int | None:
    try:
        return t.size(i)
    except RuntimeError:
        return None  # ragged


class _P:
    """sdp::sdp_params."""

    def __init__(self, q: Any, k: Any, v: Any, mask: Any, dropout: Any, causal: Any, gqa: Any, requires_grad: Any, rules: _Rules) -> None:
        unsq = 0
        if (rules.normalize_unbatched and not any(getattr(t, "is_nested", False) for t in (q, k, v))
                and all(t.layout == torch.strided and t.dim() == 3 for t in (q, k, v))):
            unsq = 1
        self.q, self.k, self.v = _T(q, unsq), _T(k, unsq), _T(v, unsq)
        self.mask = None
        if mask is not None:
            self.mask = _T(mask, max(0, 4 - mask.dim()) if unsq else 0)
        self.dropout = float(dropout)
        self.causal = bool(causal)
        self.gqa = bool(gqa)
        any_rg = bool(q.requires_grad or k.requires_grad or v.requires_grad)
        if requires_grad is None:
            # input_requires_grad: any of q/k/v requires grad and grad mode is on.
            self.rg = any_rg and torch.is_grad_enabled()
            # the cuDNN SM90 NaN guard reads requires_grad() alone, grad mode or not (seen on 2.15)
            self.rg_tensors = any_rg
        else:
            self.rg = self.rg_tensors = bool(requires_grad)


def _nested(p: _P) -> bool:
    return p.q.nested or p.k.nested or p.v.nested


# ----------------------------------------------------------------------------- shared checks (sdp_utils_cpp.h)


def _shapes_4d(p: _P) -> bool:  # check_tensor_shapes
    return p.q.dim == p.k.dim == p.v.dim == 4


def _dtype_in(p: _P, allowed: Iterable[Any]) -> bool:  # check_tensor_dtype
    return p.q.dtype == p.k.dtype == p.v.dtype and p.q.dtype in allowed


def _attn_mask_shape(p: _P) -> bool:  # check_attn_mask_shape
    m = p.mask
    if m is None:
        return True
    if m.rg:
        return False

    def compatible(mask_dim: Any, target: Any) -> bool:
        return _gof(mask_dim == target) or _const(mask_dim) == 1

    if not compatible(m.size(-2), p.q.size(2)) or not compatible(m.size(-1), p.k.size(2)):
        return False
    if m.dim == 2:
        return True
    if m.dim == 4:
        return compatible(m.size(0), p.q.size(0)) and compatible(m.size(1), p.q.size(1))
    return False


def _grouped_query(p: _P, rules: _Rules, requires_same_num_heads: bool) -> bool:  # check_grouped_query_attention
    qh, kh, vh = p.q.size(-3), p.k.size(-3), p.v.size(-3)
    if requires_same_num_heads and not _gof(kh == vh):
        return False
    if rules.version >= (2, 15):
        ok = _gof(kh > 0) and _gof(qh % kh == 0)
        if not requires_same_num_heads:
            ok = ok and _gof(vh > 0) and _gof(qh % vh == 0)
        return ok
    return not (qh % kh != 0 or (not requires_same_num_heads and qh % vh != 0))


def _batch_and_heads_dense(p: _P, rules: _Rules, supports_gqa: bool, requires_same_num_heads: bool = True, supports_mqa: bool = False) -> bool:
    # check_batch_size_and_num_heads_dense<supports_gqa, requires_same_num_heads, supports_mqa>
    qb, kb, vb = p.q.size(0), p.k.size(0), p.v.size(0)
    if not (_gof(qb == kb) and _gof(qb == vb)):
        return False
    if p.gqa and supports_gqa:
        return _grouped_query(p, rules, requires_same_num_heads)
    qh, kh, vh = p.q.size(-3), p.k.size(-3), p.v.size(-3)
    if _gof(qh == kh) and _gof(qh == vh):
        return True
    if supports_mqa and rules.mqa:
        return _gof(qh > 0) and _gof(kh == 1) and _gof(vh == 1)
    return False


def _nonzero_seq_dense(p: _P) -> bool:  # check_nonzero_sequence_lengths_dense
    return _gof(p.q.size(-2) != 0) and _gof(p.k.size(-2) != 0)


def _last_dim_stride1_dense(p: _P, ignore_singleton_dim: bool) -> bool:  # check_last_dim_stride_equals_1_dense
    ok = _gof(p.q.stride(-1) == 1) and _gof(p.k.stride(-1) == 1) and _gof(p.v.stride(-1) == 1)
    if ignore_singleton_dim:
        ok = ok or _gof(p.q.size(-1) == 1)
    # the mask must have stride 1 too on GPU backends (the CPU exemption is not ours)
    mask_ok = p.mask is None or p.mask.nested or _gof(p.mask.stride(-1) == 1)
    return ok and mask_ok


def _nested_checks(p: _P, rules: _Rules) -> bool:
    """check_batch_size_nested / check_for_seq_len_0_nested_tensor, from metadata only."""
    qb, kb, vb = p.q.size(0), p.k.size(0), p.v.size(0)
    if not (qb == kb == vb):
        if p.rg:
            return False
        if not _broadcastable(qb, kb, vb):
            return False
    heads = [t.size(1) for t in (p.q, p.k, p.v)]
    if any(h is None for h in heads):  # ragged num_heads
        return False
    if not (heads[0] == heads[1] == heads[2]):
        if p.rg:
            return False
        return _broadcastable(*heads)
    return True  # a zero-length sequence inside a nested tensor is data: not seen here


def _broadcastable(a: int, b: int, c: int) -> bool:  # try_broadcast_param_size
    m = max(a, b, c)
    return all(x == m or x == 1 for x in (a, b, c))


# ----------------------------------------------------------------------------- flash (sdp_utils.cpp can_use_flash_attention)


def _sm_between(cap: tuple[int, ...], lo: tuple[int, int], hi: tuple[int, int]) -> bool:  # check_sm_version<lo, hi>
    return lo <= tuple(cap) <= hi


def _can_use_flash(p: _P, rules: _Rules, cap: tuple[int, ...]) -> bool:
    if not torch.backends.cuda.flash_sdp_enabled():  # check_runtime_disabled_flash
        return False
    if not _shapes_4d(p):
        return False
    if p.mask is not None:  # check_for_attn_mask
        return False
    dq, dk, dv = p.q.size(-1), p.k.size(-1), p.v.size(-1)
    if rules.version >= (2, 15) and _flag("_get_fa4_sdp_enabled"):
        # check_fa4_constraints (2.15, with torch.nn.attention.activate_flash_attention_impl("FA4")):
        # not in the source read; probed on the 2.15 binary: sm9x/sm10x only, no dropout, q/k head
        # dims equal, v may differ (<= 256); on sm10x only (<=128, <=128), (192, 128), (256, 256).
        if cap[0] not in (9, 10) or p.dropout > 0.0:
            return False
        if not (_gof(dq == dk) and _gof(dq <= 256) and _gof(dv <= 256)):
            return False
        if cap[0] == 10 and not ((_gof(dq <= 128) and _gof(dv <= 128)) or (_gof(dq == 192) and _gof(dv == 128))
                                 or (_gof(dq == 256) and _gof(dv == 256))):
            return False
    # check_head_dim_size_flash<false>: all head dims equal and <= 256
    elif not (_gof(dq == dk) and _gof(dq == dv) and _gof(dq <= 256)):
        return False
    if not _sm_between(cap, (8, 0), (12, 1)):  # check_flash_attention_hardware_support
        return False
    # check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89[_or_120_121]
    # (both releases cover sm120/121, whatever 2.11's message says)
    in_range = _sm_between(cap, (8, 6), (8, 9)) or _sm_between(cap, (12, 0), (12, 1))
    if p.rg and in_range:
        if not (_gof(dq <= 192) or (not p.dropout > 0.0 and _gof(dq > 224))):
            return False
    # check_flash_causal_non_square_seqlens: FA2's causal mask is bottom-right aligned
    if p.causal and not p.q.nested and not p.k.nested and not _gof(p.q.size(-2) == p.k.size(-2)):
        return False
    # check_dtypes_flash_attention: fp8 only with FA3 on sm90+, else fp16/bf16 on sm80+
    allowed: tuple[Any, ...]
    if cap[0] >= 9 and _flag("_get_fa3_sdp_enabled"):
        allowed = (torch.float8_e4m3fn, torch.float16, torch.bfloat16)
    else:
        allowed = (torch.float16, torch.bfloat16) if cap[0] >= 8 else (torch.float16,)
    if not _dtype_in(p, allowed):
        return False
    if rules.flash_grid and not p.q.nested:  # check_flash_attention_grid_size
        if not (_gof(p.q.size(0) <= _MAX_GRID) and _gof(p.q.size(1) <= _MAX_GRID)):
            return False
    if _nested(p):
        # check_batch_size_nested, check_head_dim_size_flash_nested (head dim % 8), seq len 0
        if not _nested_checks(p, rules) or not (dq % 8 == 0):
            return False
    if not _nested(p):
        if not _batch_and_heads_dense(p, rules, supports_gqa=True, requires_same_num_heads=True, supports_mqa=True):
            return False
        if not _nonzero_seq_dense(p) or not _last_dim_stride1_dense(p, ignore_singleton_dim=True):
            return False
    return True


# ----------------------------------------------------------------------------- efficient (can_use_mem_efficient_attention)


def _gemm_alignment(p: _P, cap: tuple[int, ...]) -> int:  # minimum_gemm_alignment: elements, from the tensor-core tile
    is_half = p.q.dtype in (torch.float16, torch.bfloat16)
    use_tc = cap[0] >= 8 or (cap[0] >= 7 and is_half)
    mn = 4 if cap[0] >= 8 else 1
    if use_tc:
        mn = max(mn, 128 // (16 if is_half else 32))
    return mn


def _can_use_efficient(p: _P, rules: _Rules, cap: tuple[int, ...]) -> bool:
    if not torch.backends.cuda.mem_efficient_sdp_enabled():
        return False
    if not _sm_between(cap, (5, 0), (12, 1)):  # check_mem_efficient_hardware_support
        return False
    if not _shapes_4d(p):
        return False
    # check_head_dim_size_mem_efficient: q/k head dims equal, q and v head dims aligned
    align = _gemm_alignment(p, cap)
    dq, dk, dv = p.q.size(-1), p.k.size(-1), p.v.size(-1)
    if not (_gof(dq == dk) and _gof(dq % align == 0) and _gof(dq > 0) and _gof(dv % align == 0) and _gof(dv > 0)):
        return False
    # check_data_ptr_alignment_mem_efficient (2.15): base pointers are 256-byte aligned by the
    # caching allocator, so only storage_offset * element_size counts; unknown offsets pass.
    if rules.efficient_ptr_alignment and not _nested(p) and cap[0] >= 8:
        align_bytes = align * p.q.elsize
        for t in (p.q, p.k, p.v):
            if not (_gof(t.numel() == 0) or _got((t.offset * t.elsize) % align_bytes == 0)):
                return False
    if _nested(p):
        if p.rg:  # check_requires_grad_and_nested
            return False
        if not _nested_checks(p, rules):
            return False
    else:
        if not _nonzero_seq_dense(p) or not _last_dim_stride1_dense(p, ignore_singleton_dim=False):
            return False
        if not _batch_and_heads_dense(p, rules, supports_gqa=rules.efficient_gqa, requires_same_num_heads=True,
                                      supports_mqa=True):
            return False
    allowed = (torch.float16, torch.float32, torch.bfloat16) if cap[0] >= 8 else (torch.float16, torch.float32)
    return _dtype_in(p, allowed)


# ----------------------------------------------------------------------------- cuDNN (can_use_cudnn_attention)


def _cudnn_supports_d256(cap: tuple[int, ...], cudnn: int) -> bool:
    # head dim 256 (fwd and bwd) on sm90 / sm10x with cuDNN > 9.22 (sm107 needs > 9.25); the
    # 2.15 wheel's cudnn-frontend is >= 1.24 (kCuDNNFrontendSupportsD256), checked by the oracle.
    major, minor = cap
    sm90_or_10x = (major == 9 and minor == 0) or major == 10
    bad_sm107 = major == 10 and minor == 7 and cudnn <= 92500
    return sm90_or_10x and not bad_sm107 and cudnn > 92200


def _cudnn_tensor_shapes(p: _P, rules: _Rules, cap: tuple[int, ...], cudnn: int) -> bool:  # check_cudnn_tensor_shapes
    b, h = p.q.size(0), p.q.size(1)
    if rules.cudnn_grid and not (_gof(b <= _MAX_GRID) and _gof(h <= _MAX_GRID)):
        return False
    s_q, s_k = p.q.size(2), p.k.size(2)
    d_qk, d_v = p.q.size(3), p.v.size(3)
    if cudnn < 8903:
        return False
    if cudnn < 8906 and p.dropout != 0.0:
        return False
    major, minor = cap
    sm90_or_10x = (major == 9 and minor == 0) or major == 10
    if rules.cudnn_sm90_nan_guard:
        # "cuDNN SDPA before version 9.26 can produce non-finite query gradients on SM90 for
        # non-causal attention when the key/value sequence length is 64 modulo 128" (pytorch
        # issue 196678: the backward with an explicit mask); when q, k or v requires grad.
        if (major, minor) == (9, 0) and cudnn < 92600 and not p.causal and p.rg_tensors and _gof(s_k % 128 == 64):
            return False
    if rules.cudnn_decode_guard:
        # "cuDNN SDPA decode is disabled for cuDNN versions 9.19-9.25.0 (except 9.24.1) on SM 10.x
        # and 11.x." (is_cudnn_attention_decode_disabled)
        if major in (10, 11) and 91900 <= cudnn <= 92500 and cudnn != 92401 and _gof(s_q == 1):
            return False
    limit = 128
    if rules.cudnn_d256:
        # 2.15: 256 on sm90/sm10x with cuDNN > 9.22, else 192 for (d_qk, d_v) = (192, 128)
        if _cudnn_supports_d256(cap, cudnn):
            limit = 256
        elif sm90_or_10x and cudnn >= 91100 and _gof(d_qk == 192) and _gof(d_v == 128):
            limit = 192  # the DeepSeek MLA shape
    else:
        # 2.11: "Hopper: head_dim<=256 support with cuDNN >= 9.10.0", and the (192, 128) special
        # case on sm10x from cuDNN 9.11
        if cudnn >= 91000 and (major, minor) == (9, 0):
            limit = 256
        if cudnn >= 91100 and major == 10 and _gof(d_qk == 192) and _gof(d_v == 128):
            limit = 192
    if not (_gof(d_qk <= limit) and _gof(d_v <= limit)):
        return False
    if not (_gof(d_qk % 8 == 0) and _gof(d_v % 8 == 0)):
        return False
    if cudnn < 8906 and not _gof(s_k % 64 == 0):
        return False
    if cudnn < 90000:
        if not _gof(s_q >= 64):
            return False
        if p.dropout != 0.0 and not (_gof(s_q % 64 == 0) and _gof(s_k % 64 == 0)):
            return False
    if not _gof(s_k != 1):  # "cudnn SDPA does not support key/value sequence length 1."
        return False
    if p.dropout != 0.0 and not _gof(s_q != 1):
        return False
    return True


def _cudnn_d256_bprop(p: _P, cap: tuple[int, ...], cudnn: int) -> bool:  # check_cudnn_d256_bprop_head_dim (2.15)
    if not p.rg or not _cudnn_supports_d256(cap, cudnn):
        return True
    d_qk, d_v = p.q.size(3), p.v.size(3)
    return ((_gof(d_qk <= 128) and _gof(d_v <= 128)) or (_gof(d_qk == 192) and _gof(d_v == 128))
            or (_gof(d_qk == 256) and _gof(d_v == 256)))


def _can_use_cudnn(p: _P, rules: _Rules, cap: tuple[int, ...], cudnn: int | None) -> bool:
    if cudnn is None or cudnn < 90000:  # not compiled with cuDNN >= 9
        return False
    if p.dropout > 0.0 and 91100 < cudnn < 91400:  # dropout broken in cuDNN 9.11-9.13
        return False
    if not torch.backends.cuda.cudnn_sdp_enabled():
        return False
    if _nested(p):  # check_for_nested_inputs: experimental, env-gated, sm90/sm100 only
        if _check_env("TORCH_CUDNN_SDPA_NESTED_TENSOR_ENABLED") is not True or cap[0] not in (9, 10):
            return False
    if not _shapes_4d(p):
        return False
    # check_cudnn_deterministic: cuDNN SDPA is refused under use_deterministic_algorithms(True)
    # unless warn_only
    if torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled():
        return False
    allowed = (torch.float16, torch.bfloat16) if cap[0] >= 8 else (torch.float16,)  # check_dtypes_low_precision
    if not _dtype_in(p, allowed):
        return False
    if not _attn_mask_shape(p):
        return False
    if not _sm_between(cap, (8, 0), (12, 1)):  # check_cudnn_hardware_support
        return False
    if rules.cudnn_dropout_16 and p.dropout * 16.0 != math.floor(p.dropout * 16.0):  # check_cudnn_dropout
        return False
    if not _nested(p):
        if not _nonzero_seq_dense(p) or not _last_dim_stride1_dense(p, ignore_singleton_dim=True):
            return False
        if not _batch_and_heads_dense(p, rules, supports_gqa=True, requires_same_num_heads=False, supports_mqa=True):
            return False
        if not _cudnn_tensor_shapes(p, rules, cap, cudnn):
            return False
        if rules.cudnn_d256 and not _cudnn_d256_bprop(p, cap, cudnn):
            return False
    # nested: check_cudnn_query_seq_len_nested needs the per-sequence lengths (data): not seen
    return True


# ----------------------------------------------------------------------------- selection (select_sdp_backend)


def _flag(name: str) -> bool:
    fn = getattr(torch._C, name, None)
    return bool(fn()) if fn is not None else False


def _check_env(name: str) -> bool | None:
    """c10::utils::check_env: True / False / None (unset or unrecognised)."""
    val = os.environ.get(name)
    if val is None:
        return None
    if val.upper() in ("1", "ON", "YES", "TRUE", "Y"):
        return True
    if val.upper() in ("0", "OFF", "NO", "FALSE", "N"):
        return False
    return None


def _prefer_cudnn(rules: _Rules, cap: tuple[int, ...], cudnn: int | None) -> bool:  # check_prefer_cudnn_attention
    if _check_env("TORCH_CUDNN_SDPA_DEPRIORITIZED") is True or cudnn is None:
        return False
    major, minor = cap
    if not (cudnn > 91500 and major in (9, 10)):
        return False
    return rules.prefer_any_minor or minor in (0, 3)


def _priority_order(rules: _Rules, cap: tuple[int, ...], cudnn: int | None) -> list[int]:
    """sdp::priority_order: the global order, turned cuDNN-first on the first call on sm90/sm10x.

    On a GPU that one-shot initialisation has happened by the time a workload's first SDPA runs;
    here the global order is still the untouched default, so the switch is applied whenever it is
    (and no `sdpa_kernel(..., set_priority=True)` is active): a user-set order is kept."""
    order = list(torch._C._get_sdp_priority_order())
    try:
        from torch.nn.attention import _is_sdp_priority_order_active
        user_active = _is_sdp_priority_order_active()
    except ImportError:
        user_active = False
    if order == _INSTALLED_ORDER:
        order = list(_DEFAULT_ORDER)  # untouched: the emulated release's own default
    if not user_active and order == _DEFAULT_ORDER and _prefer_cudnn(rules, cap, cudnn):
        first = [_CUDNN, _FLASH, _EFFICIENT, _MATH]
        order = first + [b for b in order if b not in first]
    return order


def choose(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False,
           scale: float | None = None, enable_gqa: bool = False, *, capability: Sequence[int] = (9, 0),
           cudnn_version: int | None = None, requires_grad: bool | None = None,
           torch_version: Sequence[int] | None = None) -> str:
    """The backend `F.scaled_dot_product_attention` runs on a card of `capability`.

    Returns "flash", "efficient", "cudnn" or "math"; raises RuntimeError where CUDA would (every
    backend refused or disabled). `cudnn_version` is cuDNN's integer version (9.19.0 -> 91900),
    default the one the emulated release ships with; `requires_grad` overrides the
    "inputs require grad and grad mode is on" test; `torch_version` (major, minor) picks the
    2.11 or the 2.15 rules, default the installed torch. `scale` plays no part (as in C++).
    """
    rules = _rules(torch_version)
    cap = tuple(int(x) for x in capability)
    cudnn = _default_cudnn(rules, torch_version is not None) if cudnn_version is None else int(cudnn_version)
    p = _P(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa, requires_grad, rules)
    cuda = torch.backends.cuda
    if not (cuda.math_sdp_enabled() or cuda.flash_sdp_enabled() or cuda.mem_efficient_sdp_enabled()
            or cuda.cudnn_sdp_enabled()):
        raise RuntimeError("No viable backend for scaled_dot_product_attention was found. "
                           "This is likely due to turning off both the math kernel and the fused kernels.")
    for backend in _priority_order(rules, cap, cudnn):
        if backend == _CUDNN and _can_use_cudnn(p, rules, cap, cudnn):
            return "cudnn"
        if backend == _FLASH and _can_use_flash(p, rules, cap):
            return "flash"
        if backend == _EFFICIENT and _can_use_efficient(p, rules, cap):
            return "efficient"
        if backend == _MATH and cuda.math_sdp_enabled():
            return "math"
        if backend == _OVERRIDEABLE and _flag("_get_overrideable_sdp_enabled"):
            raise RuntimeError("Invalid backend")  # CUDA has no overrideable kernel
    raise RuntimeError("No available kernel. Aborting execution.")


# ----------------------------------------------------------------------------- running it (attention.cpp)


def _bool_mask_to_additive(mask: Any, dtype: Any, fill: float) -> Any:
    """convert_boolean_attn_mask[_cudnn]: True -> 0, False -> fill, in the query's dtype."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    zero = torch.scalar_tensor(0.0, dtype=dtype, device=mask.device)
    masked = torch.scalar_tensor(fill, dtype=dtype, device=mask.device)
    return torch.where(mask, zero, masked)


def _efficient_mask(mask: Any, q: Any, k: Any) -> Any:
    """preprocess_mask: the mem-efficient kernel wants every stride but the last a multiple of 8
    (else pad the last dim to the next multiple of 8 and slice back, so the padding is tracked for
    backward), then the mask expanded to (B, H, L, S)."""
    aligned = all(_gof(mask.stride(i) % 8 == 0) for i in range(mask.dim() - 1)) and _gof(mask.stride(-1) == 1)
    if not aligned:
        last = mask.size(-1)
        padded = torch.nn.functional.pad(mask, (0, 8 - last % 8))
        mask = padded[..., :last]
    return mask.expand(q.size(0), q.size(1), q.size(2), k.size(2))


def _pad_last_dim_8(t: Any) -> Any:
    """pad_last_dim<8, false>: FlashAttention-2 wants a head dim that is a multiple of 8."""
    last = t.size(-1)
    if _gof(last % 8 == 0):
        return t
    return torch.nn.functional.pad(t, (0, 8 - last % 8))


def _should_compute_logsumexp(q: Any, k: Any, v: Any) -> bool:
    return (q.requires_grad or k.requires_grad or v.requires_grad) and torch.is_grad_enabled()


def call(backend: str, query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
         is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False, *,
         torch_version: Sequence[int] | None = None) -> Any:
    """What `F.scaled_dot_product_attention` returns once `backend` is chosen, built from the same
    aten ops CUDA's `scaled_dot_product_attention` calls (so autograd saves the same tensors)."""
    rules = _rules(torch_version)
    aten = torch.ops.aten
    if not (query.dtype == key.dtype == value.dtype):  # validate_sdpa_input
        raise RuntimeError("Expected query, key, and value to have the same dtype, but got query.dtype: "
                           f"{query.dtype} key.dtype: {key.dtype} and value.dtype: {value.dtype} instead.")
    if query.dim() < 2 or key.dim() < 2 or value.dim() < 2:
        raise RuntimeError("Expected query, key, and value to all be  at least 2 dimensional")
    if attn_mask is not None and attn_mask.dtype not in (torch.bool, torch.float32, query.dtype):
        raise RuntimeError("Expected attn_mask dtype to be bool or float or to match query dtype, but got "
                           f"attn_mask.dtype: {attn_mask.dtype} and  query.dtype: {query.dtype} instead.")
    if is_causal and attn_mask is not None and (rules.causal_mask_error_all or backend == "math"):
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    unbatched = (rules.normalize_unbatched and all(t.layout == torch.strided and not t.is_nested and t.dim() == 3
                                                   for t in (query, key, value)))
    q, k, v, mask = query, key, value, attn_mask
    if unbatched:  # normalize_unbatched_input: a batch of one, removed from the result
        q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
        while mask is not None and mask.dim() < 4:
            mask = mask.unsqueeze(0)

    if backend == "cudnn":
        mask = _bool_mask_to_additive(mask, q.dtype, rules.cudnn_mask_fill)
        out = aten._scaled_dot_product_cudnn_attention(q, k, v, mask, _should_compute_logsumexp(q, k, v), dropout_p,
                                                       is_causal, False, scale=scale)[0]
    elif backend == "flash":
        og_size = v.size(-1) if rules.version >= (2, 15) else q.size(-1)
        # the scale from the original head dim, not the padded one
        og_scale = scale if scale is not None else 1.0 / math.sqrt(q.size(-1))
        out = aten._scaled_dot_product_flash_attention(_pad_last_dim_8(q), _pad_last_dim_8(k), _pad_last_dim_8(v),
                                                       dropout_p, is_causal, False, scale=og_scale)[0]
        if out.size(-1) != og_size:  # post_process_flash_output
            out = out[..., :og_size]
    elif backend == "efficient":
        mask = _bool_mask_to_additive(mask, q.dtype, -math.inf)
        if mask is not None:
            mask = _efficient_mask(mask, q, k)
        out = aten._scaled_dot_product_efficient_attention(q, k, v, mask, _should_compute_logsumexp(q, k, v),
                                                           dropout_p, is_causal, scale=scale)[0]
    elif backend == "math":
        mask = _bool_mask_to_additive(mask, q.dtype, -math.inf)
        out = aten._scaled_dot_product_attention_math(q, k, v, mask, dropout_p, is_causal, None, scale=scale,
                                                      enable_gqa=enable_gqa)[0]
    else:
        raise ValueError(f"unknown SDPA backend {backend!r}")
    return out.squeeze(0) if unbatched else out
