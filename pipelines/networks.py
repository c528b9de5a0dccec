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

Sweeps (issue #8): ``python -m pipelines.networks -m hparams_search=gnn_optuna`` (or ``transformer_optuna``) is a Hydra
multirun with the Optuna sweeper; :func:`main` returns the objective = the mean MAPE of ``sweep.objective`` over the
evaluated splits (:func:`objective`). ``sweep.models`` / ``sweep.splits`` restrict what a trial fits and scores (the
free baselines roofline_sum / roofline_fit / measured_layer_sum are always scored), ``sweep.cache`` reuses the measured
networks across trials (:func:`collect_cached`: one parquet per network grid x backend settings x CPU, so every trial
sees the same timings), and every trial is one MLflow run named ``networks-trial<N>`` with its hyper-parameters as
flat params (``gnn.hidden``, ``transformer.lr``, ...).
"""
from __future__ import annotations

import dataclasses
import hashlib
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
from data.hardware import CONF_DIR, HardwareRegistry, HardwareSpec
from data.networks import layers
from data.store import write_parquet_durably
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
FITTED = ("gnn", "token_transformer", "xgb_layer_sum")  # what ``sweep.models`` can skip (gnn_variants follow gnn)


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


def cache_key(networks: list[dict], backend: CpuBackend, dtype: str = "float32") -> str:
    """sha256 (16 hex) of what decides the measurements: the network list, the dtype, the backend's timing settings
    and the CPU it runs on (``backend.hardware.id``: CPU model and thread count)."""
    ident = {"networks": networks, "dtype": dtype, "hardware": backend.hardware.id,
             "backend": {"num_threads": backend.num_threads, "min_run_time": backend.min_run_time,
                         "warmup": backend.warmup}}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def collect_cached(networks: list[dict], backend: CpuBackend, cache_dir: Path | None, dtype: str = "float32"
                   ) -> tuple[pd.DataFrame, pd.DataFrame, HardwareSpec, bool]:
    """:func:`collect` and the CPU's spec (``backend.hardware``: its peak FLOP/s and bandwidth are *measured* at
    detection, :func:`data.hardware.detect_cpu`, and feed the graphs' roofline features), or their earlier result from
    ``<cache_dir>/{networks,layers}-<key>.parquet`` + ``hardware-<key>.json`` (:func:`cache_key`; written atomically
    after a fresh measurement), so every trial of a sweep sees the same timings and the same hardware features.
    ``cache_dir=None`` always measures. Returns (networks, layers, spec, hit)."""
    if cache_dir is None:
        return (*collect(networks, backend, dtype), backend.hardware, False)
    key = cache_key(networks, backend, dtype)
    paths = {k: cache_dir / f"{k}-{key}.{'json' if k == 'hardware' else 'parquet'}" for k in ("networks", "layers", "hardware")}
    if all(p.exists() for p in paths.values()):
        spec = HardwareSpec.from_dict(json.loads(paths["hardware"].read_text()))
        return pd.read_parquet(paths["networks"]), pd.read_parquet(paths["layers"]), spec, True
    nets, lay = collect(networks, backend, dtype)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = paths["hardware"].with_suffix(".json.tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(backend.hardware), sort_keys=True))
    os.replace(tmp, paths["hardware"])
    write_parquet_durably(lay, paths["layers"])
    write_parquet_durably(nets, paths["networks"])  # last: a hit needs all three
    return nets, lay, backend.hardware, False


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
    wanted = (cfg.get("sweep") or {}).get("splits")
    if wanted:  # sweep.splits: score only these (the objective's splits)
        unknown = [w for w in wanted if w not in out]
        if unknown:
            raise ValueError(f"sweep.splits: unknown split(s) {', '.join(unknown)}; these networks have {', '.join(out)}")
        out = {w: out[w] for w in wanted}
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
    fitted = fitted_models(cfg)
    variants = (cfg.get("gnn_variants") or {}) if "gnn" in fitted else {}
    rows = []
    for name, (train, test) in splits(nets, cfg).items():
        tr, te = np.flatnonzero(train), np.flatnonzero(test)
        preds, fit_s = {}, {}
        t0 = time.perf_counter()
        if "gnn" in fitted:
            gnn = GNNModel(**{**OmegaConf.to_container(cfg.gnn), **epochs, "seed": cfg.seed})
            preds["gnn"] = gnn.fit([graphs[i] for i in tr], y[tr]).predict([graphs[i] for i in te])
            fit_s["gnn"], t0 = time.perf_counter() - t0, time.perf_counter()
        for variant, over in variants.items():  # e.g. gnn_gatv2: {conv: gatv2}
            m = GNNModel(**{**OmegaConf.to_container(cfg.gnn), **OmegaConf.to_container(over), **epochs, "seed": cfg.seed})
            preds[variant] = m.fit([graphs[i] for i in tr], y[tr]).predict([graphs[i] for i in te])
            fit_s[variant], t0 = time.perf_counter() - t0, time.perf_counter()
        if "token_transformer" in fitted:
            tf = TransformerModel(**{**OmegaConf.to_container(cfg.transformer), **epochs, "seed": cfg.seed})
            preds["token_transformer"] = tf.fit([tokens[i] for i in tr], y[tr]).predict([tokens[i] for i in te])
            fit_s["token_transformer"], t0 = time.perf_counter() - t0, time.perf_counter()
        if "xgb_layer_sum" in fitted:
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
        for model in [m for m in [*MODELS[:1], *variants, *MODELS[1:]] if m in preds]:
            m = regression_metrics(y[te], preds[model])
            rows.append({"split": name, "model": model, "n_train": len(tr), "n_test": len(te),
                         "mape": m["mape"], "medape": m["medape"], "fit_s": fit_s[model]})
    return pd.DataFrame(rows)


def fitted_models(cfg: DictConfig) -> list[str]:
    """The learned models to fit: ``sweep.models`` (null = all of :data:`FITTED`); unknown names -> ValueError."""
    wanted = list((cfg.get("sweep") or {}).get("models") or FITTED)
    unknown = [m for m in wanted if m not in FITTED]
    if unknown:
        raise ValueError(f"sweep.models: unknown model(s) {', '.join(unknown)}; known: {', '.join(FITTED)}")
    return wanted


def objective(res: pd.DataFrame, cfg: DictConfig) -> float:
    """What :func:`main` returns to the sweeper: the mean over the scored splits of ``sweep.objective``'s
    ``sweep.metric`` (default: gnn, mape), each split weighted once whatever its number of test networks."""
    sweep = cfg.get("sweep") or {}
    model, metric = sweep.get("objective") or "gnn", sweep.get("metric") or "mape"
    rows = res[res["model"] == model]
    if rows.empty:
        raise ValueError(f"sweep.objective: model {model!r} was not scored; scored: {', '.join(res['model'].unique())}")
    return float(rows[metric].mean())


def _sweep_trial() -> dict[str, str]:
    """In a Hydra multirun (``-m hparams_search=...``): MLflow tags naming the trial (number, sweep folder,
    overrides) and the run name ``networks-trial<N>``; else nothing."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return {}
    hc = HydraConfig.get()
    return {"sweep_trial": str(hc.job.num), "sweep_dir": str(hc.sweep.dir),
            "sweep_overrides": " ".join(hc.overrides.task)[:5000], "mlflow.runName": f"networks-trial{hc.job.num}"}


def print_table(res: pd.DataFrame, title: str) -> None:
    table = Table(title=title)
    for col in ("split", "model", "n_train", "n_test", "MAPE %", "MedAPE %", "fit s"):
        table.add_column(col, justify="left" if col in ("split", "model") else "right")
    for r in res.itertuples():
        table.add_row(r.split, r.model, str(r.n_train), str(r.n_test), f"{r.mape:.1f}", f"{r.medape:.1f}",
                      f"{r.fit_s:.1f}")
    console.print(table)


def run(cfg: DictConfig) -> pd.DataFrame:
    """Measure (or reuse the cache), evaluate, print, log one MLflow run, register; returns the results table."""
    from pipelines import tracking

    out = Path(cfg.paths.output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    backend = CpuBackend(num_threads=cfg.backend.num_threads, min_run_time=cfg.backend.min_run_time,
                         warmup=cfg.backend.warmup, measure_memory=False, energy=False)
    networks = network_grid(OmegaConf.to_container(cfg.tiny_networks if cfg.tiny else cfg.networks))
    sweep = cfg.get("sweep") or {}
    t0 = time.perf_counter()
    nets, lay, cpu, hit = collect_cached(networks, backend, out / sweep["cache_dir"] if sweep.get("cache") else None)
    collect_s = time.perf_counter() - t0
    registry = HardwareRegistry.from_dir(CONF_DIR)
    registry.add(cpu)
    console.print(f"{'cached' if hit else 'measured'} {len(nets)} networks and {len(lay)} distinct layers on "
                  f"{cpu.id} ({collect_s:.1f} s incl. MLIR export)")
    t0 = time.perf_counter()
    res = evaluate(nets, lay, registry, cfg)
    evaluate_s = time.perf_counter() - t0
    print_table(res, f"whole networks on {cpu.id} (runtime_ms)")
    score = objective(res, cfg)
    console.print(f"objective: mean {sweep.get('metric') or 'mape'} of {sweep.get('objective') or 'gnn'} over "
                  f"{res['split'].nunique()} split(s) = {score:.2f} (evaluate {evaluate_s:.1f} s)")

    tracking.setup(cfg.mlflow, out)
    import mlflow

    trial = _sweep_trial()
    with mlflow.start_run(run_name=trial.pop("mlflow.runName", "networks"), tags=trial), tempfile.TemporaryDirectory() as tmp:
        mlflow.log_params({"tiny": cfg.tiny, "hardware": cpu.id, "n_networks": len(nets),
                           "n_layers": len(lay), "gnn": json.dumps(OmegaConf.to_container(cfg.gnn)),
                           "graph": json.dumps(OmegaConf.to_container(cfg.graph)),
                           "transformer": json.dumps(OmegaConf.to_container(cfg.transformer)),
                           "measurements_cached": hit, "sweep.models": json.dumps(fitted_models(cfg)),
                           "sweep.splits": json.dumps(sorted(res["split"].unique()))}
                          | tracking.flat_params(cfg, ["gnn", "transformer"]))
        mlflow.log_metrics({"collect_s": collect_s, "evaluate_s": evaluate_s, "objective": score})
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
def main(cfg: DictConfig) -> float:
    """Run once; returns the sweep objective (:func:`objective`) for the Optuna sweeper."""
    return objective(run(cfg), cfg)


if __name__ == "__main__":
    main()
