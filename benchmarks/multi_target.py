"""One multi-target model vs one model per target on wa-hls4ml (the measured choice behind ``models.tree``).

    .venv/bin/python benchmarks/multi_target.py [--n-jobs 2] [--split held_out_layer_shapes|held_out_precision]

Data: the synthesised wa-hls4ml dense layers (``../shared/data/wa_hls4ml``, 784 rows), features
``features.public_data.fpga_features``, targets lut, ff, dsp, bram_18k, latency_cycles with the per-target
transforms of ``conf/dataset/wa_hls4ml.yaml`` and bounds [0, the xcvu13p totals]; the split of
``pipelines.evaluate`` (held-out layer shapes by default), every model fitted on all training rows (no
calibration fold, so only the model choice differs), hyper-parameters of ``conf/dataset/wa_hls4ml.yaml``.

Variants: ``per_target`` = one 1-D model per target (what the evaluation fitted before); ``rf multi`` =
scikit-learn's native multi-output forest; ``xgb one_output_per_tree`` / ``xgb multi_output_tree`` = XGBoost's
two native ``multi_strategy`` settings (one tree per target per round in one booster / vector-leaf trees).
Printed: R^2 on raw counts and SMAPE per target, their mean, and the fit wall time (one fit; noisy on a shared
machine).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from data.hardware import HardwareRegistry  # noqa: E402
from data.importers.wa_hls4ml import import_wa_hls4ml  # noqa: E402
from features.public_data import fpga_features  # noqa: E402
from models.evaluate import resource_metrics  # noqa: E402
from models.public_eval import FPGA_TARGETS, fpga_bounds  # noqa: E402
from models.splits import held_out_layer_shapes, held_out_precision  # noqa: E402
from models.tree import RandomForestModel, XGBoostModel  # noqa: E402

TRANSFORMS = ["log", "log", "log1p", "log1p", "log1p"]  # conf/dataset/wa_hls4ml.yaml


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-jobs", type=int, default=2)
    ap.add_argument("--split", default="held_out_layer_shapes", choices=["held_out_layer_shapes", "held_out_precision"])
    ap.add_argument("--data-root", default=None)
    args = ap.parse_args()
    registry = HardwareRegistry.from_dir()
    rows = import_wa_hls4ml(args.data_root, registry=registry)
    rows = rows[rows["status"] == "ok"].reset_index(drop=True)
    X, Y = fpga_features(rows), rows[list(FPGA_TARGETS)].to_numpy(float)
    lower, upper = fpga_bounds(registry, "xcvu13p")
    if args.split == "held_out_layer_shapes":
        tr, te = held_out_layer_shapes(rows, 0.25, 0)
    else:
        bits = rows["config"].map(lambda c: __import__("json").loads(c)["precision_bits"])
        tr, te = held_out_precision(rows.assign(precision_bits=bits), 10, (12, 13, 14))
    rf = dict(n_estimators=300, n_jobs=args.n_jobs)
    xg = dict(n_estimators=400, n_jobs=args.n_jobs)
    multi = dict(targets=list(FPGA_TARGETS), transform=TRANSFORMS, lower=lower, upper=upper)
    variants = {
        "rf per_target": (RandomForestModel, rf, None),
        "rf multi": (RandomForestModel, rf, multi),
        "xgb per_target": (XGBoostModel, xg, None),
        "xgb one_output_per_tree": (XGBoostModel, xg, multi),
        "xgb multi_output_tree": (XGBoostModel, xg | {"multi_strategy": "multi_output_tree"}, multi),
    }
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; split {args.split}: "
        f"{len(tr)} train / {len(te)} test rows"
    )
    print("| variant | fit s | " + " | ".join(f"R2 / SMAPE {t}" for t in FPGA_TARGETS) + " | mean R2 / SMAPE |")
    print("|---|---:|" + "---|" * (len(FPGA_TARGETS) + 1))
    for name, (cls, params, mt) in variants.items():
        t0 = time.perf_counter()
        if mt is None:  # one 1-D model per target, same transform and bound
            P = np.column_stack(
                [
                    cls(**params, transform=TRANSFORMS[j], lower=lower[j], upper=upper[j])
                    .fit(X.iloc[tr], Y[tr, j])
                    .predict(X.iloc[te])
                    for j in range(len(FPGA_TARGETS))
                ]
            )
        else:
            P = cls(**params, **mt).fit(X.iloc[tr], Y[tr]).predict(X.iloc[te])
        seconds = time.perf_counter() - t0
        m = [resource_metrics(Y[te, j], P[:, j]) for j in range(len(FPGA_TARGETS))]
        cells = " | ".join(f"{x['r2']:.3f} / {x['smape']:.1f}" for x in m)
        print(
            f"| {name} | {seconds:.1f} | {cells} | {np.mean([x['r2'] for x in m]):.3f} / "
            f"{np.mean([x['smape'] for x in m]):.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
