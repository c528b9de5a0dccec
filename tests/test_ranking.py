"""models.ranking.RankingModel: learns an order within groups, scores lower = faster, round-trips, bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau

from models.base import load_model
from models.evaluate import topk_slowdown
from models.ranking import RankingModel


def grouped_data(n: int = 400, seed: int = 0):
    """Two 'GPUs' with the same configuration space; GPU b is 10x slower and prefers a smaller tile."""
    rng = np.random.default_rng(seed)
    x = pd.DataFrame({"tile": rng.uniform(0, 4, n), "vector": rng.integers(1, 5, n).astype(float)})
    gpu = np.repeat(["a", "b"], n // 2)
    best_tile = np.where(gpu == "a", 3.0, 1.0)
    runtime = np.where(gpu == "a", 1.0, 10.0) * np.exp((x["tile"] - best_tile) ** 2 / 4 - 0.05 * x["vector"])
    return x.assign(gpu_b=(gpu == "b").astype(float)), runtime.to_numpy(), gpu


@pytest.mark.parametrize("objective", ["pairwise", "lambdamart"])
def test_ranker_orders_each_group(objective):
    X, y, gpu = grouped_data()
    tr = np.arange(len(y)) % 4 != 0
    model = RankingModel(objective, n_estimators=150, max_depth=4, random_state=0).fit(X[tr], y[tr], groups=gpu[tr])
    score = model.predict(X[~tr])
    for g in ("a", "b"):
        m = gpu[~tr] == g
        tau = kendalltau(y[~tr][m], score[m]).statistic
        # lower score = faster; LambdaMART spends its pairs on the top of the list, so its overall tau is lower
        assert tau > (0.6 if objective == "pairwise" else 0.25), (g, tau)
        assert topk_slowdown(y[~tr][m], score[m], 3) < 1.1


def test_labels_are_per_group():
    y = np.array([1.0, 2.0, 10.0, 20.0])
    groups = np.array(["a", "a", "b", "b"])
    assert RankingModel.labels(y, groups, "pairwise") == pytest.approx([0, -np.log(2), 0, -np.log(2)])
    assert RankingModel.labels(y, groups, "lambdamart").tolist() == [31, 15, 31, 15]  # best / runtime, 0..31


def test_base_margin_ranks_like_the_prior_before_learning():
    X, y, _ = grouped_data()
    X = X.assign(prior=y * np.exp(np.random.default_rng(1).normal(0, 0.01, len(y))))
    # a ranker that can barely learn (one tiny step) keeps the prior's order
    model = RankingModel("pairwise", n_estimators=1, learning_rate=1e-6, base_columns="prior").fit(X, y)
    assert kendalltau(model.predict(X), X["prior"]).statistic > 0.999
    with pytest.raises(ValueError, match="> 0"):
        model.predict(X.assign(prior=-1.0))
    with pytest.raises(ValueError, match="base column"):
        RankingModel(base_columns="missing").fit(X, y)


def test_save_load_round_trip(tmp_path):
    X, y, gpu = grouped_data(120)
    model = RankingModel("lambdamart", n_estimators=20).fit(X, y, groups=gpu)
    loaded = load_model(model.save(tmp_path / "ranker"))
    assert isinstance(loaded, RankingModel) and np.allclose(loaded.predict(X), model.predict(X))


def test_bad_input():
    X, y, gpu = grouped_data(40)
    with pytest.raises(ValueError, match="objective"):
        RankingModel("listwise").fit(X, y)
    with pytest.raises(ValueError, match="groups"):
        RankingModel().fit(X, y, groups=gpu[:5])
    with pytest.raises(ValueError, match="> 0"):
        RankingModel().fit(X, -y)
    model = RankingModel(n_estimators=5).fit(X, y)
    with pytest.raises(ValueError, match="features missing"):
        model.predict(X.drop(columns="tile"))
