"""How many NeuSight rows the model of record should train on: the physics model fitted on samples of the shipped pack.

    python benchmarks/reference_sample.py [--sizes 300:300,3000:300] [--seed 0] [--no-held-out]
                                          [--set group_rows=0 ...]

``make run`` trains on every H200 and DeepBench row of the pack and a seeded sample of NeuSight's 151k rows per GPU,
op and dtype (``collect.backend.reference.cap`` in ``conf/collect/default.yaml``). Each ``--sizes`` entry
``G:C`` is such a sample with G rows of each GEMM op and C of conv2d (40 of each elementwise op, 100 of the others,
as the main job). For each, the physics model (``conf/model/physics.yaml``, no interval folds) is fitted and scored on:

* **measured GPUs, other shapes**: NeuSight rows of the 5 GPUs in none of the samples, 400 per (GPU, op family),
  the same rows for every size (what a user asking about a GPU of the pack gets, and what a sibling GPU borrows);
* **a new GPU** (unless ``--no-held-out``): each NeuSight GPU held out of the sample, 2 000 of its GEMM and
  convolution rows (the same for every size), the model fitted on the rest;
* **a family held out** (unless ``--no-held-out``): each op family held out of the sample, scored on its rows in
  the first sample of ``--sizes`` (the same rows for every size), the model fitted on the rest.

``--set name=value`` overrides a parameter of the physics model (e.g. ``group_rows=0``: every row weight 1). Prints
MAPE per family and per GPU, the fit's seconds and the sample's rows.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import pandas as pd
import yaml
from hydra import compose, initialize_config_dir

from data.backends.reference import select
from data.reference import load_reference
from features.physics import PhysicsFeaturizer
from pipelines import experiment

CONF = Path(__file__).resolve().parent.parent / "conf"
SOURCES = ["neusight", "hopper", "deepbench"]
KEY = ("hardware", "op", "dtype", "batch", "m", "n", "k", "c_in", "c_out", "h", "w", "kernel", "stride", "padding")


def cap(gemm: int, conv: int) -> dict:
    return {"neusight": {"gemm": gemm, "conv": conv, "elementwise": 40, "default": 100}}


def keys(df: pd.DataFrame) -> pd.Series:
    """One hash per distinct kernel (hardware, op, dtype, shape)."""
    return pd.util.hash_pandas_object(df[list(KEY)], index=False)


def mape(model, X: pd.DataFrame, y: np.ndarray) -> np.ndarray:
    return np.abs(model.predict(X) / y - 1) * 100


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="300:300,3000:300", help="G:C per sample, comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-held-out", action="store_true", help="skip the new-GPU and family folds")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a physics model parameter")
    args = ap.parse_args(argv)
    params = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.set)}
    sizes = [tuple(int(v) for v in s.split(":")) for s in args.sizes.split(",")]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("run", overrides=[f"seed={args.seed}"])
    registry = experiment.hardware_registry(cfg)
    entry = experiment.model_entries(cfg, overrides={"physics": params})["physics"]
    enc = PhysicsFeaturizer(registry)

    def fit(X: pd.DataFrame, y: np.ndarray, keep: np.ndarray):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return experiment.build(entry, interval_folds=False).fit(X[keep].reset_index(drop=True), y[keep])

    rows = load_reference()
    rows = rows[rows["status"] == "ok"].reset_index(drop=True)
    samples = {s: select(rows, sources=SOURCES, cap=cap(*s), seed=args.seed) for s in sizes}
    first = samples[sizes[0]]
    X_first, y_first = enc.transform(first), first["runtime_ms"].to_numpy(float)
    neusight = rows[rows["source"].str.startswith("neusight")]
    seen = set(pd.concat([keys(s) for s in samples.values()]))
    pool = neusight[~keys(neusight).isin(seen)]
    test = pool.groupby(["hardware", "family"]).sample(n=400, replace=True, random_state=args.seed)
    test = test.drop_duplicates().reset_index(drop=True)
    X_test, y_test = enc.transform(test), test["runtime_ms"].to_numpy(float)
    gpus = sorted(neusight["hardware"].unique())
    new = {}
    for gpu in gpus:
        mine = neusight[(neusight["hardware"] == gpu) & neusight["family"].isin(["gemm", "conv"])]
        mine = mine.sample(n=min(2000, len(mine)), random_state=args.seed).reset_index(drop=True)
        new[gpu] = (mine, enc.transform(mine), mine["runtime_ms"].to_numpy(float))
    print(f"measured GPUs, other shapes: {len(test)} NeuSight rows in no sample; a new GPU: 2 000 GEMM / conv rows")
    for size, sample in samples.items():
        X, y = enc.transform(sample), sample["runtime_ms"].to_numpy(float)  # once per sample; folds take subsets
        t0 = time.perf_counter()
        model = fit(X, y, np.ones(len(sample), bool))
        fit_s = time.perf_counter() - t0
        ape = pd.Series(mape(model, X_test, y_test))
        fam = ape.groupby(test["family"]).mean().round(1).to_dict()
        gpu = ape.groupby(test["hardware"]).mean().round(1).to_dict()
        print(f"\nG:C = {size[0]}:{size[1]}: {len(sample)} training rows, fit {fit_s:.1f} s")
        print(f"  measured GPUs, other shapes: MAPE {ape.mean():.1f}%; by family {fam}; by GPU {gpu}")
        if args.no_held_out:
            continue
        out = []
        for g in gpus:
            sub = fit(X, y, (sample["hardware"] != g).to_numpy())
            mine, X_new, y_new = new[g]
            e = pd.Series(mape(sub, X_new, y_new)).groupby(mine["family"]).mean()
            out.append(f"{g} " + " / ".join(f"{f} {v:.1f}" for f, v in e.items()))
        print("  a new GPU (held out): " + "; ".join(out))
        out = []
        for fam in sorted(first["family"].unique()):
            sub = fit(X, y, (sample["family"] != fam).to_numpy())
            held = (first["family"] == fam).to_numpy()
            out.append(f"{fam} {mape(sub, X_first[held].reset_index(drop=True), y_first[held]).mean():.1f}")
        print("  a family held out: " + "; ".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
