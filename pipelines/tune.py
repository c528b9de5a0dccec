"""``costmodel tune`` and ``python -m pipelines.tune``: model-guided auto-tuning of a real kernel, or of a recorded
Kernel Tuner cache replayed as the measure function (simulation).

    costmodel tune --space space.yaml --measure "python bench.py" [--budget 50] [--batch 5] [--strategy thompson]
                   [--prior other_gpus.csv] [--output history.csv] [--timeout 60] [--seed 0]
    costmodel tune --cache ../shared/data/kerneltuner/convolution_milo/A100.json.gz --budget 0.1
    python -m pipelines.tune cache=../shared/data/kerneltuner/gemm/RTX_2080_Ti.json.gz budget=0.05   # + MLflow

:func:`run_from_options`: the space and its measure function (``data.tuning``: a space file with ``--measure``, a
shell command run once per configuration, or a replayed ``--cache``; ``--prior``: measurements of the same tunables
elsewhere, ``data.tuning.read_prior``, whose model ranks the first batch, ``models.tuning.prior_scores``) -> the
loop (``models.tuning.run_tune``: bootstrap XGBoost ensemble over the tunables, Thompson sampling by default) -> the
history written to ``output``. Defaults: ``conf/tune.yaml``. Bad input is a ``ValueError`` naming the problem (the CLI
prints it as one line and exits with status 2).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from data.tuning import Space, command_measure, load_cache_space, load_space, read_prior
from models.tuning import TuneRun, prior_scores, run_tune

CONF = Path(__file__).resolve().parent.parent / "conf" / "tune.yaml"


def defaults() -> dict:
    """``conf/tune.yaml`` as a plain dict (the CLI's defaults and the Hydra entry point's config)."""
    cfg = OmegaConf.load(CONF)
    return {k: v for k, v in OmegaConf.to_container(cfg, resolve=False).items() if k not in ("defaults", "hydra")}


def _write_history(history: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        history.to_csv(path, index=False)
    elif path.suffix in (".jsonl", ".ndjson"):
        history.to_json(path, orient="records", lines=True)
    elif path.suffix == ".json":
        history.to_json(path, orient="records")
    else:
        raise ValueError(f"unsupported output {path.name!r}: use .csv, .jsonl or .json")


def run_from_options(
    space_path=None,
    cache=None,
    measure=None,
    budget=50,
    batch=5,
    strategy="thompson",
    prior=None,
    seed=0,
    timeout_s=60.0,
    output=None,
    n_models=4,
    min_fit=8,
    log: Callable[[str], None] = print,
) -> tuple[TuneRun, Space]:
    """What ``costmodel tune`` and ``python -m pipelines.tune`` run: load, check, tune, write ``output``."""
    if bool(space_path) == bool(cache):
        raise ValueError("give exactly one of --space (with --measure) or --cache")
    if output and Path(output).suffix not in (".csv", ".jsonl", ".ndjson", ".json"):
        raise ValueError(f"unsupported output {Path(output).name!r}: use .csv, .jsonl or .json")
    if space_path:
        if not measure:
            raise ValueError("--space needs --measure (a command that prints one configuration's runtime in ms)")
        space = load_space(space_path)
        fn = command_measure(measure, space.configs, timeout_s, log=log)
    else:
        if measure:
            raise ValueError("--cache replays recorded runtimes: drop --measure")
        space, fn = load_cache_space(cache), None
    scores = prior_scores(read_prior(prior), space, seed, where=str(prior)) if prior else None
    run = run_tune(space, fn, budget, batch, strategy, seed, scores, n_models, min_fit)
    if output:
        _write_history(run.history, Path(output))
    return run, space


def print_run(run: TuneRun, space: Space, out=print) -> None:
    cols = ["step", "batch", *space.configs.columns, "runtime_ms", "predicted_ms", "reason", "status"]
    with pd.option_context("display.width", 200, "display.max_columns", 40, "display.max_rows", 400):
        out(run.history[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    s = run.summary
    out(f"\nspace {s['space_size']} configurations ({space.source}), measured {s['measured']}, failed {s['failed']}")
    if not run.best_config:
        out("no configuration succeeded")
        return
    out(f"best: {json.dumps(run.best_config)} {s['best_ms']:.6g} ms")
    if "best_recorded_ms" in s:
        out(
            f"replay: best recorded {s['best_recorded_ms']:.6g} ms; found / best recorded = {s['ratio_to_best']:.4f}; "
            f"measurements to within 2 %: {s['measurements_to_within_2pct']:g}"
        )


def main_hydra() -> None:
    """``python -m pipelines.tune key=value ...``: the same run from conf/tune.yaml, logged as one MLflow run
    (``pipelines.tracking.log_run``: params, ``tune/<space>/<metric>`` metrics, the history as an artifact)."""
    import sys

    import hydra
    from omegaconf import DictConfig

    @hydra.main(config_path="../conf", config_name="tune", version_base=None)
    def _main(cfg: DictConfig) -> None:
        from pipelines import tracking

        out = Path(cfg.paths.output_dir)
        try:
            run, space = run_from_options(
                cfg.space,
                cfg.cache,
                cfg.measure,
                cfg.budget,
                cfg.batch,
                cfg.strategy,
                cfg.prior,
                cfg.seed,
                cfg.timeout_s,
                cfg.output,
                cfg.n_models,
                cfg.min_fit,
            )
        except ValueError as exc:
            print(f"pipelines.tune: error: {exc}", file=sys.stderr)
            sys.exit(2)
        print_run(run, space)
        tracking.setup(cfg.mlflow, out)
        name = Path(space.source).name.split(".")[0] or "space"

        def files(directory: Path):
            path = directory / "tune_history.csv"
            run.history.to_csv(path, index=False)
            return {}, [path]

        params = {k: cfg[k] for k in ("space", "cache", "measure", "budget", "batch", "strategy", "prior", "seed")}
        logged = tracking.log_run(
            "tune",
            metrics={f"tune/{name}/{k}": v for k, v in run.summary.items()},
            params=params,
            tags={"source": space.source, **{k: str(v) for k, v in space.meta.items()}},
            files=files,
        )
        print(f"MLflow run {logged.run_id}")

    _main()


if __name__ == "__main__":
    main_hydra()
