"""MLIR out: every workload of ``data.workloads`` exported with torch-mlir's FX importer.

``export_workload(op, params, dtype)`` builds the workload on ``meta`` tensors (nothing allocated, so
a 4096x4096 layer costs the same as an 8x8 one), wraps ``fn`` + weights in an ``nn.Module`` whose
forward takes the weights as *arguments* (so parameters become function arguments instead of
``dense_resource`` blobs of random values: the text depends only on op, shape and dtype, and its
sha256 identifies the workload), traces it with ``make_fx`` and torch-mlir's decomposition table, and
imports the graph with ``torch_mlir.fx.stateless_fx_import`` lowered to ``linalg-on-tensors``.

Why ``make_fx`` + ``stateless_fx_import`` and not ``fx.export_and_import`` (torch.export): both feed
the same FX importer and lowering pipeline and print byte-identical MLIR for every op here (checked
in tests/test_mlir.py), but torch.export + its decomposition pass cost 0.3-0.8 s per workload on the
2-core VM against ~20-40 ms for make_fx, which is what makes MLIR for all ~1 100 distinct workloads
of the main job affordable. ``method="export"`` selects the torch.export path; it is also the
fallback when make_fx fails on a workload.

Texts are stored once per distinct workload in a content-addressed folder (:class:`MlirStore`,
``<output_dir>/mlir/<sha256>.mlir``) with an index ``workload key -> sha256`` so a re-run exports
nothing it already has; :func:`attach_mlir` fills a measurement frame's ``mlir_sha256`` column.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import warnings
from importlib import metadata
from pathlib import Path

import pandas as pd
import torch

from data.workloads import OPS, build, validate
from data.workloads import SHAPE_PARAMS as _SHAPE
from features.mlir.graph import text_sha256

OUTPUT_TYPE = "linalg-on-tensors"


def exporter_id(method: str = "make_fx") -> str:
    return f"torch-mlir=={metadata.version('torch-mlir')} torch=={torch.__version__} {method} {OUTPUT_TYPE}"


class _Lifted(torch.nn.Module):
    """``fn`` + weights as one module whose forward takes ``(*inputs, *state)``: state as arguments."""

    def __init__(self, fn, n_inputs: int):
        super().__init__()
        object.__setattr__(self, "_fn", fn)  # not a registered submodule: its tensors are not constants
        self.n_inputs = n_inputs
        self.names: list[str] = []
        if isinstance(fn, torch.nn.Module):
            self.names = [n for n, _ in fn.named_parameters()] + [n for n, _ in fn.named_buffers()]

    def state(self) -> tuple:
        if not isinstance(self._fn, torch.nn.Module):
            return ()
        return tuple(p for _, p in self._fn.named_parameters()) + tuple(b for _, b in self._fn.named_buffers())

    def forward(self, *args):
        xs, state = args[: self.n_inputs], args[self.n_inputs :]
        if self.names:
            return torch.func.functional_call(self._fn, dict(zip(self.names, state)), xs)
        return self._fn(*xs)


def export_workload(op: str, params: dict, dtype: str = "float32", method: str = "make_fx") -> str:
    """MLIR text (linalg-on-tensors) of one workload, from torch-mlir's FX importer."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch_mlir import fx
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    p = validate(op, params, dtype)
    fn, inputs, _weights = build(op, p, dtype, device="meta")
    module = _Lifted(fn, len(inputs))
    args = (*inputs, *module.state())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method == "make_fx":
            try:
                gm = make_fx(module, decomposition_table=get_decomposition_table(), tracing_mode="fake")(*args)
                return str(fx.stateless_fx_import(gm, output_type=OUTPUT_TYPE, model_name="main"))
            except Exception:  # noqa: BLE001 - fall back to the torch.export path below
                pass
        return str(fx.export_and_import(module, *args, output_type=OUTPUT_TYPE, func_name="main"))


class MlirStore:
    """Content-addressed MLIR texts: ``<root>/<sha256>.mlir`` plus ``index.json`` (workload key -> sha256)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self._index_path = self.root / "index.json"
        self.index: dict[str, str] = json.loads(self._index_path.read_text()) if self._index_path.exists() else {}

    def path(self, sha: str) -> Path:
        return self.root / f"{sha}.mlir"

    def put(self, text: str) -> str:
        sha = text_sha256(text)
        path = self.path(sha)
        if not path.exists():
            _atomic_write(path, text)
        return sha

    def get(self, sha: str) -> str:
        path = self.path(sha)
        if not path.exists():
            raise KeyError(f"no MLIR with sha256 {sha} in {self.root}")
        return path.read_text()

    def save_index(self) -> None:
        _atomic_write(self._index_path, json.dumps(self.index, sort_keys=True, indent=0))


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def workload_key(op: str, params: dict, dtype: str, method: str = "make_fx") -> str:
    """Index key of validated ``params``: required shape parameters, then optional ones set away from their default
    (``validate`` drops defaults, so a row without them keeps the key it always had)."""
    shape = ",".join(f"{k}={int(params[k])}" for k in OPS[op].names if k in params)
    return f"{op}|{shape}|{dtype}|{exporter_id(method)}"


def attach_mlir(
    rows: pd.DataFrame, store: MlirStore | str | Path, method: str = "make_fx", progress: bool = False
) -> tuple[pd.DataFrame, dict]:
    """Export MLIR once per distinct (op, shape, dtype) of ``rows`` and fill ``mlir_sha256``.

    A workload the exporter cannot handle keeps a null ``mlir_sha256`` (counted in the stats, never
    fatal). Returns ``(rows, stats)`` with stats = distinct workloads, exported, reused, failed, seconds.
    """
    from tqdm.auto import tqdm

    store = store if isinstance(store, MlirStore) else MlirStore(store)
    t0 = time.perf_counter()
    keys = []
    for op, dtype, params in zip(
        rows["op"], rows["dtype"], rows[[c for c in rows.columns if c in _SHAPE]].to_dict("records")
    ):
        try:
            p = validate(str(op), params, str(dtype))
            keys.append((workload_key(str(op), p, str(dtype), method), str(op), p, str(dtype)))
        except ValueError:
            keys.append(None)
    distinct = {k[0]: k for k in keys if k is not None}
    stats = {"distinct": len(distinct), "exported": 0, "reused": 0, "failed": 0, "export_s": []}
    for key, (_, op, p, dtype) in tqdm(distinct.items(), desc="export MLIR", disable=not progress, unit="wl"):
        if key in store.index and store.path(store.index[key]).exists():
            stats["reused"] += 1
            continue
        t = time.perf_counter()
        try:
            store.index[key] = store.put(export_workload(op, p, dtype, method))
            stats["exported"] += 1
            stats["export_s"].append(time.perf_counter() - t)
        except Exception:  # noqa: BLE001 - an op the exporter cannot lower keeps a null hash
            stats["failed"] += 1
    store.save_index()
    out = rows.copy()
    out["mlir_sha256"] = [store.index.get(k[0]) if k is not None else None for k in keys]
    stats["seconds"] = time.perf_counter() - t0
    return out, stats
