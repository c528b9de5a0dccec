"""A stand-in for the few ``torch.cuda`` calls the cuda backend's timing and busy-worker code makes, so
that code runs here without a GPU (a fake is right only because no GPU exists in CI).

The "device" is a :class:`tests.fake_nvml.FakeGpu` work queue, like one CUDA stream: a kernel call
(:func:`kernel`) costs the host ``launch_s`` and queues ``seconds`` of device work without waiting.
An event records the instant the queue reaches it; ``synchronize`` sleeps until then; ``elapsed_time``
is device time between two events. A fake CUDA graph records the kernels called inside
``torch.cuda.graph(g)`` and ``replay()`` queues them all at once (no per-kernel launch cost).
So eager launches of kernels shorter than their launch cost starve the device, as on a real GPU.
"""
from __future__ import annotations

import contextlib
import time

_capturing: list = [None]
_device: dict = {0: None}


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def kernel(seconds: float, launch_s: float = 0.0):
    """A callable that queues ``seconds`` of work on the patched device."""
    def body():
        _device[0].enqueue(seconds)

    def call():
        if _capturing[0] is not None:
            _capturing[0].calls.append(body)
            return
        spin(launch_s)
        body()

    return call


class FakeEvent:
    def __init__(self, enable_timing: bool = False):
        self.t = None

    def record(self, stream=None):
        self.t = max(time.monotonic(), _device[0].free_at)

    def synchronize(self):
        time.sleep(max(0.0, self.t - time.monotonic()))

    def elapsed_time(self, end: "FakeEvent") -> float:
        return (end.t - self.t) * 1e3


class FakeStream:
    def wait_stream(self, other):
        pass


class FakeGraph:
    def __init__(self):
        self.calls = []

    def replay(self):
        for c in self.calls:
            c()


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
    import torch

    monkeypatch.setitem(_device, 0, device)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: FakeStream())
    monkeypatch.setattr(torch.cuda, "synchronize", _synchronize)
    monkeypatch.setattr(torch.cuda, "set_device", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
