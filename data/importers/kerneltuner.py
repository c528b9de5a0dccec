"""Kernel Tuner exhaustive auto-tuning caches (``kerneltuner/{gemm,convolution_milo}/*.json.gz``;
AutoTuningAssociation/benchmark_hub @8eeb99e). One row per tuning configuration.

* ``gemm/``: CLBlast ``Xgemm`` (OpenCL), float32 (``PRECISION`` 32), C[4096,4096] = A[4096,4096] B[4096,4096]
  -> ``matmul`` m = n = k = 4096 (the cache's ``GFLOP/s`` equals 2*4096^3 / time, which fixes k = 4096).
* ``convolution_milo/``: a single-channel 2-D convolution producing a 4096 x 4096 output with a
  ``filter_height x filter_width`` (15 x 15) filter over an input that carries the halo
  (4096 + 15 - 1 per side, no padding) -> ``conv2d`` batch = c_in = c_out = 1, h = w = 4110, kernel = 15,
  stride 1, padding 0 (``GFLOP/s`` = 2*4096^2*15^2 / time confirms it).

The tunables of a configuration go to ``config`` (JSON); ``runtime_ms`` is the cache's ``time`` (the MEAN of the
32 ``times``, in ms), ``runtime_repeats`` = 32, ``runtime_iqr_ms`` the IQR of the 32 times, and their coefficient
of variation (sample std / mean) goes to ``meta.runtime_cv`` (the schema has no cv column). Compile /
verification / framework times and ``GFLOP/s`` are observed by running and stay in ``meta``. A configuration
that failed (``time`` is a string such as ``RuntimeFailedConfig``) becomes an error row carrying that string.
GPU: ``device_name`` through the registry aliases; the MI250X cache has an empty name, so the file name is used
(and it most likely ran on one of the two GCDs; see conf/hardware/MI250X.yaml).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd

from data.hardware import HardwareRegistry
from data.importers import DatasetError, data_root, finish

SOURCE = "kerneltuner@8eeb99e"
KERNELS = ("gemm", "convolution_milo")
_OBSERVED = ("compile_time", "verification_time", "benchmark_time", "strategy_time", "framework_time", "GFLOP/s")


def _shape(kernel: str, doc: dict, cfg: dict) -> dict:
    n_out = doc.get("problem_size") or [4096, 4096]
    if kernel == "gemm":
        if int(cfg.get("PRECISION", 32)) != 32:
            raise DatasetError(f"kerneltuner gemm: PRECISION {cfg.get('PRECISION')} is not float32")
        return {"op": "matmul", "m": int(n_out[0]), "n": int(n_out[1]), "k": int(n_out[0])}
    fh, fw = int(cfg["filter_height"]), int(cfg["filter_width"])
    if fh != fw:
        raise DatasetError(f"kerneltuner convolution: non-square filter {fh}x{fw}")
    return {
        "op": "conv2d",
        "batch": 1,
        "c_in": 1,
        "c_out": 1,
        "h": int(n_out[0]) + fh - 1,
        "w": int(n_out[1]) + fw - 1,
        "kernel": fh,
        "stride": 1,
        "padding": 0,
    }


def load_cache(path: Path) -> dict:
    try:
        with gzip.open(path, "rt") as fh:
            doc = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path}: not a gzip JSON Kernel Tuner cache ({exc})") from None
    if "cache" not in doc or "tune_params_keys" not in doc:
        raise DatasetError(f"{path}: not a Kernel Tuner cache (no 'cache' / 'tune_params_keys')")
    return doc


def import_kerneltuner(
    root: str | Path | None = None,
    registry: HardwareRegistry | None = None,
    kernels=KERNELS,
    max_configs_per_file: int | None = None,
) -> pd.DataFrame:
    root = data_root(root)
    registry = registry or HardwareRegistry.from_dir()
    rows, metas, configs = [], [], []
    repeats: dict[int, list] = {}  # repeat count -> (row index, times) of the configs that ran
    for kernel in kernels:
        paths = sorted((root / "kerneltuner" / kernel).glob("*.json.gz"))
        if not paths:
            raise DatasetError(f"no Kernel Tuner caches in {root / 'kerneltuner' / kernel}")
        for path in paths:
            doc = load_cache(path)
            device = doc.get("device_name") or path.name.split(".")[0]
            hw = registry.resolve(device)
            keys = list(doc["tune_params_keys"])
            items = list(doc["cache"].items())[:max_configs_per_file]
            for key, entry in items:
                cfg = {k: entry[k] for k in keys}
                row = {
                    **_shape(kernel, doc, cfg),
                    "dtype": "float32",
                    "hardware": hw,
                    "timing_method": "kernel_tuner_mean",
                }
                meta = {
                    "file": str(path.relative_to(root)),
                    "config_key": key,
                    "kernel_name": doc.get("kernel_name"),
                    "device_name": doc.get("device_name"),
                    "runtime_stat": "mean",
                    **{k: entry[k] for k in _OBSERVED if k in entry},
                }
                if "timestamp" in entry:
                    row["timestamp"] = pd.Timestamp(entry["timestamp"]).tz_convert("UTC")
                else:
                    meta["timestamp_known"] = False
                t = entry.get("time")
                if isinstance(t, (int, float)) and t > 0:
                    times = entry.get("times") or [t]
                    row.update(status="ok", runtime_ms=float(t), runtime_repeats=len(times), runtime_iqr_ms=None)
                    meta["runtime_cv"] = None
                    repeats.setdefault(len(times), []).append((len(rows), times))
                else:
                    row.update(status="error", error=f"kernel tuner: {t}", runtime_ms=None)
                rows.append(row)
                metas.append(meta)
                configs.append(cfg)
    for n, found in repeats.items():  # the spread of each config's repeats: one numpy pass per repeat count
        times = np.array([t for _, t in found], dtype=float)
        q1, q3 = np.percentile(times, [25, 75], axis=1)
        cv = (times.std(axis=1, ddof=1) / times.mean(axis=1)).tolist() if n > 1 else [None] * len(found)
        for (i, _), iqr, c in zip(found, (q3 - q1).tolist(), cv, strict=True):
            rows[i]["runtime_iqr_ms"], metas[i]["runtime_cv"] = iqr, c
    df = pd.DataFrame(rows)
    if "timestamp" in df.columns:  # caches without per-config times: the epoch marks 'unknown'
        df["timestamp"] = df["timestamp"].fillna(pd.Timestamp(0, tz="UTC"))
    env = {"dataset": "kerneltuner", "tuner": "Kernel Tuner (benchmark_hub caches)"}
    return finish(df, source=SOURCE, env=env, meta=metas, config=configs)
