"""A registered cost model as Triton's autotuner ``perf_model``: prune the configurations before any is benchmarked.

``triton.autotune(configs, key, prune_configs_by={"perf_model": f, "top_k": k})`` calls ``f(**kernel_args,
**config_kwargs)`` once per configuration (the launch's named arguments: tensors, sizes, strides; the config's
meta-parameters, ``num_warps``, ``num_stages``, ...) and benchmarks only the ``k`` with the lowest estimates::

    from models.hooks.triton import TritonPerfModel

    perf = TritonPerfModel("models:/costmodel-runtime@champion", hardware="H100-SXM")

    @triton.autotune(configs=[...], key=["M", "N", "K"], prune_configs_by={"perf_model": perf, "top_k": 4})
    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, ..., BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ...): ...

The estimate of a configuration, in ms, is the cost model's runtime of the kernel's workload on ``hardware`` (what a
tuned library reaches for it: one prediction per workload, cached) times the configuration's tile-and-wave penalty:
its ``BLOCK_M x BLOCK_N`` output tiles (``SPLIT_K`` slices of K, ``BLOCK_K`` padding) dealt to the spec's SMs in
waves, over the best tile of ``features.physics.TILES`` (``features.physics.tile_time`` / ``gemm_time``, the
physics model's own wave quantisation). So configurations whose tiles pad the problem or leave SMs idle in the last
wave rank below those that fit it; ``num_warps`` and ``num_stages`` move no estimate (ties keep the configs' order).

The workload comes from the launch's arguments: by default a GEMM ``{"op": "matmul", "m": M, "n": N, "k": K}`` read
from the arguments named in ``shape`` (``("M", "N", "K")``), in the dtype of the first tensor argument; ``workload``
(a function of the arguments returning the cost model's input row) for any other kernel. The hardware is a registry
id or alias (``hardware=``), else the name of CUDA device 0 (torch), which must be one of the registry's aliases;
a GPU the model was not trained with comes with its spec (``hardware_specs=``: spec files, ``models.specs``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from models.hooks.common import RuntimeCache, load, registry_of

TORCH_DTYPES = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16"}


def _dtype_of(kwargs: Mapping) -> str:
    for value in kwargs.values():
        name = str(getattr(value, "dtype", ""))
        if name in TORCH_DTYPES:
            return TORCH_DTYPES[name]
    return "float32"


def _device_name() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


class TritonPerfModel:
    """The ``perf_model`` callable (module docstring)."""

    def __init__(
        self,
        model,
        hardware: str | None = None,
        *,
        tracking_uri: str | None = None,
        hardware_specs=None,
        workload: Callable[..., Mapping] | None = None,
        shape: tuple[str, str, str] = ("M", "N", "K"),
        tile: tuple[str, str, str] = ("BLOCK_M", "BLOCK_N", "BLOCK_K"),
        split_k: str = "SPLIT_K",
        batch: str | None = None,
    ):
        self.model = load(model, tracking_uri, hardware_specs)
        registry = registry_of(self.model)
        name = hardware or _device_name()
        if name is None:
            raise ValueError("TritonPerfModel: no hardware given and no CUDA device to name it (hardware='H100-SXM')")
        self.spec = registry.get(name)
        self.hardware = self.spec.id
        self.workload = workload
        self.shape, self.tile, self.split_k, self.batch = shape, tile, split_k, batch
        self.runtime = RuntimeCache(self.model)

    def workload_of(self, kwargs: Mapping) -> dict:
        """The cost model's input row for a launch's arguments."""
        if self.workload is not None:
            row = dict(self.workload(**kwargs))
        else:
            missing = [a for a in self.shape if a not in kwargs]
            if missing:
                raise ValueError(
                    f"TritonPerfModel: the kernel has no argument(s) {', '.join(missing)} for the GEMM's m, n, k "
                    "(give shape=(...) names or workload=fn)"
                )
            m, n, k = (int(kwargs[a]) for a in self.shape)
            row = {"op": "matmul", "m": m, "n": n, "k": k, "dtype": _dtype_of(kwargs)}
            if self.batch and self.batch in kwargs:
                row.update(op="bmm", batch=int(kwargs[self.batch]))
        row.setdefault("hardware", self.hardware)
        return row

    def tile_factor(self, row: Mapping, kwargs: Mapping) -> float:
        """The configuration's tile-and-wave time over the best tile's (module docstring); 1 without tile sizes."""
        from features.physics import gemm_time, tile_time

        if not all(t in kwargs for t in self.tile[:2]) or not {"m", "n", "k"} <= set(row):
            return 1.0
        batch = int(row.get("batch", 1) or 1)
        m, n, k = (np.array([float(row[d])]) for d in ("m", "n", "k"))
        tm, tn = int(kwargs[self.tile[0]]), int(kwargs[self.tile[1]])
        split = int(kwargs.get(self.split_k, 1) or 1)
        bk = int(kwargs.get(self.tile[2], 1) or 1)
        k_padded = np.array([math.ceil(k[0] / (bk * split)) * bk * split])
        sms = max(int(self.spec.sm_count), 1)
        mine = tile_time(batch, m, n, k_padded, tm, tn, split, 1.0, sms)[0]
        best = gemm_time(batch, m, n, k, float(sms), sms)[0]
        return float(mine[0] / best[0])

    def __call__(self, **kwargs) -> float:
        row = self.workload_of(kwargs)
        return self.runtime(row) * self.tile_factor(row, kwargs)
