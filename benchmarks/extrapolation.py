"""Extrapolation checks (a)-(f) of ``models.extrapolation``: the physics model beside the baselines, same rows.

    python benchmarks/extrapolation.py --check a|b|c|d|e|f|all [--models physics,xgb,rf,xgb_residual,roofline]
        [--fast] [--sample-rows N] [--draws 3] [--cache outputs/extrapolation] [--sources neusight,hopper[,deepbench]]

Imports the public datasets once (NeuSight 151k rows, the H200 set; ``--sources`` adds DeepBench where its
importer exists), featurizes them once (``features.physics`` for the physics model, ``features.tabular`` for the
baselines) and caches rows and frames as parquet under ``--cache``. Models come from ``conf/model/<name>.yaml``
(seed 0, one thread); ``--fast`` shrinks the baselines (rf 100 trees, xgb / xgb_residual 300 rounds) for a quicker
run and says so; ``--sample-rows N`` keeps N random NeuSight rows (every model sees the same rows). Prints MAPE /
MedAPE per GPU, per op family (and per dtype), the physics model's in-domain share and interval coverage, the goal
of each check, and writes every result to ``<cache>/results_<check>.json`` and a markdown table to
``<cache>/results_<check>.md`` (the tables of ``docs/extrapolation.md``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np
import pandas as pd

GOALS = {
    "a": "MAPE <= 10% and no op family above 15%",
    "b": "worst GPU MAPE <= 10%",
    "c": "MAPE <= 10%",
    "d": "worst GPU MAPE <= 10%",
    "e": "MAPE <= 15%",
    "f": "MAPE <= 8% on every GPU with k = 100",
}
MODELS = ("physics", "xgb", "rf", "xgb_residual", "roofline")


def load_rows(sources: list[str], cache: Path) -> pd.DataFrame:
    import importlib

    frames = []
    for src in sources:
        path = cache / f"rows_{src}.parquet"
        if not path.exists():
            t0 = time.perf_counter()
            module = importlib.import_module(f"data.importers.{src}")
            rows = getattr(module, f"import_{src}")()
            rows.to_parquet(path)
            print(f"imported {src}: {len(rows)} rows in {time.perf_counter() - t0:.0f} s -> {path}", flush=True)
        frames.append(pd.read_parquet(path))
    rows = pd.concat(frames, ignore_index=True)
    return rows[rows["status"] == "ok"].reset_index(drop=True)


def load_frames(rows: pd.DataFrame, sources: list[str], cache: Path, registry) -> dict[str, pd.DataFrame]:
    from features.physics import PhysicsFeaturizer
    from models.public_eval import spec_features

    out = {}
    tag = "_".join(sources)
    for name, build in (
        ("physics", lambda r: PhysicsFeaturizer(registry).transform(r)),
        ("tabular", lambda r: spec_features(r, registry)),
    ):
        path = cache / f"frame_{name}_{tag}.parquet"
        if path.exists():  # reused when it has the rows and the columns today's featurizer writes
            frame = pd.read_parquet(path)
            if len(frame) == len(rows) and list(frame.columns) == list(build(rows.head(1)).columns):
                out[name] = frame
                continue
        t0 = time.perf_counter()
        out[name] = build(rows).reset_index(drop=True)
        out[name].to_parquet(path)
        print(f"featurized {name}: {out[name].shape} in {time.perf_counter() - t0:.0f} s -> {path}", flush=True)
    return out


def candidates(names: list[str], fast: bool):
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from models.extrapolation import Candidate

    out = []
    for name in names:
        cfg = OmegaConf.merge({"seed": 0}, OmegaConf.load(ROOT / "conf" / "model" / f"{name}.yaml"))
        params = OmegaConf.to_container(cfg, resolve=True)[name]
        target = params.pop("_target_")
        if "n_jobs" in params:
            params["n_jobs"] = 1
        if "base" in params:
            params["base"]["n_jobs"] = 1
        if fast and name == "rf":
            params["n_estimators"] = 100
        if fast and name == "xgb":
            params["n_estimators"] = 300
        if fast and name == "xgb_residual":
            params["base"]["n_estimators"] = 300
        spec = {"_target_": target, **params}
        out.append(
            Candidate(
                name,
                lambda spec=spec: instantiate(spec, _convert_="all"),
                "physics" if name.startswith("physics") else "tabular",
            )
        )
    return out


def table(result: dict) -> str:
    m = result["metrics"]
    lines = []
    for scope, v in m.items():
        extra = "".join(f" {c} {v[c]:.2f}" for c in ("in_domain", "covered") if c in v)
        lines.append(f"    {scope:28s} n {int(v['n']):6d}  MAPE {v['mape']:7.1f}  MedAPE {v['medape']:6.1f}{extra}")
    return "\n".join(lines)


def verdict_lines(results: list[dict]) -> list[str]:
    """One line per model: the check's goal met or not (``models.extrapolation.verdict``; check f at k = 100 only)."""
    from models.extrapolation import verdict

    out = []
    for r in results:
        decided = verdict(r)
        if decided is not None:
            met, what = decided
            out.append(f"  {r['model']:14s} {what}: {'met' if met else 'NOT met'}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", default="all", help="a, b, c, d, e, f or all (comma-separated allowed)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--sources", default="neusight,hopper")
    ap.add_argument("--cache", default=str(ROOT / "outputs" / "extrapolation"))
    ap.add_argument("--draws", type=int, default=3, help="random k-row draws per GPU in check f")
    ap.add_argument("--fast", action="store_true", help="smaller baselines (rf 100 trees, xgb 300 rounds)")
    ap.add_argument(
        "--sample-rows",
        type=int,
        default=None,
        help="keep this many NeuSight rows (seeded random sample; other sources stay whole)",
    )
    ap.add_argument(
        "--render",
        action="store_true",
        help="only rewrite results_<check>.md from the results_<check>.json already in --cache",
    )
    args = ap.parse_args(argv)
    from data.hardware import HardwareRegistry
    from models.extrapolation import CHECKS, NAMES, markdown, run_check

    checks = list(CHECKS) if args.check == "all" else [c.strip() for c in args.check.split(",")]
    bad = [c for c in checks if c not in CHECKS]
    if bad:
        print(f"error: unknown check(s) {', '.join(bad)} (a, b, c, d, e, f, all)", file=sys.stderr)
        return 2
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    missing = [m for m in names if not (ROOT / "conf" / "model" / f"{m}.yaml").exists()]
    if missing:
        print(f"error: no conf/model/{missing[0]}.yaml", file=sys.stderr)
        return 2
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    if args.render:
        for check in checks:
            saved = cache / f"results_{check}.json"
            if saved.exists():
                (cache / f"results_{check}.md").write_text(markdown(json.loads(saved.read_text())["results"]) + "\n")
                print(f"wrote {cache / f'results_{check}.md'}")
        return 0
    sources = [s.strip() for s in args.sources.split(",")]
    registry = HardwareRegistry.from_dir()
    rows = load_rows(sources, cache)
    frames = load_frames(rows, sources, cache, registry)
    if args.sample_rows:
        neusight = np.flatnonzero(rows["source"].str.startswith("neusight").to_numpy())
        drop = np.random.default_rng(0).permutation(neusight)[args.sample_rows :]
        keep = np.setdiff1d(np.arange(len(rows)), drop)
        rows = rows.iloc[keep].reset_index(drop=True)
        frames = {k: v.iloc[keep].reset_index(drop=True) for k, v in frames.items()}
    print(
        f"rows: {len(rows)} ({', '.join(f'{h} {n}' for h, n in rows['hardware'].value_counts().sort_index().items())})"
        f"; models: {', '.join(names)}{' (--fast)' if args.fast else ''}"
        f"{f'; NeuSight sampled to {args.sample_rows} rows' if args.sample_rows else ''}",
        flush=True,
    )
    for check in checks:
        t0 = time.perf_counter()
        results = run_check(check, rows, frames, candidates(names, args.fast), registry, draws=args.draws)
        print(f"\n== check ({check}) {NAMES[check]}: goal {GOALS[check]}  [{time.perf_counter() - t0:.0f} s]")
        for r in results:
            k = f", k = {r['k']}" if r["k"] is not None else ""
            print(f"  {r['model']}{k}  ({r['seconds']:.0f} s)\n{table(r)}")
        print("\n".join(verdict_lines(results)), flush=True)
        (cache / f"results_{check}.md").write_text(markdown(results) + "\n")
        (cache / f"results_{check}.json").write_text(
            json.dumps(
                {
                    "check": check,
                    "goal": GOALS[check],
                    "fast": args.fast,
                    "sources": sources,
                    "sample_rows": args.sample_rows,
                    "results": results,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
