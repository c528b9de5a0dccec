"""Small models written in plain PyTorch (no torchvision CPU build here) in the layouts of the real ones.

* :func:`resnet`: ResNet-18's layout (He et al. 2016): 7x7/2 stem conv + BN + ReLU + 3x3/2 max pool, basic
  blocks with a 1x1/2 projection shortcut when the shape changes, adaptive average pool to 1x1, linear head.
* :func:`mobilenet`: MobileNetV2's inverted residuals (Sandler et al. 2018): 1x1 expand, 3x3 depthwise
  (``groups = channels``), 1x1 project, BN and ReLU6, residual add when the shape is kept.
* :func:`vit`: a ViT (Dosovitskiy et al. 2021): 16x16/16 patch conv, class token concatenated, learned
  positions, pre-LN blocks with attention written as ``q @ k^T -> softmax -> @ v`` (timm's layout) or with
  ``F.scaled_dot_product_attention``, GELU MLP, head on the class token.
* :func:`tiny_lm`: a token model, an embedding of integer ids and a linear head over the vocabulary.

Each factory takes no argument (what ``costmodel predict --torch tests.torch_models:resnet`` calls).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.down = None
        if stride != 1 or c_in != c_out:
            self.down = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    def __init__(self, widths=(16, 32, 64), blocks=(1, 1, 1), classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 7, 2, 3, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        layers, c = [], widths[0]
        for i, (w, n) in enumerate(zip(widths, blocks)):
            for j in range(n):
                layers.append(BasicBlock(c, w, 2 if i > 0 and j == 0 else 1))
                c = w
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


class InvertedResidual(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, expand: int):
        super().__init__()
        hidden = c_in * expand
        self.use_res = stride == 1 and c_in == c_out
        layers = []
        if expand != 1:
            layers += [nn.Conv2d(c_in, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True)]
        layers += [
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, c_out, 1, bias=False),
            nn.BatchNorm2d(c_out),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNet(nn.Module):
    # (expand, c_out, repeats, stride): the first rows of MobileNetV2's table, narrower
    SETTINGS = ((1, 8, 1, 1), (6, 12, 2, 2), (6, 16, 2, 2))

    def __init__(self, classes: int = 10):
        super().__init__()
        layers = [nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6(inplace=True)]
        c = 16
        for t, c_out, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(c, c_out, s if i == 0 else 1, t))
                c = c_out
        layers += [nn.Conv2d(c, 64, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU6(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(64, classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


class ViTAttention(nn.Module):
    def __init__(self, dim: int, heads: int, fused: bool):
        super().__init__()
        self.heads, self.fused, self.scale = heads, fused, (dim // heads) ** -0.5
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        if self.fused:
            x = F.scaled_dot_product_attention(q, k, v)
        else:
            attn = (q @ k.transpose(-2, -1)) * self.scale
            x = attn.softmax(dim=-1) @ v
        return self.proj(x.transpose(1, 2).reshape(b, n, d))


class ViTBlock(nn.Module):
    def __init__(self, dim: int, heads: int, fused: bool):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim), ViTAttention(dim, heads, fused)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(
        self,
        image: int = 32,
        patch: int = 16,
        dim: int = 64,
        depth: int = 2,
        heads: int = 4,
        classes: int = 10,
        fused: bool = False,
    ):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, dim))
        self.blocks = nn.Sequential(*[ViTBlock(dim, heads, fused) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


def resnet() -> nn.Module:
    return ResNet()


def mobilenet() -> nn.Module:
    return MobileNet()


def vit() -> nn.Module:
    return ViT()


def vit_sdpa() -> nn.Module:
    return ViT(fused=True)


class TinyLM(nn.Module):
    """A token model: embedding -> linear over the vocabulary (its input is integer token ids)."""

    def __init__(self, vocab: int = 1000, width: int = 64):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids):
        return self.head(self.embed(ids))


def tiny_lm() -> nn.Module:
    return TinyLM()


def not_a_module():
    return 3
