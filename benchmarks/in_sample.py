"""What the physics model reaches on a GPU it trained on with every row, against what the measurements' repeats allow.

    python benchmarks/in_sample.py [--check f] [--seed 0]

Check (f) asks for 8% MAPE on a new GPU from 100 of its rows. This prints the two bounds under that goal, on the
check's own rows (``conf/experiment/extrapolation_<check>.yaml``'s sources and sample, as ``pipelines.evaluate``
draws them): the physics model (``conf/model/physics.yaml`` as the check sets it, no interval folds) fitted on every
row, no GPU held out, scored on the same rows (MAPE per GPU and per GPU and family); and, where the pack measured a
shape more than once (the H200 set times each kernel twice), each row predicted by its repeat (MAPE per GPU, family,
dtype and runtime band). A calibration from 100 rows cannot be expected below the first; no model below the
second.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import pandas as pd
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from data.reference import load_reference
from features.physics import PhysicsFeaturizer
from models.public_eval import extrapolation_rows
from pipelines import experiment

CONF = Path(__file__).resolve().parent.parent / "conf"
BANDS_US = [0, 15, 30, 60, 200, 1000, np.inf]


def repeat_errors(rows: pd.DataFrame) -> pd.Series:
    """Per row measured more than once (the same hardware, op, dtype, ``shape_id`` and ``config``: a layout or a math
    setting is another kernel): |its repeat / it - 1| in %, NaN elsewhere (the next measurement of it is the repeat)."""
    out = pd.Series(np.nan, index=rows.index)
    config = rows["config"].astype("string").fillna("") if "config" in rows else ""
    for _, g in rows.assign(_config=config).groupby(["hardware", "op", "dtype", "shape_id", "_config"], dropna=False):
        if len(g) > 1:
            y = g["runtime_ms"].to_numpy(float)
            out[g.index] = np.abs(np.roll(y, 1) / y - 1) * 100
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", default="f", help="the check whose rows to use (a..f)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "evaluate", overrides=[f"experiment=extrapolation_{args.check}", "model=[physics]", f"seed={args.seed}"]
        )
    ds = cfg.dataset
    rows = extrapolation_rows(ds, load_reference(), args.seed).reset_index(drop=True)
    X = PhysicsFeaturizer(experiment.hardware_registry(cfg)).transform(rows).reset_index(drop=True)
    y = rows["runtime_ms"].to_numpy(float)
    params = OmegaConf.to_container(OmegaConf.create(ds.get("model_params") or {}))
    entry = experiment.model_entries(cfg, overrides=params)["physics"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = experiment.build(entry, interval_folds=False).fit(X, y)
    rows["ape"] = np.abs(model.predict(X) / y - 1) * 100
    rows["repeat_ape"] = repeat_errors(rows) if "shape_id" in rows else np.nan
    pd.set_option("display.width", 200)
    print(f"check ({args.check}), seed {args.seed}: {len(rows)} rows; fitted on all of them, scored in sample")
    print(f"MAPE all {rows['ape'].mean():.1f}")
    print(rows.pivot_table(index="hardware", columns="family", values="ape", aggfunc="mean", margins=True).round(1))
    rep = rows[rows["repeat_ape"].notna()]
    if len(rep):
        band = pd.cut(rep["runtime_ms"] * 1e3, BANDS_US, right=False).rename("runtime_us")
        print(f"\nrows with a repeat: {len(rep)}; each predicted by its repeat (MAPE %), beside the in-sample fit's")
        for by in ("hardware", "family", "dtype", band):
            print(rep.groupby(by, observed=True)[["repeat_ape", "ape"]].mean().round(1).to_string(), "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
