"""The champion rule's paired comparison (models/compare.py): better beyond the spread of the rows, or not."""

import numpy as np
import pytest

from models.compare import paired_difference


def _rows(n=300, seed=0):
    rng = np.random.default_rng(seed)
    y = np.exp(rng.uniform(-3, 3, n))
    old = y * np.exp(rng.normal(0, 0.2, n))
    return rng, y, old


def test_run_to_run_noise_does_not_beat_the_champion():
    """A challenger as good as the champion, its errors another draw (a re-run on re-measured rows): its MAPE comes
    out a little higher or lower, the interval of the difference holds zero, and it does not win."""
    rng, y, old = _rows()
    new = y * np.exp(rng.normal(0, 0.2, len(y)))
    cmp = paired_difference("mape", y, new, old)
    assert cmp.lo < 0 < cmp.hi and not cmp.beats()
    same = paired_difference("mape", y, old, old)
    assert same.difference == 0 and same.share_better == 0 and not same.beats()


def test_a_model_better_on_most_rows_wins_and_the_margin_can_ask_for_more():
    rng, y, old = _rows()
    new = y * np.exp(rng.normal(0, 0.1, len(y)))  # half the log error of the champion
    cmp = paired_difference("mape", y, new, old)
    assert cmp.difference < 0 and cmp.hi < 0 and cmp.share_better == 1.0 and cmp.beats()
    # a margin the improvement does not reach keeps the champion
    assert not paired_difference("mape", y, new, old, margin=abs(cmp.difference / cmp.old) * 1.5).beats()
    # higher is better: kendall tau of the same predictions
    tau = paired_difference("kendall_tau", y, new, old, resamples=200)
    assert tau.difference > 0 and tau.beats()


def test_clusters_resample_whole_shapes():
    """Rows of one shape (the same workload on several GPUs) move together: resampling the shapes gives a wider
    interval than resampling rows as if independent, and the mean over every row is the same."""
    rng, y, old = _rows(n=60)
    y, old = np.repeat(y, 5), np.repeat(old, 5) * np.exp(rng.normal(0, 0.02, 300))
    new = old * np.repeat(np.exp(rng.normal(-0.01, 0.1, 60)), 5)
    shapes = np.repeat(np.arange(60), 5)
    by_row, by_shape = paired_difference("mape", y, new, old), paired_difference("mape", y, new, old, shapes)
    assert by_shape.difference == pytest.approx(by_row.difference) and by_shape.clusters == 60
    assert (by_shape.hi - by_shape.lo) > (by_row.hi - by_row.lo)


def test_mismatched_rows_are_refused():
    with pytest.raises(ValueError, match="same rows"):
        paired_difference("mape", [1.0, 2.0], [1.0], [1.0, 2.0])
