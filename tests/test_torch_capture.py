"""A PyTorch model -> its kernels as workloads: plain-PyTorch ResNet / MobileNet / ViT and Hugging Face BERT / GPT-2.

Every model is built under ``torch.device("meta")`` (no weights) and captured with torch.export; the sum of the
workloads' FLOPs (``data.workloads.count_cost``, FlopCounterMode on each workload) must equal FlopCounterMode on
the whole model, and no op may be left unmapped.
"""

import warnings

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from data.workloads import OPS, count_cost
from features.torch_capture import CaptureError, counted_flops, load_factory, parse_example_input, workloads_from_module
from tests import torch_models


def meta(factory, *args, **kwargs) -> nn.Module:
    with torch.device("meta"):
        return factory(*args, **kwargs)


def image(batch=2, size=32, dtype=torch.float32):
    return torch.empty(batch, 3, size, size, dtype=dtype, device="meta")


def params(row) -> dict:
    return {p: int(row[p]) for p in OPS[row["op"]].names if pd.notna(row.get(p))}


def costs(rows: pd.DataFrame) -> tuple[float, float]:
    c = [count_cost(r["op"], params(r), r["dtype"]) for _, r in rows.iterrows()]
    return sum(f for f, _ in c), sum(b for _, b in c)


def capture(model, inputs, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an unmapped op warns: fail on it
        rows, unmapped = workloads_from_module(model, inputs, **kw)
    assert unmapped == [] and rows.attrs["capture"] == "torch.export"
    return rows


@pytest.mark.parametrize("name", ["resnet", "mobilenet", "vit", "vit_sdpa"])
def test_plain_pytorch_models_map_fully_and_flops_match_the_flop_counter(name):
    model, x = meta(getattr(torch_models, name)), image()
    rows = capture(model, (x,))
    flops, nbytes = costs(rows)
    assert flops == counted_flops(model, (x,)) > 0
    assert nbytes > 0 and rows["dtype"].eq("float32").all()
    ops = rows["op"].value_counts()
    if name == "resnet":
        convs = rows[rows.op == "conv2d"]
        assert len(convs) == 1 + 2 * 3 + 2 and ops["batchnorm"] == len(convs)  # stem, 3 blocks, 2 projections
        stem = convs.iloc[0]
        assert (stem.kernel, stem.stride, stem.padding, stem.c_in, stem.h) == (7, 2, 3, 3, 32)
        pool = rows[rows.op == "max_pool2d"].iloc[0]
        assert (pool.kernel, pool.stride, pool.padding, pool.h, pool.c_in) == (3, 2, 1, 16, 16)
        # adaptive pool to 1x1 is the mean over h*w eager PyTorch launches; flatten is a view, fc the head
        assert rows.iloc[-2][["op", "m", "n"]].tolist() == ["mean", 2 * 64, 2 * 2] and rows.iloc[-1].op == "linear"
        assert ops["add"] == 3 and ops["relu"] == 1 + 2 * 3  # residual adds; ReLU(inplace) is the same kernel
    if name == "mobilenet":
        dw = rows[(rows.op == "conv2d") & rows.groups.notna()]
        assert len(dw) == 5 and (dw.groups == dw.c_in).all() and (dw.c_in == dw.c_out).all() and (dw.kernel == 3).all()
        assert ops["hardtanh"] == 11 and ops["add"] == 2  # ReLU6 = hardtanh(0, 6); two kept-shape residuals
        assert rows[rows.module == "features.4.conv.3"].groups.tolist() == [48]  # named by the submodule path
    if name in ("vit", "vit_sdpa"):
        assert ops["layernorm"] == 5 and ops["gelu"] == 2 and ops["linear"] == 9
        assert rows.iloc[1][["op", "m", "n"]].tolist() == ["copy", 2 * 5, 64]  # cat of the class token
    if name == "vit":  # q @ k^T: q and k are non-contiguous views of qkv: matmul copies them, then bmm
        attn = rows[rows.module == "blocks.0.attn"]
        assert attn.op.tolist() == ["copy", "copy", "bmm", "mul_scalar", "softmax", "copy", "bmm", "copy"]
        assert attn[attn.op == "bmm"][["batch", "m", "n", "k"]].values.tolist() == [[8, 5, 5, 16], [8, 5, 16, 5]]
    if name == "vit_sdpa":
        sd = rows[rows.op == "sdpa"]
        assert sd[["batch", "heads", "seq_len", "head_dim", "causal"]].values.tolist() == [[2, 4, 5, 16, 0]] * 2
        assert "bmm" not in ops and sd.kv_len.isna().all()  # kv_len = seq_len: the default, dropped


def test_views_cost_nothing_and_copies_are_kernels():
    class Shapes(nn.Module):
        def forward(self, x):
            a = x.reshape(4, 64).unsqueeze(0).expand(2, 4, 64)  # views: no kernel
            b = x.transpose(0, 1).reshape(-1)  # non-contiguous -> reshape copies
            c = x.t().contiguous()  # a copy
            d = x.contiguous()  # already contiguous: nothing
            return a.sum() + b.sum() + c.sum() + d.to(torch.float16).float().sum()  # two casts: two copies

    rows = capture(Shapes(), (torch.empty(16, 16, device="meta"),))
    assert rows.op.tolist() == ["copy", "copy", "sum", "sum", "add", "sum", "add", "copy", "copy", "sum", "add"]
    assert rows[rows.op == "copy"].target.tolist() == [
        "aten.clone.default",
        "aten.clone.default",
        "aten._to_copy.default",
        "aten._to_copy.default",
    ]
    assert rows.node.tolist()[:2] == ["reshape_1", "contiguous"]  # the first reshape and contiguous were views
    assert rows.iloc[2][["m", "n"]].tolist() == [1, 2 * 4 * 64]  # a full reduction: one row of all elements
    assert rows[rows.op == "copy"].dtype.tolist() == ["float32", "float32", "float32", "float16"]  # the source's


@pytest.mark.slow
@pytest.mark.parametrize("model_name", ["bert", "gpt2"])
def test_hugging_face_models_from_config(model_name):
    transformers = pytest.importorskip("transformers")
    if model_name == "bert":
        config = transformers.BertConfig(
            num_hidden_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            intermediate_size=128,
            vocab_size=1000,
            max_position_embeddings=64,
        )
        model = meta(transformers.BertModel, config)
    else:
        config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=64)
        model = meta(transformers.GPT2LMHeadModel, config)
    ids = torch.zeros(2, 16, dtype=torch.long, device="meta")
    rows = capture(model, (ids,))
    assert costs(rows)[0] == counted_flops(model, (ids,)) > 0
    sd = rows[rows.op == "sdpa"]
    assert sd[["batch", "heads", "seq_len", "head_dim"]].values.tolist() == [[2, 4, 16, 16]] * 2
    emb = rows[rows.op == "embedding"]
    assert emb.iloc[0][["m", "n", "k"]].tolist() == [32, 64, 1000]  # token ids [2, 16] into the vocabulary
    gemms = rows[rows.op.isin(["linear", "matmul"])]
    assert len(gemms) == (2 * 6 + 1 if model_name == "bert" else 2 * 4 + 1)  # + pooler / lm_head
    if model_name == "gpt2":  # GPT-2's Conv1D is addmm; the tied lm_head a bias-free linear -> matmul
        assert gemms.target.iloc[0] == "aten.addmm.default"
        assert gemms.iloc[-1][["op", "m", "n", "k"]].tolist() == ["matmul", 32, 1000, 64]
    # the same model in float16: every floating kernel in float16, matmul bytes halved, FLOPs unchanged
    half = capture(model, (ids,), dtype="float16")
    assert half.op.tolist() == rows.op.tolist() and half.dtype.eq("float16").all()
    assert costs(half)[0] == costs(rows)[0] and costs(half)[1] == pytest.approx(costs(rows)[1] / 2, rel=0.01)
    assert next(model.parameters()).dtype == torch.float32  # the caller's module is not cast


def test_an_unmapped_op_is_named_in_one_line_and_strict_raises():
    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.gn, self.conv = nn.GroupNorm(2, 8), nn.Conv1d(8, 8, 3)

        def forward(self, x):
            return self.conv(self.gn(x).flatten(2)) + torch.topk(x.flatten(1), 2).values.sum()

    x = torch.empty(2, 8, 4, 4, device="meta")
    with pytest.warns(UserWarning) as record:
        rows, unmapped = workloads_from_module(Odd(), (x,))
    lines = [str(w.message) for w in record]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert lines[0].startswith("3 op call(s) have no workload mapping (not costed): ")
    assert dict(unmapped) == {"aten.group_norm.default": 1, "aten.convolution.default (1-d)": 1, "aten.topk.default": 1}
    assert rows.op.tolist() == ["sum", "add_scalar"]  # what maps is still costed
    with pytest.raises(ValueError) as info:
        workloads_from_module(Odd(), (x,), strict=True)
    assert str(info.value) == lines[0]


def test_make_fx_fallback_when_export_fails(monkeypatch):
    def refuse(*a, **k):
        raise RuntimeError("export refused\nsecond line")

    monkeypatch.setattr(torch.export, "export", refuse)
    model = meta(torch_models.vit_sdpa)
    rows, unmapped = workloads_from_module(model, (image(),))
    assert rows.attrs["capture"] == "make_fx" and unmapped == []
    assert rows.attrs["capture_note"] == "torch.export failed (RuntimeError: export refused); traced with make_fx"
    assert costs(rows)[0] == counted_flops(model, (image(),))
    assert (rows.op == "sdpa").sum() == 2  # the pre-dispatch graph keeps attention whole too


def test_no_grad_region_and_kwargs_and_a_cpu_module():
    class Gated(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x, scale=None):
            with torch.no_grad():
                y = F.silu(self.fc(x))
            return torch.sigmoid(y) * scale

    model = Gated()  # real weights on the CPU: inputs follow the module; nothing is computed
    rows = capture(model, (torch.empty(4, 8, device="meta"),), kwargs={"scale": torch.ones(4, 8)})
    assert rows.op.tolist() == ["linear", "silu", "sigmoid", "mul"]
    assert model.training  # eval only while capturing


@pytest.mark.parametrize(
    "text,shape,dtype",
    [
        ("1x3x224x224", (1, 3, 224, 224), torch.float32),
        ("int64:2x128", (2, 128), torch.int64),
        ("float16:8", (8,), torch.float16),
    ],
)
def test_example_input_specs(text, shape, dtype):
    t = parse_example_input(text)
    assert tuple(t.shape) == shape and t.dtype == dtype and t.device.type == "meta"


@pytest.mark.parametrize(
    "text,msg",
    [
        ("1x3x", "expected a shape like 1x3x224x224"),
        ("int7:4", "unknown dtype 'int7'"),
        ("0x4", "every dimension must be >= 1"),
    ],
)
def test_bad_example_input_is_one_line(text, msg):
    with pytest.raises(CaptureError, match=msg):
        parse_example_input(text)


def test_factory_loader_builds_on_meta_and_names_problems():
    model = load_factory("tests.torch_models:resnet")
    assert all(p.device.type == "meta" for p in model.parameters())
    for spec, msg in [
        ("tests.torch_models", "expected pkg.module:factory"),
        ("tests.no_such_module:f", "cannot import 'tests.no_such_module' (ModuleNotFoundError"),
        ("tests.torch_models:nope", "has no attribute 'nope'"),
        ("tests.torch_models:not_a_module", "returned int, not a torch.nn.Module"),
    ]:
        with pytest.raises(CaptureError, match=msg.replace("(", r"\(")):
            load_factory(spec)


# ------------------------------------------------------------------------------------------------ CLI + Python call
@pytest.mark.parametrize(
    "args,msg",
    [
        (["--torch", "tests.torch_models:resnet", "--hardware", "T4"], "--torch needs --example-input"),
        (["--torch", "tests.torch_models:resnet", "--example-input", "1x3x32x32"], "--torch needs --hardware"),
        (
            ["--torch", "tests.torch_models:nope", "--example-input", "1x3x32x32", "--hardware", "T4"],
            "--torch tests.torch_models:nope: module 'tests.torch_models' has no attribute 'nope'",
        ),
        (
            ["--torch", "tests.torch_models:resnet", "--example-input", "1x3xx", "--hardware", "T4"],
            "--example-input '1x3xx': expected a shape like 1x3x224x224 or dtype:shape like int64:1x128",
        ),
        (["--torch", "tests.torch_models:resnet", "--input", "x.csv"], "give exactly one of --input"),
        (
            [
                "--torch",
                "tests.torch_models:resnet",
                "--example-input",
                "1x3x32x32",
                "--hardware",
                "T4",
                "--dtype",
                "int8",
            ],
            "unknown dtype 'int8'; known: float32, tf32, float16, bfloat16",
        ),
        (["--input", "x.csv", "--dim", "%arg0:0=4"], "--dim binds dynamic sizes of an .mlir input"),
    ],
)
def test_cli_torch_errors_are_one_line(args, msg, tmp_path, capsys):
    from pipelines.cli import main

    code = main(["predict", "--model", "models:/none@champion", "--tracking-uri", f"sqlite:///{tmp_path}/m.db", *args])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1
    assert lines[0].startswith(f"costmodel: error: {msg}")


@pytest.mark.slow
def test_cli_and_python_call_cost_a_resnet_and_gpt2(tiny_run, tmp_path):
    """Done when: a ResNet-like nn.Module and a transformers GPT-2 costed from one CLI command and one Python call."""
    import mlflow

    from models.networks_api import predict_module
    from tests.conftest import run_cli

    uri, name = tiny_run["uri"], "models:/costmodel-runtime@champion"
    proc = run_cli(
        "predict",
        "--model",
        name,
        "--tracking-uri",
        uri,
        "--torch",
        "tests.torch_models:resnet",
        "--example-input",
        "2x3x32x32",
        "--hardware",
        "T4",
    )
    assert proc.returncode == 0, proc.stderr
    out = pd.read_csv(pd.io.common.StringIO(proc.stdout))
    assert out["node"].iloc[-1] == "total" and (out["runtime_ms"] > 0).all()
    kernels = out.iloc[:-1]
    assert kernels["op"].value_counts()["conv2d"] == 9 and (kernels["hardware"] == "T4").all()
    assert out["sum_runtime_ms"].iloc[-1] == pytest.approx(kernels["runtime_ms"].sum())  # the total: eager composed
    assert out["runtime_ms_hi"].iloc[-1] >= out["runtime_ms"].iloc[-1] and out["execution"].iloc[-1] == "eager"

    mlflow.set_tracking_uri(uri)
    model = meta(torch_models.ResNet)
    res = predict_module(model, image(), name, hardware="T4")
    assert res.capture == "torch.export" and res.unmapped == []
    np_cli = kernels["runtime_ms"].to_numpy()
    assert res.kernels["runtime_ms"].to_numpy() == pytest.approx(np_cli)  # the CLI and the Python call agree
    assert res.total["runtime_ms"] == pytest.approx(out["runtime_ms"].iloc[-1])

    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=64)
    gpt2 = meta(transformers.GPT2LMHeadModel, config)
    loaded = mlflow.pyfunc.load_model(name)  # a loaded pyfunc works as well as a URI
    res = predict_module(
        gpt2, torch.zeros(1, 32, dtype=torch.long, device="meta"), loaded, hardware="H100-SXM", dtype="float16"
    )
    assert res.unmapped == [] and (res.kernels["dtype"] == "float16").all()
    assert (res.kernels["op"] == "sdpa").sum() == 2 and res.total["runtime_ms"] > 0
    assert res.total["sum_runtime_ms"] == pytest.approx(res.kernels["runtime_ms"].sum())
    assert set(res.kernels["module"]) >= {"transformer.h.0.attn", "lm_head"}  # per-layer attribution


def test_network_total_rules():
    from models.networks_api import total

    preds = pd.DataFrame(
        {
            "runtime_ms": [1.0, 3.0],
            "runtime_ms_lo": [0.5, 2.0],
            "runtime_ms_hi": [2.0, 4.0],
            "energy_j": [0.1, 0.9],
            "power_w": [100.0, 300.0],
            "power_w_lo": [50.0, 250.0],
            "power_w_hi": [150.0, 350.0],
            "peak_mem_bytes": [10.0, 30.0],
            "network_runtime_ms": [float("nan")] * 2,
        }
    )
    t = total(preds)
    assert t["runtime_ms"] == 4.0 and t["runtime_ms_lo"] == 2.5 and t["runtime_ms_hi"] == 6.0  # ends summed
    assert t["energy_j"] == pytest.approx(1.0) and t["power_w"] == pytest.approx(1.0 / 4e-3)  # energy / runtime
    assert t["power_w_lo"] == pytest.approx((50 * 1 + 250 * 3) / 4)  # runtime-weighted
    assert t["peak_mem_bytes"] == 30.0 and "network_runtime_ms" not in t


def test_a_model_logged_before_a_shape_column_is_refused():
    from models.networks_api import check_signature

    class Schema:
        def __init__(self, names):
            self.names = names

        def input_names(self):
            return self.names

    class Meta:
        def __init__(self, names):
            self.schema = Schema(names)

        def get_input_schema(self):
            return self.schema

    class Old:
        metadata = Meta(["op", "hardware", "dtype", "batch", "c_in", "c_out", "h", "w", "kernel", "stride", "padding"])

    rows = capture(meta(torch_models.mobilenet), (image(),))
    from features.tabular import FeatureError

    with pytest.raises(FeatureError, match=r"^old was logged without the shape column\(s\) m, n, k, groups that"):
        check_signature(rows, Old(), "old")
    Old.metadata = Meta(["mlir", "hardware"])
    with pytest.raises(FeatureError, match="is a whole-network model"):
        check_signature(rows, Old(), "net")
