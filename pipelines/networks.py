"""Whole-network cost models on this CPU: measure -> MLIR -> GNN / token transformer vs layer-sum and roofline
baselines (``conf/networks.yaml``).

    python -m pipelines.networks                          # every network of the grid
    python -m pipelines.networks debug=tiny_networks      # a few networks, a few epochs
    python -m pipelines.networks -m hparams_search=gnn_optuna   # an Optuna sweep; main returns the objective

Measures every network of the grid and its distinct layers on one backend (``backend``; ``cache: true`` reuses the
measurements, ``data.collect.collect_cached``), exports each network's MLIR; for the composed and residual models
(``composed``, ``gnn_residual``, ``token_transformer_residual``) measures a seeded kernel sweep and fits the kernel
model of record on it (``kernel_sweep``, ``kernel_model``; or ``kernel_model_path``), then the one library path
(``pipelines.experiment``) scores every model on the architecture splits (``models.splits.architecture_folds``:
each family held out, groups of families, deeper networks) and registers ``register.models`` (calibrated on a held-out
fraction of each family). Returns the mean over the scored splits of ``objective.model``'s ``objective.metric``.
"""

from __future__ import annotations

import logging
import os
import time
import warnings

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from data.collect import collect_cached, collect_sweep_cached, make_backends, network_grid
from models.compose import fit_kernel_model
from models.splits import architecture_folds
from pipelines import experiment, report, tracking

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
warnings.filterwarnings("ignore", category=UserWarning, module=r"mlflow\.")
for name in ("mlflow", "lightning", "lightning.pytorch"):
    logging.getLogger(name).setLevel(logging.ERROR)


def with_mlir(workload: dict) -> dict:
    """A network's MLIR module text (``features.mlir.export``), kept beside its measurement."""
    from features.mlir.export import export_workload

    return {"mlir": export_workload(workload["op"], workload["params"], workload["dtype"])}


def folds(cfg: DictConfig, nets) -> dict[str, list]:
    """The architecture splits of these networks, restricted to ``eval_splits`` (unknown names: ValueError)."""
    out = architecture_folds(nets, **OmegaConf.to_container(cfg.splits, resolve=True))
    unknown = [s for s in cfg.eval_splits or [] if s not in out]
    if unknown:
        raise ValueError(f"eval_splits: unknown split(s) {', '.join(unknown)}; these networks have {', '.join(out)}")
    return {s: out[s] for s in cfg.eval_splits} if cfg.eval_splits else out


def needs_kernel_model(cfg: DictConfig) -> bool:
    """Does any model of the job compose kernels (its ``kernel_model`` is the job's ``kernel_model_path``)?"""
    return any(isinstance(e, DictConfig) and "kernel_model" in e for e in cfg.model.values())


def kernel_model(cfg: DictConfig, backend, registry, out) -> str:
    """The kernel model of record of the composed / residual models: ``kernel_model_path`` when given, else a model
    (``kernel_model``) fitted on a seeded sweep of kernels (``kernel_sweep``) measured on ``backend``
    (``data.collect.collect_sweep_cached``, cached under ``<output_dir>/<cache_dir>`` when ``cache`` is on;
    ``models.compose.fit_kernel_model``). Returns the saved model's directory."""
    if cfg.kernel_model_path:
        return str(cfg.kernel_model_path)
    sweep = OmegaConf.to_container(cfg.kernel_sweep, resolve=True)
    rows, key = collect_sweep_cached(sweep, backend, cfg.seed, out / cfg.cache_dir if cfg.cache else None)
    model = instantiate(cfg.kernel_model)
    directory = out / "kernel_models" / f"{type(model).__name__}-{key}"
    fit_kernel_model(model, rows, registry, directory)
    report.console.print(
        f"kernel model of record: {type(model).__name__} fitted on {len(rows)} swept kernels "
        f"({len(sweep['ops'])} ops) -> {directory}"
    )
    return str(directory)


def run(cfg: DictConfig) -> tuple[experiment.Experiment, float]:
    out, registry, target = (
        experiment.output_dir(cfg),
        experiment.hardware_registry(cfg),
        experiment.Target.from_config(cfg.target),
    )
    options = {k: v for k, v in OmegaConf.to_container(cfg.backend, resolve=True).items() if k != "name"}
    [backend] = make_backends(
        cfg.backend.name,
        experiment.load_option("collect/backend", cfg.backend.name),
        OmegaConf.create(options),
        registry,
    )
    t0 = time.perf_counter()
    nets, layers, spec, hit = collect_cached(
        network_grid(OmegaConf.to_container(cfg[cfg.grid], resolve=True)),
        backend,
        out / cfg.cache_dir if cfg.cache else None,
        annotate=with_mlir,
    )
    registry.add(spec)
    report.console.print(
        f"{'cached' if hit else 'measured'} {len(nets)} networks and {len(layers)} distinct layers on "
        f"{spec.id} ({time.perf_counter() - t0:.1f} s incl. MLIR export)"
    )
    if needs_kernel_model(cfg):
        path = kernel_model(cfg, backend, registry, out)
        with open_dict(cfg):
            cfg.kernel_model_path = path
    described = nets.drop(columns=["mlir"])
    described = described.astype({c: str for c in described.columns if described[c].dtype == object})
    params = {
        "grid": cfg.grid,
        "hardware": spec.id,
        "n_networks": len(nets),
        "n_layers": len(layers),
        "measurements_cached": hit,
        "graph": OmegaConf.to_container(cfg.graph),
        "execution": cfg.execution,
    }
    exp = experiment.run_experiment(
        cfg,
        nets,
        registry,
        target,
        folds=folds(cfg, nets),
        context={"layers": layers},
        dataset={"rows": described, "source": "pipelines.networks", "digest": experiment.dataset_digest(nets)},
        params=params,
        note=report.console.print,
    )
    score = experiment.mean_over_splits(exp, cfg.objective.model, cfg.objective.metric)
    tracking.log_metrics(exp.results[cfg.objective.model].run_id, {f"objective/all/{cfg.objective.metric}": score})
    report.networks(exp, f"whole networks on {spec.id} ({target.name})")
    report.console.print(
        f"objective: mean {cfg.objective.metric} of {cfg.objective.model} over "
        f"{len(exp.eval_splits)} split(s) = {score:.2f}"
    )
    report.registered(exp, cfg)
    return exp, score


@hydra.main(config_path="../conf", config_name="networks", version_base=None)
def main(cfg: DictConfig) -> float:
    return run(cfg)[1]


if __name__ == "__main__":
    main()
