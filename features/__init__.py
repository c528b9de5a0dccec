"""Feature stage: turn workload descriptions (+ hardware names) into model inputs.

Encoders satisfy ``features.encoders.Encoder`` (``transform(rows) -> X``, ``unit`` kernel | network) and are built
from ``conf/encoder/<name>.yaml`` by ``features.encoders.build_encoder``; ``features.get_encoder("tabular" | "graph" |
"tokens", ...)`` gives the three built-in encodings by name. MLIR export, parsing and workload recognition in
``features/mlir``; the public datasets' extra features in ``features/public_data.py``.
"""


def get_encoder(name: str, **kwargs):
    """``tabular`` (registry=, store=), ``graph`` (registry=) or ``tokens``; see features.encoders."""
    from features.encoders import get_encoder as _get

    return _get(name, **kwargs)
