"""Hyper-parameter sweeps: ``python -m pipelines.run -m hparams_search=...`` (Hydra + Optuna sweeper) at a tiny size,
as a real subprocess against a temp sqlite MLflow store."""

import pytest
from hydra import compose, initialize_config_dir

from tests.conftest import ROOT, two_trial_sweep


@pytest.mark.parametrize("search,model", [("xgb_optuna", "xgb"), ("rf_optuna", "rf")])
def test_search_spaces_compose(search, model):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("run", overrides=[f"hparams_search={search}"], return_hydra_config=True)
    assert list(cfg.model) == [model]
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper") and sweeper.direction == "minimize"
    assert sweeper.params and all(k.startswith(f"model.{model}.") for k in sweeper.params)
    for key in sweeper.params:  # every searched name is a real constructor argument of the model
        assert key.split(".")[-1] in cfg.model[model]


@pytest.mark.slow
def test_two_trial_xgb_sweep_logs_every_trial_and_guards_champion(tmp_path):
    client, runs = two_trial_sweep(
        "pipelines.run",
        "hparams_search=xgb_optuna",
        "debug=tiny",
        "collect.backends=[sim-roofline]",
        out=tmp_path,
        experiment="costmodel",
        run_prefix="xgb",
    )
    # the two trials searched different hyper-parameters, and each logged them
    searched = [{k: r.data.params[f"xgb.{k}"] for k in ("n_estimators", "learning_rate", "max_depth")} for r in runs]
    assert searched[0] != searched[1]
    for r in runs:  # the logged params are the ones the trial's overrides set
        overrides = dict(o.split("=", 1) for o in r.data.tags["sweep_overrides"].split())
        assert float(overrides["model.xgb.learning_rate"]) == pytest.approx(float(r.data.params["xgb.learning_rate"]))
    # Optuna saw the objective: the sweep wrote its best value = the lowest selection-split MAPE of the trials
    # (register.select_split: leave_one_hardware_out)
    mapes = [r.data.metrics["leave_one_hardware_out/all/mape"] for r in runs]
    [best_yaml] = list(tmp_path.glob("hydra-multirun/*/*/optimization_results.yaml"))
    assert f"best_value: {min(mapes)}"[:18] in best_yaml.read_text()
    # both trials registered a version; @champion moved to the second only if it beat the first beyond the
    # run-to-run spread, and the second version's tag says which way it went
    versions = sorted(client.search_model_versions("name='costmodel-runtime'"), key=lambda v: int(v.version))
    assert len(versions) == 2
    champion = client.get_model_version_by_alias("costmodel-runtime", "champion")
    decision = versions[1].tags["champion_decision"]
    if champion.version == versions[1].version:
        assert "promoted" in decision
        second = next(r for r in runs if r.info.run_id == versions[1].run_id)
        first = next(r for r in runs if r.info.run_id == versions[0].run_id)
        assert second.data.metrics["test/all/mape"] < first.data.metrics["test/all/mape"]
    else:
        assert champion.version == versions[0].version and "champion kept" in decision
