"""Configs/second of the sim-systolic backend (SCALE-Sim) on a seeded GEMM/conv sweep; prints what it measured.

.venv/bin/python benchmarks/sim_systolic_throughput.py [--hardware TPUv1-like] [--n 8] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from data.backends.sim_systolic import SimSystolicBackend
from data.hardware import HardwareRegistry
from data.sweep import random_sweep

OPS = {
    "matmul": {"n": 0, "params": {"m": [16, 1024], "n": [16, 1024], "k": [16, 1024]}},
    "conv2d": {
        "n": 0,
        "params": {
            "batch": [1, 4],
            "c_in": [3, 128],
            "c_out": [8, 128],
            "h": [7, 56],
            "w": [7, 56],
            "kernel": {"choice": [1, 3]},
            "stride": {"choice": [1, 2]},
            "padding": 1,
        },
    },
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hardware", default="TPUv1-like")
    ap.add_argument("--n", type=int, default=8, help="shapes per op")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    backend = SimSystolicBackend(HardwareRegistry.from_dir().get(args.hardware))
    ops = {op: {**spec, "n": args.n} for op, spec in OPS.items()}
    work = random_sweep(ops, ["float16"], seed=args.seed)
    backend.measure(work[0])  # import + first-call warm-up
    times, cycles = [], []
    for w in work:
        t0 = time.perf_counter()
        row = backend.measure(w)
        times.append(time.perf_counter() - t0)
        assert row["status"] == "ok", row["error"]
        cycles.append(row["latency_cycles"])
    t = np.asarray(times)
    print(
        f"sim-systolic on {args.hardware}: {len(work)} configs (matmul + conv2d, seed {args.seed}) in {t.sum():.1f} s "
        f"= {len(work) / t.sum():.2f} configs/s; per config median {np.median(t):.3f} s, max {t.max():.2f} s; "
        f"simulated cycles median {np.median(cycles):.0f}"
    )


if __name__ == "__main__":
    main()
