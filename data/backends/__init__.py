"""Measurement backends. Each turns one workload into one measurement row (a dict in the schema)."""
from __future__ import annotations

import json
import platform
from datetime import datetime, timezone

import torch

from data.workloads import family, shape_id


def base_row(workload: dict, hardware: str, backend: str, source: str, env: dict) -> dict:
    """The identity part of a row, shared by every backend."""
    op, params = workload["op"], workload["params"]
    return {
        "op": op, "family": family(op), "dtype": workload["dtype"], **params,
        "shape_id": shape_id(op, params), "hardware": hardware, "backend": backend,
        "source": source, "env": json.dumps(env, sort_keys=True),
        "timestamp": datetime.now(timezone.utc),
    }


def environment(**extra) -> dict:
    return {"torch": torch.__version__, "python": platform.python_version(), "host": platform.node(), **extra}


def hardware_spec(name: str, hardware_dir: str | None = None):
    """A spec from the hardware registry by id or alias (Hydra configs use it as a ``_target_``)."""
    from data.hardware import CONF_DIR, HardwareRegistry

    return HardwareRegistry.from_dir(hardware_dir or CONF_DIR).get(name)
