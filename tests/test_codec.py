"""The shared tensor codec against tritonclient's own serializers."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

from modelyard import tensor_bytes as codec


def test_bytes_round_trip_matches_tritonclient() -> None:
    arr = np.array([[b"a", b""], [b"\x00\xff", "unicodé".encode()]], dtype=np.object_)
    ours = codec.serialize_bytes(arr)
    theirs = serialize_byte_tensor(arr).item()
    assert ours == theirs
    back = codec.array_from_raw("BYTES", (2, 2), ours)
    assert back.tolist() == arr.tolist()
    assert list(deserialize_bytes_tensor(ours)) == arr.reshape(-1).tolist()


def test_str_and_other_objects_are_utf8_encoded() -> None:
    arr = np.array(["x", 7], dtype=np.object_)
    assert codec.deserialize_bytes(codec.serialize_bytes(arr)) == [b"x", b"7"]


@pytest.mark.parametrize("raw", [b"\x05\x00\x00\x00ab", b"\x01\x00"])
def test_truncated_bytes_are_rejected(raw: bytes) -> None:
    with pytest.raises(ValueError):
        codec.deserialize_bytes(raw)


def test_fixed_size_views_do_not_copy() -> None:
    buf = bytearray(np.arange(6, dtype=np.float32).tobytes())
    arr = codec.array_from_raw("FP32", (2, 3), memoryview(buf))
    buf[0:4] = np.float32(42).tobytes()
    assert arr[0, 0] == 42  # a view over the received bytes


def test_raw_from_array_handles_non_contiguous_and_big_endian() -> None:
    a = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]
    assert bytes(codec.raw_from_array("INT32", a)) == np.ascontiguousarray(a).tobytes()
    b = np.arange(3, dtype=">i4")
    assert bytes(codec.raw_from_array("INT32", b)) == np.arange(3, dtype="<i4").tobytes()


@pytest.mark.parametrize("small", [True, False])
def test_raw_from_array_small_copies_and_large_views(small: bool) -> None:
    n = 8 if small else codec.SMALL_COPY_BYTES  # int32 [n, 2]: 64 B, or 8x the copy limit
    a = np.arange(2 * n, dtype=np.int32).reshape(n, 2)
    raw = codec.raw_from_array("INT32", a)
    assert isinstance(raw, bytes) == small  # large tensors: a view, not a copy
    assert bytes(raw) == a.tobytes()
    strided = a[:, ::2]
    assert bytes(codec.raw_from_array("INT32", strided)) == np.ascontiguousarray(strided).tobytes()
    swapped = a.astype(">i4")
    assert bytes(codec.raw_from_array("INT32", swapped)) == a.tobytes()
    assert codec.raw_from_array("INT32", a[:0]) == b""


def test_expected_byte_size() -> None:
    assert codec.expected_byte_size("FP32", (2, 4)) == 32
    assert codec.expected_byte_size("BOOL", (3,)) == 3
    assert codec.expected_byte_size("BYTES", (3,)) is None
