"""A new GPU's GEMMs from k of its rows: the physics model of check (f), on NeuSight's GEMM rows of one GPU.

    python benchmarks/gemm_calibration.py --gpu A100-PCIe-40GB [--k 10,100,300] [--draws 2] [--test 2000]

The physics model (``conf/model/physics.yaml``, check (f)'s dataset: every real row of the shipped pack at 100 NeuSight
rows per GPU, op and dtype) is fitted without the GPU, then calibrated (``PhysicsModel.calibrate``, method ``auto``)
with k random rows of its NeuSight bmm / linear rows and scored on ``--test`` others (the same ones for every k and
draw): the issue's own measure of calibration (GEMM MAPE of a refit with 100 rows of a GPU outside ``../shared``).
Prints MAPE uncalibrated and per k and draw, with the way calibrate chose, and with ``--ceiling`` what the GPU's own
rows allow: XGBoost fitted on every other NeuSight GEMM row of it (about 20 000: interpolation, no physics) on the shape
(log2 batch, M, N, K, 32-alignment of each, linear or bmm), scored on the same rows.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import xgboost as xgb
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from data.backends.reference import select
from data.reference import load_reference
from features.physics import PhysicsFeaturizer
from models.evaluate import regression_metrics
from pipelines import experiment

CONF = Path(__file__).resolve().parent.parent / "conf"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", required=True, help="registry id of a NeuSight GPU (held out, then calibrated)")
    ap.add_argument("--k", default="10,100,300", help="calibration rows, comma-separated")
    ap.add_argument("--draws", type=int, default=2)
    ap.add_argument("--test", type=int, default=2000, help="scored rows")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ceiling", action="store_true", help="also XGBoost on all its other GEMM rows")
    args = ap.parse_args(argv)
    ks = [int(k) for k in args.k.split(",")]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("evaluate", overrides=["experiment=extrapolation_f", "model=[physics]", f"seed={args.seed}"])
    ds, registry = cfg.dataset, experiment.hardware_registry(cfg)
    rows = load_reference()
    rows = rows[rows["status"] == "ok"].reset_index(drop=True)
    train = select(rows, sources=list(ds.sources), cap=dict(ds.get("cap") or {}), seed=args.seed)
    train = train[train["hardware"] != args.gpu].reset_index(drop=True)
    gemm = rows[(rows["hardware"] == args.gpu) & (rows["family"] == "gemm") & rows["source"].str.startswith("neusight")]
    gemm = gemm.reset_index(drop=True)
    if len(gemm) < args.test + args.draws * max(ks):
        print(f"gemm_calibration: error: {args.gpu} has {len(gemm)} NeuSight GEMM rows", file=sys.stderr)
        return 2
    enc = PhysicsFeaturizer(registry)
    params = OmegaConf.to_container(OmegaConf.create(ds.get("model_params") or {}))
    entry = experiment.model_entries(cfg, overrides=params)["physics"]
    model = experiment.build(entry, interval_folds=False).fit(enc.transform(train), train["runtime_ms"].to_numpy(float))
    order = np.random.default_rng(args.seed).permutation(len(gemm))
    test = gemm.iloc[order[: args.test]].reset_index(drop=True)
    X_test, y_test = enc.transform(test), test["runtime_ms"].to_numpy(float)

    def mape(m) -> float:
        return regression_metrics(y_test, m.predict(X_test))["mape"]

    print(f"{args.gpu}: {len(train)} training rows without it; {len(test)} of its GEMM rows scored")
    print(f"k = 0: MAPE {mape(model):.1f}%")
    for k in ks:
        out = []
        for d in range(args.draws):
            cal = gemm.iloc[order[args.test + d * k : args.test + (d + 1) * k]].reset_index(drop=True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                new = model.calibrate(enc.transform(cal), cal["runtime_ms"].to_numpy(float), hardware=args.gpu)
            out.append((mape(new), new.corrections_[-1].get("method")))
        mean = np.mean([m for m, _ in out])
        print(f"k = {k}: MAPE {mean:.1f}% ({', '.join(f'{m:.1f} {how}' for m, how in out)})")
    if args.ceiling:
        rest = gemm.iloc[order[args.test :]]
        dense = xgb.XGBRegressor(n_estimators=800, max_depth=8, learning_rate=0.05, random_state=args.seed)
        dense.fit(_shape(rest), np.log(rest["runtime_ms"].to_numpy(float)))
        mape = regression_metrics(y_test, np.exp(dense.predict(_shape(test))))["mape"]
        print(f"ceiling (XGBoost on its other {len(rest)} GEMM rows): MAPE {mape:.1f}%")
    return 0


def _shape(df) -> np.ndarray:
    dims = [df[c].fillna(1).to_numpy(float) for c in ("batch", "m", "n", "k")]
    return np.column_stack([*np.log2(dims), *(d % 32 == 0 for d in dims[1:]), df["op"].eq("linear")])


if __name__ == "__main__":
    sys.exit(main())
