"""How a kernel's achieved rate grows with its size, per GPU, on the shipped pack of real measurements.

    python benchmarks/achieved_rate.py [--op conv2d] [--source neusight] [--dtype float32]

For every ok row of ``--op`` from ``--source`` in the pack (``reference/``, what ``make run`` trains on): the achieved
rate = FLOPs / runtime / the GPU's peak for the row's dtype (``data.hardware``, the spec sheet; the direct count of
``data.workloads.count_cost``, so a Winograd convolution can exceed 1), as median and 90th percentile per GPU and
decade-half of FLOPs. This is what check (d) of ``docs/extrapolation.md`` asks a model to extrapolate: the rows under
1e9 FLOPs it trains on against the rows over 1e10 it is judged on. Runtimes include the timing harness's launch
floor (NeuSight: one call between two CUDA events).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import pandas as pd

from data.hardware import HardwareRegistry
from data.reference import load_reference

BINS = [0, 8, 8.5, 9, 9.5, 10, 10.5, 11, 13]  # log10 FLOPs


def rates(rows: pd.DataFrame, registry: HardwareRegistry) -> pd.DataFrame:
    peak = {(h, d): registry.get(h).peak_flops(d) for h, d in rows[["hardware", "dtype"]].drop_duplicates().to_numpy()}
    out = rows.assign(peak=[peak[(h, d)] for h, d in zip(rows["hardware"], rows["dtype"])])
    out["rate"] = out["flops"] / (out["runtime_ms"] * 1e-3) / out["peak"]
    out["log10_flops"] = pd.cut(np.log10(out["flops"]), BINS)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", default="conv2d")
    ap.add_argument("--source", default="neusight", help="source name prefix in the pack")
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args(argv)
    pack = load_reference()
    rows = pack[
        (pack["status"] == "ok")
        & (pack["op"] == args.op)
        & (pack["dtype"] == args.dtype)
        & pack["source"].str.startswith(args.source)
    ]
    if rows.empty:
        print(f"achieved_rate: no ok {args.op} {args.dtype} rows from {args.source!r} in the pack", file=sys.stderr)
        return 2
    r = rates(rows, HardwareRegistry.from_dir())
    table = r.groupby(["log10_flops", "hardware"], observed=True)["rate"].agg(
        n="size", median="median", p90=lambda s: s.quantile(0.9)
    )
    print(f"{args.op} {args.dtype} from {args.source}: achieved FLOP rate / spec peak ({len(r)} rows)")
    print(table.unstack("hardware").round(2).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
