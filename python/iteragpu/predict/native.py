"""Two small native shims that let autograd run backward on fake CUDA tensors without a driver.

Why: with FakeTensorMode, forward on `cuda` tensors works on a CPU-only machine, but backward fails
in the autograd engine (`GraphTask::stash_current_streams` asks `CUDAHooks::hasPrimaryContext(0)`,
which checks the real device count, 0 without a driver; pytorch#92627), and FakeTensorMode's no-op
CUDA device guard hands out streams of device -1. No supported switch exists. So:

* `hooks`: gives the CUDAHooks singleton a private copy of its vtable whose `hasPrimaryContext`
  returns true (Itanium C++ ABI; the slot is computed from the member pointer, the length from the
  exported vtable symbol's size);
* `guard`: a CUDA device guard that reports one device and hands out cuda:0 default streams.

They are compiled once per torch build against the installed torch's own headers (a C++ compiler
is needed: $CXX, else c++), cached under $XDG_CACHE_HOME/iteragpu/shims/, loaded with ctypes, and
checked by a self-test (a backward on fake CUDA tensors) before anything is predicted. Their objects
are leaked on purpose (the registry keeps raw pointers), and the process ends with os._exit so that
no static destructor races the autograd device thread.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
from typing import Any

HOOKS: str = r"""
#include <ATen/detail/CUDAHooksInterface.h>
#include <dlfcn.h>
#include <link.h>
#include <cstdint>
#include <cstring>
static bool fake_has_primary_context(const void*, c10::DeviceIndex) { return true; }
static void** g_vt = nullptr;  // leaked: must outlive every CUDAHooks call, exit included
extern "C" int iteragpu_patch_hooks() {
  void* iface_vt = dlsym(RTLD_DEFAULT, "_ZTVN2at18CUDAHooksInterfaceE");
  if (!iface_vt) return -2;
  Dl_info info; const ElfW(Sym)* sym = nullptr;
  if (!dladdr1(iface_vt, &info, (void**)&sym, RTLD_DL_SYMENT) || !sym) return -3;
  size_t n = sym->st_size / sizeof(void*);
  const at::CUDAHooksInterface& h = at::detail::getCUDAHooks();
  void*** obj = (void***)&h;
  void** vt = *obj;
  auto pmf = &at::CUDAHooksInterface::hasPrimaryContext;
  uintptr_t raw; std::memcpy(&raw, &pmf, sizeof(raw));
  if ((raw & 1) == 0) return -1;  // Itanium ABI: a virtual member pointer is 1 + byte offset
  size_t idx = (raw - 1) / sizeof(void*);
  if (2 + idx >= n) return -4;
  g_vt = new void*[n];
  std::memcpy(g_vt, vt - 2, n * sizeof(void*));
  g_vt[2 + idx] = (void*)&fake_has_primary_context;
  *obj = g_vt + 2;
  return (int)idx;
}
"""

GUARD: str = r"""
#include <c10/core/impl/DeviceGuardImplInterface.h>
using namespace c10;
struct FakeCudaGuard final : public c10::impl::DeviceGuardImplInterface {
  DeviceType type() const override { return DeviceType::CUDA; }
  Device exchangeDevice(Device) const override { return Device(DeviceType::CUDA, 0); }
  Device getDevice() const override { return Device(DeviceType::CUDA, 0); }
  void setDevice(Device) const override {}
  void uncheckedSetDevice(Device) const noexcept override {}
  Stream getStream(Device d) const noexcept override {
    return Stream(Stream::DEFAULT, Device(DeviceType::CUDA, d.index() < 0 ? 0 : d.index()));
  }
  // torch <= 2.6's InputBuffer::add asks for the default stream of a gradient's device.
  Stream getDefaultStream(Device d) const override { return getStream(d); }
  Stream getNewStream(Device d, int) const override { return getStream(d); }
  Stream exchangeStream(Stream s) const noexcept override { return s; }
  DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const Stream&, const DeviceIndex, const EventFlag) const override {}
  void block(void*, const Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const DeviceIndex) const noexcept override {}
  bool queryStream(const Stream&) const override { return true; }
  void synchronizeStream(const Stream&) const override {}
};
static FakeCudaGuard* g_guard = new FakeCudaGuard();  // leaked: the registry keeps a raw pointer
extern "C" void iteragpu_install_guard() {
  c10::impl::device_guard_impl_registry[static_cast<size_t>(DeviceType::CUDA)].store(g_guard);
}
"""


class Unavailable(Exception):
    """The shims cannot be built or do not work with this torch: nothing can be predicted."""


def _cache_dir(torch: Any, key: str) -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "iteragpu", "shims", key)


def _build(torch: Any, name: str, source: str) -> str:
    # A machine without a compiler can be given shims built elsewhere against the same torch.
    prebuilt = os.environ.get("ITERAGPU_SHIMS")
    if prebuilt:
        library = os.path.join(prebuilt, f"lib{name}.so")
        if not os.path.exists(library):
            raise Unavailable(f"ITERAGPU_SHIMS={prebuilt} has no lib{name}.so")
        return library
    root = os.path.dirname(torch.__file__)
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    key = hashlib.sha256(
        "\0".join([torch.__version__, root, source, str(abi), sys.version]).encode()
    ).hexdigest()[:20]
    folder = _cache_dir(torch, key)
    library = os.path.join(folder, f"lib{name}.so")
    if os.path.exists(library):
        return library
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not compiler:
        raise Unavailable(
            "predicting needs a C++ compiler to build two small shims against this torch "
            "(none found: install g++, or set CXX)"
        )
    os.makedirs(folder, exist_ok=True)
    cpp = os.path.join(folder, f"{name}.cpp")
    with open(cpp, "w", encoding="utf-8") as f:
        f.write(source)
    include = os.path.join(root, "include")
    lib = os.path.join(root, "lib")
    partial = library + f".{os.getpid()}.tmp"
    command = [
        compiler, "-std=c++20", "-O1", "-shared", "-fPIC", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        "-I", include, "-I", os.path.join(include, "torch", "csrc", "api", "include"),
        cpp, "-o", partial, "-L", lib, "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{lib}",
    ]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        tail = " | ".join(run.stderr.strip().splitlines()[-4:])
        raise Unavailable(f"the {name} shim did not build against torch {torch.__version__}: {tail}")
    os.replace(partial, library)
    return library


_ENABLED: bool = False


def enable(torch: Any) -> None:
    """Builds (once), loads and installs both shims, then checks a backward on fake CUDA."""
    global _ENABLED
    if _ENABLED:
        return
    hooks = ctypes.CDLL(_build(torch, "iteragpu_hooks", HOOKS))
    guard = ctypes.CDLL(_build(torch, "iteragpu_guard", GUARD))
    slot = hooks.iteragpu_patch_hooks()
    if slot < 0:
        raise Unavailable(
            f"torch {torch.__version__}'s CUDA hooks could not be patched (code {slot}): this torch "
            "is not supported for predictions"
        )
    guard.iteragpu_install_guard()
    # FakeTensorMode would re-install its no-op CUDA guard (streams of device -1) on entry.
    torch._C._ensureCUDADeviceGuardSet = lambda: None
    _ENABLED = True


def self_test(torch: Any, mode_class: type, backward: bool = True) -> None:
    """A backward on fake CUDA tensors: raises Unavailable with the reason if it does not work.
    `backward=False`: the same up to the backward (a builder's own, built_once.py: what the
    first fake CUDA tensors set up, without autograd's threads)."""
    try:
        with mode_class(allow_non_fake_inputs=True):
            p = torch.empty(4, 2, device="cuda", requires_grad=True)
            x = torch.empty(8, 4, device="cuda")
            loss = (x @ p).sum()
            if not backward:
                return
            loss.backward()
            ok = p.grad is not None and p.grad.device.type == "cuda"
    except Exception as exc:  # whatever this torch raises on fake CUDA is the reason: reported, never hidden
        raise Unavailable(
            f"backward on fake CUDA tensors does not work with torch {torch.__version__}: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from exc
    if not ok:
        raise Unavailable("backward on fake CUDA tensors produced no CUDA gradient")
