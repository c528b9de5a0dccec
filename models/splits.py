"""Evaluation splits. Rows that share a configuration never straddle train and test.

``held_out_shapes``: whole (op, shape) configurations are held out, on every hardware and dtype at
once (grouped by ``shape_id``), so a model is scored on shapes it has never seen anywhere.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.model_selection import GroupShuffleSplit


def held_out_shapes(rows: pd.DataFrame, test_size: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    groups = rows["shape_id"].to_numpy()
    if len(np.unique(groups)) < 2:
        raise ValueError("held_out_shapes needs at least two distinct shapes")
    splitter = GroupShuffleSplit(n_splits=1, test_size=test_size, random_state=seed)
    train, test = next(splitter.split(rows, groups=groups))
    return np.sort(train), np.sort(test)


SPLITS = {"held_out_shapes": held_out_shapes}


# --- power surrogate (pipelines/power.py): cross-validated variants of the same grouping rule ---------------
def grouped_kfold(rows: pd.DataFrame, n_splits: int = 5, seed: int = 0):
    """Yield ``(train, test)`` positions over ``n_splits`` folds of whole shapes (``shape_id``), shuffled by ``seed``.

    Every row is in exactly one test fold, so out-of-fold predictions cover the dataset on unseen shapes.
    """
    from sklearn.model_selection import GroupKFold

    groups = rows["shape_id"].to_numpy()
    yield from GroupKFold(n_splits=n_splits, shuffle=True, random_state=seed).split(rows, groups=groups)


def leave_one_family_out(rows: pd.DataFrame):
    """Yield ``(family, train, test)``: each op family (``family`` column) held out in turn (unseen op family)."""
    fam = rows["family"].to_numpy()
    for f in sorted(set(fam)):
        yield f, np.flatnonzero(fam != f), np.flatnonzero(fam == f)
