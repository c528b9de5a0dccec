"""DeepBench importer on the real workbooks: sections found by title on every sheet, shape / transpose conventions on
rows mapped by hand, the source's TERAFLOPS column against our flops / time, skipped rows counted, one clear error
for an unknown GPU or section, and the hardware specs the workbooks need."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from data.importers import DatasetError
from data.schema import COLUMNS
from tests.conftest import SHARED

pytestmark = pytest.mark.skipif(not (SHARED / "deepbench").exists(), reason="../shared/data/deepbench not present")

TRAIN_GPU_SHEETS = 13  # 10 GPU workbooks: 10 FP32 sheets + V100 / T4 mixed fp16 + P100 pseudo fp16


@pytest.fixture(scope="module")
def imported():
    from data.importers.deepbench import read_all

    return read_all(SHARED)


def _meta(df):
    return [json.loads(m) for m in df["meta"]]


def _row(df, file, sheet, row):
    hit = [i for i, m in zip(df.index, _meta(df)) if (m["file"], m["sheet"], m["row"]) == (file, sheet, row)]
    assert len(hit) == 1, (file, sheet, row, hit)
    return df.loc[hit[0]]


@pytest.mark.filterwarnings("ignore:Unknown extension:UserWarning")
def test_sections_found_by_title_on_every_sheet():
    import openpyxl

    from data.importers.deepbench import PRECISIONS, _name, sections, workbooks

    books = workbooks(SHARED)
    assert len(books) == 15
    for path in books:
        wb = openpyxl.load_workbook(path, read_only=True, data_only=True)
        sheets = [ws for ws in wb.worksheets if ws.title != "Specs"]
        assert sheets and "Specs" in wb.sheetnames
        for ws in sheets:
            precision, secs = sections(list(ws.iter_rows(values_only=True)), path.name)
            assert _name(precision) in PRECISIONS, (path.name, precision)
            kinds = [s.kind for s in secs]
            assert kinds[:2] == ["gemm", "sparse"] if "inference" in str(path) else kinds[0] == "gemm", kinds
            gemm, conv = (next(s for s in secs if s.kind == k) for k in ("gemm", "conv"))
            assert {"m", "n", "k", "a transpose", "b transpose", "time", "teraflops"} <= set(gemm.columns)
            assert {"w", "h", "c", "n", "k", "r", "s", "pad_h", "pad_w", "forward"} <= set(conv.columns)
            assert "rnn" in kinds
        wb.close()


def test_sections_do_not_depend_on_position():
    """Shifted rows and reordered conv columns (as between real files) give the same sections and values."""
    from data.importers.deepbench import sections

    a = [
        ("Precision", "Float"),
        (),
        (
            "Dense Matrix Multiplication",
            None,
            "M",
            "N",
            "K",
            "A Transpose",
            "B Transpose",
            None,
            "Time (msec)",
            "TERAFLOPS",
        ),
        (None, "app", 64, 16, 32, "N", "T", None, 0.01, 0.0065536),
        (),
        ("Convolution",),
        (
            None,
            None,
            "W",
            "H",
            "C",
            "N",
            "K ",
            "S (Filter width)",
            "R (Filter height)",
            "pad_w",
            "pad_h",
            "Horizontal stride",
            "Vertical stride",
            "Forward (msec)",
        ),
        (None, None, 7, 7, 8, 2, 16, 3, 3, 1, 1, 1, 1, 0.02),
        (),
    ]
    b = [
        ("Precision", "Float"),
        (),
        (),
        (),
        *a[2:5],  # two more blank rows, as in the V100 / T4 workbooks
        ("Convolution",),
        (
            None,
            None,
            "W",
            "H",
            "C",
            "N",
            "K ",
            "R",
            "S",
            "pad_h",
            "pad_w",
            "Vertical stride",
            "Horizontal stride",
            "Forward (msec)",
        ),
        (None, None, 7, 7, 8, 2, 16, 3, 3, 1, 1, 1, 1, 0.02),
    ]
    for rows in (a, b):
        precision, secs = sections(rows, "synthetic")
        assert precision == "Float" and [s.kind for s in secs] == ["gemm", "conv"]
        gemm, conv = secs
        assert [gemm.rows[0][1][gemm.columns[c]] for c in ("m", "n", "k", "time")] == [64, 16, 32, 0.01]
        assert [conv.rows[0][1][conv.columns[c]] for c in ("w", "h", "n", "k", "s", "r", "forward")] == [
            7,
            7,
            2,
            16,
            3,
            3,
            0.02,
        ]
    with pytest.raises(DatasetError, match="unknown section title 'Winograd Layers'"):
        sections([("Precision", "Float"), ("Winograd Layers", None, "M")], "synthetic")


def test_known_rows_mapped_by_hand(imported):
    df, _ = imported
    assert list(df.columns) == COLUMNS
    assert df["source"].eq("deepbench@da81ba7").all() and df["backend"].eq("import").all()
    assert df["timing_method"].eq("host_loop_mean").all() and df["status"].eq("ok").all()
    v100 = "deepbench/train/DeepBench_NV_V100.xlsx"
    # Excel row 5: DeepSpeech M=1760 N=16 K=1760 N N 0.038 ms -> matmul m = N = 16, n = M = 1760, k = 1760
    r = _row(df, v100, "Results FP32", 5)
    assert (r["op"], r["m"], r["n"], r["k"], r["dtype"], r["hardware"]) == (
        "matmul",
        16,
        1760,
        1760,
        "float32",
        "V100-SXM2-16GB",
    )
    assert r["runtime_ms"] == 0.038 and r["flops"] == 2 * 16 * 1760 * 1760
    assert json.loads(r["config"]) == {"transpose_a": 0, "transpose_b": 0}
    assert json.loads(r["meta"])["application"] == "DeepSpeech"
    # T N (A transposed): nn.Linear's weight layout -> our B stored [n, k]
    r = _row(df, v100, "Results FP32", 25)
    assert (r["m"], r["n"], r["k"], r["runtime_ms"]) == (16, 1760, 1760, 0.037)
    assert json.loads(r["config"]) == {"transpose_a": 0, "transpose_b": 1}
    # N T (B transposed) -> our A stored [k, m]; the note column kept in meta
    r = _row(df, v100, "Results FP32", 45)
    assert (r["m"], r["n"], r["k"]) == (7133, 1760, 1760)
    assert json.loads(r["config"]) == {"transpose_a": 1, "transpose_b": 0}
    assert json.loads(r["meta"])["note"] == "(both matrices are 2560x7133)"
    # the tensor-core sheet: same shape, float16
    r = _row(df, v100, "Results - FP16 ip, Mixed math", 5)
    assert (r["dtype"], r["m"], r["n"], r["k"]) == ("float16", 16, 1760, 1760)
    # Excel row 266: Resnet W=H=7, C=512, N=16, K=512, 3x3, pad 1, stride 1, fwd 0.273 / bwd 0.267, 0.178 ms
    r = _row(df, v100, "Results FP32", 266)
    assert (r["op"], r["batch"], r["c_in"], r["c_out"], r["h"], r["w"], r["kernel"], r["stride"], r["padding"]) == (
        "conv2d",
        16,
        512,
        512,
        7,
        7,
        3,
        1,
        1,
    )
    assert r["runtime_ms"] == 0.273 and r["flops"] == 2 * 16 * 512 * 7 * 7 * 512 * 3 * 3
    m = json.loads(r["meta"])
    assert (m["bwd_data_ms"], m["bwd_filter_ms"], m["algorithm"]) == (0.267, 0.178, "WINOGRAD_NONFUSED")
    # a file whose conv columns are R, S, pad_h, pad_w, vertical, horizontal (another order): h, w not swapped
    r = _row(df, "deepbench/train/DeepBench_NV_1080Ti.xlsx", "Results - FP32", 184)
    m = json.loads(r["meta"])
    assert (r["h"], r["w"], r["c_in"], r["batch"], r["kernel"]) == (m["source_h"], m["source_w"], 16, 16, 3)
    assert (r["h"], r["w"]) == (24, 240)
    # software versions per workbook in env; device-observed values only in meta
    env = json.loads(r["env"])
    assert (env["cuda_version"], env["cudnn_version"], env["precision"]) == ("8.0.88", "6.0.21", "Float")
    for col in ("config", "env"):
        text = " ".join(df[col].dropna().unique())
        assert "IMPLICIT" not in text and "WINOGRAD" not in text and "bwd_" not in text


def test_teraflops_column_equals_our_flops_over_time(imported):
    """GEMM: DeepBench's TERAFLOPS = 2 M N K / time = our flops / runtime on every row (the m <-> n swap keeps
    the count). Conv: equal wherever the source's output size P x Q is the true one; some files compute P, Q with
    another formula (78.5 for 79): there the ratio is exactly (our output area) / (P Q)."""
    df, _ = imported
    ours = df["flops"] / (df["runtime_ms"] * 1e-3) / 1e12
    meta = _meta(df)
    src = np.array([m["source_teraflops"] for m in meta], float)
    gemm = (df["op"] == "matmul").to_numpy()
    np.testing.assert_allclose(ours[gemm], src[gemm], rtol=1e-12)
    mnk = [2.0 * m["source_M"] * m["source_N"] * m["source_K"] for m, g in zip(meta, gemm) if g]
    np.testing.assert_array_equal(df.loc[gemm, "flops"], mnk)
    conv = df[~gemm]
    cm = [m for m, g in zip(meta, gemm) if not g]
    oh = (conv["h"] + 2 * conv["padding"] - conv["kernel"]) // conv["stride"] + 1
    ow = (conv["w"] + 2 * conv["padding"] - conv["kernel"]) // conv["stride"] + 1
    pq = np.array([m["source_P"] * m["source_Q"] for m in cm])
    np.testing.assert_allclose(ours[~gemm] / src[~gemm], (oh * ow).to_numpy(float) / pq, rtol=1e-12)
    exact = pq == (oh * ow).to_numpy()
    assert exact.sum() == 1094 and (~exact).sum() == 24


def test_rows_imported_and_skipped_are_counted(imported):
    df, reports = imported
    assert len(df) == TRAIN_GPU_SHEETS * (160 + 86) == 3198
    assert df["hardware"].nunique() == 10
    assert set(df["dtype"]) == {"float32", "float16"}
    assert set(df.loc[df["dtype"] == "float16", "hardware"]) == {"V100-SXM2-16GB", "T4", "P100-PCIe-16GB"}
    by = {(r.file.split("/")[-1], r.sheet): r for r in reports}
    assert len(reports) == TRAIN_GPU_SHEETS + 1 + 4  # + KNL + 4 inference sheets
    for r in reports:
        if r.dtype is not None and r.hardware != "CPU (skipped)":
            # every GEMM / conv data row of the sheet is either imported or skipped with a reason
            assert r.imported == {"matmul": 160, "conv2d": 86}
            assert r.skipped_by_reason()["non-square filter (R != S)"] == 8
            assert sum(n for (_, kind), n in r.skipped.items() if kind in ("gemm", "conv")) == 8
    knl = by[("DeepBench_IA_KNL7250.xlsx", "Results - FP32")]
    assert not knl.imported and sum(knl.skipped.values()) == 342
    t4_int8 = by[("DeepBench_NV_T4.xlsx", "Results - Mixed Precision")]
    assert not t4_int8.imported and t4_int8.dtype is None
    assert t4_int8.skipped[("int8 (no int8 dtype in data.workloads)", "gemm")] == 75
    assert "skipped" in t4_int8.line() and "int8" in t4_int8.line()


def test_import_prints_one_line_per_sheet(imported, tmp_path, capsys):
    from data.importers.deepbench import import_deepbench

    book = SHARED / "deepbench" / "train" / "DeepBench_NV_T4.xlsx"
    (tmp_path / "deepbench" / "train").mkdir(parents=True)
    shutil.copy(book, tmp_path / "deepbench" / "train" / book.name)
    rows = import_deepbench(tmp_path)
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(" [")[1].split("]")[0] for line in lines] == ["Results FP32", "Results - FP16 ip, Mixed math"]
    assert all(line.startswith("deepbench deepbench/train/DeepBench_NV_T4.xlsx") for line in lines)
    assert "imported 86 conv2d, 160 matmul; skipped 86 (non-square filter (R != S): 8 conv;" in lines[0]
    full = imported[0]
    pd.testing.assert_frame_equal(rows, full[full["hardware"] == "T4"].reset_index(drop=True))


def _edited_copy(tmp_path, edit):
    """A data root holding one real workbook, edited with openpyxl."""
    import openpyxl

    dest = tmp_path / "deepbench" / "train"
    dest.mkdir(parents=True)
    path = dest / "DeepBench_NV_V100.xlsx"
    shutil.copy(SHARED / "deepbench" / "train" / path.name, path)
    wb = openpyxl.load_workbook(path)
    edit(wb)
    wb.save(path)
    return tmp_path


def test_unknown_gpu_or_section_is_one_clear_error(tmp_path):
    from data.importers.deepbench import import_deepbench, main

    def rename_gpu(wb):
        ws = wb["Specs"]
        row = next(r for r in ws.iter_rows() if r[0].value == "GPU Model")
        row[1].value = "NVIDIA Z9000"

    root = _edited_copy(tmp_path / "gpu", rename_gpu)
    with pytest.raises(DatasetError) as err:
        import_deepbench(root, verbose=False)
    assert "unknown GPU 'NVIDIA Z9000'" in str(err.value) and "\n" not in str(err.value)

    def rename_section(wb):
        ws = wb["Results FP32"]
        cell = next(r[0] for r in ws.iter_rows() if r[0].value == "Convolution")
        cell.value = "Deformable Convolution"

    root = _edited_copy(tmp_path / "section", rename_section)
    with pytest.raises(DatasetError, match="unknown section title 'Deformable Convolution'"):
        import_deepbench(root, verbose=False)
    assert main([str(tmp_path / "missing")]) == 2


def test_hardware_specs_for_every_workbook(registry):
    from data.importers.deepbench import DEVICES

    for hw_id in set(DEVICES.values()):
        spec = registry.get(hw_id)
        assert spec.sources and spec.tdp_w and spec.extra.get("notes")
        # the FP32 peak is cores x 2 FLOP x boost clock (datasheets round to 2-3 digits)
        assert spec.peak_flops("float32") == pytest.approx(
            spec.sm_count * spec.cores_per_sm * 2 * spec.boost_clock_mhz * 1e6, rel=0.02
        )
        cc = spec.extra.get("compute_capability")
        if cc == "5.2":  # Maxwell: no FP16 arithmetic, float16 falls back to the float32 rate
            assert "float16" not in spec.peak_tflops
        if cc == "6.1":  # consumer Pascal: native FP16 at 1/64 of FP32
            assert spec.peak_tflops["float16"] == pytest.approx(spec.peak_tflops["float32"] / 64, rel=0.02)
    for name in ("NVIDIA GeForce GTX 1080 Ti", "NVIDIA TITAN Xp", "Tesla M40", "Radeon Instinct MI25"):
        assert name in registry


@pytest.mark.slow
def test_cross_check_with_neusight_runs_on_real_rows(imported):
    """The cross-source table of the module docstring: same GPU models, neighbouring shapes, plateau of peak."""
    from data.importers.deepbench import cross_check
    from data.importers.neusight import import_neusight

    res = cross_check(imported[0], import_neusight(SHARED, kinds=("linear", "bmm")))
    assert list(res["gpu"]) == ["P100", "V100", "T4"]
    assert (res["neighbors"] > 5).all()
    # DeepBench (aligned shapes, host-timed loops) is at least as fast as NeuSight on neighbouring shapes
    assert (res["ratio_median"] > 1.0).all() and (res["ratio_median"] < 2.5).all()
    assert ((res["db_p90_of_peak"] > 0.3) & (res["db_p90_of_peak"] <= 1.05)).all()
