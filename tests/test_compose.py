"""Whole networks composed from kernel predictions by execution mode (models/compose.py, models/networks_api.py).

Algebra by hand on two kernels in each mode, the direction of ``execution``, power = energy / runtime, the static
power and the launch floors fitted from rows, the committed constants equal to what their command computes from
the H200 set, and one CLI command / one Python call giving runtime, power and energy of a torch module (a power model
registered in a temp sqlite store).
"""

import json

import numpy as np
import pandas as pd
import pytest

from models.compose import (
    MODES,
    Execution,
    ModeConstants,
    compose,
    device_ms,
    fit_floors,
    fit_overheads,
    fit_static_power,
    load_execution,
    static_power,
)
from tests.conftest import ROOT, SHARED

FLOORS = {"gemm": 0.010, "elementwise": 0.005}
GPU = Execution(
    "gpu",
    True,
    FLOORS,
    {
        "eager": ModeConstants(launch_ms=0.01, gap_ms=0.002, dispatch_scale=1.0),
        "cuda_graph": ModeConstants(launch_ms=0.01, gap_ms=0.002, dispatch_scale=0.0),
        "compiled": ModeConstants(launch_ms=0.01, gap_ms=0.002, dispatch_scale=0.0, fuse=True),
    },
)
CPU = Execution(
    "cpu",
    False,
    FLOORS,
    {
        "eager": ModeConstants(launch_ms=0.05, gap_ms=0.003, dispatch_scale=1.0),
        "compiled": ModeConstants(launch_ms=0.05, gap_ms=0.0, dispatch_scale=0.5, fuse=True),
    },
)


def two(t_gemm: float, t_relu: float, **cols) -> pd.DataFrame:
    return pd.DataFrame({"op": ["matmul", "relu"], "runtime_ms": [t_gemm, t_relu], **cols})


def d(t, h):  # the GPU's device time inside a back-to-back time t = max(d, h), blended at the floor
    return t - h * np.exp(-(t - h) / h) if t > h else 0.0


def test_gpu_modes_by_hand():
    k = two(0.050, 0.006)  # a 50 us GEMM (device-bound) and a relu just above its 5 us floor (launch-bound)
    dg, dr = d(0.050, 0.010), d(0.006, 0.005)
    eager = compose(k, "eager", GPU)
    assert eager.total["runtime_ms"] == pytest.approx(0.01 + max(dg + 0.002, 0.010) + max(dr + 0.002, 0.005))
    graph = compose(k, "cuda_graph", GPU)
    assert graph.total["runtime_ms"] == pytest.approx(0.01 + dg + 0.002 + dr + 0.002)
    comp = compose(k, "compiled", GPU)  # the unary relu fuses into the GEMM: nothing of it is left
    assert comp.total["runtime_ms"] == pytest.approx(0.01 + dg + 0.002)
    assert comp.kernels["launched"].tolist() == [True, False] and comp.kernels["fused_into"].tolist() == [-1, 0]
    assert comp.total["launched"] == 1 and comp.total["kernels"] == 2 and comp.total["execution"] == "compiled"
    # a residual add keeps a third of its device time (its second operand's traffic)
    added = compose(pd.DataFrame({"op": ["matmul", "add"], "runtime_ms": [0.05, 0.03]}), "compiled", GPU)
    assert added.total["runtime_ms"] == pytest.approx(0.01 + dg + 0.002 + d(0.03, 0.005) / 3)
    for res in (eager, graph, comp):  # steps add up to the runtime
        assert res.kernels["step_ms"].sum() + 0.01 == pytest.approx(res.total["runtime_ms"])


def test_cpu_modes_by_hand():
    k = two(0.050, 0.004)  # the relu is below its 5 us floor: its call is all dispatch
    eager = compose(k, "eager", CPU)
    assert eager.total["runtime_ms"] == pytest.approx(0.05 + 0.050 + 0.003 + 0.004 + 0.003)  # t + gap each
    viewed = CPU.with_modes(eager=ModeConstants(launch_ms=0.05, gap_ms=0.003, dispatch_scale=1.0, free_op_ms=0.002))
    assert compose(k, "eager", viewed, free_ops=7).total["runtime_ms"] == pytest.approx(
        eager.total["runtime_ms"] + 7 * 0.002
    )  # each view / reshape costs host time
    comp = compose(k, "compiled", CPU)  # one fused call, its dispatch halved
    assert comp.total["runtime_ms"] == pytest.approx(0.05 + (0.050 - 0.010) + 0.5 * 0.010)
    with pytest.raises(ValueError, match="execution 'cuda_graph' does not exist on a cpu"):
        compose(k, "cuda_graph", CPU)
    with pytest.raises(ValueError, match="unknown execution 'graph'"):
        compose(k, "graph", CPU)


def test_device_time_inverts_the_launch_bound_timing():
    h = np.full(4, 0.01)
    t = np.array([0.005, 0.010, 0.020, 10.0])
    dev = device_ms(t, h, overlap=True)
    assert dev[0] == dev[1] == 0.0 and np.all(np.diff(dev) >= 0) and dev[3] == pytest.approx(10.0, rel=1e-9)
    assert dev[2] == pytest.approx(0.02 - 0.01 / np.e)  # between: blended
    fine = np.linspace(0.0, 0.05, 501)
    assert np.all(np.diff(device_ms(fine, np.full(501, 0.01), overlap=True)) >= 0)  # monotone through the floor
    np.testing.assert_allclose(device_ms(t, h, overlap=False), [0, 0, 0.01, 9.99])


@pytest.mark.parametrize("kind", ["gpu", "cpu"])
def test_execution_direction_on_the_committed_constants(kind):
    table = load_execution()
    ex = table[kind]
    modes = [m for m in MODES if m in ex.modes]
    # a launch-bound network: 40 tiny kernels (GEMMs, activations, adds) at about their floors
    ops = ["linear", "gelu", "linear", "add"] * 10
    floor = ex.floor(pd.Series(ops).map({"linear": "gemm", "gelu": "elementwise", "add": "elementwise"}))
    small = pd.DataFrame({"op": ops, "runtime_ms": floor * 1.05})
    runtimes = [compose(small, m, ex).total["runtime_ms"] for m in modes]
    assert all(a > b for a, b in zip(runtimes, runtimes[1:])), dict(zip(modes, runtimes))  # eager > graph > compiled
    if kind == "gpu":  # the graph removes most of the launch cost of tiny kernels
        assert runtimes[0] > 2 * runtimes[1]
    # one huge GEMM: the mode hardly matters
    huge = pd.DataFrame({"op": ["matmul"], "runtime_ms": [250.0]})
    big = [compose(huge, m, ex).total["runtime_ms"] for m in modes]
    assert max(big) / min(big) - 1 < 1e-3, big


def test_power_is_energy_over_runtime_and_absent_without_power():
    k = two(
        0.050,
        0.006,
        power_w=[400.0, 200.0],
        power_w_lo=[350.0, 150.0],
        power_w_hi=[450.0, 250.0],
        runtime_ms_lo=[0.04, 0.005],
        runtime_ms_hi=[0.06, 0.008],
    )
    for mode in MODES:
        res = compose(k, mode, GPU, static_power_w=100.0, static_power_source="test")
        t = res.total
        dyn = (400 - 100) * 0.050 / 1e3 * 1 + (200 - 100) * 0.006 / 1e3 * (0.0 if mode == "compiled" else 1.0)
        assert t["energy_j"] == pytest.approx(100 * t["runtime_ms"] / 1e3 + dyn)
        assert t["power_w"] == pytest.approx(t["energy_j"] / (t["runtime_ms"] / 1e3))
        assert t["power_w_lo"] < t["power_w"] < t["power_w_hi"] and t["runtime_ms_lo"] < t["runtime_ms"]
        assert t["energy_j_lo"] < t["energy_j"] < t["energy_j_hi"]
        assert t["static_power_w"] == 100.0 and t["static_power_source"] == "test"
    graph, eager = (compose(k, m, GPU, static_power_w=100.0).total for m in ("cuda_graph", "eager"))
    assert graph["power_w"] > eager["power_w"]  # the same work in less time: more power, less static energy
    assert graph["energy_j"] < eager["energy_j"]
    runtime_only = compose(two(0.05, 0.006), "eager", GPU)
    assert not {"power_w", "energy_j"} & set(runtime_only.total) and "dynamic_energy_j" not in runtime_only.kernels
    with pytest.raises(ValueError, match="no static power"):
        compose(k, "eager", GPU)


def test_static_power_fitted_from_rows(registry):
    """Rows whose power is 130 W + 2500 W x utilisation: the fit finds the 130 W intercept."""
    from features.physics import PhysicsFeaturizer

    rng = np.random.default_rng(0)
    sizes = rng.integers(64, 4096, size=(200, 3))
    rows = pd.DataFrame(
        {
            "op": "matmul",
            "dtype": "float16",
            "hardware": "H200-SXM",
            "m": sizes[:, 0],
            "n": sizes[:, 1],
            "k": sizes[:, 2],
        }
    )
    phys = PhysicsFeaturizer(registry).transform(rows)["physics_ms"].to_numpy()
    util = rng.uniform(0.002, 0.9, len(rows))
    rows = rows.assign(runtime_ms=phys / util, power_w=130.0 + 2500.0 * util + rng.normal(0, 2, len(rows)))
    fit = fit_static_power(rows, registry)
    assert fit["H200-SXM"] == pytest.approx(130.0, abs=3) and fit["H200-SXM:rows"] == 40
    assert fit["H200-SXM:dynamic_w_per_util"] == pytest.approx(2500.0, rel=0.1)
    with pytest.raises(ValueError, match="no rows with power_w"):
        fit_static_power(rows.assign(power_w=np.nan), registry)


def test_static_power_sources(registry):
    h200, h100, t4 = (registry.get(h) for h in ("H200-SXM", "H100-SXM", "T4"))
    assert h200.idle_power_source.startswith("fitted:") and static_power(h200, registry)[0] == h200.idle_power_w
    w, src = static_power(h100, registry)  # the same die and power limit: the H200's fit, said so
    assert w == h200.idle_power_w and src.startswith("transferred from H200-SXM (same architecture hopper")
    assert h100.idle_power_source.startswith("assumption:")  # its own field stays an assumption, labelled
    w, src = static_power(t4, registry)
    assert w == t4.idle_power_w and src.startswith("T4: assumption")


def test_floors_and_overheads_fitted_from_rows(registry):
    """Back-to-back timings that are max(device, 12 us) for GEMMs: the floor comes back; networks measured as
    their kernels + 30 us + 4 us per kernel: the overheads come back."""
    from features.physics import PhysicsFeaturizer

    rng = np.random.default_rng(1)
    sizes = np.exp(rng.uniform(np.log(16), np.log(8192), size=(300, 3))).astype(int)
    rows = pd.DataFrame(
        {
            "op": "matmul",
            "dtype": "float16",
            "hardware": "H200-SXM",
            "m": sizes[:, 0],
            "n": sizes[:, 1],
            "k": sizes[:, 2],
        }
    )
    phys = PhysicsFeaturizer(registry).transform(rows)["physics_ms"].to_numpy()
    rows["runtime_ms"] = np.maximum(1.5 * phys, 0.012)
    floors = fit_floors(rows, registry)
    assert floors["gemm"] == pytest.approx(0.012, rel=0.05)
    assert floors["elementwise"] <= floors["gemm"]  # no rows: the smallest identified floor
    n = rng.integers(5, 200, 30).astype(float)
    sums = rng.uniform(0.1, 5.0, 30)
    launch, gap, free = fit_overheads(sums, n, sums + 0.030 + 0.004 * n)
    assert launch == pytest.approx(0.030, abs=1e-9) and gap == pytest.approx(0.004, abs=1e-9) and free == 0.0
    views = rng.integers(0, 300, 30).astype(float)
    launch, gap, free = fit_overheads(sums, n, sums + 0.030 + 0.004 * n + 0.0015 * views, views)
    assert (launch, gap, free) == pytest.approx((0.030, 0.004, 0.0015), abs=1e-9)


@pytest.mark.shared_data
def test_committed_gpu_constants_are_what_the_h200_set_gives(registry):
    """conf/execution.yaml's GPU floors and H200-SXM's idle_power_w are the output of their command."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "models.compose", "gpu-constants", "--data-root", str(SHARED)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    fitted = json.loads(proc.stdout)
    assert dict(load_execution()["gpu"].floor_ms) == pytest.approx(fitted["floor_ms"], rel=1e-6)
    assert registry.get("H200-SXM").idle_power_w == fitted["static_power_w"]["H200-SXM"]


def test_gpu_constants_without_the_data_says_so_in_one_line(tmp_path):
    """``python -m models.compose gpu-constants`` on a folder without the H200 set: one error line, exit 2."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "models.compose", "gpu-constants", "--data-root", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# --------------------------------------------------------------------------- one call: runtime, power, energy
@pytest.fixture(scope="module")
def power_store(tmp_path_factory, registry):
    """The analytical power model (runtime + power per kernel) registered as costmodel-power in a temp store."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from data.importers.hopper import import_hopper
    from pipelines import experiment

    out = tmp_path_factory.mktemp("power")
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = hydra_compose(
            "power",
            overrides=[
                "model=[power_analytical]",
                "eval_splits=[]",
                "register.select_split=test",
                f"paths.output_dir={out}",
            ],
        )
    target = experiment.Target.from_config(cfg.target)
    rows, _ = experiment.rows_with_target(import_hopper(SHARED, registry), target, ["import"])
    experiment.run_experiment(cfg, rows, registry, target, folds={}, note=lambda *a, **k: None)
    return f"sqlite:///{out / 'mlflow.db'}"


@pytest.mark.shared_data
@pytest.mark.slow
def test_cli_and_python_give_runtime_power_energy_per_inference(power_store, tmp_path):
    """Done when: a ResNet-like nn.Module and a transformers GPT-2 get runtime, power and energy per inference on
    H100-SXM from one CLI command and one Python call; ``execution`` moves the answer the documented way."""
    import mlflow
    import torch

    from models.networks_api import predict_module
    from tests.conftest import run_cli
    from tests.torch_models import ResNet

    name = "models:/costmodel-power@champion"
    proc = run_cli(
        "predict",
        "--model",
        name,
        "--tracking-uri",
        power_store,
        "--torch",
        "tests.torch_models:resnet",
        "--example-input",
        "1x3x32x32",
        "--hardware",
        "H100-SXM",
        "--dtype",
        "bfloat16",
        "--execution",
        "cuda_graph",
        "--format",
        "json",
    )
    assert proc.returncode == 0, proc.stderr
    out = pd.DataFrame(json.loads(proc.stdout))
    tot = out.iloc[-1]
    assert tot["node"] == "total" and tot["execution"] == "cuda_graph"
    assert tot["power_w"] == pytest.approx(tot["energy_j"] / (tot["runtime_ms"] / 1e3))
    assert tot["static_power_source"].startswith("transferred from H200-SXM")
    assert tot["runtime_ms"] == pytest.approx(out["step_ms"].iloc[:-1].sum() + 0.01)

    mlflow.set_tracking_uri(power_store)
    with torch.device("meta"):
        net = ResNet()
    x = torch.empty(1, 3, 32, 32, device="meta")
    res = {m: predict_module(net, x, name, hardware="H100-SXM", dtype="bfloat16", execution=m) for m in MODES}
    assert res["cuda_graph"].total["runtime_ms"] == pytest.approx(tot["runtime_ms"])  # the CLI and Python agree
    t = {m: r.total for m, r in res.items()}
    assert t["eager"]["runtime_ms"] > t["cuda_graph"]["runtime_ms"] > t["compiled"]["runtime_ms"]
    assert t["eager"]["energy_j"] > t["cuda_graph"]["energy_j"] > t["compiled"]["energy_j"] > 0
    for v in t.values():
        assert v["runtime_ms_lo"] <= v["runtime_ms"] <= v["runtime_ms_hi"] and v["power_w"] >= v["static_power_w"]
        assert v["sum_runtime_ms"] == pytest.approx(res["eager"].kernels["runtime_ms"].sum())

    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=64)
    with torch.device("meta"):
        gpt2 = transformers.GPT2LMHeadModel(config)
    g = predict_module(
        gpt2,
        torch.zeros(1, 32, dtype=torch.long, device="meta"),
        name,
        hardware="H100-SXM",
        dtype="bfloat16",
        execution="cuda_graph",
    )
    assert g.unmapped == [] and {"runtime_ms", "power_w", "energy_j"} <= set(g.total)
    assert g.total["energy_j"] == pytest.approx(g.total["power_w"] * g.total["runtime_ms"] / 1e3)
