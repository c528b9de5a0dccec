"""The sharded dataset: append-only, crash-safe (a real SIGKILL), resumable, safe for two real writers."""

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from data.backends.sim_roofline import SimRooflineBackend
from data.schema import row_key
from data.store import ShardedDataset, read_dataset
from data.sweep import make_sweep
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def rows(registry):
    sim = SimRooflineBackend(registry.get("T4"))
    work = make_sweep(
        {"matmul": {"params": {"m": [8, 512], "n": [8, 512], "k": [8, 512]}}}, ["float32"], n=12, kind="sobol"
    )
    return pd.DataFrame([sim.measure(w) for w in work])


def test_append_read_and_dedupe(rows, tmp_path):
    ds = ShardedDataset(tmp_path / "d")
    assert len(ds) == 0 and ds.read().empty
    assert ds.append(rows.iloc[:8]) == 8
    assert ds.append(rows.iloc[4:]) == 4  # the 4 overlapping rows are already there
    assert ds.append(rows) == 0 and len(list((tmp_path / "d" / "shards").iterdir())) == 2
    back = read_dataset(tmp_path / "d")
    assert len(back) == 12 and back["runtime_ms"].tolist() == rows["runtime_ms"].tolist()
    assert ds.keys() == {row_key(r) for r in rows.to_dict("records")}


def test_torn_manifest_line_orphans_and_corruption(rows, tmp_path):
    ds = ShardedDataset(tmp_path / "d")
    ds.append(rows.iloc[:5])
    # a writer killed mid-commit: half a manifest line, an orphan shard and a temp file
    with open(ds.manifest_path, "a") as fh:
        fh.write('{"shard": "part-x.parquet", "rows": 3, "sha')
    (ds.shard_dir / "part-orphan.parquet").write_bytes(b"not committed")
    (ds.shard_dir / ".part-y.parquet.123.tmp").write_bytes(b"half")
    assert len(ds.read()) == 5  # readers see committed shards only
    assert ds.append(rows.iloc[5:]) == 7  # the next writer repairs, then commits on a fresh line
    assert len(ds.read()) == 12 and len(ds.entries()) == 2
    assert sorted(p.name for p in ds.shard_dir.iterdir()) == sorted(e["shard"] for e in ds.entries())
    shard = ds.shard_dir / ds.entries()[0]["shard"]
    shard.write_bytes(shard.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(OSError, match="corrupted shard"):
        ds.read()


def _collect(out, *extra):
    return [
        sys.executable,
        "-m",
        "pipelines.collect",
        "backend=cpu",
        "workload=tiny",
        "sweep=sobol",
        "n=40",
        "backend.timer=blocked",
        "backend.min_run_time=0.002",
        "backend.warmup=1",
        "backend.energy=false",
        "collect.shard_rows=5",
        "progress=false",
        f"paths.output_dir={out}",
        *extra,
    ]


@pytest.mark.slow
def test_kill_9_mid_sweep_then_rerun_resumes_without_duplicates_or_losses(tmp_path):
    """A real collector killed with SIGKILL after some shards landed; the same command then completes."""
    dataset = tmp_path / "datasets" / "cpu-tiny-sobol-n40-s0"
    manifest = dataset / "manifest.jsonl"
    proc = subprocess.Popen(_collect(tmp_path), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline and (not manifest.exists() or len(manifest.read_text().splitlines()) < 2):
        time.sleep(0.02)
    assert proc.poll() is None, "the collector finished before it could be killed; make the sweep longer"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = ShardedDataset(dataset)
    committed_then = {e["shard"]: e["sha256"] for e in before.entries()}
    rows_then = len(before)
    assert 10 <= rows_then < 80

    done = subprocess.run(_collect(tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"80 workloads, {rows_then} already present" in done.stdout
    after = ShardedDataset(dataset)
    df = after.read()  # verifies every shard's checksum
    keys = [row_key(r) for r in df.to_dict("records")]
    assert len(df) == 80 and len(set(keys)) == 80 and (df["status"] == "ok").all()
    # committed shards are never rewritten; nothing uncommitted is left behind
    assert {e["shard"]: e["sha256"] for e in after.entries()[: len(committed_then)]} == committed_then
    assert sorted(p.name for p in after.shard_dir.iterdir()) == sorted(e["shard"] for e in after.entries())


WRITER = """
import random, sys
import pandas as pd
from data.backends import hardware_spec
from data.backends.sim_roofline import SimRooflineBackend
from data.store import ShardedDataset
from data.sweep import make_sweep
sim = SimRooflineBackend(hardware_spec("L4"))
work = make_sweep({"add": {"params": {"m": [1, 4096], "n": [1, 4096]}}}, ["float32", "float16"], n=60, kind="lhs")
random.Random(int(sys.argv[2])).shuffle(work)
ds = ShardedDataset(sys.argv[1])
print(sys.argv[2], "ready", flush=True)
sys.stdin.readline()  # start together
n = sum(ds.append([sim.measure(w) for w in work[i:i + 3]]) for i in range(0, len(work), 3))
print("committed", n, flush=True)
"""


@pytest.mark.slow
def test_two_real_writers_on_one_dataset(tmp_path):
    """Two processes commit the same 120 rows (different orders, 3 per shard) at once: no duplicate, no loss."""
    path = tmp_path / "shared"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(seed)],
            cwd=ROOT,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for seed in (1, 2)
    ]
    for p in procs:
        assert p.stdout.readline().endswith("ready\n")
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    committed = [int(o.split("committed")[1]) for o in outs]
    ds = ShardedDataset(path)
    df = ds.read()
    keys = [row_key(r) for r in df.to_dict("records")]
    assert sum(committed) == len(df) == len(set(keys)) == 120
    lines = ds.manifest_path.read_text().splitlines()
    assert all(json.loads(line)["shard"] for line in lines) and len(lines) == len(ds.entries())
    assert len({e["pid"] for e in ds.entries()}) == 2  # both wrote shards
