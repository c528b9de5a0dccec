"""MLIR that no one here wrote: StableHLO from JAX (pretty and generic form) and IREE-style linalg on dynamic shapes.

JAX (a dev dependency) writes the StableHLO in the test; ``tests/data/jax_cnn_generic.mlir`` is a JAX-written
generic-form module committed as text, read here with JAX blocked; ``tests/data/mlp_linalg_dynamic.mlir`` is an MLP
on ``?x?`` tensors in the style of IREE's ``samples/models/mlp_linalg.mlir``.
"""

import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest

from data.workloads import OPS, count_cost
from features.mlir import parse_mlir, workloads_from_mlir
from features.mlir.dynamic import parse_dim_specs
from features.mlir.graph import decode_mlir
from features.tabular import FeatureError

DATA = Path(__file__).parent / "data"
jax = pytest.importorskip("jax")  # in the dev extra: installed wherever the tests run
jnp, lax = jax.numpy, jax.lax
S = jax.ShapeDtypeStruct
f32 = jnp.float32


def rows(df: pd.DataFrame) -> list[dict]:
    """Workload rows without the graph-node index and the columns an op does not use."""
    return [{k: v for k, v in r.items() if k != "node" and not pd.isna(v)} for r in df.to_dict("records")]


def flops(df: pd.DataFrame) -> float:
    return sum(count_cost(r["op"], {p: r[p] for p in OPS[r["op"]].names if p in r}, r["dtype"])[0] for r in rows(df))


def lowered(fn, *shapes):
    low = jax.jit(fn).lower(*shapes)
    return low, low.as_text(), low.compiler_ir("stablehlo").operation.get_asm(print_generic_op_form=True)


def quiet(text, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing may be left unmapped
        return workloads_from_mlir(text, **kw)


def conv_nhwc(x, w):
    return lax.conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def conv_nchw_grouped(x, w):
    return lax.conv_general_dilated(
        x,
        w,
        (1, 1),
        ((1, 1), (1, 1)),
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
        feature_group_count=4,
        rhs_dilation=(2, 2),
    )


def mlp(x, w1, b1, w2):
    return jax.nn.relu(x @ w1 + b1) @ w2


CASES = {  # name: (function, argument shapes, expected rows)
    "matmul": (lambda a, b: a @ b, (S((64, 32), f32), S((32, 16), f32)), [{"op": "matmul", "m": 64, "n": 16, "k": 32}]),
    "attention_scores": (
        lambda q, k: jnp.einsum("bhqd,bhkd->bhqk", q, k),
        (S((2, 4, 8, 16), f32),) * 2,
        [{"op": "bmm", "batch": 8, "m": 8, "n": 8, "k": 16}],
    ),
    "conv_nhwc": (
        conv_nhwc,
        (S((2, 16, 16, 8), f32), S((3, 3, 8, 16), f32)),  # SAME, stride 2: pads (0, 1)
        [
            {
                "op": "conv2d",
                "batch": 2,
                "c_in": 8,
                "c_out": 16,
                "h": 17,
                "w": 17,
                "kernel": 3,
                "stride": 2,
                "padding": 0,
            }
        ],
    ),
    "conv_nchw_grouped": (
        conv_nchw_grouped,
        (S((2, 8, 16, 16), f32), S((16, 2, 3, 3), f32)),
        [
            {
                "op": "conv2d",
                "batch": 2,
                "c_in": 8,
                "c_out": 16,
                "h": 16,
                "w": 16,
                "kernel": 3,
                "stride": 1,
                "padding": 1,
                "groups": 4,
                "dilation": 2,
            }
        ],
    ),
    "reduction": (
        lambda x: jnp.max(x, axis=-1),
        (S((8, 128), jnp.bfloat16),),
        [{"op": "max", "m": 8, "n": 128, "dtype": "bfloat16"}],
    ),
    "mlp": (
        mlp,
        (S((8, 32), f32), S((32, 64), f32), S((64,), f32), S((64, 10), f32)),
        [
            {"op": "matmul", "m": 8, "n": 64, "k": 32},
            {"op": "add_scalar", "m": 8, "n": 64},  # bias broadcast
            {"op": "ewise", "m": 8, "n": 64, "inputs": 1},  # relu = max(x, broadcast 0), in a private @relu
            {"op": "matmul", "m": 8, "n": 10, "k": 64},
        ],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_jax_stablehlo_pretty_and_generic_forms(name):
    fn, shapes, expected = CASES[name]
    low, pretty, generic = lowered(fn, *shapes)
    assert "stablehlo." in pretty and '"stablehlo.' in generic
    a, b = quiet(pretty, where=f"{name}.mlir"), quiet(generic)
    pd.testing.assert_frame_equal(a, b)
    got = rows(a)
    assert [{k: v for k, v in r.items() if k != "mlir_op"} for r in got] == [
        {"dtype": "float32", **e} for e in expected
    ]
    if name in ("matmul", "attention_scores"):  # XLA's own cost analysis counts the same 2 * batch * m * n * k
        assert flops(a) == low.cost_analysis()["flops"]


def test_jax_written_generic_fixture_reads_without_jax(monkeypatch):
    for mod in [m for m in sys.modules if m == "jax" or m.startswith(("jax.", "jaxlib"))]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "jax", None)  # any import of jax now fails
    monkeypatch.setitem(sys.modules, "jaxlib", None)
    df = quiet((DATA / "jax_cnn_generic.mlir").read_text(), where="jax_cnn_generic.mlir")
    got = rows(df)
    assert [r["mlir_op"] for r in got] == [
        "stablehlo.convolution",
        "stablehlo.add",
        "stablehlo.maximum",
        "stablehlo.convolution",
        "stablehlo.reduce_window",
        "stablehlo.reduce",
        "stablehlo.divide",
        "stablehlo.dot_general",
    ]
    conv, _, relu, dw, pool, mean, _, head = got
    # 3x3/2 SAME on 32: pads (0, 1) -> h = 33 with padding 0 keeps the 16x16 output
    assert {k: conv[k] for k in ("batch", "c_in", "c_out", "h", "kernel", "stride", "padding")} == dict(
        batch=4, c_in=3, c_out=16, h=33, kernel=3, stride=2, padding=0
    )
    assert relu["op"] == "ewise" and relu["m"] == 4 * 16 * 16  # the private @relu, expanded at its call
    assert (dw["groups"], dw["c_in"], dw["c_out"], dw["padding"]) == (16, 16, 16, 1)  # depthwise
    assert flops(df.iloc[[3]]) == 2 * 4 * 16 * 16 * 16 * 1 * 9  # one input channel per group
    assert (pool["op"], pool["kernel"], pool["stride"], pool["h"]) == ("max_pool2d", 3, 2, 17)
    assert (mean["op"], mean["m"], mean["n"]) == ("sum", 4 * 16, 8 * 8)
    assert (head["op"], head["m"], head["n"], head["k"]) == ("matmul", 4, 10, 16)


def test_pretty_stablehlo_without_jax_is_one_error_line(monkeypatch):
    _, pretty, _ = lowered(lambda a: jnp.tanh(a), S((4, 4), f32))
    for mod in [m for m in sys.modules if m == "jax" or m.startswith(("jax.", "jaxlib"))]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "jax", None)
    with pytest.raises(FeatureError) as info:
        parse_mlir(pretty + "// no jax\n", "t.mlir")
    assert str(info.value).startswith("t.mlir:") and "pretty-form stablehlo needs jax" in str(info.value)
    assert "\n" not in str(info.value)


def test_jax_shape_polymorphic_export_binds_its_dynamic_dim():
    (b,) = jax.export.symbolic_shape("b")
    exp = jax.export.export(jax.jit(lambda x, w: jnp.tanh(x @ w)))(S((b, 32), f32), S((32, 16), f32))
    text = exp.mlir_module()
    assert "tensor<?x32xf32>" in text
    with pytest.raises(FeatureError) as info:
        workloads_from_mlir(text, "poly.mlir")
    assert str(info.value) == "poly.mlir: %arg0 dim 0 is dynamic: bind it with --dim %arg0:0=<size>"
    got = rows(quiet(text, dims={"%arg0:0": 8}))  # shape assertions compute nothing; the callee is expanded
    assert [(r["op"], r["m"], r["n"], r.get("k")) for r in got] == [("matmul", 8, 16, 32), ("tanh", 8, 16, None)]


# ------------------------------------------------------------------------------------ IREE-style dynamic linalg
IREE = (DATA / "mlp_linalg_dynamic.mlir").read_text()


def test_iree_style_dynamic_linalg_needs_every_size_bound():
    with pytest.raises(FeatureError) as info:
        workloads_from_mlir(IREE, "mlp.mlir", dims={"%lhs": "1024x512", "%bias:0": 256})
    assert str(info.value) == (
        "mlp.mlir: %rhs dim 0, %rhs dim 1 are dynamic: bind them with --dim %rhs:0=<size> --dim %rhs:1=<size>"
    )
    with pytest.raises(FeatureError, match=r"^mlp.mlir: %rhs dim 1 is dynamic: bind it with --dim %rhs:1=<size>$"):
        workloads_from_mlir(IREE, "mlp.mlir", dims={"%lhs": "1024x512", "%rhs:0": 512, "%bias:0": 256})


@pytest.mark.parametrize(
    "dims",
    [
        {"%lhs": "1024x512", "%rhs": "512x256", "%bias": "256"},  # whole shapes
        {"%lhs:0": 1024, "lhs:1": 512, "%rhs:0": 512, "%rhs:1": 256, "%bias:0": 256},  # one dim each; % optional
        {"%arg0": (1024, 512), "%arg1": [512, 256], "%arg2:0": 256},  # by position
        parse_dim_specs(["%lhs=1024x512", "%rhs:0=512", "%rhs:1=256", "%bias=256"]),  # the CLI's --dim strings
    ],
)
def test_iree_style_dynamic_linalg_bound(dims):
    got = rows(quiet(IREE, dims=dims))
    # sizes flow through tensor.dim / tensor.empty / linalg.fill into the matmul and the generic
    assert got == [
        {"mlir_op": "linalg.matmul", "op": "matmul", "dtype": "float32", "m": 1024, "n": 256, "k": 512},
        {"mlir_op": "linalg.generic", "op": "add", "dtype": "float32", "m": 1024, "n": 256},
    ]


@pytest.mark.parametrize(
    "dims,msg",
    [
        ({"%x:0": 3}, "--dim %x:0: no argument %x in @mlp (arguments: %lhs, %rhs, %bias)"),
        ({"%lhs:2": 3}, "--dim %lhs:2: %lhs has rank 2 (dims 0..1)"),
        ({"%lhs:0": 0}, "--dim %lhs:0=0: the size must be an integer >= 1"),
        ({"%lhs": "4x5x6"}, "--dim %lhs=4x5x6: %lhs has rank 2, the shape has 3"),
        (
            {"%lhs": "1024x512", "%rhs": "300x256", "%bias": "256"},
            "mlp.mlir: the bound sizes do not fit the module: 'linalg.matmul' op inferred input/output operand #1 has "
            "shape's dimension #0 to be 512, but found 300",
        ),
    ],
)
def test_bad_bindings_are_one_line(dims, msg):
    with pytest.raises(FeatureError) as info:
        workloads_from_mlir(IREE, "mlp.mlir", dims=dims)
    assert str(info.value) == msg


def test_static_dims_can_be_bound_only_to_their_size():
    _, pretty, _ = lowered(lambda a, b: a @ b, S((64, 32), f32), S((32, 16), f32))
    assert rows(quiet(pretty, dims={"%arg0:0": 64}))[0]["m"] == 64
    with pytest.raises(FeatureError, match=r"--dim %arg0:0: %arg0 dim 0 is static 64, not 65"):
        workloads_from_mlir(pretty, dims={"%arg0:0": 65})


@pytest.mark.parametrize("spec", ["%a", "%a:x=3", "%a=3xx", "%a:0=-1"])
def test_bad_dim_specs(spec):
    with pytest.raises(FeatureError, match=r"^--dim "):
        parse_dim_specs([spec])


def test_unmapped_ops_are_named_not_dropped():
    _, pretty, _ = lowered(lambda x: jnp.sort(x, axis=-1) @ x.T, S((8, 8), f32))
    with pytest.warns(UserWarning) as record:
        df = workloads_from_mlir(pretty, "sort.mlir")
    assert [str(w.message) for w in record] == [
        "sort.mlir: 1 MLIR op(s) have no workload mapping (not costed): stablehlo.sort x1"
    ]
    assert df.attrs["unmapped"] == {"stablehlo.sort": 1} and list(df["op"]) == ["matmul"]
    with pytest.raises(FeatureError, match="stablehlo.sort x1"):
        workloads_from_mlir(pretty, "sort.mlir", strict=True)


def test_non_utf8_bytes_are_one_error_line():
    with pytest.raises(FeatureError) as info:
        decode_mlir(b"func.func @f() {\n  \xff\xfe\n}", "bad.mlir")
    assert str(info.value) == "bad.mlir: not UTF-8 text (byte 0xff at offset 19, line 2): MLIR files are UTF-8"
    assert decode_mlir("// ü\n".encode(), "ok.mlir") == "// ü\n"


# ------------------------------------------------------------------------------------------------ CLI
def cli(*args, capsys):
    from pipelines.cli import main

    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err.strip().splitlines()


@pytest.mark.slow
def test_cli_costs_foreign_mlir_and_names_problems(tiny_run, tmp_path, capsys):
    base = (
        "predict",
        "--model",
        "models:/costmodel-runtime@champion",
        "--tracking-uri",
        tiny_run["uri"],
        "--hardware",
        "H100-SXM",
    )
    # IREE-style dynamic linalg: sizes bound on the command line (one dim, or a whole argument)
    code, out, err = cli(
        *base,
        "--input",
        str(DATA / "mlp_linalg_dynamic.mlir"),
        "--dim",
        "%lhs=1024x512",
        "--dim",
        "%rhs:0=512",
        "--dim",
        "%rhs:1=256",
        "--dim",
        "%bias:0=256",
        capsys=capsys,
    )
    assert code == 0, err
    out = pd.read_csv(pd.io.common.StringIO(out))
    assert list(out["mlir_op"]) == ["linalg.matmul", "linalg.generic", "total"] and (out["runtime_ms"] > 0).all()
    assert out["sum_runtime_ms"].iloc[-1] == pytest.approx(out["runtime_ms"].iloc[:-1].sum())
    code, out, err = cli(
        *base, "--input", str(DATA / "mlp_linalg_dynamic.mlir"), "--dim", "%lhs=1024x512", capsys=capsys
    )
    assert code == 2 and err == [
        f"costmodel: error: {DATA / 'mlp_linalg_dynamic.mlir'}: %rhs dim 0, %rhs dim 1, %bias dim 0 are dynamic: "
        "bind them with --dim %rhs:0=<size> --dim %rhs:1=<size> --dim %bias:0=<size>"
    ]
    # the JAX-written generic StableHLO: every kernel costed
    code, out, err = cli(*base, "--input", str(DATA / "jax_cnn_generic.mlir"), "--format", "jsonl", capsys=capsys)
    # only the model of record's domain line may be printed (the tiny champion never saw sizes like these)
    assert code == 0 and all("outside the training domain" in line for line in err), err
    out = pd.read_json(pd.io.common.StringIO(out), lines=True)
    assert out["mlir_op"].tolist()[-1] == "total" and out["op"].tolist()[:1] == ["conv2d"] and len(out) == 9
    # pretty StableHLO with an op that has no mapping: costed, and the op named on stderr (--strict: an error)
    src = tmp_path / "sort.mlir"
    src.write_text(lowered(lambda x: jnp.sort(x, axis=-1) @ x.T, S((8, 8), f32))[1])
    code, out, err = cli(*base, "--input", str(src), capsys=capsys)
    assert code == 0 and err[0] == (
        f"costmodel: warning: {src}: 1 MLIR op(s) have no workload mapping (not costed): stablehlo.sort x1"
    )
    assert all("outside the training domain" in line for line in err[1:]), err
    code, out, err = cli(*base, "--input", str(src), "--strict", capsys=capsys)
    assert code == 2 and len(err) == 1 and "stablehlo.sort x1" in err[0]


def test_cli_non_utf8_mlir_is_one_error_line(tmp_path, capsys):
    bad = tmp_path / "bad.mlir"
    bad.write_bytes(b"func.func @f() {\n\xff}\n")
    code, out, err = cli(
        "predict",
        "--model",
        "models:/none@champion",
        "--input",
        str(bad),
        "--hardware",
        "T4",
        "--tracking-uri",
        f"sqlite:///{tmp_path}/m.db",
        capsys=capsys,
    )
    assert (
        code == 2
        and out == ""
        and err
        == [f"costmodel: error: {bad.name}: not UTF-8 text (byte 0xff at offset 17, line 2): MLIR files are UTF-8"]
    )


def test_jax_export_bytecode_is_read():
    exp = jax.export.export(jax.jit(lambda a, b: jnp.tanh(a @ b)))(S((4, 8), f32), S((8, 2), f32))
    data = exp.mlir_module_serialized  # a StableHLO portable artifact (VHLO bytecode)
    assert data[:4] == b"ML\xefR"
    got = rows(quiet(decode_mlir(data, "jax.mlirbc")))
    assert [(r["op"], r["m"], r["n"], r.get("k")) for r in got] == [("matmul", 4, 2, 8), ("tanh", 4, 2, None)]
