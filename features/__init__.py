"""Feature stage: turn workload descriptions (+ hardware names) into model inputs.

Encodings, one place to get them: ``features.get_encoder("tabular" | "graph" | "tokens", ...)``
(see ``features/encoders.py``); MLIR export, parsing and workload recognition in ``features/mlir``.
"""


def get_encoder(name: str, **kwargs):
    """``tabular`` (registry=, store=), ``graph`` (registry=) or ``tokens``; see features.encoders."""
    from features.encoders import get_encoder as _get

    return _get(name, **kwargs)
