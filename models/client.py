"""A client of a running ``costmodel serve`` (or ``mlflow models serve``): a prediction with nothing to load.

``costmodel predict --server http://127.0.0.1:5000 --input w.csv`` sends the workload table to the server's
``POST /invocations`` (MLflow's scoring protocol, ``dataframe_split`` JSON) and reads the predictions back: the
process imports pandas and the standard library only, so a compiler or a script that asks once per kernel pays
a request, not a model load. The server's one-line error (HTTP 400) comes back as :class:`RemoteError` with that
line; a server that cannot be reached is one too.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pandas as pd


class RemoteError(ValueError):
    """The server refused the input (its one line) or could not be reached."""


def read_table(data: bytes, fmt: str, name: str) -> pd.DataFrame:
    """A workload table from ``csv`` / ``jsonl`` / ``json`` bytes (UTF-8)."""
    import io

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RemoteError(f"{name}: not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        raise RemoteError(f"{name}: empty input")
    try:
        if fmt == "csv":
            return pd.read_csv(io.StringIO(text))
        if fmt == "jsonl":
            return pd.DataFrame([json.loads(line) for line in text.splitlines() if line.strip()])
        doc = json.loads(text)
    except (ValueError, pd.errors.ParserError) as exc:
        raise RemoteError(f"{name}: not valid {fmt} ({' '.join(str(exc).split())[:200]})") from None
    if not isinstance(doc, list):
        raise RemoteError(f"{name}: a .json input is an array of records")
    return pd.DataFrame(doc)


def predict_remote(url: str, workloads: pd.DataFrame, timeout: float = 300.0) -> pd.DataFrame:
    """The server's predictions for ``workloads`` (one row each, in order)."""
    body = json.dumps({"dataframe_split": json.loads(workloads.to_json(orient="split", index=False))}).encode()
    request = urllib.request.Request(
        url.rstrip("/") + "/invocations", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - the user's own server
            doc = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise RemoteError(_message(exc)) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise RemoteError(f"cannot reach the cost model server at {url}: {reason}") from None
    except ValueError:
        raise RemoteError(f"the server at {url} answered something that is not JSON") from None
    preds = doc.get("predictions") if isinstance(doc, dict) else None
    if not isinstance(preds, list) or len(preds) != len(workloads):
        raise RemoteError(f"the server at {url} answered no prediction per row")
    return pd.DataFrame(preds)


def _message(exc) -> str:
    from models.serving import INPUT_ERROR_PREFIX

    try:
        doc = json.loads(exc.read())
        message = str(doc.get("message", ""))
    except (ValueError, OSError, AttributeError):
        message = ""
    message = " ".join(message.split()).removeprefix(INPUT_ERROR_PREFIX)
    return message or f"the server answered HTTP {exc.code}"
