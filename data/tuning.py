"""What a tuning run searches and how it measures: a space of configurations and a measure function.

A :class:`Space` is one row per candidate configuration (the tunables as columns) and, for a replayed cache, the
recorded runtimes. It comes from

* a space file (YAML or JSON, :func:`load_space`) naming the tunables and their values, and optional restrictions,
  Python expressions over the tunables that a configuration must satisfy (as Kernel Tuner's ``restrictions``)::

      tunables: {block_size_x: [16, 32, 64], tile_size_x: [1, 2, 4], use_shmem: [0, 1]}
      restrictions: ["block_size_x * tile_size_x <= 128"]

* a Kernel Tuner cache (``.json`` or ``.json.gz``, :func:`load_cache_space`): its configurations are the space, its
  recorded mean times the measurements (configurations that failed when recorded fail when replayed too).

:func:`command_measure` turns a shell command into the measure function of ``models.tuning.tune``: run once per
configuration, the configuration as one JSON object on stdin, its runtime in ms the last number on stdout
(:func:`parse_runtime`). A non-zero exit, no number or a run past the timeout is a failed configuration (NaN).
:func:`read_prior` reads measurements of the same tunables elsewhere (another GPU; ``.csv`` / ``.json`` /
``.jsonl`` with the tunables' columns and ``runtime_ms``, optional ``hardware``). Bad input is a ``ValueError``
naming the problem.
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

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


@dataclass
class Space:
    """The candidate configurations (one row each, the tunables as columns) and, for a replayed cache, the
    recorded runtimes (NaN = failed when recorded)."""

    configs: pd.DataFrame
    recorded_ms: np.ndarray | None = None
    source: str = ""
    meta: dict = field(default_factory=dict)


def _read_doc(path: Path) -> dict:
    import yaml
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

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
    """A space file (module docstring) as a :class:`Space`."""
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


def plain(value):
    """A NumPy scalar as the Python value (JSON writes it)."""
    return value.item() if isinstance(value, np.generic) else value


def command_measure(
    command: str, configs: pd.DataFrame, timeout_s: float | None = 60.0, log: Callable[[str], None] | None = None
) -> Callable[[np.ndarray], np.ndarray]:
    """A ``measure(indices)`` for ``models.tuning.tune`` that runs ``command`` (a shell command line) once per
    configuration, the configuration as JSON on stdin; a failure (module docstring) is NaN, said through ``log``."""
    if not command or not str(command).strip():
        raise ValueError("--measure: empty command")

    def measure(indices: np.ndarray) -> np.ndarray:
        out = []
        for i in np.asarray(indices, int):
            config = {k: plain(v) for k, v in configs.iloc[i].items()}
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


def read_prior(path: str | Path) -> pd.DataFrame:
    """Measurements of the same tunables elsewhere (``.csv``, ``.jsonl`` / ``.ndjson``, ``.json`` records)."""
    path = Path(path)
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
