"""Helpers for the tracing tests: a repository with the traced models, requests, Triton
trace files read back (bounded waits) and their structure without the times."""

from __future__ import annotations

import json
import queue
import time
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.conftest import Serving
from tests.helpers import EXAMPLES, MODELS, make_repo

WAIT_S = 30.0
EXAMPLE_MODELS = ["add_sub", "bls_add_sub", "ensemble_add_sub", "repeat"]


def traced_repo(serving: Serving) -> Path:
    """add_sub, bls_add_sub, ensemble_add_sub, repeat (the examples), trace_caller, and
    context_caller with its callee context_echo."""
    ours = ["trace_caller", "context_caller", "context_echo"]
    return make_repo(serving.repo(EXAMPLE_MODELS, source=EXAMPLES), ours, MODELS)


def add_sub_inputs(client: Any) -> list[Any]:
    out = []
    for name in ("INPUT0", "INPUT1"):
        inp = client.InferInput(name, [4], "FP32")
        inp.set_data_from_numpy(np.ones(4, np.float32))
        out.append(inp)
    return out


def caller_inputs(client: Any, count: int = 3) -> list[Any]:
    inp = client.InferInput("COUNT", [1], "INT32")
    inp.set_data_from_numpy(np.array([count], np.int32))
    return [*add_sub_inputs(client), inp]


def infer(url: str, protocol: str, model: str, request_id: str = "", **kw: Any) -> Any:
    """One request to ``model`` (add_sub's inputs, trace_caller's with COUNT 3)."""
    client: Any
    if protocol == "http":
        client = httpclient.InferenceServerClient(url)
        mod: Any = httpclient
    else:
        client = grpcclient.InferenceServerClient(url)
        mod = grpcclient
    try:
        inputs = caller_inputs(mod) if model == "trace_caller" else add_sub_inputs(mod)
        return client.infer(model, inputs, request_id=request_id, **kw)
    finally:
        client.close()


def stream_infer(url: str, model: str, request_id: str = "", **kw: Any) -> list[Any]:
    """One request to ``model`` on a gRPC ModelStreamInfer stream (add_sub's inputs, or
    COUNT 2 for the decoupled ``repeat``); returns its results once the last has come."""
    results: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
    client = grpcclient.InferenceServerClient(url)
    try:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        if model == "repeat":
            count = grpcclient.InferInput("COUNT", [1], "INT32")
            count.set_data_from_numpy(np.array([2], np.int32))
            inputs, expected = [count], 2 + bool(kw.get("enable_empty_final_response"))
        else:
            inputs, expected = add_sub_inputs(grpcclient), 1
        client.async_stream_infer(model, inputs, request_id=request_id, **kw)
        out = []
        for _ in range(expected):
            result, error = results.get(timeout=WAIT_S)
            assert error is None, error
            out.append(result)
        return out
    finally:
        client.stop_stream()
        client.close()


def read_trace_file(path: Path, timeout: float = WAIT_S) -> list[dict[str, Any]]:
    """The records of a trace file, once it exists and holds a whole JSON array."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            records: list[dict[str, Any]] = json.loads(path.read_text())
            return records
        except (OSError, ValueError):
            if time.monotonic() > deadline:
                raise AssertionError(f"no complete trace file {path} after {timeout:g} s") from None
            time.sleep(0.02)


class TraceFiles:
    """A server's ``--trace-config triton,file=PATH`` with log-frequency 1: PATH.0, PATH.1 ...
    one per trace, in the order the traces finished."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.next = 0

    def take(self) -> list[dict[str, Any]]:
        """The records of the next trace."""
        records = read_trace_file(Path(f"{self.path}.{self.next}"))
        self.next += 1
        return records

    def none_pending(self) -> bool:
        return not Path(f"{self.path}.{self.next}").exists()


def requests_of(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Triton's model records by trace id."""
    return {r["id"]: r for r in records if "model_name" in r}


def names_of(records: list[dict[str, Any]], rid: int) -> list[str]:
    return [r["timestamps"][0]["name"] for r in records if r["id"] == rid and "timestamps" in r]


def structure(records: list[dict[str, Any]]) -> dict[tuple[str, str], Any]:
    """A trace file's shape without times or ids: per (model, parent's model) the model
    record's keys, its records (timestamp names, ``<model>``, ``<activity>`` for a tensor)
    and the tensor records."""
    models = requests_of(records)
    out: dict[tuple[str, str], Any] = {}
    for rid, record in models.items():
        parent = models.get(record.get("parent_id", 0), {}).get("model_name", "")
        tensors = sorted(
            f"{r['activity']}:{r['tensor']['name']}:{r['tensor']['dtype']}:{r['tensor']['shape']}"
            for r in records
            if r["id"] == rid and "activity" in r
        )
        sequence = [
            r["timestamps"][0]["name"]
            if "timestamps" in r
            else ("<model>" if "model_name" in r else f"<{r['activity']}>")
            for r in records
            if r["id"] == rid
        ]
        out[(record["model_name"], parent)] = {
            "record": sorted(record),
            # Sorted: Triton's order of timestamps taken on different threads varies from
            # run to run (REQUEST_END before or after HTTP_SEND_END, for one).
            "entries": sorted(sequence),
            "tensors": tensors,
        }
    return out
