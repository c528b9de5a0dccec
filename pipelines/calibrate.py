"""``costmodel calibrate``: a registered runtime model learns a new GPU from a few of its measurements.

    costmodel calibrate --model models:/costmodel-runtime@champion --measurements new_gpu.csv [--promote]
    costmodel calibrate --model models:/costmodel-runtime@champion --measure --hardware H100-SXM [--budget 60]

A new GPU is one ``conf/hardware/<id>.yaml`` (its spec sheet: the model already predicts it from the specs) plus
this command: the registered model (:func:`load_served`) -> the rows (a file, or :func:`measure_sweep`: the sweep the
model chooses, ``models.calibration.choose_sweep``, measured on this machine's GPU by the cuda backend) -> the
calibrated model (``models.calibration.calibrate_served``: checks the rows, calibrates, refuses one that does not
beat the model's own answer out of fold with ``NotBetter``) -> a logged run and a new registered version
(:func:`calibrate_registered`).

The run logs the rows as ``eval/calibration_rows.csv``, the model before on them and the correction out of fold as
metrics ``calibrate/<hardware>/<metric>`` (``family:<op family>`` scopes too), and the served pyfunc with the new
GPU's spec added to its hardware registry; the version is one of the SAME registered model, its tags record the
hardware, the number of rows, the rows' sha256, the parent version and model URI. The alias moves only with
``promote``. Bad input raises ``models.calibration.CalibrationError`` (one line), as does a URI that names no
registered model or a model that cannot calibrate.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from data.workloads import SHAPE_PARAMS
from models.calibration import CalibrationError, can_calibrate

MODEL_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:@(?P<alias>[^/]+)|/(?P<version>\d+))$")


@dataclass
class Calibration:
    name: str
    version: str
    parent_version: str
    hardware: str
    rows: int
    sha256: str
    run_id: str
    promoted: bool
    mape_before: float
    mape_out_of_fold: float


def rows_sha256(rows: pd.DataFrame) -> str:
    """sha256 of the rows as CSV (what a file's bytes hash to when it is that CSV)."""
    return hashlib.sha256(rows.to_csv(index=False).encode()).hexdigest()


def parse_model_uri(uri: str) -> tuple[str, str | None, str | None]:
    """``(name, alias, version)`` of ``models:/<name>@<alias>`` or ``models:/<name>/<version>``."""
    m = MODEL_URI.match(uri or "")
    if m is None:
        raise CalibrationError(
            f"--model must name a registered model (models:/<name>@<alias> or "
            f"models:/<name>/<version>), got {uri!r}: calibrate registers a new version of it"
        )
    return m["name"], m["alias"], m["version"]


def load_served(uri: str, hardware=None):
    """The registered version behind ``uri`` and its served python model (``models.pyfunc.CostModelPyfunc``), with
    the specs ``hardware`` (``models.specs.as_specs``) added to its registry: a GPU the model was not trained with,
    logged with the calibrated version."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from models.api import load_pyfunc

    name, alias, version = parse_model_uri(uri)
    client = MlflowClient()
    try:
        mv = client.get_model_version_by_alias(name, alias) if alias else client.get_model_version(name, version)
        inner = load_pyfunc(f"models:/{name}/{mv.version}").unwrap_python_model()
    except (MlflowException, OSError) as exc:
        raise CalibrationError(f"cannot load model {uri!r}: {str(exc).strip().splitlines()[0]}") from None
    if hardware and hasattr(inner, "with_hardware"):
        try:
            inner.with_hardware(hardware)
        except ValueError as exc:
            raise CalibrationError(str(exc)) from None
    if not can_calibrate(inner):
        kind = getattr(getattr(inner, "model", None), "name", type(inner).__name__)
        raise CalibrationError(
            f"model {uri!r} ({kind}) cannot be calibrated: only a model with calibrate() "
            "(the physics model, conf/model/physics.yaml) learns a new GPU from a few rows"
        )
    return name, mv, inner


def calibrate_registered(
    uri: str,
    rows: pd.DataFrame,
    *,
    sha256: str | None = None,
    source: str = "",
    promote: bool = False,
    method: str = "auto",
    hardware_dir=None,
    experiment: str = "costmodel-calibrate",
    served=None,
    note=print,
) -> Calibration:
    """Calibrate the registered model ``uri`` on measured ``rows`` of one GPU; log and register a new version of
    the same registered model (the alias moves only with ``promote``). ``method``: the model's calibrate method
    (``auto``: whichever of none, a correction and a refit does best out of fold). ``served``:
    :func:`load_served`'s result, if already loaded. Returns what was registered."""
    import mlflow
    from mlflow.tracking import MlflowClient

    from models.calibration import calibrate_served
    from pipelines import tracking

    name, parent, inner = served or load_served(uri)
    cal = calibrate_served(inner, rows, method, hardware_dir)
    model, workloads, hw, corr, report = cal.model, cal.workloads, cal.hardware, cal.correction, cal.families
    digest = sha256 or rows_sha256(rows)
    meta = dict(inner.meta)
    meta["calibrated"] = [
        *meta.get("calibrated", []),
        {"hardware": hw, "rows": len(rows), "sha256": digest, "parent_version": str(parent.version)},
    ]
    tracking.use_experiment(experiment)
    facts = {
        "calibrated_hardware": hw,
        "calibration_rows": str(len(rows)),
        "calibration_sha256": digest,
        "parent_version": str(parent.version),
        "parent_model_uri": f"models:/{name}/{parent.version}",
        "calibration_source": source or "rows",
    }

    def files(directory: Path):
        path = directory / "calibration_rows.csv"
        rows.to_csv(path, index=False)
        return {}, [path]

    example = workloads.head(3).astype({p: float for p in SHAPE_PARAMS if p in workloads.columns})
    metrics = {
        f"calibrate/{hw}/n": float(len(rows)),
        f"calibrate/{hw}/mape_before": corr["mape_before"],
        f"calibrate/{hw}/mape_out_of_fold": corr["mape_out_of_fold"],
        f"calibrate/{hw}/log_halfwidth": float(corr["q"]),
        **{f"calibrate/{hw}/family:{f}/mape_before": b for f, (b, _) in report.items()},
        **{f"calibrate/{hw}/family:{f}/mape_out_of_fold": a for f, (_, a) in report.items()},
    }
    if "mape_refit_out_of_fold" in corr:  # a refit was tried (the kept way may be another)
        metrics[f"calibrate/{hw}/mape_refit_out_of_fold"] = corr["mape_refit_out_of_fold"]
    logged = tracking.log_run(
        f"calibrate-{hw}",
        metrics=metrics,
        params={
            "parent_model_uri": facts["parent_model_uri"],
            "calibration_method": corr.get("method", "correction"),
            "correction_rounds": str(corr["rounds"]),
            "floor_scale": f"{corr['floor_scale']:.6g}",
            "kernel_log_bias": f"{corr['bias']:.6g}",
        },
        tags={"model": inner.meta.get("model", ""), "target": inner.meta["target"]["name"], **facts},
        files=files,
        served=tracking.Served(model=model, registry=inner.registry, meta=meta, input_example=example),
    )
    client = MlflowClient()
    decision = f"calibrated on {len(rows)} rows of {hw} (parent v{parent.version}): " + (
        "alias moved (--promote)" if promote else "alias not moved (use --promote)"
    )
    version = mlflow.register_model(
        logged.model_uri, name, tags={**facts, "model": inner.meta.get("model", ""), "champion_decision": decision}
    ).version
    alias = parse_model_uri(uri)[1] or "champion"
    if promote:
        client.set_registered_model_alias(name, alias, version)
    note(
        f"registered {name} version {version}: {decision}; on these rows MAPE {corr['mape_before']:.1f}% before, "
        f"{corr['mape_out_of_fold']:.1f}% after (out of fold, {corr.get('method', 'correction')})"
    )
    return Calibration(
        name,
        str(version),
        str(parent.version),
        hw,
        len(rows),
        digest,
        logged.run_id,
        promote,
        corr["mape_before"],
        corr["mape_out_of_fold"],
    )


def measure_sweep(
    workloads: pd.DataFrame, hardware: str, registry, backend_options: dict | None = None, progress: bool = True
) -> pd.DataFrame:
    """Measure ``workloads`` on this machine's GPU with the cuda backend (``conf/collect/backend/cuda.yaml`` +
    ``backend_options``); the GPU found must be ``hardware``. Returns the ok rows as measurements
    (``models.calibration.as_measurements``: predict's columns with the ``harness`` each row was timed with, +
    ``runtime_ms``); error rows (e.g. out of memory) are dropped."""
    from data.collect import detected_backend, measure_frame
    from models.calibration import as_measurements

    try:
        backend = detected_backend("cuda", registry, backend_options)
    except ValueError as exc:  # no CUDA device, a GPU the registry lacks
        raise CalibrationError(f"--measure: {exc}") from None
    found = backend.hardware.id
    if found != registry.resolve(hardware):
        raise CalibrationError(f"--measure --hardware {hardware}: the GPU on this machine is {found}")
    return as_measurements(measure_frame(backend, workloads, desc=f"calibrate {found}", progress=progress))
