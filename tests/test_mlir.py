"""MLIR feature stage: real torch-mlir exports, the real MLIR parser, the three encodings, the CLI."""

import json

import numpy as np
import pandas as pd
import pytest

from data.schema import validate as validate_rows
from features import get_encoder
from features.encoders import HIST_COLUMNS, NODE_FEATURES, WIDTH, build_vocab, load_vocab
from features.mlir import MlirStore, attach_mlir, export_workload, parse_mlir, to_generic, workloads_from_mlir
from features.tabular import FeatureError, TabularFeaturizer
from tests.conftest import run_cli

CASES = {
    "matmul": ({"m": 64, "n": 32, "k": 16}, "float32"),
    "linear": ({"m": 64, "n": 32, "k": 16}, "float16"),
    "bmm": ({"batch": 3, "m": 8, "n": 4, "k": 5}, "float32"),
    "conv2d": (
        {"batch": 2, "c_in": 3, "c_out": 8, "h": 14, "w": 12, "kernel": 3, "stride": 2, "padding": 1},
        "float32",
    ),
    "gelu": ({"m": 5, "n": 7}, "bfloat16"),
}

# hand-checked: 12 ops below the module (func, constant, empty, generic + its 3 body ops, matmul + the 3
# ops of its implicit body, return) and 8 SSA def-use edges
SMALL = """#map = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @main(%arg0: tensor<8x16xf32>, %w: tensor<16x16xf32>) -> tensor<8x16xf32> {
    %cst = arith.constant 1.000000e+00 : f32
    %0 = tensor.empty() : tensor<8x16xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<8x16xf32>) outs(%0 : tensor<8x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %3 = math.erf %in : f32
      %6 = arith.mulf %in, %3 : f32
      linalg.yield %6 : f32
    } -> tensor<8x16xf32>
    %2 = linalg.matmul ins(%1, %w : tensor<8x16xf32>, tensor<16x16xf32>) outs(%0 : tensor<8x16xf32>) -> tensor<8x16xf32>
    return %2 : tensor<8x16xf32>
  }
}
"""

# another dialect mix by hand: TOSA (registered, pretty form) + StableHLO (unregistered, generic form)
MIXED = """func.func @main(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = tosa.add %a, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "stablehlo.exponential"(%0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "stablehlo.add"(%1, %0) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}
"""


@pytest.fixture(scope="module")
def exported() -> dict[str, str]:
    return {op: export_workload(op, p, dt) for op, (p, dt) in CASES.items()}


def test_export_parse_graph_round_trip(exported, registry):
    graph = get_encoder("graph", registry=registry)
    for op, text in exported.items():
        assert "dense_resource" not in text, f"{op}: weights must be function arguments, not blobs"
        g = parse_mlir(text)
        names = {n.name for n in g.nodes}
        assert "func.func" in names and g.edges, op
        for src, dst in g.edges:  # def-use edges point forward in pre-order
            assert src < dst and src in g.nodes[dst].operand_defs
        data = graph.encode(text, "H100-SXM", CASES[op][1])
        assert data.x.shape == (len(g.nodes), NODE_FEATURES)
        assert data.edge_index.shape == (2, len(g.edges) + len(g.nesting)) and data.edge_attr.shape[1] == 2
        assert data.u.shape == (1, 10) and float(data.u[0, -1]) == 1.0
    assert "linalg.conv_2d_nchw_fchw" in {n.name for n in parse_mlir(exported["conv2d"]).nodes}
    # the same workload exports to the same text (content hash identifies the workload)
    assert export_workload("matmul", *CASES["matmul"]) == exported["matmul"]


def test_known_module_node_and_edge_counts():
    g = parse_mlir(SMALL)
    assert [n.name for n in g.nodes] == [
        "func.func",
        "arith.constant",
        "tensor.empty",
        "linalg.generic",
        "math.erf",
        "arith.mulf",
        "linalg.yield",
        "linalg.matmul",
        "arith.mulf",
        "arith.addf",
        "linalg.yield",
        "func.return",
    ]
    assert sorted(g.edges) == [(2, 3), (2, 7), (3, 7), (4, 5), (5, 6), (7, 11), (8, 9), (9, 10)]
    gen = g.nodes[3]
    assert gen.iterator_types == ("parallel", "parallel") and len(gen.attrs["indexing_maps"]) == 2
    assert gen.results[0].shape == (8, 16) and gen.results[0].elem == "f32" and gen.parent == 0


def test_generic_form_and_other_dialects_are_accepted(exported):
    for text in (SMALL, exported["conv2d"]):
        generic = to_generic(text)
        assert '"linalg.generic"' in generic or '"linalg.conv_2d_nchw_fchw"' in generic
        a, b = parse_mlir(text), parse_mlir(generic)
        assert [n.name for n in a.nodes] == [n.name for n in b.nodes] and a.edges == b.edges
        pd.testing.assert_frame_equal(workloads_from_mlir(text), workloads_from_mlir(generic))
    g = parse_mlir(MIXED)
    assert [n.name for n in g.nodes] == [
        "func.func",
        "tosa.add",
        "stablehlo.exponential",
        "stablehlo.add",
        "func.return",
    ]
    assert sorted(g.edges) == [(1, 2), (1, 3), (2, 3), (3, 4)]
    assert g.nodes[3].results[0].shape == (4, 8) and g.nodes[3].dialect == "stablehlo"


@pytest.mark.parametrize(
    "text,where",
    [
        (SMALL.replace("tensor.empty()", "tensor.empty("), "5:23"),  # syntax error
        (
            SMALL.replace(
                "%w : tensor<8x16xf32>, tensor<16x16xf32>", "%w : tensor<8x16xf32>, tensor<8x16xf32>"
            ).replace("%w: tensor<16x16xf32>", "%w: tensor<8x16xf32>"),
            "12:10",
        ),  # verifier: shapes disagree
        ('%0 = "stablehlo.add"(%a) : (f32) -> f32', "1:22"),  # undefined value
    ],
)
def test_malformed_mlir_names_line_and_column(text, where):
    with pytest.raises(FeatureError) as info:
        parse_mlir(text, "k.mlir")
    msg = str(info.value)
    assert msg.startswith(f"k.mlir:{where}: malformed MLIR: ") and "\n" not in msg, msg


def test_tokenizer_vocabulary_is_fixed_and_saved(exported):
    assert list(load_vocab()) == build_vocab(), "features/mlir_vocab.json is stale: run features.encoders.save_vocab()"
    vocab = load_vocab()
    assert vocab["<pad>"] == 0 and vocab["linalg.matmul"] == build_vocab().index("linalg.matmul")
    tok = get_encoder("tokens")
    a, b = tok.encode(exported["matmul"]), tok.encode(exported["matmul"])
    assert a["ids"].tolist() == b["ids"].tolist() and a["ids"][0] == vocab["<bos>"] and a["ids"][-1] == vocab["<eos>"]
    groups = tok.tokens(exported["matmul"])
    mm = next(g for g in groups if g[0] == "linalg.matmul")
    # result [64, 32] f32; operands [64,16], [16,32]: dims as log2 buckets
    assert mm[:5] == ["linalg.matmul", "<res>", "type:f32", "rank:2", "dim:2^6"] and "dim:2^4" in mm
    assert [g[0] for g in tok.tokens(MIXED)[1:3]] == ["tosa.add", "stablehlo.exponential"]
    other = '%0 = "stablehlo.cbrt"() : () -> f32\n%1 = "foo.bar"(%0) : (f32) -> f32'
    assert [g[0] for g in tok.tokens(other)] == ["stablehlo.*", "<unk>"] and a["per_node"].shape[1] == WIDTH


def test_layer_chain_goes_through_the_same_encoders(registry):
    layers = [
        {"d_in": 64, "d_out": 32, "prec": 8, "rf": 4, "strategy": "Latency"},
        {"d_in": 32, "d_out": 32, "prec": 8, "rf": 1},
        {"d_in": 32, "d_out": 5, "prec": 16, "rf": 2},
    ]
    data = get_encoder("graph").encode(layers)
    assert data.x.shape == (3, NODE_FEATURES) and data.edge_index.tolist() == [[0, 1], [1, 2]]
    assert float(data.u.abs().sum()) == 0.0  # no hardware spec: zeros, hw_known = 0
    toks = get_encoder("tokens")
    enc = toks.encode(layers)
    assert enc["per_node"].shape == (3, WIDTH)
    assert toks.tokens(layers)[0] == [
        "layer.dense",
        "<res>",
        "type:fixed",
        "bits:8",
        "rank:1",
        "dim:2^5",
        "<arg>",
        "type:fixed",
        "bits:8",
        "rank:1",
        "dim:2^6",
        "rf:2^2",
        "strategy:latency",
    ]
    with pytest.raises(FeatureError, match=r"input\[1\]: a layer needs integer d_in and d_out"):
        toks.encode([layers[0], {"d_in": 3}])


def test_workloads_from_mlir_recovers_shapes(exported):
    mm = workloads_from_mlir(exported["matmul"])
    assert mm[["op", "dtype", "m", "n", "k"]].to_dict("records") == [
        {"op": "matmul", "dtype": "float32", "m": 64, "n": 32, "k": 16}
    ]
    lin = workloads_from_mlir(exported["linear"])  # matmul (float16 behind the f32 upcast) + bias add
    assert list(lin["op"]) == ["matmul", "add"] and lin.loc[0, "dtype"] == "float16"
    assert (lin.loc[0, ["m", "n", "k"]].tolist()) == [64, 32, 16]
    conv = workloads_from_mlir(exported["conv2d"]).iloc[0]
    p = CASES["conv2d"][0]
    assert conv["op"] == "conv2d" and {k: int(conv[k]) for k in p} == p
    bmm = workloads_from_mlir(exported["bmm"]).iloc[0]
    assert [int(bmm[k]) for k in ("batch", "m", "n", "k")] == [3, 8, 4, 5]
    assert workloads_from_mlir(exported["gelu"])[["op", "dtype", "m", "n"]].values.tolist() == [
        ["gelu", "bfloat16", 5, 7]
    ]


def test_tabular_histogram_and_mlir_column_in_the_schema(tmp_path, registry):
    rows = pd.DataFrame(
        [
            {"op": "matmul", "m": 64, "n": 32, "k": 16, "dtype": "float32", "hardware": "T4"},
            {"op": "matmul", "m": 64, "n": 32, "k": 16, "dtype": "float32", "hardware": "L4"},  # same workload
            {"op": "add", "m": 3, "n": 4, "dtype": "float16", "hardware": "T4"},
        ]
    )
    store = MlirStore(tmp_path / "mlir")
    out, stats = attach_mlir(rows, store)
    assert stats["distinct"] == 2 and stats["exported"] == 2 and stats["failed"] == 0
    assert out.loc[0, "mlir_sha256"] == out.loc[1, "mlir_sha256"] != out.loc[2, "mlir_sha256"]
    assert len(list((tmp_path / "mlir").glob("*.mlir"))) == 2
    assert attach_mlir(rows, MlirStore(tmp_path / "mlir"))[1]["reused"] == 2  # index on disk: nothing re-exported
    full = out.assign(
        family="gemm",
        shape_id="x",
        backend="sim-roofline",
        status="ok",
        runtime_ms=1.0,
        flops=1.0,
        bytes=1.0,
        source="t",
        env="{}",
        timestamp=pd.Timestamp.now(tz="UTC"),
    )
    assert validate_rows(full)["mlir_sha256"].notna().all()

    X = get_encoder("tabular", registry=registry, store=store).transform(pd.concat([out, rows.iloc[[2]]]))
    base = TabularFeaturizer(registry).transform(pd.concat([out, rows.iloc[[2]]]))
    pd.testing.assert_frame_equal(X[list(base.columns)], base)  # plain tabular part unchanged
    assert list(X.columns[len(base.columns) :]) == list(HIST_COLUMNS)
    assert X.loc[0, "mlir_op_linalg_matmul"] == 1 and X.loc[2, "mlir_op_arith_addf"] == 1
    assert X.loc[3, "mlir_available"] == 0 and X.loc[3, list(HIST_COLUMNS)].sum() == 0


@pytest.mark.slow
def test_cli_featurize_and_its_error_line(exported, tmp_path):
    good, bad = tmp_path / "k.mlir", tmp_path / "bad.mlir"
    good.write_text(exported["matmul"])
    bad.write_text(SMALL.replace("tensor.empty()", "tensor.empty("))
    proc = run_cli("featurize", str(good), "--hardware", "H100-SXM")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["kernels"][0]["op"] == "matmul" and info["kernels"][0]["features"]["log2_flops"] == pytest.approx(
        np.log2(2 * 64 * 32 * 16 + 1)
    )
    assert info["op_histogram"]["mlir_op_linalg_matmul"] == 1 and info["graph"]["u"]["hw_sm_count"] == 132
    proc = run_cli("featurize", str(bad), "--hardware", "H100-SXM")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [f"costmodel: error: {bad}:5:23: malformed MLIR: expected ')'"]


@pytest.mark.slow
def test_make_fx_path_prints_what_torch_export_prints(exported):
    for op in ("linear", "conv2d"):
        p, dt = CASES[op]
        assert export_workload(op, p, dt, method="export") == exported[op], op


@pytest.mark.slow
def test_cli_predicts_an_mlir_file_kernel_by_kernel(tiny_run, exported, tmp_path):
    src = tmp_path / "linear.mlir"
    src.write_text(exported["linear"])
    proc = run_cli(
        "predict",
        "--model",
        "models:/costmodel-runtime@champion",
        "--input",
        str(src),
        "--hardware",
        "T4",
        "--tracking-uri",
        tiny_run["uri"],
    )
    assert proc.returncode == 0, proc.stderr
    out = pd.read_csv(pd.io.common.StringIO(proc.stdout))
    assert list(out["mlir_op"]) == ["linalg.matmul", "linalg.generic", "total"]
    assert list(out["op"][:2]) == ["matmul", "add"] and (out["runtime_ms"] > 0).all()
    assert out["sum_runtime_ms"].iloc[2] == pytest.approx(out["runtime_ms"].iloc[:2].sum())
    # the tiny main job stored one MLIR text per distinct workload measured here and its hash in each of those rows
    # (the shipped pack's replayed rows carry none: thousands of shapes, pipelines/run.py)
    rows = pd.read_parquet(next((tiny_run["out"] / "datasets").glob("*.parquet")))
    here = rows["backend"] != "reference"
    assert here.any() and rows.loc[here, "mlir_sha256"].notna().all() and rows.loc[~here, "mlir_sha256"].isna().all()
    assert {p.stem for p in (tiny_run["out"] / "mlir").glob("*.mlir")} == set(rows.loc[here, "mlir_sha256"])
    proc = run_cli(
        "predict",
        "--model",
        "models:/costmodel-runtime@champion",
        "--input",
        str(src),
        "--tracking-uri",
        tiny_run["uri"],
    )
    assert proc.returncode == 2 and proc.stderr.strip().endswith("linear.mlir: a .mlir input needs --hardware")


@pytest.mark.shared_data
def test_wa_hls4ml_rows_encode_as_layer_chains():
    from tests.conftest import SHARED

    rows = pd.read_csv(SHARED / "wa_hls4ml" / "results_resource.csv", nrows=40)
    toks, graph = get_encoder("tokens"), get_encoder("graph")
    per_layer = [
        toks.encode([r])["per_node"] for r in rows[["d_in", "d_out", "prec", "rf", "strategy"]].to_dict("records")
    ]
    assert all(t.shape == (1, WIDTH) for t in per_layer)
    distinct = rows[["d_in", "d_out", "prec", "rf", "strategy"]].drop_duplicates()
    # different configurations -> different token vectors (dims, bits and reuse factor are bucketed)
    assert len({tuple(per_layer[i][0].tolist()) for i in distinct.index}) > 1
    assert graph.encode([rows.iloc[0].to_dict()]).x.shape == (1, NODE_FEATURES)


def test_grouped_conv_has_its_own_mlir_and_recognised_groups():
    from data.workloads import validate
    from features.mlir.export import workload_key

    dense = dict(batch=2, c_in=8, c_out=8, h=8, w=8, kernel=3, stride=1, padding=1)
    assert workload_key("conv2d", validate("conv2d", dense), "float32") == workload_key(
        "conv2d", validate("conv2d", dense | {"groups": 1}), "float32"
    )
    assert workload_key("conv2d", validate("conv2d", dense | {"groups": 8}), "float32") != workload_key(
        "conv2d", validate("conv2d", dense), "float32"
    )
    for groups, mlir_op in ((8, "linalg.depthwise_conv_2d_nchw_chw"), (2, "linalg.conv_2d_ngchw_gfchw")):
        row = workloads_from_mlir(export_workload("conv2d", dense | {"groups": groups})).iloc[0]
        assert row["mlir_op"] == mlir_op and {k: int(row[k]) for k in dense} == dense and row["groups"] == groups
    pool = dict(batch=2, c_in=8, h=8, w=8, kernel=3, stride=2, padding=1)
    row = workloads_from_mlir(export_workload("max_pool2d", pool)).iloc[0]  # -inf pad read back as padding 1
    assert row["mlir_op"] == "linalg.pooling_nchw_max" and {k: int(row[k]) for k in pool} == pool


def test_several_modules_in_one_text_are_all_costed(exported):
    text = exported["matmul"] + "\n" + exported["conv2d"].replace("module", "module @second", 1)
    assert workloads_from_mlir(text)["op"].tolist() == ["matmul", "conv2d"]
