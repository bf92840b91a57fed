"""A client that disconnects cancels its request, as a gRPC client's cancellation does: a
queued request ends CANCELLED without running (one the worker took ahead runs seeing
``is_cancelled()``), a running one sees ``is_cancelled()``.

http_gate has one instance and no batching; it creates ``started_file`` when a request starts
executing, so the test knows which request holds the instance. Waits are bounded polls on
the statistics and metrics; nothing asserts a duration."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.conftest import Serving
from tests.helpers import http_input, metric_value, read_metrics, wait_until
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(180)

BOUND_S = 30.0


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(models=["http_gate"], endpoints=("http", "metrics")) as srv:
        yield srv


def _wait_for(what: str, check: Callable[[], bool]) -> None:
    wait_until(check, BOUND_S, 0.05, what=what)


def _send(server: ServerProcess, request_id: str, params: dict[str, Any]) -> socket.socket:
    """POST an infer request on a raw connection and leave it waiting for the answer."""
    body = json.dumps({
        "id": request_id, "parameters": params,
        "inputs": [{"name": "IN", "shape": [1], "datatype": "FP32", "data": [1.0]}],
    }).encode()  # fmt: skip
    sock = socket.create_connection(("127.0.0.1", server.ports["http"]), timeout=BOUND_S)
    head = b"POST /v2/models/http_gate/infer HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n"
    sock.sendall(head % len(body) + body)
    return sock


def _metric(server: ServerProcess, name: str, **labels: str) -> float:
    return metric_value(read_metrics(server.metrics_url, BOUND_S), name, **labels) or 0.0


def _stats(client: httpclient.InferenceServerClient) -> dict[str, Any]:
    stats: dict[str, Any] = client.get_inference_statistics("http_gate")["model_stats"][0]
    inference: dict[str, Any] = stats["inference_stats"]
    return inference


def test_disconnected_client_cancels_its_queued_and_running_requests(
    server: ServerProcess, tmp_path: Path
) -> None:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=BOUND_S)
    try:
        started = tmp_path / "busy-started"
        busy = _send(server, "busy", {"started_file": str(started), "wait_cancel_ms": 60000})
        _wait_for("busy to start", started.exists)
        # Two more: the worker may take one ahead (staged), the other waits in the queue.
        queued = [_send(server, f"queued{i}", {}) for i in range(2)]
        _wait_for(
            "a request to queue",
            lambda: _metric(server, "nv_inference_pending_request_count", model="http_gate") >= 1,
        )
        for sock in queued:
            sock.close()
        # The queued requests end CANCELLED (failures, reason CANCELED) while busy still runs.
        _wait_for(
            "the queued requests to be cancelled", lambda: _stats(client)["fail"]["count"] == 2
        )
        assert _stats(client)["success"]["count"] == 0
        canceled = _metric(server, "nv_inference_request_failure", reason="CANCELED")
        assert canceled == 2
        busy.close()  # the running request: the model sees is_cancelled() and returns

        inp = http_input("IN", np.array([2.0], np.float32))
        result = client.infer("http_gate", [inp], request_id="probe")
        seen = json.loads(result.as_numpy("SEEN")[0])
        # Every request the model ran before the probe saw itself cancelled: busy, and the
        # one the worker had taken ahead, if any; the one in the queue never ran.
        assert seen["cancelled"][0] == "busy"
        assert seen["seq"] == len(seen["cancelled"]) <= 2
        assert _stats(client)["success"]["count"] == 2
    finally:
        client.close()
