"""MLIR throughput on this machine: export cost per workload, and modules parsed + featurized per second.

    .venv/bin/python benchmarks/mlir_featurize.py [--shapes 10] [--repeats 5]

1. exports ``--shapes`` seeded shapes of every op of the main job's sweep (float32 and float16) with
   torch-mlir (``features.mlir.export_workload``) and prints the median seconds per export (per
   op and overall), which sets the cost of ``features.mlir.enabled`` in the main job;
2. parses + featurizes those modules (op graph, tabular histogram, PyG Data, token ids) with the
   in-memory caches cleared before every pass, ``--repeats`` passes, and prints the median
   modules per second (and per encoding).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from pathlib import Path

from omegaconf import OmegaConf

from data.hardware import HardwareRegistry
from data.sweep import random_sweep
from features.encoders import GraphEncoder, TokenEncoder, op_histogram
from features.mlir import export_workload, graph

ROOT = Path(__file__).resolve().parent.parent


def _sweep(n: int) -> list[dict]:
    """The main job's shape ranges (conf/collect/default.yaml), ``n`` shapes per op."""
    cfg = OmegaConf.load(ROOT / "conf" / "collect" / "default.yaml")
    ops = {op: {**spec, "n": n} for op, spec in OmegaConf.to_container(cfg.sweep.ops).items()}
    return random_sweep(
        ops, ["float32", "float16"], seed=0, max_flops=cfg.sweep.max_flops, max_bytes=cfg.sweep.max_bytes
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", type=int, default=10, help="shapes per op")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")

    workloads = _sweep(args.shapes)
    export_workload(**{k: workloads[0][k] for k in ("op", "params", "dtype")})  # warm-up (imports, first trace)
    texts, per_op = [], {}
    for w in workloads:
        t0 = time.perf_counter()
        texts.append(export_workload(w["op"], w["params"], w["dtype"]))
        per_op.setdefault(w["op"], []).append(time.perf_counter() - t0)
    all_s = [s for v in per_op.values() for s in v]
    print(
        f"export (torch-mlir make_fx + FX importer, linalg-on-tensors): {len(texts)} workloads, "
        f"median {statistics.median(all_s) * 1e3:.1f} ms per workload"
    )
    for op, v in per_op.items():
        print(f"  {op:10s} median {statistics.median(v) * 1e3:6.1f} ms  (n={len(v)})")

    registry = HardwareRegistry.from_dir()
    genc, tenc = GraphEncoder(registry), TokenEncoder()
    stages = {"parse": [], "histogram": [], "graph": [], "tokens": [], "all": []}
    for _ in range(args.repeats):
        graph._parse_cached.cache_clear()
        t = {k: 0.0 for k in stages}
        start = time.perf_counter()
        for text in texts:
            t0 = time.perf_counter()
            g = graph.parse_mlir(text)
            t1 = time.perf_counter()
            op_histogram(g)
            t2 = time.perf_counter()
            genc.encode(g, "H100-SXM")
            t3 = time.perf_counter()
            tenc.encode(g)
            t4 = time.perf_counter()
            t["parse"] += t1 - t0
            t["histogram"] += t2 - t1
            t["graph"] += t3 - t2
            t["tokens"] += t4 - t3
        t["all"] = time.perf_counter() - start
        for k in stages:
            stages[k].append(len(texts) / t[k])
    nodes = statistics.median(len(graph.parse_mlir(x).nodes) for x in texts)
    print(
        f"parse + featurize (all three encodings, caches cleared): {len(texts)} modules "
        f"(median {nodes:.0f} ops), median of {args.repeats} passes:"
    )
    for k, v in stages.items():
        print(f"  {k:10s} {statistics.median(v):8.1f} modules/s")


if __name__ == "__main__":
    main()
