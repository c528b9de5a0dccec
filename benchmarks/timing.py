"""Shared timing helper for the benchmark scripts in this folder (run as ``python benchmarks/<name>.py``)."""

from __future__ import annotations

import statistics
import time


def timed(call, min_time: float, repeats: int) -> float:
    """Median over ``repeats`` of the wall time per call (each repeat runs for at least ``min_time`` s)."""
    call()  # warm-up
    per_call = []
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while True:
            call()
            n += 1
            if (elapsed := time.perf_counter() - t0) >= min_time:
                break
        per_call.append(elapsed / n)
    return statistics.median(per_call)
