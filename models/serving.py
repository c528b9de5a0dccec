"""What a served cost model does with a request, without MLflow: the one prediction path of every entry.

:class:`Predictor` holds what a logged model's artifacts hold (the fitted :class:`~models.base.CostModel`, the hardware
registry it was trained with, its meta: ``models.pyfunc`` describes each) and turns an input frame into the output
frame. ``models.pyfunc.CostModelPyfunc`` (MLflow's pyfunc, the REST servers, ``mlflow.pyfunc.load_model``) and the
lean loader of the CLI (``models.loader``) both call it, so they give the same numbers; this module imports neither
MLflow nor anything that imports it.

Beyond the model's own prediction, two things every served row gets here:

* **specs given with the request** (``models.specs``): a ``hardware_spec`` column adds a GPU the model was not
  trained with for that request; :meth:`Predictor.with_hardware` adds specs for every request;
* **the speed-of-light floor** (``models.sol``): a kernel's runtime, point and interval, is never under the time its
  FLOPs take at the spec's peak or its bytes at the spec's bandwidth. The output frame's ``attrs["below_sol"]``
  counts the rows whose point prediction was raised to it.

A runtime kernel model also answers LLM requests (rows with ``llm_config``: ``models.llm.llm_rows``, its own
kernel predictions composed into an engine's steps and the serving law of ``models.llm``).

Bad input raises ``features.tabular.FeatureError`` with one line naming the row.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from data.hardware import HardwareRegistry
from data.ops import SHAPE_PARAMS
from features.inputs import mlir_text
from features.tabular import FeatureError
from models.conformal import bounded_interval, halfwidths

INPUT_ERROR_PREFIX = "invalid workload: "
MESSAGE_CHARS = 600  # an error line's length limit (a message may list the known ops or hardware ids)
COMBINE = ("sum", "max", "time_weighted")
# a model with a domain of validity (``predict_domain``, meta ``domain``) adds these outputs (models/domain.py)
DOMAIN_COLUMNS = {"in_domain": "boolean", "domain_distance": "double", "domain_reason": "string"}
FLOORED_COLUMN = "runtime_ms"  # the target column the speed-of-light floor applies to (models.sol)


def output_columns(target: dict) -> list[str]:
    """``<c>, <c>_lo, <c>_hi`` per column, then ``network_<c>`` per column when the target has network totals."""
    cols = [c for col in target["columns"] for c in (col, f"{col}_lo", f"{col}_hi")]
    return cols + ([f"network_{c}" for c in target["columns"]] if target.get("network_totals") else [])


def to_workloads(model_input) -> tuple[pd.DataFrame, np.ndarray]:
    """Turn a model input into a workload-description frame and, per workload, the input row it came from.

    A row with ``op`` (+ shapes) is one workload. A row with ``mlir`` text is lowered to the kernels
    recognised in the module (``features.mlir.workloads_from_mlir``: linalg matmul, batch_matmul,
    conv_2d_nchw_fchw, elementwise generics), each on the row's hardware.
    """
    df = pd.DataFrame(model_input).reset_index(drop=True)
    if "mlir" not in df.columns:
        if "op" not in df.columns:
            raise FeatureError("workloads lack column(s) op (give op + shape columns, or mlir text)")
        return df, np.arange(len(df))
    from features.mlir import workloads_from_mlir

    frames = []
    for i, row in df.iterrows():
        text = row["mlir"]
        if isinstance(text, (bytes, bytearray)) or isinstance(text, str) and text.strip():
            kernels = workloads_from_mlir(mlir_text(text, where=f"row {i}"), where=f"row {i}")
            if kernels.empty:
                raise FeatureError(
                    f"row {i}: no kernel recognised in the MLIR (matmul, batch_matmul, "
                    "conv_2d_nchw_fchw, elementwise generic)"
                )
            kernels = kernels.drop(columns=["mlir_op", "node"]).assign(hardware=row["hardware"])
            frames.append(kernels.astype({c: float for c in SHAPE_PARAMS}).assign(_row=i))
        elif isinstance(row.get("op"), str):
            frames.append(row.drop(labels=["mlir"]).to_frame().T.assign(_row=i))
        else:
            raise FeatureError(f"row {i}: give op + shape columns or mlir text")
    out = pd.concat(frames, ignore_index=True)
    return out.drop(columns="_row"), out["_row"].to_numpy(int)


def combine(out: pd.DataFrame, groups, rules: dict[str, str]) -> pd.DataFrame:
    """One row per group of ``out`` (points and interval ends) by each column's rule: ``sum``, ``max`` or
    ``time_weighted`` (the mean weighted by the rows' ``runtime_ms``; power = total energy / total runtime)."""
    groups = np.asarray(groups)
    parts = {}
    for col, rule in rules.items():
        cols = [col, f"{col}_lo", f"{col}_hi"]
        if rule == "time_weighted":
            weight = out["runtime_ms"].to_numpy(float)
            summed = out[cols].mul(weight, axis=0).groupby(groups, sort=True).sum()
            parts[col] = summed.div(pd.Series(weight).groupby(groups, sort=True).sum().to_numpy(), axis=0)
        elif rule in ("sum", "max"):
            parts[col] = out[cols].groupby(groups, sort=True).agg(rule)
        else:
            raise ValueError(f"unknown combine rule {rule!r} for {col} (known: {', '.join(COMBINE)})")
    return pd.concat(parts.values(), axis=1).reset_index(drop=True)


def domain_of_rows(domain: pd.DataFrame, rows) -> pd.DataFrame:
    """``in_domain``, ``domain_distance``, ``domain_reason`` per input row from its kernels' (``rows``: the input row
    of each kernel): inside only if every kernel is, the farthest kernel's distance and reason."""
    frame = domain[list(DOMAIN_COLUMNS)].assign(_row=np.asarray(rows)).reset_index(drop=True)
    far = frame.sort_values("domain_distance", ascending=False, kind="stable").groupby("_row", sort=True).head(1)
    out = far.sort_values("_row").set_index("_row")
    out["in_domain"] = frame.groupby("_row", sort=True)["in_domain"].all()
    return out.reset_index(drop=True).astype({"in_domain": bool, "domain_distance": float, "domain_reason": str})


def upgrade_meta(meta: dict) -> dict:
    """The meta of a model logged before the one serving class, in the current layout (the same numbers), so a
    process that imported this code (the CLI, the champion rule re-scoring an old champion) still serves it. A fresh
    process loads such a model with the code bundled in it."""
    if "unit" in meta:
        return meta
    if "targets" in meta:  # the power surrogate: runtime and power predicted, energy derived
        cols = ["runtime_ms", "power_w", "energy_j"]
        return {
            "model": meta.get("model"),
            "unit": "kernel",
            "level": meta["level"],
            "intervals": meta["intervals"],
            "encoder": {"_target_": "features.tabular.PowerFeaturizer"},
            "target": {
                "name": "power",
                "columns": cols,
                "network_totals": True,
                "combine": {"runtime_ms": "sum", "power_w": "time_weighted", "energy_j": "sum"},
            },
        }
    target, encoding = meta["target"], meta.get("encoder")
    encoder = {
        "graph": {"_target_": "features.encoders.GraphEncoder", **(meta.get("graph") or {})},
        "tokens": {"_target_": "features.encoders.TokenEncoder"},
    }.get(encoding, {"_target_": "features.tabular.TabularFeaturizer"})
    return {
        "model": meta.get("model"),
        "unit": "network" if encoding else "kernel",
        "encoder": encoder,
        "level": meta["interval"]["level"],
        "intervals": {target: meta["interval"]},
        "target": {
            "name": target,
            "columns": [target],
            "combine": {target: "max" if target == "peak_mem_bytes" else "sum"},
        },
        **({"trained_hardware": meta["trained_hardware"]} if meta.get("trained_hardware") else {}),
    }


def load_fitted(path: Path):
    """The fitted :class:`~models.base.CostModel` saved in ``path`` (a power surrogate saved before it was a
    ``CostModel`` too)."""
    from models.base import load_model

    if (path / "model.json").exists():
        return load_model(path)
    from models.power import PowerSurrogate

    return PowerSurrogate.load_legacy(path)


class Predictor:
    """A served cost model: ``registry`` (hardware specs), ``meta``, ``encoder`` (built from the meta) and ``model``
    (the fitted CostModel). :meth:`predict` is the prediction of every entry point."""

    def __init__(self, registry: HardwareRegistry, meta: dict, model):
        from features.encoders import build_encoder

        self.registry = registry
        self.meta = upgrade_meta(meta)
        self.encoder = build_encoder(self.meta["encoder"], registry)
        self.model = model

    @classmethod
    def from_artifacts(cls, hardware: str | Path, meta: str | Path, model: str | Path) -> Predictor:
        """From the three artifacts ``models.pyfunc.write_artifacts`` writes: the registry's JSON, the meta's JSON
        and the fitted model's folder."""
        return cls(
            HardwareRegistry.from_json(Path(hardware).read_text()),
            json.loads(Path(meta).read_text()),
            load_fitted(Path(model)),
        )

    def with_hardware(self, specs) -> Predictor:
        """The same model with ``specs`` (``models.specs.as_specs``: specs, mappings, spec files or folders) added to
        its registry, in place; returns self."""
        from features.encoders import build_encoder
        from models.specs import as_specs, overlay

        added = as_specs(specs)
        if added:
            self.registry = overlay(self.registry, added)
            self.encoder = build_encoder(self.meta["encoder"], self.registry)
        return self

    def _request_specs(self, df: pd.DataFrame):
        """``(frame, registry, encoder)`` of one request: a ``hardware_spec`` column's specs over the model's."""
        from models.specs import SPEC_COLUMN, column_specs, overlay

        if SPEC_COLUMN not in df.columns:
            return df, self.registry, self.encoder
        try:
            df, specs = column_specs(df)
        except ValueError as exc:
            raise FeatureError(str(exc)) from None
        if not specs:
            return df, self.registry, self.encoder
        from features.encoders import build_encoder

        registry = overlay(self.registry, specs)
        return df, registry, build_encoder(self.meta["encoder"], registry)

    def _predict_llm(self, df: pd.DataFrame) -> pd.DataFrame:
        """LLM requests (a row per request with ``llm_config``): ``models.llm.llm_rows`` over this model's own
        kernel predictions; a bad request is one ``FeatureError`` line."""
        from models.llm import llm_rows

        try:
            harness = "cuda_graph" if self.meta.get("domain") else None  # a physics model: device times
            return llm_rows(df, self.predict, self.registry, harness)
        except ValueError as exc:  # LLMError: a bad config, layout or request
            raise FeatureError(str(exc)) from None

    def predict(self, model_input) -> pd.DataFrame:
        """Per input row and target column the prediction and its interval (+ the domain columns of a model with a
        domain of validity, + ``network_<column>`` totals of a target with them). ``FeatureError`` on bad input."""
        target, meta = self.meta["target"], self.meta
        df = pd.DataFrame(model_input).reset_index(drop=True)
        if "llm_config" in df.columns and meta["unit"] == "kernel" and "runtime_ms" in target["columns"]:
            return self._predict_llm(df)
        network = df.pop("network") if "network" in df.columns else None
        df, registry, encoder = self._request_specs(df)
        workloads = None
        if meta["unit"] == "network":
            from features.encoders import network_rows

            records, hardware = network_rows(df, registry, meta.get("trained_hardware"))
            X, rows = encoder.transform(pd.DataFrame(records)), np.arange(len(records))
        else:
            workloads, rows = to_workloads(df)
            X = encoder.transform(workloads)
            hardware = _hardware_ids(registry, workloads["hardware"])  # transform resolved each already
        domain = self.model.predict_domain(X) if meta.get("domain") else None  # interval widened outside
        pred = np.asarray(self.model.predict(X) if domain is None else domain["runtime_ms"], dtype=np.float64).reshape(
            len(rows), -1
        )  # the signature's double
        out = pd.DataFrame(index=range(len(rows)))
        codes, ids = pd.factorize(np.asarray(hardware, dtype=object))
        below = 0
        for j, col in enumerate(target["columns"]):
            spec = meta["intervals"][col]
            point = pred[:, j]
            if domain is not None:
                lo, hi = domain["lo_ms"].to_numpy(float), domain["hi_ms"].to_numpy(float)
            else:
                q = halfwidths(ids, spec["log_halfwidth"], spec.get("by_hardware", {}))[codes]  # per distinct hardware
                lo, hi = bounded_interval(point, q, spec.get("transform", "log"), spec.get("lower"), spec.get("upper"))
            if col == FLOORED_COLUMN and workloads is not None:
                from models.sol import apply_floor, speed_of_light_ms

                point, lo, hi, raised = apply_floor(point, lo, hi, speed_of_light_ms(workloads, registry))
                below = int(raised.sum())
            out[col], out[f"{col}_lo"], out[f"{col}_hi"] = point, lo, hi
        if len(set(rows)) < len(rows):  # MLIR rows: their kernels combine into one row each
            out = combine(out, rows, {c: target["combine"][c] for c in target["columns"]})
        if domain is not None:  # a module is inside only if every kernel is; its distance is its farthest kernel's
            out = out.join(domain_of_rows(domain, rows))
        if target.get("network_totals"):
            totals = {c: np.full(len(out), np.nan) for c in target["columns"]}
            if network is not None:
                named = network.notna().to_numpy()
                if named.any():
                    by = combine(out[named], network[named].to_numpy(), {c: target["combine"][c] for c in totals})
                    keys = np.unique(network[named].to_numpy())  # combine's groups, sorted
                    where = np.searchsorted(keys, network[named].to_numpy())
                    for c in totals:
                        totals[c][named] = by[c].to_numpy()[where]
            for c, v in totals.items():
                out[f"network_{c}"] = v
        out = out[output_columns(target) + (list(DOMAIN_COLUMNS) if domain is not None else [])]
        out.attrs["below_sol"] = below
        return out


def _hardware_ids(registry: HardwareRegistry, names: pd.Series) -> np.ndarray:
    """The registry id of each row's hardware name, resolved once per distinct name."""
    codes, uniques = pd.factorize(names.astype(str))
    return np.array([registry.resolve(u) for u in uniques], dtype=object)[codes]
