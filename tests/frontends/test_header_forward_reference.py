"""Differential test of header forwarding: the reference Triton 2.51 and modelyard run
hdr_params (it answers with ``request.parameters()``) with the same
``--http-header-forward-pattern`` / ``--grpc-header-forward-pattern``; the same tritonclient
calls with ``headers=`` must show the model the same parameters (as ``json.loads`` reads
them: Triton's text repeats a name a header shares with a body parameter, the later value
wins). Skipped without the reference."""

from __future__ import annotations

import json
import queue
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.conftest import Serving
from tests.helpers import WAIT_S, grpc_inputs, infer_grpc, infer_http
from tests.reference import reference_available, start_reference

pytestmark = [
    pytest.mark.reference,
    pytest.mark.skipif(not reference_available(), reason="reference Triton is not installed"),
]

MODEL = "hdr_params"
PATTERN = "^x-|tenant|agent$"
IN = {"IN": np.array([1], np.int32)}
HTTP_CASES = {
    "as sent": (
        {"X-Tenant": "acme", "Other": "no", "My-TENANT-Id": "7", "x-trace": "t 1"},
        {"p": 3},
    ),
    "replaces body parameter": ({"x-tenant": "header"}, {"x-tenant": "body", "q": True}),
    "none match": ({"Other": "no"}, {}),
}
GRPC_CASES = {
    "by name": ({"x-trace": "1", "tenant-id": "7", "other": "no", "x-tenant": "acme"}, {"p": 3}),
    "replaces body parameter": ({"x-tenant": "header"}, {"x-tenant": "body", "q": True}),
    "none match": ({"other": "no"}, {}),
}
KEYS = [
    *(f"http {case}" for case in HTTP_CASES),
    *(f"grpc {case}" for case in GRPC_CASES),
    "grpc stream",
]


def _seen(result: Any) -> Any:
    return list(json.loads(result.as_numpy("PARAMS")[0]).items())


def _observe(http_url: str, grpc_url: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    with httpclient.InferenceServerClient(http_url) as c:
        for case, (headers, params) in HTTP_CASES.items():
            seen[f"http {case}"] = _seen(
                infer_http(c, MODEL, IN, headers=headers, parameters=params)
            )
    with grpcclient.InferenceServerClient(grpc_url) as c:
        for case, (headers, params) in GRPC_CASES.items():
            result = infer_grpc(c, MODEL, IN, headers=headers, parameters=params)
            # (Triton orders the body's parameters as its protobuf map iterates them)
            seen[f"grpc {case}"] = sorted(_seen(result))
        results: queue.Queue[Any] = queue.Queue()
        c.start_stream(
            lambda result, error: results.put(error or result), headers={"x-tenant": "s", "o": "n"}
        )
        try:
            for i in range(2):
                c.async_stream_infer(MODEL, grpc_inputs(IN), parameters={"i": i})
            seen["grpc stream"] = [sorted(_seen(results.get(timeout=WAIT_S))) for _ in range(2)]
        finally:
            c.stop_stream()
    return seen


@pytest.fixture(scope="module")
def observations(serving: Serving) -> Iterator[tuple[Any, Any]]:
    repo = serving.repo([MODEL], copy=True)
    args = (f"--http-header-forward-pattern={PATTERN}", f"--grpc-header-forward-pattern={PATTERN}")
    ref = start_reference(repo, *args, timeout=120)
    try:
        theirs = _observe(ref.http_url, ref.grpc_url)
    finally:
        ref.stop()
    with serving.server(repo, *args, endpoints=("http", "grpc")) as mine:
        ours = _observe(mine.http_url, mine.grpc_url)
    yield theirs, ours


@pytest.mark.parametrize("key", KEYS)
def test_matches_reference(observations: tuple[dict[str, Any], dict[str, Any]], key: str) -> None:
    theirs, ours = observations
    assert ours[key] == theirs[key], "modelyard (left) differs from Triton 2.51 (right)"
