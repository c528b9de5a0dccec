"""FPGA resources and latency of hls4ml Dense layers on layer shapes never synthesised (wa-hls4ml).

    nice -n 10 .venv/bin/python benchmarks/fpga_eval.py [--seeds 5] [--first-seed 0] [--test-size 0.25]
                                                        [--mlflow-uri URI]

Data: the wa-hls4ml rows of ``../shared/data/wa_hls4ml`` (``data.importers.wa_hls4ml``: 784 synthesised designs for
the resource models, all 2 142 rows for feasibility). Split: ``models.splits.held_out_layer_shapes`` (a quarter
of the (d_in, d_out) shapes, 13 of 51, with every precision / reuse factor / strategy held out), repeated for
``--seeds`` seeds; figures are means over seeds (and the worst seed for R^2). Targets lut, ff, dsp, bram_18k,
latency_cycles, bounded to [0, the xcvu13p totals].

Models: ``current_xgb`` = what ``pipelines.evaluate`` fits today (one multi-target ``models.tree.XGBoostModel``,
400 trees, ``features.fpga.fpga_features``, log for LUT / FF and log1p for DSP / BRAM / latency);
``xgb_hls4ml`` = the same model on ``features.fpga.hls4ml_features`` (multipliers per cycle, DSP / LUT
multiplier cost, BRAM_18K packing of the weights, pipeline depth, the resource strategy's multiplexing);
``hurdle_hls4ml`` = ``models.hurdle.HurdleModel`` on those features: zero / non-zero classifier + amount for DSP
and BRAM, DSP / BRAM / latency learned as factors over the hls4ml estimates (``base_columns``), shallow trees
(depth 3, 800 rounds); ``hurdle_round1`` = the same on round 1's
hls4ml features (without ``ROUND2_COLUMNS``); ``hurdle_regime`` = the hurdle model with LUT and FF modelled per
design regime
(``features.fpga.LUT_FF_REGIMES``: per output + per input for stored weights, per weight when fully parallel).
Printed per target: R^2 (raw counts), SMAPE over all rows and over the rows with a
non-zero truth, zero / non-zero accuracy (DSP, BRAM), and for the hurdle model the empirical coverage of its
split-conformal 90 % intervals (``models.conformal.fit_calibrated``, calibrated on a fifth of the training
shapes); then the same on the resource-strategy designs with reuse > 1 alone (the fully parallel designs, reuse 1
or the latency strategy, come from 4 small layer shapes only). Feasibility (does synthesis succeed?,
``models.classify.FeasibilityClassifier`` on all rows): balanced accuracy with either feature set.

Published reference (wa-hls4ml paper, its GNN R^2 and transformer SMAPE on its own multi-layer test set; the
figures as quoted in this repository's README, not re-derived here): R^2 LUT 0.73, FF 0.74, DSP 0.89, BRAM 0.51;
SMAPE LUT / FF 2.9 %. Not directly comparable: that set holds whole networks; this one single dense layers.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.metrics import balanced_accuracy_score

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.tuning_sim import machine  # noqa: E402
from data.hardware import HardwareRegistry  # noqa: E402
from data.importers.wa_hls4ml import import_wa_hls4ml  # noqa: E402
from features.fpga import LUT_FF_REGIMES, fpga_features, hls4ml_features  # noqa: E402
from models.classify import FeasibilityClassifier  # noqa: E402
from models.conformal import fit_calibrated  # noqa: E402
from models.evaluate import resource_metrics, smape  # noqa: E402
from models.hurdle import HurdleModel  # noqa: E402
from models.public_eval import FPGA_TARGETS, fpga_bounds, layer_shape_groups  # noqa: E402
from models.splits import held_out_layer_shapes  # noqa: E402
from models.tree import XGBoostModel  # noqa: E402

TRANSFORMS = ["log", "log", "log1p", "log1p", "log1p"]  # conf/dataset/wa_hls4ml.yaml
BASES = [None, None, "dsps_base", "bram18_base", "latency_base"]
PUBLISHED = {
    "lut": "R² 0.73, SMAPE 2.9",
    "ff": "R² 0.74, SMAPE 2.9",
    "dsp": "R² 0.89",
    "bram_18k": "R² 0.51",
    "latency_cycles": "–",
}
GOALS = "goals on withheld shapes: R² >= 0.98 every target, SMAPE <= 3 % LUT and FF, DSP zero/non-zero accuracy >= 0.99"


# the hls4ml_features columns added in round 2 (what LUT / FF scale with): dropped for the round-1 hurdle model
ROUND2_COLUMNS = ["weights", "log2_d_in", "log2_d_out", "log2_outputs_per_lane", "outputs_per_lane_pow2", "shared_dsp"]


def round1_features(rows: pd.DataFrame) -> pd.DataFrame:
    """``hls4ml_features`` as in round 1 (without ``ROUND2_COLUMNS``): the before of the before / after."""
    return hls4ml_features(rows).drop(columns=ROUND2_COLUMNS)


def models(lower, upper, seed: int) -> dict:
    multi = dict(targets=list(FPGA_TARGETS), transform=TRANSFORMS, lower=lower, upper=upper)
    return {
        "current_xgb": (fpga_features, lambda: XGBoostModel(n_estimators=400, n_jobs=1, random_state=seed, **multi)),
        "xgb_hls4ml": (hls4ml_features, lambda: XGBoostModel(n_estimators=400, n_jobs=1, random_state=seed, **multi)),
        "hurdle_round1": (
            round1_features,
            lambda: HurdleModel(
                list(FPGA_TARGETS),
                transform=TRANSFORMS,
                base_columns=BASES,
                lower=lower,
                upper=upper,
                max_depth=3,
                n_estimators=800,
                random_state=seed,
            ),
        ),
        "hurdle_hls4ml": (
            hls4ml_features,
            lambda: HurdleModel(
                list(FPGA_TARGETS),
                transform=TRANSFORMS,
                base_columns=BASES,
                lower=lower,
                upper=upper,
                max_depth=3,
                n_estimators=800,
                random_state=seed,
            ),
        ),
        "hurdle_regime": (
            hls4ml_features,
            lambda: HurdleModel(
                list(FPGA_TARGETS),
                transform=TRANSFORMS,
                base_columns=BASES,
                lower=lower,
                upper=upper,
                max_depth=3,
                n_estimators=800,
                random_state=seed,
                regime_column="fully_parallel",
                regime_models=LUT_FF_REGIMES,
            ),
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=0, help="split seeds first-seed .. first-seed + seeds - 1")
    ap.add_argument("--test-size", type=float, default=0.25)
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--out", default="outputs/fpga_eval")
    ap.add_argument("--mlflow-uri", default=None, help="log the mean metrics to this MLflow tracking URI")
    args = ap.parse_args()
    if not 0 < args.test_size < 1:
        sys.exit(f"error: --test-size must be in (0, 1), got {args.test_size}")
    t_start = time.perf_counter()
    registry = HardwareRegistry.from_dir()
    rows = import_wa_hls4ml(args.data_root, registry=registry).reset_index(drop=True)
    ok_mask = (rows["status"] == "ok").to_numpy()
    ok = rows[ok_mask].reset_index(drop=True)
    targets = list(FPGA_TARGETS)
    Y = ok[targets].to_numpy(float)
    lower, upper = fpga_bounds(registry, "xcvu13p", targets)
    feats = {fn: fn(ok) for fn in (fpga_features, round1_features, hls4ml_features)}
    print(
        f"machine: {machine()}; {len(rows)} rows, {len(ok)} synthesised, {len(set(layer_shape_groups(ok)))} "
        f"layer shapes; {args.seeds} seeds (from {args.first_seed}) of held-out layer shapes "
        f"({args.test_size:.0%})",
        flush=True,
    )
    records, feas = [], []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        tr, te = held_out_layer_shapes(ok, args.test_size, seed)
        held = sorted(set(layer_shape_groups(ok.iloc[te])))
        for name, (featurize, make) in models(lower, upper, seed).items():
            X = feats[featurize]
            t0 = time.perf_counter()
            P = make().fit(X.iloc[tr], Y[tr]).predict(X.iloc[te])
            seconds = time.perf_counter() - t0
            cover = [np.nan] * len(targets)
            if name.startswith("hurdle"):
                cal = fit_calibrated(make(), X.iloc[tr], Y[tr], layer_shape_groups(ok.iloc[tr]), 0.2, 0.9, seed)
                cover = cal.coverage(X.iloc[te], Y[te])
            stored = feats[hls4ml_features]["fully_parallel"].to_numpy()[te] == 0
            for j, t in enumerate(targets):
                y, p = Y[te, j], P[:, j]
                m = resource_metrics(y, p)
                nz = y > 0
                ms = resource_metrics(y[stored], p[stored])
                records.append(
                    {
                        "seed": seed,
                        "model": name,
                        "target": t,
                        "r2": m["r2"],
                        "smape": m["smape"],
                        "r2_stored": ms["r2"],
                        "smape_stored": ms["smape"],
                        "n_parallel": int((~stored).sum()),
                        "smape_nonzero": smape(y[nz], p[nz]),
                        "n_zero": int((~nz).sum()),
                        "zero_accuracy": float(np.mean(nz == (p > 0.5))),
                        "coverage90": float(cover[j]),
                        "seconds": seconds,
                    }
                )
        # feasibility on every row of the held-out shapes (failed syntheses included)
        tr_all, te_all = held_out_layer_shapes(rows, args.test_size, seed)
        for fn in (fpga_features, hls4ml_features):
            Xa = fn(rows)
            clf = FeasibilityClassifier(n_estimators=300, random_state=seed, n_jobs=1).fit(
                Xa.iloc[tr_all], ok_mask[tr_all]
            )
            feas.append(
                {
                    "seed": seed,
                    "features": fn.__name__,
                    "balanced_accuracy": balanced_accuracy_score(ok_mask[te_all], clf.predict(Xa.iloc[te_all])),
                }
            )
        done = pd.DataFrame([r for r in records if r["seed"] == seed]).pivot_table(
            index="model", columns="target", values="r2"
        )
        print(
            f"  seed {seed}: held out {', '.join(held)}; R² "
            + "; ".join(f"{m}: " + " ".join(f"{done.loc[m, t]:.3f}" for t in targets) for m in done.index),
            flush=True,
        )
    df = pd.DataFrame(records)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "fpga_eval.csv", index=False)
    mean = df.groupby(["target", "model"], sort=False).mean(numeric_only=True)
    worst = df.groupby(["target", "model"], sort=False)["r2"].min()
    print(f"\n## Held-out layer shapes, mean of {args.seeds} seeds ({GOALS})\n")
    print(
        "| target | model | R² (worst seed) | SMAPE % | SMAPE % non-zero truth | zero / non-zero accuracy "
        "| 90 % coverage | published (wa-hls4ml) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---|")
    names = list(models(lower, upper, 0))
    for t, name in [(t, name) for t in targets for name in names]:
        r = mean.loc[(t, name)]
        zero = f"{r['zero_accuracy']:.3f}" if t in ("dsp", "bram_18k") else "–"
        cov = f"{r['coverage90']:.2f}" if np.isfinite(r["coverage90"]) else "–"
        print(
            f"| {t} | {name} | {r['r2']:.3f} ({worst[(t, name)]:.3f}) | {r['smape']:.1f} | "
            f"{r['smape_nonzero']:.1f} | {zero} | {cov} | {PUBLISHED[t] if name == 'current_xgb' else ''} |"
        )
    print(
        "\nthe same, resource strategy with reuse > 1 only (weights stored in BRAM; without the fully parallel "
        f"designs: {mean['n_parallel'].iloc[0]:.0f} of the test rows per seed on average), R² / SMAPE %:\n"
    )
    print("| model | " + " | ".join(targets) + " |\n|---|" + "---|" * len(targets))
    for name in names:
        print(
            f"| {name} | "
            + " | ".join(
                f"{mean.loc[(t, name), 'r2_stored']:.3f} / {mean.loc[(t, name), 'smape_stored']:.1f}" for t in targets
            )
            + " |"
        )
    fe = pd.DataFrame(feas).groupby("features")["balanced_accuracy"].mean()
    print(
        "\nfeasibility (balanced accuracy, held-out shapes, all rows): "
        + ", ".join(f"{k} {v:.3f}" for k, v in fe.items())
    )
    if args.mlflow_uri:
        import mlflow

        mlflow.set_tracking_uri(args.mlflow_uri)
        mlflow.set_experiment("fpga_eval")
        with mlflow.start_run(run_name="fpga_eval"):
            mlflow.log_params({"seeds": args.seeds, "test_size": args.test_size, "machine": machine()})
            for (t, name), r in mean.iterrows():
                mlflow.log_metrics(
                    {
                        f"{name}.{t}.{c}": float(r[c])
                        for c in ("r2", "smape", "smape_nonzero", "zero_accuracy", "coverage90")
                        if np.isfinite(r[c])
                    }
                )
            mlflow.log_metrics({f"feasibility.{k}.balanced_accuracy": float(v) for k, v in fe.items()})
    print(f"\nwritten: {out}/fpga_eval.csv; machine: {machine()}; total {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
