"""Shape sweeps: seeded, reproducible lists of workloads ``{op, params, dtype}`` from a config.

A parameter spec is one of:
  * ``[lo, hi]``          an integer drawn log-uniformly in [lo, hi] (sizes span orders of magnitude);
  * ``{choice: [a, b]}``  one of the listed values, uniformly;
  * ``v``                 a fixed value.
Draws whose FLOPs or bytes exceed the sweep's ``max_flops`` / ``max_bytes`` are redrawn (bounded tries),
which keeps a CPU sweep inside its time budget without biasing the shape ranges away from small sizes.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from data.workloads import OPS, WorkloadError, count_cost, validate


def _draw(spec: Any, rng: np.random.Generator) -> int:
    if isinstance(spec, Mapping) and "choice" in spec:
        return int(rng.choice(list(spec["choice"])))
    if isinstance(spec, (list, tuple)) and len(spec) == 2:
        lo, hi = float(spec[0]), float(spec[1])
        return int(round(np.exp(rng.uniform(np.log(lo), np.log(hi)))))
    return int(spec)


def random_sweep(ops: Mapping[str, Mapping], dtypes: list[str], seed: int,
                 max_flops: float = float("inf"), max_bytes: float = float("inf")) -> list[dict]:
    """``ops`` maps op -> ``{n: count, params: {name: spec}}``; returns ``n`` distinct shapes per op x dtype."""
    rng = np.random.default_rng(seed)
    workloads: list[dict] = []
    for op, spec in ops.items():
        if op not in OPS:
            raise WorkloadError(f"sweep: unknown op {op!r}; known ops: {', '.join(OPS)}")
        seen: set[tuple] = set()
        tries = 0
        while len(seen) < int(spec["n"]) and tries < 50 * int(spec["n"]):
            tries += 1
            params = validate(op, {name: _draw(s, rng) for name, s in spec["params"].items()})
            key = tuple(sorted(params.items()))
            if key in seen:
                continue
            flops, nbytes = count_cost(op, params, "float32")
            if flops > max_flops or nbytes > max_bytes:
                continue
            seen.add(key)
            workloads.extend({"op": op, "params": params, "dtype": dt} for dt in dtypes)
    return workloads
