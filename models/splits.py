"""Evaluation splits. Rows that share a configuration never straddle train and test.

``held_out_shapes``: whole (op, shape) configurations are held out, on every hardware and dtype at
once (grouped by ``shape_id``), so a model is scored on shapes it has never seen anywhere.

The main job scores every model on several splits (``conf/run.yaml`` ``eval_splits``; :data:`FOLDS`), each a
list of ``(label, train, test)`` folds whose test parts are pooled:

* ``random``: a seeded fraction of rows, ignoring groups (reference only: the same shape on another GPU or
  dtype is in training, so this flatters every model);
* ``held_out_shapes``: as above, one fold;
* ``held_out_family``: leave one op family out (``family`` column: gemm, conv, norm, softmax, elementwise, ...),
  each family once: a model scored on an op family it has never seen;
* ``leave_one_hardware_out``: each hardware id once: train on the others, test on it (spec-only transfer);
* ``held_out_shapes_kfold``: k folds of whole shapes (``folds`` option): every row predicted once, out of fold.

Whole networks (``pipelines.networks``) are split by :func:`architecture_folds`: each network family held out
(``held_out_<family>``), groups of families at once, and networks deeper than any in training (``deeper``).

:data:`SPLITS` gives the one ``(train, test)`` split a ``split=`` choice means for the registered model: for
the two grouped families a seeded fraction of whole families / hardware ids (at least one); ``stratified_op``
a seeded fraction of each op's rows (whole networks: each architecture family keeps rows on both sides).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.model_selection import GroupShuffleSplit


def held_out_shapes(rows: pd.DataFrame, test_size: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    return held_out_groups(rows["shape_id"].to_numpy(), test_size, seed)


def random_rows(rows: pd.DataFrame, test_size: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A seeded random fraction of rows (no grouping: a reference, not a generalisation test)."""
    n = len(rows)
    if n < 2:
        raise ValueError("a random split needs at least two rows")
    test = np.sort(np.random.default_rng(seed).choice(n, size=min(n - 1, max(1, round(test_size * n))), replace=False))
    return np.setdiff1d(np.arange(n), test), test


def held_out_family(rows: pd.DataFrame, test_size: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A seeded fraction of whole op families (``family`` column), at least one."""
    return held_out_groups(rows["family"].to_numpy(), test_size, seed)


def held_out_hardware(rows: pd.DataFrame, test_size: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A seeded fraction of whole hardware ids, at least one."""
    return held_out_groups(rows["hardware"].to_numpy(), test_size, seed)


def stratified_fold(groups, size: float, seed: int) -> np.ndarray:
    """Boolean mask: ``round(size * n)`` of each group's ``n`` rows (at least one, and at least one left when the
    group has two or more), drawn with a seeded generator."""
    groups = np.asarray(groups)
    rng = np.random.default_rng(seed)
    mask = np.zeros(len(groups), bool)
    for g in sorted(set(groups)):
        idx = np.flatnonzero(groups == g)
        k = min(max(1, round(size * len(idx))), max(1, len(idx) - 1))
        mask[rng.choice(idx, size=k, replace=False)] = True
    return mask


def stratified_op(rows: pd.DataFrame, test_size: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A seeded fraction of each op's rows (:func:`stratified_fold` over ``op``): for whole networks, every
    architecture family has networks on both sides."""
    test = stratified_fold(rows["op"].to_numpy(), test_size, seed)
    return np.flatnonzero(~test), np.flatnonzero(test)


SPLITS = {
    "held_out_shapes": held_out_shapes,
    "random": random_rows,
    "held_out_family": held_out_family,
    "leave_one_hardware_out": held_out_hardware,
    "stratified_op": stratified_op,
}

Folds = list[tuple[str, np.ndarray, np.ndarray]]


def _one_fold(split):
    def folds(rows: pd.DataFrame, test_size: float = 0.2, seed: int = 0, **_) -> Folds:
        return [("all", *split(rows, test_size, seed))]

    return folds


def family_folds(rows: pd.DataFrame, test_size: float = 0.2, seed: int = 0, **_) -> Folds:
    """Leave one op family out, each family once (``test_size`` and ``seed`` unused)."""
    return list(leave_one_group_out(rows, "family"))


def hardware_folds(rows: pd.DataFrame, test_size: float = 0.2, seed: int = 0, **_) -> Folds:
    """Leave one hardware id out, each hardware once (``test_size`` and ``seed`` unused)."""
    return list(leave_one_group_out(rows, "hardware"))


def shape_kfolds(rows: pd.DataFrame, test_size: float = 0.2, seed: int = 0, folds: int = 5, **_) -> Folds:
    """``folds`` folds of whole shapes (:func:`grouped_kfold`; ``test_size`` unused)."""
    return [(str(i), tr, te) for i, (tr, te) in enumerate(grouped_kfold(rows, int(folds), seed))]


FOLDS = {
    "random": _one_fold(random_rows),
    "held_out_shapes": _one_fold(held_out_shapes),
    "held_out_family": family_folds,
    "leave_one_hardware_out": hardware_folds,
    "held_out_shapes_kfold": shape_kfolds,
}


def architecture_folds(
    rows: pd.DataFrame, held_out_architecture: bool = True, held_out_groups=None, deeper_than: int | None = None, **_
) -> dict[str, Folds]:
    """Whole networks (``op`` = the architecture family, ``depth``): ``held_out_<family>`` (train on the other
    families, test on this one), ``held_out_<group>`` (several families at once, e.g. ``conv`` = cnn + resnet; a
    group equal to a single family's split is left out), ``deeper`` (train on depth <= ``deeper_than``)."""
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if held_out_architecture:
        for fam in sorted(rows["op"].unique()):
            test = (rows["op"] == fam).to_numpy()
            out[f"held_out_{fam}"] = (~test, test)
    for group, fams in (held_out_groups or {}).items():
        test = rows["op"].isin(list(fams)).to_numpy()
        if test.any() and (~test).any() and not any((test == t).all() for _, t in out.values()):
            out[f"held_out_{group}"] = (~test, test)
    if deeper_than is not None:
        test = (rows["depth"] > deeper_than).to_numpy()
        if test.any() and (~test).any():
            out["deeper"] = (~test, test)
    return {name: [("all", np.flatnonzero(tr), np.flatnonzero(te))] for name, (tr, te) in out.items()}


# --- cross-validated variants of the same grouping rule (power surrogate, cross-conformal calibration) --------
def grouped_kfold(rows: pd.DataFrame, n_splits: int = 5, seed: int = 0):
    """Yield ``(train, test)`` positions over ``n_splits`` folds of whole shapes (``shape_id``), shuffled by ``seed``.

    Every row is in exactly one test fold, so out-of-fold predictions cover the dataset on unseen shapes.
    """
    from sklearn.model_selection import GroupKFold

    groups = rows["shape_id"].to_numpy()
    yield from GroupKFold(n_splits=n_splits, shuffle=True, random_state=seed).split(rows, groups=groups)


def leave_one_family_out(rows: pd.DataFrame):
    """Yield ``(family, train, test)``: each op family (``family`` column) held out in turn (unseen op family)."""
    yield from leave_one_group_out(rows, "family")


# --- splits for the public datasets (pipelines/evaluate.py) -------------------------------------------------
# Each returns sorted positional index arrays; a group (GPU, configuration, layer shape, precision) is never on
# both sides.


def leave_one_group_out(rows: pd.DataFrame, column: str = "hardware"):
    """Yield ``(held_out_value, train, test)`` once per distinct value of ``column`` (e.g. leave-one-GPU-out)."""
    values = rows[column].to_numpy()
    distinct = sorted(set(values))
    if len(distinct) < 2:
        raise ValueError(f"leave-one-out over {column!r} needs at least two distinct values, got {distinct}")
    for v in distinct:
        test = values == v
        yield v, np.flatnonzero(~test), np.flatnonzero(test)


def held_out_groups(groups, test_size: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Hold out a seeded fraction of whole groups (any hashable key per row)."""
    groups = np.asarray(groups)
    if len(np.unique(groups)) < 2:
        raise ValueError("a grouped split needs at least two distinct groups")
    train, test = next(
        GroupShuffleSplit(n_splits=1, test_size=test_size, random_state=seed).split(
            np.zeros(len(groups)), groups=groups
        )
    )
    return np.sort(train), np.sort(test)


def held_out_layer_shapes(rows: pd.DataFrame, test_size: float = 0.2, seed: int = 0):
    """wa-hls4ml: hold out whole (d_in, d_out) = (k, n) layer shapes, every precision / reuse / strategy at once."""
    keys = rows["k"].astype(int).astype(str) + "x" + rows["n"].astype(int).astype(str)
    return held_out_groups(keys.to_numpy(), test_size, seed)


def held_out_precision(
    rows: pd.DataFrame, train_max_bits: int = 10, test_bits=(12, 13, 14), column: str = "precision_bits"
):
    """Train on precisions <= ``train_max_bits``, test on ``test_bits`` (extrapolation in bit width)."""
    bits = rows[column].astype(int).to_numpy()
    train, test = np.flatnonzero(bits <= train_max_bits), np.flatnonzero(np.isin(bits, list(test_bits)))
    if len(train) == 0 or len(test) == 0:
        raise ValueError(
            f"held_out_precision: {len(train)} train rows (<= {train_max_bits} bits), "
            f"{len(test)} test rows ({list(test_bits)} bits)"
        )
    return train, test


def few_shot_transfer(
    rows: pd.DataFrame,
    target,
    fraction: float = 0.1,
    seed: int = 0,
    hardware: str = "hardware",
    within: str | None = None,
):
    """Transfer to ``target`` hardware given ``fraction`` of its rows.

    Returns ``(support, other, test)``: a seeded ``fraction`` of the target's rows (``support``), every row of the
    other hardware (restricted to the same ``within`` value, e.g. the same kernel, as the target's rows), and
    the target's remaining rows (``test``). Train "transfer" on support + other, "alone" on support only.
    """
    hw = rows[hardware].to_numpy()
    tgt = np.flatnonzero(hw == target)
    if len(tgt) < 2:
        raise ValueError(f"few_shot_transfer: hardware {target!r} has {len(tgt)} rows")
    rng = np.random.default_rng(seed)
    n_support = max(1, int(round(fraction * len(tgt))))
    support = np.sort(rng.choice(tgt, size=n_support, replace=False))
    test = np.setdiff1d(tgt, support)
    other_mask = hw != target
    if within is not None:
        other_mask &= rows[within].isin(set(rows[within].iloc[tgt])).to_numpy()
    return support, np.flatnonzero(other_mask), test
