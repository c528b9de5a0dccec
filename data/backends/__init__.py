"""Measurement backends. Each turns one workload into one measurement row (a dict in the schema).

A backend is one file here and one config, ``conf/collect/backend/<name>.yaml`` (``_target_`` + settings): the main
job measures every backend named in ``collect.backends``, ``pipelines.collect`` one (``backend=<name>``). It satisfies
:class:`Backend`; nothing else lists the backends (``data.schema.known_backends`` reads the config folder).
"""

from __future__ import annotations

import json
import platform
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

import torch

from data.workloads import family, shape_id


@runtime_checkable
class Backend(Protocol):
    """What collection asks of a measurement backend.

    * ``name``: the rows' ``backend`` column (the config file's name);
    * ``hardware``: the :class:`data.hardware.HardwareSpec` it measures, read lazily (a property may detect the CPU
      or open the GPU; it is not part of the runtime ``isinstance`` check for that reason);
    * ``measure(workload)``: one workload (``{"op", "params", "dtype"}``) -> one row dict in the measurement schema
      (``base_row`` gives its identity part); failures are rows with ``status="error"`` or exceptions, which
      ``data.engine.safe_measure`` turns into error rows.
    """

    name: str

    def measure(self, workload: dict) -> dict: ...


def base_row(workload: dict, hardware: str, backend: str, source: str, env: dict) -> dict:
    """The identity part of a row, shared by every backend."""
    op, params = workload["op"], workload["params"]
    return {
        "op": op,
        "family": family(op),
        "dtype": workload["dtype"],
        **params,
        "shape_id": shape_id(op, params),
        "hardware": hardware,
        "backend": backend,
        "source": source,
        "env": json.dumps(env, sort_keys=True),
        "timestamp": datetime.now(UTC),
    }


def environment(**extra) -> dict:
    return {"torch": torch.__version__, "python": platform.python_version(), "host": platform.node(), **extra}


def hardware_spec(name: str, hardware_dir: str | None = None):
    """A spec from the hardware registry by id or alias (Hydra configs use it as a ``_target_``)."""
    from data.hardware import CONF_DIR, HardwareRegistry

    return HardwareRegistry.from_dir(hardware_dir or CONF_DIR).get(name)
