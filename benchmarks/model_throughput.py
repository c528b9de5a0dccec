"""Training time and prediction throughput per cost model (rows/s at batch 1 and at batch 100k; for the
whole-network models graphs/s resp. sequences/s at batch 1 and at batch 1024).

    .venv/bin/python benchmarks/model_throughput.py [--models rf xgb roofline residual] [--repeats 3]
        [--batches 1 100000] [--min-time 0.5]
    .venv/bin/python benchmarks/model_throughput.py --models gnn token_transformer [--nn-batches 1 1024]
        [--nn-epochs 10]

Data: the main job's default shape sweep (conf/collect/default.yaml) simulated on the configured GPUs by
the ``sim-roofline`` backend (no CPU timing, so it is quick and the same on every machine), encoded once
by ``features.tabular.TabularFeaturizer``; target ``runtime_ms``. The 100k-row prediction frame is the
training rows resampled with replacement (seeded) and is featurized ONCE, outside the timing: the
figures are the model's ``predict`` on a ready feature frame, not featurization or MLflow serving
(``benchmarks/predict_throughput.py`` measures the served pyfunc).

Models: every model in conf/model (rf, xgb, roofline, with their configured hyper-parameters) plus
``residual`` = ``models.residual.ResidualModel`` over the ``roofline_ms`` column (XGBoost on
log(actual / roofline), conf/model/xgb_residual.yaml). The multi-target FPGA resource model needs
wa-hls4ml features and is timed by ``benchmarks/multi_target.py``.

Timing: training = median over ``--repeats`` fits of wall time. Prediction: per repeat a batch is
predicted until ``--min-time`` seconds have passed; time per call = wall time / calls; printed is the
median over repeats and rows/s = batch / that median. ``n_jobs=-1`` models use every core: the machine
line says how many there are.

Whole-network models (``gnn`` = ``models.gnn.GNNModel``, ``token_transformer`` =
``models.transformer.TransformerModel``, hyper-parameters of conf/networks.yaml, ``--nn-epochs`` epochs):
data = the networks of conf/networks.yaml exported to MLIR (no CPU timing) and encoded once, outside the
timing, as graphs (``GraphEncoder``, hardware = the H100-SXM spec) resp. token sequences; the target is
each network's summed per-node roofline (throughput does not depend on it). The big batch is the
networks resampled with replacement (seeded). Torch runs on ``torch.get_num_threads()`` threads (printed).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.utils import instantiate  # noqa: E402
from timing import timed  # noqa: E402  (benchmarks/timing.py, beside this script)

from data.collect import collect_from_config  # noqa: E402
from data.hardware import HardwareRegistry  # noqa: E402
from features.tabular import TabularFeaturizer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--models",
        nargs="+",
        default=["rf", "xgb", "roofline", "residual"],
        help="also: gnn token_transformer (whole-network models, timed on MLIR graphs / tokens)",
    )
    ap.add_argument("--nn-batches", type=int, nargs="+", default=[1, 1024])
    ap.add_argument("--nn-epochs", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=0.5)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 100_000])
    ap.add_argument(
        "--overrides", nargs="*", default=[], help="Hydra overrides of conf/run.yaml, e.g. model.rf.n_estimators=100"
    )
    args = ap.parse_args()
    if all(m in NN_MODELS for m in args.models):  # whole-network models only: skip the tabular data
        print(
            f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
            f"python {platform.python_version()}, {platform.platform()}"
        )
        return whole_networks(args.models, args)

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            "run",
            overrides=[
                "collect.backends=[sim-roofline]",
                "progress=false",
                "model=[rf,xgb,roofline,xgb_residual]",
                *args.overrides,
            ],
        )
    registry = HardwareRegistry.from_dir()
    rows, _ = collect_from_config(cfg.collect, registry, progress=False)
    ok = rows[rows["status"] == "ok"].reset_index(drop=True)
    featurizer = TabularFeaturizer(registry)
    X, y = featurizer.transform(ok), ok["runtime_ms"].to_numpy(float)
    big = ok.sample(n=max(args.batches), replace=True, random_state=0).reset_index(drop=True)
    X_big = featurizer.transform(big)  # built once, outside every timing
    frames = {b: X_big.iloc[:b] for b in args.batches}

    factories = {name: (lambda c=cfg.model[name]: instantiate(c)) for name in cfg.model}
    factories["residual"] = factories.pop("xgb_residual")
    unknown = [m for m in args.models if m not in factories and m not in NN_MODELS]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; choose from {sorted(factories)}")

    print(
        f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
        f"python {platform.python_version()}, {platform.platform()}"
    )
    print(
        f"training rows {len(X)} x {X.shape[1]} features ({ok['hardware'].nunique()} simulated GPUs); "
        f"median of {args.repeats} repeats (predict: >= {args.min_time} s each)"
    )
    print(
        f"{'model':<10}{'fit s':>9}" + "".join(f"{f'ms/call b={b}':>18}{f'rows/s b={b}':>18}" for b in args.batches),
        flush=True,
    )
    for name in [m for m in args.models if m not in NN_MODELS]:
        fits = []
        for _ in range(args.repeats):
            model = factories[name]()
            t0 = time.perf_counter()
            model.fit(X, y)
            fits.append(time.perf_counter() - t0)
        per_batch = {
            b: timed(lambda f=frame: model.predict(f), args.min_time, args.repeats) for b, frame in frames.items()
        }
        print(
            f"{name:<10}{statistics.median(fits):>9.2f}"
            + "".join(f"{s * 1e3:>18.3f}{b / s:>18.0f}" for b, s in per_batch.items()),
            flush=True,
        )
    nn_models = [m for m in args.models if m in NN_MODELS]
    if nn_models:
        whole_networks(nn_models, args)


NN_MODELS = {"gnn": "graphs", "token_transformer": "sequences"}


def whole_networks(names: list[str], args) -> None:
    """Fit/predict timing of the GNN (graphs/s) and the token transformer (sequences/s), see the docstring."""
    import torch
    from omegaconf import OmegaConf

    from data.collect import network_grid
    from features.encoders import GraphEncoder, TokenEncoder
    from features.mlir.export import export_workload
    from models.gnn import GNNModel
    from models.transformer import TransformerModel

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("networks")
    nets = network_grid(OmegaConf.to_container(cfg.networks))
    texts = [export_workload(w["op"], w["params"], "float32") for w in nets]
    registry = HardwareRegistry.from_dir()
    genc = GraphEncoder(registry, **OmegaConf.to_container(cfg.graph))
    data = {
        "gnn": [genc.encode(t, hardware="H100-SXM") for t in texts],
        "token_transformer": [TokenEncoder().encode(t) for t in texts],
    }
    y = np.array([float(g.roofline_ms.sum()) for g in data["gnn"]])
    rng = np.random.default_rng(0)
    big = rng.integers(0, len(texts), max(args.nn_batches))

    def params(name):  # the model's hyper-parameters in conf/model/<name>.yaml
        return {
            k: v
            for k, v in OmegaConf.to_container(cfg.model[name], resolve=True).items()
            if k not in ("_target_", "encoder")
        }

    factories = {
        "gnn": lambda: GNNModel(**{**params("gnn"), "epochs": args.nn_epochs}),
        "token_transformer": lambda: TransformerModel(**{**params("token_transformer"), "epochs": args.nn_epochs}),
    }
    nodes = np.mean([g.num_nodes for g in data["gnn"]])
    toks = np.mean([len(t["ids"]) for t in data["token_transformer"]])
    print(
        f"whole networks: {len(texts)} networks of conf/networks.yaml (mean {nodes:.0f} graph nodes, {toks:.0f} "
        f"tokens), {args.nn_epochs} epochs, torch threads {torch.get_num_threads()}"
    )
    unit = {n: NN_MODELS[n] for n in names}
    print(
        f"{'model':<18}{'fit s':>9}" + "".join(f"{f'ms/call b={b}':>18}{f'items/s b={b}':>18}" for b in args.nn_batches)
    )
    for name in names:
        fits = []
        for _ in range(args.repeats):
            model = factories[name]()
            t0 = time.perf_counter()
            model.fit(data[name], y)
            fits.append(time.perf_counter() - t0)
        X = data[name]
        per_batch = {
            b: timed(lambda xs=[X[i] for i in big[:b]]: model.predict(xs), args.min_time, args.repeats)
            for b in args.nn_batches
        }
        print(
            f"{name:<18}{statistics.median(fits):>9.2f}"
            + "".join(f"{s * 1e3:>18.3f}{b / s:>18.1f}" for b, s in per_batch.items())
            + f"  ({unit[name]}/s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
