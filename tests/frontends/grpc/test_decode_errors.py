"""gRPC messages the server cannot use: bodies that are not the method's protobuf message
answer INVALID_ARGUMENT (grpc would say UNKNOWN), in a stream as an error response; more
raw_input_contents than inputs is refused; messages far above grpc's 4 MiB default are
accepted both ways, as Triton's INT32_MAX limit allows. Raw channels send the bytes
tritonclient would never build."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2

from tests.conftest import Serving
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(120)

TIMEOUT = 30.0
SERVICE = "/inference.GRPCInferenceService/"


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(models=["http_gate"], endpoints=("grpc",)) as srv:
        yield srv


def _unary(server: ServerProcess, method: str, body: bytes) -> tuple[grpc.StatusCode, str]:
    with grpc.insecure_channel(server.grpc_url) as channel:
        try:
            channel.unary_unary(SERVICE + method)(body, timeout=TIMEOUT)
            return grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            return e.code(), e.details()


@pytest.mark.parametrize(
    "body",
    [b"\xff\xff\xff", b"\x0a\x05ab", b"garbage!!", b"\x0a\x05ab" + bytes(70_000)],
    ids=["bad-tag", "truncated", "text", "truncated-large"],
)
def test_malformed_model_infer(server: ServerProcess, body: bytes) -> None:
    code, details = _unary(server, "ModelInfer", body)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("Unable to parse request: ")
    assert "ModelInferRequest" in details


@pytest.mark.parametrize("method", ["ServerMetadata", "ModelMetadata", "RepositoryModelLoad"])
def test_malformed_other_requests(server: ServerProcess, method: str) -> None:
    assert _unary(server, method, b"\xff\xff") == (
        grpc.StatusCode.INVALID_ARGUMENT,
        f"Unable to parse request: Error parsing message with type 'inference.{method}Request'",
    )


def test_malformed_message_in_a_stream(server: ServerProcess) -> None:
    """A stream reports the bad message as an error response and serves the next one."""
    good = service_pb2.ModelInferRequest(model_name="http_gate", id="good")
    good.inputs.add(name="IN", datatype="FP32", shape=[1])
    good.raw_input_contents.append(np.float32(5).tobytes())
    with grpc.insecure_channel(server.grpc_url) as channel:
        stream = channel.stream_stream(
            SERVICE + "ModelStreamInfer",
            response_deserializer=service_pb2.ModelStreamInferResponse.FromString,
        )
        responses = list(stream(iter([b"\xff\xff\xff", good.SerializeToString()]), timeout=TIMEOUT))
    assert len(responses) == 2
    assert responses[0].error_message == (
        "Unable to parse request: Error parsing message with type 'inference.ModelInferRequest'"
    )
    assert not responses[1].error_message and responses[1].infer_response.id == "good"


def test_more_raw_contents_than_inputs(server: ServerProcess) -> None:
    request = service_pb2.ModelInferRequest(model_name="http_gate")
    request.inputs.add(name="IN", datatype="FP32", shape=[1])
    request.raw_input_contents.extend([np.float32(1).tobytes()] * 2)
    assert _unary(server, "ModelInfer", request.SerializeToString()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "unexpected number of raw_input_contents for model 'http_gate': got 2, but only 1 "
        "input(s) take their data from raw_input_contents",
    )


def test_messages_beyond_grpc_default_size(server: ServerProcess) -> None:
    """16 MiB in and out (grpc's default limit is 4 MiB; Triton's is INT32_MAX)."""
    data = np.arange(4 << 20, dtype=np.float32)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        inp = grpcclient.InferInput("IN", [data.size], "FP32")
        inp.set_data_from_numpy(data)
        result = client.infer("http_gate", [inp], client_timeout=TIMEOUT)
        np.testing.assert_array_equal(result.as_numpy("OUT"), data)
    finally:
        client.close()
