"""The ``shared_data`` marker: where ../shared/data is missing, every test that reads it is skipped with one and
the same reason (tests/conftest.py), none errors or fails."""

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.slow
def test_missing_shared_data_skips_marked_tests_with_one_reason(tmp_path):
    missing = tmp_path / "no-shared-data"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "-m",
            "shared_data",
            "tests/test_hardware.py",
            "tests/test_importers.py",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={**os.environ, "COSTMODEL_SHARED_DATA": str(missing)},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    skipped = int(re.search(r"(\d+) skipped", out).group(1))
    assert skipped >= 7 and not re.search(r"\d+ (passed|failed|error)", out), out[-3000:]
    reasons = {line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("SKIPPED")}
    assert reasons == {
        f"shared_data: {missing} is missing (the public datasets these tests read in place; set "
        "COSTMODEL_SHARED_DATA to their folder)"
    }, reasons
