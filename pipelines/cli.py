"""``costmodel``: the command line other tools call.

    costmodel predict --model models:/costmodel-runtime@champion --input workloads.csv [--output preds.csv]
    costmodel predict --model models:/costmodel-runtime@champion --input - --input-format jsonl < w.jsonl
    costmodel predict --model models:/costmodel-network-runtime@champion --input net.mlir --hardware <id>
    costmodel predict --model models:/costmodel-runtime@champion --input mlp.mlir --dim %arg0:0=1024 --hardware <id>
    costmodel predict --model models:/costmodel-runtime@champion --torch pkg.module:factory \
        --example-input 1x3x224x224 [--example-input int64:1x128 ...] [--dtype float16] --hardware <id>
    costmodel predict --model models:/costmodel-runtime@champion --input w.csv --hardware-spec b200.yaml
    costmodel predict --server http://127.0.0.1:5000 --input w.csv          # a running costmodel serve answers
    costmodel models [--name costmodel-runtime]
    costmodel tune --space space.yaml --measure "python bench.py" [--budget 50] [--batch 5] | --cache kt.json.gz
    costmodel serve --model models:/costmodel-runtime@champion [--host 127.0.0.1] [--port 5000]
    costmodel calibrate --model models:/costmodel-runtime@champion --measurements new_gpu.csv [--promote]
    costmodel calibrate --model models:/costmodel-runtime@champion --measure --hardware <id> [--budget 60]
    costmodel llm --config config.json --hardware <id> [--tp 1] [--ep 1] [--dtype bf16|fp8|...] [--kv-dtype ...] \
        --batch 32 --isl 2000 --osl 500 [--model URI|roofline] [--power-model URI] [--format text|json]
    costmodel --version

Input: CSV, JSON lines or a JSON array of records, one workload per row (``op``, ``hardware``,
``dtype``, shape columns), from a file or standard input (``--input -``; its format: ``--input-format``, default
csv). Files are read by ``features.inputs`` (UTF-8, no repeated column). Output: the input columns plus, per
predicted target, the prediction and its interval (``runtime_ms``, ``runtime_ms_lo``, ``runtime_ms_hi``), as CSV,
JSON lines or a JSON array (``--format``, or the suffix of ``--output``: ``.csv``, ``.jsonl``, ``.json``), to
standard output unless ``--output`` names a file. Any bad input ends with one ``costmodel: error: ...`` line on
stderr and exit status 2. A model with a domain of validity adds ``in_domain``, ``domain_distance``,
``domain_reason``; rows outside it get one ``costmodel: warning:`` line with their count on stderr (their
intervals are widened, never capped).
A ``.mlir`` input (with ``--hardware``) is one network for a whole-network model (``mlir`` in its signature,
no ``op``: output ``input, hardware`` + the prediction), else the kernels recognised in it plus their total;
``--dim`` binds its dynamic dimensions (``%arg0:0=1024`` one dim, ``%arg0=1024x512`` a whole argument).
``--torch pkg.module:factory`` costs a PyTorch model: ``factory()`` is called under ``torch.device("meta")`` (no
weights), captured on ``--example-input`` shapes (``features/torch_capture.py``), one row per kernel plus the
total. Ops with no workload mapping are named on stderr in one ``costmodel: warning:`` line (``--strict``: an error).
The total of a kernel model's .mlir / --torch output composes the kernels by ``--execution`` (eager, cuda_graph,
compiled; ``models/compose.py``): runtime, and with a power model (``costmodel-power``) power and energy per
inference; ``sum_runtime_ms`` is the plain sum of the kernels.
``--hardware-spec FILE_OR_DIR`` (predict, serve, calibrate) adds GPUs the model was not trained with from their
spec files (``models/specs.py``). The model is read from its own artifacts by the lean loader (``models/loader.py``:
a ``models:/`` URI resolved through MLflow once, then cached); ``--server URL`` (or ``$COSTMODEL_SERVER`` when no
``--model`` is given) asks a running ``costmodel serve`` instead (``models/client.py``).
``costmodel models`` prints registered names, versions, aliases, their held-out metrics and each champion decision.
``costmodel llm`` serves a Hugging Face config.json (``models/llm.py``, ``docs/llm.md``): time to first token, time per
output token, the batch's prefill, the decode step as the context grows, throughput, memory, the largest concurrency
that fits, power and energy with a power model; text, or ``--format json``.
``costmodel serve`` answers MLflow's scoring protocol (``POST /invocations``) with one-line error bodies
(``pipelines/serve.py``) and prints where it listens.

The store: ``--tracking-uri``, else ``$MLFLOW_TRACKING_URI``, else ``./outputs/mlflow.db`` when it exists. Reading
never creates a store: a sqlite file that does not exist is refused (one line naming it), and a ``models:/`` or
``runs:/`` model with no store to read is an error rather than MLflow's default ``./mlflow.db``.
Imports are lazy: ``--help`` and ``--version`` import no third-party package.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DEFAULT_STORE = Path("outputs") / "mlflow.db"
FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json"}
INPUT_FORMATS = {**FORMATS, ".mlir": "mlir"}
STDIO = "-"


class CliError(Exception):
    pass


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        return package_version("costmodel")
    except PackageNotFoundError:
        return "unknown (not installed)"


class _Version(argparse.Action):
    """``--version``: looked up only when asked (the installed package's metadata)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs):
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit", **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"costmodel {version()}")
        parser.exit()


# --------------------------------------------------------------------------- the store
def _tracking_uri(arg: str | None) -> str | None:
    if arg:
        return arg
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    if DEFAULT_STORE.exists():  # the main job's embedded store, when run from the project folder
        return f"sqlite:///{DEFAULT_STORE.resolve()}"
    return None


def _needs_store(model: str | None) -> bool:
    """A registered (``models:/``) or logged (``runs:/``) model is read through the store; a local folder is not."""
    return model is None or model.split(":", 1)[0] in ("models", "runs")


def _store(arg: str | None, model: str | None = None) -> str | None:
    """The store a reading command reads (``--tracking-uri``, ``$MLFLOW_TRACKING_URI``, else ``./outputs/mlflow.db``
    when present). It must exist (``models.api.existing_store``): reading never creates a store. With no store, only
    a model given as a local folder can be read (None)."""
    uri = _tracking_uri(arg)
    if uri is None:
        if not _needs_store(model):
            return None
        raise CliError(
            "no MLflow store to read: give --tracking-uri (e.g. sqlite:///outputs/mlflow.db) or set "
            "MLFLOW_TRACKING_URI (there is no ./outputs/mlflow.db here)"
        )
    from models.api import existing_store

    try:
        existing_store(uri)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    return uri


def _set_uri(arg: str | None, model: str | None = None) -> str | None:
    """:func:`_store`, and MLflow pointed at it (for the commands that read the store through MLflow)."""
    uri = _store(arg, model)
    if uri is not None:
        import mlflow

        mlflow.set_tracking_uri(uri)
        mlflow.set_registry_uri(uri)
    return uri


def _load_model(args, lean: bool = True):
    """The model of ``--model`` with the specs of ``--hardware-spec`` added: the lean loader's (``models.loader``:
    no MLflow import when the resolved URI is cached), or MLflow's pyfunc (``lean=False``: a scoring server)."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from models.api import is_mlflow_error
    from models.loader import load

    uri = _store(args.tracking_uri, args.model)
    specs = _hardware_specs(args)
    try:
        return load(args.model, uri, hardware=specs, lean=lean)
    except OSError as exc:
        raise CliError(f"cannot load model {_echo(args.model)}: {_first_line(exc)}") from None
    except Exception as exc:
        if is_mlflow_error(exc):
            raise CliError(f"cannot load model {_echo(args.model)}: {_first_line(exc)}") from None
        raise


def _hardware_specs(args) -> list | None:
    """The specs of ``--hardware-spec`` (files or folders of ``conf/hardware/<id>.yaml``'s fields)."""
    paths = getattr(args, "hardware_spec", None)
    if not paths:
        return None
    from models.specs import read_specs

    try:
        return read_specs(paths)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _echo(value: str, limit: int = 120) -> str:
    return repr(value) if len(value) <= limit else repr(value[:limit]) + f"... ({len(value)} characters)"


def _first_line(exc: BaseException, limit: int = 200) -> str:
    lines = str(exc).strip().splitlines()
    line = " ".join(lines[0].split()) if lines else type(exc).__name__
    return line if len(line) <= limit else line[:limit] + "..."


# --------------------------------------------------------------------------- input and output
def _input_format(args) -> str:
    if args.input_format:
        return args.input_format
    if args.input == STDIO:
        return "csv"
    fmt = INPUT_FORMATS.get(Path(args.input).suffix)
    if fmt is None:
        raise CliError(
            f"unsupported input {_echo(Path(args.input).name, 80)}: use .csv, .jsonl, .json or .mlir "
            "(or --input-format)"
        )
    return fmt


def _read_input(args, fmt: str):
    """The workload table, or the MLIR text, of ``--input`` (a file, or ``-``: standard input)."""
    from features.inputs import mlir_text, parse_workloads, read_mlir, read_workloads
    from features.tabular import FeatureError

    suffix = {"csv": ".csv", "jsonl": ".jsonl", "json": ".json"}.get(fmt)
    try:
        if args.input == STDIO:
            data = sys.stdin.buffer.read()
            return mlir_text(data, "<stdin>") if fmt == "mlir" else parse_workloads(data, suffix, "<stdin>")
        if fmt == "mlir":
            return read_mlir(args.input)
        if INPUT_FORMATS.get(Path(args.input).suffix) == fmt:
            return read_workloads(args.input)
        return parse_workloads(_read_file(args.input), suffix, Path(args.input).name)  # --input-format overrides
    except FeatureError as exc:
        raise CliError(str(exc)) from None


def _read_file(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise CliError(f"input file not found: {path}") from None
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or type(exc).__name__}") from None


def _output_format(args) -> str:
    if args.format:
        return args.format
    if not args.output or args.output == STDIO:
        return "csv"
    fmt = FORMATS.get(Path(args.output).suffix)
    if fmt is None:
        raise CliError(
            f"unsupported output {_echo(Path(args.output).name, 80)}: use .csv, .jsonl or .json (or --format)"
        )
    return fmt


def _write_table(df, fmt: str, dest) -> None:
    if fmt == "jsonl":
        dest.write(df.to_json(orient="records", lines=True, double_precision=15))
    elif fmt == "json":
        dest.write(df.to_json(orient="records", double_precision=15))
        dest.write("\n")
    else:
        df.to_csv(dest, index=False)


def _write(out, output: str | None, fmt: str) -> int:
    if output and output != STDIO:
        path = Path(output)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w") as f:  # complete or absent: never a half-written file
            _write_table(out, fmt, f)
        os.replace(tmp, path)
        print(f"wrote {len(out)} predictions to {path}", file=sys.stderr)
    else:
        _write_table(out, fmt, sys.stdout)
    return 0


# --------------------------------------------------------------------------- predict
def predict(args) -> int:
    fmt = _output_format(args)
    _check_sources(args)
    if not args.server and not args.model and os.environ.get("COSTMODEL_SERVER"):
        args.server = os.environ["COSTMODEL_SERVER"]
    if args.server:
        return _write(_predict_remote(args), args.output, fmt)
    if not args.model:
        raise CliError("give --model (a model URI) or --server (a running costmodel serve)")
    if args.torch:
        return _write(_predict_torch(args), args.output, fmt)
    in_fmt = _input_format(args)
    if in_fmt == "mlir" and not args.hardware:
        raise CliError(f"{_input_name(args)}: a .mlir input needs --hardware")
    if args.dim and in_fmt != "mlir":
        raise CliError("--dim binds dynamic sizes of an .mlir input")
    source = _read_input(args, in_fmt)
    model = _load_model(args)
    from features.tabular import FeatureError
    from models.networks_api import predict_input

    try:
        out, preds = predict_input(
            model,
            source,
            args.hardware,
            _input_name(args),
            args.dim,
            args.strict,
            args.execution,
            args.model,
            warn=_warn_unmapped,
        )
    except FeatureError as exc:
        raise CliError(str(exc)) from None
    _warn_domain(preds)
    _warn_sol(preds)
    return _write(out, args.output, fmt)


def _predict_remote(args):
    """``--server URL``: the input table predicted by a running ``costmodel serve`` (``models.client``)."""
    if args.torch or args.dim or args.hardware or args.hardware_spec or args.model:
        raise CliError("--server takes a workload table (--input) alone: the server has the model and its specs")
    in_fmt = _input_format(args)
    if in_fmt == "mlir":
        raise CliError("--server takes workload tables (.csv, .jsonl, .json); give a .mlir input to --model")
    from models.client import RemoteError, predict_remote, read_table

    data = sys.stdin.buffer.read() if args.input == STDIO else _read_file(args.input)
    try:
        workloads = read_table(data, in_fmt, _input_name(args))
        preds = predict_remote(args.server, workloads)
    except RemoteError as exc:
        raise CliError(str(exc)) from None
    _warn_domain(preds)
    return workloads.reset_index(drop=True).join(preds.reset_index(drop=True), rsuffix="_predicted")


def _input_name(args) -> str:
    return "<stdin>" if args.input == STDIO else str(args.input)


def _check_sources(args) -> None:
    """Exactly one of --input / --torch, and the options that go with each."""
    if bool(args.input) == bool(args.torch):
        raise CliError(
            "give exactly one of --input (workloads or .mlir; - reads standard input) and --torch pkg.module:factory"
        )
    if args.torch:
        if not args.example_input:
            raise CliError("--torch needs --example-input (a shape like 1x3x224x224, or int64:1x128 for token ids)")
        if not args.hardware:
            raise CliError("--torch needs --hardware (the kernels are predicted on it)")
        if args.dim:
            raise CliError("--dim binds sizes of an .mlir input; with --torch, --example-input gives the shapes")
        if args.input_format:
            raise CliError("--input-format goes with --input")
    elif args.example_input or args.dtype:
        raise CliError("--example-input and --dtype go with --torch")


def _warn_domain(preds) -> None:
    """One warning line with the count of rows outside the model's training domain (a model with ``in_domain``)."""
    if "in_domain" not in preds.columns:
        return
    outside = ~preds["in_domain"].astype(bool).to_numpy()
    if outside.any():
        far = preds[outside].reset_index(drop=True)
        i = int(far["domain_distance"].to_numpy(float).argmax())
        print(
            f"costmodel: warning: {int(outside.sum())} of {len(preds)} rows are outside the training domain "
            f"(in_domain false, intervals widened; farthest: distance {far['domain_distance'][i]:.2f}, "
            f"{far['domain_reason'][i]})",
            file=sys.stderr,
        )


def _warn_sol(preds) -> None:
    """One warning line with the count of rows whose predicted runtime was under the speed of light of their spec
    (``models.sol``: raised to it)."""
    below = int(preds.attrs.get("below_sol", 0) or 0)
    if below:
        print(
            f"costmodel: warning: {below} of {len(preds)} rows predicted faster than their hardware's speed of light "
            "(FLOPs at peak, bytes at bandwidth): raised to it",
            file=sys.stderr,
        )


def _warn_unmapped(line: str) -> None:
    if line:
        print(f"costmodel: warning: {line}", file=sys.stderr)


# --------------------------------------------------------------------------- PyTorch models (features/torch_capture)
def _predict_torch(args):
    """``--torch pkg.module:factory``: the module's kernels on ``--example-input``, predicted, plus the total."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from features.tabular import FeatureError
    from features.torch_capture import unmapped_line, workloads_from_factory
    from models.networks_api import predict_kernels, with_total

    try:
        kernels, unmapped = workloads_from_factory(args.torch, args.example_input, args.dtype, args.strict)
    except ValueError as exc:  # CaptureError, strict's unmapped line, a bad --dtype
        raise CliError(str(exc)) from None
    _warn_unmapped(unmapped_line(unmapped))
    if kernels.attrs.get("capture_note"):
        print(f"costmodel: note: {kernels.attrs['capture_note']}", file=sys.stderr)
    model = _load_model(args)
    try:
        per_kernel, total = predict_kernels(kernels, model, args.hardware, args.execution, where=args.model)
    except FeatureError as exc:
        raise CliError(str(exc)) from None
    return with_total(per_kernel, total, node="total", hardware=args.hardware)


# --------------------------------------------------------------------------- featurize (features/describe)
def featurize(args) -> int:
    import json

    from data.hardware import CONF_DIR, HardwareRegistry
    from features.describe import describe
    from features.inputs import mlir_text, read_mlir
    from features.tabular import FeatureError

    where = "<stdin>" if args.input == STDIO else str(args.input)
    try:
        text = mlir_text(sys.stdin.buffer.read(), where) if args.input == STDIO else read_mlir(args.input)
        info = describe(text, args.hardware, HardwareRegistry.from_dir(CONF_DIR), where=where)
    except FeatureError as exc:
        raise CliError(str(exc)) from None
    print(json.dumps(info, indent=1))
    return 0


def _add_featurize(sub) -> None:
    p = sub.add_parser("featurize", help="print the features (tabular, graph, tokens) of an MLIR module")
    p.add_argument("input", help="MLIR file (pretty or generic op form); - reads standard input")
    p.add_argument("--hardware", required=True, help="hardware id or alias from conf/hardware, e.g. H100-SXM")
    p.set_defaults(func=featurize)


# --------------------------------------------------------------------------- models, serve
def models(args) -> int:
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    _set_uri(args.tracking_uri)
    from mlflow.exceptions import MlflowException

    from pipelines.tracking import list_versions

    try:
        table = list_versions(args.name)
    except MlflowException as exc:
        raise CliError(f"cannot read the model registry: {_first_line(exc)}") from None
    if table.empty:
        raise CliError("no registered models" + (f" named {_echo(args.name)}" if args.name else ""))
    print(table.to_string(index=False))
    return 0


def tune(args) -> int:
    """``costmodel tune``: model-guided auto-tuning (pipelines/tune.py); an option left out takes conf/tune.yaml's
    value. Exit status 1 when no configuration succeeded."""
    from pipelines.tune import defaults, print_run, run_from_options

    d = defaults()
    option = {k: d[key] if getattr(args, k) is None else getattr(args, k) for k, key in TUNE_DEFAULTS.items()}
    try:
        run, space = run_from_options(
            args.space,
            args.cache,
            args.measure,
            option["budget"],
            option["batch"],
            option["strategy"],
            args.prior,
            option["seed"],
            option["timeout"],
            args.output,
            log=lambda m: print(f"costmodel: warning: {m}", file=sys.stderr),
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    print_run(run, space)
    return 0 if run.best_config else 1


# the tune options that default to conf/tune.yaml: option -> its key there
TUNE_DEFAULTS = {"budget": "budget", "batch": "batch", "strategy": "strategy", "seed": "seed", "timeout": "timeout_s"}


def serve(args) -> int:
    model = _load_model(args, lean=False)
    from pipelines.serve import run

    run(model, host=args.host, port=args.port, name=args.model, note=lambda line: print(line, file=sys.stderr))
    return 0


def calibrate(args) -> int:
    """``costmodel calibrate``: a new version of a registered model that knows one more GPU (pipelines/calibrate.py,
    models/calibration.py)."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import hashlib
    import logging

    import mlflow  # noqa: F401 - imported first: its import sets its loggers' level

    from models.calibration import CalibrationError, NotBetter, choose_sweep
    from pipelines.calibrate import calibrate_registered, load_served, measure_sweep

    logging.getLogger("mlflow").setLevel(logging.ERROR)
    if bool(args.measurements) == bool(args.measure):
        raise CliError("give exactly one of --measurements FILE and --measure (with --hardware)")
    if args.measure and not args.hardware:
        raise CliError("--measure needs --hardware (the GPU on this machine, a conf/hardware id)")
    if args.measurements and (args.hardware or args.budget is not None):
        raise CliError("--hardware and --budget go with --measure (a file's rows name their hardware)")
    if args.measurements:
        from features.inputs import read_workloads
        from features.tabular import FeatureError

        path = Path(args.measurements)
        try:
            rows = read_workloads(path)
        except FeatureError as exc:
            raise CliError(str(exc)) from None
        digest, source = hashlib.sha256(path.read_bytes()).hexdigest(), str(path)
    specs = _hardware_specs(args)
    _set_uri(args.tracking_uri, args.model)
    try:
        served = load_served(args.model, hardware=specs)
        if args.measure:
            sweep = choose_sweep(served[2], args.hardware, args.budget or 60)
            rows, digest, source = measure_sweep(sweep, args.hardware, served[2].registry), None, "measure"
            print(f"measured {len(rows)} of {len(sweep)} chosen workloads on {args.hardware}", file=sys.stderr)
        result = calibrate_registered(
            args.model,
            rows,
            sha256=digest,
            source=source,
            promote=args.promote,
            method=args.method,
            served=served,
            note=lambda line: print(line, file=sys.stderr),
        )
    except CalibrationError as exc:
        raise CliError(str(exc)) from None
    except NotBetter as exc:  # a valid request whose answer is "no better model": said, nothing registered
        print(f"costmodel: calibrate: {exc}", file=sys.stderr)
        return 1
    print(f"models:/{result.name}/{result.version}")
    return 0


def llm(args) -> int:
    """``costmodel llm``: an LLM as it is served (models/llm_api.py)."""
    import json

    from models.llm import LLMError
    from models.llm_api import ROOFLINE, predict_llm_config, report_json, report_text

    model = power = None
    try:  # the lean loader (models.loader): no MLflow import when the resolved model is cached
        model = args.model if args.model == ROOFLINE else _load_model(args)
        power = (
            _load_model(argparse.Namespace(**{**vars(args), "model": args.power_model})) if args.power_model else None
        )
    except CliError as exc:
        hint = "; or --model roofline (the plain spec roofline needs no store)" if "no MLflow store" in str(exc) else ""
        raise CliError(f"{exc}{hint}") from None
    try:
        res = predict_llm_config(
            args.config,
            args.hardware,
            model,
            tp=args.tp,
            ep=args.ep,
            dtype=args.dtype,
            kv_dtype=args.kv_dtype,
            batch=args.batch,
            isl=args.isl,
            osl=args.osl,
            power_model=power,
            model_name=args.model,
        )
    except LLMError as exc:
        raise CliError(str(exc)) from None
    for note in res.notes:
        print(f"costmodel: note: {note}", file=sys.stderr)
    print(json.dumps(report_json(res), indent=1) if args.format == "json" else report_text(res))
    return 0


def _add_llm(sub) -> None:
    p = sub.add_parser("llm", help="an LLM as it is served: TTFT, TPOT, memory, throughput, energy from a config.json")
    p.add_argument("--config", required=True, help="a Hugging Face config.json (local file; no weights)")
    p.add_argument("--hardware", required=True, help="GPU id or alias from conf/hardware, e.g. H200-SXM")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs (default 1)")
    p.add_argument("--ep", type=int, default=1, help="expert-parallel GPUs of a MoE model, dividing --tp (default 1)")
    p.add_argument(
        "--dtype", help="GEMM weights: bfloat16 (default), float16, fp8 (per tensor), fp8_block, int8, int8_wo, int4_wo"
    )
    p.add_argument("--kv-dtype", help="KV cache: bfloat16 (default: the activations'), float16, fp8")
    p.add_argument("--batch", type=int, required=True, help="concurrent requests")
    p.add_argument("--isl", type=int, required=True, help="input tokens per request")
    p.add_argument("--osl", type=int, required=True, help="output tokens per request")
    p.add_argument(
        "--model",
        default="models:/costmodel-runtime@champion",
        help="kernel cost model URI (default models:/costmodel-runtime@champion), or 'roofline' (the plain spec "
        "roofline, no store needed)",
    )
    p.add_argument("--power-model", help="a power model URI (e.g. models:/costmodel-power@champion): power, energy")
    p.add_argument("--format", choices=["text", "json"], default="text", help="output (default text)")
    p.add_argument("--tracking-uri", help=TRACKING_HELP)
    p.set_defaults(func=llm)


def _add_calibrate(sub) -> None:
    p = sub.add_parser("calibrate", help="learn a new GPU from its measurements: registers a new model version")
    p.add_argument("--model", required=True, help="registered model URI, e.g. models:/costmodel-runtime@champion")
    p.add_argument(
        "--measurements", help="measured rows of ONE GPU (.csv, .jsonl, .json): predict's columns + runtime_ms"
    )
    p.add_argument(
        "--measure",
        action="store_true",
        help="measure here with the cuda backend a sweep the model chooses (each op family and dtype over its "
        "range of runtimes), then calibrate",
    )
    p.add_argument("--hardware", help="--measure: the GPU on this machine (a conf/hardware id)")
    p.add_argument("--budget", type=int, help="--measure: how many workloads to measure (default 60)")
    p.add_argument("--promote", action="store_true", help="move the alias (e.g. @champion) to the new version")
    p.add_argument(
        "--method",
        choices=("auto", "refit", "correction"),  # models.physics.CALIBRATION_METHODS (tests/test_cli.py)
        default="auto",
        help="auto (default): whichever of none, a correction and a refit does best out of fold on the rows",
    )
    p.add_argument("--tracking-uri", help=TRACKING_HELP)
    _add_hardware_spec(p)
    p.set_defaults(func=calibrate)


def _budget(text: str) -> int | float:
    """``--budget``: an integer (a count) stays an int, a decimal (a fraction of the space up to 1.0) a float."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _add_tune(sub) -> None:
    """The ``costmodel tune`` options; one left out takes its value from conf/tune.yaml (:data:`TUNE_DEFAULTS`)."""
    p = sub.add_parser("tune", help="auto-tune a kernel: --space + --measure command, or replay a --cache")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--space", help="tunables and their values (+ optional restrictions), .yaml or .json")
    src.add_argument("--cache", help="replay a Kernel Tuner cache (.json / .json.gz) as the measure function")
    p.add_argument("--measure", help="shell command: reads one config as JSON on stdin, prints its runtime in ms")
    p.add_argument(
        "--budget",
        type=_budget,
        help="measurements: a count (50), or a fraction of the space written with a decimal point (0.05; 1.0: all)",
    )
    p.add_argument("--batch", type=int, help="configurations per round")
    p.add_argument("--strategy", help="thompson, ei, greedy or random")
    p.add_argument("--prior", help="measurements elsewhere (.csv/.json/.jsonl: tunables, runtime_ms[, hardware])")
    p.add_argument("--seed", type=int)
    p.add_argument("--timeout", type=float, help="seconds per measurement before it fails")
    p.add_argument("--output", help="write the history here (.csv, .jsonl or .json)")
    p.set_defaults(func=tune)


TRACKING_HELP = "MLflow tracking/registry URI (default: $MLFLOW_TRACKING_URI, else ./outputs/mlflow.db if present)"


def _add_hardware_spec(p) -> None:
    p.add_argument(
        "--hardware-spec",
        action="append",
        metavar="FILE_OR_DIR",
        help="a GPU the model was not trained with: its spec (conf/hardware/<id>.yaml's fields), or a folder of "
        "them; repeatable",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="costmodel", description="Surrogate cost models for ML kernels.")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("predict", help="predict costs for workloads with a registered or logged model")
    p.add_argument("--model", help="model URI, e.g. models:/costmodel-runtime@champion")
    p.add_argument(
        "--server",
        metavar="URL",
        help="ask a running `costmodel serve` at URL instead of loading a model (default without --model: "
        "$COSTMODEL_SERVER)",
    )
    p.add_argument("--input", help="workloads as .csv, .jsonl, .json (array of records) or .mlir; - reads stdin")
    p.add_argument(
        "--input-format",
        choices=["csv", "jsonl", "json", "mlir"],
        help="format of --input (default: its suffix; csv for standard input)",
    )
    p.add_argument(
        "--torch",
        metavar="PKG.MODULE:FACTORY",
        help="a PyTorch model: factory() (no arguments) returns the nn.Module; built on the meta device",
    )
    p.add_argument(
        "--example-input",
        action="append",
        metavar="[DTYPE:]SHAPE",
        help="--torch input shape, e.g. 1x3x224x224 or int64:1x128 (repeat for several inputs)",
    )
    p.add_argument("--dtype", help="--torch: cost the model in this dtype (float16, bfloat16, tf32, float32)")
    p.add_argument(
        "--dim",
        action="append",
        metavar="%%ARG:DIM=SIZE",
        help=".mlir input: bind a dynamic dimension, %%arg0:0=1024, or a whole argument, %%arg0=1024x512 (repeatable)",
    )
    p.add_argument("--strict", action="store_true", help="an op with no workload mapping is an error, not a warning")
    p.add_argument("--output", help="write predictions here (.csv, .jsonl or .json; - is stdout, the default)")
    p.add_argument(
        "--format", choices=["csv", "jsonl", "json"], help="output format (default: from --output, else csv)"
    )
    p.add_argument("--tracking-uri", help=TRACKING_HELP)
    _add_hardware_spec(p)
    p.add_argument("--hardware", help="hardware id for .mlir / --torch input (its kernels are predicted on it)")
    p.add_argument(
        "--execution",
        choices=["eager", "cuda_graph", "compiled"],
        default="eager",
        help=".mlir / --torch total: how the kernels run (models/compose.py; default eager): launch-bound "
        "kernels cost their dispatch in eager, a small gap in a CUDA graph; compiled fuses pointwise ops",
    )
    p.set_defaults(func=predict)

    p = sub.add_parser("models", help="list registered models: versions, aliases, held-out metrics")
    p.add_argument("--name", help="only this registered model")
    p.add_argument("--tracking-uri", help=TRACKING_HELP)
    p.set_defaults(func=models)
    _add_featurize(sub)
    _add_tune(sub)

    p = sub.add_parser("serve", help="serve a model over REST (MLflow's scoring protocol, one-line error bodies)")
    p.add_argument("--model", required=True, help="model URI, e.g. models:/costmodel-runtime@champion")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=5000, help="port (default 5000; 0: any free port, printed at start)")
    p.add_argument("--tracking-uri", help=TRACKING_HELP)
    _add_hardware_spec(p)
    p.set_defaults(func=serve)

    _add_calibrate(sub)
    _add_llm(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("mlflow").setLevel(logging.ERROR)
    try:
        return args.func(args)
    except CliError as exc:
        print(f"costmodel: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader of stdout went away (e.g. `| head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def entry() -> None:
    """The ``costmodel`` process: :func:`main`, then, after ``predict`` (which writes no store), the process ends
    without the interpreter's teardown of torch and XGBoost (most of a short call's exit): the output is flushed
    first, and an ``--output`` file was already moved into place."""
    rc = main()
    if len(sys.argv) > 1 and sys.argv[1] == "predict":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    sys.exit(rc)


if __name__ == "__main__":
    entry()
