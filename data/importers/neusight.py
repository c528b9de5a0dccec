"""NeuSight (ASPLOS'25) kernel latencies: ``neusight/train/{bmm,linear,conv}/<GPU>.csv``, ``elem.csv``,
``ln.csv``, ``softmax.csv`` (sitar-lab/NeuSight @6945927; PyTorch 2.1, CUDA 12.1, fp32, CUDA-event latency in ms).

Shape conventions of NeuSight -> ours (:mod:`data.workloads`):

* ``bmm``: NeuSight (B,M,N)@(B,N,K) -> ours A[batch,m,k] @ B[batch,k,n]: batch=B, m=M, k=N, n=K
* ``linear``: NeuSight input (B,M,N), Linear(N, K) -> ours input [m,k] -> [m,n]: m=B*M, k=N, n=K
  (B and M kept in meta as source_B, source_M)
* ``conv``: B, Input_Channel, Output_Channel, Kernel_Szie [sic], Input_Size (square), Stride, Padding
  -> conv2d batch, c_in, c_out, kernel, h=w=Input_Size, stride, padding
* ``elem.csv`` [B,H] -> m=B, n=H; ops add, mul, div, pow (tensor-tensor), addu, mulu, divu, powu (tensor-scalar:
  their kernels are ``CUDAFunctorOnSelf_*`` / ``pow_tensor_scalar``) -> add_scalar, ..., relu, gelu, tanh
* ``ln.csv`` -> layernorm(m=B, n=H); ``softmax.csv`` -> softmax(m=B, n=H)

Columns observed by running on the GPU (``Kernel Name, Warps per SM, Blocks per SM, Grid x/y/z,
Block x/y/z, Kernels``) and the ``large`` flag go to ``meta`` only; software versions go to ``env``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd

from data.hardware import HardwareRegistry
from data.importers import DatasetError, data_root, finish, require_columns

SOURCE = "neusight@6945927"
OBSERVED = (
    "Kernel Name",
    "Warps per SM",
    "Blocks per SM",
    "Grid x",
    "Grid y",
    "Grid z",
    "Block x",
    "Block y",
    "Block z",
    "Kernels",
)
ELEM_OPS = {
    "add": "add",
    "mul": "mul",
    "div": "div",
    "pow": "pow",
    "addu": "add_scalar",
    "mulu": "mul_scalar",
    "divu": "div_scalar",
    "powu": "pow_scalar",
    "relu": "relu",
    "gelu": "gelu",
    "tanh": "tanh",
}
KINDS = ("bmm", "linear", "conv", "elem", "ln", "softmax")


def _map_shapes(kind: str, df: pd.DataFrame) -> pd.DataFrame:
    """Our op + shape columns for one NeuSight table."""
    i = lambda c: df[c].astype("int64")  # noqa: E731
    if kind == "bmm":
        return pd.DataFrame({"op": "bmm", "batch": i("B"), "m": i("M"), "k": i("N"), "n": i("K")})
    if kind == "linear":
        return pd.DataFrame({"op": "linear", "m": i("B") * i("M"), "k": i("N"), "n": i("K")})
    if kind == "conv":
        return pd.DataFrame(
            {
                "op": "conv2d",
                "batch": i("B"),
                "c_in": i("Input_Channel"),
                "c_out": i("Output_Channel"),
                "h": i("Input_Size"),
                "w": i("Input_Size"),
                "kernel": i("Kernel_Szie"),
                "stride": i("Stride"),
                "padding": i("Padding"),
            }
        )
    if kind == "elem":
        unknown = sorted(set(df["OPName"]) - set(ELEM_OPS))
        if unknown:
            raise DatasetError(f"neusight elem.csv: unknown op(s) {', '.join(unknown)}")
        return pd.DataFrame({"op": df["OPName"].map(ELEM_OPS), "m": i("B"), "n": i("H")})
    return pd.DataFrame({"op": "layernorm" if kind == "ln" else "softmax", "m": i("B"), "n": i("H")})


_SHAPE_COLS = {
    "bmm": ["B", "M", "N", "K"],
    "linear": ["B", "M", "N", "K"],
    "conv": ["B", "Input_Channel", "Output_Channel", "Kernel_Szie", "Input_Size", "Stride", "Padding"],
    "elem": ["B", "H"],
    "ln": ["B", "H"],
    "softmax": ["B", "H"],
}


def files(root: Path, kinds=KINDS) -> list[tuple[str, Path]]:
    """The tables of ``kinds`` under ``<root>/neusight/train``. A folder in NeuSight's layout may hold some of them
    only (a GPU measured for GEMMs alone): a missing table is skipped with a warning; none at all is an error."""
    base = root / "neusight" / "train"
    out, missing = [], []
    for kind in kinds:
        if kind in ("bmm", "linear", "conv"):
            found = sorted((base / kind).glob("*.csv"))
        else:
            found = [base / f"{kind}.csv"] if (base / f"{kind}.csv").is_file() else []
        out += [(kind, f) for f in found]
        if not found:
            missing.append(kind)
    if not out:
        raise DatasetError(f"no NeuSight tables ({', '.join(kinds)}) in {base}")
    if missing:
        warnings.warn(f"NeuSight: no {', '.join(missing)} table(s) in {base}; imported the others", stacklevel=2)
    return out


def import_neusight(
    root: str | Path | None = None,
    registry: HardwareRegistry | None = None,
    kinds=KINDS,
    max_rows_per_file: int | None = None,
) -> pd.DataFrame:
    """All NeuSight training tables as schema rows (``max_rows_per_file``: the first N rows of each file, for tests)."""
    root = data_root(root)
    registry = registry or HardwareRegistry.from_dir()
    frames, metas = [], []
    for kind, path in files(root, kinds):
        src = pd.read_csv(path, nrows=max_rows_per_file)
        require_columns(
            src,
            ["OPName", "Latency", "Device", "Torch Version", "CUDA Version", "CUDNN Version", *_SHAPE_COLS[kind]],
            path,
        )
        mapped = _map_shapes(kind, src)
        mapped["dtype"] = "float32"
        mapped["hardware"] = [registry.resolve(d) for d in src["Device"]]
        mapped["runtime_ms"] = src["Latency"].astype(float)
        mapped["timing_method"] = "cuda_events"
        mapped["env_torch"] = src["Torch Version"].astype(str).str.lstrip("p")
        mapped["env_cuda"] = src["CUDA Version"].astype(str)
        mapped["env_cudnn"] = src["CUDNN Version"].astype(str)
        observed = [c for c in (*OBSERVED, "large") if c in src.columns]
        rel = str(path.relative_to(root))
        records = src[observed].to_dict("records")
        ops, devices = src["OPName"].astype(str).tolist(), src["Device"].astype(str).tolist()  # columns, not cells
        extra = zip(src["B"].astype(int).tolist(), src["M"].astype(int).tolist()) if kind == "linear" else None
        for j, rec in enumerate(records):
            rec.update(file=rel, row=j, timestamp_known=False, source_op=ops[j], device_name=devices[j])
            if extra is not None:
                b, m = next(extra)
                rec.update(source_B=b, source_M=m)
        metas += records
        frames.append(mapped)
    df = pd.concat(frames, ignore_index=True)
    # the software of each row: one GPU's tables may come from another PyTorch / CUDA than the rest (a GPU measured
    # later, a folder of the user's own), so each row keeps its own versions rather than the import failing
    cols = ["env_torch", "env_cuda", "env_cudnn"]
    env = [
        {"torch": t, "cuda": c, "cudnn": n, "dataset": "neusight/train"}
        for t, c, n in df[cols].itertuples(index=False, name=None)
    ]
    return finish(df.drop(columns=cols), source=SOURCE, env=env, meta=metas)
