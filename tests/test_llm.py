"""An LLM as it is served (models/llm.py, models/llm_api.py, models/llm_eval.py, ``costmodel llm``).

Config parsing (a hand-written config; real configs from ../shared), the layer list against a real torch.export
capture of the transformers model built from the same config on the meta device (same GEMMs, attention and FLOPs),
the serving law by hand, every input moving the outputs it should, the memory fit, bad configs as one line, the CLI
and REST end to end on a real sqlite store with the tiny trained model, the check on a few silicon rows.
"""

import json

import numpy as np
import pandas as pd
import pytest

from models.llm import (
    Layout,
    LLMError,
    Precision,
    PredictCoster,
    RooflineCoster,
    Step,
    check_layout,
    load_conf,
    parse_config,
    plan,
    predict_llm,
    serve,
    step_flops,
    step_kernels,
)
from tests.conftest import SHARED, cli_in_process, run_cli, run_entry

SMALL = {  # a Llama-style decoder small enough to build and capture in a second
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}
# a 70B-class shape (Llama-3.1-70B's numbers) for the serving behaviour, written here so no ../shared is needed
BIG = {
    **SMALL,
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "num_hidden_layers": 80,
    "vocab_size": 128256,
}
MOE = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "vocab_size": 32000,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
}
CONFIGS = SHARED / "aiconfigurator" / "model_configs"


@pytest.fixture(scope="module")
def roofline():
    return RooflineCoster()


def serve_it(raw, coster, hardware="H200-SXM", **req):
    req = {"tp": 1, "batch": 8, "isl": 1024, "osl": 256, **req}
    return predict_llm(parse_config(raw, raw.get("_name", "test")), hardware, coster, **req).summary


# --------------------------------------------------------------------------- the config
def test_a_hand_written_config_parses_and_counts_the_transformers_models_parameters():
    import torch
    import transformers

    cfg = parse_config(SMALL, "small")
    assert (cfg.hidden, cfg.layers, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.intermediate, cfg.vocab) == (
        256,
        2,
        8,
        2,
        32,
        512,
        1000,
    )
    assert not cfg.moe and cfg.dense_layers == 2
    for arch, kind in (("LlamaForCausalLM", "llama"), ("Qwen3ForCausalLM", "qwen3"), ("Qwen2ForCausalLM", "qwen2")):
        raw = {**SMALL, "architectures": [arch], "model_type": kind}
        c = transformers.AutoConfig.for_model(**{k: v for k, v in raw.items() if k != "architectures"})
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(c)
        assert sum(parse_config(raw).parameters().values()) == sum(p.numel() for p in model.parameters()), arch


@pytest.mark.shared_data
def test_real_configs_from_shared_parse():
    from models.llm import load_config

    llama8 = load_config(CONFIGS / "meta-llama--Meta-Llama-3.1-8B_config.json")
    assert llama8.name == "meta-llama--Meta-Llama-3.1-8B"
    assert sum(llama8.parameters().values()) / 1e9 == pytest.approx(8.03, abs=0.01)
    llama70 = load_config(CONFIGS / "meta-llama--Meta-Llama-3.1-70B_config.json")
    assert sum(llama70.parameters().values()) / 1e9 == pytest.approx(70.55, abs=0.05)
    qwen = load_config(CONFIGS / "Qwen--Qwen3-8B_config.json")
    assert (
        qwen.qk_norm and qwen.head_dim == 128 and sum(qwen.parameters().values()) / 1e9 == pytest.approx(8.19, abs=0.01)
    )
    mixtral = load_config(CONFIGS / "mistralai--Mixtral-8x7B-v0.1_config.json")
    assert (mixtral.experts, mixtral.topk, mixtral.moe_layers) == (8, 2, 32)
    assert sum(mixtral.parameters().values()) / 1e9 == pytest.approx(46.70, abs=0.05)
    qmoe = load_config(CONFIGS / "Qwen--Qwen3-30B-A3B_config.json")
    assert (qmoe.experts, qmoe.topk, qmoe.moe_intermediate, qmoe.moe_layers) == (128, 8, 768, 48)
    assert sum(qmoe.parameters().values()) / 1e9 == pytest.approx(30.53, abs=0.05)
    with pytest.raises(LLMError, match="architecture 'DeepseekV3ForCausalLM' is not supported"):
        load_config(CONFIGS / "deepseek-ai--DeepSeek-V3_config.json")


# --------------------------------------------------------------------------- the layer list against a real capture
@pytest.mark.parametrize("arch,kind", [("LlamaForCausalLM", "llama"), ("Qwen3ForCausalLM", "qwen3")])
def test_the_layer_list_is_the_captured_models_kernels_and_flops(arch, kind):
    """torch.export of the transformers model built from the same config on the meta device: the same GEMMs (the
    separate q / k / v and gate / up projections are the fused ones' columns), the same attention calls and the
    same FLOPs as the prefill step's layer list."""
    import torch
    import transformers

    from features.torch_capture import workloads_from_module

    raw = {**SMALL, "architectures": [arch], "model_type": kind}
    c = transformers.AutoConfig.for_model(**{k: v for k, v in raw.items() if k != "architectures"})
    c._attn_implementation = "sdpa"
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(c, dtype=torch.bfloat16)
    B, S = 2, 16
    ids = torch.zeros(B, S, dtype=torch.long, device="meta")
    captured, unmapped = workloads_from_module(model, (ids,), kwargs={"use_cache": False, "logits_to_keep": 1})
    assert unmapped == []
    cfg = parse_config(raw)
    mine = step_kernels(cfg, Layout(), Precision.of(cfg), Step(prefill=B, chunk=S))
    gemms = captured[captured["op"].isin(["linear", "matmul"])]
    role = (
        gemms["module"]
        .str.rsplit(".", n=1)
        .str[-1]
        .replace(
            {
                "q_proj": "qkv_proj",
                "k_proj": "qkv_proj",
                "v_proj": "qkv_proj",
                "gate_proj": "gate_up_proj",
                "up_proj": "gate_up_proj",
            }
        )
    )
    layer = gemms["module"].str.extract(r"layers\.(\d+)\.")[0].fillna("-")
    fused = (
        gemms.assign(role=role, layer=layer)
        .groupby(["role", "layer"])
        .agg(m=("m", "first"), n=("n", "sum"), k=("k", "first"))
    )
    expect = mine[mine["op"] == "linear"].set_index("name")
    for (name, _layer), g in fused.iterrows():
        assert (g["m"], g["n"], g["k"]) == tuple(expect.loc[name, ["m", "n", "k"]]), name
    per_role = fused.groupby(level=0).size()
    assert per_role.to_dict() == expect["count"].to_dict()
    attn = captured[captured["op"] == "sdpa"]
    mine_attn = mine[mine["op"] == "sdpa"].iloc[0]
    assert len(attn) == mine_attn["count"] == cfg.layers
    assert {(r.batch, r.heads, r.seq_len, r.head_dim) for r in attn.itertuples()} == {(B, cfg.heads, S, cfg.head_dim)}
    from data.costs import costs

    shape = [
        c
        for c in ("batch", "m", "n", "k", "heads", "seq_len", "head_dim", "causal", "kv_len", "num_kv_heads", "inputs")
        if c in captured
    ]
    flops, _ = costs(
        captured["op"].to_numpy(object),
        {c: pd.to_numeric(captured[c], errors="coerce").to_numpy(float) for c in shape},
        captured["dtype"].to_numpy(object),
    )
    assert step_flops(mine) == pytest.approx(float(flops.sum()), rel=1e-12)
    assert (mine["category"] == "norm").any() and (captured["module"].str.endswith("layernorm")).any()


def test_tensor_parallel_kernels_split_the_work_and_add_all_reduces():
    cfg = parse_config(BIG)
    one = step_kernels(cfg, check_layout(cfg, 1), Precision.of(cfg), Step(decode=16, context=2048))
    four = step_kernels(cfg, check_layout(cfg, 4), Precision.of(cfg), Step(decode=16, context=2048))
    assert step_flops(four) == pytest.approx(step_flops(one) / 4, rel=0.01)
    ar = four[four["op"] == "all_reduce"]
    assert int(ar["count"].sum()) == 2 * cfg.layers + 1 and (ar["n"] == 16 * cfg.hidden).all()
    assert not (one["op"] == "all_reduce").any()
    ten = step_kernels(cfg, check_layout(cfg, 16), Precision.of(cfg), Step(decode=4, context=64))
    attn = ten[ten["op"] == "sdpa"].iloc[0]
    assert (attn["heads"], attn["num_kv_heads"]) == (4, 1)  # 8 KV heads over 16 GPUs: one each, replicated


def test_moe_kernels_route_tokens_through_local_experts():
    cfg = parse_config(MOE, "mixtral")
    k = step_kernels(cfg, check_layout(cfg, 4, ep=2), Precision.of(cfg, "fp8"), Step(decode=32, context=512))
    moe = k[k["op"] == "moe"].iloc[0]
    assert (moe["m"], moe["n"], moe["experts"], moe["topk"], moe["tp"], moe["ep"], moe["dtype"]) == (
        32,
        14336,
        8,
        2,
        2,
        2,
        "float8_e4m3fn",
    )
    assert set(k.loc[k["category"] == "moe", "op"]) == {"linear", "softmax", "moe"}
    assert not (k["name"] == "gate_up_proj").any()


# --------------------------------------------------------------------------- the serving law by hand
def test_the_serving_law_by_hand():
    p = plan(concurrency=8, isl=1000, osl=101, max_concurrency=100, budget=4096)
    assert (p.running, p.group, p.groups, p.regime, p.mixed_steps) == (8, 4, 2, "decode-bound", 1)
    s = {
        "decode": 10.0,
        "mix0": 50.0,
        "one0": 20.0,
        "alone0": 15.0,
        **{f"curve{c}": 10.0 for c in (1001, 1101)},
        "batch4_0": 40.0,
    }
    law = serve(p, s)
    assert law["tpot_ms"] == pytest.approx((99 * 10 + 1 * 50) / 100)  # one other group's prefill step
    assert law["ttft_ms"] == pytest.approx(20 + 0.5 * law["tpot_ms"])  # alone in its step, after the step in flight
    assert law["prefill_ms"] == pytest.approx(2 * 40)
    assert law["requests_per_ms"] == pytest.approx(8 / (law["ttft_ms"] + 100 * law["tpot_ms"]))
    first = serve(p, s, {"requests_per_client": 4})  # the first wave: both groups prefill one after the other
    assert first["ttft_ms"] == pytest.approx(law["ttft_ms"] * 0.75 + 50 * 1.5 / 4)
    queued = plan(concurrency=16, isl=1000, osl=101, max_concurrency=8, budget=4096)
    q = serve(queued, s)
    assert q["queue_ms"] == pytest.approx(1.0 * q["lifetime_ms"]) and q["ttft_ms"] > law["ttft_ms"]
    paged = plan(concurrency=16, isl=1000, osl=101, max_concurrency=8, budget=4096, queue=False)
    assert paged.running == 16
    busy = plan(concurrency=64, isl=1000, osl=5, max_concurrency=100, budget=2048)
    assert busy.regime == "prefill-bound" and busy.decoding <= busy.running - busy.group
    long = plan(concurrency=2, isl=5000, osl=50, max_concurrency=10, budget=2048)
    assert long.group == 1 and [c for c, _ in long.chunks] == [2046, 2046, 908]
    assert [pre for _, pre in long.chunks] == [0, 2046, 4092]


# --------------------------------------------------------------------------- every input moves its outputs
def test_every_input_moves_the_outputs_it_should(roofline):
    base = serve_it(BIG, roofline, tp=4, batch=16, isl=2000, osl=200)
    assert base["tpot_ms"] > 0 and base["ttft_ms"] > 0 and base["in_domain"] is None
    more = serve_it(BIG, roofline, tp=4, batch=64, isl=2000, osl=200)
    assert more["tpot_ms"] > base["tpot_ms"] and more["tokens_per_s_per_gpu"] > base["tokens_per_s_per_gpu"]
    longer_in = serve_it(BIG, roofline, tp=4, batch=16, isl=8000, osl=200)
    assert longer_in["ttft_ms"] > base["ttft_ms"] and longer_in["max_concurrency"] < base["max_concurrency"]
    longer_out = serve_it(BIG, roofline, tp=4, batch=64, isl=2000, osl=2000)  # a cache long enough to cost
    assert longer_out["decode_mean_ms"] > more["decode_mean_ms"] and longer_out["tpot_ms"] < more["tpot_ms"]
    tp8 = serve_it(BIG, roofline, tp=8, batch=16, isl=2000, osl=200)
    assert tp8["tpot_ms"] < base["tpot_ms"] and tp8["weights_gib_per_gpu"] == pytest.approx(
        base["weights_gib_per_gpu"] / 2, rel=0.02
    )
    fp8 = serve_it(BIG, roofline, tp=4, batch=16, isl=2000, osl=200, dtype="fp8")
    assert fp8["tpot_ms"] < base["tpot_ms"] and fp8["ttft_ms"] < base["ttft_ms"]
    assert fp8["weights_gib_per_gpu"] < 0.6 * base["weights_gib_per_gpu"] and fp8["dtype"] == "float8_e4m3fn"
    kv8 = serve_it(BIG, roofline, tp=4, batch=64, isl=2000, osl=200, kv_dtype="fp8")
    assert kv8["kv_bytes_per_token"] == more["kv_bytes_per_token"] / 2
    assert kv8["decode_mean_ms"] < more["decode_mean_ms"] and kv8["max_concurrency"] > more["max_concurrency"]
    h100 = serve_it(BIG, roofline, "H100-SXM", tp=4, batch=16, isl=2000, osl=200)
    assert h100["tpot_ms"] > base["tpot_ms"] and h100["max_concurrency"] < base["max_concurrency"]
    # expert parallelism: the fused MoE kernel's layout (each expert whole on its GPU instead of a quarter of every
    # expert); under balanced routing a GPU moves the same FLOPs and bytes either way, so the roofline is equal and a
    # kernel model that prices the narrower experts' tiles is what tells them apart
    moe1 = serve_it(MOE, roofline, tp=4, batch=16, isl=1000, osl=100)
    moe2 = serve_it(MOE, roofline, tp=4, ep=4, batch=16, isl=1000, osl=100)
    assert moe2["ep"] == 4 and moe2["tpot_ms"] == pytest.approx(moe1["tpot_ms"], rel=1e-9)

    def tiles(frame):  # a toy kernel model: an expert's columns below 4096 per GPU run at half speed
        t = np.full(len(frame), 0.02)
        if "ep" in frame:
            t = np.where(frame["n"] / frame["tp"] < 4096, 0.2, 0.1)
        return pd.DataFrame({"runtime_ms": t, "runtime_ms_lo": t, "runtime_ms_hi": t})

    toy = PredictCoster(tiles, "toy")
    assert serve_it(MOE, toy, tp=4, ep=4)["tpot_ms"] < serve_it(MOE, toy, tp=4)["tpot_ms"]


def test_memory_fit_and_the_largest_concurrency(roofline):
    conf = load_conf()
    s = serve_it(BIG, roofline, tp=2, batch=8, isl=1000, osl=1000, dtype="fp8")
    per_token = 80 * 2 * 4 * 128 * 2  # layers x K and V x KV heads per GPU x head_dim x bf16
    assert s["kv_bytes_per_token_per_gpu"] == per_token and s["kv_bytes_per_token"] == 2 * per_token
    assert s["max_concurrency"] == int(s["kv_cache_gib_per_gpu"] * 2**30 // (per_token * 2000))
    usable = conf["memory_fraction"] * (141 - s["weights_gib_per_gpu"]) + s["weights_gib_per_gpu"] * (
        1 - conf["memory_fraction"]
    )
    assert s["kv_cache_gib_per_gpu"] < usable
    over = serve_it(BIG, roofline, tp=2, batch=4 * s["max_concurrency"], isl=1000, osl=1000, dtype="fp8")
    assert over["running"] == s["max_concurrency"] and over["queue_ms"] > 0 and over["ttft_ms"] > over["queue_ms"]
    with pytest.raises(LLMError, match=r"does not fit 1 x H100-SXM in bfloat16: weights 131\.\d GiB"):
        serve_it(BIG, roofline, "H100-SXM", tp=1)


# --------------------------------------------------------------------------- costs: roofline, fallback, power
def test_the_roofline_coster_by_hand(roofline):
    from data.hardware import HardwareRegistry

    spec = HardwareRegistry.from_dir().get("H200-SXM")
    k = pd.DataFrame(
        [
            {"op": "linear", "dtype": "bfloat16", "kv_dtype": "", "m": 4096, "n": 4096, "k": 4096},
            {"op": "all_reduce", "dtype": "bfloat16", "kv_dtype": "", "n": 1 << 20, "gpus": 4},
        ]
    )
    t = roofline.cost(k, "H200-SXM")["runtime_ms"].to_numpy()
    assert t[0] == pytest.approx(2 * 4096**3 / (989.4e12) * 1e3)
    bw, lat, _ = 450e9, 10e-6, None
    assert t[1] == pytest.approx((lat + 2 * 3 / 4 * (1 << 20) * 2 / bw) * 1e3)
    assert spec.architecture == "hopper"


def test_a_kernel_model_that_cannot_cost_an_op_falls_back_to_the_roofline(roofline):
    def predict(frame):
        if (frame["op"] == "all_reduce").any():
            raise ValueError("op 'all_reduce' (family collective) has no physics model")
        return pd.DataFrame(
            {"runtime_ms": np.full(len(frame), 0.05), "runtime_ms_lo": 0.04, "runtime_ms_hi": 0.07, "in_domain": True}
        )

    s = serve_it(BIG, PredictCoster(predict, "toy", fallback=roofline), tp=2)
    assert s["costed_by_roofline"] == "all_reduce" and s["in_domain"] is False
    assert "roofline: op 'all_reduce'" in s["domain_reason"]
    assert s["tpot_ms_lo"] < s["tpot_ms"] < s["tpot_ms_hi"]
    with pytest.raises(LLMError, match="has no physics model"):
        serve_it(BIG, PredictCoster(predict, "toy"), tp=2)


# --------------------------------------------------------------------------- bad configs: one line
@pytest.mark.parametrize(
    "raw,args,msg",
    [
        ({**SMALL, "architectures": ["FooForCausalLM"]}, [], "architecture 'FooForCausalLM' is not supported"),
        ({k: v for k, v in SMALL.items() if k != "num_attention_heads"}, [], "lacks 'num_attention_heads'"),
        ({**SMALL, "hidden_size": "big"}, [], "hidden_size must be a positive integer, got 'big'"),
        (SMALL, ["--tp", "3"], "--tp 3 does not divide the 8 attention heads"),
        (
            {**SMALL, "num_attention_heads": 12, "num_key_value_heads": 3, "hidden_size": 384},
            ["--tp", "4"],
            "--tp 4 is not a multiple of the 3 KV heads",
        ),
        (SMALL, ["--ep", "2"], "is a dense model"),
        (MOE, ["--tp", "4", "--ep", "3"], "--ep 3 does not divide --tp 4"),
        ({**MOE, "num_local_experts": 6}, ["--tp", "4", "--ep", "4"], "--ep 4 does not divide the 6 experts"),
        (BIG, ["--hardware", "H100-SXM"], "does not fit 1 x H100-SXM"),
        (SMALL, ["--dtype", "fp4"], "unknown --dtype 'fp4'"),
        (SMALL, ["--hardware", "xcvu13p"], "is a fpga"),
    ],
)
def test_bad_configs_are_one_error_line(tmp_path, capsys, raw, args, msg):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    hw = [] if "--hardware" in args else ["--hardware", "H200-SXM"]
    rc, out, err = cli_in_process(
        capsys,
        "llm",
        "--config",
        str(path),
        *hw,
        *args,
        "--batch",
        "4",
        "--isl",
        "128",
        "--osl",
        "16",
        "--model",
        "roofline",
    )
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("costmodel: error: ") and msg in err, err


def test_a_missing_or_broken_config_file_is_one_line(tmp_path, capsys):
    def llm(config):
        request = ("--hardware", "H200-SXM", "--batch", "1", "--isl", "8", "--osl", "8", "--model", "roofline")
        return cli_in_process(capsys, "llm", "--config", str(config), *request)

    rc, _, err = llm(tmp_path / "none.json")
    assert rc == 2 and "config file not found" in err and err.count("\n") == 1
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    rc, _, err = llm(bad)
    assert rc == 2 and "config bad: not JSON" in err and err.count("\n") == 1


# --------------------------------------------------------------------------- the CLI, Python and REST
def test_cli_with_the_roofline_needs_no_store(tmp_path, capsys):
    path = tmp_path / "big.json"
    path.write_text(json.dumps(BIG))
    rc, out, err = cli_in_process(
        capsys,
        "llm",
        "--config",
        str(path),
        "--hardware",
        "H200-SXM",
        "--tp",
        "4",
        "--batch",
        "32",
        "--isl",
        "2000",
        "--osl",
        "500",
        "--model",
        "roofline",
        "--format",
        "json",
    )
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["summary"]["kernel_model"] == "roofline" and doc["summary"]["tp"] == 4
    assert [r["category"] for r in doc["breakdown"]][:4] == ["gemm", "attention", "all_reduce", "norm"]
    assert len(doc["decode_curve"]) == 5


@pytest.mark.slow
def test_cli_python_and_rest_give_the_same_figures_with_a_registered_model(tiny_run, tmp_path):
    from models.llm_api import predict_llm_config
    from tests.servers import post_json, predict_isolated, serve_costmodel

    path = tmp_path / "small.json"
    path.write_text(json.dumps(SMALL))
    model = "models:/costmodel-runtime@champion"
    args = [
        "--config",
        str(path),
        "--hardware",
        "H200-SXM",
        "--tp",
        "2",
        "--batch",
        "32",
        "--isl",
        "2000",
        "--osl",
        "500",
        "--tracking-uri",
        tiny_run["uri"],
    ]
    proc = run_cli("llm", *args)
    assert proc.returncode == 0, proc.stderr
    assert "time to first token" in proc.stdout and "time per output token" in proc.stdout
    assert "largest concurrency that fits" in proc.stdout and "by kernel category" in proc.stdout
    js = run_cli("llm", *args, "--format", "json")
    summary = json.loads(js.stdout)["summary"]
    assert summary["kernel_model"] == model and summary["in_domain"] in (True, False)
    py = predict_llm_config(
        str(path), "H200-SXM", model, tp=2, batch=32, isl=2000, osl=500, tracking_uri=tiny_run["uri"]
    ).summary
    for key in ("ttft_ms", "tpot_ms", "tpot_ms_lo", "tpot_ms_hi", "prefill_ms", "max_concurrency"):
        assert py[key] == pytest.approx(summary[key], rel=1e-9), key
    request = {"llm_config": json.dumps(SMALL), "hardware": "H200-SXM", "tp": 2, "batch": 32, "isl": 2000, "osl": 500}
    with serve_costmodel(model, tiny_run["uri"], tmp_path / "serve.log") as base:
        status, body = post_json(base + "/invocations", json.dumps({"dataframe_records": [request]}).encode())
        assert status == 200, body
        got = body["predictions"][0]
        for key in ("ttft_ms", "tpot_ms", "max_concurrency"):
            assert got[key] == pytest.approx(py[key], rel=1e-9), key
        bad = {**request, "tp": 3}
        status, body = post_json(base + "/invocations", json.dumps({"dataframe_records": [bad]}).encode())
        assert status == 400 and "--tp 3 does not divide the 8 attention heads" in body["message"], body
    preds, _ = predict_isolated(tiny_run["uri"], model, [request], ["models.llm"], tmp_path)
    assert preds["tpot_ms"][0] == pytest.approx(py["tpot_ms"], rel=1e-9)  # the bundled code and conf/ suffice


# --------------------------------------------------------------------------- the check
@pytest.mark.shared_data
@pytest.mark.slow
def test_the_check_on_a_few_silicon_rows(tmp_path):
    from mlflow import MlflowClient

    proc = run_entry("pipelines.evaluate", "experiment=llm_serving", "tiny=true", out=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "| all | 6 |" in proc.stdout
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("costmodel-llm-serving").experiment_id])
    assert sorted(r.data.tags["model"] for r in runs) == ["physics", "roofline"]
    for r in runs:
        m = r.data.metrics
        assert m["llm_serving/all/n"] == 6 and m["llm_serving/all/ttft_ms.mape"] > 0
        assert "llm_serving/all/tpot_ms.mape" in m and "llm_serving/tp:1/tpot_ms.mape" in m
    assert (tmp_path / "public_eval" / "llm_serving.md").read_text().startswith("| scope | n |")


@pytest.mark.shared_data
def test_silicon_rows_and_their_metrics():
    from omegaconf import OmegaConf

    from models.llm_eval import concurrency_bucket, load_silicon, metrics
    from tests.conftest import ROOT

    ds = OmegaConf.load(ROOT / "conf" / "dataset" / "llm_serving.yaml")
    rows = load_silicon(SHARED, ds)
    assert len(rows) == 199 and set(rows["mode"]) == {"agg"}
    assert set(rows["dtype"]) == {"float8_e4m3fn", "fp8_block"}
    assert list(concurrency_bucket(np.array([4, 8, 9, 32, 64, 512]), [8, 32, 128])) == [
        "le8",
        "le8",
        "9-32",
        "9-32",
        "33-128",
        "gt128",
    ]
    pred = pd.DataFrame(
        {"ttft_ms": rows["silicon_ttft_ms"] * 1.1, "tpot_ms": rows["silicon_tpot_ms"] * 0.8, "error": ""}
    )
    for c in ("ttft_ms", "tpot_ms"):
        pred[f"{c}_lo"], pred[f"{c}_hi"] = pred[c] * 0.5, pred[c] * 2
    m = metrics(rows, pred, [8, 32, 128])
    assert m["all"]["ttft_ms.mape"] == pytest.approx(10) and m["all"]["tpot_ms.mape"] == pytest.approx(20)
    assert m["all"]["tpot_ms.covered"] == 1.0 and m["tp:8"]["n"] == (rows["tp_size"] == 8).sum()


def test_a_power_model_gives_power_and_energy_per_output_token(roofline):
    def power(frame):  # a toy power model: every kernel at 400 W
        t = np.full(len(frame), 0.01)
        return pd.DataFrame(
            {
                "runtime_ms": t,
                "runtime_ms_lo": t,
                "runtime_ms_hi": t,
                "power_w": 400.0,
                "power_w_lo": 350.0,
                "power_w_hi": 450.0,
            }
        )

    cfg = parse_config(BIG)
    s = predict_llm(
        cfg, "H200-SXM", roofline, power=PredictCoster(power, "toy power"), tp=4, batch=16, isl=1024, osl=256
    ).summary
    assert s["power_w_per_gpu"] > 132  # above the H200's static power: the kernels' dynamic energy on top
    assert s["energy_per_token_j"] == pytest.approx(s["power_w_per_gpu"] / s["tokens_per_s_per_gpu"])
    assert "power_w_per_gpu" not in serve_it(BIG, roofline, tp=4, batch=16)


def test_no_store_names_the_roofline_as_the_way_out(tmp_path, capsys, monkeypatch):
    path = tmp_path / "small.json"
    path.write_text(json.dumps(SMALL))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    rc, _, err = cli_in_process(
        capsys, "llm", "--config", str(path), "--hardware", "H200-SXM", "--batch", "1", "--isl", "8", "--osl", "8"
    )
    assert rc == 2 and "no MLflow store to read" in err and "--model roofline" in err and err.count("\n") == 1
