"""The pure HTTP codec, proven against tritonclient's own request builder and response parser
(``InferenceServerClient.generate_request_body`` / ``parse_response_body``, no server)."""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import serialize_byte_tensor

from modelyard import tensor_bytes as core_codec
from modelyard.errors import ErrorCode, ModelyardError
from modelyard.frontends.http import compression
from modelyard.frontends.http import infer_body as codec
from modelyard.frontends.http.errors import HTTP_STATUS, http_status
from modelyard.types import SEQUENCE_END, SEQUENCE_START, InferResponse, Tensor
from tests.helpers import http_input

Client = httpclient.InferenceServerClient

ARRAYS: dict[str, np.ndarray[Any, Any]] = {
    "BOOL": np.array([[True, False], [False, True]]),
    "UINT8": np.array([0, 7, 255], np.uint8),
    "UINT16": np.array([1, 65535], np.uint16),
    "UINT32": np.array([1, 2**32 - 1], np.uint32),
    "UINT64": np.array([1, 2**64 - 1], np.uint64),
    "INT8": np.array([-128, 127], np.int8),
    "INT16": np.array([-3, 3], np.int16),
    "INT32": np.array([[-(2**31), 0, 2**31 - 1]], np.int32),
    "INT64": np.array([-(2**63), 2**63 - 1], np.int64),
    "FP16": np.array([1.5, -2.25], np.float16),
    "BF16": np.array([1.5, -2.0], ml_dtypes.bfloat16),
    "FP32": np.array([[0.1, -3e38], [1.0, 2.5]], np.float32),
    "FP64": np.array([0.1, 1e300], np.float64),
    "BYTES": np.array([[b"ab", b""], [b"\xc3\xa9", b"\x00\xff"]], dtype=np.object_),
}
JSON_TYPES = [dt for dt in ARRAYS if dt not in ("FP16", "BF16")]
# JSON carries BYTES as strings: only UTF-8 data can go that way.
JSON_BYTES = np.array([[b"ab", b""], [b"\xc3\xa9", b"\x00z"]], dtype=np.object_)


def _json_array(dt: str) -> np.ndarray[Any, Any]:
    return JSON_BYTES if dt == "BYTES" else ARRAYS[dt]


def _parse(body: bytes, json_size: int | None, model: str = "m") -> Any:
    return codec.parse_infer_request(model, "", body, json_size)


def _error(exc: pytest.ExceptionInfo[ModelyardError]) -> tuple[int, str]:
    return http_status(exc.value), exc.value.message


# -- requests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", list(ARRAYS))
def test_binary_inputs_become_raw_views_of_the_body(dt: str) -> None:
    arr = ARRAYS[dt]
    body, json_size = Client.generate_request_body([http_input("X", arr, dt, True)])
    request, _ = _parse(body, json_size)
    (tensor,) = request.inputs
    assert (tensor.name, tensor.datatype, tensor.shape) == ("X", dt, arr.shape)
    assert tensor.data is None
    assert isinstance(tensor.raw, memoryview)
    expected = serialize_byte_tensor(arr).item() if dt == "BYTES" else arr.tobytes()
    assert bytes(tensor.raw) == expected
    decoded = core_codec.array_from_raw(dt, tensor.shape, tensor.raw)
    np.testing.assert_array_equal(decoded, arr)


@pytest.mark.parametrize("dt", JSON_TYPES)
def test_json_inputs_become_arrays_of_the_datatype(dt: str) -> None:
    arr = _json_array(dt)
    body, json_size = Client.generate_request_body([http_input("X", arr, dt, False)])
    assert json_size is None
    request, _ = _parse(body, json_size)
    (tensor,) = request.inputs
    assert tensor.raw is None and tensor.data is not None
    assert tensor.data.shape == arr.shape
    if dt == "BYTES":
        assert tensor.data.tolist() == arr.tolist()
    else:
        assert tensor.data.dtype == arr.dtype
        np.testing.assert_array_equal(tensor.data, arr)


def test_several_binary_and_json_inputs_in_order() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1, 2], np.int64)
    c = np.array([b"x", b"yz"], dtype=np.object_)
    inputs = [http_input("A", a, "FP32", True), http_input("B", b, "INT64", False),
              http_input("C", c, "BYTES", True)]  # fmt: skip
    body, json_size = Client.generate_request_body(inputs)
    request, _ = _parse(body, json_size)
    got = {t.name: t for t in request.inputs}
    assert bytes(got["A"].raw) == a.tobytes()
    np.testing.assert_array_equal(got["B"].data, b)
    assert bytes(got["C"].raw) == serialize_byte_tensor(c).item()


def test_request_id_sequence_priority_timeout_and_custom_parameters() -> None:
    body, json_size = Client.generate_request_body(
        [http_input("X", np.zeros(1, np.float32), "FP32", True)],
        request_id="r-7", sequence_id=42, sequence_start=True, sequence_end=True,
        priority=3, timeout=1500, parameters={"s": "v", "i": -4, "b": False, "f": 0.5},
    )  # fmt: skip
    request, plan = _parse(body, json_size)
    assert request.id == "r-7"
    assert request.correlation_id == 42
    assert request.flags == SEQUENCE_START | SEQUENCE_END
    assert (request.priority, request.timeout_us) == (3, 1500)
    assert request.parameters == {"s": "v", "i": -4, "b": False, "f": 0.5}
    assert plan.default_binary is True  # the client adds binary_data_output without outputs


def test_string_sequence_id_and_flags_off() -> None:
    body, json_size = Client.generate_request_body(
        [http_input("X", np.zeros(1, np.float32), "FP32", False)], sequence_id="abc"
    )
    request, _ = _parse(body, json_size)
    assert request.correlation_id == "abc"
    assert request.flags == 0


def test_requested_outputs_binary_json_and_classification() -> None:
    outputs = [
        httpclient.InferRequestedOutput("B"),
        httpclient.InferRequestedOutput("J", binary_data=False),
        httpclient.InferRequestedOutput("C", binary_data=False, class_count=3),
    ]
    body, json_size = Client.generate_request_body(
        [http_input("X", np.zeros(1, np.float32), "FP32", True)], outputs=outputs
    )
    request, plan = _parse(body, json_size)
    assert [o.name for o in request.outputs] == ["B", "J", "C"]
    assert request.outputs[0].parameters == {"binary_data": True}
    assert request.outputs[2].parameters == {"binary_data": False, "classification": 3}
    assert plan.is_binary("B") and not plan.is_binary("J") and not plan.is_binary("C")
    assert plan.classification == {"C": 3}
    assert plan.default_binary is False


def test_outputs_listed_without_binary_data_default_to_json() -> None:
    doc = {"inputs": [], "outputs": [{"name": "O"}], "parameters": {"binary_data_output": True}}
    request, plan = _parse(json.dumps(doc).encode(), None)
    assert request.outputs[0].parameters == {}
    assert plan.is_binary("O") is False
    assert plan.is_binary("unlisted") is True


def test_omitted_outputs_follow_binary_data_output() -> None:
    request, plan = _parse(b'{"inputs":[]}', None)
    assert request.outputs is None and plan.default_binary is False


def test_shared_memory_references_are_passed_in_parameters() -> None:
    doc = {
        "inputs": [{"name": "I", "shape": [4], "datatype": "FP32", "parameters": {
            "shared_memory_region": "in", "shared_memory_byte_size": 16}}],
        "outputs": [{"name": "O", "parameters": {"binary_data": False,
            "shared_memory_region": "out", "shared_memory_byte_size": 16,
            "shared_memory_offset": 8}}],
    }  # fmt: skip
    request, plan = _parse(json.dumps(doc).encode(), None)
    tensor = request.inputs[0]
    assert tensor.raw is None and tensor.data is None
    assert tensor.parameters == {"shared_memory_region": "in", "shared_memory_byte_size": 16}
    assert request.outputs[0].parameters["shared_memory_offset"] == 8
    assert plan.shm == frozenset({"O"})


def test_empty_tensor_ignores_data() -> None:
    doc = {"inputs": [{"name": "I", "shape": [0, 3], "datatype": "INT32", "data": []}]}
    request, _ = _parse(json.dumps(doc).encode(), None)
    assert request.inputs[0].data is not None and request.inputs[0].data.shape == (0, 3)


def test_nested_json_data_is_flattened() -> None:
    doc = {"inputs": [{"name": "I", "shape": [4], "datatype": "INT32", "data": [[1, 2], [3, [4]]]}]}
    request, _ = _parse(json.dumps(doc).encode(), None)
    assert request.inputs[0].data.tolist() == [1, 2, 3, 4]


def test_integer_json_values_are_truncated_to_the_width_as_triton_does() -> None:
    doc = {"inputs": [{"name": "I", "shape": [2], "datatype": "UINT8", "data": [256, 257]}]}
    request, _ = _parse(json.dumps(doc).encode(), None)
    assert request.inputs[0].data.tolist() == [0, 1]


def _body(inputs: list[dict[str, Any]], **extra: Any) -> bytes:
    return json.dumps({"inputs": inputs, **extra}).encode()


IN = {"name": "I", "shape": [2], "datatype": "INT32"}

ERRORS = [
    (b'{"inputs":[', None, 500, "failed to parse the request JSON buffer: "),
    (b"[]", None, 500, "attempt to access JSON non-object as object"),
    (b"{}", None, 500, "Unable to parse 'inputs'"),
    (_body([{**IN, "data": [1, 2]}], id=5), None, 500, "Unable to parse 'id': attempt to access"),
    (_body([{**IN, "shape": [-1], "data": [1]}]), None, 500, "Unable to parse 'shape'"),
    (_body([{**IN, "data": [1]}]), None, 500,
     "Unable to parse 'data': Shape does not match true shape of 'data' field"),
    (_body([{**IN, "datatype": "BOOL", "data": [1, 0]}]), None, 500,
     "Unable to parse 'data': attempt to access JSON non-boolean as boolean"),
    (_body([{**IN, "datatype": "UINT8", "data": [1, -1]}]), None, 500,
     "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer"),
    (_body([{**IN, "data": [1, 2.5]}]), None, 500,
     "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"),
    (_body([{**IN, "datatype": "FP32", "data": [1, "2"]}]), None, 500,
     "Unable to parse 'data': attempt to access JSON non-number as double"),
    (_body([{**IN, "datatype": "BYTES", "data": ["a", 1]}]), None, 500,
     "Unable to parse JSON bytes array: attempt to access JSON non-string as string"),
    (_body([{**IN, "datatype": "FP16", "data": [1, 2]}]), None, 400,
     "receiving FP16 data via JSON is not supported. Please use the binary data format for input I"),
    (_body([{**IN, "datatype": "BF16", "data": [1, 2]}]), None, 400,
     "receiving BF16 data via JSON is not supported"),
    (_body([{**IN, "datatype": "NOPE", "data": [1, 2]}]), None, 400, "invalid datatype for input I"),
    (_body([{**IN, "data": [1, 2], "parameters": {"binary_data_size": 8}}]), None, 400,
     "Input must set only one of the following fields: 'data', 'binary_data_size' in "
     "'parameters', 'shared_memory_region' in 'parameters'. But set 'data' 'binary_data_size'"),
    (_body([IN]), None, 400, "But no field is set"),
    (_body([{**IN, "parameters": {"binary_data_size": 8}}]), None, 400,
     "unexpected size for input 'I', expecting 8 additional bytes for model 'm'"),
    (_body([{**IN, "data": [1, 2]}], parameters={"triton_x": 1}), None, 400,
     "parameter keys starting with 'triton_' are reserved for Triton usage"),
    (_body([{**IN, "data": [1, 2]}], parameters={"obj": {}}), None, 400,
     "parameter 'obj' has invalid type. It should be either 'int', 'bool', or 'string'."),
    (_body([{**IN, "data": [1, 2]}], parameters={"priority": -1}), None, 500,
     "Unable to parse 'priority': attempt to access JSON non-unsigned-integer"),
    (_body([{**IN, "data": [1, 2]}], parameters={"sequence_start": 1}), None, 500,
     "Unable to parse 'sequence_start'"),
    (_body([{**IN, "data": [1, 2]}], outputs=[{"name": "O", "parameters": {
        "shared_memory_region": "r", "binary_data": True}}]), None, 400,
     "Output can't set both 'shared_memory_region' and 'binary_data'"),
    (_body([{**IN, "data": [1, 2]}], outputs=[{"name": "O", "parameters": {
        "shared_memory_region": "r", "classification": 1}}]), None, 400,
     "Output can't set both 'shared_memory_region' and 'classification'"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "json_size", "status", "message"), ERRORS)
def test_request_errors_have_tritons_status_and_message(
    body: bytes, json_size: int | None, status: int, message: str
) -> None:
    with pytest.raises(ModelyardError) as exc:
        _parse(body, json_size)
    got_status, got_message = _error(exc)
    assert got_status == status
    assert message in got_message


def test_leftover_binary_bytes_are_rejected() -> None:
    body, json_size = Client.generate_request_body(
        [http_input("X", np.zeros(2, np.float32), "FP32", True)]
    )
    with pytest.raises(ModelyardError) as exc:
        _parse(body + b"xx", json_size)
    assert _error(exc) == (400, "unexpected additional input data for model 'm'")


@pytest.mark.parametrize(("value", "length"), [("9999", 10), ("-1", 10), ("abc", 10)])
def test_header_length_out_of_range(value: str, length: int) -> None:
    with pytest.raises(ModelyardError) as exc:
        codec.header_length_of(value, length)
    assert http_status(exc.value) == 400


def test_header_length_in_range() -> None:
    assert codec.header_length_of(None, 5) is None
    assert codec.header_length_of("0", 5) == 0
    assert codec.header_length_of("5", 5) == 5


def test_zero_size_binary_input() -> None:
    doc = {"inputs": [{"name": "I", "shape": [0], "datatype": "FP32",
                       "parameters": {"binary_data_size": 0}}]}  # fmt: skip
    request, _ = _parse(json.dumps(doc).encode(), len(json.dumps(doc)))
    assert bytes(request.inputs[0].raw) == b""


# -- raw binary requests (Inference-Header-Content-Length: 0) -----------------------------------


def test_raw_request_fills_the_variable_dim_and_batch() -> None:
    body = np.arange(6, dtype=np.float32).tobytes()
    request, plan = codec.raw_infer_request("m", "", body, ("IN", "FP32", (-1,)), 8, 1)
    (tensor,) = request.inputs
    assert (tensor.name, tensor.datatype, tensor.shape) == ("IN", "FP32", (1, 6))
    assert tensor.raw is not None and bytes(tensor.raw) == body
    assert plan.default_binary is True and request.outputs is None


def test_raw_request_bytes_input_is_one_element() -> None:
    request, _ = codec.raw_infer_request("m", "", b"hello", ("S", "BYTES", (1,)), 0, 1)
    assert request.inputs[0].shape == (1,)
    data = request.inputs[0].data
    assert data is not None and data.tolist() == [b"hello"]


@pytest.mark.parametrize(
    ("spec", "count", "message"),
    [
        (("A", "FP32", (4,)), 2, "Raw request must only have 1 input (found 1) to be deduced "
                                 "but got 2 inputs in 'm' model configuration"),
        (("A", "FP32", (-1, -1)), 1, "can not be deduced because there are more than one"),
        (("S", "BYTES", (-1,)), 1, "the model must have input shape [1]"),
    ],
)  # fmt: skip
def test_raw_request_errors(
    spec: tuple[str, str, tuple[int, ...]], count: int, message: str
) -> None:
    with pytest.raises(ModelyardError) as exc:
        codec.raw_infer_request("m", "", b"\0" * 16, spec, 0, count)
    assert http_status(exc.value) == 400
    assert message in exc.value.message


# -- responses ---------------------------------------------------------------------------------


def _encode(response: InferResponse, plan: codec.OutputPlan) -> httpclient.InferResult:
    header, parts, total = codec.encode_infer_response(response, plan)
    body = b"".join([header, *[bytes(p) for p in parts]])
    return Client.parse_response_body(body, header_length=len(header) if total else None)


def _response(names: list[str], json_safe: bool = False) -> InferResponse:
    arrays = {dt: _json_array(dt) if json_safe else ARRAYS[dt] for dt in names}
    outputs = [Tensor.from_numpy(f"OUT_{dt}", arr) for dt, arr in arrays.items()]
    return InferResponse("m", "1", outputs=outputs)


def test_binary_response_of_every_datatype_round_trips() -> None:
    result = _encode(_response(list(ARRAYS)), codec.OutputPlan(default_binary=True))
    for dt, arr in ARRAYS.items():
        got = result.as_numpy(f"OUT_{dt}")
        assert got.shape == arr.shape, dt
        if dt == "BYTES":
            assert got.tolist() == arr.tolist()
        else:
            np.testing.assert_array_equal(got, arr)
    for out in result.get_response()["outputs"]:
        assert "binary_data_size" in out["parameters"]


def test_json_response_of_every_json_datatype_round_trips() -> None:
    result = _encode(_response(JSON_TYPES, json_safe=True), codec.OutputPlan())
    for dt in JSON_TYPES:
        arr = _json_array(dt)
        got = result.as_numpy(f"OUT_{dt}")
        if dt == "BYTES":  # JSON BYTES come back as str
            assert got.tolist() == [[b.decode() for b in row] for row in arr.tolist()]
        else:
            np.testing.assert_array_equal(got, arr)
    data = {o["name"]: o["data"] for o in result.get_response()["outputs"]}
    assert data["OUT_FP32"] == [float(np.float32(0.1)), float(np.float32(-3e38)), 1.0, 2.5]
    assert data["OUT_BOOL"] == [True, False, False, True]


@pytest.mark.parametrize("dt", ["FP16", "BF16"])
def test_half_floats_cannot_be_sent_as_json(dt: str) -> None:
    with pytest.raises(ModelyardError) as exc:
        codec.encode_infer_response(_response([dt]), codec.OutputPlan())
    assert _error(exc) == (
        400,
        f"sending {dt} data via JSON is not supported. Please use the binary data format "
        "for output",
    )


def test_bytes_that_are_not_utf8_cannot_be_sent_as_json() -> None:
    response = InferResponse("m", "1", outputs=[Tensor.from_numpy(
        "O", np.array([b"\xff"], dtype=np.object_))])  # fmt: skip
    with pytest.raises(ModelyardError) as exc:
        codec.encode_infer_response(response, codec.OutputPlan())
    assert http_status(exc.value) == 400 and "'O'" in exc.value.message


def test_response_header_fields_and_order() -> None:
    response = InferResponse("m", "3", id="r1", parameters={"p": 1, "q": "s"}, outputs=[
        Tensor.from_numpy("O", np.array([1, 2], np.int32))])  # fmt: skip
    header, parts, total = codec.encode_infer_response(response, codec.OutputPlan(True))
    doc = json.loads(header)
    assert list(doc) == ["id", "model_name", "model_version", "parameters", "outputs"]
    assert doc["outputs"] == [{"name": "O", "datatype": "INT32", "shape": [2],
                               "parameters": {"binary_data_size": 8}}]  # fmt: skip
    assert total == 8 and bytes(parts[0]) == np.array([1, 2], np.int32).tobytes()


def test_no_id_no_parameters_and_empty_outputs() -> None:
    header, parts, total = codec.encode_infer_response(InferResponse("m", "1"), codec.OutputPlan())
    assert json.loads(header) == {"model_name": "m", "model_version": "1", "outputs": []}
    assert (parts, total) == ([], 0)


def test_empty_binary_output_has_size_zero_and_no_header() -> None:
    response = InferResponse("m", "1", outputs=[Tensor.from_numpy("O", np.zeros(0, np.float32))])
    header, parts, total = codec.encode_infer_response(response, codec.OutputPlan(True))
    assert total == 0 and parts == []
    assert json.loads(header)["outputs"][0]["parameters"] == {"binary_data_size": 0}


def test_raw_output_tensors_are_sent_as_they_are() -> None:
    raw = np.array([1.0, 2.0], np.float32).tobytes()
    response = InferResponse("m", "1", outputs=[Tensor("O", "FP32", (2,), raw=raw)])
    assert _encode(response, codec.OutputPlan(True)).as_numpy("O").tolist() == [1.0, 2.0]
    assert _encode(response, codec.OutputPlan()).as_numpy("O").tolist() == [1.0, 2.0]


def test_non_contiguous_output_arrays_are_made_contiguous() -> None:
    arr = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]
    response = InferResponse("m", "1", outputs=[Tensor.from_numpy("O", arr)])
    np.testing.assert_array_equal(_encode(response, codec.OutputPlan(True)).as_numpy("O"), arr)


def test_shared_memory_outputs_carry_no_data() -> None:
    response = InferResponse("m", "1", outputs=[Tensor.from_numpy("O", np.ones(2, np.int32))])
    plan = codec.OutputPlan(default_binary=True, shm=frozenset({"O"}))
    header, _, total = codec.encode_infer_response(response, plan)
    assert json.loads(header)["outputs"] == [{"name": "O", "datatype": "INT32", "shape": [2]}]
    assert total == 0


# -- compression -------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compressed_responses_parse_in_the_client(encoding: str) -> None:
    header, parts, _ = codec.encode_infer_response(
        _response(["FP32", "BYTES"]), codec.OutputPlan(True)
    )
    body = compression.compress([header, *parts], encoding)
    result = Client.parse_response_body(body, header_length=len(header), content_encoding=encoding)
    np.testing.assert_array_equal(result.as_numpy("OUT_FP32"), ARRAYS["FP32"])


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_request_bodies_are_inflated(encoding: str) -> None:
    data = b'{"inputs":[]}' * 10
    compressed = gzip.compress(data) if encoding == "gzip" else zlib.compress(data)
    assert compression.decompress(compressed, encoding, len(data)) == data


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_inflated_size_is_checked_while_inflating(encoding: str) -> None:
    """A bomb (1 MiB that inflates to 1 GiB) stops at the limit with Triton's 400, having
    produced at most limit + 1 bytes."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
    chunk = bytes(1 << 20)
    bomb = b"".join([*(c.compress(chunk) for _ in range(1024)), c.flush()])
    assert len(bomb) < 2 << 20
    with pytest.raises(ModelyardError) as exc:
        compression.decompress(bomb, encoding, 1 << 20)
    assert http_status(exc.value) == 400
    assert exc.value.message == (
        "Decompressed data size exceeds the maximum allowed value of 1048576 bytes. "
        "Use --http-max-input-size to increase the limit."
    )


def test_bad_compressed_body() -> None:
    with pytest.raises(ModelyardError) as exc:
        compression.decompress(b"not gzip", "gzip", 1 << 20)
    assert http_status(exc.value) == 400
    data = gzip.compress(b"x" * 1000)
    with pytest.raises(ModelyardError) as exc:
        compression.decompress(data[:-4], "gzip", 1 << 20)  # truncated
    assert "incomplete or truncated stream" in exc.value.message


def test_request_encodings() -> None:
    assert compression.request_encoding(None) == "identity"
    assert compression.request_encoding("identity") == "identity"
    assert compression.request_encoding("gzip") == "gzip"
    with pytest.raises(compression.UnsupportedCompression) as exc:
        compression.request_encoding("br")
    assert _error(exc) == (501, "Unsupported compression type")


@pytest.mark.parametrize(
    ("accept", "chosen"),
    [
        (None, "identity"),
        ("", "identity"),
        ("gzip, deflate, br", "gzip"),
        ("br", "identity"),
        ("deflate;q=0.5, gzip;q=0.4", "deflate"),
        ("gzip;q=0.5, deflate;q=0.5", "gzip"),
        ("identity, gzip", "identity"),
        ("gzip;q=abc, deflate", "deflate"),
        ("gzip;q=0", "identity"),
    ],
)
def test_response_encoding_follows_accept_encoding_weights(accept: str | None, chosen: str) -> None:
    assert compression.response_encoding(accept) == chosen


def test_status_table_covers_every_code() -> None:
    assert set(HTTP_STATUS) == set(ErrorCode)
    assert HTTP_STATUS[ErrorCode.NOT_FOUND] == 404
    assert HTTP_STATUS[ErrorCode.UNSUPPORTED] == 501
    assert HTTP_STATUS[ErrorCode.UNAVAILABLE] == 503
    assert HTTP_STATUS[ErrorCode.INTERNAL] == 500
    for code in (ErrorCode.INVALID_ARG, ErrorCode.ALREADY_EXISTS, ErrorCode.CANCELLED,
                 ErrorCode.UNKNOWN):  # fmt: skip
        assert HTTP_STATUS[code] == 400
