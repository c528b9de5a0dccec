"""Capture cost and coverage of ``features.torch_capture.workloads_from_module`` on real-sized models.

    .venv/bin/python benchmarks/network_capture.py                 # all models, 3 repeats
    .venv/bin/python benchmarks/network_capture.py --models gpt2 --repeats 5

Per model (built under ``torch.device("meta")``: no weights), prints the median wall seconds of one capture
(torch.export + mapping; the first, warm-up capture of the process is not counted), the kernels found, the op
calls left unmapped, and the workloads' total FLOPs (``data.workloads.count_cost`` per kernel) next to
``FlopCounterMode`` on the whole model: equal when every FLOP-carrying op is mapped.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from data.workloads import OPS, count_cost  # noqa: E402
from features.torch_capture import counted_flops, workloads_from_module  # noqa: E402


def models() -> dict:
    import transformers as T

    from tests.torch_models import MobileNet, ResNet

    ids = torch.zeros(1, 512, dtype=torch.long, device="meta")
    img = torch.empty(8, 3, 224, 224, device="meta")
    return {
        "resnet34-layout": (lambda: ResNet((64, 128, 256, 512), (3, 4, 6, 3), 1000), img),
        "mobilenet-like": (MobileNet, img),
        "gpt2-124M": (lambda: T.GPT2LMHeadModel(T.GPT2Config()), ids),
        "bert-base": (lambda: T.BertModel(T.BertConfig()), ids),
        "llama-8-layer": (
            lambda: T.LlamaForCausalLM(
                T.LlamaConfig(
                    num_hidden_layers=8,
                    hidden_size=1024,
                    num_attention_heads=16,
                    num_key_value_heads=4,
                    intermediate_size=2816,
                    vocab_size=32000,
                )
            ),
            ids,
        ),
    }


def flops(rows: pd.DataFrame) -> float:
    return sum(
        count_cost(r["op"], {p: int(r[p]) for p in OPS[r["op"]].names if pd.notna(r[p])}, r["dtype"])[0]
        for _, r in rows.iterrows()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", help="subset of the models below (default: all)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"# {platform.node()} {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s)"
    )
    todo = models()
    names = args.models or list(todo)
    warm = None
    for name in names:
        make, x = todo[name]
        with torch.device("meta"):
            model = make()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if warm is None:
                warm = workloads_from_module(model, (x,))
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                rows, unmapped = workloads_from_module(model, (x,))
                times.append(time.perf_counter() - t0)
        ours, ref = flops(rows), counted_flops(model, (x,))
        print(
            f"{name:16s} capture {statistics.median(times):6.2f} s (median of {args.repeats})  kernels {len(rows):4d}"
            f"  unmapped {sum(c for _, c in unmapped):3d}  workload GFLOP {ours / 1e9:9.2f}"
            f"  FlopCounterMode GFLOP {ref / 1e9:9.2f}  ratio {ours / ref:.4f}"
        )


if __name__ == "__main__":
    main()
