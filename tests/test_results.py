"""The results page is regenerated from an MLflow store (``python -m pipelines.results``), never typed by hand."""

import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def test_results_page_quotes_the_logged_metrics(tiny_run, tmp_path):
    out = tmp_path / "results.md"
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.results", "--tracking-uri", tiny_run["uri"], "--output", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    page = out.read_text()
    client = MlflowClient(tracking_uri=tiny_run["uri"], registry_uri=tiny_run["uri"])
    runs = client.search_runs([client.get_experiment_by_name("costmodel").experiment_id])
    assert "## costmodel" in page and "**test**" in page and "**leave_one_hardware_out**" in page
    test_table = page.split("**test**", 1)[1].split("**", 1)[0].splitlines()
    header = [c.strip() for c in test_table[2].strip("|").split("|")]
    for r in runs:  # each model's row carries its logged test MAPE and its run id
        [line] = [l for l in test_table if l.startswith(f"| {r.data.tags['model']} |")]
        cells = dict(zip(header, (c.strip() for c in line.strip("|").split("|"))))
        assert cells["mape"] == f"{r.data.metrics['test/all/mape']:.4g}" and cells["run"] == r.info.run_id[:8]
    assert f"Machine: {runs[0].data.tags['machine']}" in page and "champion" in page
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.results",
            "--tracking-uri",
            tiny_run["uri"],
            "--experiment",
            "nope",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("results: error: no experiment 'nope'")
