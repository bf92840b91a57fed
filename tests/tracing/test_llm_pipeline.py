"""Triton-mode tracing of the example LLM pipeline (examples/llm_pipeline): a request to the
decoupled BLS model ``llm`` is one trace whose children are every BLS call it made, the
tokenizer's, the generator's (a decoupled call) and one detokenizer call per token, over
generate_stream and over a gRPC stream, in both execution modes."""

from __future__ import annotations

import http.client
import json
import queue
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.conftest import Serving
from tests.helpers import MODES, ROOT
from tests.serverproc import ServerProcess
from tests.tracing.traces import WAIT_S, TraceFiles, names_of, requests_of

pytestmark = pytest.mark.timeout(240)

EXAMPLE = ROOT / "examples" / "llm_pipeline" / "model_repository"
TOKENS = 5  # "The fox" goes on for longer than this: max_tokens ends it


@pytest.fixture(scope="module", params=MODES)
def traced(
    request: pytest.FixtureRequest, serving: Serving, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, TraceFiles]]:
    path = tmp_path_factory.mktemp("traces") / "trace.json"
    settings = [f"triton,file={path}", "triton,log-frequency=1", "level=TIMESTAMPS", "rate=1"]
    flags = [a for s in settings for a in ("--trace-config", s)]
    with serving.server(EXAMPLE, *flags, mode=request.param) as srv:
        yield srv, TraceFiles(path)


def _generate_stream(srv: ServerProcess) -> list[dict[str, Any]]:
    """The events of one generate_stream request (http.client: tritonclient has no SSE)."""
    host, port = srv.http_url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=WAIT_S)
    body = {"text_input": "The fox", "stream": True, "exclude_input_in_output": True,
            "sampling_parameters": json.dumps({"max_tokens": TOKENS})}  # fmt: skip
    try:
        conn.request("POST", "/v2/models/llm/generate_stream", body=json.dumps(body))
        response = conn.getresponse()
        assert response.status == 200
        text = response.read().decode()
    finally:
        conn.close()
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def _grpc_stream(srv: ServerProcess) -> int:
    """One request to llm on a ModelStreamInfer stream; the responses that carried text."""
    results: queue.Queue[Any] = queue.Queue()

    def tensor(name: str, value: Any, datatype: str) -> grpcclient.InferInput:
        t = grpcclient.InferInput(name, [1], datatype)
        t.set_data_from_numpy(np.array([value], dtype=object if datatype == "BYTES" else bool))
        return t

    inputs = [
        tensor("text_input", b"The fox", "BYTES"),
        tensor("stream", True, "BOOL"),
        tensor("exclude_input_in_output", True, "BOOL"),
        tensor("sampling_parameters", json.dumps({"max_tokens": TOKENS}).encode(), "BYTES"),
    ]
    with grpcclient.InferenceServerClient(srv.grpc_url) as client:
        client.start_stream(callback=lambda result, error: results.put(error or result))
        try:
            client.async_stream_infer("llm", inputs, enable_empty_final_response=True)
            texts = 0
            while True:
                result = results.get(timeout=WAIT_S)
                assert not isinstance(result, Exception), result
                response = result.get_response()
                if response.outputs and result.as_numpy("text_output")[0]:
                    texts += 1
                if response.parameters["triton_final_response"].bool_param:
                    return texts
        finally:
            client.stop_stream()


def _check_children(records: list[dict[str, Any]]) -> None:
    models = requests_of(records)
    [llm] = [r for r in models.values() if r["model_name"] == "llm"]
    children = [r for r in models.values() if r is not llm]
    assert all(c["parent_id"] == llm["id"] for c in children), children
    # every call the pipeline made: one tokenizer call, the generator's decoupled call, and
    # one detokenizer call per token
    assert Counter(c["model_name"] for c in children) == {
        "tokenizer": 1, "generator": 1, "detokenizer": TOKENS,
    }  # fmt: skip
    for child in children:
        names = names_of(records, child["id"])
        assert names[0] == "REQUEST_START" and "REQUEST_END" in names, names
        assert {"COMPUTE_START", "COMPUTE_END"} <= set(names), names


def test_generate_stream_traces_every_bls_call(traced: tuple[ServerProcess, TraceFiles]) -> None:
    srv, files = traced
    events = _generate_stream(srv)
    assert sum(1 for e in events if e.get("text_output")) == TOKENS
    records = files.take()
    _check_children(records)
    [llm] = [r for r in requests_of(records).values() if r["model_name"] == "llm"]
    names = names_of(records, llm["id"])
    assert names[:2] == ["HTTP_RECV_START", "HTTP_RECV_END"]
    # each token event and the final one (its finish_reason): a response, written
    assert names.count("HTTP_SEND_START") == names.count("HTTP_SEND_END") == len(events)
    assert names.count("INFER_RESPONSE_COMPLETE") == len(events)


def test_grpc_stream_traces_every_bls_call(traced: tuple[ServerProcess, TraceFiles]) -> None:
    srv, files = traced
    assert _grpc_stream(srv) == TOKENS
    _check_children(files.take())
