"""pb_utils.Tensor: construction rules, dtypes, BYTES and DLPack."""

from __future__ import annotations

import numpy as np
import pytest

import triton_python_backend_utils as pb


def test_wraps_contiguous_array_without_copy() -> None:
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = pb.Tensor("x", arr)
    assert t.name() == "x"
    assert t.as_numpy() is arr
    assert t.as_numpy() is t.as_numpy()
    arr[0, 0] = 42.0
    assert t.as_numpy()[0, 0] == 42.0
    assert t.shape() == [2, 3]
    assert isinstance(t.shape(), list)
    assert t.is_cpu() is True
    assert t.triton_dtype() == 11


def test_non_contiguous_array_is_made_contiguous() -> None:
    base = np.arange(12, dtype=np.int32).reshape(3, 4)
    view = base[:, ::2]
    t = pb.Tensor("x", view)
    out = t.as_numpy()
    assert out.flags.c_contiguous
    np.testing.assert_array_equal(out, view)
    assert not np.shares_memory(out, base)
    fortran = np.asfortranarray(base)
    assert pb.Tensor("f", fortran).as_numpy().flags.c_contiguous


def test_zero_dim_array() -> None:
    t = pb.Tensor("s", np.array(3.5))
    assert t.shape() == []
    assert t.as_numpy().item() == 3.5


@pytest.mark.parametrize(
    ("dtype", "code"),
    [
        (np.bool_, 1),
        (np.uint8, 2),
        (np.uint16, 3),
        (np.uint32, 4),
        (np.uint64, 5),
        (np.int8, 6),
        (np.int16, 7),
        (np.int32, 8),
        (np.int64, 9),
        (np.float16, 10),
        (np.float32, 11),
        (np.float64, 12),
        (np.object_, 13),
    ],
)
def test_supported_dtypes(dtype: type, code: int) -> None:
    t = pb.Tensor("x", np.zeros(2, dtype=dtype))
    assert t.triton_dtype() == code


def test_bytes_dtype_is_bytes_tensor() -> None:
    arr = np.array([b"ab", b"c"], dtype=np.bytes_)
    t = pb.Tensor("s", arr)
    assert t.triton_dtype() == 13
    assert t.as_numpy() is arr


def test_big_endian_is_converted() -> None:
    arr = np.arange(3, dtype=">f4")
    t = pb.Tensor("x", arr)
    assert t.as_numpy().dtype == np.dtype("float32")
    np.testing.assert_array_equal(t.as_numpy(), [0, 1, 2])


@pytest.mark.parametrize("dtype", ["<U3", np.complex64, "datetime64[s]"])
def test_unsupported_dtype(dtype: object) -> None:
    with pytest.raises(pb.TritonModelException, match=r"^NumPy dtype is not supported\.$"):
        pb.Tensor("x", np.zeros(2, dtype=dtype))


def test_argument_errors() -> None:
    with pytest.raises(pb.TritonModelException, match=r"Tensor name cannot be an empty string\."):
        pb.Tensor("", np.zeros(1))
    with pytest.raises(TypeError):
        pb.Tensor("x", [1, 2, 3])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        pb.Tensor("x", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        pb.Tensor(None, np.zeros(1))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        pb.Tensor(name="x", array=np.zeros(1))  # type: ignore[call-arg]


def test_object_tensor_round_trips_through_serialization() -> None:
    arr = np.array([[b"a", "\u00e9"], [3, b""]], dtype=np.object_)
    t = pb.Tensor("s", arr)
    assert t.as_numpy() is arr
    out = pb.deserialize_bytes_tensor(pb.serialize_byte_tensor(t.as_numpy()))
    assert out.tolist() == [b"a", "\u00e9".encode(), b"3", b""]


def test_dlpack_round_trip_shares_memory() -> None:
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = pb.Tensor("x", arr)
    capsule = t.to_dlpack()
    assert "dltensor" in repr(capsule)
    t2 = pb.Tensor.from_dlpack("y", capsule)
    assert t2.name() == "y"
    assert t2.shape() == [2, 3]
    assert np.shares_memory(t2.as_numpy(), arr)
    np.testing.assert_array_equal(t2.as_numpy(), arr)


def test_from_dlpack_accepts_tensor_and_dlpack_objects() -> None:
    arr = np.arange(4, dtype=np.int64)
    t = pb.Tensor("x", arr)
    assert t.__dlpack_device__() == (1, 0)
    via_tensor = pb.Tensor.from_dlpack("a", t)
    assert np.shares_memory(via_tensor.as_numpy(), arr)
    via_array = pb.Tensor.from_dlpack("b", arr)
    assert np.shares_memory(via_array.as_numpy(), arr)
    assert via_array.triton_dtype() == 9
    # numpy can import a pb Tensor directly
    back = np.from_dlpack(t)
    assert np.shares_memory(back, arr)


def test_to_dlpack_of_read_only_array() -> None:
    arr = np.frombuffer(b"\x00\x00\x80?" * 2, dtype=np.float32)
    assert not arr.flags.writeable
    t = pb.Tensor("x", arr)
    out = pb.Tensor.from_dlpack("y", t.to_dlpack())
    np.testing.assert_array_equal(out.as_numpy(), [1.0, 1.0])


def test_dlpack_errors() -> None:
    strings = pb.Tensor("s", np.array([b"a"], dtype=np.object_))
    with pytest.raises(
        pb.TritonModelException, match=r"^DLPack does not have support for string tensors\.$"
    ):
        strings.to_dlpack()
    with pytest.raises(pb.TritonModelException, match="Provided tensor is not supported"):
        pb.Tensor.from_dlpack("x", None)
    with pytest.raises(pb.TritonModelException, match="Provided tensor is not supported"):
        pb.Tensor.from_dlpack("x", 5)
    with pytest.raises(pb.TritonModelException, match=r"Tensor name cannot be an empty string\."):
        pb.Tensor.from_dlpack("", np.zeros(2))
    with pytest.raises(pb.TritonModelException, match="DLPack tensor is not contiguous"):
        pb.Tensor.from_dlpack("x", np.arange(10)[::2])


def test_from_dlpack_of_a_gpu_tensor_without_cuda_has_tritons_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from triton_python_backend_utils import _cuda

    monkeypatch.setattr(_cuda, "_detect", lambda: None)  # a process that cannot reach a GPU

    class FakeCuda:
        def __dlpack__(self, stream: object = None) -> object:
            raise AssertionError("not reached")

        def __dlpack_device__(self) -> tuple[int, int]:
            return (2, 0)

    with pytest.raises(pb.TritonModelException) as e:
        pb.Tensor.from_dlpack("x", FakeCuda())
    assert str(e.value) == (
        "DLPack capsule passed pointer to memory allocated on GPU device,           when GPU "
        "is not available"
    )


def test_from_dlpack_rejects_other_devices() -> None:
    class Metal:
        def __dlpack__(self, stream: object = None) -> object:
            raise AssertionError("not reached")

        def __dlpack_device__(self) -> tuple[int, int]:
            return (8, 0)

    with pytest.raises(
        pb.TritonModelException, match=r"DLDevice type 8 is not support by Python backend\."
    ):
        pb.Tensor.from_dlpack("x", Metal())


def test_argument_types_are_checked_before_the_name_as_tritons_binding() -> None:
    # Triton 2.51 (pybind11): Tensor("", None) is a TypeError, not the empty-name error.
    with pytest.raises(TypeError) as e:
        pb.Tensor("", None)  # type: ignore[arg-type]
    assert str(e.value) == (
        "__init__(): incompatible constructor arguments. The following argument types are "
        "supported:\n    1. c_python_backend_utils.Tensor(arg0: str, arg1: numpy.ndarray)\n\n"
        "Invoked with: '', None"
    )
    with pytest.raises(TypeError, match=r"Invoked with: None, array\(\[0\.\]\)$"):
        pb.Tensor(None, np.zeros(1))  # type: ignore[arg-type]
