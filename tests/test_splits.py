"""The main job's evaluation splits (models/splits.py FOLDS / SPLITS) on simulated rows."""

import numpy as np
import pandas as pd
import pytest

from data.backends.sim_roofline import SimRooflineBackend
from data.collect import collect
from data.sweep import random_sweep
from models.splits import FOLDS, SPLITS

HARDWARE = ("T4", "A100-PCIe-40GB", "H100-SXM")


@pytest.fixture(scope="module")
def rows(registry):
    ops = {
        "matmul": {"n": 12, "params": {"m": [8, 4096], "n": [8, 4096], "k": [8, 4096]}},
        "conv2d": {
            "n": 6,
            "params": {
                "batch": [1, 8],
                "c_in": [3, 64],
                "c_out": [8, 64],
                "h": [7, 32],
                "w": [7, 32],
                "kernel": {"choice": [1, 3]},
                "stride": 1,
                "padding": 1,
            },
        },
        "layernorm": {"n": 6, "params": {"m": [1, 4096], "n": [16, 4096]}},
        "gelu": {"n": 6, "params": {"m": [1, 4096], "n": [16, 4096]}},
    }
    work = random_sweep(ops, ["float32", "float16"], seed=3)
    return pd.concat(
        [collect(SimRooflineBackend(registry.get(hw)), work, progress=False) for hw in HARDWARE], ignore_index=True
    )


def _partition(rows, train, test):
    assert len(np.intersect1d(train, test)) == 0 and len(test) > 0 and len(train) > 0
    assert np.all(np.diff(train) > 0) and np.all(np.diff(test) > 0)


@pytest.mark.parametrize(
    "name,column",
    [("held_out_shapes", "shape_id"), ("held_out_family", "family"), ("leave_one_hardware_out", "hardware")],
)
def test_no_group_on_both_sides(rows, name, column):
    for _, train, test in FOLDS[name](rows, test_size=0.25, seed=0):
        _partition(rows, train, test)
        assert not set(rows[column].iloc[train]) & set(rows[column].iloc[test])
    train, test = SPLITS[name](rows, test_size=0.25, seed=0)  # the single split a split= choice means
    _partition(rows, train, test)
    assert not set(rows[column].iloc[train]) & set(rows[column].iloc[test])


def test_leave_one_hardware_out_holds_each_hardware_out_once(rows):
    folds = FOLDS["leave_one_hardware_out"](rows)
    assert sorted(label for label, _, _ in folds) == sorted(HARDWARE)
    for label, train, test in folds:
        assert set(rows["hardware"].iloc[test]) == {label} and label not in set(rows["hardware"].iloc[train])
        assert len(train) + len(test) == len(rows)
    tested = np.concatenate([test for _, _, test in folds])
    assert np.array_equal(np.sort(tested), np.arange(len(rows)))  # every row tested exactly once


def test_held_out_family_holds_each_family_out_once(rows):
    folds = FOLDS["held_out_family"](rows)
    assert (
        sorted(label for label, _, _ in folds) == sorted(set(rows["family"])) == ["conv", "elementwise", "gemm", "norm"]
    )
    assert np.array_equal(np.sort(np.concatenate([t for _, _, t in folds])), np.arange(len(rows)))


def test_random_split_mixes_groups_and_is_seeded(rows):
    [(_, train, test)] = FOLDS["random"](rows, test_size=0.2, seed=0)
    _partition(rows, train, test)
    assert len(test) == round(0.2 * len(rows))
    assert set(rows["shape_id"].iloc[train]) & set(rows["shape_id"].iloc[test])  # a reference: no grouping
    again = FOLDS["random"](rows, test_size=0.2, seed=0)[0][2]
    other = FOLDS["random"](rows, test_size=0.2, seed=1)[0][2]
    assert np.array_equal(again, test) and not np.array_equal(other, test)
