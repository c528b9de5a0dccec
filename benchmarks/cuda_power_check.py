"""Measure the shapes of the shared H200 file with the cuda backend and compare with it.

    python benchmarks/cuda_power_check.py                      # on a machine with an NVIDIA GPU
    python benchmarks/cuda_power_check.py --limit 40 --out results.csv
    python benchmarks/cuda_power_check.py --dry-run            # no GPU: map every row, check FLOPs

Reference: ``../shared/data/hopper/h200_kernels.csv`` (287 configurations, two passes, one H200; see
``shared/data/README.md``). Column mapping onto ``data/workloads.py`` conventions:

* matmul ``M,N,K`` (``B`` = 1) -> m, n, k; bmm ``B,M,N,K`` ((B,M,K)@(B,K,N)) -> batch, m, n, k;
* linear ``B*M`` tokens, ``K`` in-features, ``N`` out-features -> m = B*M, k = K, n = N;
* conv2d ``B,Cin,Cout,H,W,kernel,stride,padding`` -> batch, c_in, c_out, h, w, kernel, stride, padding;
* layernorm / softmax / add / gelu over ``[B, H]`` -> m = B, n = H;
* sdpa ``B,heads,seq,head_dim,causal``: not a workload op here; built in this script as
  ``F.scaled_dot_product_attention`` on q, k, v of shape [B, heads, seq, head_dim];
* dtype fp32 / tf32 / bf16 / fp16 -> float32 (TF32 off) / tf32 / bfloat16 / float16.

The reference per configuration is the median over its passes. Printed per op and dtype: the number of
configurations, and the median ratio ours / reference of runtime and of power (goal: runtime within
2%, power within 3%), for all rows and for kernels of at least 30 us (below that the reference timed
back-to-back launches while this backend uses CUDA graphs; ``--graph never`` times like the reference).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402
import torch  # noqa: E402

DEFAULT_CSV = ROOT.parent / "shared" / "data" / "hopper" / "h200_kernels.csv"
DTYPES = {"fp32": "float32", "tf32": "tf32", "bf16": "bfloat16", "fp16": "float16"}
SHAPE_COLS = [
    "B",
    "M",
    "N",
    "K",
    "Cin",
    "Cout",
    "H",
    "W",
    "kernel",
    "stride",
    "padding",
    "heads",
    "seq",
    "head_dim",
    "causal",
]


def _i(v) -> int:
    return int(v)


def workload(r) -> dict:
    """One reference row -> ``{"op", "params", "dtype"}`` in this project's conventions."""
    op, dtype = r["op"], DTYPES[r["dtype"]]
    if op == "matmul":
        if _i(r["B"]) != 1:
            raise ValueError(f"matmul row with B={r['B']}")
        params = {"m": _i(r["M"]), "n": _i(r["N"]), "k": _i(r["K"])}
    elif op == "bmm":
        params = {"batch": _i(r["B"]), "m": _i(r["M"]), "n": _i(r["N"]), "k": _i(r["K"])}
    elif op == "linear":
        params = {"m": _i(r["B"]) * _i(r["M"]), "n": _i(r["N"]), "k": _i(r["K"])}
    elif op == "conv2d":
        params = {
            "batch": _i(r["B"]),
            "c_in": _i(r["Cin"]),
            "c_out": _i(r["Cout"]),
            "h": _i(r["H"]),
            "w": _i(r["W"]),
            "kernel": _i(r["kernel"]),
            "stride": _i(r["stride"]),
            "padding": _i(r["padding"]),
        }
    elif op in ("layernorm", "softmax", "add", "gelu"):
        params = {"m": _i(r["B"]), "n": _i(r["H"])}
    elif op == "sdpa":
        params = {
            "batch": _i(r["B"]),
            "heads": _i(r["heads"]),
            "seq": _i(r["seq"]),
            "head_dim": _i(r["head_dim"]),
            "causal": _i(r["causal"]),
        }
    else:
        raise ValueError(f"unknown op {op!r} in the reference file")
    return {"op": op, "params": params, "dtype": dtype}


def sdpa_flops(p: dict) -> float:
    """4 * B * heads * seq^2 * head_dim (QK^T and PV), halved when causal, as the reference counts."""
    return 4.0 * p["batch"] * p["heads"] * p["seq"] ** 2 * p["head_dim"] / (2 if p["causal"] else 1)


def reference(path: Path) -> pd.DataFrame:
    """One row per configuration (first-seen order), runtime and power = median over passes."""
    if not path.exists():
        raise FileNotFoundError(f"reference file not found: {path}")
    df = pd.read_csv(path)
    missing = [c for c in ["op", "dtype", "runtime_ms", "power_w", "flops", *SHAPE_COLS] if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing columns {', '.join(missing)}")
    key = ["op", "dtype", *SHAPE_COLS]
    df[SHAPE_COLS] = df[SHAPE_COLS].fillna(-1)
    g = df.groupby(key, sort=False, dropna=False)
    out = g.agg(
        runtime_ms=("runtime_ms", "median"),
        power_w=("power_w", "median"),
        flops=("flops", "first"),
        passes=("runtime_ms", "size"),
        throttled_ref=("throttled", "max"),
    ).reset_index()
    return out


def dry_run(ref: pd.DataFrame) -> int:
    """Map every configuration and compare the FLOPs we count with the file's (no GPU needed)."""
    from data.workloads import count_cost

    bad = 0
    for _, r in ref.iterrows():
        w = workload(r)
        ours = sdpa_flops(w["params"]) if w["op"] == "sdpa" else count_cost(w["op"], w["params"], w["dtype"])[0]
        if w["op"] in ("matmul", "bmm", "linear", "conv2d", "sdpa") and not math.isclose(
            ours, r["flops"], rel_tol=0.01
        ):
            bad += 1
            print(f"FLOPs differ: {w} ours {ours:.4g} file {r['flops']:.4g}")
    print(f"{len(ref)} configurations mapped; {bad} GEMM/conv/attention FLOP counts differ from the file by > 1%")
    return 1 if bad else 0


def measure_sdpa(backend, w: dict) -> dict:
    import torch.nn.functional as F

    from data.backends.cuda import fp32_math, power_fields
    from data.workloads import DTYPES as TORCH_DTYPES

    p = w["params"]
    dev = f"cuda:{backend.device_index}"
    shape = (p["batch"], p["heads"], p["seq"], p["head_dim"])
    try:
        with torch.no_grad(), fp32_math(w["dtype"]):
            q, k, v = (torch.randn(shape, dtype=TORCH_DTYPES[w["dtype"]], device=dev) for _ in range(3))
            timing, reading = backend.measure_fn(
                lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(p["causal"]))
            )
        return {
            "status": "ok",
            "runtime_ms": timing.runtime_ms,
            "timing_method": timing.method,
            **power_fields(reading, timing.runtime_ms),
        }
    except Exception as exc:
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:300]}
    finally:
        torch.cuda.empty_cache()


def summarise(res: pd.DataFrame) -> pd.DataFrame:
    ok = res[res["status"] == "ok"].copy()
    ok["rt_ratio"] = ok["runtime_ms_ours"] / ok["runtime_ms"]
    ok["pw_ratio"] = ok["power_w_ours"] / ok["power_w"]
    long = ok[ok["runtime_ms"] >= 0.030]
    rows = []
    for (op, dt), g in ok.groupby(["op", "dtype"]):
        gl = long[(long["op"] == op) & (long["dtype"] == dt)]
        rows.append(
            {
                "op": op,
                "dtype": dt,
                "n": len(g),
                "runtime_ratio": g["rt_ratio"].median(),
                "power_ratio": g["pw_ratio"].median(),
                "n_ge30us": len(gl),
                "runtime_ratio_ge30us": gl["rt_ratio"].median() if len(gl) else float("nan"),
                "power_ratio_ge30us": gl["pw_ratio"].median() if len(gl) else float("nan"),
            }
        )
    rows.append(
        {
            "op": "ALL",
            "dtype": "",
            "n": len(ok),
            "runtime_ratio": ok["rt_ratio"].median(),
            "power_ratio": ok["pw_ratio"].median(),
            "n_ge30us": len(long),
            "runtime_ratio_ge30us": long["rt_ratio"].median(),
            "power_ratio_ge30us": long["pw_ratio"].median(),
        }
    )
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV, help="reference file (default: shared H200 file)")
    ap.add_argument("--limit", type=int, default=0, help="measure only the first N configurations")
    ap.add_argument("--ops", default="", help="comma-separated ops to keep (default: all)")
    ap.add_argument("--graph", choices=["auto", "never", "always"], default="auto")
    ap.add_argument("--power-ticks", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None, help="per-configuration results (CSV)")
    ap.add_argument("--dry-run", action="store_true", help="map the rows and check FLOPs; no GPU needed")
    args = ap.parse_args(argv)
    try:
        ref = reference(args.csv)
    except (OSError, ValueError) as exc:
        print(f"cuda_power_check: error: {exc}", file=sys.stderr)
        return 2
    if args.ops:
        ref = ref[ref["op"].isin(args.ops.split(","))]
    if args.limit:
        ref = ref.head(args.limit)
    if args.dry_run:
        return dry_run(ref)
    if not torch.cuda.is_available():
        print("cuda_power_check: error: no CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2

    from data.backends.cuda import CudaBackend

    backend = CudaBackend(
        graph={"auto": "auto", "never": False, "always": True}[args.graph], power_ticks=args.power_ticks
    )
    hw = backend.hardware
    print(
        f"device: {torch.cuda.get_device_name(0)} -> registry {hw.id}; driver {backend.nvml_power.driver_version}; "
        f"torch {torch.__version__}; reference {args.csv.name} ({len(ref)} configurations)",
        flush=True,
    )
    results, t0 = [], time.time()
    for i, (_, r) in enumerate(ref.iterrows()):
        w = workload(r)
        if w["op"] == "sdpa":
            m = measure_sdpa(backend, w)
        else:
            m = backend.measure(w)
        results.append(
            {
                **r.to_dict(),
                "status": m["status"],
                "error": m.get("error"),
                "runtime_ms_ours": m.get("runtime_ms"),
                "power_w_ours": m.get("power_w"),
                "timing_method": m.get("timing_method"),
                "power_method": m.get("power_method"),
                "sm_clock_mhz": m.get("sm_clock_mhz"),
                "throttled": m.get("throttled"),
            }
        )
        if (i + 1) % 25 == 0:
            print(f"  {i + 1}/{len(ref)} configurations, {time.time() - t0:.0f} s", flush=True)
    res = pd.DataFrame(results)
    if args.out:
        res.to_csv(args.out, index=False)
    errors = res[res["status"] != "ok"]
    for _, e in errors.iterrows():
        print(f"error: {e['op']} {e['dtype']}: {e['error']}")
    summary = summarise(res)
    pd.set_option("display.width", 200)
    print(summary.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    all_row = summary.iloc[-1]
    print(
        f"median ratio ours/reference (kernels >= 30 us): runtime {all_row['runtime_ratio_ge30us']:.3f} "
        f"(goal within 2%), power {all_row['power_ratio_ge30us']:.3f} (goal within 3%); "
        f"{len(errors)} errors; {time.time() - t0:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
