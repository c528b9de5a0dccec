"""Shape sweeps: seeded, reproducible lists of workloads ``{op, params, dtype}`` from a config.

A parameter spec is one of:
  * ``[lo, hi]``          an integer in [lo, hi] on a log scale (sizes span orders of magnitude);
  * ``{choice: [a, b]}``  one of the listed values;
  * ``v``                 a fixed value.

Four samplers (``kind``), all seeded and reproducible (same seed + config -> same list):

* ``random``: independent draws (log-uniform for ranges, uniform for choices);
* ``sobol``:  scrambled Sobol' low-discrepancy points (``scipy.stats.qmc.Sobol``), one dimension per
  parameter, drawn in powers of two as Sobol' balance requires;
* ``lhs``:    Latin hypercube (``scipy.stats.qmc.LatinHypercube``): each dimension's range is cut into
  ``n`` strata and every stratum is hit once;
* ``grid``:   the Cartesian product of ``points`` log-spaced integers per range (plus every choice).

A quasi-random point ``u`` in [0, 1)^d maps to a parameter as ``round(exp(log lo + u (log hi - log lo)))``
for a range and ``choices[floor(u * len(choices))]`` for a choice. Shapes whose FLOPs or bytes exceed
the sweep's ``max_flops`` / ``max_bytes`` are skipped (random and quasi-random samplers draw further
points until ``n`` are kept, within bounded tries; skipping thins the low-discrepancy design in the
excluded corner only). Duplicate shapes after rounding are kept once. Each op's stream is seeded from
``(seed, op name)``, so adding an op to a config does not change the shapes drawn for the others.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from data.workloads import OPS, WorkloadError, count_cost, validate

KINDS = ("random", "sobol", "lhs", "grid")


def _draw(spec: Any, rng: np.random.Generator) -> int:
    if isinstance(spec, Mapping) and "choice" in spec:
        return int(rng.choice(list(spec["choice"])))
    if isinstance(spec, (list, tuple)) and len(spec) == 2:
        lo, hi = float(spec[0]), float(spec[1])
        return int(round(np.exp(rng.uniform(np.log(lo), np.log(hi)))))
    return int(spec)


def _from_unit(spec: Any, u: float) -> int:
    """Map ``u`` in [0, 1) onto a parameter spec (log scale for ranges)."""
    if isinstance(spec, Mapping) and "choice" in spec:
        choices = list(spec["choice"])
        return int(choices[min(int(u * len(choices)), len(choices) - 1)])
    if isinstance(spec, (list, tuple)) and len(spec) == 2:
        lo, hi = np.log(float(spec[0])), np.log(float(spec[1]))
        return int(round(np.exp(lo + u * (hi - lo))))
    return int(spec)


def _grid_values(spec: Any, points: int) -> list[int]:
    if isinstance(spec, Mapping) and "choice" in spec:
        return [int(v) for v in spec["choice"]]
    if isinstance(spec, (list, tuple)) and len(spec) == 2:
        vals = np.exp(np.linspace(np.log(float(spec[0])), np.log(float(spec[1])), int(points)))
        return sorted({int(round(v)) for v in vals})
    return [int(spec)]


def _check_spec(op: str, params: Mapping[str, Any]) -> None:
    if op not in OPS:
        raise WorkloadError(f"sweep: unknown op {op!r}; known ops: {', '.join(OPS)}")
    missing = [p for p in OPS[op].params if p not in params]
    if missing:
        raise WorkloadError(f"sweep: op {op!r} lacks a spec for {', '.join(missing)}")
    for name, spec in params.items():
        if isinstance(spec, (list, tuple)) and (len(spec) != 2 or not 0 < float(spec[0]) <= float(spec[1])):
            raise WorkloadError(
                f"sweep: op {op!r} parameter {name!r}: a range must be [lo, hi] with 0 < lo <= hi, got {list(spec)}"
            )


def _op_seed(seed: int, op: str) -> list[int]:
    return [int(seed), zlib.crc32(op.encode())]


def _unit_points(kind: str, d: int, n: int, rng_seed: list[int]):
    """An endless stream of batches of points in [0, 1)^d for a quasi-random or random sampler."""
    from scipy.stats import qmc  # lazy: scipy.stats takes ~1 s to import

    seed = np.random.SeedSequence(rng_seed)
    if kind == "sobol":
        sampler = qmc.Sobol(d, scramble=True, seed=np.random.default_rng(seed))
        yield sampler.random_base2(max(0, int(np.ceil(np.log2(max(n, 1))))))
        while True:  # keep the sequence balanced: each further batch doubles the points drawn so far
            yield sampler.random_base2(int(np.log2(sampler.num_generated)))
    elif kind == "lhs":
        sampler = qmc.LatinHypercube(d, seed=np.random.default_rng(seed))
        while True:
            yield sampler.random(max(n, 1))
    else:
        rng = np.random.default_rng(seed)
        while True:
            yield rng.random((max(n, 1), d))


def op_shapes(
    op: str,
    params: Mapping[str, Any],
    n: int,
    kind: str = "random",
    seed: int = 0,
    max_flops: float = float("inf"),
    max_bytes: float = float("inf"),
    points: int = 4,
) -> list[dict]:
    """Up to ``n`` distinct valid shapes for one op (``grid``: the whole grid, ``n`` ignored)."""
    if kind not in KINDS:
        raise WorkloadError(f"sweep: unknown kind {kind!r}; known: {', '.join(KINDS)}")
    _check_spec(op, params)
    names = list(params)
    seen: dict[tuple, dict] = {}

    def consider(values: dict) -> None:
        try:
            p = validate(op, values)
        except WorkloadError:
            return  # e.g. a conv kernel larger than its padded input: not a shape, skip it
        key = tuple(sorted(p.items()))
        if key in seen:
            return
        flops, nbytes = count_cost(op, p, "float32")
        if flops <= max_flops and nbytes <= max_bytes:
            seen[key] = p

    if kind == "grid":
        for combo in itertools.product(*(_grid_values(params[name], points) for name in names)):
            consider(dict(zip(names, combo)))
        return list(seen.values())
    tries, budget = 0, 50 * max(int(n), 1)
    for batch in _unit_points(kind, len(names), int(n), _op_seed(seed, op)):
        for u in batch:
            if len(seen) >= n or tries >= budget:
                return list(seen.values())
            tries += 1
            consider({name: _from_unit(params[name], float(x)) for name, x in zip(names, u)})
    return list(seen.values())


def make_sweep(
    ops: Mapping[str, Mapping],
    dtypes: list[str],
    n: int | None = None,
    kind: str = "random",
    seed: int = 0,
    max_flops: float = float("inf"),
    max_bytes: float = float("inf"),
    points: int = 4,
) -> list[dict]:
    """Workloads for every op x shape x dtype.

    ``ops`` maps op -> ``{params: {name: spec}}`` (optionally ``n``: that op's count, else ``n``).
    """
    workloads: list[dict] = []
    for op, spec in ops.items():
        count = int(spec.get("n", n) if spec.get("n") is not None else (n or 0))
        if kind != "grid" and count <= 0:
            raise WorkloadError(f"sweep: op {op!r} needs a count n > 0")
        for p in op_shapes(op, spec.get("params") or {}, count, kind, seed, max_flops, max_bytes, points):
            workloads.extend({"op": op, "params": p, "dtype": dt} for dt in dtypes)
    return workloads


def random_sweep(
    ops: Mapping[str, Mapping],
    dtypes: list[str],
    seed: int,
    max_flops: float = float("inf"),
    max_bytes: float = float("inf"),
) -> list[dict]:
    """``ops`` maps op -> ``{n: count, params: {name: spec}}``; returns ``n`` distinct shapes per op x dtype.

    The main job's sampler (kept bit-for-bit: one RNG over all ops in config order).
    """
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
