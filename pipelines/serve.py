"""``costmodel serve``: a cost model over REST, MLflow's scoring protocol with one-line error bodies.

    costmodel serve --model models:/costmodel-runtime@champion --tracking-uri sqlite:///outputs/mlflow.db --port 5000
    curl -s localhost:5000/invocations -H 'Content-Type: application/json' \
        -d '{"dataframe_records": [{"op": "matmul", "m": 4096, "n": 4096, "k": 4096, "hardware": "H100-SXM"}]}'

The app is MLflow's own scoring server (``mlflow.pyfunc.scoring_server.init``: ``POST /invocations`` with
``dataframe_split`` / ``dataframe_records`` JSON or CSV, ``GET /ping``, ``/health``, ``/version``), so a client of
``mlflow models serve`` works unchanged, with two differences:

* every error answer is ``{"error_code": ..., "message": <one line>}``: no stack trace, no copy of the request
  (MLflow's server echoes a whole malformed body, and prefixes a prediction error with the input frame), at most
  ``MESSAGE_CHARS`` characters; an unexpected exception is a 500 with one line naming its type, never a traceback;
* predictions are written by pandas' JSON writer (``{"predictions": [records]}``, the same document) instead of
  MLflow's per-value encoder, which dominates a large batch's time.
"""

from __future__ import annotations

import json

from models.pyfunc import MESSAGE_CHARS

MLFLOW_PREFIXES = ("Failed to predict data", "Failed to enforce schema")


def one_line(message: str, limit: int = MESSAGE_CHARS) -> str:
    """An error message as one line of at most ``limit`` characters: MLflow's copies of the input (the frame before
    ``Error:``, the request after ``Input:``) cut out."""
    text = str(message)
    if text.startswith(MLFLOW_PREFIXES) and "Error: " in text:
        text = text.rsplit("Error: ", 1)[-1]
    text = text.split("\nInput:", 1)[0]
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def error_body(body: bytes, status: int) -> bytes:
    """The one-line JSON body of an error answer (MLflow's JSON error, or a plain-text one)."""
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and "message" in doc:
        code, message = doc.get("error_code") or "BAD_REQUEST", doc["message"]
    else:
        code = "INTERNAL_ERROR" if status >= 500 else "BAD_REQUEST"
        message = body.decode("utf-8", "replace") or f"HTTP {status}"
    return json.dumps({"error_code": code, "message": one_line(message)}).encode()


def build_app(model):
    """MLflow's scoring app for ``model`` (a loaded pyfunc) with one-line errors and pandas' JSON writer."""
    import mlflow.pyfunc.scoring_server as scoring
    from fastapi import Request
    from fastapi.responses import Response

    def predictions_to_json(raw_predictions, output, metadata=None):
        import pandas as pd

        if isinstance(raw_predictions, pd.DataFrame) and not metadata:
            output.write('{"predictions": ')
            output.write(raw_predictions.to_json(orient="records", double_precision=15))
            output.write("}")
        else:
            _mlflow_predictions_to_json(raw_predictions, output, metadata)

    _mlflow_predictions_to_json = scoring.predictions_to_json
    scoring.predictions_to_json = predictions_to_json  # read by scoring.invocations at call time
    app = scoring.init(model)

    @app.middleware("http")
    async def one_line_errors(request: Request, call_next):
        try:
            response = await call_next(request)
        except Exception as exc:  # what the app did not answer itself: one line, never a traceback
            body = json.dumps({"error_code": "INTERNAL_ERROR", "message": one_line(f"{type(exc).__name__}: {exc}")})
            return Response(content=body, status_code=500, media_type="application/json")
        if response.status_code < 400:
            return response
        body = b"".join([chunk async for chunk in response.body_iterator])
        return Response(
            content=error_body(body, response.status_code),
            status_code=response.status_code,
            media_type="application/json",
        )

    return app


def run(model, host: str = "127.0.0.1", port: int = 5000, name: str = "the model", note=print) -> None:
    """Serve ``model`` until interrupted (uvicorn, one worker). Once the socket listens, ``note`` gets one line saying
    where (the port the OS gave for ``port=0``) and how to stop it; a port that cannot be bound ends the process
    with uvicorn's error line."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets=None):
            await super().startup(sockets=sockets)
            if self.started:
                bound = [s.getsockname() for srv in self.servers for s in srv.sockets]
                where = ", ".join(f"http://{_host(a[0])}:{a[1]}" for a in bound) or f"http://{_host(host)}:{port}"
                note(f"costmodel: serving {name} on {where} (POST /invocations, GET /ping); Ctrl-C or SIGTERM stops it")

    Server(uvicorn.Config(build_app(model), host=host, port=port, log_level="warning")).run()


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address
