"""Whole networks defined in torch (MLP, small CNN, transformer block) and their split into layer workloads.

A network is an ``nn.Module`` built only from *leaf modules that are ops of* the registry (:mod:`data.ops`)
(``Linear`` -> ``linear``, ``Conv2d`` -> ``conv2d``, ``LayerNorm`` -> ``layernorm``, ``ReLU``/``GELU`` ->
``relu``/``gelu``, :class:`Add` -> ``add``, :class:`Mul` -> ``mul``, :class:`Attention` -> ``sdpa``,
:class:`MeanPool` -> ``mean``).
The network row runs that module; :func:`data.workloads.network_layers` runs the *same* module on ``meta`` tensors
with a forward hook on every leaf and records each leaf's op and shape in our conventions. So a network row and its
layer rows share one code path: change a network and both follow. Views/reshapes/transposes between layers are
not layers (they launch no kernel, or a copy we do not model).

Networks and their shape parameters:

* ``mlp(batch, width, depth)``: input [batch, width]; ``depth`` x (Linear(width, width) + ReLU).
* ``cnn(batch, width, depth, h)``: input [batch, 3, h, h]; block i (0..depth-1): Conv2d(c_{i-1}, width*2^i,
  3, stride 1 for i = 0 else 2, padding 1) + ReLU; global mean over h*w; Linear(c_last, 10) classifier.
* ``transformer(batch, seq_len, width, heads, depth)``: ``depth`` pre-LN encoder blocks on [batch, seq_len,
  width]: LN -> Linear(width, 3 width) -> SDPA(heads, head_dim = width/heads, non-causal) -> Linear(width,
  width) -> residual Add -> LN -> Linear(width, 4 width) -> GELU -> Linear(4 width, width) -> residual Add
  (the GPT-2 / ViT block layout, without dropout).
* ``resnet(batch, width, depth, h)``: input [batch, 3, h, h]; stem Conv2d(3, width, 3, padding 1) + ReLU;
  ``depth`` basic residual blocks at constant width and resolution (He et al. 2016 without batch norm):
  Conv2d(width, width, 3, padding 1) -> ReLU -> Conv2d(width, width, 3, padding 1) -> Add(x, .) -> ReLU;
  global mean; Linear(width, 10).
* ``gated_mlp(batch, width, depth)``: input [batch, width]; ``depth`` residual GeGLU feed-forward blocks
  (Shazeer 2020, "GLU Variants Improve Transformer"): x + Linear(2 width, width)(GELU(Linear(width, 2
  width) x) * Linear(width, 2 width) x).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn


class Add(nn.Module):
    """Residual add, its own leaf so it appears as an ``add`` layer."""

    def forward(self, x, y):
        return x + y


class Mul(nn.Module):
    """Elementwise product (a GLU gate), its own leaf so it appears as a ``mul`` layer."""

    def forward(self, x, y):
        return x * y


class Attention(nn.Module):
    """``F.scaled_dot_product_attention`` on q, k, v [batch, heads, seq, head_dim]."""

    def __init__(self, causal: bool = False):
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)


class MeanPool(nn.Module):
    """Global average pool as a ``mean`` reduction over the last dim of [batch*c, h*w]."""

    def forward(self, x):
        b, c = x.shape[:2]
        return x.reshape(b * c, -1).mean(dim=-1).reshape(b, c)


class MLP(nn.Module):
    def __init__(self, width: int, depth: int):
        super().__init__()
        self.layers = nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())])

    def forward(self, x):
        return self.layers(x)


class CNN(nn.Module):
    def __init__(self, width: int, depth: int, classes: int = 10):
        super().__init__()
        blocks, c_in = [], 3
        for i in range(depth):
            c_out = width * 2**i
            blocks += [nn.Conv2d(c_in, c_out, 3, stride=1 if i == 0 else 2, padding=1), nn.ReLU()]
            c_in = c_out
        self.features = nn.Sequential(*blocks)
        self.pool = MeanPool()
        self.head = nn.Linear(c_in, classes)

    def forward(self, x):
        return self.head(self.pool(self.features(x)))


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.attn = Attention()
        self.fc1, self.act, self.fc2 = nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        self.add1, self.add2 = Add(), Add()

    def forward(self, x):
        b, s, w = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(b, s, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        a = self.attn(q, k, v).transpose(1, 2).reshape(b, s, w)
        x = self.add1(x, self.proj(a))
        return self.add2(x, self.fc2(self.act(self.fc1(self.ln2(x)))))


class Transformer(nn.Module):
    def __init__(self, width: int, heads: int, depth: int):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(width, heads) for _ in range(depth)])

    def forward(self, x):
        return self.blocks(x)


class ResBlock(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(width, width, 3, padding=1), nn.Conv2d(width, width, 3, padding=1)
        self.act1, self.act2, self.add = nn.ReLU(), nn.ReLU(), Add()

    def forward(self, x):
        return self.act2(self.add(x, self.conv2(self.act1(self.conv1(x)))))


class ResNet(nn.Module):
    def __init__(self, width: int, depth: int, classes: int = 10):
        super().__init__()
        self.stem, self.act = nn.Conv2d(3, width, 3, padding=1), nn.ReLU()
        self.blocks = nn.Sequential(*[ResBlock(width) for _ in range(depth)])
        self.pool = MeanPool()
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.pool(self.blocks(self.act(self.stem(x)))))


class GeGLUBlock(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.gate, self.up = nn.Linear(width, 2 * width), nn.Linear(width, 2 * width)
        self.act, self.mul = nn.GELU(), Mul()
        self.down, self.add = nn.Linear(2 * width, width), Add()

    def forward(self, x):
        return self.add(x, self.down(self.mul(self.act(self.gate(x)), self.up(x))))


class GatedMLP(nn.Module):
    def __init__(self, width: int, depth: int):
        super().__init__()
        self.blocks = nn.Sequential(*[GeGLUBlock(width) for _ in range(depth)])

    def forward(self, x):
        return self.blocks(x)


def _make(name: str, p: Mapping[str, int]) -> tuple[nn.Module, tuple[int, ...]]:
    if name == "mlp":
        return MLP(p["width"], p["depth"]), (p["batch"], p["width"])
    if name == "cnn":
        return CNN(p["width"], p["depth"]), (p["batch"], 3, p["h"], p["h"])
    if name == "transformer":
        return Transformer(p["width"], p["heads"], p["depth"]), (p["batch"], p["seq_len"], p["width"])
    if name == "resnet":
        return ResNet(p["width"], p["depth"]), (p["batch"], 3, p["h"], p["h"])
    if name == "gated_mlp":
        return GatedMLP(p["width"], p["depth"]), (p["batch"], p["width"])
    raise ValueError(f"unknown network {name!r}")


def build_network(name: str, p: Mapping[str, int], dtype: torch.dtype, device: str):
    """``(module, (x,), weights)`` in the builder contract of :mod:`data.workloads`."""
    with torch.device(device):
        module, in_shape = _make(name, p)
    module = module.to(dtype=dtype).eval()
    x = (
        torch.empty(in_shape, dtype=dtype, device=device)
        if device == "meta"
        else torch.randn(in_shape, dtype=dtype, device=device)
    )
    return module, (x,), tuple(module.parameters())


def _rows(x: torch.Tensor) -> int:
    return int(x.numel() // x.shape[-1])


def leaf_workload(mod: nn.Module, args: tuple) -> dict | None:
    """Our (op, params) for one leaf call, from the module and the shapes it was called with."""
    x = args[0]
    if isinstance(mod, nn.Linear):
        return {"op": "linear", "params": {"m": _rows(x), "k": mod.in_features, "n": mod.out_features}}
    if isinstance(mod, nn.Conv2d):
        return {
            "op": "conv2d",
            "params": {
                "batch": x.shape[0],
                "c_in": mod.in_channels,
                "c_out": mod.out_channels,
                "h": x.shape[2],
                "w": x.shape[3],
                "kernel": mod.kernel_size[0],
                "stride": mod.stride[0],
                "padding": mod.padding[0],
                "groups": mod.groups,
                "dilation": mod.dilation[0],
            },
        }
    if isinstance(mod, nn.LayerNorm):
        return {"op": "layernorm", "params": {"m": _rows(x), "n": x.shape[-1]}}
    for cls, op in ((nn.ReLU, "relu"), (nn.GELU, "gelu"), (Add, "add"), (Mul, "mul")):
        if isinstance(mod, cls):
            return {"op": op, "params": {"m": _rows(x), "n": x.shape[-1]}}
    if isinstance(mod, Attention):
        b, h, s, d = x.shape
        return {
            "op": "sdpa",
            "params": {"batch": b, "heads": h, "seq_len": s, "head_dim": d, "causal": int(mod.causal)},
        }
    if isinstance(mod, MeanPool):
        return {"op": "mean", "params": {"m": x.shape[0] * x.shape[1], "n": x[0, 0].numel()}}
    return None
