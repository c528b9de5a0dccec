"""The H200 kernel dataset measured for this project (``hopper/h200_kernels.csv``, see shared/data/README.md).

287 configurations x 2 passes (563 rows) on one NVIDIA H200: runtime (median of 7 CUDA-event windows), average
board power from NVML's energy counter over tick-aligned windows, energy per call, clocks, temperature.

Shape conventions of the file -> ours (:mod:`data.workloads`):

* ``matmul``: (M,K)@(K,N), B = 1 -> m=M, n=N, k=K
* ``bmm``: (B,M,K)@(B,K,N) -> batch=B, m=M, n=N, k=K (the same convention as ours)
* ``linear``: input (B, M, K) tokens x in-features, Linear(K, N) -> m = B*M, k=K, n=N (B, M kept in meta)
* ``conv2d``: B, Cin, Cout, H, W, kernel, stride, padding -> batch, c_in, c_out, h, w, kernel, stride, padding
* ``sdpa``: B, heads, seq, head_dim, causal -> batch, heads, seq_len, head_dim, causal
* ``layernorm, softmax, gelu, add``: [B, H] -> m=B, n=H

Units: ``energy_j = energy_mj_per_call / 1000``; ``runtime_ms`` as is; the 7 windows' min/max go to meta
(``runtime_ms_min/max``: a range, not an IQR, so ``runtime_iqr_ms`` stays empty). The file's ``flops`` count a
causal SDPA as half the dense work; ours (FlopCounterMode) count the dense work, so a causal row's
``meta.source_flops`` is half of ``flops``. dtypes: fp32/tf32/bf16/fp16 -> float32/tf32/bfloat16/float16.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from data.hardware import HardwareRegistry
from data.importers import data_root, finish, need, require_columns

SOURCE = "hopper-h200@2026-11-23"
FILE = Path("hopper") / "h200_kernels.csv"
DTYPES = {"fp32": "float32", "tf32": "tf32", "bf16": "bfloat16", "fp16": "float16"}
POWER_METHOD = "nvml_energy_counter_tick_aligned"
# shape mapping: our param -> a function of the source row
_SHAPES = {
    "matmul": lambda r: {"m": r["M"], "n": r["N"], "k": r["K"]},
    "bmm": lambda r: {"batch": r["B"], "m": r["M"], "n": r["N"], "k": r["K"]},
    "linear": lambda r: {"m": r["B"] * r["M"], "n": r["N"], "k": r["K"]},
    "conv2d": lambda r: {
        "batch": r["B"],
        "c_in": r["Cin"],
        "c_out": r["Cout"],
        "h": r["H"],
        "w": r["W"],
        "kernel": r["kernel"],
        "stride": r["stride"],
        "padding": r["padding"],
    },
    "sdpa": lambda r: {
        "batch": r["B"],
        "heads": r["heads"],
        "seq_len": r["seq"],
        "head_dim": r["head_dim"],
        "causal": r["causal"],
    },
    **{op: (lambda r: {"m": r["B"], "n": r["H"]}) for op in ("layernorm", "softmax", "gelu", "add")},
}
# observed on the device while measuring: provenance only
_META = ("pass", "net", "runtime_ms_min", "runtime_ms_max", "window_s", "unix_time", "flops", "bytes")


def import_hopper(root: str | Path | None = None, registry: HardwareRegistry | None = None) -> pd.DataFrame:
    path = need(data_root(root) / FILE)
    src = pd.read_csv(path)
    require_columns(
        src,
        [
            "gpu",
            "op",
            "dtype",
            "runtime_ms",
            "power_w",
            "energy_mj_per_call",
            "sm_mhz_end",
            "mem_mhz_end",
            "temp_c_end",
            "throttled",
            "pass",
            "unix_time",
            "B",
        ],
        path,
    )
    registry = registry or HardwareRegistry.from_dir()
    unknown = sorted(set(src["op"]) - set(_SHAPES))
    if unknown:
        raise ValueError(f"{path}: unknown op(s) {', '.join(unknown)}")
    rows, meta = [], []
    for r in src.to_dict("records"):
        shape = {k: int(v) for k, v in _SHAPES[r["op"]](r).items()}
        rows.append(
            {
                "op": r["op"],
                "dtype": DTYPES[r["dtype"]],
                **shape,
                "hardware": registry.resolve(r["gpu"]),
                "runtime_ms": r["runtime_ms"],
                "runtime_repeats": 7,
                "power_w": r["power_w"],
                "energy_j": r["energy_mj_per_call"] / 1000.0,
                "sm_clock_mhz": r["sm_mhz_end"],
                "mem_clock_mhz": r["mem_mhz_end"],
                "temperature_c": r["temp_c_end"],
                "throttled": bool(r["throttled"]),
                "timing_method": "cuda_events",
                "power_method": POWER_METHOD,
                "timestamp": pd.Timestamp(int(r["unix_time"]), unit="s", tz="UTC"),
            }
        )
        m = {f"source_{c}" if c in ("flops", "bytes") else c: r[c] for c in _META}
        m["net"] = m["net"] if isinstance(m["net"], str) else None
        if r["op"] == "linear":
            m.update(source_B=int(r["B"]), source_M=int(r["M"]))
        meta.append(m)
    first = src.iloc[0]
    env = {
        "driver": str(first["driver"]),
        "torch": str(first["torch"]),
        "power_limit_w": float(first["power_limit_w"]),
        "gpu": str(first["gpu"]),
        "dataset": str(FILE),
    }
    return finish(pd.DataFrame(rows), source=SOURCE, env=env, meta=meta)
