"""The CostModel contract (models/base.py), checked on every model of conf/model/ as scikit-learn's check_estimator
checks every estimator: each config is composed through Hydra and built as the experiment builds it
(``pipelines.experiment.model_entries`` / ``build``), its X made by its own encoder, on small real data of the job
that trains it (kernel rows of the simulated GPUs for the kernel and power models, tiny networks measured on this CPU
for the network models, wa-hls4ml designs for the FPGA resource models).

Each model: ``__init__`` stores its parameters and nothing else (no fitted attribute, no side effect); ``fit`` returns
self; ``predict`` gives one finite, non-negative row per input row and has no side effect; ``save`` / ``load`` gives
the same predictions; the optional protocols it declares (``Calibratable``, ``HasDomain``, ``HasIntervals``) are
honoured. A new ``conf/model/<name>.yaml`` joins the suite by existing."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from omegaconf import open_dict

from models.base import PREDICT_DOMAIN_COLUMNS, Calibratable, CostModel, HasDomain, HasIntervals, load_model
from tests.conftest import ROOT, SHARED

MODEL_DIR = ROOT / "conf" / "model"
MODELS = sorted(p.stem for p in MODEL_DIR.glob("*.yaml"))
NETWORK_ENCODERS = ("graph", "tokens", "composed_graph", "composed_tokens", "layers")
KERNEL_GPUS = ("T4", "A100-PCIe-40GB", "H100-SXM")
NEW_GPU = "L4"  # the hardware a Calibratable model calibrates on (never in its training rows)
TINY_MLPS = [{"op": "mlp", "params": dict(batch=4, width=w, depth=d)} for w in (16, 32) for d in (1, 2, 3)]
# settings a debug preset leaves at full size: smaller here, the contract is the same
TINY = {"physics_mlp": {"epochs": 2}}


def job_of(name: str) -> str:
    """The job that trains a model of ``conf/model/<name>.yaml``: ``networks`` (a network encoder), ``power``,
    ``fpga`` (the FPGA resource models) or ``run`` (kernel rows)."""
    text = (MODEL_DIR / f"{name}.yaml").read_text()
    if any(f"encoder: {e}" in text for e in NETWORK_ENCODERS):
        return "networks"
    if "models.power." in text:
        return "power"
    if "models.hurdle." in text:
        return "fpga"
    return "run"


@dataclass
class Case:
    """A model's config entry, how to build it, its X and y, and rows of a new GPU for ``calibrate``."""

    make: object
    X: object
    y: np.ndarray
    X_new: object = None
    y_new: np.ndarray | None = None


def compose(job: str, overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(job, overrides=overrides)


@functools.lru_cache(maxsize=1)
def kernel_rows() -> pd.DataFrame:
    """Kernels of a seeded sweep on three simulated GPUs and the new one (runtime, power, energy)."""
    from data.backends.sim_roofline import SimRooflineBackend
    from data.collect import collect
    from data.hardware import HardwareRegistry
    from data.sweep import random_sweep

    registry = HardwareRegistry.from_dir()
    ops = {
        "matmul": {"n": 12, "params": {"m": [8, 4096], "n": [8, 4096], "k": [8, 4096]}},
        "conv2d": {
            "n": 6,
            "params": {
                "batch": [1, 8],
                "c_in": [3, 128],
                "c_out": [8, 128],
                "h": [7, 32],
                "w": [7, 32],
                "kernel": 3,
                "stride": 1,
                "padding": 1,
            },
        },
        "softmax": {"n": 6, "params": {"m": [1, 8192], "n": [16, 8192]}},
        "gelu": {"n": 6, "params": {"m": [1, 8192], "n": [16, 8192]}},
    }
    work = random_sweep(ops, ["float32", "float16"], seed=3)
    return pd.concat(
        [collect(SimRooflineBackend(registry.get(h)), work, progress=False) for h in (*KERNEL_GPUS, NEW_GPU)],
        ignore_index=True,
    )


@functools.lru_cache(maxsize=1)
def network_data(out: str):
    """Tiny mlps measured on this CPU with their MLIR and layers, the registry that knows this CPU, and the kernel
    model the composed and residual models compose with (fitted on a tiny kernel sweep measured here)."""
    from data.backends.cpu import CpuBackend
    from data.collect import collect_networks
    from data.hardware import HardwareRegistry
    from pipelines.networks import kernel_model, with_mlir

    backend = CpuBackend(num_threads=1, min_run_time=0.01, warmup=1, measure_memory=False, energy=False)
    nets, layers = collect_networks(TINY_MLPS, backend, annotate=with_mlir)
    registry = HardwareRegistry.from_dir()
    registry.add(backend.hardware)
    cfg = compose("networks", ["debug=tiny_networks", f"paths.output_dir={out}"])
    return nets, layers, registry, kernel_model(cfg, backend, registry, Path(out))


def kernel_case(name: str, job: str) -> Case:
    from data.hardware import HardwareRegistry
    from pipelines import experiment

    cfg = compose(job, [f"model=[{name}]"] + (["debug=tiny"] if job == "run" else ["xgb.n_estimators=20"]))
    entry = experiment.model_entries(cfg, overrides=TINY)[name]
    rows = kernel_rows()
    target = experiment.Target.from_config(cfg.target)
    X = experiment.Encodings(rows, HardwareRegistry.from_dir()).X(entry.encoder)
    Y = rows[target.columns].to_numpy(float)
    y = Y if target.multi else Y[:, 0]
    train, new = (rows["hardware"] != NEW_GPU).to_numpy(), (rows["hardware"] == NEW_GPU).to_numpy()
    return Case(
        lambda: experiment.build(entry), X[train].reset_index(drop=True), y[train], X[new].head(20), y[new][:20]
    )


def network_case(name: str, out: str) -> Case:
    from pipelines import experiment

    nets, layers, registry, kernel_path = network_data(out)
    cfg = compose("networks", ["debug=tiny_networks", f"model=[{name}]"])
    with open_dict(cfg):
        cfg.kernel_model_path = kernel_path
    entry = experiment.model_entries(cfg)[name]
    X = experiment.Encodings(nets, registry, layers=layers).X(entry.encoder)
    return Case(lambda: experiment.build(entry), X, nets["runtime_ms"].to_numpy(float))


def fpga_case(name: str) -> Case:
    import json

    from data.hardware import HardwareRegistry
    from data.importers.wa_hls4ml import import_wa_hls4ml
    from features.fpga import hls4ml_features
    from features.public_data import fpga_features
    from models.public_eval import FPGA_TARGETS, fpga_bounds
    from pipelines import experiment

    cfg = compose("evaluate", ["dataset=wa_hls4ml", "tiny=true", f"model=[{name}]"])
    ds = cfg.dataset
    rows = import_wa_hls4ml()
    rows = rows[rows["status"] == "ok"].sample(n=300, random_state=0).reset_index(drop=True)
    rows = rows.assign(precision_bits=[json.loads(c)["precision_bits"] for c in rows["config"]])
    features = {"fpga": fpga_features, "hls4ml": hls4ml_features}[
        dict(ds.get("model_features") or {}).get(name, "fpga")
    ]
    targets = list(FPGA_TARGETS)
    lower, upper = fpga_bounds(HardwareRegistry.from_dir(), ds.part, targets)
    entry = experiment.model_entries(cfg, overrides={name: ds.tiny.model_params.get(name) or {}})[name]
    kw = dict(targets=targets, transform=[ds.transforms[t] for t in targets], lower=lower, upper=upper)
    return Case(lambda: experiment.build(entry, **kw), features(rows), rows[targets].to_numpy(float))


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("conformance"))

    def make(name: str) -> Case:
        job = job_of(name)
        if job == "networks":
            return network_case(name, out)
        if job == "fpga":
            if not (SHARED / "wa_hls4ml").is_dir():
                pytest.skip(f"shared_data: {SHARED / 'wa_hls4ml'} is missing")
            return fpga_case(name)
        return kernel_case(name, job)

    return make


def _marks(name: str):
    return [pytest.mark.shared_data] if job_of(name) == "fpga" else []


@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(n)) for n in MODELS])
def test_every_configured_model_honours_the_cost_model_contract(name, case, tmp_path):
    c = case(name)
    model = c.make()
    assert isinstance(model, CostModel)
    params = model.get_params()
    # __init__ stores its parameters verbatim and nothing else: no fitted state, no other attribute
    assert set(vars(model)) == set(params), f"{name}: __init__ sets {sorted(set(vars(model)) - set(params))}"
    assert type(model)(**params).get_params() == params
    assert model.fit(c.X, c.y) is model
    pred = np.asarray(model.predict(c.X), float)
    assert pred.shape == np.shape(c.y), f"{name}: predictions of shape {pred.shape} for targets {np.shape(c.y)}"
    assert np.isfinite(pred).all() and (pred >= 0).all()
    if pred.ndim == 1:
        assert (pred > 0).all()
    state = set(vars(model))
    np.testing.assert_allclose(np.asarray(model.predict(c.X), float), pred, rtol=1e-12)  # no side effect
    assert set(vars(model)) == state
    loaded = load_model(model.save(tmp_path / name))
    assert type(loaded) is type(model) and loaded.get_params() == model.get_params()
    np.testing.assert_allclose(np.asarray(loaded.predict(c.X), float), pred, rtol=1e-6)
    if isinstance(model, HasDomain):
        dom = model.predict_domain(c.X)
        assert len(dom) == len(pred) and set(PREDICT_DOMAIN_COLUMNS) <= set(dom.columns)
    if isinstance(model, HasIntervals):
        p, lo, hi = model.predict_interval(c.X)
        np.testing.assert_allclose(p, pred, rtol=1e-12)
        assert (lo <= p).all() and (p <= hi).all()
    if isinstance(model, Calibratable):
        assert c.X_new is not None, f"{name} is Calibratable: its case needs rows of a new GPU"
        calibrated = model.calibrate(c.X_new, c.y_new, hardware=NEW_GPU)
        assert isinstance(calibrated, CostModel) and calibrated is not model
        new_pred = np.asarray(calibrated.predict(c.X_new), float)
        assert new_pred.shape == (len(c.y_new),) and np.isfinite(new_pred).all() and (new_pred > 0).all()
        np.testing.assert_allclose(np.asarray(model.predict(c.X), float), pred, rtol=1e-12)  # self unchanged


def test_the_suite_covers_every_configured_model():
    """Each conf/model entry is one case, and each job kind has a way to make its data."""
    assert len(MODELS) >= 20 and {job_of(n) for n in MODELS} == {"run", "power", "networks", "fpga"}
    assert job_of("physics") == "run" and job_of("gnn_residual") == "networks" and job_of("hurdle") == "fpga"


def test_bad_parameters_are_stored_by_init_and_refused_by_fit_in_one_line():
    """scikit-learn's rule: ``__init__`` stores whatever it is given (a search may set it later), ``fit`` refuses a
    bad value with one line naming it."""
    from models.gnn import GNNModel, ResidualGNNModel
    from models.physics import PhysicsModel
    from models.power import PowerSurrogate

    c = kernel_case("power_xgb", "power")
    for model, X, y, message in [
        (PowerSurrogate(kind="bogus"), c.X, c.y, "unknown power model kind 'bogus'"),
        (PhysicsModel(learner="forest"), kernel_case("physics", "run").X, c.y[:, 0], "unknown learner 'forest'"),
        (GNNModel(conv="gcn"), [], [], "conv must be 'sage' or 'gatv2', got 'gcn'"),
        (ResidualGNNModel(hidden=10, heads=4), [], [], "hidden 10 must be a multiple of heads 4"),
    ]:
        assert model.get_params() == type(model)(**model.get_params()).get_params()
        with pytest.raises(ValueError, match=message) as caught:
            model.fit(X, y)
        assert "\n" not in str(caught.value)
