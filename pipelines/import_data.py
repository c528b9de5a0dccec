"""Import public datasets into the measurement schema: one parquet file per source.

    python -m pipelines.import_data source=neusight  # or kerneltuner, wa_hls4ml, hopper, deepbench, aiconfigurator, all
    python -m pipelines.import_data 'source=[hopper,wa_hls4ml]'
    python -m pipelines.import_data source=all data_root=/path/to/shared/data paths.output_dir=out
    python -m pipelines.import_data source=reference      # regenerate the shipped pack reference/ (data/reference.py)

Writes ``<output_dir>/datasets/import/<source>.parquet`` (validated, atomic) and prints rows / errors per source;
``source=reference`` writes the versioned pack of real runtime measurements into ``paths.reference_dir``
(default: ``<repo>/reference``) instead.
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig, ListConfig

from data.hardware import CONF_DIR, HardwareRegistry
from data.importers import SOURCES, DatasetError
from data.schema import dataset_hash
from data.store import write_dataset


def import_source(name: str, data_root=None, registry: HardwareRegistry | None = None):
    """Rows of one source (``name`` in :data:`data.importers.SOURCES`)."""
    if name not in SOURCES:
        raise DatasetError(f"unknown source {name!r}; known: {', '.join(SOURCES)}, all, reference")
    module = importlib.import_module(f"data.importers.{name}")
    return getattr(module, f"import_{name}")(data_root, registry=registry)


def run(cfg: DictConfig) -> dict[str, Path]:
    registry = HardwareRegistry.from_dir(cfg.paths.hardware_dir or CONF_DIR)
    names = list(cfg.source) if isinstance(cfg.source, ListConfig) else [str(cfg.source)]
    if names == ["all"]:
        names = list(SOURCES)
    if names == ["reference"]:  # the shipped pack of real runtime measurements (data/reference.py)
        from data import reference

        t0 = time.perf_counter()
        path = reference.write_reference(
            reference.build_reference(cfg.data_root, registry),
            cfg.paths.get("reference_dir") or reference.REFERENCE_DIR,
            cfg.data_root,
        )
        print(
            f"{reference.describe_reference(reference.load_reference(path), path)}\nsha256 "
            f"{reference.verify_reference(path)}, {time.perf_counter() - t0:.1f} s -> {path}",
            flush=True,
        )
        return {"reference": path}
    out = Path(cfg.paths.output_dir).resolve() / "datasets" / "import"
    written = {}
    for name in names:
        t0 = time.perf_counter()
        rows = import_source(name, cfg.data_root, registry)
        path = write_dataset(rows, out / f"{name}.parquet")
        n_err = int((rows["status"] == "error").sum())
        print(
            f"{name}: {len(rows)} rows ({n_err} errors), hardware {', '.join(sorted(rows['hardware'].unique()))}, "
            f"sha256 {dataset_hash(rows)[:12]}, {time.perf_counter() - t0:.1f} s -> {path}",
            flush=True,
        )
        written[name] = path
    return written


@hydra.main(version_base="1.3", config_path="../conf", config_name="import_data")
def main(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except (DatasetError, ValueError, KeyError) as exc:
        print(f"import_data: error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
