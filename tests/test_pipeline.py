"""The main job end to end (real entry point, real CPU kernels, real MLflow sqlite store) at a tiny size."""

import subprocess
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from mlflow.tracking import MlflowClient

from data.schema import dataset_hash
from data.store import read_dataset
from tests.conftest import ROOT, run_entry

pytestmark = pytest.mark.slow


def test_default_config_composes():
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("run")
        sim = compose("run", overrides=["collect.backends=[cpu,reference,sim-roofline]"])
    assert set(cfg.model) == {"physics", "xgb", "roofline"}
    assert cfg.model.physics.encoder._target_ == "features.physics.PhysicsFeaturizer"
    assert list(cfg.collect.backends) == ["cpu", "reference"]  # real measurements only; simulated GPUs when asked
    assert list(sim.collect.backends) == ["cpu", "reference", "sim-roofline"]
    sims = set(cfg.collect.backend["sim-roofline"].hardware)
    assert {"A100-PCIe-40GB", "H100-SXM", "L4", "T4", "V100-PCIe-32GB"} <= sims
    assert cfg.split.name == "held_out_shapes" and cfg.mlflow.tracking_uri is None
    assert list(cfg.eval_splits) == ["held_out_shapes", "held_out_family", "leave_one_hardware_out"]
    assert cfg.register.select_split == "leave_one_hardware_out"  # a GPU held out, not a shape of a known GPU


def test_main_job_tracks_registers_and_serves(tiny_run):
    out, uri = tiny_run["out"], tiny_run["uri"]
    assert "registered" in tiny_run["stdout"] and "mlflow ui --backend-store-uri" in tiny_run["stdout"]
    assert "every split" in tiny_run["stdout"] and "leave_one_hardware_out" in tiny_run["stdout"]
    [dataset] = list((out / "datasets").glob("*.parquet"))
    rows = read_dataset(dataset)  # validates against the schema
    assert {"cpu", "reference"} == set(rows["backend"])  # no simulated row unless asked
    cpu = rows[rows["backend"] == "cpu"]
    assert (cpu["runtime_repeats"] >= 1).all() and cpu["runtime_iqr_ms"].notna().all()
    assert set(cpu["op"]) == {"matmul", "bmm", "linear", "conv2d", "layernorm", "softmax", "add", "gelu"}
    ref = rows[rows["backend"] == "reference"]
    assert {s.split("@")[0] for s in ref["source"]} == {"neusight", "hopper-h200", "deepbench", "aiconfigurator-vllm"}
    # what it trained on is printed: every source, real, none simulated
    assert "training data:" in tiny_run["stdout"] and "SIMULATED" not in tiny_run["stdout"]
    assert all(f"{b}/{s} (real)" in tiny_run["stdout"] for b, s in rows[["backend", "source"]].drop_duplicates().values)

    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    exp = client.get_experiment_by_name("costmodel")
    runs = client.search_runs([exp.experiment_id])
    assert sorted(r.data.tags["model"] for r in runs) == ["physics", "roofline", "xgb"]
    for r in runs:
        m = r.data.metrics
        for key in (
            "test/all/mape",
            "test/all/medape",
            "test/all/r2_log",
            "test/all/kendall_tau",
            "test/T4/mape",
            "test/all/coverage90",
            "test/T4/coverage90",
            "calibration/all/log_halfwidth",
        ):
            assert key in m, key
        assert r.data.tags["dataset_sha256"] == dataset_hash(rows)
        assert r.data.params["collect.backend.cpu.num_threads"] == "1" and "split.test_size" in r.data.params
        arts = {a.path for a in client.list_artifacts(r.info.run_id, "eval")}
        assert {"eval/parity.png", "eval/error_cdf.png", "eval/heldout_predictions.csv"} <= arts
        assert len(r.inputs.dataset_inputs) == 1
        # every split of eval_splits, pooled over its folds, in the same run
        for split in ("held_out_shapes", "held_out_family", "leave_one_hardware_out"):
            for k in ("mape", "medape", "smape", "r2_log", "group_kendall_tau", "coverage90", "folds", "n"):
                assert f"{split}/all/{k}" in m, f"{split}/all/{k}"
        assert m["held_out_shapes/all/mape"] == pytest.approx(
            m["test/all/mape"]
        )  # the champion split: the registered fit
        assert m["leave_one_hardware_out/all/folds"] == rows["hardware"].nunique() == 17  # 16 GPUs + this CPU
        assert m["held_out_family/all/folds"] == rows["family"].nunique() == 6
        assert m["leave_one_hardware_out/all/n"] == m["held_out_family/all/n"] == (rows["status"] == "ok").sum()
    # the splits are disjoint: test + fit/calibration = every ok row, and no held-out shape has a row outside the
    # test set (held_out_shapes holds a shape out on every hardware and dtype)
    ok = rows[rows["status"] == "ok"]
    for r in runs:
        m = r.data.metrics
        assert m["test/all/n"] + m["test/all/n_train"] == len(ok)
        assert 0 < m["calibration/all/n"] < m["test/all/n_train"]
    held = pd.read_csv(
        mlflow.artifacts.download_artifacts(
            run_id=runs[0].info.run_id, tracking_uri=uri, artifact_path="eval/heldout_predictions.csv"
        )
    )
    shape_cols = [
        "op",
        *[c for c in held.columns if c in ok.columns and c not in ("op", "hardware", "dtype", "runtime_ms", "inputs")],
    ]

    def keys(frame):  # op + shape as one string per row (numbers as floats: the CSV reads ints with NaN as floats)
        shapes = frame[shape_cols[1:]].apply(lambda c: pd.to_numeric(c, errors="coerce").astype(float)).fillna(-1)
        return frame["op"].astype(str) + "|" + shapes.astype(str).agg("|".join, axis=1)

    assert len(held) == m["test/all/n"] and keys(held).nunique() < len(held)  # shapes repeat over hardware
    assert keys(ok).isin(set(keys(held))).sum() == len(held)
    # the learned models beat the roofline on the held-out shapes, the physics model by a quarter at least (a few
    # rows per GPU, op and dtype: the trees see three of each LLM kernel kind)
    by_model = {r.data.tags["model"]: r.data.metrics for r in runs}
    roofline = by_model["roofline"]["test/all/mape"]
    for name in [n for n in ("rf", "xgb", "physics") if n in by_model]:
        assert by_model[name]["test/all/mape"] < (0.75 if name == "physics" else 1.0) * roofline, name
        assert by_model[name]["test/all/r2_log"] > by_model["roofline"]["test/all/r2_log"], name
    # the champion: the best candidate on leave-one-hardware-out (what a user holds out), each held-out hardware
    # counted once (the mean of its per-hardware MAPEs), the physics model here
    for r in runs:
        per_hw = {
            k: v for k, v in r.data.metrics.items() if k.startswith("leave_one_hardware_out/") and k.endswith("/mape")
        }
        hardware = [k for k in per_hw if k.split("/")[1] not in ("all", "hardware_mean")]
        assert len(hardware) > 1
        mean = np.mean([per_hw[k] for k in hardware])
        assert per_hw["leave_one_hardware_out/hardware_mean/mape"] == pytest.approx(mean, rel=1e-9)
    best = min(runs, key=lambda r: r.data.metrics["leave_one_hardware_out/hardware_mean/mape"])
    mv = client.get_model_version_by_alias("costmodel-runtime", "champion")
    assert mv.run_id == best.info.run_id and mv.tags["model"] == "physics"
    assert float(mv.tags["test_mape"]) == pytest.approx(best.data.metrics["test/all/mape"], rel=1e-5)

    # registry round trip: load @champion and predict, for a GPU and for the measured CPU
    mlflow.set_tracking_uri(uri)
    model = mlflow.pyfunc.load_model("models:/costmodel-runtime@champion")
    cpu_id = cpu["hardware"].iloc[0]
    frame = pd.DataFrame(
        [
            {"op": "matmul", "m": 512, "n": 512, "k": 512, "dtype": "float16", "hardware": "A100-PCIe-40GB"},
            {
                "op": "conv2d",
                "batch": 1,
                "c_in": 64,
                "c_out": 64,
                "h": 56,
                "w": 56,
                "kernel": 3,
                "stride": 1,
                "padding": 1,
                "hardware": cpu_id,
            },
        ]
    )
    pred = model.predict(frame)
    assert (
        list(pred.columns)
        == ["runtime_ms", "runtime_ms_lo", "runtime_ms_hi", "in_domain", "domain_distance", "domain_reason"]
        and (pred["runtime_ms"] > 0).all()
    )
    assert (pred["runtime_ms_lo"] < pred["runtime_ms"]).all() and (pred["runtime_ms"] < pred["runtime_ms_hi"]).all()
    # the held-out predictions logged for the champion come back from the registered model
    held = pd.read_csv(
        Path(mlflow.artifacts.download_artifacts(run_id=best.info.run_id, artifact_path="eval/heldout_predictions.csv"))
    )
    again = model.predict(held.drop(columns=["runtime_ms", "pred_runtime_ms"]))
    pd.testing.assert_series_equal(again["runtime_ms"], held["pred_runtime_ms"], check_names=False, rtol=1e-6)
    # the rows the champion rule re-scores a champion on (experiment.served_frame, as register builds them) give it
    # its own stored score: every row answered as it was measured (harness, layout), as the challenger's were
    from models.splits import SPLITS
    from pipelines import tracking
    from pipelines.experiment import DESCRIBE, served_frame

    job_rows = ok.reset_index(drop=True)  # the job's rows: those with the target
    _, test = SPLITS["held_out_shapes"](job_rows, test_size=0.2, seed=0)
    served = served_frame(job_rows, test, [c for c in DESCRIBE if c in job_rows.columns])
    assert {"harness", "transpose_b"} <= set(served.columns) and "source" not in served.columns
    neusight = job_rows.loc[test, "source"].str.startswith("neusight").to_numpy()
    assert neusight.any() and set(served.loc[neusight, "harness"]) == {"per_call"}
    served = served.assign(runtime_ms=job_rows.loc[test, "runtime_ms"].to_numpy(), pred_runtime_ms=0.0)
    champion = "models:/costmodel-runtime@champion"
    champ_mape, _, n, _ = tracking._rescore_champion(champion, served, "runtime_ms", "mape")
    assert n == len(served) and champ_mape == pytest.approx(float(best.data.metrics["test/all/mape"]), rel=1e-6)
    # its own held-out rows are none of its training rows (its training keys, eval/training_keys.npy)
    keys = np.load(mlflow.artifacts.download_artifacts(run_id=best.info.run_id, artifact_path="eval/training_keys.npy"))
    trained = tracking._champion_train_keys(best.info.run_id)
    assert set(keys) == set(trained) and len(keys) == len(ok) - len(test)
    assert tracking._rescore_champion(champion, served, "runtime_ms", "mape", trained)[2:] == (len(served), 0)


def test_champion_takes_mlir_text_and_sums_its_kernels(tiny_run):
    """A row may carry MLIR (from the real exporter) instead of op + shapes: same numbers, one row per input."""
    from features.mlir.export import export_workload

    mlflow.set_tracking_uri(tiny_run["uri"])
    model = mlflow.pyfunc.load_model("models:/costmodel-runtime@champion")
    mm = {"op": "matmul", "m": 256, "n": 128, "k": 64}
    conv = {
        "op": "conv2d",
        "batch": 2,
        "c_in": 16,
        "c_out": 32,
        "h": 28,
        "w": 28,
        "kernel": 3,
        "stride": 1,
        "padding": 1,
    }
    by_shape = model.predict(pd.DataFrame([{**mm, "hardware": "T4"}, {**conv, "hardware": "T4"}]))
    text_mm = export_workload("matmul", {k: v for k, v in mm.items() if k != "op"})
    text_conv = export_workload("conv2d", {k: v for k, v in conv.items() if k != "op"})
    frame = pd.DataFrame(
        [
            {"mlir": text_mm, "hardware": "T4"},
            {**conv, "hardware": "T4"},
            {"mlir": text_mm + "\n" + text_conv.replace("module", "module @second", 1), "hardware": "T4"},
        ]
    )
    by_mlir = model.predict(frame)
    assert len(by_mlir) == 3
    assert by_mlir["runtime_ms"][0] == pytest.approx(by_shape["runtime_ms"][0], rel=1e-9)
    assert by_mlir["runtime_ms"][1] == pytest.approx(by_shape["runtime_ms"][1], rel=1e-9)
    assert by_mlir["runtime_ms"][2] == pytest.approx(by_shape["runtime_ms"].sum(), rel=1e-9)  # a two-kernel module
    assert by_mlir["runtime_ms_hi"][2] == pytest.approx(by_shape["runtime_ms_hi"].sum(), rel=1e-9)
    with pytest.raises(mlflow.exceptions.MlflowException, match="row 0"):
        model.predict(pd.DataFrame([{"mlir": "func.func @f( {", "hardware": "T4"}]))


def test_target_picks_baseline_column_and_registry_name():
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        runtime = compose("run")
        memory = compose("run", overrides=["target=peak_mem_bytes"])
        preset = compose("run", overrides=["experiment=memory"])
    assert runtime.register.name == "costmodel-runtime" and runtime.model.roofline.column == "roofline_ms"
    assert memory.register.name == "costmodel-peak_mem_bytes" and memory.model.roofline.column == "tensor_bytes"
    assert preset.target.name == "peak_mem_bytes" and preset.register.name == "costmodel-peak_mem_bytes"
    assert list(preset.model) == ["rf", "xgb", "roofline", "xgb_residual"]
    assert preset.model.xgb_residual.column == preset.model.roofline.column == "tensor_bytes"


def _run_job(out: Path, *overrides: str) -> subprocess.CompletedProcess:
    return run_entry("pipelines.run", "debug=tiny", *overrides, out=out, timeout=600)


def test_memory_target_registers_a_peak_memory_model(tmp_path):
    """experiment=memory (target=peak_mem_bytes): the measured CPU rows only (the pack's GPU rows have no peak memory:
    dropped, counted), the tensor-bytes baseline, its own registry name; the registered model predicts positive bytes
    with an interval."""
    proc = _run_job(tmp_path, "experiment=memory", "features.mlir.enabled=false")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [dataset] = list((tmp_path / "datasets").glob("*.parquet"))
    rows = read_dataset(dataset)
    cpu = rows[(rows["backend"] == "cpu") & (rows["status"] == "ok")]
    ref = rows[rows["backend"] == "reference"]
    assert cpu["peak_mem_bytes"].notna().all() and ref["peak_mem_bytes"].isna().all() and len(ref) > 0
    assert f"dropped {len(ref)} ok rows without it (reference: {len(ref)})" in proc.stdout
    assert "leave_one_hardware_out skipped" in proc.stdout

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    assert [m.name for m in client.search_registered_models()] == ["costmodel-peak_mem_bytes"]
    runs = client.search_runs([client.get_experiment_by_name("costmodel").experiment_id])
    assert sorted(r.data.tags["model"] for r in runs) == ["rf", "roofline", "xgb", "xgb_residual"]
    for r in runs:
        assert r.data.tags["target"] == "peak_mem_bytes" and r.data.metrics["test/all/n"] > 0
        assert set(r.data.metrics) >= {f"{s}/all/mape" for s in ("held_out_shapes", "held_out_family")}
        assert "leave_one_hardware_out/all/mape" not in r.data.metrics
    bound = next(r for r in runs if r.data.tags["model"] == "roofline")
    assert bound.data.params["roofline.column"] == "tensor_bytes"
    held = pd.read_csv(
        Path(
            mlflow.artifacts.download_artifacts(
                run_id=bound.info.run_id, artifact_path="eval/heldout_predictions.csv", tracking_uri=uri
            )
        )
    )
    assert (held["pred_peak_mem_bytes"] > 0).all()  # the bound is the tensors' bytes, never the runtime roofline

    mlflow.set_tracking_uri(uri)
    model = mlflow.pyfunc.load_model("models:/costmodel-peak_mem_bytes@champion")
    frame = pd.DataFrame(
        [
            {"op": "matmul", "m": 512, "n": 256, "k": 1024, "dtype": "float32", "hardware": cpu["hardware"].iloc[0]},
            {"op": "gelu", "m": 64, "n": 4096, "dtype": "float32", "hardware": cpu["hardware"].iloc[0]},
        ]
    )
    pred = model.predict(frame)
    assert list(pred.columns) == ["peak_mem_bytes", "peak_mem_bytes_lo", "peak_mem_bytes_hi"]
    assert (pred["peak_mem_bytes"] > 0).all()
    assert (pred["peak_mem_bytes_lo"] < pred["peak_mem_bytes"]).all()
    assert (pred["peak_mem_bytes"] < pred["peak_mem_bytes_hi"]).all()
    # an MLIR module's peak is its largest kernel's (runtime sums its kernels, memory does not)
    from features.mlir.export import export_workload
    from features.mlir.workloads import workloads_from_mlir

    text = export_workload("mlp", {"batch": 8, "width": 64, "depth": 3}, "float32")
    kernels = workloads_from_mlir(text).drop(columns=["mlir_op", "node"]).assign(hardware=cpu["hardware"].iloc[0])
    per_kernel = model.predict(kernels)["peak_mem_bytes"]
    module = model.predict(pd.DataFrame([{"mlir": text, "hardware": cpu["hardware"].iloc[0]}]))
    assert len(per_kernel) > 1 and module["peak_mem_bytes"].iloc[0] == pytest.approx(per_kernel.max())


def test_memory_target_without_rows_is_one_error_line(tmp_path):
    proc = _run_job(tmp_path, "target=peak_mem_bytes", "collect.backends=[sim-roofline]")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert errors == [errors[0]] and errors[0].startswith("run: error: no collected row has target 'peak_mem_bytes'")
    assert "Traceback" not in proc.stderr and not (tmp_path / "mlflow.db").exists()
