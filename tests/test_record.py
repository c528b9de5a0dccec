"""The runtime model of record: trained on the shipped real measurements, says when it is outside its training
domain, and learns a new GPU with ``costmodel calibrate`` (a real MLflow sqlite store, the real main job)."""

from __future__ import annotations

import hashlib

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from data.backends.reference import ReferenceBackend, select, training_summary
from data.reference import load_reference
from data.workloads import OPS
from models.api import load_cost_model
from tests.conftest import cli_in_process, run_cli, run_entry

MODEL = "models:/costmodel-runtime@champion"
HELD_GPU = "V100-SXM2-16GB"  # DeepBench's V100: left out of the calibrate test's training, then calibrated on
SHAPES = ["m", "n", "k", "batch", "c_in", "c_out", "h", "w", "kernel", "stride", "padding"]


@pytest.fixture(scope="module")
def pack():
    return load_reference()


# --------------------------------------------------------------------------- the reference backend
def test_reference_backend_caps_filters_and_replays_the_pack(pack):
    capped = select(pack, cap={"neusight": 5}, seed=0)
    per_group = capped.groupby(["source", "hardware", "op", "dtype"]).size()
    neusight = per_group[per_group.index.get_level_values(0).str.startswith("neusight")]
    assert (
        neusight.max() == 5
        and len(neusight)
        == pack[pack["source"].str.startswith("neusight")].groupby(["hardware", "op", "dtype"]).ngroups
    )  # every NeuSight GPU, op and dtype kept, 5 rows each
    others = ~pack["source"].str.startswith("neusight")
    assert (~capped["source"].str.startswith("neusight")).sum() == others.sum()  # H200 and DeepBench whole
    assert select(pack, cap={"neusight": 5}, seed=0).equals(capped)  # seeded
    assert not select(pack, cap={"neusight": 5}, seed=1).equals(capped)
    assert set(select(pack, sources=["hopper"])["hardware"]) == {"H200-SXM"}
    assert HELD_GPU not in set(select(pack, exclude_hardware=[HELD_GPU])["hardware"])

    # a cap per op family (and per op), ``default`` for the rest; a key that names nothing is one error
    mixed = select(pack, cap={"neusight": {"gemm": 7, "linear": 3, "elementwise": 2, "default": 4}}, seed=0)
    ns = mixed[mixed["source"].str.startswith("neusight")].groupby("op").size() / 5  # 5 GPUs, one dtype
    assert ns["bmm"] == 7 and ns["linear"] == 3 and ns["add"] == 2 and ns["softmax"] == 4, ns.to_dict()
    with pytest.raises(ValueError, match="'gemms' is not an op, an op family or 'default'"):
        select(pack, cap={"neusight": {"gemms": 10}})
    with pytest.raises(ValueError, match="'gemms' is not an op"):  # at construction, before any backend measures
        ReferenceBackend(cap={"neusight": {"gemms": 10}})

    backend = ReferenceBackend(cap={"neusight": 5, "deepbench": 2, "hopper": 2})
    backend._rows = pack
    rows = backend.rows()
    assert set(rows["backend"]) == {"reference"} and (rows["status"] == "ok").all()
    # the replayed rows are the pack's measurements, untouched
    key = ["source", "hardware", "op", "dtype", "shape_id", "runtime_ms"]
    assert len(rows.merge(pack[key].drop_duplicates(), on=key)) == len(rows)
    # measure(): a workload of the pack gives its measured runtime; one the pack lacks is an error row
    r = rows[rows["hardware"] == "H200-SXM"].iloc[0]
    params = {p: int(r[p]) for p in OPS[r["op"]].names if pd.notna(r[p])}  # optional ones (kv_len, ...) too
    same = pack[(pack["shape_id"] == r["shape_id"]) & (pack["dtype"] == r["dtype"]) & (pack["hardware"] == "H200-SXM")]
    got = backend.measure({"op": r["op"], "params": params, "dtype": r["dtype"], "hardware": "H200-SXM"})
    assert got["status"] == "ok" and got["runtime_ms"] == pytest.approx(same["runtime_ms"].median())
    miss = backend.measure({"op": "matmul", "params": {"m": 7, "n": 7, "k": 7}, "dtype": "float32"})
    assert miss["status"] == "error" and "not in the reference pack" in miss["error"]

    text = training_summary(pd.concat([rows, rows.head(3).assign(backend="sim-roofline", source="sim-roofline")]))
    assert "reference/neusight@" in text and "(real)" in text and "sim-roofline/sim-roofline (SIMULATED)" in text


# --------------------------------------------------------------------------- serving: the domain of validity
SPEC_ONLY = [  # GPUs with a spec sheet only (no measured row anywhere), an old DeepBench GPU, tensor-core dtypes
    {"op": "matmul", "m": 4096, "n": 4096, "k": 4096, "dtype": "float16", "hardware": "H100-SXM"},
    {"op": "matmul", "m": 4096, "n": 4096, "k": 4096, "dtype": "bfloat16", "hardware": "L4"},
    {"op": "linear", "m": 2048, "n": 4096, "k": 1024, "dtype": "float32", "hardware": "RTX-4070"},
    {
        "op": "conv2d",
        "batch": 8,
        "c_in": 64,
        "c_out": 64,
        "h": 56,
        "w": 56,
        "kernel": 3,
        "stride": 1,
        "padding": 1,
        "dtype": "tf32",
        "hardware": "A100-SXM4-80GB",
    },
    {"op": "softmax", "m": 4096, "n": 4096, "dtype": "float16", "hardware": "MI250X"},
    {"op": "matmul", "m": 1024, "n": 1024, "k": 1024, "dtype": "float32", "hardware": "M40"},
    {"op": "matmul", "m": 40960, "n": 40960, "k": 40960, "dtype": "float16", "hardware": "H100-SXM"},
]


def test_a_bad_reference_cap_fails_before_any_backend_measures(monkeypatch):
    """Every backend of ``collect.backends`` is built (its settings checked) before any of them measures: a typo in
    the reference cap is one error, not a CPU sweep measured and then thrown away."""
    from omegaconf import OmegaConf

    import data.collect as collect_module
    from data.hardware import HardwareRegistry

    cfg = OmegaConf.create(
        {
            "seed": 0,
            "sweep": {
                "max_flops": 1e6,
                "max_bytes": 1e6,
                "ops": {"add": {"n": 2, "params": {"m": [1, 8], "n": [16, 32]}}},
            },
            "backends": ["cpu", "reference"],
            "backend": {"cpu": {"dtypes": ["float32"]}, "reference": {"cap": {"neusight": {"gemms": 3}}}},
        }
    )
    monkeypatch.setattr(
        collect_module, "collect", lambda *a, **k: pytest.fail("a backend measured before the cap check")
    )
    with pytest.raises(ValueError, match="reference cap for 'neusight': 'gemms' is not an op"):
        collect_module.collect_from_config(cfg, HardwareRegistry.from_dir(), progress=False)


@pytest.mark.slow
def test_spec_only_gpus_answer_with_a_domain_flag_via_cli_and_python(tiny_run, tmp_path):
    cpu = pd.read_parquet(next((tiny_run["out"] / "datasets").glob("*.parquet")))
    cpu_id = cpu.loc[cpu["backend"] == "cpu", "hardware"].iloc[0]
    rows = SPEC_ONLY + [{"op": "gelu", "m": 512, "n": 512, "dtype": "float32", "hardware": cpu_id}]
    src = tmp_path / "w.csv"
    pd.DataFrame(rows).to_csv(src, index=False)
    proc = run_cli("predict", "--model", MODEL, "--input", str(src), "--tracking-uri", tiny_run["uri"])
    assert proc.returncode == 0, proc.stderr
    out = pd.read_csv(pd.io.common.StringIO(proc.stdout))
    assert len(out) == len(rows) and (out["runtime_ms"] > 0).all() and out["in_domain"].dtype == bool
    assert (out["runtime_ms_lo"] < out["runtime_ms"]).all() and (out["runtime_ms"] < out["runtime_ms_hi"]).all()
    outside = int((~out["in_domain"]).sum())
    assert outside >= 1 and not out["in_domain"].iloc[-2]  # the 40960^3 cube: bigger than any trained on
    assert (out.loc[~out["in_domain"], "domain_distance"] > 0).all() and (
        out.loc[out["in_domain"], "domain_distance"] == 0
    ).all()
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("costmodel: warning:")]
    assert warnings == [w for w in warnings if f"{outside} of {len(rows)} rows are outside the training domain" in w]
    assert len(warnings) == 1
    # the Python API and the CLI give the same rows, flag included
    api = load_cost_model(MODEL, tracking_uri=tiny_run["uri"])
    py = api.predict(rows)
    assert api.has_domain and py["in_domain"].tolist() == out["in_domain"].tolist()
    np.testing.assert_allclose(py["runtime_ms"], out["runtime_ms"], rtol=1e-9)
    np.testing.assert_allclose(py["domain_distance"], out["domain_distance"], rtol=1e-9)


@pytest.mark.slow
def test_the_40960_cube_moves_with_the_physics_and_is_flagged(tiny_run):
    """No silent cap: 10x the dimensions is 1000x the work; the served model answers within 2x of that and flags it."""
    api = load_cost_model(MODEL, tracking_uri=tiny_run["uri"])
    small, big = api.predict([{**SPEC_ONLY[0]}, {**SPEC_ONLY[-1]}]).to_dict("records")
    assert 500 < big["runtime_ms"] / small["runtime_ms"] < 2000, (small, big)
    assert small["in_domain"] and not big["in_domain"] and "log2_flops" in big["domain_reason"]
    assert big["runtime_ms_hi"] / big["runtime_ms"] > small["runtime_ms_hi"] / small["runtime_ms"]  # widened


@pytest.mark.slow
def test_rows_the_physics_cannot_cost_get_one_error_line(tiny_run, tmp_path, capsys):
    """In process (``pipelines.cli.main``: the exit status and stderr a shell sees; the CLI's own process is tested in
    tests/test_cli.py)."""
    for row, msg in [
        ({"op": "matmul", "m": 8, "n": 8, "k": 8, "dtype": "float32", "hardware": "xcvu13p"}, "fpga"),
        ({"op": "matmul", "m": 8, "n": 8, "k": 8, "dtype": "fixed", "hardware": "T4"}, "fixed"),
        ({"op": "matmul", "m": 8, "n": 8, "k": 8, "hardware": "T4", "transpose_b": 2}, "transpose_b must be 0 or 1"),
    ]:
        src = tmp_path / "bad.csv"
        pd.DataFrame([row]).to_csv(src, index=False)
        rc, _, err = cli_in_process(
            capsys, "predict", "--model", MODEL, "--input", str(src), "--tracking-uri", tiny_run["uri"]
        )
        err = err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and err[0].startswith("costmodel: error:") and msg in err[0], err


# --------------------------------------------------------------------------- costmodel calibrate
@pytest.fixture(scope="module")
def held_out_store(tmp_path_factory):
    """A tiny main job whose training leaves one GPU out (the physics model only, no MLIR, no eval splits: what
    calibrate reads is the registered model)."""
    out = tmp_path_factory.mktemp("calibrate")
    proc = run_entry(
        "pipelines.run",
        "debug=tiny",
        f"collect.backend.reference.exclude_hardware=[{HELD_GPU}]",
        "model=[physics]",
        "features.mlir.enabled=false",
        "eval_splits=[]",
        out=out,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"out": out, "uri": f"sqlite:///{out / 'mlflow.db'}"}


@pytest.mark.slow
def test_calibrate_registers_a_version_that_learned_the_new_gpu(held_out_store, pack, tmp_path, capsys):
    uri = held_out_store["uri"]
    rows = pd.read_parquet(next((held_out_store["out"] / "datasets").glob("*.parquet")))
    assert HELD_GPU not in set(rows["hardware"])
    gpu = pack[pack["hardware"] == HELD_GPU]
    cols = ["op", "hardware", "dtype", *[c for c in SHAPES if gpu[c].notna().any()], "runtime_ms"]
    cal = gpu.sample(40, random_state=0)
    rest = gpu.drop(cal.index)
    src = tmp_path / "new_gpu.csv"
    cal[cols].to_csv(src, index=False)
    kept = pack["hardware"].isin(["T4", "H200-SXM"]) & ~pack["source"].str.startswith("aiconfigurator")  # cols' ops
    others = pack[kept].sample(50, random_state=0)[cols[:-1]]

    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    v1 = str(client.get_model_version_by_alias("costmodel-runtime", "champion").version)
    before = load_cost_model(f"models:/costmodel-runtime/{v1}", tracking_uri=uri)
    rc, out, err = cli_in_process(
        capsys, "calibrate", "--model", MODEL, "--measurements", str(src), "--tracking-uri", uri
    )
    assert rc == 0, err
    v2 = out.strip().removeprefix("models:/costmodel-runtime/")
    assert int(v2) == int(v1) + 1 and "calibrated on 40 rows of V100-SXM2-16GB" in err
    mv = client.get_model_version("costmodel-runtime", v2)
    assert mv.tags["calibrated_hardware"] == HELD_GPU and mv.tags["calibration_rows"] == "40"
    assert mv.tags["calibration_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert mv.tags["parent_version"] == v1 and mv.tags["model"] == "physics"
    assert str(client.get_model_version_by_alias("costmodel-runtime", "champion").version) == v1  # not promoted
    run = client.get_run(mv.run_id)
    # auto: the kept way is no worse out of fold than the model before; a refit was tried (the registered artifact
    # carries its training rows)
    metrics = run.data.metrics
    assert metrics[f"calibrate/{HELD_GPU}/mape_out_of_fold"] <= metrics[f"calibrate/{HELD_GPU}/mape_before"]
    assert f"calibrate/{HELD_GPU}/mape_refit_out_of_fold" in metrics
    assert run.data.params["calibration_method"] in ("refit", "correction", "none")
    logged = pd.read_csv(
        mlflow.artifacts.download_artifacts(
            run_id=mv.run_id, artifact_path="eval/calibration_rows.csv", tracking_uri=uri
        )
    )
    assert len(logged) == 40 and logged["runtime_ms"].tolist() == pytest.approx(cal["runtime_ms"].tolist())

    # on the GPU's OTHER rows the new version is closer to the measurements; other GPUs are predicted as before
    after = load_cost_model(f"models:/costmodel-runtime/{v2}", tracking_uri=uri)
    err_before = np.mean(np.abs(np.log(before.predict(rest[cols[:-1]])["runtime_ms"].to_numpy() / rest["runtime_ms"])))
    err_after = np.mean(np.abs(np.log(after.predict(rest[cols[:-1]])["runtime_ms"].to_numpy() / rest["runtime_ms"])))
    assert err_after < 0.8 * err_before, (err_before, err_after)
    pd.testing.assert_frame_equal(after.predict(others), before.predict(others))

    # --promote moves the alias to the new version; --method asks for one way
    rc, out, err = cli_in_process(
        capsys, "calibrate", "--model", MODEL, "--measurements", str(src), "--tracking-uri", uri, "--promote",
        "--method", "refit",
    )  # fmt: skip
    assert rc == 0, err
    v3 = out.strip().removeprefix("models:/costmodel-runtime/")
    assert str(client.get_model_version_by_alias("costmodel-runtime", "champion").version) == v3
    run3 = client.get_run(client.get_model_version("costmodel-runtime", v3).run_id)
    assert run3.data.params["calibration_method"] == "refit" and "(out of fold, refit)" in err


@pytest.mark.slow
def test_calibrate_registers_nothing_that_does_not_beat_the_model(held_out_store, pack, tmp_path, capsys):
    """Rows measured exactly as the model answers them: no calibration beats that out of fold, so the command says
    so in one line, exits 1 and registers no version."""
    uri = held_out_store["uri"]
    gpu = pack[pack["hardware"] == HELD_GPU].sample(30, random_state=1)
    cols = ["op", "hardware", "dtype", *[c for c in SHAPES if gpu[c].notna().any()]]
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    versions = {v.version for v in client.search_model_versions("name='costmodel-runtime'")}
    first = f"models:/costmodel-runtime/{min(versions, key=int)}"  # the main job's fit, never calibrated
    model = load_cost_model(first, tracking_uri=uri)
    src = tmp_path / "as_predicted.csv"
    gpu[cols].assign(runtime_ms=model.predict(gpu[cols])["runtime_ms"].to_numpy()).to_csv(src, index=False)
    rc, out, err = cli_in_process(
        capsys, "calibrate", "--model", first, "--measurements", str(src), "--tracking-uri", uri
    )
    lines = err.strip().splitlines()
    assert rc == 1 and out == "" and len(lines) == 1 and lines[0].startswith("costmodel: calibrate:"), err
    assert "does not beat the model's own answer out of fold" in lines[0] and "nothing registered" in lines[0]
    assert {v.version for v in client.search_model_versions("name='costmodel-runtime'")} == versions


@pytest.mark.slow
@pytest.mark.parametrize(
    "change,msg",
    [
        (lambda d: d.drop(columns="runtime_ms"), "lack column runtime_ms"),
        (lambda d: d.head(3), "3 measured rows: calibrate needs at least 5"),
        (lambda d: d.assign(hardware="H1000"), "unknown hardware 'H1000'"),
        (lambda d: d.assign(runtime_ms=[0.0] + list(d["runtime_ms"][1:])), "row 0: runtime_ms must be a number > 0"),
        (lambda d: d.assign(hardware=["T4"] * 3 + [HELD_GPU] * (len(d) - 3)), "measurements of 2 hardware"),
    ],
)
def test_calibrate_bad_rows_give_one_error_line(held_out_store, pack, tmp_path, capsys, change, msg):
    gpu = pack[pack["hardware"] == HELD_GPU].head(12)
    src = tmp_path / "bad.csv"
    change(gpu[["op", "hardware", "dtype", "m", "n", "k", "runtime_ms"]].reset_index(drop=True)).to_csv(
        src, index=False
    )
    rc, out, err = cli_in_process(
        capsys, "calibrate", "--model", MODEL, "--measurements", str(src), "--tracking-uri", held_out_store["uri"]
    )
    lines = err.strip().splitlines()
    assert rc == 2 and out == "" and len(lines) == 1 and lines[0].startswith("costmodel: error:") and msg in lines[0], (
        err
    )


@pytest.mark.slow
def test_calibrate_needs_a_registered_model_and_a_gpu_to_measure(held_out_store, capsys):
    uri = held_out_store["uri"]
    for args, msg in [
        (("--model", "runs:/abc/model", "--measure", "--hardware", "H100-SXM"), "registered model"),
        (("--model", MODEL, "--measure"), "--measure needs --hardware"),
        (("--model", MODEL, "--measure", "--hardware", "H100-SXM", "--budget", "3"), "at least 5"),
        (("--model", MODEL, "--measure", "--hardware", "H100-SXM"), "no CUDA device"),
    ]:
        rc, out, err = cli_in_process(capsys, "calibrate", *args, "--tracking-uri", uri)
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1 and msg in lines[0], (args, err)


@pytest.mark.slow
def test_calibrate_measures_the_sweep_the_model_chooses_on_a_fake_gpu(held_out_store, monkeypatch, registry):
    """--measure's path on a fake H100 (tests/fake_cuda.py): the model picks a sweep that covers each kind of kernel
    over its range of runtimes, the cuda backend measures, the new version predicts that GPU from what it measured."""
    from data.workloads import family
    from models.calibration import candidates, choose_sweep, rank_workloads
    from pipelines.calibrate import calibrate_registered, load_served, measure_sweep
    from tests import fake_cuda
    from tests.fake_nvml import FakeGpu

    mlflow.set_tracking_uri(held_out_store["uri"])
    mlflow.set_registry_uri(held_out_store["uri"])
    served = load_served(MODEL)
    inner = served[2]
    sweep = choose_sweep(inner, "H100-SXM", budget=8)
    groups = lambda frame: [f"{family(o)}/{d}" for o, d in zip(frame["op"], frame["dtype"])]
    assert len(sweep) == 8 and len(set(groups(sweep))) == 8  # one (op family, dtype) each

    # the design: each group's median runtime first, then its quartiles (not its extremes, the least sure rows)
    pool = candidates("H100-SXM")
    predicted = inner.model.predict_domain(inner.encoder.transform(pool))["runtime_ms"].to_numpy(float)
    pool = pool.assign(_t=predicted, _g=groups(pool))
    n_groups = pool["_g"].nunique()
    first = pool.loc[rank_workloads(inner, pool.drop(columns=["_t", "_g"]), n_groups).index]
    for g, row in first.set_index("_g").iterrows():
        times = np.sort(pool.loc[pool["_g"] == g, "_t"].to_numpy())
        assert row["_t"] == times[len(times) // 2], g
    three = pool.loc[rank_workloads(inner, pool.drop(columns=["_t", "_g"]), 3 * n_groups).index]
    assert three["_g"].value_counts().eq(3).all()
    for g, got in three.groupby("_g")["_t"]:
        times = pool.loc[pool["_g"] == g, "_t"]
        assert got.min() <= times.quantile(0.3) and got.max() >= times.quantile(0.7), g

    gpu = FakeGpu(busy_power_w=650.0, idle_power_w=70.0, name="NVIDIA H100 80GB HBM3", power_limit_w=700.0)
    with fake_cuda.installed(monkeypatch, fake_cuda.FakeCudaDevice.from_spec(registry.get("H100-SXM"), gpu)):
        rows = measure_sweep(
            sweep,
            "H100-SXM",
            inner.registry,
            {"power": False, "windows": 3, "min_window_ms": 5.0, "graph_threshold_us": 2000.0},
            progress=False,
        )
    assert len(rows) >= 5 and set(rows["hardware"]) == {"H100-SXM"} and (rows["runtime_ms"] > 0).all()
    # each row says how it was timed: the short kernels from a CUDA graph (threshold 2 ms here), the others in a stream
    assert set(rows["harness"]) <= {"cuda_graph", "back_to_back"} and "cuda_graph" in set(rows["harness"])
    result = calibrate_registered(MODEL, rows, source="measure", served=served, note=lambda _: None)
    assert result.hardware == "H100-SXM" and result.rows == len(rows) and not result.promoted
    tags = MlflowClient().get_model_version("costmodel-runtime", result.version).tags
    assert tags["calibration_source"] == "measure" and tags["calibrated_hardware"] == "H100-SXM"


# --------------------------------------------------------------------------- the timing harness as an input
def test_the_launch_floor_follows_the_timing_harness(pack, registry):
    """NeuSight (one call per CUDA-event pair), DeepBench (a C++ loop calling the libraries) and the H200 set (a
    PyTorch stream) get their own launch floors; a prediction defaults to the PyTorch stream and a ``harness`` column
    asks for another; pooled without the switch."""
    from features.physics import HARNESSES, PhysicsFeaturizer, harness_of
    from models.physics import GRAPH_FLOORS_MS, OVER_PER_CALL, PhysicsModel

    rows = select(pack, sources=["neusight", "deepbench", "hopper"], cap={"neusight": 20}, seed=0)
    X, y = PhysicsFeaturizer(registry).transform(rows), rows["runtime_ms"].to_numpy(float)
    for source, harness in (("neusight", "per_call"), ("deepbench", "library_loop"), ("hopper", "back_to_back")):
        assert set(X.loc[rows["source"].str.startswith(source).to_numpy(), "harness_index"]) == {
            float(HARNESSES.index(harness))
        }
    model = PhysicsModel(n_estimators=30, interval_folds=False).fit(X, y)
    for family in ("gemm", "conv"):  # the per-call floor is the larger one, by several microseconds
        assert model.floors_["per_call"][family] > model.floors_["library_loop"][family] + 0.005
    # PyTorch's dispatch in a stream: the H200 set's small SDPA calls take ~28 us, its small softmax ~9 us (a C++ loop
    # has no such cost; from DeepBench's GEMMs and convs alone these floors were 1 us)
    assert model.floors_["back_to_back"]["attention"] > 0.015
    assert model.floors_["back_to_back"]["softmax"] > 0.004
    pooled = PhysicsModel(n_estimators=30, interval_folds=False, harness_floors=False).fit(X, y)
    assert pooled.floors_["per_call"] == pooled.floors_["back_to_back"] == pooled.floors_["library_loop"]

    small = pd.DataFrame(
        {
            "op": ["matmul"] * 3,
            "m": [64] * 3,
            "n": [64] * 3,
            "k": [64] * 3,
            "dtype": ["float32"] * 3,
            "hardware": ["H100-SXM"] * 3,
            "harness": ["", "per_call", "library_loop"],
        }
    )
    Xs = PhysicsFeaturizer(registry).transform(small)
    assert list(Xs["harness_index"]) == [0.0, 1.0, 2.0]  # the default is back to back
    fast, slow, _ = model.predict(Xs)
    assert slow > fast + 0.005  # a tiny GEMM is floor-dominated: the per-call floor shows
    with pytest.raises(Exception, match="harness must be one of"):
        harness_of(small.assign(harness=["", "sometimes", ""]))
    # a row the cuda backend timed from a CUDA graph (its timing_method) was timed without the host's dispatch; a
    # harness column still wins; no training row was so timed, so its floors are the measured graph floors
    timed = small.assign(harness=["", "", "per_call"], timing_method=["cuda_graph", "cuda_events", "cuda_graph"])
    assert list(harness_of(timed)) == [HARNESSES.index("cuda_graph"), 0.0, 1.0]
    graph = PhysicsFeaturizer(registry).transform(timed)
    assert model.predict(graph)[0] < fast - 0.004  # a 64^3 GEMM replayed from a graph: the GPU's ~2 us, not ~10
    assert model.floors_["cuda_graph"] == GRAPH_FLOORS_MS  # no graph-timed row in training: the measured floors

    # trained on one harness only (NeuSight, per call), the others get the measured prior ratios
    ns = rows["source"].str.startswith("neusight").to_numpy()
    only = PhysicsModel(n_estimators=30, interval_folds=False).fit(X[ns].reset_index(drop=True), y[ns])
    for family in ("gemm", "conv", "norm"):
        for harness in ("back_to_back", "library_loop"):
            assert only.floors_[harness][family] == pytest.approx(
                OVER_PER_CALL[harness] * only.floors_["per_call"][family]
            )
    assert only.floors_["cuda_graph"] == GRAPH_FLOORS_MS


def test_a_floor_comes_only_from_kernels_that_show_it(pack, registry):
    """The H200 set's float32 elementwise kernels are all bandwidth-bound (their physics time is most of their
    runtime): they say nothing of the launch floor, so none is fitted from them; its small GEMMs are floor-bound."""
    from features.physics import PhysicsFeaturizer
    from models.physics import family_floors

    rows = select(pack, sources=["hopper"], seed=0)
    rows = rows[(rows["dtype"] == "float32")].reset_index(drop=True)
    X, y = PhysicsFeaturizer(registry).transform(rows), rows["runtime_ms"].to_numpy(float)
    floors = family_floors(X, y, np.ones(len(X), bool))
    assert "elementwise" not in floors
    assert 0.005 < floors["gemm"] < 0.03


# --------------------------------------------------------------------------- extrapolation checks (a)-(f)
@pytest.mark.slow
def test_an_extrapolation_check_runs_from_its_preset_and_logs_to_mlflow(tmp_path):
    """``python -m pipelines.evaluate experiment=extrapolation_e`` (tiny): the physics model and the baselines on the
    same rows, metrics under ``<split>/<scope>/<metric>`` in a real sqlite store, the table written, the goal judged."""
    from tests.conftest import run_entry

    proc = run_entry("pipelines.evaluate", "experiment=extrapolation_e", "tiny=true", out=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "NOT met" in proc.stdout or ": met" in proc.stdout
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("costmodel-extrapolation").experiment_id])
    by_model = {r.data.tags["model"]: r.data.metrics for r in runs}
    assert set(by_model) == {"physics", "xgb", "rf", "xgb_residual", "roofline"}
    for metrics in by_model.values():
        assert metrics["e_dtypes/all/mape"] > 0 and "e_dtypes/hardware:H200-SXM/mape" in metrics
        assert metrics["e_dtypes/all/goal_met"] in (0.0, 1.0)
    assert 0 <= by_model["physics"]["e_dtypes/all/in_domain"] <= 1  # the physics model says where it is outside
    n = {m: v["e_dtypes/all/n"] for m, v in by_model.items()}
    assert len(set(n.values())) == 1  # every model scored on the same rows
    table = (tmp_path / "public_eval" / "extrapolation_e.md").read_text()
    assert table.startswith("| model | all MAPE / MedAPE |") and "| physics |" in table
