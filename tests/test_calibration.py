"""The stages behind the entry points: the calibration pool and design (models/calibration.py), a kernel sweep
measured once and cached (data.collect.collect_sweep_cached), a tuning space's features (features.config). The
whole commands run in test_record.py (costmodel calibrate), test_tune_cli.py and test_network_serving.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from data.collect import collect_sweep_cached, workload_config
from data.workloads import OPS, count_cost
from models.calibration import _spread, candidates
from tests.conftest import ROOT

POOL = ROOT / "conf" / "collect" / "workload" / "calibrate.yaml"


def test_the_calibration_pool_is_its_workload_file():
    """Every op of conf/collect/workload/calibrate.yaml, its n shapes per op in each of the file's dtypes, inside
    the file's FLOP and byte limits; the dtypes asked for and the seed move the pool."""
    cfg = workload_config("calibrate")  # OmegaConf's YAML: 2.0e12 is a number
    pool = candidates("H100-SXM")
    assert set(pool["hardware"]) == {"H100-SXM"} and set(pool["dtype"]) == set(cfg["dtypes"])
    counts = pool.groupby(["op", "dtype"]).size()
    for op, spec in cfg["ops"].items():
        assert set(spec["params"]) == set(OPS[op].params), op
        for dtype in cfg["dtypes"]:
            assert counts[(op, dtype)] == spec["n"], (op, dtype)
    for row in pool[pool["dtype"] == "float32"].to_dict("records"):
        params = {p: int(row[p]) for p in OPS[row["op"]].params}
        flops, nbytes = count_cost(row["op"], params, "float32")
        assert flops <= cfg["max_flops"] and nbytes <= cfg["max_bytes"], row
    assert set(candidates("H100-SXM", ["tf32"])["dtype"]) == {"tf32"}
    shapes = lambda frame: frame.drop(columns=["hardware", "dtype"]).drop_duplicates().reset_index(drop=True)  # noqa: E731
    assert not shapes(candidates("H100-SXM", seed=1)).equals(shapes(pool))


def test_the_pool_is_a_collection_of_its_own():
    """``python -m pipelines.collect workload=calibrate`` reads the same file: the op's own n per op."""
    from hydra import compose, initialize_config_dir

    from pipelines.collect import sweep_workloads

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            "collect",
            overrides=["workload=calibrate", "backend=cpu", f"hydra.searchpath=[file://{POOL.parent.parent}]"],
        )
    work = pd.DataFrame(sweep_workloads(cfg))
    spec = workload_config("calibrate")
    assert work.groupby("op").size().to_dict() == {op: s["n"] * len(spec["dtypes"]) for op, s in spec["ops"].items()}


def test_an_unknown_workload_file_is_one_line_naming_the_known():
    with pytest.raises(ValueError, match=r"^unknown workload 'gemms'; known \(conf/collect/workload\): .*calibrate"):
        workload_config("gemms")


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 20])
def test_spread_is_a_permutation_whose_prefixes_cover_the_range(n):
    """The median first, then the quartiles: every prefix of k positions leaves no gap wider than about n / k."""
    order = _spread(n)
    assert sorted(order) == list(range(n))
    assert order[0] == n // 2
    for k in range(1, n + 1):
        taken = np.sort(np.concatenate([[-1], order[:k], [n]]))
        assert np.diff(taken).max() <= 2 * n / k + 1, (n, k, order[:k])


def test_a_kernel_sweep_is_measured_once_and_read_back(tmp_path):
    """The kernel model of record's sweep (conf/networks.yaml kernel_sweep's form) on this CPU: its ok rows, cached
    by a key of the sweep, the seed and the backend; another seed is another sweep."""
    from data.backends.cpu import CpuBackend

    backend = CpuBackend(num_threads=1, min_run_time=0.001, warmup=0, measure_memory=False, energy=False)
    sweep = {"n": 3, "max_flops": 1e5, "max_bytes": 1e5, "ops": {"add": {"params": {"m": [1, 16], "n": [1, 16]}}}}
    rows, key = collect_sweep_cached(sweep, backend, 0, tmp_path)
    assert len(rows) == 3 and (rows["status"] == "ok").all() and (rows["runtime_ms"] > 0).all()
    assert (tmp_path / f"kernels-{key}.parquet").exists()
    again, same = collect_sweep_cached(sweep, backend, 0, tmp_path)
    assert same == key
    pd.testing.assert_frame_equal(again, rows)  # read back, not measured again (timings would differ)
    other, other_key = collect_sweep_cached(sweep, backend, 1, None)
    assert other_key != key and not (tmp_path / f"kernels-{other_key}.parquet").exists()


def test_a_spaces_tunables_are_numbers_or_category_codes_in_its_order():
    from features.config import tunable_features

    configs = pd.DataFrame({"tile": [4, 1, 2], "layout": ["row", "col", "row"], "unroll": [1.5, 2.0, 1.5]})
    X = tunable_features(configs)
    assert list(X.columns) == ["cfg_tile", "cfg_layout", "cfg_unroll"]
    assert X["cfg_tile"].tolist() == [4.0, 1.0, 2.0] and X["cfg_unroll"].tolist() == [1.5, 2.0, 1.5]
    assert X["cfg_layout"].tolist() == [1.0, 0.0, 1.0]  # col < row
