"""Parquet storage for measurement rows: validated on write and on read, written atomically."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pandas as pd

from data.schema import validate


def write_dataset(df: pd.DataFrame, path: str | Path) -> Path:
    """Validate then write ``df`` to ``path`` atomically (temp file + rename: never half-written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    df = validate(df)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        df.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def read_dataset(path: str | Path) -> pd.DataFrame:
    return validate(pd.read_parquet(path))
