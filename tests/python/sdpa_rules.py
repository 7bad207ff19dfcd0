#!/usr/bin/env python
"""Tests for iteragpu/predict/sdpa.py on FakeTensorMode CPU tensors (no CUDA needed).

Run: PYTHONPATH=python $ITERAGPU_TEST_PYTHON tests/python/sdpa_rules.py (the integration test
`sdpa_rules_follow_pytorchs` does; exits 1 if a check fails).
(a) choose(): a table of cases on sm90 / sm80 / sm86 / sm70 / sm100, each with the source rule
    that decides it; plus the 2.11 rule set where it differs;
(b) call(): same shape/dtype as F.scaled_dot_product_attention for every backend, and backward;
(c) what each backend allocates and what autograd saves (printed);
(The port was also compared, case by case, with the real C++ select_sdp_backend of the torch 2.15
and 2.11 binaries run on fake CUDA tensors with a stand-in CUDA runtime: 46,984 cases, 0 mismatches;
that cross-check needs the 2.11 wheel and is not part of the test suite.)
"""
import contextlib
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
warnings.simplefilter("ignore")

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.nn.attention import SDPBackend as B
from torch.nn.attention import sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

from iteragpu.predict import sdpa

RESULTS = {"passed": 0, "failed": 0}
FM = FakeTensorMode()
BF, F16, F32 = torch.bfloat16, torch.float16, torch.float32


def check(ok, label):
    RESULTS["passed" if ok else "failed"] += 1
    if not ok:
        print(f"  FAIL {label}")
    return ok


def make(dtype=BF, b=2, hq=32, hk=None, sq=1024, sk=None, d=128, dv=None, mask=None, rg=False, layout="c"):
    """q, k, v, mask as fake CPU tensors; layout "bshd" = HF's view(B,S,H,D).transpose(1,2)."""
    hk = hq if hk is None else hk
    sk = sq if sk is None else sk
    dv = d if dv is None else dv
    with FM:
        def t(h, s, dd):
            if layout == "bshd":
                x = torch.empty(b, s, h, dd, dtype=dtype).transpose(1, 2)
            elif layout == "lastT":
                x = torch.empty(b, h, dd, s, dtype=dtype).transpose(-1, -2)
            elif layout == "3d":
                x = torch.empty(h, s, dd, dtype=dtype)
            else:
                x = torch.empty(b, h, s, dd, dtype=dtype)
            return x.requires_grad_(rg)
        q, k, v = t(hq, sq, d), t(hk, sk, d), t(hk, sk, dv)
        m = None
        if mask == "bool":
            m = torch.ones(b, 1, sq, sk, dtype=torch.bool)
        elif mask == "float":
            m = torch.zeros(b, 1, sq, sk, dtype=dtype)
        elif isinstance(mask, tuple):
            m = torch.ones(*mask, dtype=torch.bool)
    return q, k, v, m


@contextlib.contextmanager
def deterministic(warn_only=False):
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)


def pick(cap, tensors, causal=False, gqa=False, dropout=0.0, cudnn=92600, tv=(2, 15), ctx=None):
    q, k, v, m = tensors
    with (ctx or contextlib.nullcontext()), FM:
        try:
            return sdpa.choose(q, k, v, m, dropout, causal, enable_gqa=gqa, capability=cap, cudnn_version=cudnn,
                               torch_version=tv)
        except RuntimeError:
            return "error"


# ----------------------------------------------------------------------------- (a) the decision table

def table():
    sm90, sm80, sm86, sm70, sm100, sm107 = (9, 0), (8, 0), (8, 6), (7, 0), (10, 0), (10, 7)
    llama_train = make(hk=8, sq=4096, rg=True, layout="bshd")
    T = [
        # ---- H200 / H100: sm90, torch 2.15 + cuDNN 9.26
        ("sm90 bf16 causal, no mask, D128", sm90, make(), dict(causal=True), "cudnn",
         "priority cuDNN-first (check_prefer_cudnn_attention: cuDNN 92600 > 91500 on sm9x); every cuDNN check passes"),
        ("sm90 same, training (requires_grad)", sm90, make(rg=True), dict(causal=True), "cudnn",
         "check_cudnn_d256_bprop_head_dim allows d<=128 backward"),
        ("sm90 fp32", sm90, make(dtype=F32), dict(causal=True), "efficient",
         "cuDNN/flash take fp16/bf16 only (check_dtypes_low_precision); mem-efficient takes fp32 on sm80+"),
        ("sm90 fp16", sm90, make(dtype=F16), dict(causal=True), "cudnn", "fp16 allowed everywhere"),
        ("sm90 D256 training", sm90, make(hq=8, d=256, rg=True), dict(causal=True), "cudnn",
         "cuDNN head_dim_limit 256 on sm90 with cuDNN > 9.22 (frontend >= 1.24), and (256,256) backward allowed"),
        ("sm90 D256 training, cuDNN 9.19", sm90, make(hq=8, d=256, rg=True), dict(causal=True, cudnn=91900), "flash",
         "2.15: cuDNN <= 9.22 keeps limit 128 -> next in order is flash (D <= 256)"),
        ("sm90 D192/Dv128 (MLA)", sm90, make(hq=8, d=192, dv=128), dict(causal=True), "cudnn",
         "flash needs equal head dims; cuDNN allows 192/128 (and 256)"),
        ("sm90 D512", sm90, make(hq=8, d=512), dict(causal=True), "efficient",
         "flash and cuDNN stop at 256; mem-efficient only needs D % 8 == 0 (minimum_gemm_alignment)"),
        ("sm90 D36", sm90, make(hq=8, d=36), dict(causal=True), "flash",
         "cuDNN needs D % 8 == 0; flash takes it (the C++ pads to 40 and slices back)"),
        ("sm90 additive float mask", sm90, make(mask="float"), {}, "cudnn",
         "cuDNN takes a mask of shape (B|1, H|1, Sq, Sk) (check_attn_mask_shape)"),
        ("sm90 bool mask", sm90, make(mask="bool"), {}, "cudnn", "bool mask converted to additive for cuDNN"),
        ("sm90 float mask with requires_grad", sm90,
         (lambda t: (t[0], t[1], t[2], t[3].requires_grad_(True)))(make(mask="float")), {}, "efficient",
         "check_attn_mask_shape refuses a mask that requires grad; flash refuses any mask"),
        ("sm90 GQA 32/8 enable_gqa, causal, training", sm90, llama_train, dict(causal=True, gqa=True), "cudnn",
         "cuDNN: check_batch_size_and_num_heads_dense<supports_gqa, !same_kv_heads, mqa>"),
        ("sm90 GQA 32/8 without enable_gqa", sm90, make(hk=8), dict(causal=True), "math",
         "without enable_gqa heads must match (or k/v have 1 head): every fused backend refuses"),
        ("sm90 MQA 32/1 without enable_gqa", sm90, make(hk=1), dict(causal=True), "cudnn",
         "2.15 supports_mqa: one k/v head broadcasts"),
        ("sm90 dropout 0.1", sm90, make(), dict(causal=True, dropout=0.1), "flash",
         "check_cudnn_dropout: cuDNN dropout in 1/16 steps only; flash takes any dropout"),
        ("sm90 dropout 0.125", sm90, make(), dict(causal=True, dropout=0.125), "cudnn", "0.125 = 2/16"),
        ("sm90 deterministic", sm90, make(), dict(causal=True, ctx=deterministic()), "flash",
         "check_cudnn_deterministic refuses cuDNN under use_deterministic_algorithms(True)"),
        ("sm90 deterministic warn_only", sm90, make(), dict(causal=True, ctx=deterministic(True)), "cudnn",
         "warn_only keeps cuDNN"),
        ("sm90 sdpa_kernel([EFFICIENT])", sm90, make(), dict(causal=True, ctx=sdpa_kernel([B.EFFICIENT_ATTENTION])),
         "efficient", "the context disables the other flags (check_runtime_disabled_*)"),
        ("sm90 sdpa_kernel([MATH])", sm90, make(), dict(causal=True, ctx=sdpa_kernel([B.MATH])), "math", "idem"),
        ("sm90 sdpa_kernel([FLASH, EFFICIENT]) + bool mask", sm90, make(mask="bool"),
         dict(ctx=sdpa_kernel([B.FLASH_ATTENTION, B.EFFICIENT_ATTENTION])), "efficient",
         "flash refuses masks (check_for_attn_mask)"),
        ("sm90 sdpa_kernel([CUDNN]) fp32", sm90, make(dtype=F32), dict(causal=True, ctx=sdpa_kernel([B.CUDNN_ATTENTION])),
         "error", "nothing left: 'No available kernel'"),
        ("sm90 causal, Sq=1 != Sk=300", sm90, make(sq=1, sk=300), dict(causal=True), "cudnn",
         "cuDNN has no square-causal check (flash has: check_flash_causal_non_square_seqlens)"),
        ("sm90 sdpa_kernel([FLASH]) causal Sq != Sk", sm90, make(sq=1, sk=300),
         dict(causal=True, ctx=sdpa_kernel([B.FLASH_ATTENTION])), "error", "flash: causal needs Sq == Sk"),
        ("sm90 Sq=Sk=1", sm90, make(sq=1), {}, "flash", "cuDNN refuses key length 1"),
        ("sm90 bool mask S=704 training, cuDNN 9.25", sm90, make(sq=704, d=64, mask="bool", rg=True), dict(cudnn=92500),
         "efficient", "2.15 guard: cuDNN < 9.26 on SM90, non-causal, Sk % 128 == 64, requires_grad (issue 196678)"),
        ("sm90 same, inference", sm90, make(sq=704, d=64, mask="bool"), dict(cudnn=92500), "cudnn",
         "the guard needs requires_grad"),
        ("sm90 unbatched 3-D (H,S,D)", sm90, make(layout="3d"), dict(causal=True), "cudnn",
         "2.15 normalize_unbatched_input gives 3-D inputs a batch dim"),
        ("sm90 last dim not contiguous", sm90, make(layout="lastT"), dict(causal=True), "math",
         "check_last_dim_stride_equals_1_dense in every fused backend"),
        ("sm90 batch 70000", sm90, make(b=70000, hq=1, sq=64, d=64), dict(causal=True), "efficient",
         "2.15: flash and cuDNN batch/heads <= 65535 (grid limit)"),
        # ---- A100: sm80, cuDNN not first (priority flash, efficient, math, cudnn)
        ("sm80 bf16 causal", sm80, make(), dict(causal=True), "flash", "default order: flash first"),
        ("sm80 fp32", sm80, make(dtype=F32), dict(causal=True), "efficient", "flash fp16/bf16 only"),
        ("sm80 D256 training", sm80, make(hq=8, d=256, rg=True), dict(causal=True), "flash",
         "D<=256; the >192 training limit is sm86-89/sm120-121 only"),
        ("sm80 D512", sm80, make(hq=8, d=512), dict(causal=True), "efficient", "flash max 256"),
        ("sm80 additive mask", sm80, make(mask="float"), {}, "efficient", "flash refuses masks"),
        ("sm80 bool mask", sm80, make(mask="bool"), {}, "efficient", "idem"),
        ("sm80 GQA enable_gqa", sm80, llama_train, dict(causal=True, gqa=True), "flash", "flash supports GQA"),
        ("sm80 dropout 0.1", sm80, make(), dict(causal=True, dropout=0.1), "flash", "flash supports dropout"),
        ("sm80 deterministic", sm80, make(), dict(causal=True, ctx=deterministic()), "flash",
         "only cuDNN is refused (flash warns at run time)"),
        ("sm80 sdpa_kernel([CUDNN])", sm80, make(), dict(causal=True, ctx=sdpa_kernel([B.CUDNN_ATTENTION])), "cudnn",
         "cuDNN SDPA runs on sm80..sm121"),
        # ---- sm86 (A10/3090): flash training limit for D in (192, 224], or > 224 with dropout
        ("sm86 D224 training", sm86, make(hq=8, d=224, rg=True), dict(causal=True), "efficient",
         "check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89"),
        ("sm86 D256 training", sm86, make(hq=8, d=256, rg=True), dict(causal=True), "flash", "D > 224 without dropout ok"),
        ("sm86 D256 training dropout", sm86, make(hq=8, d=256, rg=True), dict(causal=True, dropout=0.1), "efficient",
         "D > 224 with dropout refused"),
        ("sm86 D224 inference", sm86, make(hq=8, d=224), dict(causal=True), "flash", "the limit is for training only"),
        # ---- V100: sm70
        ("sm70 bf16 causal", sm70, make(), dict(causal=True), "math",
         "flash/cuDNN need sm80; mem-efficient below sm80 takes fp16/fp32 only"),
        ("sm70 fp16 causal", sm70, make(dtype=F16), dict(causal=True), "efficient", "mem-efficient runs on sm50+"),
        ("sm70 fp32", sm70, make(dtype=F32), dict(causal=True), "efficient", "fp32 alignment 1 without tensor cores"),
        ("sm70 fp16 D256", sm70, make(dtype=F16, hq=8, d=256), dict(causal=True), "efficient", "no head-dim maximum"),
        ("sm70 fp16 additive mask", sm70, make(dtype=F16, mask="float"), {}, "efficient", "mask supported"),
        ("sm70 sdpa_kernel([FLASH]) fp16", sm70, make(dtype=F16), dict(causal=True, ctx=sdpa_kernel([B.FLASH_ATTENTION])),
         "error", "flash needs sm80"),
        # ---- B200: sm100, the 2.15 decode guard
        ("sm100 decode Sq=1, cuDNN 9.19", sm100, make(hq=32, hk=8, sq=1, sk=300), dict(gqa=True, cudnn=91900), "flash",
         "2.15: cuDNN decode disabled on SM 10.x/11.x for cuDNN 9.19-9.25.0 (except 9.24.1)"),
        ("sm100 decode Sq=1, cuDNN 9.26", sm100, make(hq=32, hk=8, sq=1, sk=300), dict(gqa=True), "cudnn", "fixed in 9.26"),
        ("sm107 bf16 causal", sm107, make(), dict(causal=True), "cudnn", "2.15 cu13 build: any minor of sm10x"),
        # ---- the 2.11 rule set (target machine: torch 2.11.0+cu130, cuDNN 9.19)
        ("2.11 sm90 Llama training GQA", sm90, llama_train, dict(causal=True, gqa=True, cudnn=91900, tv=(2, 11)), "cudnn",
         "2.11 also cuDNN-first on sm90 (cuDNN 9.19 > 9.15)"),
        ("2.11 sm90 D256 training", sm90, make(hq=8, d=256, rg=True), dict(causal=True, cudnn=91900, tv=(2, 11)), "cudnn",
         "2.11: 'Hopper: head_dim<=256 support with cuDNN >= 9.10.0', no backward table"),
        ("2.11 sm90 dropout 0.1", sm90, make(), dict(causal=True, dropout=0.1, cudnn=91900, tv=(2, 11)), "cudnn",
         "2.11 has no 1/16 dropout check"),
        ("2.11 sm90 MQA 32/1 without enable_gqa", sm90, make(hk=1), dict(causal=True, cudnn=91900, tv=(2, 11)), "math",
         "2.11 has no supports_mqa"),
        ("2.11 sm90 GQA with a mask", sm90, make(hk=8, mask="bool"), dict(gqa=True, cudnn=91900, tv=(2, 11)), "cudnn",
         "cuDNN GQA"),
        ("2.11 sm80 GQA with a mask", sm80, make(hk=8, mask="bool"), dict(gqa=True, cudnn=91900, tv=(2, 11)), "math",
         "2.11 mem-efficient has no GQA (supports_gqa=false) and flash refuses masks"),
        ("2.11 sm90 3-D input", sm90, make(layout="3d"), dict(causal=True, cudnn=91900, tv=(2, 11)), "math",
         "2.11 fused kernels need 4-D"),
        ("2.11 sm107 bf16 causal", sm107, make(), dict(causal=True, cudnn=91900, tv=(2, 11)), "flash",
         "2.11 prefers cuDNN on minor 0 or 3 only"),
        ("2.11 sm90 decode cuDNN 9.19", sm90, make(hq=32, hk=8, sq=1, sk=300), dict(gqa=True, cudnn=91900, tv=(2, 11)),
         "cudnn", "no decode guard (and it is for sm10x/11x anyway)"),
    ]
    print("(a) choose(): decision table")
    for label, cap, tensors, kw, want, why in T:
        got = pick(cap, tensors, **kw)
        ok = check(got == want, f"{label}: got {got}, want {want} ({why})")
        print(f"  {'ok ' if ok else 'BAD'} {label:48s} -> {got:9s} {why}")


# ----------------------------------------------------------------------------- Llama / generation table

def llama_table():
    """What an H200 runs for a Llama-3-8B-like attention (32 q heads, 8 kv heads, D128, bf16), with
    the arguments transformers' sdpa_attention_forward passes (installed transformers)."""
    print("\nLlama (32/8 heads, D128, bf16) on sm90, as transformers calls SDPA:")
    rows = [
        ("training step, causal, no mask, enable_gqa", make(b=4, hk=8, sq=4096, rg=True, layout="bshd"),
         dict(causal=True, gqa=True)),
        ("prefill s_q=s_k=300, causal, no mask, enable_gqa", make(b=1, hk=8, sq=300, layout="bshd"),
         dict(causal=True, gqa=True)),
        ("decode s_q=1, s_k=301, no mask, enable_gqa", make(b=1, hk=8, sq=1, sk=301, layout="bshd"), dict(gqa=True)),
        ("decode with padding: pack_gqa q(B,8,4,D), bool mask (B,1,1,301)",
         make(b=4, hq=8, hk=8, sq=4, sk=301, mask=(4, 1, 1, 301), layout="bshd"), {}),
        ("prefill with padding: repeat_kv to 32 heads, bool mask (B,1,S,S)",
         make(b=4, hq=32, hk=32, sq=300, mask=(4, 1, 300, 300), layout="bshd"), {}),
        ("training with a padding mask (repeat_kv), S=4096", make(b=4, hq=32, sq=4096, mask="bool", rg=True, layout="bshd"),
         {}),
    ]
    for label, tensors, kw in rows:
        a = pick((9, 0), tensors, **kw)
        b_ = pick((9, 0), tensors, cudnn=91900, tv=(2, 11), **kw)
        c = pick((9, 0), tensors, cudnn=92500, **kw)
        d = pick((8, 0), tensors, **kw)
        print(f"  {label:68s} 2.15/9.26: {a:9s} 2.11/9.19: {b_:9s} 2.15/9.25: {c:9s} (A100: {d})")
        check(a == "cudnn" and b_ == "cudnn", f"llama {label}")


# ----------------------------------------------------------------------------- (b) + (c) call()

def _storage(t):
    from torch.multiprocessing.reductions import StorageWeakRef
    return StorageWeakRef(t.untyped_storage())


class Allocs(TorchDispatchMode):
    """Logs the storages each aten op creates: outputs whose storage is none of its inputs'."""

    def __init__(self):
        super().__init__()
        self.log = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        flat = torch.utils._pytree.tree_leaves((args, kwargs))
        ins = {_storage(a) for a in flat if isinstance(a, torch.Tensor)}
        outs = out if isinstance(out, (tuple, list)) else (out,)
        for o in outs:
            if isinstance(o, torch.Tensor) and _storage(o) not in ins:
                ins.add(_storage(o))
                self.log.append((func.__name__, tuple(o.shape), str(o.dtype)[6:], o.untyped_storage().nbytes()))
        return out


def mib(n):
    return f"{n / 2**20:.2f} MiB"


def run_backend(backend, q, k, v, m, causal, gqa, dropout=0.0, show=False):
    q, k, v = [t.detach().requires_grad_(True) for t in (q, k, v)]
    saved = []
    names = {_storage(q): "q", _storage(k): "k", _storage(v): "v"}

    def pack(t):
        view = "" if t.numel() * t.element_size() == t.untyped_storage().nbytes() else " (view)"
        saved.append((_storage(t), tuple(t.shape), str(t.dtype)[6:] + view, t.untyped_storage().nbytes()))
        return t

    fwd, bwd = Allocs(), Allocs()
    with FM:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), fwd:
            out = sdpa.call(backend, q, k, v, m, dropout, causal, enable_gqa=gqa)
        names.setdefault(_storage(out), "out")
        saved = [(names.get(x[0], "new"),) + tuple(x[1:]) for x in saved]
        ref = F.scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), m, dropout, causal, enable_gqa=gqa)
        with bwd:
            out.backward(torch.ones_like(out))
    ok = check(out.shape == ref.shape and out.dtype == ref.dtype, f"{backend}: out {out.shape}/{out.dtype} vs F.sdpa {ref.shape}/{ref.dtype}")
    ok &= check(q.grad is not None and q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape,
                f"{backend}: grads")
    if show:
        print(f"  [{backend}] out {tuple(out.shape)} {out.dtype} == F.sdpa's; grads q{tuple(q.grad.shape)} "
              f"k{tuple(k.grad.shape)} v{tuple(v.grad.shape)}")
        print(f"    forward allocations ({mib(sum(x[3] for x in fwd.log))}):")
        for name, shape, dt, n in fwd.log:
            print(f"      {name:45s} {str(shape):24s} {dt:9s} {mib(n)}")
        print(f"    saved for backward (storage bytes; {mib(sum(x[3] for x in saved if x[0] == 'new'))} beyond q, k, v and the output):")
        for who, shape, dt, n in saved:
            print(f"      {who:4s} {str(shape):24s} {dt:9s} {mib(n)}")
        print(f"    backward allocations ({mib(sum(x[3] for x in bwd.log))}; new_empty_strided = AccumulateGrad restriding"
              " into the leaf's layout, a test artefact: q/k/v are leaves here):")
        for name, shape, dt, n in bwd.log:
            print(f"      {name:45s} {str(shape):24s} {dt:9s} {mib(n)}")
    return ok


def calls():
    print("\n(b) call() == F.scaled_dot_product_attention (shape, dtype) and backward, on fake CPU tensors")
    cases = [
        ("GQA 32/8 causal", make(b=1, hk=8, sq=256), dict(causal=True, gqa=True), ("flash", "efficient", "cudnn", "math")),
        ("MQA 32/1 causal (no enable_gqa)", make(b=1, hk=1, sq=256), dict(causal=True), ("flash", "efficient", "cudnn", "math")),
        ("head dim 36 (flash pads to 40)", make(b=1, hq=8, sq=100, d=36), dict(causal=True), ("flash", "efficient", "math")),
        ("bool mask, S=300 (mem-eff pads the mask)", make(b=2, hq=8, sq=300, d=64, mask="bool"), {}, ("efficient", "cudnn", "math")),
        ("float mask", make(b=2, hq=8, sq=256, d=64, mask="float"), {}, ("efficient", "cudnn", "math")),
        ("GQA + bool mask", make(b=2, hq=32, hk=8, sq=256, d=64, mask="bool"), dict(gqa=True), ("efficient", "cudnn", "math")),
        ("unbatched 3-D", make(hq=8, sq=256, d=64, layout="3d"), dict(causal=True), ("flash", "efficient", "cudnn", "math")),
        ("dropout 0.125", make(b=1, hq=8, sq=256, d=64), dict(causal=True, dropout=0.125), ("flash", "efficient", "cudnn", "math")),
        ("HF layout (B,S,H,D).transpose", make(b=1, hk=8, sq=256, layout="bshd"), dict(causal=True, gqa=True),
         ("flash", "efficient", "cudnn", "math")),
    ]
    installed = sdpa._rules(None)
    for label, (q, k, v, m), kw, backends in cases:
        if not installed.efficient_gqa and k.size(-3) != q.size(-3):
            # Before 2.15 the mem-efficient kernel has no GQA: CUDA never runs it on these inputs.
            backends = tuple(b_ for b_ in backends if b_ != "efficient")
        if not installed.normalize_unbatched and q.dim() == 3:
            backends = ("math",)  # before 2.15, CUDA sends 3-D inputs to math
        res = [b_ for b_ in backends if run_backend(b_, q, k, v, m, kw.get("causal", False), kw.get("gqa", False), kw.get("dropout", 0.0))]
        print(f"  {label:44s} ok: {', '.join(res)}")
    # causal + mask is an error in 2.15 on every path, as F.sdpa says
    q, k, v, m = make(b=1, hq=8, sq=64, d=64, mask="float")
    with FM:
        try:
            sdpa.call("cudnn", q, k, v, m, 0.0, True)
            raised = False
        except RuntimeError:
            raised = True
    check(raised or not installed.causal_mask_error_all, "causal + mask raises")
    # used as session.py does: a TorchFunctionMode routing F.sdpa inside FakeTensorMode
    from torch.overrides import TorchFunctionMode

    class Route(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is F.scaled_dot_product_attention:
                backend = sdpa.choose(*args, capability=(9, 0), cudnn_version=None, **kwargs)
                self.seen.append(backend)
                return sdpa.call(backend, *args, **kwargs)
            return func(*args, **kwargs)

    q, k, v, _ = make(b=1, hk=8, sq=128, rg=True, layout="bshd")
    route = Route()
    with FM, route:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        out.float().sum().backward()
    # cuDNN-first on sm90 with the installed torch's own cuDNN above 9.15 (2.11, 2.15), else flash.
    first = "cudnn" if (torch.backends.cudnn.version() or 0) > 91500 else "flash"
    check(route.seen == [first] and q.grad is not None, f"routed through a TorchFunctionMode: {route.seen}")
    print(f"  TorchFunctionMode route (as session.py): chose {route.seen}, backward ran: {q.grad is not None}")

    print("\n(c) what each backend allocates and saves: Llama attention, B=1, 32/8 heads, S=2048, D=128, bf16, causal")
    q, k, v, m = make(b=1, hk=8, sq=2048)
    for backend in ("cudnn", "flash", "efficient", "math"):
        if backend == "efficient" and not installed.efficient_gqa:
            continue
        run_backend(backend, q, k, v, m, True, True, show=True)
    print("\n    the same with a bool padding mask (B=1,1,S,S), non-causal (flash cannot take it):")
    q, k, v, m = make(b=1, hk=8, sq=2048, mask="bool")
    for backend in ("cudnn", "efficient"):
        if backend == "efficient" and not installed.efficient_gqa:
            continue
        run_backend(backend, q, k, v, m, False, True, show=True)



if __name__ == "__main__":
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, default SDP order {torch._C._get_sdp_priority_order()}")
    table()
    llama_table()
    calls()
    print(f"\n{RESULTS['passed']} passed, {RESULTS['failed']} failed")
    sys.exit(1 if RESULTS["failed"] else 0)
