"""One prediction: the fake CUDA world set up around the worker's own workload code."""

from __future__ import annotations

import contextlib
import weakref
from typing import IO, Any, Callable

from .. import built_once, recorder
from ..recorder import Emit
from ..spec import WorkerSpec
from . import collectives, compat, cuda_api, cudnn_rnn, ddp, dtensor_foreach, fsdp1, idioms, memo, quantized, repeat, steady, symbolic
from . import memory as allocator
from . import phases as auto_phases
from . import tracker as tracking


def fake_mode_class(torch: Any) -> type:
    """FakeTensorMode that never touches a real device, even though torch.cuda says available."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    class FakeCudaMode(FakeTensorMode):
        avoid_device_init = property(lambda self: True)

        def __deepcopy__(self, memo: dict[int, Any]) -> Any:
            # A deep-copied fake tensor copies its `__dict__`, where its mode is: the copy must
            # stay in this mode (as on a GPU it stays on the device), else every later op on it
            # (a `detach()` in `state_dict()`) converts it again, allocating a copy for a view.
            return self

    return FakeCudaMode


class Session:
    """One prediction of `spec` for the `target` card: the fake CUDA world, then the workload in it."""

    def __init__(
        self, torch: Any, emit: Emit, spec: WorkerSpec, target: dict[str, Any], mode_class: type, answers: IO[str] | None = None
    ) -> None:
        self.torch = torch
        self.emit = emit
        self.spec = spec
        self.target = target
        self.mode_class = mode_class
        self.tracker = tracking.Tracker(emit, [tuple(w) for w in target.get("workspaces", [])])
        self.idioms: idioms.Idioms | None = None
        # The script's torch.cuda memory calls: the CLI's model answers them over `answers`.
        self.tracker.memory = allocator.Memory(emit, answers, target)
        # Every op on the target device runs under this mode (tracker.py decides which ops).
        self.fake = mode_class(allow_non_fake_inputs=True)
        self.tracker.fake_mode = self.fake
        self.tracker.memo = memo.Memo(self.fake, check=memo.checking()) if memo.enabled() else None
        # Weak references only, as the caches below: a module or optimizer the script deletes is
        # freed with its parameters, gradients and states, as on a GPU (`del optimizer`).
        self.modules: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()  # id(root) -> root, re-tagged at phase ends
        self.names: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()  # module -> qualified name
        self.optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
        self.caches: list[weakref.ref[Any]] = []  # weak references: a cache the workload drops is freed, as on a GPU
        self.fake_modes = [self.fake]
        self.notes: list[str] = []
        # Sends the events still batched (set by the caller): before an os._exit.
        self.flush: Callable[[], None] | None = None

    # ---------------------------------------------------------------- the fake CUDA world
    def install(self) -> None:
        torch = self.torch
        from torch._subclasses.fake_tensor import FakeTensor

        cuda_api.install(torch, self.target, self.tracker)
        compat.install(torch)
        quantized.install(torch, self.tracker, lambda text: None if text in self.notes else self.notes.append(text))
        # CUDA tensors take the foreach optimizer kernels by default; FakeTensor is not in the
        # list PyTorch checks, which would silently pick the per-tensor loop.
        import torch.optim.optimizer as optimizer

        if FakeTensor not in optimizer._foreach_supported_types:
            optimizer._foreach_supported_types.append(FakeTensor)
        # Module.cuda()/.to() swap parameters, which fails while the fake converter's memo holds a
        # weak reference to them: drop those cache entries first.
        original_swap = torch.utils.swap_tensors
        modes = self.fake_modes

        def swap_tensors(t1: Any, t2: Any) -> Any:
            if t1 is t2:
                return None  # a parameter moved in place (bitsandbytes' quantizing `.to`)
            # The modes that made these tensors too (a deep copy's clone may come from another).
            owners = [getattr(t, "fake_mode", None) for t in (t1, t2)]
            for mode in list(modes) + [m for m in owners if m is not None and m not in modes]:
                meta = mode.fake_tensor_converter.meta_converter
                memo = meta.tensor_memo
                for k, v in list(memo.items()):
                    if v is t1 or v is t2:
                        del memo[k]
                # A tensor once converted (a deep copy's source) is a key of the describer.
                lookup = getattr(getattr(meta, "describer", None), "lookup_tensor", None)
                if lookup is not None:
                    for t in (t1, t2):
                        lookup.pop(t, None)
            for t in (t1, t2):
                _drop_weak_entries(t)
            result = original_swap(t1, t2)
            # On a GPU `.cuda()` keeps each parameter's tensor (`param.data = …`), so the hooks
            # registered on it before the move still fire; a swap moves the tensor under the
            # Python object, but a post-accumulate-grad hook is registered on the tensor itself:
            # set again on the tensor each object now holds, every hook (the script's
            # optimizer-in-backward, the gradients' tagging) fires after the move as on a GPU.
            for t in (t1, t2):
                hooks = getattr(t, "_post_accumulate_grad_hooks", None)
                if hooks is not None:
                    t._post_accumulate_grad_hooks = hooks
            return result

        torch.utils.swap_tensors = swap_tensors
        # `torch.tensor(data, device="cuda")` builds on the CPU, then moves (as under FakeTensorMode):
        # the move is an op the tracker sees, the data stays known.
        if hasattr(torch._C, "_set_only_lift_cpu_tensors"):
            torch._C._set_only_lift_cpu_tensors(True)
        # Pinned host memory is not GPU memory: keep the tensor as it is.
        torch.Tensor.pin_memory = lambda self, *a, **k: self
        torch.Tensor.is_pinned = lambda self, *a, **k: False
        # A deep copy asks a fake tensor for its data pointer (0): PyTorch warns, nothing is wrong.
        import warnings

        warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")
        self._hooks()
        self.idioms = idioms.Idioms(torch, self.tracker, self.notes)
        self.idioms.install()
        steadiness = steady.Steadiness(self.tracker, self.tracker.note)
        steadiness.install()
        repeat.install(steadiness, self.name_of)
        cudnn_rnn.install(torch, self.tracker, self.notes, self.target)
        _route_sdpa(torch, self.target)
        if self.spec.world_size:
            self._fake_process_group(self.spec.world_size)

    def _fake_process_group(self, world_size: int) -> None:
        """Rank 0 of `world_size` ranks on PyTorch's fake process group (collectives return at
        once; all-gathers fill their outputs with this rank's data). The environment a torchrun
        rank reads is set; a script's own `init_process_group` joins the fake group instead.
        FSDP2 frees and refills its unsharded parameters by resizing their storage, which no
        dispatch mode sees: `UntypedStorage.resize_` is followed. DTensor's sharding propagation
        makes global-shape fake tensors to infer shapes: they are not the rank's memory."""
        import os

        import torch.distributed as dist
        from torch.testing._internal.distributed.fake_pg import FakeStore

        torch = self.torch
        tr = self.tracker
        for key, value in {
            "RANK": "0",
            "LOCAL_RANK": "0",
            "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(world_size),
            "GROUP_RANK": "0",
            "MASTER_ADDR": "localhost",
            "MASTER_PORT": "29500",
        }.items():
            os.environ[key] = value
        dist.init_process_group("fake", rank=0, world_size=world_size, store=FakeStore())
        original_init = dist.init_process_group
        notes = self.notes

        def init_process_group(*args: Any, **kwargs: Any) -> Any:
            if dist.is_initialized():
                note = f"init_process_group({kwargs.get('backend', args[0] if args else '')!s}) joined PyTorch's fake process group of {world_size} ranks"
                if note not in notes:
                    notes.append(note)
                return None
            return original_init(*args, **kwargs)

        dist.init_process_group = init_process_group
        original_resize = torch.UntypedStorage.resize_

        def resize_(storage: Any, nbytes: int) -> Any:
            result = original_resize(storage, nbytes)
            tr.resized(storage, int(nbytes))
            return result

        torch.UntypedStorage.resize_ = resize_
        try:
            from torch.distributed.tensor import _sharding_prop as prop

            cls = prop.ShardingPropagator
            original_meta = cls._propagate_tensor_meta_non_cached

            def propagate(self_: Any, *args: Any, **kwargs: Any) -> Any:
                with tr.suspended():
                    return original_meta(self_, *args, **kwargs)

            cls._propagate_tensor_meta_non_cached = propagate
        except (ImportError, AttributeError) as exc:
            notes.append(f"DTensor's sharding propagation could not be set apart ({type(exc).__name__}: {exc}): global-shape temporaries may be counted")
        ddp.install(torch, lambda text: None if text in notes else notes.append(text))
        collectives.install(torch)
        fsdp1.install(torch)
        dtensor_foreach.install(torch)
        self.notes.append(
            f"predicted for rank 0 of {world_size} ranks on PyTorch's fake process group: collectives move no data, "
            "and NCCL's own buffers (outside PyTorch's allocator) are not predicted"
        )

    def _hooks(self) -> None:
        torch = self.torch
        tr = self.tracker
        M = torch.nn.modules.module

        name_of = self.name_of
        # A model materialised from the meta device (FSDP2's sharded parameters) is known from
        # then on, so that its parameters are tagged at the phase's end, before any forward.
        original_to_empty = M.Module.to_empty

        def to_empty(module: Any, *args: Any, **kwargs: Any) -> Any:
            result = original_to_empty(module, *args, **kwargs)
            name_of(module)
            return result

        M.Module.to_empty = to_empty

        def pre(module: Any, args: Any, kwargs: dict[str, Any] | None = None) -> None:
            outer = not getattr(tr.local, "modules", None)
            tr.push_module(name_of(module))
            if outer:
                for a in torch.utils._pytree.tree_flatten((args, kwargs or {}))[0]:
                    if isinstance(a, torch.Tensor):
                        tr.tag(a, tracking.Category.INPUT, only_from=tracking.UNNAMED)
            if kwargs:
                self._note_cache(kwargs.get("past_key_values"))

        def post(module: Any, args: Any, *rest: Any) -> None:
            output = rest[-1]
            tr.pop_module()
            if isinstance(output, dict):
                # Read as a plain dict: transformers' outputs warn on attribute access.
                for key in ("past_key_values", "cache"):
                    cache = dict.get(output, key)
                    if cache is not None:
                        self._note_cache(cache)

        M.register_module_forward_pre_hook(lambda m, a: pre(m, a))
        M.register_module_forward_hook(lambda m, a, o: post(m, a, o), always_call=True)

        from torch._subclasses.fake_tensor import FakeTensor

        def data_less(t: Any) -> bool:
            """A parameter or buffer made with real data on the CPU becomes data-less: a model
            built on the CPU then moved to the GPU costs no real memory or time."""
            return (
                isinstance(t, torch.Tensor)
                and not isinstance(t, FakeTensor)
                and type(t) in (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer if hasattr(torch.nn, "Buffer") else torch.Tensor)
                and t.device.type == "cpu"
            )

        def on_parameter(module: Any, name: str, param: Any) -> Any:
            if param is None:
                return None
            if data_less(param):
                # Weights are data: their values are never followed.
                param = torch.nn.Parameter(tr.to_fake(param.detach(), keep_values=False), requires_grad=param.requires_grad)
            tr.tag(param, tracking.Category.PARAMETER)
            if param.requires_grad and not getattr(param, "_iteragpu_grad_hook", False):
                try:
                    param.register_post_accumulate_grad_hook(
                        lambda p: tr.tag(p.grad, tracking.Category.GRADIENT) if p.grad is not None else None
                    )
                    param._iteragpu_grad_hook = True
                except RuntimeError:
                    pass
            return param

        def on_buffer(module: Any, name: str, buf: Any) -> Any:
            if buf is None:
                return None
            if data_less(buf):
                # Integer and boolean buffers (positions, masks) keep their values; float ones are data.
                buf = tr.to_fake(buf, keep_values=not buf.is_floating_point())
            tr.tag(buf, tracking.Category.BUFFER)
            return buf

        M.register_module_parameter_registration_hook(on_parameter)
        M.register_module_buffer_registration_hook(on_buffer)
        import torch.optim.optimizer as optimizer

        def step_pre(opt: Any, args: Any, kwargs: Any) -> None:
            tr.in_optimizer += 1
            self.optimizers.add(opt)

        def step_post(opt: Any, args: Any, kwargs: Any) -> None:
            tr.in_optimizer -= 1
            self._tag_optimizer(opt)

        optimizer.register_optimizer_step_pre_hook(step_pre)
        optimizer.register_optimizer_step_post_hook(step_post)

    def name_of(self, module: Any) -> str:
        """The module's qualified name; a module seen for the first time is a root: its whole
        tree is named, and it is re-tagged at each phase's end."""
        try:
            name = self.names.get(module)
        except TypeError:  # a module that cannot be weakly referenced (__slots__): named, not kept
            return type(module).__name__
        if name is None:
            root = type(module).__name__
            self.modules[id(module)] = module
            for sub_name, sub in module.named_modules():
                if sub not in self.names:
                    self.names[sub] = f"{root}.{sub_name}" if sub_name else root
            name = self.names[module]
        return name

    def _saved_tensors(self) -> Any:
        tr = self.tracker

        def pack(t: Any) -> Any:
            tr.tag(t, tracking.Category.ACTIVATION, only_from=tracking.UNNAMED)
            # A view, not `t` itself: an op's saved output would otherwise hold its own grad_fn,
            # a cycle through autograd's C++ that Python's collector cannot see, so a graph never
            # run backward (DoRA's weight norm at init, a forward kept for no backward) would
            # keep its activations and the leaves' AccumulateGrad nodes (which refuse a later
            # `Module.to()` swap of a frozen parameter) alive. PyTorch's own advice
            # (saved_tensors_hooks: "use `lambda x: x.detach()`").
            return t.detach()

        return self.torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)

    def _note_cache(self, cache: Any) -> None:
        if cache is None or isinstance(cache, (tuple, list)) and not cache:
            return
        try:
            ref: weakref.ref[Any] | None = weakref.ref(cache)
        except TypeError:  # a tuple of tuples (legacy caches): tagged now, not kept
            ref = None
        if ref is not None and not any(r() is cache for r in self.caches):
            self.caches.append(ref)
        self._tag_cache(cache)

    def _tag_cache(self, cache: Any) -> None:
        from ..workloads.causal_lm import cache_tensors

        for t in cache_tensors(cache):
            self.tracker.tag(t, tracking.Category.KV_CACHE)

    def _tag_optimizer(self, opt: Any) -> None:
        for state in opt.state.values():
            for v in state.values() if isinstance(state, dict) else ():
                if isinstance(v, self.torch.Tensor):
                    self.tracker.tag(v, tracking.Category.OPTIMIZER_STATE)

    def retag(self) -> None:
        """At a phase end, every known role is re-read (a swap or a .to() may have hidden one)."""
        tr = self.tracker
        for module in list(self.modules.values()):
            for p in module.parameters():
                tr.tag(p, tracking.Category.PARAMETER)
                # A parameter that is a view (FSDP1's `use_orig_params`) has no .grad of its own to read.
                if p.is_leaf and p.grad is not None:
                    tr.tag(p.grad, tracking.Category.GRADIENT)
            for b in module.buffers():
                tr.tag(b, tracking.Category.BUFFER)
            # After the gradients: DDP's gradients as views of its buckets stay communication buffers.
            for b in getattr(module, "_iteragpu_ddp_buckets", ()):
                tr.tag(b, tracking.Category.COMMUNICATION)
        for opt in list(self.optimizers):
            self._tag_optimizer(opt)
        self.caches = [r for r in self.caches if r() is not None]
        for ref in self.caches:
            cache = ref()
            if cache is not None:
                self._tag_cache(cache)

    # ---------------------------------------------------------------- the run
    def run(self) -> int:
        from .. import workload

        torch = self.torch
        self.install()
        events = self.emit

        def emit(kind: str, data: Any) -> None:
            if kind == "phase_end":
                self.retag()
            events(kind, data)

        rec = recorder.Recorder(torch, list(self.spec.devices), emit)
        # The replay computes every phase's figures: the automatic phases never read or reset the
        # counters the script reads (its peaks stay PyTorch's, since the process began or its own
        # reset); a phase the script marks resets them, as under measure.
        rec.automatic_reads_counters = False
        # A built-in workload reads no counter itself: its phases skip the recorder's readings (two
        # questions to the CLI per phase, whose answers the replay computes anyway), which also
        # lets a sweep's trials share the model's build (built_once.py).
        rec.reads_counters = self.spec.workload == "script"
        recorder._set_current(rec)
        rec.describe(prediction_target=self.target["name"])
        # A sweep's trial asked to trace its dimension symbolically begins at the build point.
        built_once.on_resume(lambda spec: symbolic.begin(torch, self.fake, self.emit, self.tracker, self.notes, spec))
        self.phases = auto_phases.AutoPhases(torch, rec, self.tracker, self.notes).install()
        def finish() -> None:
            self._summary(events)
            if self.flush is not None:
                self.flush()

        workload.explain_hard_exit(rec, events, self.notes.append, finish)
        modes = contextlib.ExitStack()
        code = 0
        try:
            modes.enter_context(self.tracker)
            modes.enter_context(self._saved_tensors())
            code = workload.run_workload(rec, torch, self.spec, events, whole_run=self.phases.whole_run)
        except tracking.Unpredictable as exc:
            events("done", {"status": "failed", "error": {"type": "Unpredictable", "message": str(exc)}})
            code = 3
        finally:
            self.phases.close_all(None if code == 0 else RuntimeError("the workload stopped inside this phase"))
            modes.close()
        if code == 0:
            symbolic.finish(events)
        self._summary(events)
        return code

    def _summary(self, events: Emit) -> None:
        for site, count in self.tracker.placeholders.items():
            events("placeholder_count", {"file": site[0], "line": site[1], "count": count})
        for note in self.idioms.hub_kernels.notes() if self.idioms is not None else []:
            if note not in self.notes:
                self.notes.append(note)
        for note in self.notes:
            events("note", {"text": note})


def _drop_weak_entries(t: Any) -> None:
    """Removes `t` from the weak dictionaries that still hold it (a converter's memo of another
    fake mode, a deep copy's): swap_tensors refuses a tensor with weak references. Rare: found
    through the garbage collector's referrers only when some remain."""
    import gc

    refs = weakref.getweakrefs(t)
    if not refs:
        return
    for r in refs:
        for d in gc.get_referrers(r):
            if isinstance(d, dict):
                for k in [k for k, v in d.items() if k is r or v is r]:
                    del d[k]


def _route_sdpa(torch: Any, target: dict[str, Any]) -> None:
    """F.scaled_dot_product_attention picks the backend CUDA would pick on the target (a port of
    PyTorch's rules): without a driver, PyTorch's own choice falls back to the math path. The
    function itself is replaced, not wrapped in a mode: a checkpointed layer recomputes its
    attention on autograd's thread, where modes do not follow."""
    from . import sdpa

    functional = torch.nn.functional
    capability = tuple(target["capability"])
    cudnn = target.get("cudnn_version")

    def routed(*args: Any, **kwargs: Any) -> Any:
        args, kwargs = _autocast_sdpa(torch, args, kwargs)
        backend = sdpa.choose(*args, capability=capability, cudnn_version=cudnn, **kwargs)
        return sdpa.call(backend, *args, **kwargs)

    functional.scaled_dot_product_attention = routed


def _autocast_sdpa(torch: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """What CUDA autocast does to `scaled_dot_product_attention` (a lower-precision op) before the
    fused kernel runs: floating-point tensor arguments cast to the autocast dtype. Replaced above
    the dispatcher, the call must do it itself."""
    if not torch.is_autocast_enabled("cuda"):
        return args, kwargs
    dtype = torch.get_autocast_dtype("cuda")

    def cast(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.device.type == "cuda":
            return x.to(dtype)
        return x

    return tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}
