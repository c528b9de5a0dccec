"""Whole tuning runs replayed on the shared Kernel Tuner caches, and the model's top-1 pick with 10 % measured.

    nice -n 10 .venv/bin/python benchmarks/tuning_sim.py [--seeds 5] [--budget 0.05] [--caches gemm/RTX_2080_Ti,...]
        [--kt-strategies random_sample,genetic_algorithm,simulated_annealing,bayes_opt] [--top1-seeds 5]
        [--skip-tuning] [--skip-top1] [--mlflow-uri sqlite:///outputs/mlflow.db] [--out outputs/tuning_sim]

Data: every cache under ``../shared/data/kerneltuner`` (CLBlast GEMM on 3 GPUs, a 2-D convolution on 4), imported
with ``data.importers.kerneltuner``; the search space of a cache is its successful configurations (as in Kernel
Tuner's simulation mode, which drops failed ones), the cache is the measure function.

**Part 1, tuning** (``models.tuning``), per cache and seed, ``budget`` = a fraction of the space:

* ``model_thompson_transfer``: :func:`models.tuning.tune`, bootstrap Thompson sampling over a 4-member ensemble,
  features = tunables + kernel structure + spec-relative occupancy / waves + what the OTHER GPUs of the same
  kernel measured for each configuration (their caches are given whole; half the members learn a factor over
  that prior); first batch half from the prior (``models.tuning.CacheSpace``);
* ``model_ei_transfer``: the same with expected improvement from the conformal-calibrated ensemble;
* ``model_thompson_alone`` / ``model_ei_alone``: no other GPU (tunables + structure + spec-relative features);
* ``random``: uniform random search through the same loop;
* ``kt_<strategy>``: Kernel Tuner 1.5's own strategies replaying the cache in its simulation mode
  (``kernel_tuner.tune_cache``); a strategy may stop before the budget (its own iteration limits).

Printed per cache and method: the median over seeds of the measurements needed to get within 1 %, 2 % and 5 % of
the cache's best (``>B`` = not within the budget in more than half the seeds), the fraction of seeds within 2 %
at the budget, and the median best found / the cache's best.

**Part 2, top-1 with 10 % measured** (the issue's protocol), per cache and seed: a seeded 10 % of the target
GPU's configurations are measured, the rest are ranked. ``current_xgb_with_others`` / ``current_xgb_alone`` =
the current evaluation's model (``models.public_eval.evaluate_kerneltuner``: ``models.tree.XGBoostModel``,
400 trees, on the raw tunables + the GPU's spec features; with every configuration of the other GPUs, or on the
10 % alone); ``prior`` = the other GPUs' geometric-mean relative runtime, no target measurement; ``spec_prior`` = one
model fitted on the other GPUs with the spec-relative features only (``models.tuning.transfer_prior``), no target
measurement;
``stacked_xgb`` = XGBoost fitted on the 10 % with the tuning features + the other GPUs' measurements, as a
factor over that prior (``base_columns``); ``mixed_xgb_x4`` = the tuner's model: the mean log prediction of four
XGBoost models on the same features, two as factors over the prior and two without
(``models.tuning.transfer_model_factory``); ``physics_xgb_alone`` = XGBoost on the 10 % with the tuning
features, no other GPU; ``ranker_lambdamart`` = ``models.ranking.RankingModel`` over the same prior. Printed:
top-1 / top-5 slowdown among the other 90 % (``models.evaluate.topk_slowdown``), Kendall tau, and
``best_measured`` (the best of the 10 % / the best of all) beside ``pick`` (min(best measured, the model's top-1)
/ the best of all: what a tuner that trusts the model for one more measurement ends with).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from data.hardware import HardwareRegistry  # noqa: E402
from data.importers import data_root  # noqa: E402
from data.importers.kerneltuner import import_kerneltuner  # noqa: E402
from features.public_data import config_frame, spec_features  # noqa: E402
from models.evaluate import ranking_metrics  # noqa: E402
from models.ranking import RankingModel  # noqa: E402
from models.tree import XGBoostModel  # noqa: E402
from models.tuning import (
    CacheSpace,
    kernel_tuner_run,
    measurements_to_within,  # noqa: E402
    transfer_model_factory,
    tune,
)

TOLERANCES = (0.01, 0.02, 0.05)


def machine() -> str:
    """CPU model, cores, 1-minute load and Python: what the timings in a table ran on."""
    from data.hardware import _cpu_model_name

    return (
        f"{_cpu_model_name()} ({platform.machine()}), {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
        f"Python {platform.python_version()}"
    )


def median_steps(values, budget: int) -> str:
    v = np.sort(np.asarray(values, float))
    med = np.median(v)
    return f">{budget}" if not np.isfinite(med) else f"{med:.0f}"


def tuning_part(rows, registry, caches, args, out: Path) -> pd.DataFrame:
    records = []
    root = data_root(args.data_root)
    for cache in caches:
        sel = rows[rows["cache"] == cache]
        hw, op = sel["hardware"].iloc[0], sel["op"].iloc[0]
        t0 = time.perf_counter()
        transfer = CacheSpace.from_rows(rows, hw, registry, op=op)
        alone = CacheSpace.from_rows(rows, hw, registry, op=op, transfer=False)
        n = len(transfer.runtime_ms)
        budget = int(np.ceil(args.budget * n))
        batch = max(4, int(np.ceil(budget / args.rounds)))
        print(
            f"\n{cache} ({hw}, {op}): {n} configurations, best {transfer.best_ms:.4g} ms, budget {budget} "
            f"({args.budget:.0%}), batch {batch}; spaces built in {time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        methods = {
            "model_thompson_transfer": ("thompson", transfer),
            "model_ei_transfer": ("ei", transfer),
            "model_thompson_alone": ("thompson", alone),
            "model_ei_alone": ("ei", alone),
            "random": ("random", alone),
        }
        for seed in range(args.seeds):
            for name, (strategy, space) in methods.items():
                t0 = time.perf_counter()
                res = tune(
                    space.features,
                    space.measure,
                    budget,
                    batch,
                    strategy,
                    seed,
                    model_factory=space.model_factory,
                    prior=space.prior,
                )
                records.append(
                    _record(
                        cache,
                        name,
                        seed,
                        res.history["runtime_ms"].to_numpy(float),
                        transfer.best_ms,
                        budget,
                        time.perf_counter() - t0,
                    )
                )
            for strategy in args.kt_strategies:
                t0 = time.perf_counter()
                t = kernel_tuner_run(root / "kerneltuner" / f"{cache}.json.gz", strategy, budget, seed, out / "caches")
                records.append(
                    _record(cache, f"kt_{strategy}", seed, t, transfer.best_ms, budget, time.perf_counter() - t0)
                )
            done = pd.DataFrame([r for r in records if r["cache"] == cache and r["seed"] == seed])
            print(f"  seed {seed}: " + ", ".join(f"{r.method} {r.to_2pct:.0f}" for r in done.itertuples()), flush=True)
    return pd.DataFrame(records)


def _record(cache, method, seed, runtimes, best, budget, seconds) -> dict:
    r = {
        "cache": cache,
        "method": method,
        "seed": seed,
        "budget": budget,
        "measured": len(runtimes),
        "best_found": float(np.nanmin(runtimes)) / best if np.isfinite(runtimes).any() else np.inf,
        "seconds": seconds,
    }
    for tol in TOLERANCES:
        r[f"to_{round(tol * 100)}pct"] = measurements_to_within(runtimes, best, tol)
    return r


def tuning_table(df: pd.DataFrame) -> str:
    lines = [
        "| cache | method | to 1 % | to 2 % | to 5 % | within 2 % at budget | best found / best | s per run |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for (cache, method), g in df.groupby(["cache", "method"], sort=False):
        b = int(g["budget"].iloc[0])
        lines.append(
            f"| {cache} | {method} | {median_steps(g['to_1pct'], b)} | {median_steps(g['to_2pct'], b)} | "
            f"{median_steps(g['to_5pct'], b)} | {np.isfinite(g['to_2pct']).mean():.0%} | "
            f"{g['best_found'].median():.4f} | {g['seconds'].median():.1f} |"
        )
    return "\n".join(lines)


def tuning_summary(df: pd.DataFrame) -> str:
    """Per method over the caches: in how many every seed got within 2 % at the budget, and the median of the
    per-cache median measurements to 2 % (censored runs count as not reached)."""
    lines = [
        "| method | caches with every seed within 2 % | median over caches of the median to 2 % |",
        "|---|---:|---:|",
    ]
    n = df["cache"].nunique()
    for method, g in df.groupby("method", sort=False):
        per_cache = g.groupby("cache")["to_2pct"]
        all_in = int(per_cache.apply(lambda v: np.isfinite(v).all()).sum())
        med = np.median(per_cache.median())
        lines.append(f"| {method} | {all_in} / {n} | {'not reached' if not np.isfinite(med) else f'{med:.0f}'} |")
    return "\n".join(lines)


def top1_summary(df: pd.DataFrame) -> str:
    """Mean top-1 and pick per method over the GEMM caches and over the convolution caches."""
    df = df.assign(kernel=df["cache"].str.split("/").str[0])
    lines = [
        "| method | " + " | ".join(f"{k}: top-1 / pick / worst top-1" for k in sorted(df["kernel"].unique())) + " |",
        "|---|" + "---|" * df["kernel"].nunique(),
    ]
    for method, g in df.groupby("method", sort=False):
        cells = [
            f"{h['top1'].mean():.3f} / {h['pick'].mean():.3f} / {h['top1'].max():.3f}" for _, h in g.groupby("kernel")
        ]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def top1_part(rows, registry, caches, args) -> pd.DataFrame:
    records = []
    for cache in caches:
        sel = rows[rows["cache"] == cache]
        hw, op = sel["hardware"].iloc[0], sel["op"].iloc[0]
        space = CacheSpace.from_rows(rows, hw, registry, op=op)
        alone = CacheSpace.from_rows(rows, hw, registry, op=op, transfer=False)
        kernel = rows[(rows["op"] == op) & (rows["status"] == "ok")].reset_index(drop=True)
        hw_cols = [
            c for c in spec_features(kernel.head(1), registry).columns if c.startswith("hw_") or c.startswith("op_")
        ]
        X_cur = pd.concat([config_frame(kernel), spec_features(kernel, registry)[hw_cols]], axis=1)
        y_cur = kernel["runtime_ms"].to_numpy(float)
        mine = np.flatnonzero((kernel["hardware"] == hw).to_numpy())
        others = np.flatnonzero((kernel["hardware"] != hw).to_numpy())
        # the space's rows are the target's ok rows in the same order as ``mine``
        assert np.allclose(space.runtime_ms, y_cur[mine])
        y = space.runtime_ms
        n = len(y)
        for seed in range(args.top1_seeds):
            rng = np.random.default_rng(seed)
            sup = np.sort(rng.choice(n, size=int(round(0.1 * n)), replace=False))
            test = np.setdiff1d(np.arange(n), sup)
            preds = {}
            t0 = time.perf_counter()
            cur = XGBoostModel(n_estimators=400, n_jobs=1, random_state=seed)
            preds["current_xgb_with_others"] = cur.fit(
                X_cur.iloc[np.concatenate([mine[sup], others])], y_cur[np.concatenate([mine[sup], others])]
            ).predict(X_cur.iloc[mine[test]])
            cur = XGBoostModel(n_estimators=400, n_jobs=1, random_state=seed)
            preds["current_xgb_alone"] = cur.fit(X_cur.iloc[mine[sup]], y[sup]).predict(X_cur.iloc[mine[test]])
            F, A = space.features, alone.features
            preds["prior"] = space.prior[test]
            preds["spec_prior"] = F["prior_rel"].to_numpy()[test]
            stacked = XGBoostModel(
                n_estimators=300,
                learning_rate=0.05,
                max_depth=6,
                n_jobs=1,
                random_state=seed,
                base_columns="prior_base",
            )
            preds["stacked_xgb"] = stacked.fit(F.iloc[sup], y[sup]).predict(F.iloc[test])
            preds["mixed_xgb_x4"] = np.mean(
                [
                    np.log(transfer_model_factory(seed * 10 + b).fit(F.iloc[sup], y[sup]).predict(F.iloc[test]))
                    for b in range(4)
                ],
                axis=0,
            )
            physics = XGBoostModel(n_estimators=300, learning_rate=0.05, max_depth=6, n_jobs=1, random_state=seed)
            preds["physics_xgb_alone"] = physics.fit(A.iloc[sup], y[sup]).predict(A.iloc[test])
            ranker = RankingModel("lambdamart", base_columns="prior_base", random_state=seed)
            preds["ranker_lambdamart"] = ranker.fit(F.iloc[sup], y[sup]).predict(F.iloc[test])
            best_measured = y[sup].min() / y.min()
            for name, p in preds.items():
                m = ranking_metrics(y[test], p, (1, 5))
                pick = min(y[sup].min(), y[test][np.argsort(p, kind="stable")[0]]) / y.min()
                records.append(
                    {
                        "cache": cache,
                        "method": name,
                        "seed": seed,
                        "top1": m["top1_slowdown"],
                        "top5": m["top5_slowdown"],
                        "kendall_tau": m["kendall_tau"],
                        "best_measured": best_measured,
                        "pick": pick,
                    }
                )
            done = records[-len(preds) :]
            print(
                f"  {cache} seed {seed}: "
                + ", ".join(f"{r['method']} {r['top1']:.3f}" for r in done)
                + f" ({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
    return pd.DataFrame(records)


def top1_table(df: pd.DataFrame) -> str:
    lines = [
        "| cache | method | top-1 | top-5 | Kendall tau | best measured | pick | worst top-1 |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for (cache, method), g in df.groupby(["cache", "method"], sort=False):
        lines.append(
            f"| {cache} | {method} | {g['top1'].mean():.3f} | {g['top5'].mean():.3f} | "
            f"{g['kendall_tau'].mean():.3f} | {g['best_measured'].mean():.3f} | {g['pick'].mean():.3f} | "
            f"{g['top1'].max():.3f} |"
        )
    return "\n".join(lines)


def log_mlflow(uri: str, tuning: pd.DataFrame | None, top1: pd.DataFrame | None, params: dict) -> None:
    import mlflow

    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("tuning_sim")
    with mlflow.start_run(run_name="tuning_sim"):
        mlflow.log_params(params)
        for frame, cols in (
            (tuning, ("to_1pct", "to_2pct", "to_5pct", "best_found")),
            (top1, ("top1", "top5", "kendall_tau", "pick")),
        ):
            if frame is None:
                continue
            agg = frame.groupby(["cache", "method"])[list(cols)].median()
            for (cache, method), row in agg.iterrows():
                key = f"{cache.replace('/', '.')}.{method}"
                mlflow.log_metrics({f"{key}.{c}": float(row[c]) for c in cols if np.isfinite(row[c])})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--top1-seeds", type=int, default=5)
    ap.add_argument("--budget", type=float, default=0.05, help="fraction of the space measured by each tuner")
    ap.add_argument("--rounds", type=int, default=15, help="batches per tuning run (batch = budget / rounds)")
    ap.add_argument("--caches", default=None, help="comma list like gemm/RTX_2080_Ti (default: every cache)")
    ap.add_argument("--kt-strategies", default="random_sample,genetic_algorithm,simulated_annealing,bayes_opt")
    ap.add_argument("--skip-tuning", action="store_true")
    ap.add_argument("--skip-top1", action="store_true")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--out", default="outputs/tuning_sim")
    ap.add_argument("--mlflow-uri", default=None, help="log the medians to this MLflow tracking URI")
    args = ap.parse_args()
    args.kt_strategies = [s for s in args.kt_strategies.split(",") if s]
    if not 0 < args.budget <= 1:
        sys.exit(f"error: --budget must be a fraction in (0, 1], got {args.budget}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    registry = HardwareRegistry.from_dir()
    t0 = time.perf_counter()
    rows = import_kerneltuner(args.data_root, registry=registry)
    rows["cache"] = [json.loads(m)["file"].removeprefix("kerneltuner/").removesuffix(".json.gz") for m in rows["meta"]]
    caches = sorted(rows["cache"].unique()) if args.caches is None else args.caches.split(",")
    unknown = sorted(set(caches) - set(rows["cache"]))
    if unknown:
        sys.exit(f"error: unknown cache(s) {', '.join(unknown)}; known: {', '.join(sorted(rows['cache'].unique()))}")
    print(f"machine: {machine()}; {len(rows)} rows imported in {time.perf_counter() - t0:.0f} s; caches {caches}")
    tuning = top1 = None
    if not args.skip_tuning:
        tuning = tuning_part(rows, registry, caches, args, out)
        tuning.to_csv(out / "tuning_runs.csv", index=False)
        print(
            f"\n## Tuning: measurements to reach the cache's best within 1 / 2 / 5 % (median of {args.seeds} seeds), "
            f"budget {args.budget:.0%} of the space\n"
        )
        print(tuning_table(tuning))
        print("\n" + tuning_summary(tuning))
    if not args.skip_top1:
        print("\n## Top-1 with 10 % measured (mean of seeds)\n", flush=True)
        top1 = top1_part(rows, registry, caches, args)
        top1.to_csv(out / "top1.csv", index=False)
        print()
        print(top1_table(top1))
        print("\n" + top1_summary(top1))
    if args.mlflow_uri:
        log_mlflow(
            args.mlflow_uri,
            tuning,
            top1,
            {"seeds": args.seeds, "top1_seeds": args.top1_seeds, "budget": args.budget, "machine": machine()},
        )
    print(
        f"\nwritten: {out}/tuning_runs.csv, {out}/top1.csv; machine: {machine()}; "
        f"total {time.perf_counter() - t0:.0f} s"
    )


if __name__ == "__main__":
    main()
