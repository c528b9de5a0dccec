"""Workloads: an op of the registry (``data.ops``) at a shape and dtype, built, validated, counted and named.

A workload is ``(op, params, dtype)`` (and, for attention over a KV cache, its ``kv_dtype``). The one builder of
each op serves three callers:

* the CPU backend runs it on real tensors (:func:`build`);
* :func:`count_cost` runs it on ``meta`` tensors under :class:`torch.utils.flop_counter.FlopCounterMode` to get
  FLOPs and bytes without allocating (the exact reference of the closed forms in ``data.costs``);
* :func:`network_layers` splits a network into its layer workloads by running its module on ``meta`` tensors.

``flops`` is what FlopCounterMode counts (matmul, conv and attention FLOPs; nothing for elementwise,
normalisation, pooling, gather, softmax, reductions or collectives, whose cost is data movement). ``bytes`` is
every input, weight and output tensor touched once.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping

import torch
from torch.utils.flop_counter import FlopCounterMode

from data import networks
from data.costs import WorkloadError, unset, validate, validate_many
from data.ops import DTYPES, KV_DTYPES, MAX_EWISE_INPUTS, OPS, SHAPE_PARAMS, ZERO_OK, Op, family

OpSpec = Op  # the registry entry's name where older code reads it
__all__ = [
    "DTYPES",
    "KV_DTYPES",
    "MAX_EWISE_INPUTS",
    "OPS",
    "SHAPE_PARAMS",
    "ZERO_OK",
    "OpSpec",
    "WorkloadError",
    "build",
    "count_cost",
    "family",
    "network_layers",
    "shape_id",
    "validate",
    "validate_many",
]


def _default(spec: Op, name: str, values: Mapping[str, int]) -> int:
    default = dict(spec.optional)[name]
    return int(values[default]) if isinstance(default, str) else int(default)


def shape_id(op: str, params: Mapping[str, int]) -> str:
    """Stable id of an (op, shape) configuration, the grouping key for held-out-shape splits."""
    key = op + "|" + ",".join(f"{k}={params.get(k)}" for k in OPS[op].params)
    for name, _ in OPS[op].optional:  # only a value other than the default changes the id
        value = params.get(name)
        if not unset(value) and int(value) != _default(OPS[op], name, params):
            key += f",{name}={int(value)}"
    return hashlib.sha1(key.encode()).hexdigest()[:16]


def build(op: str, params: Mapping[str, int], dtype: str, device: str = "cpu", kv_dtype: str | None = None):
    """Build ``(fn, inputs, weights)`` for a validated workload on ``device``."""
    p = validate(op, params, dtype, kv_dtype)
    spec = OPS[op]
    if spec.family == "network":
        return networks.build_network(op, p, DTYPES[dtype], device)
    if spec.kv:
        return spec.build(p, dtype, device, kv_dtype=kv_dtype or None)
    return spec.build(p, dtype, device)


def _nbytes(tensors) -> int:
    return int(sum(t.numel() * t.element_size() for t in tensors))


@functools.lru_cache(maxsize=65536)
def _count_cost_cached(op: str, items: tuple, dtype: str, kv_dtype: str | None) -> tuple[float, float]:
    fn, inputs, weights = build(op, dict(items), dtype, device="meta", kv_dtype=kv_dtype)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = fn(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return float(counter.get_total_flops()), float(_nbytes(inputs) + _nbytes(weights) + _nbytes(outs))


def count_cost(op: str, params: Mapping[str, object], dtype: str, kv_dtype: str | None = None) -> tuple[float, float]:
    """FLOPs (FlopCounterMode) and bytes moved (inputs + weights + outputs once), without allocating."""
    p = validate(op, params, dtype, kv_dtype)
    kv = kv_dtype if OPS[op].kv and kv_dtype and kv_dtype != dtype else None
    return _count_cost_cached(op, tuple(sorted(p.items())), dtype, kv)


def network_layers(op: str, params: Mapping[str, object], dtype: str = "float32") -> list[dict]:
    """Split network workload ``op`` into its layer workloads ``[{op, params, dtype}, ...]`` in call order.

    Runs the network's own module on ``meta`` tensors (no memory, no compute) and records every leaf call
    (``data.networks.leaf_workload``)."""
    if family(op) != "network":
        raise ValueError(f"op {op!r} is not a network (family {family(op)!r})")
    module, inputs, _ = build(op, params, dtype, device="meta")
    found: list[dict] = []

    def hook(mod, args, _out):
        w = networks.leaf_workload(mod, args)
        if w is not None:
            found.append({"op": w["op"], "params": validate(w["op"], w["params"], dtype), "dtype": dtype})

    handles = [m.register_forward_hook(hook) for m in module.modules() if not list(m.children())]
    try:
        with torch.no_grad():
            module(*inputs)
    finally:
        for h in handles:
            h.remove()
    return found
