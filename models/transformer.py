"""A small transformer encoder over MLIR tokens (Lightning): mean-pooled tokens -> log-runtime.

``X`` is a list of token encodings from :class:`features.encoders.TokenEncoder` (dicts with ``ids``
LongTensor[T]) or of 1-D id tensors / int lists; ``y`` positive runtimes.

    e_t = Embedding(id_t) + Embedding(min(t, max_len - 1))   token + learned position
    h   = TransformerEncoder(e)                               pre-LN, padding masked
    log runtime = Linear(mean_t h_t)                          mean over the real tokens

Sequences longer than ``max_len`` are truncated (their tail is not seen: a deeper network beyond that
length looks the same as a shallower one, a known limit of this model; the GNN's additive readout has
no such limit). The log-target mean is learned as the output bias' initial value.

``residual=True``: the model is a bounded correction of the composition of the network's kernels
(``models.compose.NetworkComposer``: the kernel model of record ``kernel_model`` + ``execution``, launch and gap fitted
on the training networks): ``log runtime = log composed + B tanh(Linear(mean_t h_t) / B)`` with the output layer at
zero to start (an untrained model IS the composition) and ``B`` = ``bound``; ``X`` then comes from
``features.composed.ComposedTokenEncoder`` (tokens + kernels).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from models.base import CostModel, check_targets
from models.trainer import trainer


def _ids(X) -> list:
    import torch

    if not isinstance(X, (list, tuple)) or not X:
        raise TypeError("X must be a non-empty list of token encodings (features.encoders.TokenEncoder)")
    out = []
    for i, s in enumerate(X):
        ids = s["ids"] if isinstance(s, dict) else s
        ids = torch.as_tensor(ids, dtype=torch.long).flatten()
        if ids.numel() == 0:
            raise ValueError(f"X[{i}] is an empty token sequence")
        out.append(ids)
    return out


def _pad(seqs, max_len: int):
    import torch

    seqs = [s[:max_len] for s in seqs]
    T = max(len(s) for s in seqs)
    ids = torch.zeros((len(seqs), T), dtype=torch.long)  # <pad> = 0
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
    return ids


def _net(vocab: int, d_model: int, heads: int, layers: int, max_len: int):
    import torch
    from torch import nn

    class TokenRegressor(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d_model, padding_idx=0)
            self.pos = nn.Embedding(max_len, d_model)
            layer = nn.TransformerEncoderLayer(
                d_model, heads, 2 * d_model, dropout=0.0, batch_first=True, norm_first=True
            )
            self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.out = nn.Linear(d_model, 1)

        def forward(self, ids):
            pad = ids == 0
            pos = torch.arange(ids.shape[1], device=ids.device).clamp_max(self.pos.num_embeddings - 1)
            h = self.enc(self.tok(ids) + self.pos(pos), src_key_padding_mask=pad)
            keep = (~pad).unsqueeze(-1).float()
            return self.out((h * keep).sum(1) / keep.sum(1).clamp_min(1)).squeeze(-1)

    return TokenRegressor()


class TransformerModel(CostModel):
    """Transformer encoder over MLIR tokens -> log runtime (see module docstring)."""

    name = "token_transformer"

    def __init__(
        self,
        d_model: int = 64,
        heads: int = 4,
        layers: int = 2,
        max_len: int = 1024,
        epochs: int = 100,
        lr: float = 1e-3,
        batch_size: int = 16,
        vocab_size: int = 0,
        seed: int = 0,
        residual: bool = False,
        kernel_model: str | None = None,
        execution: str = "eager",
        bound: float = 0.5,
    ):
        self.d_model = d_model
        self.heads = heads
        self.layers = layers
        self.max_len = max_len
        self.epochs = epochs
        self.lr = lr
        self.batch_size = batch_size
        self.vocab_size = vocab_size  # 0: the size of features/mlir_vocab.json
        self.seed = seed
        self.residual = residual
        self.kernel_model = kernel_model
        self.execution = execution
        self.bound = bound

    def _build(self):
        import torch

        from features.encoders import load_vocab

        torch.manual_seed(self.seed)
        vocab = self.vocab_size or len(load_vocab())
        self.net_ = _net(vocab, self.d_model, self.heads, self.layers, self.max_len)
        return self.net_

    def fit(self, X, y):
        import lightning as L
        import torch
        from torch.utils.data import DataLoader

        seqs = _ids(X)
        y = check_targets(y, len(seqs))
        net = self._build()
        target = np.log(y)
        if self.residual:  # learn log(measured / composed), bounded, from zero
            from models.compose import NetworkComposer
            from models.gnn import kernel_items, load_kernel_model

            self.composer_ = NetworkComposer(load_kernel_model(self.kernel_model), self.execution).fit(
                kernel_items(X), y
            )
            target = target - np.log(self._composed(X))
            with torch.no_grad():
                net.out.weight.zero_(), net.out.bias.zero_()
        else:
            with torch.no_grad():
                net.out.bias.fill_(float(np.mean(target)))
        max_len, bound, residual = self.max_len, float(self.bound), self.residual
        pairs = list(zip(seqs, target.astype(np.float32)))

        def collate(b):
            return _pad([s for s, _ in b], max_len), torch.tensor([t for _, t in b])

        class Module(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = net

            def training_step(self, batch, _idx):
                ids, t = batch
                out = self.net(ids)
                return torch.mean(((bound * torch.tanh(out / bound) if residual else out) - t) ** 2)

            def configure_optimizers(self):
                return torch.optim.AdamW(self.parameters(), lr=self_lr)

        self_lr = self.lr
        loader = DataLoader(pairs, batch_size=self.batch_size, shuffle=True, collate_fn=collate)
        trainer(self.epochs, self.seed).fit(Module(), loader)
        net.eval()
        return self

    def predict(self, X) -> np.ndarray:
        import torch

        if not hasattr(self, "net_"):
            raise RuntimeError("TransformerModel is not fitted")
        seqs = _ids(X)
        self.net_.eval()
        out = []
        with torch.no_grad():
            for i in range(0, len(seqs), 32):
                out.append(self.net_(_pad(seqs[i : i + 32], self.max_len)).double().numpy())
        out = np.concatenate(out)
        if self.residual:
            return self._composed(X) * np.exp(self.bound * np.tanh(out / self.bound))
        return np.exp(out)

    def _composed(self, X) -> np.ndarray:
        from models.gnn import kernel_items

        return np.array([t for t, _ in self.composer_.compose(kernel_items(X))])

    def _save_payload(self, path: Path) -> None:
        import torch

        torch.save(self.net_.state_dict(), path / "transformer.pt")
        (path / "vocab.json").write_text(json.dumps({"size": self.net_.tok.num_embeddings}))
        if self.residual:
            (path / "composer.json").write_text(json.dumps(self.composer_.state()))
            self.composer_.kernel_model.save(path / "kernel_model")

    def _load_payload(self, path: Path) -> None:
        import torch

        self._build().load_state_dict(torch.load(path / "transformer.pt", weights_only=True))
        self.net_.eval()
        if self.residual:
            from models.base import load_model
            from models.compose import NetworkComposer

            self.composer_ = NetworkComposer.from_state(
                json.loads((path / "composer.json").read_text()), load_model(path / "kernel_model")
            )
