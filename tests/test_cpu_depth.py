"""CPU backend depth: adaptive repeats + CV, peak memory, pinned threads, RAPL energy (fake powercap)."""

import json
import threading
import time

import pandas as pd
import pytest
import torch

from data.backends.cpu import CpuBackend, Rapl
from data.hardware import detect_cpu
from data.schema import validate


def _domain(root, name, energy_uj, range_uj=None):
    d = root / name
    d.mkdir(parents=True)
    (d / "name").write_text("package-0\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    if range_uj is not None:
        (d / "max_energy_range_uj").write_text(f"{range_uj}\n")
    return d


def test_rapl_sums_packages_and_undoes_a_wrap(tmp_path):
    p0 = _domain(tmp_path, "intel-rapl:0", 9_900_000, range_uj=10_000_000)
    p1 = _domain(tmp_path, "intel-rapl:1", 1_000, range_uj=10_000_000)
    _domain(tmp_path, "intel-rapl:0:0", 5)  # a sub-domain (core) inside package 0: not added again
    rapl = Rapl(tmp_path)
    assert rapl.available and rapl.reason is None and [d.name for d in rapl.domains] == ["intel-rapl:0", "intel-rapl:1"]
    before = rapl.read_uj()
    (p0 / "energy_uj").write_text("100000\n")  # wrapped: 9.9 J -> past 10 J -> 0.1 J
    (p1 / "energy_uj").write_text("501000\n")  # +0.5 J
    assert rapl.delta_j(before, rapl.read_uj()) == pytest.approx((100_000 + 10_000_001 - 9_900_000 + 500_000) / 1e6)


@pytest.mark.parametrize(
    "make,reason",
    [
        (lambda root: None, "does not exist"),
        (lambda root: root.mkdir(), "no RAPL package domains"),
        (lambda root: (root / "intel-rapl:0").mkdir(parents=True), "RAPL not readable"),
    ],
)
def test_rapl_unavailable_says_why(tmp_path, make, reason):
    make(tmp_path / "powercap")
    rapl = Rapl(tmp_path / "powercap")
    assert not rapl.available and reason in rapl.reason


@pytest.fixture(scope="module")
def spec():
    return detect_cpu(1)


def test_adaptive_row_has_cv_repeats_memory_threads(spec, tmp_path):
    torch.set_num_threads(2)
    backend = CpuBackend(
        num_threads=1,
        timer="adaptive",
        min_run_time=0.01,
        max_run_time=2.0,  # torch stops at max_run_time even before its 4th block: 0.3 s gave 3 blocks under load
        hardware=spec,
        powercap_root=tmp_path / "none",
    )
    row = backend.measure({"op": "add", "params": {"m": 1024, "n": 1024}, "dtype": "float32"})
    validate(pd.DataFrame([row]))
    env = json.loads(row["env"])
    assert row["status"] == "ok" and row["timing_method"] == "adaptive_autorange"
    assert row["runtime_repeats"] >= 4 and row["runtime_cv"] >= 0 and row["runtime_iqr_ms"] >= 0
    assert env["num_threads"] == 1 and torch.get_num_threads() == 1 and env["calls_per_block"] >= 1
    # two 4 MiB inputs are live, the 4 MiB output takes fresh pages during the call (page-granular)
    assert env["peak_mem"] == "rss_hwm_delta" and 11.5 * 2**20 <= row["peak_mem_bytes"] < 40 * 2**20
    # no powercap here: energy stays empty and the row says why
    assert row.get("energy_j") is None and row.get("power_method") is None
    assert env["energy"].startswith("unavailable: no RAPL")


def test_energy_never_invented_when_counter_is_stuck(spec, tmp_path):
    _domain(tmp_path, "intel-rapl:0", 123)  # a counter that never advances
    backend = CpuBackend(num_threads=1, min_run_time=0.005, hardware=spec, powercap_root=tmp_path, energy_min_time=0.01)
    row = backend.measure({"op": "matmul", "params": {"m": 32, "n": 32, "k": 32}, "dtype": "float32"})
    assert row["status"] == "ok" and row.get("energy_j") is None and row.get("power_w") is None
    assert "did not advance" in json.loads(row["env"])["energy"]


def test_out_of_memory_becomes_an_error_row(spec):
    backend = CpuBackend(num_threads=1, min_run_time=0.005, hardware=spec)
    row = backend.measure({"op": "matmul", "params": {"m": 10**6, "n": 10**6, "k": 10**6}, "dtype": "float32"})
    assert row["status"] == "error" and "allocate" in row["error"] and row["flops"] == 2e18
    validate(pd.DataFrame([row]))


def test_energy_from_an_advancing_counter(spec, tmp_path):
    """A fake package counter advanced by 1 mJ per ms (~1 W) while the kernel loop runs."""
    d = _domain(tmp_path, "intel-rapl:0", 0, range_uj=2**32)
    stop = threading.Event()

    def tick():
        uj, t0 = 0, time.perf_counter()
        while not stop.is_set():
            uj = int((time.perf_counter() - t0) * 1e6)  # 1 J/s
            (d / "energy_uj.tmp").write_text(f"{uj % (2**32 + 1)}\n")
            (d / "energy_uj.tmp").replace(d / "energy_uj")  # sysfs reads are atomic; keep the fake so
            time.sleep(0.001)

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        backend = CpuBackend(
            num_threads=1,
            min_run_time=0.005,
            hardware=spec,
            powercap_root=tmp_path,
            energy_min_time=0.1,
            measure_memory=False,
        )
        row = backend.measure({"op": "matmul", "params": {"m": 64, "n": 64, "k": 64}, "dtype": "float32"})
    finally:
        stop.set()
        thread.join()
    note = json.loads(row["env"])["energy"]  # "rapl package energy over <calls> calls, <seconds> s"
    calls, seconds = int(note.split(" over ")[1].split()[0]), float(note.split(", ")[1].split()[0])
    assert row["power_method"] == "rapl" and row["power_w"] == pytest.approx(1.0, rel=0.3)
    assert seconds >= 0.1 and row["energy_j"] * calls == pytest.approx(row["power_w"] * seconds, rel=0.02)
