"""``costmodel tune`` end to end: replaying a shared Kernel Tuner cache, a real measure command (a Python one-liner
reading the configuration on stdin), failed measurements, bad input as one error line, and the MLflow entry point."""

from __future__ import annotations

import json
import shlex
import sqlite3
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from data.tuning import load_cache_space, load_space, parse_runtime
from pipelines.cli import main
from tests.conftest import SHARED

A100 = SHARED / "kerneltuner" / "convolution_milo" / "A100.json.gz"
A4000 = SHARED / "kerneltuner" / "convolution_milo" / "A4000.json.gz"
# runtime (x - 4)^2 + 1 (+ 0.5 for y = "b"); x = 5 exits 3 (a crash), x = 3 with y = "b" prints no number
BENCH = (
    "import json, sys; c = json.load(sys.stdin); "
    "sys.exit(3) if c['x'] == 5 else None; "
    "t = (c['x'] - 4) ** 2 + 1 + 0.5 * (c['y'] == 'b'); "
    "print('n/a' if (c['x'], c['y']) == (3, 'b') else f'time: {t} ms')"
)


def test_replay_a_shared_cache(tmp_path, capsys):
    history = tmp_path / "history.csv"
    rc = main(["tune", "--cache", str(A100), "--budget", "30", "--batch", "10", "--output", str(history)])
    out = capsys.readouterr().out
    assert rc == 0
    h = pd.read_csv(history)
    space = load_cache_space(A100)
    assert len(h) == 30 and h["step"].tolist() == list(range(1, 31)) and h["batch"].max() == 2
    assert h[space.configs.columns].drop_duplicates().shape[0] == 30  # no configuration measured twice
    # every measurement is the cache's recorded time of that configuration (failed ones stay failed)
    key = space.configs.astype(str).agg(",".join, axis=1)
    recorded = dict(zip(key, space.recorded_ms))
    got = h[space.configs.columns].astype(str).agg(",".join, axis=1).map(recorded).to_numpy(float)
    np.testing.assert_allclose(h["runtime_ms"].to_numpy(float), got, equal_nan=True)
    assert (h["status"] == "failed").sum() == np.isnan(got).sum()
    assert h.loc[h["batch"] > 0, "reason"].eq("thompson").all()  # the model picks after the random first batch
    best = h["runtime_ms"].min()
    assert f"{best:.6g} ms" in out and "found / best recorded" in out
    assert best >= np.nanmin(space.recorded_ms)


def test_replay_with_a_prior_from_another_gpu(tmp_path, capsys):
    other = load_cache_space(A4000)
    prior = other.configs.assign(runtime_ms=other.recorded_ms, hardware="A4000").dropna().head(600)
    prior.to_csv(tmp_path / "prior.csv", index=False)
    rc = main(
        [
            "tune",
            "--cache",
            str(A100),
            "--budget",
            "20",
            "--batch",
            "10",
            "--prior",
            str(tmp_path / "prior.csv"),
            "--output",
            str(tmp_path / "h.json"),
        ]
    )
    assert rc == 0
    h = pd.read_json(tmp_path / "h.json")
    assert (h.loc[h["batch"] == 0, "reason"] == "prior").all() and len(h) == 20
    capsys.readouterr()


def test_real_measure_command_with_failures(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text("tunables: {x: [1, 2, 3, 4, 5, 6], y: [a, b]}\nrestrictions: [\"x % 2 == 0 or y == 'a'\"]\n")
    assert len(load_space(space).configs) == 9  # 6 even-x pairs + 3 odd x with y = a
    cmd = f"{sys.executable} -c {shlex.quote(BENCH)}"
    rc = main(
        [
            "tune",
            "--space",
            str(space),
            "--measure",
            cmd,
            "--budget",
            "9",
            "--batch",
            "3",
            "--output",
            str(tmp_path / "h.csv"),
        ]
    )
    captured = capsys.readouterr()
    assert rc == 0
    h = pd.read_csv(tmp_path / "h.csv")
    assert len(h) == 9 and ((h["x"] % 2 == 0) | (h["y"] == "a")).all()
    failed = h[h["status"] == "failed"]
    assert sorted(failed["x"]) == [5] and failed["runtime_ms"].isna().all()  # exit 3; x = 3, y = b is not in space
    ok = h[h["status"] == "ok"].set_index(["x", "y"])["runtime_ms"]
    assert ok[(4, "a")] == 1.0 and ok[(6, "b")] == 5.5 and ok[(3, "a")] == 2.0
    assert 'best: {"x": 4, "y": "a"} 1 ms' in captured.out
    assert "exit 3" in captured.err


def test_no_number_is_a_failure(tmp_path, capsys):
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"tunables": {"x": [3], "y": ["a", "b"]}}))
    cmd = f"{sys.executable} -c {shlex.quote(BENCH)}"
    rc = main(["tune", "--space", str(space), "--measure", cmd, "--budget", "2"])
    captured = capsys.readouterr()
    assert rc == 0 and "no number printed" in captured.err and "measured 2, failed 1" in captured.out
    assert parse_runtime("compiled in 3 s\n0.25\n") == 0.25 and np.isnan(parse_runtime("error"))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--space", "missing.yaml", "--measure", "true"], "space file not found: missing.yaml"),
        (["--space", "space.yaml"], "--space needs --measure"),
        (["--cache", str(A100), "--measure", "true"], "drop --measure"),
        (["--cache", str(A100), "--budget", "0"], "budget must be > 0"),
        (["--cache", "space.yaml"], "not a Kernel Tuner cache"),
        (["--space", "bad.yaml", "--measure", "true"], "restriction 'z > 1' fails"),
        (["--space", "space.yaml", "--measure", "true", "--output", "h.txt"], "unsupported output 'h.txt'"),
    ],
)
def test_bad_input_is_one_line(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text("tunables: {x: [1, 2]}\n")
    (tmp_path / "bad.yaml").write_text("tunables: {x: [1, 2]}\nrestrictions: ['z > 1']\n")
    rc = main(["tune", *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("costmodel: error: ") and message in err[0]


@pytest.mark.slow
def test_hydra_entry_point_logs_to_mlflow(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.tune",
            f"cache={A100}",
            "budget=20",
            "batch=10",
            f"paths.output_dir={tmp_path}",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "found / best recorded" in done.stdout
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        metrics = dict(db.execute("select key, value from metrics").fetchall())
    assert metrics["tune/A100/measured"] == 20 and metrics["tune/A100/best_ms"] >= metrics["tune/A100/best_recorded_ms"]


def test_unparsable_space_file(tmp_path, capsys):
    (tmp_path / "s.yaml").write_text("tunables: {x: [1, 2\n")
    rc = main(["tune", "--space", str(tmp_path / "s.yaml"), "--measure", "true"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "cannot parse" in err[0]


@pytest.mark.parametrize("budget, measured", [("1.0", 6), ("1", 1), ("0.5", 3), ("4", 4), ("4.0", 4)])
def test_a_decimal_budget_up_to_one_is_a_fraction_an_integer_a_count(tmp_path, capsys, budget, measured):
    """``--budget 1.0`` measures the whole space, ``--budget 1`` one configuration."""
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"tunables": {"x": [2, 4, 6], "y": ["a", "b"]}}))
    cmd = f"{sys.executable} -c {shlex.quote(BENCH)}"
    rc = main(["tune", "--space", str(space), "--measure", cmd, "--budget", budget, "--batch", "2"])
    out = capsys.readouterr().out
    assert rc == 0 and f"measured {measured}," in out


def test_a_fractional_count_is_refused(tmp_path, capsys):
    (tmp_path / "space.yaml").write_text("tunables: {x: [1, 2]}\n")
    rc = main(["tune", "--space", str(tmp_path / "space.yaml"), "--measure", "true", "--budget", "2.5"])
    err = capsys.readouterr().err
    assert (
        rc == 2
        and err == "costmodel: error: budget 2.5: a count is a whole number (a fraction of the space is at most 1.0)\n"
    )
