"""The [py] helpers of pb_utils: type tables, BYTES (de)serialization, lookups."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import triton_python_backend_utils as pb


def test_constants() -> None:
    assert pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START == 1
    assert pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END == 2
    assert pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1
    assert pb.TRITONSERVER_REQUEST_RELEASE_ALL == 1
    assert pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE == 2
    assert int(pb.TRITONSERVER_MEMORY_GPU) == 0
    assert int(pb.TRITONSERVER_MEMORY_CPU) == 1


def test_triton_to_numpy_type() -> None:
    expected = [
        np.bool_, np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int16, np.int32,
        np.int64, np.float16, np.float32, np.float64, np.object_,
    ]  # fmt: skip
    for code, np_type in enumerate(expected, start=1):
        assert pb.triton_to_numpy_type(code) is np_type
        assert pb.numpy_to_triton_type(np_type) == code
    assert pb.triton_to_numpy_type(0) is None
    assert pb.triton_to_numpy_type(14) is None
    assert pb.triton_to_numpy_type([1]) is None


def test_numpy_to_triton_type_quirks() -> None:
    assert pb.numpy_to_triton_type(np.bytes_) == 13
    assert pb.numpy_to_triton_type(bool) is None
    assert pb.numpy_to_triton_type(np.str_) is None
    assert pb.numpy_to_triton_type(np.dtype("float32")) == 11
    assert pb.numpy_to_triton_type("float32") is None


def test_triton_string_to_numpy() -> None:
    assert pb.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb.triton_string_to_numpy("TYPE_BOOL") is bool
    assert pb.triton_string_to_numpy("TYPE_STRING") is np.object_
    with pytest.raises(KeyError):
        pb.triton_string_to_numpy("TYPE_BF16")
    assert len(pb.TRITON_STRING_TO_NUMPY) == 13


def test_serialize_byte_tensor() -> None:
    arr = np.array([[b"ab", "c"], [1, b""]], dtype=np.object_)
    out = pb.serialize_byte_tensor(arr)
    assert isinstance(out, bytes)
    assert out == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c\x01\x00\x00\x001\x00\x00\x00\x00"
    # C order, whatever the memory order of the input
    f = np.asfortranarray(np.array([[b"a", b"b"], [b"c", b"d"]], dtype=np.object_))
    assert pb.deserialize_bytes_tensor(pb.serialize_byte_tensor(f)).tolist() == [
        b"a", b"b", b"c", b"d",
    ]  # fmt: skip


def test_serialize_special_cases() -> None:
    assert pb.serialize_byte_tensor(np.array([], dtype=np.object_)) == ()
    assert pb.serialize_byte_tensor(np.zeros(3, dtype=np.float32)) is None
    fixed = np.array([b"xy", b"z"], dtype="S2")
    assert pb.serialize_byte_tensor(fixed) == b"\x02\x00\x00\x00xy\x01\x00\x00\x00z"


def test_deserialize_bytes_tensor() -> None:
    payload = b"\x03\x00\x00\x00abc\x00\x00\x00\x00\x01\x00\x00\x00\xff"
    for buf in (payload, bytearray(payload), memoryview(payload), np.frombuffer(payload, np.uint8)):
        out = pb.deserialize_bytes_tensor(buf)
        assert out.dtype == np.object_
        assert out.shape == (3,)
        assert out.tolist() == [b"abc", b"", b"\xff"]
        assert all(type(x) is bytes for x in out)
    empty = pb.deserialize_bytes_tensor(b"")
    assert empty.shape == (0,)
    assert empty.dtype == np.object_
    with pytest.raises(struct.error):
        pb.deserialize_bytes_tensor(b"\x05\x00\x00\x00ab")
    with pytest.raises(struct.error):
        pb.deserialize_bytes_tensor(b"\x05\x00")


def test_bytes_round_trip_keeps_equal_length_items_one_dimensional() -> None:
    items = [b"aa", b"bb", b"cc"]
    out = pb.deserialize_bytes_tensor(pb.serialize_byte_tensor(np.array(items, dtype=np.object_)))
    assert out.shape == (3,)
    assert out.tolist() == items


def test_tensor_lookups() -> None:
    a = pb.Tensor("A", np.zeros(1))
    b = pb.Tensor("B", np.ones(1))
    request = pb.InferenceRequest(inputs=[a, b], requested_output_names=[], model_name="m")
    assert pb.get_input_tensor_by_name(request, "B") is b
    assert pb.get_input_tensor_by_name(request, "C") is None
    response = pb.InferenceResponse([a, b])
    assert pb.get_output_tensor_by_name(response, "A") is a
    assert pb.get_output_tensor_by_name(response, "Z") is None


def test_config_lookups() -> None:
    config = {
        "input": [{"name": "IN", "data_type": "TYPE_FP32"}],
        "output": [{"name": "OUT", "data_type": "TYPE_INT32"}],
    }
    assert pb.get_input_config_by_name(config, "IN") == config["input"][0]
    assert pb.get_input_config_by_name(config, "OUT") is None
    assert pb.get_output_config_by_name(config, "OUT") == config["output"][0]
    assert pb.get_output_config_by_name({}, "OUT") is None
    assert pb.using_decoupled_model_transaction_policy({}) is False
    assert pb.using_decoupled_model_transaction_policy(
        {"model_transaction_policy": {"decoupled": True}}
    )
    with pytest.raises(KeyError):
        pb.using_decoupled_model_transaction_policy({"model_transaction_policy": {}})


def test_module_names_match_triton() -> None:
    triton_names = {
        # from triton_python_backend_utils.py
        "TRITON_STRING_TO_NUMPY", "serialize_byte_tensor", "deserialize_bytes_tensor",
        "get_input_tensor_by_name", "get_output_tensor_by_name", "get_input_config_by_name",
        "get_output_config_by_name", "using_decoupled_model_transaction_policy",
        "triton_to_numpy_type", "numpy_to_triton_type", "triton_string_to_numpy", "ModelConfig",
        "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START", "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
        "TRITONSERVER_RESPONSE_COMPLETE_FINAL", "TRITONSERVER_REQUEST_RELEASE_ALL",
        "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE", "json", "struct", "np",
        # injected by the stub
        "TritonError", "TritonModelException", "Tensor", "InferenceRequest", "InferenceResponse",
        "Logger", "PreferredMemory", "TRITONSERVER_MEMORY_GPU", "TRITONSERVER_MEMORY_CPU",
        "MetricFamily", "load_model", "unload_model", "is_model_ready", "get_model_dir",
    }  # fmt: skip
    names = set(dir(pb))
    assert triton_names <= names
    for name in triton_names:
        assert hasattr(pb, name)
    public = {n for n in names if not n.startswith("_")}
    extras = public - triton_names
    assert extras <= {
        "InferenceResponseSender", "InferenceTrace", "MemoryType", "Metric", "MetricKind",
        "ResponseIterator", "Runtime", "get_runtime", "runtime_context", "set_runtime",
    }  # fmt: skip
    assert pb.Tensor.__module__ == "triton_python_backend_utils"
