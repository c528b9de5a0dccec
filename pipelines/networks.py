"""Whole-network cost models on this CPU: measure -> MLIR -> GNN / token transformer vs layer-sum XGBoost.

    python -m pipelines.networks                 # see conf/networks.yaml
    python -m pipelines.networks tiny=true       # a few networks, a few epochs

1. measure every network of ``cfg.networks`` (product of the listed values per family: ``mlp``, ``cnn``,
   ``transformer``, ``resnet``, ``gated_mlp``, :mod:`data.networks`) with :class:`data.backends.cpu.CpuBackend`, and every distinct
   layer of them (:func:`data.networks.layers`);
2. export each network's MLIR (:func:`features.mlir.export.export_workload`) and encode it as a graph
   (:class:`features.encoders.GraphEncoder`, hardware = this CPU's detected spec) and as tokens;
3. per split, fit on the training networks and score on the test networks (runtime_ms MAPE / MedAPE):
   * ``held_out_<family>``: train on the other families, test on this one (a held-out architecture);
   * ``deeper``: train on depth <= ``splits.deeper_than``, test on the deeper networks of every family;
   * ``held_out_<group>`` (``splits.held_out_groups``): the same with several families held out at once
     (``conv`` = cnn + resnet: no conv op in training at all);
   * ``deeper``: train on depth <= ``splits.deeper_than``, test on the deeper networks of every family;
   models: ``gnn`` (:class:`models.gnn.GNNModel`, roofline-anchored additive readout), ``token_transformer``
   (:class:`models.transformer.TransformerModel`), the baseline ``xgb_layer_sum`` = sum over the network's
   layers of an :class:`models.tree.XGBoostModel` trained on the tabular features of the *training
   networks'* layers, the analytic floor ``roofline_sum`` = sum over the graph's nodes of the per-node
   roofline max(FLOPs / peak, bytes / bandwidth) on the detected CPU spec (no learning), ``roofline_fit`` =
   a * roofline_sum + b * (#kernel nodes) with (a, b) >= 0 fitted on the training networks
   (:func:`models.gnn.anchor_fit`: the GNN's starting point, so the GNN's learned part is judged against
   it), and the reference ``measured_layer_sum`` = sum of the measured layer runtimes (no model; how
   additive the runtime really is, and the floor of any layer-sum model);
4. prints the table and logs one MLflow run (metrics ``<split>/<model>/<metric>``, the table as a CSV).
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import hydra
import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from data.backends.cpu import CpuBackend
from data.hardware import CONF_DIR, HardwareRegistry
from data.networks import layers
from data.workloads import shape_id
from features.encoders import GraphEncoder, TokenEncoder
from features.mlir.export import export_workload
from features.tabular import TabularFeaturizer
from models.evaluate import regression_metrics
from models.gnn import GNNModel, anchor_fit
from models.transformer import TransformerModel
from models.tree import XGBoostModel

log = logging.getLogger(__name__)
console = Console(width=None if sys.stdout.isatty() else 160, soft_wrap=True)
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
warnings.filterwarnings("ignore", category=UserWarning, module=r"mlflow\.")
logging.getLogger("mlflow").setLevel(logging.ERROR)
logging.getLogger("lightning").setLevel(logging.ERROR)
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*number of training batches.*")

MODELS = ("gnn", "token_transformer", "xgb_layer_sum", "roofline_sum", "roofline_fit", "measured_layer_sum")


def network_grid(spec: dict) -> list[dict]:
    """``{family: {param: [values]}}`` -> ``[{op, params}]`` (product of the values per family)."""
    out = []
    for op, grid in spec.items():
        keys = list(grid)
        for values in itertools.product(*(grid[k] for k in keys)):
            out.append({"op": op, "params": dict(zip(keys, (int(v) for v in values)))})
    return out


def collect(networks: list[dict], backend: CpuBackend, dtype: str = "float32") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Measure the networks and their distinct layers; returns (network rows + ``mlir`` + ``layer_ids``, layer rows)."""
    net_rows, layer_rows = [], {}
    for w in networks:
        workload = {**w, "dtype": dtype}
        row = backend.measure(workload)
        if row["status"] != "ok":
            raise RuntimeError(f"network {w['op']} {w['params']}: {row['error']}")
        ids = []
        for lw in layers(w["op"], w["params"], dtype):
            sid = shape_id(lw["op"], lw["params"]) + f"|{dtype}"
            ids.append(sid)
            if sid not in layer_rows:
                lrow = backend.measure(lw)
                if lrow["status"] != "ok":
                    raise RuntimeError(f"layer {lw['op']} {lw['params']}: {lrow['error']}")
                layer_rows[sid] = {**lrow, "layer_id": sid}
        row.update(mlir=export_workload(w["op"], w["params"], dtype), layer_ids=json.dumps(ids))
        net_rows.append(row)
    return pd.DataFrame(net_rows), pd.DataFrame(list(layer_rows.values()))


def splits(nets: pd.DataFrame, cfg: DictConfig) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{name: (train mask, test mask)}`` over the network rows."""
    out = {}
    if cfg.splits.held_out_architecture:
        for fam in sorted(nets["op"].unique()):
            test = (nets["op"] == fam).to_numpy()
            out[f"held_out_{fam}"] = (~test, test)
    for group, fams in (cfg.splits.get("held_out_groups") or {}).items():
        test = nets["op"].isin(list(fams)).to_numpy()
        if test.any() and (~test).any() and not any((test == t).all() for _, t in out.values()):
            out[f"held_out_{group}"] = (~test, test)
    if cfg.splits.deeper_than is not None:
        test = (nets["depth"] > cfg.splits.deeper_than).to_numpy()
        if test.any() and (~test).any():
            out["deeper"] = (~test, test)
    return out


def layer_sum(nets: pd.DataFrame, runtime_by_layer: dict[str, float]) -> np.ndarray:
    return np.array([sum(runtime_by_layer[i] for i in json.loads(ids)) for ids in nets["layer_ids"]])


def evaluate(nets: pd.DataFrame, lay: pd.DataFrame, registry: HardwareRegistry, cfg: DictConfig) -> pd.DataFrame:
    encoder = GraphEncoder(registry, **OmegaConf.to_container(cfg.graph))
    graphs = [encoder.encode(t, hardware=h, where=f"network {i}") for i, (t, h) in enumerate(zip(nets["mlir"], nets["hardware"]))]
    roof = np.array([float(g.roofline_ms.sum()) for g in graphs])
    kernels = np.array([float(g.kernel.sum()) for g in graphs])
    tokens = [TokenEncoder().encode(t, where=f"network {i}") for i, t in enumerate(nets["mlir"])]
    y = nets["runtime_ms"].to_numpy(float)
    layer_X = TabularFeaturizer(registry).transform(lay)
    measured = dict(zip(lay["layer_id"], lay["runtime_ms"]))
    epochs = {"epochs": cfg.tiny_epochs} if cfg.tiny else {}
    rows = []
    for name, (train, test) in splits(nets, cfg).items():
        tr, te = np.flatnonzero(train), np.flatnonzero(test)
        preds, fit_s = {}, {}
        t0 = time.perf_counter()
        gnn = GNNModel(**{**OmegaConf.to_container(cfg.gnn), **epochs, "seed": cfg.seed})
        preds["gnn"] = gnn.fit([graphs[i] for i in tr], y[tr]).predict([graphs[i] for i in te])
        fit_s["gnn"], t0 = time.perf_counter() - t0, time.perf_counter()
        for variant, over in (cfg.get("gnn_variants") or {}).items():  # e.g. gnn_gatv2: {conv: gatv2}
            m = GNNModel(**{**OmegaConf.to_container(cfg.gnn), **OmegaConf.to_container(over), **epochs, "seed": cfg.seed})
            preds[variant] = m.fit([graphs[i] for i in tr], y[tr]).predict([graphs[i] for i in te])
            fit_s[variant], t0 = time.perf_counter() - t0, time.perf_counter()
        tf = TransformerModel(**{**OmegaConf.to_container(cfg.transformer), **epochs, "seed": cfg.seed})
        preds["token_transformer"] = tf.fit([tokens[i] for i in tr], y[tr]).predict([tokens[i] for i in te])
        fit_s["token_transformer"], t0 = time.perf_counter() - t0, time.perf_counter()
        train_layers = {i for ids in nets["layer_ids"].iloc[tr] for i in json.loads(ids)}
        lmask = lay["layer_id"].isin(train_layers).to_numpy()
        xgb = XGBoostModel(**{**OmegaConf.to_container(cfg.xgb), "random_state": cfg.seed})
        xgb.fit(layer_X[lmask].reset_index(drop=True), lay["runtime_ms"].to_numpy(float)[lmask])
        preds["xgb_layer_sum"] = layer_sum(nets.iloc[te], dict(zip(lay["layer_id"], xgb.predict(layer_X))))
        fit_s["xgb_layer_sum"] = time.perf_counter() - t0
        preds["roofline_sum"], fit_s["roofline_sum"] = roof[te], 0.0
        t0 = time.perf_counter()
        a, b = anchor_fit(roof[tr], kernels[tr], y[tr])
        preds["roofline_fit"], fit_s["roofline_fit"] = a * roof[te] + b * kernels[te], time.perf_counter() - t0
        preds["measured_layer_sum"], fit_s["measured_layer_sum"] = layer_sum(nets.iloc[te], measured), 0.0
        for model in [*MODELS[:1], *(cfg.get("gnn_variants") or {}), *MODELS[1:]]:
            m = regression_metrics(y[te], preds[model])
            rows.append({"split": name, "model": model, "n_train": len(tr), "n_test": len(te),
                         "mape": m["mape"], "medape": m["medape"], "fit_s": fit_s[model]})
    return pd.DataFrame(rows)


def print_table(res: pd.DataFrame, title: str) -> None:
    table = Table(title=title)
    for col in ("split", "model", "n_train", "n_test", "MAPE %", "MedAPE %", "fit s"):
        table.add_column(col, justify="left" if col in ("split", "model") else "right")
    for r in res.itertuples():
        table.add_row(r.split, r.model, str(r.n_train), str(r.n_test), f"{r.mape:.1f}", f"{r.medape:.1f}",
                      f"{r.fit_s:.1f}")
    console.print(table)


def run(cfg: DictConfig) -> pd.DataFrame:
    from pipelines import tracking

    out = Path(cfg.paths.output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    backend = CpuBackend(num_threads=cfg.backend.num_threads, min_run_time=cfg.backend.min_run_time,
                         warmup=cfg.backend.warmup, measure_memory=False, energy=False)
    registry = HardwareRegistry.from_dir(CONF_DIR)
    registry.add(backend.hardware)
    networks = network_grid(OmegaConf.to_container(cfg.tiny_networks if cfg.tiny else cfg.networks))
    t0 = time.perf_counter()
    nets, lay = collect(networks, backend)
    collect_s = time.perf_counter() - t0
    console.print(f"measured {len(nets)} networks and {len(lay)} distinct layers on {backend.hardware.id} "
                  f"({collect_s:.1f} s incl. MLIR export)")
    res = evaluate(nets, lay, registry, cfg)
    print_table(res, f"whole networks on {backend.hardware.id} (runtime_ms)")

    tracking.setup(cfg.mlflow, out)
    import mlflow

    with mlflow.start_run(run_name="networks"), tempfile.TemporaryDirectory() as tmp:
        mlflow.log_params({"tiny": cfg.tiny, "hardware": backend.hardware.id, "n_networks": len(nets),
                           "n_layers": len(lay), "gnn": json.dumps(OmegaConf.to_container(cfg.gnn)),
                           "graph": json.dumps(OmegaConf.to_container(cfg.graph)),
                           "transformer": json.dumps(OmegaConf.to_container(cfg.transformer))})
        mlflow.log_metric("collect_s", collect_s)
        for r in res.itertuples():
            for metric in ("mape", "medape"):
                mlflow.log_metric(tracking._metric_key(r.split, r.model, metric), getattr(r, metric))
        path = Path(tmp) / "networks_results.csv"
        res.to_csv(path, index=False)
        mlflow.log_artifact(str(path))
        nets.drop(columns=["mlir"]).to_csv(Path(tmp) / "networks.csv", index=False)
        mlflow.log_artifact(str(Path(tmp) / "networks.csv"))

    if cfg.register.model:  # serve it (issue #8): fit on all networks but a calibration fold, log, register
        decision = tracking.register_network_model(cfg, nets, registry)
        console.print(f"* registered {cfg.register.model} as {cfg.register.name} version {decision.version}; "
                      f"alias @{cfg.register.alias}: {decision.reason}", soft_wrap=True)
    return res


@hydra.main(config_path="../conf", config_name="networks", version_base=None)
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
