"""A stand-in for the CUDA device, so the cuda backend runs end to end without a GPU (a fake is right only because
no GPU exists in CI). Only the GPU is faked: ``torch.cuda`` and tensors that live on ``cuda``; the workload
builders, the timing, the power logic and ``CudaBackend.measure`` run unchanged.

**Timing primitives** (:func:`patch`). The "device" is a :class:`tests.fake_nvml.FakeGpu` work queue, like one
CUDA stream: a kernel call costs the host its launch time and queues device work without waiting. An event
records the instant the queue reaches it; ``synchronize`` sleeps until then; ``elapsed_time`` is device time
between two events. A fake CUDA graph records the kernels called inside ``torch.cuda.graph(g)`` and
``replay()`` queues them all at once (no per-kernel launch cost). So eager launches of kernels shorter than
their launch cost starve the device, as on a real GPU. :func:`kernel` is a bare kernel of a given duration.

**Tensors on cuda** (:class:`FakeCudaDevice`, :func:`installed`). A factory call with ``device="cuda..."``
(``torch.empty``, ``torch.randn``, the parameters of ``nn.Linear(..., device=...)``, ``with torch.device(...)``)
makes a :class:`CudaTensor`: a wrapper around a ``meta`` tensor, so shapes and dtypes are real and no memory is
touched (its ``device`` reads ``meta``: a wrapper that said ``cuda`` would send torch's composite ops, SDPA among
them, to CUDA kernels this CPU build lacks). Every aten op on such tensors runs on the meta tensors and is a kernel
on the fake device: ``launch latency + max(FLOPs / peak FLOP/s of the dtype, bytes / bandwidth)`` (FLOPs from torch's
``flop_counter`` registry, bytes = the distinct inputs and the new outputs), queued like :func:`kernel` (or
recorded while a graph captures). Views launch nothing and allocate nothing. An allocator counts the bytes of
live tensors (freed when a tensor is garbage), tracks the peak (``max_memory_allocated``) and raises
``torch.cuda.OutOfMemoryError`` (torch's message) for an allocation beyond the device memory.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from dataclasses import dataclass

import torch
import torch.utils._pytree as pytree
from torch.overrides import TorchFunctionMode
from torch.utils.flop_counter import flop_registry

_capturing: list = [None]
_device: dict = {0: None}  # the FakeGpu work queue the timing primitives use
_cuda: dict = {0: None}  # the FakeCudaDevice tensors on cuda run on


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _launch(seconds: float, launch_s: float) -> None:
    """One kernel of ``seconds`` device time: recorded into the capturing graph, or launched now (the host pays
    ``launch_s``, the device queues the work)."""
    if _capturing[0] is not None:
        _capturing[0].calls.append(seconds)
        return
    spin(launch_s)
    _device[0].enqueue(seconds)


def kernel(seconds: float, launch_s: float = 0.0):
    """A callable that queues ``seconds`` of work on the patched device."""
    return lambda: _launch(seconds, launch_s)


class FakeEvent:
    def __init__(self, enable_timing: bool = False):
        self.t = None

    def record(self, stream=None):
        self.t = max(time.monotonic(), _device[0].free_at)

    def synchronize(self):
        time.sleep(max(0.0, self.t - time.monotonic()))

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.t - self.t) * 1e3


class FakeStream:
    def wait_stream(self, other):
        pass


class FakeGraph:
    """The kernels captured into it (their device seconds); a replay queues them all in one launch."""

    def __init__(self):
        self.calls: list[float] = []

    def replay(self):
        _device[0].enqueue(sum(self.calls))


@contextlib.contextmanager
def graph(g, **kwargs):
    _capturing[0] = g
    try:
        yield
    finally:
        _capturing[0] = None


def _synchronize(*a):
    time.sleep(max(0.0, _device[0].free_at - time.monotonic()))


def patch(monkeypatch, device) -> None:
    """Route ``torch.cuda`` timing, stream and graph calls to ``device`` (a FakeGpu)."""
    monkeypatch.setitem(_device, 0, device)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: FakeStream())
    monkeypatch.setattr(torch.cuda, "synchronize", _synchronize)
    monkeypatch.setattr(torch.cuda, "set_device", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", graph)


# --------------------------------------------------------------------------- tensors on the fake device
@dataclass
class FakeCudaDevice:
    """Spec, allocator and kernel cost model of one fake GPU; its work queue (and power) is ``gpu``."""

    gpu: object  # tests.fake_nvml.FakeGpu
    name: str = "NVIDIA H100 80GB HBM3"
    memory_bytes: float = 80 * 2**30
    peak_flops: dict | None = None  # dtype name -> FLOP/s (float32 / float16 / bfloat16)
    bandwidth_bytes_s: float = 3.35e12
    latency_s: float = 2e-6  # device time of an empty kernel
    launch_s: float = 5e-6  # host time of one eager launch

    def __post_init__(self):
        self.peak_flops = self.peak_flops or {"float32": 66.9e12, "float16": 989.4e12, "bfloat16": 989.4e12}
        self.allocated = self.peak = 0
        self._lock = threading.Lock()

    @classmethod
    def from_spec(cls, spec, gpu, **kw) -> FakeCudaDevice:
        """The device of a registry spec (``data.hardware.HardwareSpec``): its name, memory, peaks, bandwidth."""
        return cls(
            gpu,
            name=(spec.aliases or (spec.name,))[-1],
            memory_bytes=spec.memory_gb * 2**30,
            peak_flops={dt: spec.peak_flops(dt) for dt in ("float32", "float16", "bfloat16")},
            bandwidth_bytes_s=spec.bandwidth_bytes_s,
            **kw,
        )

    def alloc(self, nbytes: int) -> None:
        with self._lock:
            if self.allocated + nbytes > self.memory_bytes:
                gib = 2**30
                raise torch.cuda.OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate {nbytes / gib:.2f} GiB. GPU 0 has a total capacity of "
                    f"{self.memory_bytes / gib:.2f} GiB of which {(self.memory_bytes - self.allocated) / gib:.2f} GiB "
                    f"is free. Of the allocated memory {self.allocated / gib:.2f} GiB is allocated by PyTorch"
                )
            self.allocated += nbytes
            self.peak = max(self.peak, self.allocated)

    def free(self, nbytes: int) -> None:
        with self._lock:
            self.allocated -= nbytes

    def kernel_s(self, func, args, kwargs, out, new_bytes: int) -> float:
        """Device seconds of one aten op: latency + the roofline of its FLOPs and bytes on this device."""
        ins = {id(t): t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        nbytes = sum(t.numel() * t.element_size() for t in ins.values()) + new_bytes
        flops = 0
        count = flop_registry.get(func._overloadpacket)
        if count is not None:
            flops = count(*args, **(kwargs or {}), out_val=out)
        dtype = next((str(t.dtype).removeprefix("torch.") for t in ins.values() if t.is_floating_point()), "float32")
        peak = self.peak_flops.get(dtype, self.peak_flops["float32"])
        return self.latency_s + max(flops / peak, nbytes / self.bandwidth_bytes_s)


_ALIASING = {torch.ops.aten._unsafe_view.default, torch.ops.aten.alias.default}


class CudaTensor(torch.Tensor):
    """A tensor on the fake GPU: a meta tensor inside (shape, dtype, strides), device time and memory outside."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor, base: CudaTensor | None = None, nbytes: int = 0):
        return torch.Tensor._make_wrapper_subclass(
            cls,
            elem.shape,
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            device="meta",
            requires_grad=elem.requires_grad,
        )

    def __init__(self, elem: torch.Tensor, base: CudaTensor | None = None, nbytes: int = 0):
        self.elem, self._base_ref = elem, base  # a view keeps its base (and the base's memory) alive
        if nbytes:
            weakref.finalize(self, _cuda[0].free, nbytes)

    @classmethod
    def allocate(cls, elem: torch.Tensor) -> CudaTensor:
        nbytes = elem.numel() * elem.element_size()
        _cuda[0].alloc(nbytes)
        return cls(elem, nbytes=nbytes)

    def __repr__(self):
        return f"CudaTensor({tuple(self.shape)}, dtype={self.dtype}, device='cuda:0')"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        wrappers = {id(t.elem): t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, CudaTensor)}
        uargs, ukwargs = pytree.tree_map_only(CudaTensor, lambda t: t.elem, (args, kwargs))
        out = func(*uargs, **ukwargs)
        if func.is_view or func in _ALIASING:  # no kernel, no memory: the output shares its base's storage
            base = next(iter(wrappers.values()), None)
            return pytree.tree_map_only(torch.Tensor, lambda t: _wrap(wrappers, t, lambda e: cls(e, base=base)), out)
        new = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and id(t) not in wrappers]
        new_bytes = sum(t.numel() * t.element_size() for t in new)
        seconds = _cuda[0].kernel_s(func, uargs, ukwargs, out, new_bytes)
        wrapped = pytree.tree_map_only(torch.Tensor, lambda t: _wrap(wrappers, t, cls.allocate), out)
        _launch(seconds, _cuda[0].launch_s)
        return wrapped


def _wrap(wrappers: dict, elem: torch.Tensor, new):
    """The input wrapper whose meta tensor an op returned (an in-place op returns its argument), else ``new(elem)``."""
    w = wrappers.get(id(elem))
    return w if w is not None else new(elem)


def _on_cuda(device) -> bool:
    return device is not None and torch.device(device).type == "cuda"


class CudaFactories(TorchFunctionMode):
    """Factories asked for ``device="cuda..."`` make :class:`CudaTensor`\\ s (``Tensor.to("cuda")`` too)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if _on_cuda(kwargs.get("device")):
            kwargs["device"] = "meta"
            out = func(*args, **kwargs)
            return CudaTensor.allocate(out) if isinstance(out, torch.Tensor) else out
        if func in (torch.Tensor.to, torch.Tensor.cuda) and args and not isinstance(args[0], CudaTensor):
            target = args[1] if len(args) > 1 and isinstance(args[1], (str, torch.device)) else kwargs.get("device")
            if func is torch.Tensor.cuda or _on_cuda(target):
                return CudaTensor.allocate(args[0].to("meta"))
        return func(*args, **kwargs)


@dataclass
class _Properties:
    name: str
    total_memory: int
    uuid: None = None  # no NVML UUID: CudaBackend then uses the device index


@contextlib.contextmanager
def installed(monkeypatch, cuda: FakeCudaDevice):
    """Install ``cuda`` as device 0: the timing primitives (:func:`patch`), the ``torch.cuda`` queries the backend
    makes (available, count, name, properties, memory stats) and the cuda factories, for the ``with`` block (this
    thread; the monkeypatched calls for the rest of the test)."""
    patch(monkeypatch, cuda.gpu)
    monkeypatch.setitem(_cuda, 0, cuda)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: cuda.name)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: _Properties(cuda.name, int(cuda.memory_bytes)))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: cuda.allocated)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: cuda.peak)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: setattr(cuda, "peak", cuda.allocated))
    with CudaFactories():
        yield cuda
