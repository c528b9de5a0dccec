"""``costmodel predict`` against the model the tiny main job registered."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import cli_in_process, run_cli

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
MODEL = "models:/costmodel-runtime@champion"


def test_console_script_is_installed():
    assert shutil.which("costmodel", path=str(Path(sys.executable).parent)), "pip install -e . provides costmodel"


def test_predict_csv_to_stdout_and_jsonl_file(tiny_run, tmp_path):
    src = tmp_path / "w.csv"
    pd.DataFrame(
        [
            {"op": "matmul", "m": 1024, "n": 1024, "k": 1024, "dtype": "float16", "hardware": "T4"},
            {"op": "gelu", "m": 4096, "n": 4096, "dtype": "float32", "hardware": "A100-PCIe-40GB"},
        ]
    ).to_csv(src, index=False)
    proc = run_cli("predict", "--model", MODEL, "--input", str(src), "--tracking-uri", tiny_run["uri"])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert (
        lines[0]
        == ("op,m,n,k,dtype,hardware,runtime_ms,runtime_ms_lo,runtime_ms_hi,in_domain,domain_distance,domain_reason")
        and len(lines) == 3
    )
    csv_rows = [[float(v) for v in l.split(",")[6:9]] for l in lines[1:]]
    assert all(0 < lo < p < hi for p, lo, hi in csv_rows)
    csv_preds = [r[0] for r in csv_rows]

    out = tmp_path / "p.jsonl"
    proc = run_cli(
        "predict",
        "--model",
        MODEL,
        "--input",
        str(src),
        "--output",
        str(out),
        env={"MLFLOW_TRACKING_URI": tiny_run["uri"]},
    )
    assert proc.returncode == 0, proc.stderr
    recs = [json.loads(l) for l in out.read_text().splitlines()]
    assert [r["runtime_ms"] for r in recs] == pytest.approx(csv_preds)


@pytest.mark.parametrize(
    "content,msg",
    [
        ("op,hardware,m,n,k\nmatmul,H1000,8,8,8\n", "unknown hardware 'H1000'"),
        ("op,hardware,m,n\nmatmul,T4,8,8\n", "needs shape parameter 'k'"),
        ("op,hardware,m,n,k\nmatmul,T4,abc,8,8\n", "must be an integer"),
        ("hardware,m,n,k\nT4,8,8,8\n", "op"),
        ("op,hardware,m,n,k\n", "holds no workloads"),
    ],
)
def test_bad_input_gives_one_error_line(tiny_run, tmp_path, capsys, content, msg):
    src = tmp_path / "bad.csv"
    src.write_text(content)
    rc, out, stderr = cli_in_process(
        capsys, "predict", "--model", MODEL, "--input", str(src), "--tracking-uri", tiny_run["uri"]
    )
    assert rc == 2
    err = stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("costmodel: error:") and msg in err[0], stderr
    assert out == ""


def test_missing_file_and_unknown_model(tiny_run, tmp_path):
    proc = run_cli(
        "predict", "--model", MODEL, "--input", str(tmp_path / "nope.csv"), "--tracking-uri", tiny_run["uri"]
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"costmodel: error: input file not found: {str(tmp_path / 'nope.csv')!r}"
    src = tmp_path / "w.csv"
    src.write_text("op,hardware,m,n,k\nmatmul,T4,8,8,8\n")
    proc = run_cli(
        "predict", "--model", "models:/no-such-model@champion", "--input", str(src), "--tracking-uri", tiny_run["uri"]
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "cannot load model 'models:/no-such-model@champion'" in proc.stderr


# --- a fast CLI: lazy imports, --version, standard input and output ---------------------------------------------------
@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["predict", "--help"]])
def test_version_and_help_import_no_third_party_package(argv):
    code = (
        f"import sys\nfrom pipelines import cli\ntry:\n    cli.main({argv!r})\nexcept SystemExit:\n    pass\n"
        "print('LOADED', sorted(m for m in ('pandas', 'numpy', 'mlflow', 'torch', 'sklearn') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "LOADED []"
    if argv == ["--version"]:
        from importlib.metadata import version

        assert proc.stdout.splitlines()[0] == f"costmodel {version('costmodel')}"


def test_stdin_to_stdout_equals_files(tiny_run, tmp_path):
    rows = [
        {"op": "matmul", "m": 1024, "n": 1024, "k": 1024, "dtype": "float16", "hardware": "T4"},
        {"op": "gelu", "m": 4096, "n": 4096, "dtype": "float32", "hardware": "A100-PCIe-40GB"},
    ]
    src = tmp_path / "w.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    from_file = run_cli(
        "predict", "--model", MODEL, "--input", str(src), "--format", "jsonl", "--tracking-uri", tiny_run["uri"]
    )
    assert from_file.returncode == 0, from_file.stderr
    piped = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.cli",
            "predict",
            "--model",
            MODEL,
            "--input",
            "-",
            "--input-format",
            "jsonl",
            "--output",
            "-",
            "--format",
            "jsonl",
            "--tracking-uri",
            tiny_run["uri"],
        ],
        input=src.read_text(),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == from_file.stdout and len(piped.stdout.splitlines()) == 2
    # CSV is the default format of standard input; a file's content read as another format: one line
    csv_in = pd.DataFrame(rows).to_csv(index=False)
    piped_csv = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.cli",
            "predict",
            "--model",
            MODEL,
            "--input",
            "-",
            "--tracking-uri",
            tiny_run["uri"],
        ],
        input=csv_in,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert piped_csv.returncode == 0, piped_csv.stderr
    got = pd.read_csv(pd.io.common.StringIO(piped_csv.stdout))["runtime_ms"].tolist()
    assert got == pytest.approx([json.loads(line)["runtime_ms"] for line in from_file.stdout.splitlines()], rel=1e-12)


# --- reading never creates a store ------------------------------------------------------------------------------------
def test_a_mistyped_store_is_refused_and_not_created(tiny_run, tmp_path):
    missing = tmp_path / "nosuch" / "dir" / "mlflow.db"
    for args in (["models"], ["predict", "--model", MODEL, "--input", str(tiny_run["out"] / "nope.csv")]):
        src = tmp_path / "w.csv"
        src.write_text("op,hardware,m,n,k\nmatmul,T4,8,8,8\n")
        args = [a if not a.endswith("nope.csv") else str(src) for a in args]
        proc = run_cli(*args, "--tracking-uri", f"sqlite:///{missing}")
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip() == (
            f"costmodel: error: no MLflow store at {missing} (sqlite file not found; a training run creates it)"
        )
        assert not (tmp_path / "nosuch").exists()


def test_predict_outside_the_project_leaves_no_stray_store(tiny_run, tmp_path):
    src = tmp_path / "w.csv"
    src.write_text("op,hardware,m,n,k\nmatmul,T4,8,8,8\n")
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "predict", "--model", MODEL, "--input", str(src)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("costmodel: error: no MLflow store to read: give --tracking-uri")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.csv"]  # no ./mlflow.db, no ./mlruns


# --- the issue's input cases, each one line --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name,content,msg",
    [
        ("dup.csv", b"op,hardware,m,m,n,k\nmatmul,T4,8,8,8,8\n", "column 'm' repeats in the header"),
        ("dup.json", b'[{"op": "matmul", "hardware": "T4", "m": 8, "m": 9, "n": 8, "k": 8}]', "key 'm' repeats"),
        ("empty_hw.csv", b"op,hardware,m,n,k\nmatmul,,8,8,8\n", "hardware"),
        ("latin1.csv", "op,hardware,m,n,k\nmatmul,T4\xe9,8,8,8\n".encode("latin-1"), "UTF-8"),
        ("binary.mlir", bytes(range(256)) * 4, "UTF-8"),
        ("long_op.csv", ("op,hardware,m,n\n" + "x" * 5_000_000 + ",T4,8,8\n").encode(), "unknown op"),
    ],
)
def test_issue_inputs_give_one_short_line(tiny_run, tmp_path, capsys, name, content, msg):
    src = tmp_path / name
    src.write_bytes(content)
    extra = ["--hardware", "T4"] if name.endswith(".mlir") else []
    args = ("predict", "--model", MODEL, "--input", str(src), *extra, "--tracking-uri", tiny_run["uri"])
    rc, _, stderr = cli_in_process(capsys, *args)
    err = stderr.strip().splitlines()
    assert rc == 2 and len(err) == 1 and msg in err[0], stderr[-2000:]
    assert err[0].startswith("costmodel: error: ") and len(err[0]) < 700 and "Traceback" not in stderr
    assert "Can not safely convert" not in err[0]
    if name.endswith(".mlir"):  # featurize reads through the same boundary
        rc, _, stderr = cli_in_process(capsys, "featurize", str(src), "--hardware", "T4")
        assert rc == 2 and stderr.count("\n") == 1 and msg in stderr, stderr[-2000:]


def test_calibrate_method_choices_are_the_models():
    """`costmodel calibrate --method` offers exactly models.physics.CALIBRATION_METHODS (the CLI names them itself so
    that parsing needs no model import)."""
    from models.physics import CALIBRATION_METHODS
    from pipelines.cli import build_parser

    calibrate = build_parser()._subparsers._group_actions[0].choices["calibrate"]
    method = next(a for a in calibrate._actions if a.dest == "method")
    assert tuple(method.choices) == CALIBRATION_METHODS and method.default == CALIBRATION_METHODS[0]


def test_a_token_model_given_float_inputs_says_to_give_int64_ids(capsys):
    """``--example-input 8x512 --dtype bfloat16`` on a token model: one line naming the integer form, before any
    model or store is read (not a torch.export trace)."""
    rc, out, err = cli_in_process(
        capsys, "predict", "--model", MODEL, "--torch", "tests.torch_models:tiny_lm", "--example-input", "8x512",
        "--dtype", "bfloat16", "--hardware", "H100-SXM",
    )  # fmt: skip
    assert rc == 2 and not out and len(err.strip().splitlines()) == 1
    assert err.startswith("costmodel: error: cannot capture TinyLM: token inputs need int64:8x512 ")


def test_the_readme_says_how_to_stop_mlflow_ui_and_that_way_stops_its_workers(tmp_path):
    """``mlflow ui`` runs its server as a child process (uvicorn) that outlives a killed ``mlflow`` parent; the
    README's way of stopping it (the process group) leaves nothing serving."""
    import signal
    import time
    import urllib.request

    from tests.servers import MLFLOW, free_port, wait_ready

    readme = (ROOT / "README.md").read_text()
    assert "kill -- -$(ps -o pgid= -p <pid> | tr -d ' ')" in readme and "Ctrl-C" in readme
    port = free_port()
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    with open(tmp_path / "ui.log", "w") as log:
        proc = subprocess.Popen(
            [MLFLOW, "ui", "--backend-store-uri", f"sqlite:///{tmp_path / 'ui.db'}", "--port", str(port), "-w", "1"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PATH": path},
            cwd=tmp_path,
            start_new_session=True,  # as an interactive shell starts a job: its own process group
        )
    try:
        wait_ready(f"http://127.0.0.1:{port}/health", proc, tmp_path / "ui.log")
        pgid = os.getpgid(proc.pid)
        children = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True).stdout.split()
        assert len(children) >= 2  # mlflow and the server it started
        subprocess.run(["sh", "-c", f"kill -- -$(ps -o pgid= -p {proc.pid} | tr -d ' ')"], check=True)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True).returncode == 0:
            assert time.monotonic() < deadline, "a process of mlflow ui's group still runs"
            time.sleep(0.5)
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
    finally:
        if proc.poll() is None or subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True).returncode == 0:
            os.killpg(proc.pid, signal.SIGKILL)
