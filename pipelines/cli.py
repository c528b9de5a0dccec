"""``costmodel``: the command line other tools call.

    costmodel predict --model models:/costmodel-runtime@champion --input workloads.csv [--output preds.csv]
    costmodel predict --model models:/costmodel-network-runtime@champion --input net.mlir --hardware <id>
    costmodel predict --model models:/costmodel-runtime@champion --input mlp.mlir --dim %arg0:0=1024 --hardware <id>
    costmodel predict --model models:/costmodel-runtime@champion --torch pkg.module:factory \
        --example-input 1x3x224x224 [--example-input int64:1x128 ...] [--dtype float16] --hardware <id>
    costmodel models [--name costmodel-runtime]
    costmodel calibrate --model models:/costmodel-runtime@champion --measurements new_gpu.csv [--promote]
    costmodel calibrate --model models:/costmodel-runtime@champion --measure --hardware <id> [--budget 60]

Input: CSV, JSON lines or a JSON array of records, one workload per row (``op``, ``hardware``,
``dtype``, shape columns). Output: the input columns plus, per predicted target, the prediction and its
interval (``runtime_ms``, ``runtime_ms_lo``, ``runtime_ms_hi``), as CSV, JSON lines or a JSON array
(``--format``, or the suffix of ``--output``: ``.csv``, ``.jsonl``, ``.json``). Any bad input ends with
one ``costmodel: error: ...`` line on stderr and exit status 2. A model with a domain of validity adds
``in_domain``, ``domain_distance``, ``domain_reason``; rows outside it get one ``costmodel: warning:`` line
with their count on stderr (their intervals are widened, never capped).
A ``.mlir`` input (with ``--hardware``) is one network for a whole-network model (``mlir`` in its signature,
no ``op``: output ``input, hardware`` + the prediction), else the kernels recognised in it plus their total;
``--dim`` binds its dynamic dimensions (``%arg0:0=1024`` one dim, ``%arg0=1024x512`` a whole argument).
``--torch pkg.module:factory`` costs a PyTorch model: ``factory()`` is called under ``torch.device("meta")`` (no
weights), captured on ``--example-input`` shapes (``features/torch_capture.py``), one row per kernel plus the
total. Ops with no workload mapping are named on stderr in one ``costmodel: warning:`` line (``--strict``: an error).
``costmodel models`` prints registered names, versions, aliases and their held-out metrics.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from pathlib import Path

DEFAULT_STORE = Path("outputs") / "mlflow.db"


class CliError(Exception):
    pass


def _read_table(path: Path):
    import pandas as pd

    if not path.exists():
        raise CliError(f"input file not found: {path}")
    try:
        if path.suffix in (".jsonl", ".ndjson"):
            df = pd.read_json(path, lines=True, dtype=False)
        elif path.suffix == ".json":
            df = pd.read_json(path, orient="records", dtype=False)
        elif path.suffix == ".csv":
            df = pd.read_csv(path)
        else:
            raise CliError(f"unsupported input {path.name!r}: use .csv, .jsonl or .json")
    except (ValueError, pd.errors.ParserError) as exc:
        raise CliError(f"cannot parse {path}: {str(exc).splitlines()[0]}") from None
    if df.empty:
        raise CliError(f"{path} holds no workloads")
    return df


def _tracking_uri(arg: str | None) -> str | None:
    if arg:
        return arg
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    if DEFAULT_STORE.exists():  # the main job's embedded store, when run from the project folder
        return f"sqlite:///{DEFAULT_STORE.resolve()}"
    return None


def _schema_reason(message: str) -> str:
    """MLflow's schema errors quote the whole input frame first; keep the reason after ``Error:``."""
    reason = message.rsplit("Error: ", 1)[-1] if "Error: " in message else message
    return " ".join(reason.split())[:300]


FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json"}


def _write_table(df, fmt: str, dest) -> None:
    if fmt == "jsonl":
        dest.write(df.to_json(orient="records", lines=True, double_precision=15))
    elif fmt == "json":
        dest.write(df.to_json(orient="records", double_precision=15))
        dest.write("\n")
    else:
        df.to_csv(dest, index=False)


def _set_uri(arg: str | None) -> None:
    import mlflow

    uri = _tracking_uri(arg)
    if uri:
        mlflow.set_tracking_uri(uri)
        mlflow.set_registry_uri(uri)


def predict(args) -> int:
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import mlflow
    import pandas as pd
    from mlflow.exceptions import MlflowException

    from features.tabular import FeatureError
    from models.pyfunc import INPUT_ERROR_PREFIX

    out_path = Path(args.output) if args.output else None
    fmt = args.format or (FORMATS.get(out_path.suffix) if out_path else "csv")
    if fmt is None:
        raise CliError(f"unsupported output {out_path.name!r}: use .csv, .jsonl or .json (or --format)")
    _check_sources(args)
    if args.torch:
        return _write(_predict_torch(args), out_path, fmt)
    mlir_input = Path(args.input).suffix == ".mlir"
    if mlir_input:
        text = _mlir_text(Path(args.input))
        if not args.hardware:
            raise CliError(f"{Path(args.input).name}: a .mlir input needs --hardware")
    else:
        workloads = _read_table(Path(args.input))
    _set_uri(args.tracking_uri)
    try:
        model = mlflow.pyfunc.load_model(args.model)
    except (MlflowException, OSError) as exc:
        raise CliError(f"cannot load model {args.model!r}: {str(exc).strip().splitlines()[0]}") from None
    network = _takes_networks(model)
    if mlir_input and network:  # a whole-network model: the module is one row
        workloads = pd.DataFrame([{"input": args.input, "mlir": text, "hardware": args.hardware}])
    elif mlir_input:  # a kernel model: the kernels recognised in the module, and their total
        workloads = _mlir_workloads(text, str(args.input), args.hardware, args.dim, args.strict)
        _check_model(workloads, model, args.model)
    try:
        preds = model.predict(workloads.drop(columns=["mlir_op", "node", "input"], errors="ignore"))
    except FeatureError as exc:
        raise CliError(str(exc)) from None
    except MlflowException as exc:
        if exc.message.startswith(INPUT_ERROR_PREFIX):  # the featurizer's one line, raised inside the pyfunc
            raise CliError(exc.message.removeprefix(INPUT_ERROR_PREFIX)) from None
        raise CliError(f"bad input: {_schema_reason(str(exc))}") from None
    _warn_domain(preds)
    out = workloads.reset_index(drop=True).join(preds.reset_index(drop=True))
    if network:  # the module text is the input, not an output column
        out = out.drop(columns=["mlir"])
    elif mlir_input:  # one row per recognised kernel plus their total
        out = _with_total(out, list(preds.columns))
    return _write(out, out_path, fmt)


def _write(out, out_path: Path | None, fmt: str) -> int:
    if out_path:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        with open(out_path, "w") as f:
            _write_table(out, fmt, f)
        print(f"wrote {len(out)} predictions to {out_path}", file=sys.stderr)
    else:
        _write_table(out, fmt, sys.stdout)
    return 0


def _check_sources(args) -> None:
    """Exactly one of --input / --torch, and the options that go with each."""
    if bool(args.input) == bool(args.torch):
        raise CliError("give exactly one of --input (workloads or .mlir) and --torch pkg.module:factory")
    if args.torch:
        if not args.example_input:
            raise CliError("--torch needs --example-input (a shape like 1x3x224x224, or int64:1x128 for token ids)")
        if not args.hardware:
            raise CliError("--torch needs --hardware (the kernels are predicted on it)")
        if args.dim:
            raise CliError("--dim binds sizes of an .mlir input; with --torch, --example-input gives the shapes")
    else:
        if args.example_input or args.dtype:
            raise CliError("--example-input and --dtype go with --torch")
        if args.dim and Path(args.input).suffix != ".mlir":
            raise CliError("--dim binds dynamic sizes of an .mlir input")


def _check_model(workloads, model, uri: str) -> None:
    from features.tabular import FeatureError
    from models.networks_api import check_signature

    try:
        check_signature(workloads, model, uri)
    except FeatureError as exc:
        raise CliError(str(exc)) from None


def _warn_domain(preds) -> None:
    """One warning line with the count of rows outside the model's training domain (a model with ``in_domain``)."""
    if "in_domain" not in preds.columns:
        return
    outside = ~preds["in_domain"].astype(bool).to_numpy()
    if outside.any():
        far = preds[outside].reset_index(drop=True)
        i = int(far["domain_distance"].to_numpy(float).argmax())
        print(f"costmodel: warning: {int(outside.sum())} of {len(preds)} rows are outside the training domain "
              f"(in_domain false, intervals widened; farthest: distance {far['domain_distance'][i]:.2f}, "
              f"{far['domain_reason'][i]})", file=sys.stderr)


def _warn_unmapped(line: str) -> None:
    if line:
        print(f"costmodel: warning: {line}", file=sys.stderr)


# --------------------------------------------------------------------------- PyTorch models (features/torch_capture)
def _predict_torch(args):
    """``--torch pkg.module:factory``: the module's kernels on ``--example-input``, predicted, plus the total."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import pandas as pd

    from features.tabular import FeatureError
    from features.torch_capture import load_factory, parse_example_input, unmapped_line, workloads_from_module
    from models.networks_api import predict_kernels

    try:
        module = load_factory(args.torch)
        inputs = tuple(parse_example_input(s) for s in args.example_input)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kernels, unmapped = workloads_from_module(module, inputs, dtype=args.dtype, strict=args.strict)
    except ValueError as exc:  # CaptureError, strict's unmapped line, a bad --dtype
        raise CliError(str(exc)) from None
    _warn_unmapped(unmapped_line(unmapped))
    if kernels.attrs.get("capture_note"):
        print(f"costmodel: note: {kernels.attrs['capture_note']}", file=sys.stderr)
    _set_uri(args.tracking_uri)
    try:
        per_kernel, total = predict_kernels(kernels, args.model, args.hardware)
    except FeatureError as exc:
        raise CliError(str(exc)) from None
    row = {"node": "total", "hardware": args.hardware, **total}
    return pd.concat([per_kernel, pd.DataFrame([row])], ignore_index=True)


# --------------------------------------------------------------------------- MLIR (features/mlir)
def _mlir_text(path: Path) -> str:
    from features.mlir.graph import decode_mlir
    from features.tabular import FeatureError

    if not path.exists():
        raise CliError(f"input file not found: {path}")
    try:
        return decode_mlir(path.read_bytes(), str(path))
    except FeatureError as exc:
        raise CliError(str(exc)) from None


def _takes_networks(model) -> bool:
    """A whole-network model (``models.pyfunc.NetworkPyfunc``): its signature takes ``mlir`` and no ``op``."""
    schema = model.metadata.get_input_schema()
    names = schema.input_names() if schema is not None else []
    return "mlir" in names and "op" not in names


def _mlir_workloads(text: str, where: str, hardware: str, dim_specs: list[str] | None = None, strict: bool = False):
    """``predict`` with a kernel model on a .mlir file: the kernels recognised in it, on ``--hardware``."""
    from features.mlir import workloads_from_mlir
    from features.mlir.dynamic import parse_dim_specs
    from features.mlir.workloads import unmapped_line
    from features.tabular import FeatureError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            df = workloads_from_mlir(text, where=where, dims=parse_dim_specs(dim_specs), strict=strict)
    except FeatureError as exc:
        raise CliError(str(exc)) from None
    line = unmapped_line(df.attrs.get("unmapped", {}))
    _warn_unmapped(f"{where}: {line}" if line else "")
    if df.empty:
        raise CliError(f"{where}: no kernel recognised (what maps: features/mlir/workloads.py)")
    df = df.assign(hardware=hardware)
    return df.astype({c: float for c in df.columns if str(df[c].dtype) == "Int64" and c != "node"})


def _with_total(out, targets: list[str]):
    """Append the total row: runtime / energy summed, peak memory the largest, power = energy / runtime."""
    import pandas as pd

    from models.networks_api import total

    row = {"mlir_op": "total", **total(out[targets])}
    return pd.concat([out, pd.DataFrame([row])], ignore_index=True)


def featurize(args) -> int:
    import json

    from data.hardware import CONF_DIR, HardwareRegistry
    from features.describe import describe
    from features.tabular import FeatureError

    path = Path(args.input)
    try:
        info = describe(_mlir_text(path), args.hardware, HardwareRegistry.from_dir(CONF_DIR), where=str(path))
    except FeatureError as exc:
        raise CliError(str(exc)) from None
    print(json.dumps(info, indent=1))
    return 0


def _add_featurize(sub) -> None:
    p = sub.add_parser("featurize", help="print the features (tabular, graph, tokens) of an MLIR module")
    p.add_argument("input", help="MLIR file (pretty or generic op form)")
    p.add_argument("--hardware", required=True, help="hardware id or alias from conf/hardware, e.g. H100-SXM")
    p.set_defaults(func=featurize)


def models(args) -> int:
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from mlflow.exceptions import MlflowException

    from pipelines.tracking import list_versions

    _set_uri(args.tracking_uri)
    try:
        table = list_versions(args.name)
    except MlflowException as exc:
        raise CliError(f"cannot read the model registry: {str(exc).strip().splitlines()[0]}") from None
    if table.empty:
        raise CliError("no registered models" + (f" named {args.name!r}" if args.name else ""))
    print(table.to_string(index=False))
    return 0


def calibrate(args) -> int:
    """``costmodel calibrate``: a new version of a registered model that knows one more GPU (pipelines/calibrate.py)."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import hashlib

    from pipelines.calibrate import CalibrationError, calibrate_registered, choose_sweep, load_served, measure_sweep

    import mlflow  # noqa: F401 - imported first: its import sets its loggers' level
    logging.getLogger("mlflow").setLevel(logging.ERROR)
    if bool(args.measurements) == bool(args.measure):
        raise CliError("give exactly one of --measurements FILE and --measure (with --hardware)")
    if args.measure and not args.hardware:
        raise CliError("--measure needs --hardware (the GPU on this machine, a conf/hardware id)")
    if args.measurements and (args.hardware or args.budget is not None):
        raise CliError("--hardware and --budget go with --measure (a file's rows name their hardware)")
    if args.measurements:
        path = Path(args.measurements)
        rows = _read_table(path)
        digest, source = hashlib.sha256(path.read_bytes()).hexdigest(), str(path)
    _set_uri(args.tracking_uri)
    try:
        served = load_served(args.model)
        if args.measure:
            sweep = choose_sweep(served[2], args.hardware, args.budget or 60)
            rows, digest, source = measure_sweep(sweep, args.hardware, served[2].registry), None, "measure"
            print(f"measured {len(rows)} of {len(sweep)} chosen workloads on {args.hardware}", file=sys.stderr)
        result = calibrate_registered(args.model, rows, sha256=digest, source=source, promote=args.promote,
                                      served=served, note=lambda line: print(line, file=sys.stderr))
    except CalibrationError as exc:
        raise CliError(str(exc)) from None
    print(f"models:/{result.name}/{result.version}")
    return 0


def _add_calibrate(sub) -> None:
    p = sub.add_parser("calibrate", help="learn a new GPU from its measurements: registers a new model version")
    p.add_argument("--model", required=True, help="registered model URI, e.g. models:/costmodel-runtime@champion")
    p.add_argument("--measurements", help="measured rows of ONE GPU (.csv, .jsonl, .json): predict's columns + runtime_ms")
    p.add_argument("--measure", action="store_true",
                   help="measure here with the cuda backend the workloads the model is least sure of, then calibrate")
    p.add_argument("--hardware", help="--measure: the GPU on this machine (a conf/hardware id)")
    p.add_argument("--budget", type=int, help="--measure: how many workloads to measure (default 60)")
    p.add_argument("--promote", action="store_true", help="move the alias (e.g. @champion) to the new version")
    p.add_argument("--tracking-uri", help=TRACKING_HELP)
    p.set_defaults(func=calibrate)


TRACKING_HELP = "MLflow tracking/registry URI (default: $MLFLOW_TRACKING_URI, else ./outputs/mlflow.db if present)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="costmodel", description="Surrogate cost models for ML kernels.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("predict", help="predict costs for workloads with a registered or logged model")
    p.add_argument("--model", required=True, help="model URI, e.g. models:/costmodel-runtime@champion")
    p.add_argument("--input", help="workloads as .csv, .jsonl, .json (array of records) or .mlir")
    p.add_argument("--torch", metavar="PKG.MODULE:FACTORY",
                   help="a PyTorch model: factory() (no arguments) returns the nn.Module; built on the meta device")
    p.add_argument("--example-input", action="append", metavar="[DTYPE:]SHAPE",
                   help="--torch input shape, e.g. 1x3x224x224 or int64:1x128 (repeat for several inputs)")
    p.add_argument("--dtype", help="--torch: cost the model in this dtype (float16, bfloat16, tf32, float32)")
    p.add_argument("--dim", action="append", metavar="%%ARG:DIM=SIZE",
                   help=".mlir input: bind a dynamic dimension, %%arg0:0=1024, or a whole argument, %%arg0=1024x512 "
                        "(repeatable)")
    p.add_argument("--strict", action="store_true", help="an op with no workload mapping is an error, not a warning")
    p.add_argument("--output", help="write predictions here (.csv, .jsonl or .json) instead of stdout")
    p.add_argument("--format", choices=["csv", "jsonl", "json"], help="output format (default: from --output, else csv)")
    p.add_argument("--tracking-uri", help=TRACKING_HELP)
    p.add_argument("--hardware", help="hardware id for .mlir / --torch input (its kernels are predicted on it)")
    p.set_defaults(func=predict)

    p = sub.add_parser("models", help="list registered models: versions, aliases, held-out metrics")
    p.add_argument("--name", help="only this registered model")
    p.add_argument("--tracking-uri", help=TRACKING_HELP)
    p.set_defaults(func=models)
    _add_featurize(sub)
    _add_calibrate(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.getLogger("mlflow").setLevel(logging.ERROR)
    try:
        return args.func(args)
    except CliError as exc:
        print(f"costmodel: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
