"""Python API of ``costmodel llm``: an LLM as it is served, costed with a registered kernel model.

    from models.llm_api import predict_llm_config
    res = predict_llm_config("llama-3.1-8b.json", "H200-SXM", "models:/costmodel-runtime@champion",
                             tracking_uri="sqlite:///outputs/mlflow.db", tp=1, batch=32, isl=2000, osl=500)
    res.summary["ttft_ms"], res.summary["tpot_ms"], res.decode_curve, res.breakdown

``model`` is a model URI (``models:/name@alias``, ``runs:/...``, a local folder), a loaded pyfunc, or
``"roofline"`` (the plain spec roofline, no store needed); ``power_model`` (optional) a power model's URI whose
per-kernel power gives power and energy per output token. The composition, the serving law and the figures are
``models.llm``'s. REST: a registered kernel model answers one LLM request per row with an ``llm_config`` column
(``models.llm.llm_rows``, called by the served pyfunc, ``models/serving.py``; the request shape is in ``docs/llm.md``).
Bad input raises :class:`models.llm.LLMError` (a ``ValueError``) with one line.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from models.llm import (  # noqa: F401 - llm_rows: the served pyfunc's answer to an LLM request, importable here too
    KernelCoster,
    LLMError,
    LLMPrediction,
    PredictCoster,
    RooflineCoster,
    llm_rows,
    load_config,
    predict_llm,
)

ROOFLINE = "roofline"
REQUEST_COLUMNS = ("llm_config", "hardware", "tp", "ep", "dtype", "kv_dtype", "batch", "isl", "osl")


def pyfunc_predict(loaded) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """A loaded model's ``predict`` with its input errors as ``ValueError``: the lean loader's model raises
    ``FeatureError`` (one already), MLflow's pyfunc its one-line ``MlflowException`` (MLflow is imported only then)."""

    def predict(frame: pd.DataFrame) -> pd.DataFrame:
        try:
            return loaded.predict(frame)
        except ValueError:
            raise
        except Exception as exc:
            from mlflow.exceptions import MlflowException

            from models.pyfunc import INPUT_ERROR_PREFIX

            if isinstance(exc, MlflowException):
                raise ValueError(exc.message.removeprefix(INPUT_ERROR_PREFIX)) from None
            raise

    return predict


def kernel_coster(model, tracking_uri: str | None = None, registry=None, name: str | None = None) -> KernelCoster:
    """The kernel costs behind an LLM prediction: ``"roofline"``, or a kernel model (URI, or a loaded model: the
    lean loader's or MLflow's pyfunc, ``name`` naming it) with the roofline for what it cannot cost
    (``models.llm.PredictCoster``)."""
    if isinstance(model, str) and model == ROOFLINE:
        return RooflineCoster(registry)
    loaded = _load(model, tracking_uri)
    from models.networks_api import _registry

    name = name or (model if isinstance(model, str) else "kernel model")
    meta = getattr(loaded.unwrap_python_model(), "meta", None) or {} if hasattr(loaded, "unwrap_python_model") else {}
    harness = "cuda_graph" if meta.get("domain") else None  # a physics model times kernels in a CUDA graph too
    return PredictCoster(
        pyfunc_predict(loaded), name, fallback=RooflineCoster(registry or _registry(loaded)), harness=harness
    )


def _load(model, tracking_uri: str | None):
    if not isinstance(model, str):
        if not hasattr(model, "predict"):
            raise LLMError(f"model must be a model URI, {ROOFLINE!r} or have predict(), got {type(model).__name__}")
        return model
    from mlflow.exceptions import MlflowException

    from models.api import load_cost_model

    try:
        return load_cost_model(model, tracking_uri=tracking_uri).pyfunc
    except ValueError as exc:  # a store that does not exist
        raise LLMError(str(exc)) from None
    except (MlflowException, OSError) as exc:
        line = " ".join(str(exc).strip().splitlines()[0].split())[:200] if str(exc).strip() else type(exc).__name__
        raise LLMError(f"cannot load model {model!r}: {line}") from None


def predict_llm_config(
    config,
    hardware: str,
    model="models:/costmodel-runtime@champion",
    *,
    power_model=None,
    tracking_uri: str | None = None,
    name: str | None = None,
    model_name: str | None = None,
    **request,
) -> LLMPrediction:
    """``config`` (a config.json path, its JSON text or a dict) served on ``hardware`` (``request``: ``tp``, ``ep``,
    ``dtype``, ``kv_dtype``, ``batch``, ``isl``, ``osl``, ``kv_reserve``: ``models.llm.prepare``), costed with
    ``model`` (module docstring; ``model_name`` names a loaded one)."""
    cfg = load_config(config, name)
    coster = kernel_coster(model, tracking_uri, name=model_name)
    power = kernel_coster(power_model, tracking_uri) if power_model is not None else None
    registry = getattr(getattr(coster, "fallback", None), "registry", None) or getattr(coster, "registry", None)
    return predict_llm(cfg, hardware, coster, power=power, registry=registry, **request)


def _ms(v: float) -> str:
    return f"{v / 1e3:.3g} s" if v >= 1e4 else f"{v:.4g} ms"


def _range(s: dict, key: str) -> str:
    lo, hi = s.get(f"{key}_lo"), s.get(f"{key}_hi")
    if lo is None or hi is None or lo == hi:
        return ""
    return f"  [{_ms(lo)} .. {_ms(hi)}]"


def report_text(res: LLMPrediction) -> str:
    """The figures of an LLM prediction as text (``costmodel llm``): the request, the served times with their
    interval, memory, throughput, power, the decode step as the context grows and the breakdown by kernel category."""
    s = res.summary
    lines = [
        f"{s['model']} ({s['architecture']}, {s['parameters_b']:.2f} B parameters) on {s['gpus']} x {s['hardware']}: "
        f"TP {s['tp']}"
        + (f", EP {s['ep']}" if s["ep"] > 1 else "")
        + f", {s['dtype']} weights, {s['kv_dtype']} KV cache",
        f"{s['batch']} concurrent requests of {s['isl']} tokens in, {s['osl']} out; kernel costs: {s['kernel_model']}",
        f"  time to first token      {_ms(s['ttft_ms'])}{_range(s, 'ttft_ms')}"
        + (f"  (queueing {_ms(s['queue_ms'])})" if s["queue_ms"] > 0 else ""),
        f"  time per output token    {_ms(s['tpot_ms'])}{_range(s, 'tpot_ms')}  ({s['regime']}, prefill groups of "
        f"{s['prefill_group']}, {s['token_budget']} tokens a step)",
        f"  prefill of the batch     {_ms(s['prefill_ms'])}{_range(s, 'prefill_ms')}"
        f"  ({s['running']} requests, chunked)",
        f"  one request alone: TTFT  {_ms(s['ttft_alone_ms'])}; decode step mean {_ms(s['decode_mean_ms'])}"
        f"{_range(s, 'decode_mean_ms')}",
        f"  output tokens/s per GPU  {s['tokens_per_s_per_gpu']:.4g}",
        f"  memory per GPU           weights {s['weights_gib_per_gpu']:.2f} GiB, KV cache room "
        f"{s['kv_cache_gib_per_gpu']:.2f} GiB",
        f"  KV cache per token       {s['kv_bytes_per_token'] / 1024:.4g} KiB (model), "
        f"{s['kv_bytes_per_token_per_gpu'] / 1024:.4g} KiB per GPU",
        f"  largest concurrency that fits  {s['max_concurrency']} requests of {s['isl'] + s['osl']} tokens",
    ]
    if "power_w_per_gpu" in s:
        lines.append(
            f"  power                    {s['power_w_per_gpu']:.0f} W per GPU; energy "
            f"{s['energy_per_token_j']:.4g} J per output token"
        )
    else:
        lines.append("  power / energy           (with a power model: --power-model)")
    dom = s["in_domain"]
    lines.append(
        "  domain                   "
        + ("every kernel inside the kernel model's training domain" if dom else s["domain_reason"])
    )
    lines.append("decode step as the context grows:")
    for r in res.decode_curve.itertuples(index=False):
        span = f"  [{_ms(r.step_ms_lo)} .. {_ms(r.step_ms_hi)}]" if r.step_ms_lo != r.step_ms_hi else ""
        lines.append(f"  context {r.context:>7d}   {_ms(r.step_ms)}{span}")
    lines.append("by kernel category:        decode step          prefill of the batch")
    for r in res.breakdown.itertuples(index=False):
        lines.append(
            f"  {r.category:<12s}  {_ms(r.decode_ms):>12s} {100 * r.decode_share:5.1f}%  "
            f"{_ms(r.prefill_ms):>12s} {100 * r.prefill_share:5.1f}%"
        )
    return "\n".join(lines)


def report_json(res: LLMPrediction) -> dict:
    """The prediction as one JSON document: ``summary``, ``decode_curve``, ``breakdown``, ``notes``."""
    return {
        "summary": res.summary,
        "decode_curve": res.decode_curve.to_dict("records"),
        "breakdown": res.breakdown.to_dict("records"),
        "notes": res.notes,
    }
