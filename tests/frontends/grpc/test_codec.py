"""Unit tests of the gRPC codec: requests built by tritonclient itself, responses read back
by tritonclient's InferResult."""

from __future__ import annotations

from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc._utils import _get_inference_request
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

from modelyard import tensor_bytes as tensor_codec
from modelyard.errors import ErrorCode, InvalidArgument, ModelyardError
from modelyard.frontends.grpc import proto_convert as codec
from modelyard.frontends.grpc import wire
from modelyard.types import (
    SEQUENCE_END,
    SEQUENCE_START,
    InferResponse,
    Tensor,
    datatype_of,
    numpy_dtype,
)

ALL_FIXED = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "FP32", "FP64"]  # fmt: skip


def _array(datatype: str, shape: tuple[int, ...] = (2, 3)) -> np.ndarray[Any, Any]:
    n = int(np.prod(shape))
    if datatype == "BYTES":
        return np.array([f"s{i}".encode() * i for i in range(n)], dtype=np.object_).reshape(shape)
    if datatype == "BOOL":
        return (np.arange(n) % 2 == 0).reshape(shape)
    return np.arange(n).astype(numpy_dtype(datatype)).reshape(shape)


def _client_request(
    inputs: list[Any],
    outputs: list[Any] | None = None,
    *,
    model: str = "m",
    version: str = "",
    request_id: str = "",
    sequence_id: int | str = 0,
    sequence_start: bool = False,
    sequence_end: bool = False,
    priority: int = 0,
    timeout: int | None = None,
    parameters: dict[str, Any] | None = None,
) -> bytes:
    req = _get_inference_request(
        model, inputs, version, request_id, outputs, sequence_id, sequence_start,
        sequence_end, priority, timeout, parameters,
    )  # fmt: skip
    return req.SerializeToString()  # type: ignore[no-any-return]


def _input(name: str, array: np.ndarray[Any, Any], datatype: str | None = None) -> Any:
    datatype = datatype or datatype_of(array.dtype)
    inp = grpcclient.InferInput(name, list(array.shape), datatype)
    inp.set_data_from_numpy(array)
    return inp


def _decode(data: bytes) -> tuple[Any, bool]:
    decoded = codec.decode_infer_request(wire.parse_infer_request(data))
    return decoded.request, decoded.empty_final


def _as_numpy(t: Tensor) -> np.ndarray[Any, Any]:
    assert t.raw is not None
    return tensor_codec.array_from_raw(t.datatype, t.shape, t.raw)


# -- wire ----------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [4, 1 << 20])  # below and above the scan threshold
def test_parse_infer_request_small_and_large(size: int) -> None:
    a = np.arange(size, dtype=np.float32)
    b = np.array([b"x" * 10, b"", b"yz"], dtype=np.object_)
    data = _client_request([_input("A", a), _input("B", b)], request_id="r1")
    parsed = wire.parse_infer_request(data)
    assert parsed.msg.model_name == "m"
    assert parsed.msg.id == "r1"
    assert [bytes(r) for r in parsed.raw] == [a.tobytes(), serialize_byte_tensor(b).item()]
    if len(data) >= wire.SCAN_THRESHOLD:
        # Zero copy: the tensor bytes are views of the received buffer.
        assert isinstance(parsed.raw[0], memoryview)
        assert parsed.raw[0].obj is data
        assert len(parsed.msg.raw_input_contents) == 0


def test_parse_infer_request_fields_in_any_order() -> None:
    """Raw entries first, then other fields (legal protobuf): the scan keeps every field."""
    payload = np.arange(40000, dtype=np.int32).tobytes()
    raw_part = pb.ModelInferRequest(raw_input_contents=[payload, b"ab"]).SerializeToString()
    rest = pb.ModelInferRequest(
        model_name="mm", id="7",
        inputs=[pb.ModelInferRequest.InferInputTensor(name="X", datatype="INT32", shape=[40000])],
    ).SerializeToString()  # fmt: skip
    data = raw_part + rest
    assert len(data) >= wire.SCAN_THRESHOLD
    parsed = wire.parse_infer_request(data)
    assert parsed.msg.model_name == "mm" and parsed.msg.id == "7"
    assert parsed.msg.inputs[0].name == "X"
    assert [bytes(r) for r in parsed.raw] == [payload, b"ab"]


@pytest.mark.parametrize("size", [16, 1 << 16])  # parsed by protobuf / by the wire scan
def test_parse_infer_request_truncated(size: int) -> None:
    """A body that is not a ModelInferRequest does not raise: it comes back with the error
    the handler answers INVALID_ARGUMENT with."""
    data = _client_request([_input("A", np.zeros(size, np.float32))])
    parsed = wire.parse_infer_request(data[:-10])
    assert parsed.error.startswith("Unable to parse request: ")
    assert "ModelInferRequest" in parsed.error
    assert parsed.raw == [] and parsed.msg.model_name == ""


def test_varint() -> None:
    from google.protobuf.internal import encoder

    for n in (0, 1, 127, 128, 300, 2**31 - 1, 2**40):
        assert wire.varint(n) == encoder._VarintBytes(n)


# -- requests ------------------------------------------------------------------------------


@pytest.mark.parametrize("datatype", [*ALL_FIXED, "BYTES", "BF16"])
def test_decode_raw_inputs_every_datatype(datatype: str) -> None:
    if datatype == "BF16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        arr = np.arange(6, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(2, 3)
        inp = grpcclient.InferInput("IN", [2, 3], "BF16")
        inp.set_data_from_numpy(arr)
    else:
        arr = _array(datatype)
        inp = _input("IN", arr, datatype)
    request, empty_final = _decode(_client_request([inp], model="typed", version="3"))
    assert empty_final is False
    assert request.model_name == "typed" and request.model_version == "3"
    assert request.outputs is None
    (t,) = request.inputs
    assert (t.name, t.datatype, t.shape) == ("IN", datatype, (2, 3))
    assert t.data is None  # the core decodes raw bytes
    got = _as_numpy(t)
    if datatype == "BF16":
        np.testing.assert_array_equal(got.astype(np.float32), arr.astype(np.float32))
    else:
        np.testing.assert_array_equal(got, arr)


def test_decode_request_fields_and_parameters() -> None:
    out = grpcclient.InferRequestedOutput("OUT", class_count=3)
    data = _client_request(
        [_input("IN", np.ones(4, np.float32))], [out, grpcclient.InferRequestedOutput("O2")],
        request_id="abc", sequence_id=42, sequence_start=True, sequence_end=False,
        priority=2, timeout=1500, parameters={"s": "v", "b": True, "i": -3, "f": 0.5},
    )  # fmt: skip
    request, _ = _decode(data)
    assert request.id == "abc"
    assert request.correlation_id == 42
    assert request.flags == SEQUENCE_START
    assert request.priority == 2
    assert request.timeout_us == 1500
    assert request.parameters == {"s": "v", "b": True, "i": -3, "f": 0.5}
    assert request.outputs is not None
    assert [(o.name, o.parameters) for o in request.outputs] == [
        ("OUT", {"classification": 3}),
        ("O2", {}),
    ]
    decoded = codec.decode_infer_request(wire.parse_infer_request(data))
    assert decoded.classification == {"OUT": 3}
    assert decoded.shm is False


def test_decode_string_sequence_id_and_end_flag() -> None:
    data = _client_request(
        [_input("IN", np.ones(1, np.float32))],
        sequence_id="corr-1", sequence_start=True, sequence_end=True,
    )  # fmt: skip
    request, _ = _decode(data)
    assert request.correlation_id == "corr-1"
    assert request.flags == SEQUENCE_START | SEQUENCE_END


def _request_with_params(**params: pb.InferParameter) -> bytes:
    msg = pb.ModelInferRequest(model_name="m")
    for key, value in params.items():
        msg.parameters[key].CopyFrom(value)
    return msg.SerializeToString()  # type: ignore[no-any-return]


def test_empty_final_response_flag() -> None:
    data = _request_with_params(
        triton_enable_empty_final_response=pb.InferParameter(bool_param=True)
    )
    _, empty_final = _decode(data)
    assert empty_final is True


@pytest.mark.parametrize(
    ("key", "param", "message"),
    [
        ("sequence_id", pb.InferParameter(uint64_param=3),
         "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."),
        ("sequence_start", pb.InferParameter(int64_param=1),
         "invalid value type for 'sequence_start' parameter, expected bool_param."),
        ("priority", pb.InferParameter(int64_param=-1),
         "invalid value for 'priority', expected value >= 0."),
        ("priority", pb.InferParameter(string_param="x"),
         "invalid value type for 'priority' parameter, expected int64_param or uint64_param."),
        ("timeout", pb.InferParameter(uint64_param=1),
         "invalid value type for 'timeout' parameter, expected int64_param."),
        ("triton_other", pb.InferParameter(bool_param=True),
         "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
         "following keys starting with 'triton_' are allowed: triton_enable_empty_final_response"),
        ("triton_enable_empty_final_response", pb.InferParameter(int64_param=1),
         "invalid value type for 'triton_enable_empty_final_response' parameter, expected "
         "bool_param."),
        ("custom", pb.InferParameter(uint64_param=1),
         "invalid value type for 'custom' parameter, expected int64_param, bool_param, or "
         "string_param."),
    ],
)  # fmt: skip
def test_bad_request_parameters(key: str, param: Any, message: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        _decode(_request_with_params(**{key: param}))
    assert e.value.message == message


def test_priority_int64_accepted() -> None:
    request, _ = _decode(_request_with_params(priority=pb.InferParameter(int64_param=5)))
    assert request.priority == 5


def test_missing_raw_data() -> None:
    msg = pb.ModelInferRequest(model_name="m")
    msg.inputs.add(name="A", datatype="FP32", shape=[1])
    msg.inputs.add(name="B", datatype="FP32", shape=[1])
    msg.raw_input_contents.append(b"\0\0\0\0")
    with pytest.raises(InvalidArgument) as e:
        _decode(msg.SerializeToString())
    assert e.value.message == "unable to find data for input tensor 'B' for model 'm' in request."


# -- shared memory parameters --------------------------------------------------------------


def test_shared_memory_input_and_output() -> None:
    inp = grpcclient.InferInput("IN", [4], "FP32")
    inp.set_shared_memory("in_r", 16, offset=8)
    plain = _input("P", np.ones(2, np.int32))
    out = grpcclient.InferRequestedOutput("OUT")
    out.set_shared_memory("out_r", 16)
    request, _ = _decode(_client_request([inp, plain], [out]))
    shm, p = request.inputs
    assert shm.raw is None and shm.data is None
    assert shm.parameters == {
        "shared_memory_region": "in_r",
        "shared_memory_byte_size": 16,
        "shared_memory_offset": 8,
    }
    # The shm input takes no raw entry: the next input gets the first one.
    np.testing.assert_array_equal(_as_numpy(p), np.ones(2, np.int32))
    assert request.outputs is not None
    assert request.outputs[0].parameters == {
        "shared_memory_region": "out_r",
        "shared_memory_byte_size": 16,
    }
    assert codec.decode_infer_request(wire.parse_infer_request(_client_request([inp]))).shm


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"shared_memory_region": pb.InferParameter(int64_param=1),
          "shared_memory_byte_size": pb.InferParameter(int64_param=4)},
         "invalid value type for 'shared_memory_region' parameter for tensor 'IN', expected "
         "string_param."),
        ({"shared_memory_region": pb.InferParameter(string_param="r")},
         "'shared_memory_byte_size' must be specified along with 'shared_memory_region' "
         "parameter for tensor 'IN'"),
        ({"shared_memory_offset": pb.InferParameter(int64_param=0)},
         "'shared_memory_offset' can not be specified without 'shared_memory_region' parameter "
         "for tensor 'IN'"),
        ({"shared_memory_region": pb.InferParameter(string_param="r"),
          "shared_memory_byte_size": pb.InferParameter(uint64_param=4)},
         "invalid value type for 'shared_memory_byte_size' parameter for tensor 'IN', expected "
         "int64_param."),
    ],
)  # fmt: skip
def test_bad_shared_memory_parameters(params: dict[str, Any], message: str) -> None:
    msg = pb.ModelInferRequest(model_name="m")
    t = msg.inputs.add(name="IN", datatype="FP32", shape=[1])
    for key, value in params.items():
        t.parameters[key].CopyFrom(value)
    with pytest.raises(InvalidArgument) as e:
        _decode(msg.SerializeToString())
    assert e.value.message == message


def test_bad_classification_parameter() -> None:
    msg = pb.ModelInferRequest(model_name="m")
    o = msg.outputs.add(name="OUT")
    o.parameters["classification"].CopyFrom(pb.InferParameter(string_param="3"))
    with pytest.raises(InvalidArgument, match="expected int64_param"):
        _decode(msg.SerializeToString())


# -- typed contents ------------------------------------------------------------------------

_FIELD_FOR = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents",
    "INT32": "int_contents", "INT64": "int64_contents", "UINT8": "uint_contents",
    "UINT16": "uint_contents", "UINT32": "uint_contents", "UINT64": "uint64_contents",
    "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents",
}  # fmt: skip


def _typed_request(datatype: str, values: list[Any], shape: list[int], field: str = "") -> bytes:
    msg = pb.ModelInferRequest(model_name="m")
    t = msg.inputs.add(name="IN", datatype=datatype, shape=shape)
    getattr(t.contents, field or _FIELD_FOR[datatype]).extend(values)
    return msg.SerializeToString()  # type: ignore[no-any-return]


@pytest.mark.parametrize("datatype", sorted(_FIELD_FOR))
def test_typed_contents_every_datatype(datatype: str) -> None:
    arr = _array(datatype)
    values = list(arr.reshape(-1))
    if datatype != "BYTES":
        values = [v.item() for v in values]
    request, _ = _decode(_typed_request(datatype, values, [2, 3]))
    (t,) = request.inputs
    got = _as_numpy(t)
    assert got.dtype == arr.dtype
    np.testing.assert_array_equal(got, arr)


def test_typed_contents_narrow_ints_keep_low_bytes() -> None:
    request, _ = _decode(_typed_request("INT8", [1, 300, -1], [3]))
    np.testing.assert_array_equal(_as_numpy(request.inputs[0]), np.array([1, 44, -1], np.int8))
    request, _ = _decode(_typed_request("UINT16", [1, 65537], [2]))
    np.testing.assert_array_equal(_as_numpy(request.inputs[0]), np.array([1, 1], np.uint16))


def test_typed_contents_wrong_field() -> None:
    with pytest.raises(InvalidArgument) as e:
        _decode(_typed_request("FP32", [1, 2], [2], field="int_contents"))
    assert e.value.message == (
        "unexpected explicit tensor data for input tensor 'IN' for model 'm' of type 'INT32', "
        "expected datatype 'FP32'"
    )
    with pytest.raises(InvalidArgument, match="of type 'FP32', expected datatype 'FP16'"):
        _decode(_typed_request("FP16", [1.0], [1], field="fp32_contents"))


def test_typed_contents_two_fields() -> None:
    msg = pb.ModelInferRequest(model_name="m")
    t = msg.inputs.add(name="IN", datatype="INT32", shape=[1])
    t.contents.int_contents.append(1)
    t.contents.fp32_contents.append(1.0)
    with pytest.raises(InvalidArgument, match="binary data was already supplied"):
        _decode(msg.SerializeToString())


def test_typed_contents_with_raw_contents() -> None:
    msg = pb.ModelInferRequest(model_name="m")
    t = msg.inputs.add(name="IN", datatype="INT32", shape=[1])
    t.contents.int_contents.append(1)
    msg.raw_input_contents.append(b"\0\0\0\0")
    with pytest.raises(InvalidArgument) as e:
        _decode(msg.SerializeToString())
    assert e.value.message == (
        "contents field must not be specified when using raw_input_contents for 'IN' for model 'm'"
    )


def test_typed_contents_with_shared_memory() -> None:
    msg = pb.ModelInferRequest(model_name="m")
    t = msg.inputs.add(name="IN", datatype="INT32", shape=[1])
    t.contents.int_contents.append(1)
    t.parameters["shared_memory_region"].string_param = "r"
    t.parameters["shared_memory_byte_size"].int64_param = 4
    with pytest.raises(InvalidArgument, match="unexpected 'content' provided when using shared"):
        _decode(msg.SerializeToString())


# -- versions ------------------------------------------------------------------------------


def test_check_version() -> None:
    assert codec.check_version("") == ""
    assert codec.check_version("12") == "12"
    assert codec.check_version("+3") == "3"  # std::stol reads it
    assert codec.check_version("2abc") == "2"  # leading digits count, as in Triton
    with pytest.raises(InvalidArgument) as e:
        codec.check_version("abc")
    assert e.value.message.startswith(
        "failed to get model version from specified version string 'abc'"
    )
    with pytest.raises(InvalidArgument, match="invalid model version specified '-1'"):
        codec.check_version("-1")
    with pytest.raises(InvalidArgument, match="version string"):
        codec.check_version("\u00b2")  # a Unicode digit is not a version


def test_bad_version_in_infer_request() -> None:
    msg = pb.ModelInferRequest(model_name="m", model_version="x")
    with pytest.raises(InvalidArgument, match="version string 'x'"):
        _decode(msg.SerializeToString())


# -- responses -----------------------------------------------------------------------------


def _infer_result(encoded: wire.EncodedResponse) -> Any:
    return grpcclient.InferResult(encoded.to_message())


@pytest.mark.parametrize("datatype", [*ALL_FIXED, "BYTES"])
def test_encode_response_every_datatype(datatype: str) -> None:
    arr = _array(datatype)
    resp = InferResponse("m", "1", "rid", [Tensor.from_numpy("OUT", arr)])
    result = _infer_result(codec.encode_infer_response(resp))
    got = result.as_numpy("OUT")
    if datatype == "BYTES":
        assert got.dtype == np.object_
    np.testing.assert_array_equal(got, arr)
    msg = result.get_response()
    assert (msg.model_name, msg.model_version, msg.id) == ("m", "1", "rid")
    assert msg.outputs[0].datatype == datatype
    assert list(msg.outputs[0].shape) == [2, 3]
    assert len(msg.parameters) == 0


def test_encode_response_large_and_non_contiguous() -> None:
    big = np.arange(1 << 20, dtype=np.float32)
    strided = np.arange(12, dtype=np.int64).reshape(3, 4)[:, ::2]
    resp = InferResponse("m", "1", outputs=[
        Tensor.from_numpy("BIG", big), Tensor.from_numpy("S", strided),
    ])  # fmt: skip
    result = _infer_result(codec.encode_infer_response(resp))
    np.testing.assert_array_equal(result.as_numpy("BIG"), big)
    np.testing.assert_array_equal(result.as_numpy("S"), strided)


def test_encode_response_alignment_with_empty_outputs() -> None:
    """One raw entry per output, in order, even when an output is empty or in shm."""
    empty = np.zeros((0, 3), np.float32)
    shm_out = Tensor("SHM", "FP32", (4,), np.ones(4, np.float32),
                     parameters={"shared_memory_region": "r"})  # fmt: skip
    after = np.array([7, 8], np.int32)
    resp = InferResponse("m", "1", outputs=[
        Tensor.from_numpy("E", empty), shm_out, Tensor.from_numpy("A", after),
    ])  # fmt: skip
    msg = codec.encode_infer_response(resp).to_message()
    assert list(msg.raw_output_contents) == [b"", b"", after.tobytes()]
    result = grpcclient.InferResult(msg)
    assert result.as_numpy("E").shape == (0, 3)
    np.testing.assert_array_equal(result.as_numpy("A"), after)


def test_encode_response_raw_output_passthrough() -> None:
    raw = serialize_byte_tensor(np.array([b"a", b"bc"], dtype=np.object_)).item()
    resp = InferResponse("m", "1", outputs=[Tensor("O", "BYTES", (2,), raw=raw)])
    result = _infer_result(codec.encode_infer_response(resp))
    assert list(result.as_numpy("O")) == [b"a", b"bc"]


def test_encode_response_parameters_and_final_flag() -> None:
    resp = InferResponse("m", "2", "x", parameters={"b": True, "i": 5, "f": 1.5, "s": "t"})
    msg = codec.encode_infer_response(resp, final=False).to_message()
    params = {k: codec.param_value(v) for k, v in msg.parameters.items()}
    assert params == {"b": True, "i": 5, "f": 1.5, "s": "t", "triton_final_response": False}
    assert msg.parameters["b"].WhichOneof("parameter_choice") == "bool_param"
    assert msg.parameters["i"].WhichOneof("parameter_choice") == "int64_param"
    assert msg.parameters["f"].WhichOneof("parameter_choice") == "double_param"


def _protobuf_response(response: InferResponse, final: bool | None) -> bytes:
    """The same response built and serialized whole by protobuf."""
    msg = pb.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    for key, value in response.parameters.items():
        codec.set_param(msg.parameters[key], value)
    if final is not None:
        msg.parameters[codec.FINAL_RESPONSE_KEY].bool_param = final
    for t in response.outputs:
        msg.outputs.add(name=t.name, datatype=t.datatype, shape=t.shape)
        assert t.data is not None
        msg.raw_output_contents.append(bytes(tensor_codec.raw_from_array(t.datatype, t.data)))
    return msg.SerializeToString()  # type: ignore[no-any-return]


@pytest.mark.parametrize("final", [None, True, False])
@pytest.mark.parametrize(
    "response",
    [
        InferResponse(
            "add_sub",
            "1",
            "",
            [
                Tensor.from_numpy("OUTPUT0", np.arange(4, dtype=np.float32)),
                Tensor.from_numpy("OUTPUT1", np.arange(4, dtype=np.float32)),
            ],
        ),
        InferResponse(
            "m",
            "",
            "r\u00e9q-" + "x" * 200,
            [
                Tensor("L", "INT32", [2, 1], np.array([[1], [2]], np.int32)),  # type: ignore[arg-type]
                Tensor("N", "INT32", (np.int64(2),), np.array([3, 4], np.int32)),  # type: ignore[arg-type]
            ],
            {"b": True, "i": -3, "f": 0.5, "s": "t"},
        ),
        InferResponse("m", "7"),
    ],
)
def test_encoded_response_is_protobufs_own_serialization(
    response: InferResponse, final: bool | None
) -> None:
    """Cached and hand-framed header parts give the bytes protobuf gives for the whole
    message (the second encoding reuses the cached parts)."""
    expected = _protobuf_response(response, final)
    for _ in range(2):
        assert codec.encode_infer_response(response, final).serialize() == expected


def test_stream_response_serialization() -> None:
    arr = np.arange(5, dtype=np.float32)
    resp = InferResponse("m", "1", "id9", [Tensor.from_numpy("OUT", arr)])
    stream_msg = codec.encode_infer_response(resp, final=True).to_stream_message()
    assert stream_msg.error_message == ""
    result = grpcclient.InferResult(stream_msg.infer_response)
    np.testing.assert_array_equal(result.as_numpy("OUT"), arr)
    assert stream_msg.infer_response.parameters["triton_final_response"].bool_param is True

    err = codec.encode_stream_error(ModelyardError("boom"), "id9").to_stream_message()
    assert err.error_message == "boom"
    assert err.infer_response.id == "id9"
    assert err.infer_response.model_name == ""
    assert len(err.infer_response.parameters) == 0

    err = codec.encode_stream_error("model says no", "i", "m", "", final=True).to_stream_message()
    assert err.error_message == "model says no"
    assert err.infer_response.model_name == "m"
    assert err.infer_response.parameters["triton_final_response"].bool_param is True


def test_empty_final_response() -> None:
    msg = codec.encode_empty_final("r", "m", "").to_stream_message()
    assert msg.error_message == ""
    assert (msg.infer_response.id, msg.infer_response.model_name) == ("r", "m")
    assert len(msg.infer_response.outputs) == 0 and len(msg.infer_response.raw_output_contents) == 0
    assert msg.infer_response.parameters["triton_final_response"].bool_param is True
    assert grpcclient.InferResult(msg.infer_response).as_numpy("X") is None


def test_flag_only_final_detection() -> None:
    assert codec.is_flag_only_final(InferResponse("m", "1", final=True, flag_only=True))
    # A real response with no outputs that carries the FINAL flag is still sent.
    assert not codec.is_flag_only_final(InferResponse("m", "1", final=True))
    assert not codec.is_flag_only_final(InferResponse("m", "1", final=False))
    assert not codec.is_flag_only_final(
        InferResponse("m", "1", outputs=[Tensor.from_numpy("O", np.ones(1))], final=True)
    )


def test_bytes_output_roundtrip_against_client_helpers() -> None:
    arr = np.array([[b"\x00\xff", b""], [b"abc", "\u00e9".encode()]], dtype=np.object_)
    raw = codec.encode_infer_response(
        InferResponse("m", "1", outputs=[Tensor.from_numpy("O", arr)])
    ).raw[0]
    np.testing.assert_array_equal(deserialize_bytes_tensor(bytes(raw)).reshape(2, 2), arr)


# -- status table --------------------------------------------------------------------------


def test_every_error_code_has_a_status() -> None:
    assert set(codec.GRPC_STATUS) == set(ErrorCode)
    assert codec.grpc_status(ErrorCode.UNSUPPORTED) == grpc.StatusCode.UNIMPLEMENTED
    assert codec.grpc_status(ErrorCode.INVALID_ARG) == grpc.StatusCode.INVALID_ARGUMENT
    assert codec.grpc_status(ErrorCode.NOT_FOUND) == grpc.StatusCode.NOT_FOUND
