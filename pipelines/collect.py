"""Collection entry point: backend x workload family x sweep -> a sharded, resumable dataset directory.

    python -m pipelines.collect backend=cpu workload=gemm sweep=sobol n=500
    python -m pipelines.collect backend=sim-roofline backend.hardware.name=H100-SXM workload=conv sweep=lhs
    python -m pipelines.collect collect.engine=ray collect.ray.num_cpus=2 backend=sim-roofline

Config: ``conf/collect.yaml`` (primary) with the groups ``conf/collect/{backend,workload,sweep}/``.
Output: ``outputs/datasets/<name>/`` (``shards/*.parquet`` + ``manifest.jsonl``, see ``data/store.py``, and
``hardware/<id>.json``: the spec of the hardware measured, e.g. the detected CPU's measured peaks);
read it with ``data.store.read_dataset(dir)``. Rerunning the same command resumes where it stopped.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from data.engine import make_engine, run_sweep
from data.schema import register_backend
from data.store import ShardedDataset
from data.sweep import make_sweep

log = logging.getLogger(__name__)
GROUPS_DIR = Path(__file__).resolve().parent.parent / "conf" / "collect"


def sweep_workloads(cfg: DictConfig) -> list[dict]:
    """The workload list a composed collect config describes (deterministic for a given config)."""
    wl, sw = cfg.workload, cfg.sweep
    return make_sweep(
        OmegaConf.to_container(wl.ops, resolve=True),
        list(wl.dtypes),
        n=sw.n,
        kind=sw.kind,
        seed=sw.seed,
        max_flops=float(wl.get("max_flops", float("inf"))),
        max_bytes=float(wl.get("max_bytes", float("inf"))),
        points=int(sw.get("points", 4)),
    )


def engine_from_config(cfg: DictConfig):
    if cfg.collect.engine == "ray":
        return make_engine("ray", **OmegaConf.to_container(cfg.collect.ray, resolve=True))
    return make_engine(cfg.collect.engine)


def collect(cfg: DictConfig) -> dict:
    """Compose backend + workloads + engine, run the sweep into the dataset directory; returns counts."""
    backend = instantiate(cfg.backend)
    register_backend(backend.name)  # a backend config from another search-path folder is valid in its rows too
    workloads = sweep_workloads(cfg)
    dataset = ShardedDataset(cfg.paths.dataset_dir)
    _save_hardware_spec(backend.hardware, dataset.path)
    stats = run_sweep(
        backend,
        workloads,
        dataset,
        engine_from_config(cfg),
        shard_rows=int(cfg.collect.shard_rows),
        progress=bool(cfg.progress),
        desc=f"{cfg.name} [{cfg.collect.engine}]",
    )
    stats.update(dataset=str(dataset.path), rows_in_dataset=len(dataset))
    print(
        f"{cfg.name}: {stats['total']} workloads, {stats['skipped']} already present, {stats['measured']} "
        f"measured ({stats['errors']} errors), {stats['committed']} rows committed in {stats['seconds']:.1f} s "
        f"-> {dataset.path} ({stats['rows_in_dataset']} rows)"
    )
    return stats


def _save_hardware_spec(spec, path: Path) -> None:
    """Keep the spec the rows were measured on (a detected CPU's measured peaks) next to the shards."""
    target = path / "hardware" / f"{spec.id}.json"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(spec.to_dict(), indent=1, sort_keys=True))
        os.replace(tmp, target)


@hydra.main(version_base="1.3", config_path="../conf", config_name="collect")
def _main(cfg: DictConfig) -> None:
    collect(cfg)


def main() -> None:
    # the groups live in conf/collect/ (conf/collect.yaml's defaults say backend/workload/sweep): add it
    # to Hydra's search path so `backend=cpu` works without a package prefix
    if not any(a.startswith("hydra.searchpath") for a in sys.argv[1:]):
        sys.argv.append(f"hydra.searchpath=['file://{GROUPS_DIR}']")
    _main()


if __name__ == "__main__":
    main()
