"""Run backends over workloads with a progress bar; returns validated measurement rows.

* :func:`collect`: one backend, a list of workloads, in memory (for long or resumable sweeps use
  ``data.engine.run_sweep``, a sharded crash-safe dataset directory);
* :func:`collect_from_config`: the main job's collection: one seeded shape sweep measured by every backend of
  ``collect.backends`` (``conf/collect/backend/<name>.yaml`` + the job's per-backend settings);
* :func:`detected_backend` + :func:`measure_frame`: a table of workloads measured on this machine (a GPU's
  calibration sweep);
* :func:`collect_sweep_cached`: a seeded kernel sweep on one backend (the kernel model of record of the whole-network
  models), with an optional on-disk cache;
* :func:`collect_networks` / :func:`collect_cached`: whole networks and their distinct layers on one backend, with an
  optional on-disk cache so every trial of a sweep sees the same timings.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
from collections.abc import Callable
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from data.schema import BACKEND_CONF_DIR, register_backend, validate

WORKLOAD_CONF_DIR = BACKEND_CONF_DIR.parent / "workload"


def collect(backend, workloads: list[dict], desc: str | None = None, progress: bool = True) -> pd.DataFrame:
    """In memory, in order; anything a backend raises becomes an error row (``data.engine.safe_measure``)."""
    from data.engine import safe_measure

    register_backend(backend.name)
    rows = [
        safe_measure(backend, w)
        for w in tqdm(workloads, desc=desc or backend.name, disable=not progress, unit="cfg", dynamic_ncols=True)
    ]
    return validate(pd.DataFrame(rows))


def backend_config(name: str):
    """``conf/collect/backend/<name>.yaml`` (the default loader of :func:`collect_from_config`)."""
    from omegaconf import OmegaConf

    path = BACKEND_CONF_DIR / f"{name}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in BACKEND_CONF_DIR.glob("*.yaml")))
        raise ValueError(f"collect.backends: unknown backend {name!r}; known (conf/collect/backend): {known}")
    return OmegaConf.load(path)


def workload_config(name: str) -> dict:
    """``conf/collect/workload/<name>.yaml`` as a plain dict (``dtypes``, ``max_flops``, ``max_bytes``, ``ops``): a
    workload family read outside a collect job (the calibration pool, ``models.calibration.candidates``)."""
    from omegaconf import OmegaConf

    path = WORKLOAD_CONF_DIR / f"{name}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in WORKLOAD_CONF_DIR.glob("*.yaml")))
        raise ValueError(f"unknown workload {name!r}; known (conf/collect/workload): {known}")
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)


def make_backends(name: str, base, options, registry) -> list:
    """The backends one ``collect.backends`` entry stands for: ``base`` (its config file) with the job's ``options``
    (``collect.backend.<name>``) merged over it; ``options.hardware`` (a registry id or a list of them) makes one
    backend per hardware, each given the registry's spec. ``dtypes`` is the sweep's, not the backend's."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    options = OmegaConf.to_container(options, resolve=True) if options is not None else {}
    options.pop("dtypes", None)
    hardware = options.pop("hardware", None)
    # a config may interpolate the collection name (${name}); resolve it against this job's name for the backend
    node = OmegaConf.merge({"name": name, "backend": base}, {"backend": options})
    cfg = OmegaConf.to_container(node, resolve=True)["backend"]
    if hardware is None:
        try:
            return [instantiate(cfg)]
        except InstantiationException as exc:  # a setting the backend refuses: its own one-line error, not Hydra's
            if isinstance(exc.__cause__, ValueError):
                raise exc.__cause__ from None
            raise
    cfg.pop("hardware", None)
    make = instantiate(cfg, _partial_=True)  # the spec object goes in as is (instantiate would make it a config)
    return [make(hardware=registry.get(hw)) for hw in ([hardware] if isinstance(hardware, str) else hardware)]


def detected_backend(name: str, registry, options: dict | None = None):
    """The backend ``name`` (``conf/collect/backend/<name>.yaml`` + ``options``) on this machine, its hardware
    detected: a backend that cannot run here (no CUDA device, a GPU the registry lacks) is one ValueError line."""
    from omegaconf import OmegaConf

    backend = make_backends(name, backend_config(name), OmegaConf.create(options or {}), registry)[0]
    try:
        backend.hardware  # noqa: B018 - detection happens on first access
    except Exception as exc:  # NoCudaDevice, an unknown GPU name: one line
        raise ValueError(str(exc).splitlines()[0]) from None
    return backend


def measure_frame(backend, workloads: pd.DataFrame, desc: str | None = None, progress: bool = True) -> pd.DataFrame:
    """``workloads`` (one per row: ``op``, ``dtype`` and the op's shape columns) measured by ``backend``: the ok
    rows (error rows, e.g. out of memory, are dropped)."""
    from data.workloads import OPS

    work = [
        {"op": r["op"], "dtype": r["dtype"], "params": {p: int(r[p]) for p in OPS[r["op"]].params}}
        for r in workloads.to_dict("records")
    ]
    rows = collect(backend, work, desc=desc, progress=progress)
    return rows[rows["status"] == "ok"].reset_index(drop=True)


def collect_from_config(cfg, registry, progress: bool = True, load: Callable | None = None):
    """The collection stage of the main job: one seeded shape sweep (``cfg.sweep``), measured by every backend
    named in ``cfg.backends`` with its settings from ``cfg.backend.<name>`` (``dtypes``: the sweep's dtypes on it,
    default float32; ``hardware``: one backend per listed registry id); a backend with a ``rows()`` method replays
    rows measured elsewhere (``data.backends.reference``) instead. ``load(name)`` returns a backend's config
    (default: ``conf/collect/backend/<name>.yaml``; the main job passes a loader that follows Hydra's search path).

    Returns ``(rows, specs)``: the validated rows and the hardware spec of each backend (the caller adds the ones the
    registry lacks, e.g. the detected CPU, so the featurizer knows them)."""
    from omegaconf import OmegaConf

    from data.sweep import random_sweep

    load = load or backend_config
    sweep = cfg.sweep
    ops = OmegaConf.to_container(sweep.ops, resolve=True)
    if not cfg.backends:
        raise ValueError("collect.backends is empty; nothing to measure")
    frames, specs, plan = [], [], []
    for name in cfg.backends:  # every backend built (and its settings checked) before any of them measures
        options = (cfg.get("backend") or {}).get(name)
        dtypes = list((options or {}).get("dtypes") or ["float32"])
        plan.append((dtypes, make_backends(name, load(name), options, registry)))
    for dtypes, backends in plan:
        workloads = random_sweep(ops, dtypes, cfg.seed, sweep.max_flops, sweep.max_bytes)
        for backend in backends:
            if callable(getattr(backend, "rows", None)):  # replays measured rows (reference): no sweep to measure
                frames.append(backend.rows())
                continue
            specs.append(backend.hardware)
            frames.append(collect(backend, workloads, desc=f"{backend.name} {backend.hardware.id}", progress=progress))
    return pd.concat(frames, ignore_index=True), specs


def collect_sweep_cached(sweep: dict, backend, seed: int, cache_dir: Path | None) -> tuple[pd.DataFrame, str]:
    """A seeded float32 kernel sweep (``sweep``: ``{n, max_flops, max_bytes, ops}``, ``n`` shapes of each op drawn by
    ``data.sweep.random_sweep``) measured on ``backend``: its ok rows and its key (sha256, 16 hex, of the sweep, the
    seed, the backend's hardware and ``min_run_time``). With ``cache_dir`` the rows are kept in and read back from
    ``<cache_dir>/kernels-<key>.parquet``, so every trial of a sweep sees the same timings."""
    from data.store import write_parquet_durably
    from data.sweep import random_sweep

    key = hashlib.sha256(
        json.dumps([sweep, seed, backend.hardware.id, backend.min_run_time], sort_keys=True).encode()
    ).hexdigest()[:16]
    path = cache_dir / f"kernels-{key}.parquet" if cache_dir is not None else None
    if path is not None and path.exists():
        rows = pd.read_parquet(path)
    else:
        ops = {op: {**spec, "n": sweep["n"]} for op, spec in sweep["ops"].items()}
        workloads = random_sweep(ops, ["float32"], seed, sweep["max_flops"], sweep["max_bytes"])
        rows = collect(backend, workloads, desc="kernel sweep", progress=False)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_parquet_durably(rows, path)
    return rows[rows["status"] == "ok"].reset_index(drop=True), key


# --------------------------------------------------------------------------- whole networks
def network_grid(spec: dict) -> list[dict]:
    """``{family: {param: [values]}}`` -> ``[{op, params}]`` (product of the values per family)."""
    out = []
    for op, grid in spec.items():
        keys = list(grid)
        for values in itertools.product(*(grid[k] for k in keys)):
            out.append({"op": op, "params": dict(zip(keys, (int(v) for v in values)))})
    return out


def collect_networks(
    networks: list[dict], backend, dtype: str = "float32", annotate: Callable[[dict], dict] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Measure the networks and every distinct layer of them (``data.workloads.network_layers``).

    Returns (network rows + ``annotate(workload)``'s columns (e.g. the MLIR text) + ``layer_ids``: the JSON list of
    the network's layer ids in order, layer rows + ``layer_id``); a failed measurement raises ``RuntimeError`` naming
    the network or layer."""
    from data.workloads import network_layers as layers
    from data.workloads import shape_id

    net_rows, layer_rows = [], {}
    for w in networks:
        row = backend.measure({**w, "dtype": dtype})
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
        row.update(annotate({**w, "dtype": dtype}) if annotate else {}, layer_ids=json.dumps(ids))
        net_rows.append(row)
    return pd.DataFrame(net_rows), pd.DataFrame(list(layer_rows.values()))


def cache_key(networks: list[dict], backend, dtype: str = "float32") -> str:
    """sha256 (16 hex) of what decides the measurements: the network list, the dtype, the backend's timing settings
    and the CPU it runs on (``backend.hardware.id``: CPU model and thread count)."""
    ident = {
        "networks": networks,
        "dtype": dtype,
        "hardware": backend.hardware.id,
        "backend": {k: getattr(backend, k, None) for k in ("num_threads", "min_run_time", "warmup")},
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def collect_cached(
    networks: list[dict],
    backend,
    cache_dir: Path | None,
    dtype: str = "float32",
    annotate: Callable[[dict], dict] | None = None,
):
    """:func:`collect_networks` (``annotate``: extra columns per network, e.g. its MLIR) and the backend's hardware spec
    (a CPU's peak FLOP/s and bandwidth are *measured* at detection, ``data.hardware.detect_cpu``), or their earlier
    result from ``<cache_dir>/{networks,layers}-<key>.parquet`` + ``hardware-<key>.json`` (:func:`cache_key`; written
    atomically after a fresh measurement), so every trial of a sweep sees the same timings and the same hardware.
    ``cache_dir=None`` always measures. Returns (networks, layers, spec, hit)."""
    from data.hardware import HardwareSpec
    from data.store import write_parquet_durably

    if cache_dir is None:
        return (*collect_networks(networks, backend, dtype, annotate), backend.hardware, False)
    key = cache_key(networks, backend, dtype)
    paths = {
        k: cache_dir / f"{k}-{key}.{'json' if k == 'hardware' else 'parquet'}"
        for k in ("networks", "layers", "hardware")
    }
    if all(p.exists() for p in paths.values()):
        spec = HardwareSpec.from_dict(json.loads(paths["hardware"].read_text()))
        return pd.read_parquet(paths["networks"]), pd.read_parquet(paths["layers"]), spec, True
    nets, lay = collect_networks(networks, backend, dtype, annotate)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = paths["hardware"].with_suffix(".json.tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(backend.hardware), sort_keys=True))
    os.replace(tmp, paths["hardware"])
    write_parquet_durably(lay, paths["layers"])
    write_parquet_durably(nets, paths["networks"])  # last: a hit needs all three
    return nets, lay, backend.hardware, False
