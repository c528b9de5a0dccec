from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from data.hardware import HardwareRegistry

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def registry() -> HardwareRegistry:
    return HardwareRegistry.from_dir()


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, env={**os.environ, **(env or {})}, timeout=300)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> dict:
    """The real entry point (``python -m pipelines.run``) at a tiny size against a temp sqlite store."""
    out = tmp_path_factory.mktemp("run")
    proc = subprocess.run([sys.executable, "-m", "pipelines.run", "debug=tiny", f"paths.output_dir={out}"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "COSTMODEL_OUTPUT_DIR": str(out)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"out": out, "uri": f"sqlite:///{out / 'mlflow.db'}", "stdout": proc.stdout, "stderr": proc.stderr}
