"""Judge a runtime model on a GPU it never saw: measure a held-out sweep there, then score the model and calibrate.

    python benchmarks/gpu_holdout.py pool --out pool.csv [--seed 0]                       # here: the workloads
    python benchmarks/gpu_holdout.py pool --from neusight --out ns.csv [--per-op 320]     # here: NeuSight's shapes
    python benchmarks/gpu_holdout.py measure pool.csv --out rows.jsonl [--seconds 300]    # on the GPU
    python benchmarks/gpu_holdout.py judge rows.jsonl [--model models:/costmodel-runtime@champion] [--repeats 3]

``pool``: the candidate pool of ``costmodel calibrate --measure`` (``models.calibration.candidates``: matmul, bmm,
linear, conv2d, sdpa, layernorm, softmax, add, gelu at GPU sizes, seeded) in float32, tf32, float16 and bfloat16,
shuffled, as a CSV; ``--from neusight``: NeuSight's own workloads instead (``../shared/data/neusight``: distinct bmm,
linear, conv2d, layernorm, softmax and elementwise shapes of its five GPUs, float32, at most ``--per-op`` of each of
the first five ops and a tenth as many of each elementwise one, seeded and shuffled): measured on a GPU outside
NeuSight's five, they put the check (a) question to the product's own harness. ``measure`` (a machine with an
NVIDIA GPU; needs only torch, numpy, pandas, pyyaml and nvidia-ml-py, not the rest of the project's dependencies): the
pool's workloads in order, measured one by one with the cuda backend (``data.backends.cuda``: CUDA events, CUDA
graphs for kernels under 30 us; timing only, or with ``--power`` NVML power, energy and the SM clock of each row, a
window of >= 0.3 s each) until ``--seconds`` have passed. Each row (the row schema's columns) is appended to ``--out``
as one JSON line as soon as it is measured, so a run cut off keeps what it measured, and a rerun skips the workloads
already in the file.

``judge`` (here): the model's prediction for every ok row, asked for with the harness it was timed with (a CUDA
graph's replay or a stream of calls: ``features.physics.HARNESSES``), from the spec sheet alone (the rows' GPU must
be in ``conf/hardware``), then ``calibrate`` on k = 10, 30, 100 random rows of it (``--repeats`` draws), scored on the
rest; ``--choose model``: on the k rows ``costmodel calibrate --measure`` would choose from them
(``models.calibration.rank_workloads``; the pool is its candidate sweep, so these are the rows it would measure).
Prints MAPE / MedAPE overall, per op family and per dtype, and the share of rows flagged out of domain.

    python benchmarks/gpu_holdout.py fit rows.jsonl [more.jsonl ...] [--seed 0] [--exclude GPU]  # here: a change
    python benchmarks/gpu_holdout.py probe --out probe.csv                                 # here: open questions
    python benchmarks/gpu_holdout.py measure probe.csv --out probe.jsonl --seconds 240    # on the GPU
    python benchmarks/gpu_holdout.py report probe.jsonl                                    # here: their answers

``fit`` (here): the physics model as the main job configures it (conf/model/physics.yaml), fitted on the main job's
real GPU rows (the pack's sample of conf/collect/default.yaml at ``--seed``; no CPU rows, no split held out, no
interval folds; ``--exclude H200-SXM``: without that GPU's rows, so the measured GPU is one it never saw), scored on
each file's rows from the spec sheet: what a change to the physics or the learner does to GPUs it never trained on,
without a registry, in about 30 s.

``probe`` (here): the workloads that answer what the measured rows left open (:data:`PROBES`), each question as pairs
of one size with and without the property in question, for ``measure`` (232 workloads, a few minutes on a GPU); a
``timing`` column (``eager`` / ``graph``) asks ``measure`` for that harness, else the cuda backend's own choice.
``report`` prints what they measured: per row-wise op, dtype and row count the achieved GB/s by row length; per
convolution shape the TFLOP/s by channel count and dtype; per SDPA shape the TFLOP/s by head dim; per kernel timed
both ways, eager minus graph in us.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DTYPES = ("float32", "tf32", "float16", "bfloat16")
KS = (10, 30, 100)


def measure(args) -> int:
    import pandas as pd
    import torch

    from data.backends.cuda import CudaBackend, NoCudaDevice
    from data.workloads import OPS, shape_id

    def make(graph):
        return CudaBackend(windows=5, min_window_ms=10.0, warmup=2, power=args.power, source="cuda-sweep", graph=graph)

    backends = {"auto": make("auto"), "eager": make(False), "graph": make(True)}  # a pool's ``timing`` column
    backend = backends["auto"]
    try:
        hw = backend.hardware
    except NoCudaDevice as exc:
        print(f"gpu_holdout: error: {exc}", file=sys.stderr)
        return 2
    pool = pd.read_csv(args.pool)
    timing = pool["timing"].fillna("auto") if "timing" in pool else pd.Series("auto", index=pool.index)
    bad = sorted(set(timing) - set(backends))
    if bad:
        print(f"gpu_holdout: error: timing {bad[0]!r} in {args.pool}; one of {', '.join(backends)}", file=sys.stderr)
        return 2
    pool = pool.assign(timing=timing)
    done: set[tuple] = set()
    if args.out.exists():
        for line in args.out.read_text().splitlines():
            r = json.loads(line)
            done.add((r["shape_id"], r["dtype"], r.get("probe_timing", "auto")))
    print(
        f"device: {torch.cuda.get_device_name(0)} -> {hw.id}; torch {torch.__version__}, CUDA {torch.version.cuda}; "
        f"{len(pool)} candidates, {len(done)} already measured",
        flush=True,
    )
    start, n_ok, n_err = time.monotonic(), 0, 0
    with args.out.open("a") as fh:
        for r in pool.to_dict("records"):
            if time.monotonic() - start > args.seconds:
                break
            params = {p: int(r[p]) for p in OPS[r["op"]].params}
            if (shape_id(r["op"], params), r["dtype"], r["timing"]) in done:
                continue
            row = backends[r["timing"]].measure({"op": r["op"], "params": params, "dtype": r["dtype"]})
            row["timestamp"] = str(row["timestamp"])
            if r["timing"] != "auto":
                row["probe_timing"] = r["timing"]
            fh.write(json.dumps(row, default=str) + "\n")
            fh.flush()
            n_ok += row["status"] == "ok"
            n_err += row["status"] != "ok"
    print(f"measured {n_ok} ok, {n_err} error rows in {time.monotonic() - start:.0f} s -> {args.out}", flush=True)
    return 0


ELEMENTWISE_SHARE = 10  # --from neusight: an elementwise op gets per_op / 10 shapes (they are alike, and fast)


def neusight_pool(per_op: int, seed: int, root=None):
    """NeuSight's distinct workloads (float32; its five GPUs' shapes), at most ``per_op`` of each GEMM, conv, norm and
    softmax op and ``per_op // ELEMENTWISE_SHARE`` of each elementwise one, seeded, shuffled."""
    import numpy as np
    import pandas as pd

    from data.importers.neusight import import_neusight
    from data.workloads import OPS

    rows = import_neusight(root)
    rng = np.random.default_rng(seed)
    parts = []
    for op, group in rows.groupby("op", sort=True):
        distinct = group.drop_duplicates("shape_id")
        n = per_op if group["family"].iloc[0] != "elementwise" else max(1, per_op // ELEMENTWISE_SHARE)
        take = distinct.sample(min(n, len(distinct)), random_state=int(rng.integers(2**31)))
        parts.append(take[["op", *OPS[op].params]].assign(dtype="float32"))
    frame = pd.concat(parts, ignore_index=True)
    return frame.iloc[rng.permutation(len(frame))].reset_index(drop=True)


def pool(args) -> int:
    import numpy as np

    from data.importers import DatasetError
    from models.calibration import candidates

    if args.source == "neusight":
        try:
            frame = neusight_pool(args.per_op, args.seed, args.data_root)
        except DatasetError as exc:
            print(f"gpu_holdout: error: {exc}", file=sys.stderr)
            return 2
    else:
        frame = candidates(args.hardware, DTYPES, args.seed)
        frame = frame.iloc[np.random.default_rng(args.seed).permutation(len(frame))].drop(columns=["hardware"])
    frame.to_csv(args.out, index=False)
    print(f"{len(frame)} workloads -> {args.out}")
    return 0


# Open questions about the laws, each as workloads that answer it (``probe``):
# * row_alignment: large layernorms ran at 0.6-1.3 TB/s where the H200 set's ran at 1.8-2.4; every one of the former
#   had an odd row length, every one of the latter a power of two (PyTorch's vectorised row kernels need a row length
#   that is a multiple of the vector width). The same rows x length, n a power of two against n - 1 and n - 4.
# * conv_channels: small 16-bit convolutions ran 1.17-1.40x slower than float32 ones of the same shapes; channels
#   a multiple of 8 (cuDNN's NHWC tensor-core kernels) against an odd count, 16-bit against float32.
# * overlap: the model adds a harness's launch floor to the kernel's time; timed back to back in a stream,
#   a host that runs ahead of the device hides its launch cost behind a longer kernel, so the time would be the larger
#   of the two, not their sum (the H200 set's bf16 adds of 6.2 us of bandwidth time take 7-11 us with a 7 us floor).
#   The same kernels eager and from a CUDA graph (no host): under the sum, eager - graph stays near the floor at
#   every size; under the larger, it falls to ~0 once the kernel outlasts the host. bf16 square GEMMs and float32
#   adds of 1-200 us.
# * attention_exp: a fused SDPA's exponentials on the SFUs add score elements / (16 SMs clock) to its GEMMs
#   (features.physics.SFU_OPS_PER_SM_CLOCK), fitted on the H200 set's 60 SDPAs (head_dim 64 and 128 only). The same
#   shapes at head_dim 32-256, causal and not, in bf16 and fp16: under the law the efficiency left does not depend on
#   the head dim; if the kernel overlaps the two (FlashAttention-3), the time is the larger, and head_dim 32 shows it.
# * stem_channels: 16-bit convolutions with 1 or 3 input channels run on the CUDA cores (0.13-0.52 of the
#   fp32 peak, 0.01-0.07 of the tensor peak; features.physics.MIN_TC_CONV_BYTES), those of 16+ on the tensor cores;
#   no row says where between 3 and 16 the tensor-core path starts, nor what tf32 does. A ResNet stem (7x7 stride 2)
#   with 1-16 input channels in float32, tf32 and bfloat16.
# * linear_floor: ``linear`` has a launch floor of its own (models.physics.FLOOR_OPS: addmm with its bias
#   through cuBLASLt, an algorithm query on the host at every call), fitted from NeuSight's per-call rows (1.7-2.0x the
#   bmm floor) and the H200 set's stream (22-47 us against 10-20 for matmuls of as little work). The same small square
#   GEMMs as ``linear`` and ``matmul``, eager and from a CUDA graph: under the law linear - matmul is the host path's
#   10-20 us eager and ~0 from a graph (FLOOR_OP_PRIOR 1); a device-side cost (a bias kernel) would show in both.
# * long_gemm: does a long compute-bound kernel lose rate to the power limit, as the 70 W cards' long GEMMs
#   do (0.2-0.4 of their peak), and does a fitted model say so of a GPU that does not? Square GEMMs of 1 024-16 384 in
#   float32 (the CUDA cores), bfloat16 and tf32, one long K and one long M x N, and float32 SDPAs (the memory-efficient
#   kernel; the H200 set has none); with ``measure --power`` each row carries its power and SM clock.
PROBES = {
    "row_alignment": {
        "ops": ("layernorm", "softmax", "add"),
        "rows": (512, 4096, 32768),
        "lengths": (2048, 2047, 2044, 4096, 4095, 4092),
    },
    "conv_channels": {
        "shapes": ({"batch": 8, "h": 28, "w": 28}, {"batch": 32, "h": 56, "w": 56}),
        "channels": (64, 63, 128, 127),
    },
    "overlap": {
        "gemm": (256, 512, 1024, 1536, 2048, 3072, 4096),
        "add_rows": (64, 256, 1024, 4096, 16384, 65536),
        "timings": ("eager", "graph"),
    },
    "attention_exp": {
        "shape": {"batch": 8, "heads": 16},
        "seq_len": (1024, 4096),
        "head_dim": (32, 64, 128, 256),
        "causal": (0, 1),
        "dtypes": ("bfloat16", "float16"),
    },
    "stem_channels": {
        "shape": {"batch": 8, "h": 224, "w": 224, "c_out": 64, "kernel": 7, "stride": 2, "padding": 3},
        "channels": (1, 3, 4, 6, 8, 16),
        "dtypes": ("float32", "tf32", "bfloat16"),
    },
    "long_gemm": {
        "square": {"float32": (1024, 2048, 4096, 6144, 8192, 12288, 16384), "bfloat16": (4096, 8192, 16384)},
        "square_tf32": (8192,),
        "skinny": ({"m": 1024, "n": 1024, "k": 65536}, {"m": 16384, "n": 16384, "k": 1024}),
        "sdpa": {"batch": 8, "heads": 16, "seq_len": (1024, 4096), "head_dim": (64, 128)},
    },
    "linear_floor": {
        "sizes": (64, 256, 1024, 2048),
        "ops": ("linear", "matmul"),
        "dtypes": ("float32", "bfloat16"),
        "timings": ("eager", "graph"),
    },
}
PROBE_DTYPES = ("float32", "bfloat16")


def probe(args) -> int:
    import pandas as pd

    rows = []
    spec = PROBES["row_alignment"]
    for op in spec["ops"]:
        for m in spec["rows"]:
            for n in spec["lengths"]:
                rows += [{"question": "row_alignment", "op": op, "dtype": d, "m": m, "n": n} for d in PROBE_DTYPES]
    spec = PROBES["conv_channels"]
    for shape in spec["shapes"]:
        for c in spec["channels"]:
            conv = {"op": "conv2d", **shape, "c_in": c, "c_out": c, "kernel": 3, "stride": 1, "padding": 1}
            rows += [{"question": "conv_channels", **conv, "dtype": d} for d in PROBE_DTYPES]
    spec = PROBES["overlap"]
    for t in spec["timings"]:
        rows += [
            {"question": "overlap", "op": "matmul", "dtype": "bfloat16", "m": n, "n": n, "k": n, "timing": t}
            for n in spec["gemm"]
        ]
        rows += [
            {"question": "overlap", "op": "add", "dtype": "float32", "m": m, "n": 4096, "timing": t}
            for m in spec["add_rows"]
        ]
    spec = PROBES["attention_exp"]
    for d in spec["dtypes"]:
        for s_ in spec["seq_len"]:
            for hd in spec["head_dim"]:
                for c in spec["causal"]:
                    att = {"op": "sdpa", **spec["shape"], "seq_len": s_, "head_dim": hd, "causal": c, "dtype": d}
                    rows.append({"question": "attention_exp", **att})
    spec = PROBES["stem_channels"]
    for c in spec["channels"]:
        rows += [
            {"question": "stem_channels", "op": "conv2d", **spec["shape"], "c_in": c, "dtype": d}
            for d in spec["dtypes"]
        ]
    spec = PROBES["long_gemm"]
    squares = [(d, n) for d, sizes in spec["square"].items() for n in sizes] + [
        ("tf32", n) for n in spec["square_tf32"]
    ]
    rows += [{"question": "long_gemm", "op": "matmul", "dtype": d, "m": n, "n": n, "k": n} for d, n in squares]
    rows += [{"question": "long_gemm", "op": "matmul", "dtype": "float32", **mnk} for mnk in spec["skinny"]]
    att = spec["sdpa"]
    rows += [
        {"question": "long_gemm", "op": "sdpa", "dtype": "float32", "batch": att["batch"], "heads": att["heads"]}
        | {"seq_len": s_, "head_dim": hd, "causal": 0}
        for s_ in att["seq_len"]
        for hd in att["head_dim"]
    ]
    spec = PROBES["linear_floor"]
    rows += [
        {"question": "linear_floor", "op": op, "dtype": d, "m": n, "n": n, "k": n, "timing": t}
        for op in spec["ops"]
        for d in spec["dtypes"]
        for n in spec["sizes"]
        for t in spec["timings"]
    ]
    pd.DataFrame(rows).to_csv(args.out, index=False)
    print(f"{len(rows)} probe workloads ({', '.join(PROBES)}) -> {args.out}")
    return 0


def report(args) -> int:
    import pandas as pd

    if not args.rows.is_file():
        print(f"gpu_holdout: error: no such file: {args.rows}", file=sys.stderr)
        return 2
    rows = pd.read_json(args.rows, lines=True)
    rows = rows[rows["status"] == "ok"] if "status" in rows else rows
    if rows.empty:
        print(f"gpu_holdout: error: no ok rows in {args.rows}", file=sys.stderr)
        return 2
    print(f"{args.rows}: {len(rows)} ok rows on {', '.join(rows['hardware'].unique())}")
    for col in ("m", "n", "batch", "h", "c_in", "c_out", "kernel", "seq_len", "head_dim", "causal"):
        if col in rows:
            rows[col] = rows[col].astype("Int64")
    timed = rows[rows["probe_timing"].notna()] if "probe_timing" in rows else rows.iloc[:0]
    rows = rows[rows["probe_timing"].isna()] if "probe_timing" in rows else rows
    if len(timed):
        table = timed.pivot_table(index=["op", "dtype", "m", "n"], columns="probe_timing", values="runtime_ms") * 1e3
        if {"eager", "graph"} <= set(table.columns):
            table["eager - graph"] = table["eager"] - table["graph"]
        print("timed both ways (overlap), us per kernel: eager back to back, CUDA graph replay")
        print(table.round(1).to_string())
    wise = rows[rows["op"].isin(PROBES["row_alignment"]["ops"])]
    if len(wise):
        rate = (wise["bytes"] / wise["runtime_ms"] / 1e6).rename("GB/s")
        table = wise.assign(rate=rate).pivot_table(index=["op", "dtype", "m"], columns="n", values="rate")
        print("row-wise ops, achieved GB/s (bytes / runtime) by row length n:")
        print(table.round(0).to_string())
    att = rows[rows["op"] == "sdpa"]
    if len(att):
        rate = att["flops"] / att["runtime_ms"] / 1e9
        table = att.assign(rate=rate).pivot_table(
            index=["dtype", "seq_len", "causal"], columns="head_dim", values="rate"
        )
        print("sdpa, TFLOP/s (the two GEMMs' FLOPs / runtime) by head_dim:")
        print(table.round(1).to_string())
    big = rows[(rows["op"] == "matmul") & (rows["flops"] >= 1e9)]
    if len(big):
        cols = [c for c in ("power_w", "sm_clock_mhz") if c in big and big[c].notna().any()]
        table = big.assign(**{"TFLOP/s": big["flops"] / big["runtime_ms"] / 1e9}).set_index(["dtype", "m", "n", "k"])
        print("matmul over 1 GFLOP, TFLOP/s by shape and dtype" + (" (power W, SM clock MHz)" if cols else "") + ":")
        print(table[["runtime_ms", "TFLOP/s", *cols]].sort_index().round(2).to_string())
    conv = rows[rows["op"] == "conv2d"]
    if len(conv):
        rate = conv["flops"] / conv["runtime_ms"] / 1e9
        table = conv.assign(rate=rate).pivot_table(
            index=["kernel", "batch", "h", "c_in", "c_out"], columns="dtype", values="rate"
        )
        print("conv2d, TFLOP/s by kernel, shape, channels and dtype:")
        print(table.round(2).to_string())
    return 0


def _scores(frame, y, pred) -> dict:
    import numpy as np

    ape = np.abs(pred - y) / y * 100
    out = {"all": (len(y), ape.mean(), np.median(ape))}
    for col in ("family", "dtype"):
        for key, idx in frame.groupby(col).indices.items():
            out[f"{col}:{key}"] = (len(idx), ape[idx].mean(), np.median(ape[idx]))
    return out


def judge(args) -> int:
    import numpy as np
    import pandas as pd

    from data.workloads import SHAPE_PARAMS
    from features.physics import measurement_settings
    from models.api import load_cost_model
    from models.base import Calibratable
    from models.calibration import ensure_hardware, rank_workloads
    from models.pyfunc import to_workloads

    rows = pd.read_json(args.rows, lines=True)
    rows = rows[rows["status"] == "ok"].reset_index(drop=True)
    if rows["hardware"].nunique() != 1:
        print("gpu_holdout: error: the rows must be of one GPU", file=sys.stderr)
        return 2
    cols = ["op", "hardware", "dtype", *[p for p in SHAPE_PARAMS if p in rows and rows[p].notna().any()]]
    # each row asked for as it was timed: from a CUDA graph (kernels under 30 us) or in a stream of calls
    inputs = rows[cols].assign(harness=measurement_settings(rows)["harness"])
    y = rows["runtime_ms"].to_numpy(float)
    cm = load_cost_model(args.model, tracking_uri=args.tracking_uri)
    inner = cm.pyfunc.unwrap_python_model()
    hw = ensure_hardware(inner, rows["hardware"].iloc[0])  # a spec-only GPU joins the served registry
    served = cm.predict(inputs)
    pred = served["runtime_ms"].to_numpy(float)
    results = {"spec only": _scores(rows, y, pred)}
    inside = served["in_domain"].astype(bool).to_numpy() if "in_domain" in served else None
    X = inner.encoder.transform(to_workloads(inputs)[0])
    model = inner.model
    for k in KS if isinstance(model, Calibratable) else ():
        if k >= len(rows):
            continue
        preds, tests = [], []
        for rep in range(args.repeats if args.choose == "random" else 1):  # the model's choice is one draw
            if args.choose == "random":
                cal = np.random.default_rng(rep).choice(len(rows), k, replace=False)
            else:  # the rows `costmodel calibrate --measure` would measure, had the pool been its candidates
                cal = rank_workloads(inner, inputs.drop(columns=["harness"]), k).index.to_numpy()
            test = np.setdiff1d(np.arange(len(rows)), cal)
            fitted = model.calibrate(X.iloc[cal].reset_index(drop=True), y[cal], hardware=hw)
            preds.append(fitted.predict(X.iloc[test].reset_index(drop=True)))
            tests.append(test)
        if not tests:  # --repeats 0: the spec-sheet answer only
            continue
        test = np.concatenate(tests)
        results[f"k={k}"] = _scores(rows.iloc[test].reset_index(drop=True), y[test], np.concatenate(preds))
    keys = list(results["spec only"])
    where = f", {inside.mean():.2f} in domain" if inside is not None else ""
    print(f"{args.model} on {len(rows)} measured rows of {hw}{where}; calibration rows: {args.choose}")
    print("| scope | n | " + " | ".join(f"{name} MAPE / MedAPE" for name in results) + " |")
    print("|---|---|" + "---|" * len(results))
    for key in keys:
        cells = [f"{r[key][1]:.1f} / {r[key][2]:.1f}" if key in r else "" for r in results.values()]
        print(f"| {key} | {results['spec only'][key][0]} | " + " | ".join(cells) + " |")
    return 0


def fit(args) -> int:
    import numpy as np
    import pandas as pd
    from hydra import compose, initialize_config_dir

    from data.backends.reference import ReferenceBackend
    from features.physics import PhysicsFeaturizer, measurement_settings
    from pipelines import experiment

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("run", overrides=["model=[physics]", f"seed={args.seed}"])
    registry = experiment.hardware_registry(cfg)
    ref = cfg.collect.backend.reference  # the rows the main job's reference backend replays
    cap = {"": args.cap} if args.cap else dict(ref.cap)  # "": every source
    rows = ReferenceBackend(cap=cap, seed=ref.seed, exclude_hardware=ref.exclude_hardware).rows()
    rows = rows[rows["status"] == "ok"].reset_index(drop=True)
    unknown = sorted(set(args.exclude) - set(rows["hardware"]))
    if unknown:
        print(f"gpu_holdout: error: --exclude {unknown[0]!r}: no such GPU in the pack's rows", file=sys.stderr)
        return 2
    rows = rows[~rows["hardware"].isin(args.exclude)].reset_index(drop=True)  # a GPU the model never sees
    encoder = PhysicsFeaturizer(registry)
    trees = {"n_estimators": args.trees} if args.trees else {}
    model = experiment.build(
        experiment.model_entries(cfg)["physics"], interval_folds=args.intervals, keep_rows=0, **trees
    )
    model.fit(encoder.transform(rows), rows["runtime_ms"].to_numpy(float))
    without = f", without {', '.join(args.exclude)}" if args.exclude else ""
    print(f"physics model fitted on {len(rows)} real GPU rows of the pack (seed {args.seed}{without})")
    for path in args.rows:
        measured = pd.read_json(path, lines=True)
        measured = measured[measured["status"] == "ok"].reset_index(drop=True)
        inputs = measured.assign(harness=measurement_settings(measured)["harness"])
        y = measured["runtime_ms"].to_numpy(float)
        dom = model.predict_domain(encoder.transform(inputs))
        scores = _scores(measured, y, dom["runtime_ms"].to_numpy(float))
        print(
            f"{path} ({', '.join(measured['hardware'].unique())}): "
            + ", ".join(f"{key} {mape:.1f}" for key, (_, mape, _) in scores.items())
        )
        if args.intervals:  # the 90% interval: the share of rows inside, and how wide it is (log, mean)
            inside = (y >= dom["lo_ms"].to_numpy()) & (y <= dom["hi_ms"].to_numpy())
            half = np.log(dom["hi_ms"] / dom["runtime_ms"]).to_numpy()
            print(
                f"  interval: covered {inside.mean():.3f}, mean log half-width {half.mean():.3f}, "
                f"in domain {dom['in_domain'].mean():.2f}"
            )
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pool", help="write the shuffled candidate workloads (a CSV)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--hardware", default="H100-SXM", help="a conf/hardware id (sizes do not depend on it)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--from", dest="source", choices=("calibrate", "neusight"), default="calibrate")
    p.add_argument("--per-op", type=int, default=320, help="--from neusight: shapes per op (elementwise: a tenth)")
    p.add_argument("--data-root", default=None, help="--from neusight: the shared data folder (default ../shared/data)")
    m = sub.add_parser("measure", help="measure the pool on this machine's GPU")
    m.add_argument("pool", type=Path, help="workloads (op, dtype, shape columns), measured in file order")
    m.add_argument("--out", type=Path, required=True, help="rows, one JSON line each (appended; a rerun resumes)")
    m.add_argument("--seconds", type=float, default=300.0, help="stop starting new workloads after this long")
    m.add_argument("--power", action="store_true", help="NVML power, energy and SM clock per row (slower)")
    j = sub.add_parser("judge", help="score a registered model on the measured rows and calibrate it")
    j.add_argument("rows", type=Path)
    j.add_argument("--model", default="models:/costmodel-runtime@champion")
    j.add_argument("--tracking-uri", default=f"sqlite:///{ROOT / 'outputs' / 'mlflow.db'}")
    j.add_argument("--repeats", type=int, default=3, help="random draws of the k calibration rows (0: spec sheet only)")
    j.add_argument(
        "--choose",
        choices=("random", "model"),
        default="random",
        help="the k calibration rows: random draws, or those `costmodel calibrate --measure` would pick from the rows",
    )
    f = sub.add_parser("fit", help="fit the physics model on the pack's GPU rows here, score measured rows (MAPE %%)")
    f.add_argument("rows", type=Path, nargs="+")
    f.add_argument("--seed", type=int, default=0, help="the pack sample's seed (and the model's)")
    f.add_argument("--trees", type=int, default=None, help="n_estimators (default: conf/model/physics.yaml's)")
    f.add_argument("--cap", type=int, default=None, help="rows per source, GPU, op and dtype (default: the main job's)")
    f.add_argument("--exclude", action="append", default=[], help="a GPU of the pack left out of training (repeatable)")
    f.add_argument("--intervals", action="store_true", help="fit the interval folds too; print coverage and width")
    q = sub.add_parser("probe", help="write the workloads of the open questions (PROBES), a CSV for measure")
    q.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("report", help="print what measured probe rows answer")
    r.add_argument("rows", type=Path)
    args = ap.parse_args(argv)
    return {"pool": pool, "measure": measure, "judge": judge, "fit": fit, "probe": probe, "report": report}[args.cmd](
        args
    )


if __name__ == "__main__":
    raise SystemExit(main())
