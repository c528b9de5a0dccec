"""Collection throughput per backend (configs/second) and the CPU noise floor.

    .venv/bin/python benchmarks/collect_throughput.py                      # defaults below
    .venv/bin/python benchmarks/collect_throughput.py --n 10 --repeats 3 --engine ray

For each backend (the configs in ``conf/collect/backend/``; ``--backends`` picks), runs the same sweep
(``--workload`` family, Sobol', ``--n`` shapes per op) through ``data.engine.run_sweep`` into a fresh
sharded dataset and prints configs/second = rows committed / wall seconds (shard writes included).

Noise floor of the CPU backend, over the same sweep measured ``--repeats`` times:
  * within-measurement CV: ``runtime_cv`` (std/mean of the block times inside one measurement), median
    over workloads;
  * run-to-run CV: std/mean of a workload's ``runtime_ms`` across the repeated sweeps, median over
    workloads. This is the figure that bounds how well any model can predict a CPU timing.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from hydra.utils import instantiate
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from data.engine import make_engine, run_sweep  # noqa: E402
from data.schema import row_key  # noqa: E402
from data.store import ShardedDataset  # noqa: E402
from data.sweep import make_sweep  # noqa: E402

GROUPS = ROOT / "conf" / "collect"


def backend_from_conf(name: str, overrides: list[str]):
    cfg = OmegaConf.load(GROUPS / "backend" / f"{name}.yaml")
    cfg.source = f"benchmark-{name}"
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist([o for o in overrides if o.split("=")[0] in cfg]))
    return instantiate(cfg)


def sweep(workload: str, n: int, seed: int) -> list[dict]:
    wl = OmegaConf.load(GROUPS / "workload" / f"{workload}.yaml")
    return make_sweep(
        OmegaConf.to_container(wl.ops),
        list(wl.dtypes),
        n=n,
        kind="sobol",
        seed=seed,
        max_flops=float(wl.get("max_flops", float("inf"))),
        max_bytes=float(wl.get("max_bytes", float("inf"))),
    )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", nargs="+", default=["cpu", "sim-roofline"])
    ap.add_argument("--workload", default="all")
    ap.add_argument("--n", type=int, default=8, help="shapes per op")
    ap.add_argument("--repeats", type=int, default=3, help="CPU sweeps for the run-to-run noise floor")
    ap.add_argument("--engine", default="local", choices=["local", "ray"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("overrides", nargs="*", help="backend settings, e.g. num_threads=2 timer=blocked")
    args = ap.parse_args(argv)
    work = sweep(args.workload, args.n, args.seed)
    print(
        f"machine: {platform.node()} {platform.processor() or platform.machine()}, python {platform.python_version()}"
    )
    print(f"sweep: workload={args.workload} sobol n={args.n}/op -> {len(work)} configs, engine={args.engine}")
    results, cpu_runs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.backends:
            backend = backend_from_conf(name, args.overrides)
            _ = backend.hardware  # detect the CPU (a few seconds) outside the timed sweep
            runs = args.repeats if name == "cpu" else 1
            for r in range(runs):
                engine = make_engine(args.engine, **({"num_cpus": 2} if args.engine == "ray" else {}))
                if args.engine == "ray":
                    engine._init()  # start Ray outside the timed sweep
                t0 = time.perf_counter()
                stats = run_sweep(backend, work, Path(tmp) / f"{name}-{r}", engine, progress=False)
                wall = time.perf_counter() - t0
                results.append(
                    {
                        "backend": name,
                        "run": r,
                        "configs": stats["committed"],
                        "errors": stats["errors"],
                        "seconds": wall,
                        "configs_per_s": stats["committed"] / wall,
                    }
                )
                if name == "cpu":
                    cpu_runs.append(ShardedDataset(Path(tmp) / f"{name}-{r}").read())
    table = pd.DataFrame(results)
    print("\nthroughput (configs/second, shard writes included):")
    print(
        table.groupby("backend")
        .agg(
            configs=("configs", "first"),
            runs=("run", "count"),
            errors=("errors", "sum"),
            configs_per_s=("configs_per_s", "median"),
        )
        .to_string(float_format="%.2f")
    )
    if cpu_runs:
        ok = [d[d["status"] == "ok"] for d in cpu_runs]
        within = pd.concat(ok)["runtime_cv"].dropna()
        print(f"\nCPU noise floor over {len(ok[0])} configs x {len(ok)} sweeps:")
        print(
            f"  within-measurement CV (runtime_cv, block times): median {within.median():.3f}, "
            f"p90 {within.quantile(0.9):.3f}"
        )
        if len(ok) > 1:
            keyed = pd.concat(
                [d.assign(_key=[row_key(x) for x in d.to_dict("records")], run=i) for i, d in enumerate(ok)]
            )
            g = keyed.groupby("_key")["runtime_ms"]
            cv = (g.std(ddof=1) / g.mean())[g.count() > 1]
            print(f"  run-to-run CV (runtime_ms across sweeps):  median {cv.median():.3f}, p90 {cv.quantile(0.9):.3f}")
            by_op = keyed.assign(cv=keyed["_key"].map(cv)).groupby("op")["cv"].median()
            print("  run-to-run CV by op (median): " + ", ".join(f"{op} {v:.3f}" for op, v in by_op.items()))
        print(f"  repeats per measurement (blocks): median {pd.concat(ok)['runtime_repeats'].median():.0f}")


if __name__ == "__main__":
    main()
