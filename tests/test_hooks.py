"""The autotuner hooks (models/hooks/), driven by the real libraries: Triton's Autotuner prunes its configurations with
the cost model's perf_model (no GPU: prune_configs runs before any launch), TVM's meta-schedule calls the
PyCostModel through its own FFI on real design-space candidates measured on this CPU."""

import json

import numpy as np
import pytest

pytestmark = pytest.mark.slow
MODEL = "models:/costmodel-runtime@champion"


@pytest.fixture(scope="module")
def cost_model(tiny_run):
    from models.api import load_cost_model

    return load_cost_model(MODEL, tracking_uri=tiny_run["uri"])


# --- Triton ----------------------------------------------------------------------------------------------------------
def test_triton_autotuner_prunes_with_the_cost_model(cost_model, tmp_path):
    pytest.importorskip("triton")
    import torch

    from models.hooks.triton import TritonPerfModel
    from tests.hook_kernels import TILES, autotuned_matmul

    perf = TritonPerfModel(cost_model, hardware="H100-SXM")
    kernel = autotuned_matmul(perf, top_k=3)
    m, n, k = 4000, 4096, 4096  # 4000 = 31.25 x 128: tiles of 128 rows pad the last one; 125 x 32 fit exactly
    a, b = torch.empty(m, k, dtype=torch.bfloat16), torch.empty(k, n, dtype=torch.bfloat16)
    c = torch.empty(m, n, dtype=torch.bfloat16)
    args = (a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride())
    kernel.nargs = dict(zip(kernel.arg_names, args))  # what a launch sets before pruning
    calls = []
    original = perf.__call__

    def counted(**kw):
        calls.append(kw)
        return original(**kw)

    kernel.perf_model = counted
    pruned = kernel.prune_configs({})
    assert len(pruned) == 3 and len(calls) == len(TILES)  # the Autotuner asked the perf model once per config
    assert {"a_ptr", "M", "N", "K", "BLOCK_M", "BLOCK_N", "num_warps", "num_stages"} <= set(calls[0])
    # every estimate is the cost model's runtime of the workload times the config's tile-and-wave penalty
    base = float(
        cost_model.predict([{"op": "matmul", "m": m, "n": n, "k": k, "dtype": "bfloat16", "hardware": "H100-SXM"}])[
            "runtime_ms"
        ].iloc[0]
    )
    estimates = {(kw["BLOCK_M"], kw["BLOCK_N"]): original(**kw) for kw in calls}
    from features.physics import gemm_time, tile_time

    sms, dims = 132, [np.array([float(v)]) for v in (m, n, k)]
    best = gemm_time(1, *dims, float(sms), sms)[0][0]
    for (bm, bn), est in estimates.items():
        assert est == pytest.approx(base * tile_time(1, *dims, bm, bn, 1, 1.0, sms)[0][0] / best, rel=1e-12)
    kept = [(cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"]) for cfg in pruned]
    assert kept == sorted(estimates, key=estimates.get)[:3]
    # 256-row tiles pad the 4000 rows to 4096 and leave SMs idle in the last wave; 32 x 32 tiles fit
    assert estimates[(256, 256)] > estimates[(32, 32)]
    assert len(perf.runtime.cache) == 1  # one model call for all the configurations of one workload


def test_triton_perf_model_says_what_it_needs():
    pytest.importorskip("triton")
    from models.hooks.triton import TritonPerfModel

    class Fake:  # a predictor with a registry, never asked
        def __init__(self):
            from data.hardware import HardwareRegistry

            self.registry = HardwareRegistry.from_dir()

        def predict(self, frame):
            raise AssertionError("not called")

    perf = TritonPerfModel(Fake(), hardware="h100-sxm")  # an alias or id, any case
    assert perf.hardware == "H100-SXM"
    with pytest.raises(ValueError, match="no argument"):
        perf(X=1, BLOCK_M=64, BLOCK_N=64)
    with pytest.raises(KeyError, match="unknown hardware 'B300'"):
        TritonPerfModel(Fake(), hardware="B300")


# --- TVM -------------------------------------------------------------------------------------------------------------
def _candidates(m, n, k, seeds):
    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    A = te.placeholder((m, k), name="A", dtype="float32")
    B = te.placeholder((k, n), name="B", dtype="float32")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    func = te.create_prim_func([A, B, C])
    target = tvm.target.Target({"kind": "llvm", "num-cores": 1})
    cands, ctx = [], None
    for seed in seeds:  # design spaces with their sampling decisions drawn under several seeds
        space = ms.space_generator.PostOrderApply(sch_rules="llvm", postprocs="llvm", mutator_probs={})
        ctx = ms.TuneContext(mod=func, target=target, space_generator=space, task_name=f"mm{m}", rand_state=seed)
        cands += [ms.MeasureCandidate(sch, ArgInfo.from_prim_func(func)) for sch in ctx.generate_design_space()]
    return ctx, cands, target


def _measure(cands, target, shapes):
    """Each candidate built and timed on this CPU (the median of TVM's time evaluator)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    dev, rng, out = tvm.cpu(), np.random.default_rng(0), []
    arrays = [tvm.runtime.tensor(rng.random(s, dtype=np.float32), dev) for s in shapes]
    for cand in cands:
        run = tvm.compile(cand.sch.mod, target=target).jit()
        secs = run.time_evaluator("main", dev, number=3, repeat=3)(*arrays).results
        out.append(ms.runner.RunnerResult(run_secs=[tvm.runtime.convert(float(np.median(secs)))], error_msg=None))
    return out


@pytest.mark.timeout(1800)  # TVM's first tuning context parses every tensor intrinsic it ships (minutes under load)
def test_tvm_meta_schedule_updates_and_asks_the_cost_model(cost_model, tiny_run, tmp_path):
    pytest.importorskip("tvm")
    from tvm.s_tir import meta_schedule as ms

    from models.hooks.tvm import CostModelTVM, decisions, gemm_of

    cpu = next(s.id for s in cost_model.pyfunc.unwrap_python_model().registry if s.kind == "cpu")
    model = CostModelTVM(cost_model, hardware=cpu, min_fit=4)
    assert isinstance(model, ms.CostModel)  # a TVM object TVM's tuner takes as its cost_model
    ctx, cands, target = _candidates(128, 96, 64, seeds=(1, 2))
    assert gemm_of(ctx.mod) == {"op": "matmul", "m": 128, "n": 96, "k": 64, "dtype": "float32"}
    estimate = model.estimate_ms(ctx)
    row = {"op": "matmul", "m": 128, "n": 96, "k": 64, "dtype": "float32", "hardware": cpu}
    assert estimate == pytest.approx(float(cost_model.predict([row])["runtime_ms"].iloc[0]), rel=1e-12)

    # before any measurement: every candidate alike (through TVM's FFI: C++ calls the Python methods)
    before = ms.CostModel.predict(model, ctx, cands)
    assert before.dtype == np.float64 and len(before) == len(cands) and (before == 1.0).all()
    results = _measure(cands, target, [(128, 64), (64, 96), (128, 96)])
    ms.CostModel.update(model, ctx, cands, results)
    assert model.calls == {"update": 1, "predict": 1}
    [structure] = {decisions(c)[0] for c in cands}
    assert len(model.data[structure]["y"]) == len(cands)
    # after: the score is the estimate over the learned runtime; the fastest measured candidates score highest
    after = ms.CostModel.predict(model, ctx, cands)
    secs = np.array([float(r.run_secs[0]) for r in results])
    assert np.isfinite(after).all() and (after > 0).all() and len(set(np.round(after, 9))) > 1
    fitted = estimate / 1e3 / after  # the learner's runtimes of the measured candidates
    assert np.corrcoef(np.log(fitted), np.log(secs))[0, 1] > 0.5

    # another task of the same structure (a larger matmul) is ranked from its first call by what the first taught
    ctx2, cands2, _ = _candidates(256, 96, 64, seeds=(4,))
    assert {decisions(c)[0] for c in cands2} == {structure}
    assert len(set(np.round(ms.CostModel.predict(model, ctx2, cands2), 9))) > 1

    # save / load keep the measurements
    model.save(str(tmp_path / "cm.json"))
    again = CostModelTVM(cost_model, hardware=cpu, min_fit=4)
    again.load(str(tmp_path / "cm.json"))
    np.testing.assert_allclose(ms.CostModel.predict(again, ctx, cands), after, rtol=1e-9)
    assert json.loads((tmp_path / "cm.json").read_text())["hardware"] == cpu
