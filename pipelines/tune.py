"""``costmodel tune`` and ``python -m pipelines.tune``: model-guided auto-tuning of a real kernel, or of a recorded
Kernel Tuner cache replayed as the measure function (simulation).

    costmodel tune --space space.yaml --measure "python bench.py" [--budget 50] [--batch 5] [--strategy thompson]
                   [--prior other_gpus.csv] [--output history.csv] [--timeout 60] [--seed 0]
    costmodel tune --cache ../shared/data/kerneltuner/convolution_milo/A100.json.gz --budget 0.1
    python -m pipelines.tune cache=../shared/data/kerneltuner/gemm/RTX_2080_Ti.json.gz budget=0.05   # + MLflow

The space file (YAML or JSON) names the tunables and their values, and optional restrictions, Python expressions
over the tunables that a configuration must satisfy (as Kernel Tuner's ``restrictions``)::

    tunables: {block_size_x: [16, 32, 64], tile_size_x: [1, 2, 4], use_shmem: [0, 1]}
    restrictions: ["block_size_x * tile_size_x <= 128"]

``--measure`` is a shell command run once per configuration: it reads the configuration as one JSON object on
stdin and prints its runtime in ms (the last number on stdout). A non-zero exit, no number, a number <= 0 or a
run past ``--timeout`` seconds is a failed configuration: recorded (status ``failed``) and never picked again.
``--cache`` replays a Kernel Tuner cache (``.json`` or ``.json.gz``): its configurations are the space, its
recorded mean times the measurements (configurations that failed when recorded fail here too), and the summary
says how far the best found is from the best recorded. ``--prior``: measurements of the same tunables elsewhere
(another GPU; .csv / .json / .jsonl with the tunables' columns and ``runtime_ms``, optional ``hardware``): a
model fitted on them (runtime relative to each hardware's best) ranks the first batch.

The loop is :func:`models.tuning.tune` (bootstrap XGBoost ensemble, Thompson sampling by default); the features
are the tunables themselves (numbers as numbers, other values as category codes). Defaults: ``conf/tune.yaml``.
Bad input is a ``ValueError`` naming the problem (the CLI prints it as one line and exits with status 2).
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
import numbers
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

CONF = Path(__file__).resolve().parent.parent / "conf" / "tune.yaml"
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_SAFE = {
    "min": min,
    "max": max,
    "abs": abs,
    "int": int,
    "float": float,
    "round": round,
    "math": math,
    "len": len,
    "True": True,
    "False": False,
}


def defaults() -> dict:
    """``conf/tune.yaml`` as a plain dict (the CLI's defaults and the Hydra entry point's config)."""
    cfg = OmegaConf.load(CONF)
    return {k: v for k, v in OmegaConf.to_container(cfg, resolve=False).items() if k not in ("defaults", "hydra")}


@dataclass
class Space:
    """The candidate configurations (one row each, the tunables as columns) and, for a replayed cache, the
    recorded runtimes (NaN = failed when recorded)."""

    configs: pd.DataFrame
    recorded_ms: np.ndarray | None = None
    source: str = ""
    meta: dict = field(default_factory=dict)

    @property
    def features(self) -> pd.DataFrame:
        return encode(self.configs)


def encode(configs: pd.DataFrame) -> pd.DataFrame:
    """The tunables as model features: numeric columns as numbers, any other as a stable category code."""
    out = pd.DataFrame(index=configs.index)
    for col in configs.columns:
        values = pd.to_numeric(configs[col], errors="coerce")
        if values.isna().any():
            values = configs[col].astype(str).astype("category").cat.codes.astype(float)
        out[f"cfg_{col}"] = values.to_numpy(float)
    return out.reset_index(drop=True)


def _read_doc(path: Path) -> dict:
    if not path.exists():
        raise ValueError(f"space file not found: {path}")
    if path.suffix not in (".yaml", ".yml", ".json"):
        raise ValueError(f"unsupported space file {path.name!r}: use .yaml, .yml or .json")
    try:
        if path.suffix == ".json":
            doc = json.loads(path.read_text())
        else:
            doc = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except (ValueError, yaml.YAMLError, OmegaConfBaseException) as exc:  # a syntax error of the user's file
        raise ValueError(f"cannot parse {path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a mapping with 'tunables' (and optional 'restrictions')")  # noqa: TRY004
    return doc


def space_from_dict(doc: dict, source: str = "space") -> Space:
    """The cartesian product of ``doc["tunables"]`` ({name: [values]}) filtered by ``doc["restrictions"]``."""
    tunables = doc.get("tunables")
    if not isinstance(tunables, dict) or not tunables:
        raise ValueError(f"{source}: 'tunables' must map each tunable to a non-empty list of values")
    bad = [k for k, v in tunables.items() if not isinstance(v, list) or not v]
    if bad:
        raise ValueError(f"{source}: tunable(s) {', '.join(map(str, bad))} need a non-empty list of values")
    unknown = sorted(set(doc) - {"tunables", "restrictions"})
    if unknown:
        raise ValueError(f"{source}: unknown key(s) {', '.join(unknown)} (expected tunables, restrictions)")
    restrictions = doc.get("restrictions") or []
    if isinstance(restrictions, str):
        restrictions = [restrictions]
    names = list(tunables)
    try:
        compiled = [(r, compile(str(r), "<restriction>", "eval")) for r in restrictions]
    except SyntaxError as exc:
        raise ValueError(f"{source}: restriction {exc.text!r} is not a Python expression") from None
    kept = []
    for values in itertools.product(*tunables.values()):
        config = dict(zip(names, values))
        ok = True
        for text, code in compiled:
            try:
                ok = bool(eval(code, {"__builtins__": {}, **_SAFE}, dict(config)))
            except Exception as exc:  # noqa: BLE001 (the user's expression: named with the configuration it failed on)
                raise ValueError(f"{source}: restriction {text!r} fails on {config}: {exc}") from None
            if not ok:
                break
        if ok:
            kept.append(config)
    if not kept:
        raise ValueError(f"{source}: no configuration satisfies the restrictions")
    return Space(pd.DataFrame(kept, columns=names), source=source)


def load_space(path: str | Path) -> Space:
    path = Path(path)
    return space_from_dict(_read_doc(path), str(path))


def load_cache_space(path: str | Path) -> Space:
    """A Kernel Tuner cache (``.json`` / ``.json.gz``) as a space with its recorded mean times (ms)."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"cache not found: {path}")
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as fh:
            doc = json.load(fh)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a Kernel Tuner cache ({str(exc).splitlines()[0]})") from None
    if not isinstance(doc, dict) or "cache" not in doc or "tune_params_keys" not in doc or not doc["cache"]:
        raise ValueError(f"{path}: not a Kernel Tuner cache (no 'cache' / 'tune_params_keys')")
    keys = list(doc["tune_params_keys"])
    configs, times = [], []
    for entry in doc["cache"].values():
        configs.append({k: entry.get(k) for k in keys})
        t = entry.get("time")
        times.append(float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0 else np.nan)
    return Space(
        pd.DataFrame(configs, columns=keys),
        np.array(times, float),
        str(path),
        {"device": doc.get("device_name"), "kernel": doc.get("kernel_name")},
    )


def parse_runtime(stdout: str) -> float:
    """The last number printed (ms); NaN if none."""
    numbers = _NUMBER.findall(stdout or "")
    return float(numbers[-1]) if numbers else float("nan")


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


def command_measure(
    command: str, configs: pd.DataFrame, timeout_s: float | None = 60.0, log: Callable[[str], None] | None = None
) -> Callable[[np.ndarray], np.ndarray]:
    """A ``measure(indices)`` for :func:`models.tuning.tune` that runs ``command`` (a shell command line) once per
    configuration, the configuration as JSON on stdin; a failure (see the module doc) is NaN."""
    if not command or not str(command).strip():
        raise ValueError("--measure: empty command")

    def measure(indices: np.ndarray) -> np.ndarray:
        out = []
        for i in np.asarray(indices, int):
            config = {k: _plain(v) for k, v in configs.iloc[i].items()}
            try:
                done = subprocess.run(
                    command,
                    check=False,
                    shell=True,
                    input=json.dumps(config),
                    capture_output=True,
                    text=True,
                    timeout=timeout_s,
                )
                ms = parse_runtime(done.stdout) if done.returncode == 0 else float("nan")
                why = f"exit {done.returncode}" if done.returncode else ("no number printed" if np.isnan(ms) else "")
            except subprocess.TimeoutExpired:
                ms, why = float("nan"), f"timeout {timeout_s} s"
            if log is not None and why:
                log(f"config {json.dumps(config)} failed: {why}")
            out.append(ms)
        return np.array(out, float)

    return measure


def _read_prior(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise ValueError(f"prior file not found: {path}")
    try:
        if path.suffix == ".csv":
            return pd.read_csv(path)
        if path.suffix in (".jsonl", ".ndjson"):
            return pd.read_json(path, lines=True, dtype=False)
        if path.suffix == ".json":
            return pd.read_json(path, orient="records", dtype=False)
    except (ValueError, pd.errors.ParserError) as exc:
        raise ValueError(f"cannot parse {path}: {str(exc).splitlines()[0]}") from None
    raise ValueError(f"unsupported prior file {path.name!r}: use .csv, .jsonl or .json")


def prior_scores(path: str | Path, space: Space, seed: int = 0) -> np.ndarray:
    """Scores per candidate (lower = more promising) from measurements elsewhere: a model fitted on the prior's
    runtimes relative to each ``hardware``'s best (one group if no ``hardware`` column), on the tunables."""
    from models.tuning import default_model_factory

    prior = _read_prior(Path(path))
    missing = [c for c in [*space.configs.columns, "runtime_ms"] if c not in prior.columns]
    if missing:
        raise ValueError(f"prior {path}: column(s) missing: {', '.join(missing)}")
    runtime = pd.to_numeric(prior["runtime_ms"], errors="coerce")
    prior = prior[np.isfinite(runtime) & (runtime > 0)].reset_index(drop=True)
    if len(prior) < 2:
        raise ValueError(f"prior {path}: fewer than 2 rows with a positive runtime_ms")
    groups = prior["hardware"] if "hardware" in prior.columns else pd.Series(0, index=prior.index)
    y = prior["runtime_ms"].astype(float)
    rel = (y / y.groupby(groups).transform("min")).to_numpy(float)
    both = encode(pd.concat([space.configs, prior[list(space.configs.columns)]], ignore_index=True))
    X_space, X_prior = both.iloc[: len(space.configs)], both.iloc[len(space.configs) :]
    model = default_model_factory(seed).fit(X_prior.reset_index(drop=True), rel)
    return np.asarray(model.predict(X_space), float)


def budget_count(budget: float | int, n: int) -> int:
    """How many configurations a budget measures, at most the space: an integer is a count; a number written with a
    decimal point (a float) up to 1.0 is a fraction of the space (``1.0``: all of it), above 1 a count that must be
    whole (``50.0`` = 50)."""
    if isinstance(budget, bool) or not isinstance(budget, numbers.Real) or not budget > 0:
        raise ValueError(f"budget must be > 0 (a count, or a fraction of the space up to 1.0), got {budget!r}")
    if isinstance(budget, numbers.Integral):
        return min(n, int(budget))
    if budget <= 1:
        return min(n, max(1, math.ceil(float(budget) * n - 1e-9)))
    if not float(budget).is_integer():
        raise ValueError(f"budget {budget}: a count is a whole number (a fraction of the space is at most 1.0)")
    return min(n, int(budget))


@dataclass
class TuneRun:
    """A finished run: the history (configs + step, batch, runtime_ms, predicted_ms, reason, status), the best
    configuration and the summary metrics."""

    history: pd.DataFrame
    best_config: dict
    summary: dict


def run_tune(
    space: Space,
    measure: Callable | None = None,
    budget: float = 50,
    batch: int = 5,
    strategy: str = "thompson",
    seed: int = 0,
    prior: np.ndarray | None = None,
    n_models: int = 4,
    min_fit: int = 8,
) -> TuneRun:
    """Tune ``space`` with ``measure`` (default: replay ``space.recorded_ms``)."""
    from models.tuning import tune

    n = len(space.configs)
    count = budget_count(budget, n)
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    if measure is None:
        if space.recorded_ms is None:
            raise ValueError("no measure command and no recorded runtimes to replay")
        recorded = space.recorded_ms

        def measure(indices):
            return recorded[np.asarray(indices, int)]

    result = tune(
        space.features, measure, count, batch, strategy, seed, prior=prior, n_models=n_models, min_fit=min_fit
    )
    h = result.history
    configs = space.configs.iloc[h["index"].to_numpy()].reset_index(drop=True)
    history = pd.concat([h, configs], axis=1)
    history["status"] = np.where(history["runtime_ms"].notna(), "ok", "failed")
    ok = history["runtime_ms"].notna()
    summary = {"space_size": n, "budget": count, "measured": len(history), "failed": int((~ok).sum())}
    if not ok.any():
        return TuneRun(history, {}, summary)
    best = history.loc[history["runtime_ms"].idxmin()]
    summary["best_ms"] = float(best["runtime_ms"])
    if space.recorded_ms is not None and np.isfinite(space.recorded_ms).any():
        best_recorded = float(np.nanmin(space.recorded_ms))
        summary.update(
            best_recorded_ms=best_recorded,
            ratio_to_best=summary["best_ms"] / best_recorded,
            measurements_to_within_2pct=result.measurements_to_within(best_recorded, 0.02),
        )
    return TuneRun(history, {c: _plain(best[c]) for c in space.configs.columns}, summary)


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
    scores = prior_scores(prior, space, seed) if prior else None
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


def cli(args) -> int:
    """``costmodel tune``: raises ValueError for bad input (the CLI turns it into one error line)."""
    import sys

    d = defaults()  # options left out take conf/tune.yaml's values
    for option, key in (
        ("budget", "budget"),
        ("batch", "batch"),
        ("strategy", "strategy"),
        ("seed", "seed"),
        ("timeout", "timeout_s"),
    ):
        if getattr(args, option) is None:
            setattr(args, option, d[key])
    run, space = run_from_options(
        args.space,
        args.cache,
        args.measure,
        args.budget,
        args.batch,
        args.strategy,
        args.prior,
        args.seed,
        args.timeout,
        args.output,
        log=lambda m: print(f"costmodel: warning: {m}", file=sys.stderr),
    )
    print_run(run, space)
    return 0 if run.best_config else 1


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
