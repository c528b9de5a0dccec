"""Optuna sweeps of the whole-network GNN and token transformer: ``python -m pipelines.networks -m
hparams_search={gnn,transformer}_optuna`` (conf/hparams_search: which models a trial fits, which splits it scores,
the returned objective) and the measurement cache every trial shares.
Real parts: tiny mlps measured on this CPU, a real subprocess multirun, a temp sqlite MLflow store."""

import numpy as np
import pandas as pd
import pytest
import yaml
from hydra import compose, initialize_config_dir

from tests.conftest import ROOT, two_trial_sweep

SEARCHES = [("gnn_optuna", "gnn", "gnn"), ("transformer_optuna", "transformer", "token_transformer")]


@pytest.mark.parametrize("search,section,model", SEARCHES)
def test_search_spaces_compose(search, section, model):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("networks", overrides=[f"hparams_search={search}"], return_hydra_config=True)
        plain = compose("networks")
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper") and sweeper.direction == "minimize"
    assert sweeper.params and all(k.startswith(f"model.{model}.") for k in sweeper.params)
    for key in sweeper.params:  # every searched name is a real hyper-parameter of the model's config block
        assert key.split(".", 2)[2] in cfg.model[model]
    # a trial fits only the swept model (and the free baselines), scores it on the sweep's splits, registers nothing
    assert list(cfg.model) == [model, "roofline_sum", "roofline_fit", "measured_layer_sum"]
    assert cfg.objective.model == model and cfg.cache and list(cfg.register.models) == [] and cfg.eval_splits
    # without a search the job is unchanged: every model, every split, registration on, measured afresh
    assert list(plain.model) == [
        "gnn_residual",
        "token_transformer_residual",
        "composed",
        "gnn",
        "token_transformer",
        "xgb_layer_sum",
        "roofline_sum",
        "roofline_fit",
        "measured_layer_sum",
    ]
    assert plain.eval_splits is None and not plain.cache and list(plain.register.models) == ["gnn_residual"]


def _cfg(*overrides):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("networks", overrides=list(overrides))


def test_objective_is_the_mean_over_splits_and_bad_names_fail_in_one_line():
    from pipelines.experiment import Experiment, Result, mean_over_splits
    from pipelines.networks import folds

    scored = {
        "gnn": {"mape": (10.0, 30.0), "medape": (1.0, 3.0)},
        "roofline_sum": {"mape": (50.0, 70.0), "medape": (2.0, 4.0)},
    }
    res = {
        m: Result(m, metrics={f"{s}/all/{k}": v[i] for k, v in values.items() for i, s in enumerate("ab")})
        for m, values in scored.items()
    }
    exp = Experiment(res, None, None, None, {}, "", ["a", "b"], None)
    assert mean_over_splits(exp, "gnn", "mape") == pytest.approx(20.0)  # each split once, whatever its size
    assert mean_over_splits(exp, "roofline_sum", "medape") == pytest.approx(3.0)
    with pytest.raises(ValueError, match="model 'token_transformer' was not scored"):
        mean_over_splits(exp, "token_transformer", "mape")
    nets = pd.DataFrame({"op": ["mlp", "mlp", "cnn", "cnn"], "depth": [1, 3, 1, 3]})
    assert list(folds(_cfg(), nets)) == ["held_out_cnn", "held_out_mlp", "deeper"]
    assert list(folds(_cfg("eval_splits=[deeper,held_out_cnn]"), nets)) == ["deeper", "held_out_cnn"]
    with pytest.raises(ValueError, match="unknown split.*held_out_resnet"):
        folds(_cfg("eval_splits=[held_out_resnet]"), nets)


@pytest.mark.slow
def test_measurement_cache_gives_every_trial_the_same_data(tmp_path):
    """A hit returns the first measurement (timings, MLIR, the detected CPU spec) bit for bit; another grid or
    other backend settings miss."""
    from data.backends.cpu import CpuBackend
    from data.collect import cache_key, collect_cached

    nets_spec = [{"op": "mlp", "params": {"batch": 2, "width": 16, "depth": 1}}]
    backend = CpuBackend(num_threads=1, min_run_time=0.002, warmup=1, measure_memory=False, energy=False)
    nets, lay, spec, hit = collect_cached(nets_spec, backend, tmp_path)
    assert not hit and len(nets) == 1 and len(lay) > 0
    nets2, lay2, spec2, hit2 = collect_cached(nets_spec, backend, tmp_path)
    assert hit2 and spec2 == spec
    pd.testing.assert_frame_equal(nets2.reset_index(drop=True), nets.reset_index(drop=True), check_dtype=False)
    pd.testing.assert_frame_equal(lay2.reset_index(drop=True), lay.reset_index(drop=True), check_dtype=False)
    other = CpuBackend(num_threads=1, min_run_time=0.004, warmup=1, measure_memory=False, energy=False)
    deeper = [{"op": "mlp", "params": {"batch": 2, "width": 16, "depth": 2}}]
    assert len({cache_key(nets_spec, backend), cache_key(nets_spec, other), cache_key(deeper, backend)}) == 3


@pytest.mark.slow
def test_two_trial_gnn_sweep_logs_every_trial(tmp_path):
    client, runs = two_trial_sweep(
        "pipelines.networks",
        "hparams_search=gnn_optuna",
        "debug=tiny_networks",
        "eval_splits=[held_out_transformer,deeper]",
        out=tmp_path,
        experiment="costmodel-networks",
        run_prefix="gnn",
    )
    by_trial = {r.data.tags["sweep_trial"]: r for r in runs}
    exp_id = client.get_experiment_by_name("costmodel-networks").experiment_id
    baselines = {
        (r.data.tags["sweep_trial"], r.data.tags["model"]): r
        for r in client.search_runs([exp_id])
        if r.data.tags["model"] != "gnn"
    }
    # trial 0 measured, trial 1 reused the cache: same networks, same baselines
    assert by_trial["0"].data.params["measurements_cached"] == "False"
    assert by_trial["1"].data.params["measurements_cached"] == "True"
    for model, key in (("roofline_fit", "deeper/all/mape"), ("measured_layer_sum", "held_out_transformer/all/mape")):
        assert baselines["0", model].data.metrics[key] == baselines["1", model].data.metrics[key]
    # each run logged its trial's hyper-parameters (the searched ones differ), only the GNN was fitted
    for r in runs:
        overrides = dict(o.split("=", 1) for o in r.data.tags["sweep_overrides"].split())
        for name in ("hidden", "layers", "conv", "epochs"):
            assert overrides[f"model.gnn.{name}"] == r.data.params[f"gnn.{name}"]
        assert float(overrides["model.gnn.lr"]) == pytest.approx(float(r.data.params["gnn.lr"]))
        trial = r.data.tags["sweep_trial"]
        assert {m for t, m in baselines if t == trial} == {"roofline_sum", "roofline_fit", "measured_layer_sum"}
        # the objective = the GNN's mean MAPE over the two sweep splits
        expected = np.mean([r.data.metrics[f"{s}/all/mape"] for s in ("held_out_transformer", "deeper")])
        assert np.isfinite(r.data.metrics["objective/all/mape"])
        assert r.data.metrics["objective/all/mape"] == pytest.approx(expected)
    params = [{k: v for k, v in by_trial[t].data.params.items() if k.startswith("gnn.")} for t in ("0", "1")]
    assert params[0] != params[1]
    # Optuna got what main returned: its best value is the lower trial objective; nothing was registered
    [best_yaml] = list(tmp_path.glob("hydra-multirun/networks/*/*/optimization_results.yaml"))
    best = yaml.safe_load(best_yaml.read_text())
    assert best["best_value"] == pytest.approx(min(r.data.metrics["objective/all/mape"] for r in runs))
    assert client.search_registered_models() == []
