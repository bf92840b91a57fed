"""pb_utils.Tensor's DLPack paths on the CPU: real numpy and torch tensors (zero copy, BF16,
bool, empty, lifetimes, Triton's texts), and GPU tensors through a stand-in producer that
reports kDLCUDA over host memory, with a stand-in CUDA runtime (the GPU is the only thing
faked; tests/gpu runs the same paths on a device)."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import triton_python_backend_utils as pb
from triton_python_backend_utils import _cuda, _dlpack

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")


def test_cpu_round_trip_shares_memory() -> None:
    source = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    t = pb.Tensor.from_dlpack("x", source)
    assert t.is_cpu() and t.shape() == [2, 3] and t.name() == "x"
    assert t.as_numpy().ctypes.data == source.data_ptr()
    back = torch.from_dlpack(t)
    assert back.data_ptr() == source.data_ptr()
    source[0, 0] = 42
    assert t.as_numpy()[0, 0] == 42 and back[0, 0] == 42
    assert t.__dlpack_device__() == (1, 0)


def test_numpy_both_ways() -> None:
    a = np.arange(5, dtype=np.int64)
    t = pb.Tensor.from_dlpack("a", a)
    assert t.as_numpy().ctypes.data == a.ctypes.data
    assert t.as_numpy().flags.writeable
    n = np.from_dlpack(pb.Tensor("n", a))
    assert n.ctypes.data == a.ctypes.data


def test_to_dlpack_holds_one_reference_until_released() -> None:
    # QA bls: the capsule adds one reference to the Tensor; dropping it takes it back.
    t = pb.Tensor("t", np.ones(4, dtype=np.float32))
    before = sys.getrefcount(t)
    capsule = t.to_dlpack()
    assert sys.getrefcount(t) - before == 1
    del capsule
    assert sys.getrefcount(t) - before == 0
    consumer = torch.from_dlpack(t.to_dlpack())
    assert sys.getrefcount(t) - before == 1
    del consumer
    gc.collect()
    assert sys.getrefcount(t) - before == 0


def test_read_only_arrays_are_exported_as_a_copy() -> None:
    frame = np.frombuffer(b"\x00\x00\x80?\x00\x00\x00@", dtype=np.float32)  # read-only
    t = pb.Tensor._from_server("r", frame)
    before = sys.getrefcount(t)
    out = torch.from_dlpack(t.to_dlpack())
    assert sys.getrefcount(t) - before == 1
    out += 1  # the copy, not the frame's bytes
    np.testing.assert_array_equal(frame, [1.0, 2.0])
    np.testing.assert_array_equal(out.numpy(), [2.0, 3.0])


def test_memory_outlives_its_producer() -> None:
    source = torch.arange(3.0)
    t = pb.Tensor.from_dlpack("w", source)
    del source
    gc.collect()
    np.testing.assert_array_equal(t.as_numpy(), [0.0, 1.0, 2.0])


def test_a_capsule_is_consumed_once() -> None:
    capsule = torch.ones(2).__dlpack__()
    pb.Tensor.from_dlpack("c", capsule)
    with pytest.raises(pb.TritonModelException, match="Failed to import DLPack tensor"):
        pb.Tensor.from_dlpack("c", capsule)


def test_versioned_capsules() -> None:
    # DLPack 1.0 producers hand out "dltensor_versioned" capsules when asked for them.
    source = torch.arange(5.0)
    capsule = source.__dlpack__(max_version=(1, 0))
    t = pb.Tensor.from_dlpack("v", capsule)
    assert t.as_numpy().ctypes.data == source.data_ptr()
    del capsule, source
    gc.collect()
    np.testing.assert_array_equal(t.as_numpy(), np.arange(5.0))


def test_bf16_through_dlpack_only() -> None:
    source = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16)
    t = pb.Tensor.from_dlpack("b", source)
    assert t.is_cpu() and t.triton_dtype() == 14
    with pytest.raises(pb.TritonModelException) as e:
        t.as_numpy()
    assert str(e.value) == (
        "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and "
        "from_dlpack() instead."
    )
    back = torch.from_dlpack(t.to_dlpack())
    assert back.dtype == torch.bfloat16 and back.data_ptr() == source.data_ptr()
    assert t._host_array().dtype.name == "bfloat16"  # what the runtime sends on


def test_bool_and_empty() -> None:
    flags = pb.Tensor.from_dlpack("f", torch.tensor([True, False]))
    np.testing.assert_array_equal(flags.as_numpy(), [True, False])
    assert torch.from_dlpack(flags).dtype == torch.bool
    empty = pb.Tensor.from_dlpack("e", torch.ones(0, 3))
    assert empty.as_numpy().shape == (0, 3) and empty.shape() == [0, 3]


@pytest.mark.parametrize(
    "make",
    [lambda: torch.ones(2, 3).t(), lambda: torch.arange(10)[::2], lambda: np.ones((3, 4))[:, :2]],
)
def test_non_contiguous_refused_with_tritons_text(make: Any) -> None:
    with pytest.raises(pb.TritonModelException) as e:
        pb.Tensor.from_dlpack("x", make())
    assert str(e.value) == (
        "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored in "
        "C-Order are supported."
    )


def test_size_one_dims_may_have_any_stride() -> None:
    assert pb.Tensor.from_dlpack("o", torch.ones(4, 1)[:, 0:1]).shape() == [4, 1]


def test_unsupported_dtype_and_bytes() -> None:
    with pytest.raises(pb.TritonModelException, match="is not supported"):
        pb.Tensor.from_dlpack("c", torch.ones(2, dtype=torch.complex64))
    words = pb.Tensor("s", np.array([b"a"], dtype=np.object_))
    with pytest.raises(pb.TritonModelException, match="DLPack does not have support for string"):
        words.to_dlpack()


def test_dunder_dlpack_keywords() -> None:
    t = pb.Tensor("t", np.ones(2, dtype=np.float32))
    assert _dlpack.is_capsule(t.__dlpack__(stream=None, max_version=(1, 0)))
    assert _dlpack.is_capsule(t.__dlpack__(dl_device=(1, 0), copy=False))
    with pytest.raises(BufferError):
        t.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError):
        t.__dlpack__(copy=True)


# -- GPU paths with stand-ins for the device -----------------------------------------------


class FakeCuda:
    """The CUDA runtime for "device" memory that is really host memory."""

    def __init__(self) -> None:
        self.synchronized: list[int] = []
        self.current = 0

    @contextlib.contextmanager
    def on_device(self, device_id: int) -> Iterator[None]:
        before, self.current = self.current, device_id
        try:
            yield
        finally:
            self.current = before

    def synchronize(self, device_id: int) -> None:
        assert self.current == device_id
        self.synchronized.append(device_id)

    def copy_to_host(self, src: int, dst: int, nbytes: int, device_id: int) -> None:
        ctypes.memmove(dst, src, nbytes)


class FakeDeviceTensor:
    """A DLPack producer that says its memory is on CUDA device ``device_id``."""

    def __init__(self, values: np.ndarray[Any, Any], device_id: int = 1, bf16: bool = False):
        self.values = np.ascontiguousarray(values)
        self.device_id = device_id
        self.streams: list[object] = []
        self.cuda: FakeCuda | None = None
        self.dtype = (4, 16, 1) if bf16 else {"f": (2, 32, 1), "i": (0, 64, 1)}[values.dtype.kind]

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, self.device_id)

    def __dlpack__(self, stream: object = None) -> object:
        assert self.cuda is None or self.cuda.current == self.device_id  # (as torch insists)
        self.streams.append(stream)
        v = self.values
        return _dlpack.make_capsule(v.ctypes.data, 2, self.device_id, tuple(v.shape), self.dtype, v)


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    fake = FakeCuda()
    monkeypatch.setattr(_cuda, "_detect", lambda: fake)
    return fake


def test_gpu_tensor_keeps_the_device_pointer(cuda: FakeCuda) -> None:
    producer = FakeDeviceTensor(np.arange(6, dtype=np.float32).reshape(2, 3), device_id=1)
    producer.cuda = cuda  # exported while its device is the current one
    t = pb.Tensor.from_dlpack("g", producer)
    assert cuda.current == 0  # and the current device is back
    # The producer was asked for the legacy default stream, which was then waited for.
    assert producer.streams == [1] and cuda.synchronized == [1]
    assert not t.is_cpu() and t.shape() == [2, 3]
    assert t.__dlpack_device__() == (2, 1)
    view, owner = _dlpack.take(t.to_dlpack())
    assert view.data == producer.values.ctypes.data  # no copy
    assert (view.device_type, view.device_id, view.shape, view.strides) == (2, 1, (2, 3), None)
    assert view.dtype == (2, 32, 1)
    del owner


def test_gpu_tensor_as_numpy_refused_with_tritons_text(cuda: FakeCuda) -> None:
    t = pb.Tensor.from_dlpack("g", FakeDeviceTensor(np.ones(3, dtype=np.float32)))
    with pytest.raises(pb.TritonModelException) as e:
        t.as_numpy()
    assert str(e.value) == "Tensor is stored in GPU and cannot be converted to NumPy."


def test_gpu_tensor_honours_the_consumers_stream(cuda: FakeCuda) -> None:
    t = pb.Tensor.from_dlpack("g", FakeDeviceTensor(np.ones(3, dtype=np.float32)))
    # No pending work on the tensor: any stream may use it at once (no further waits).
    for stream in (None, 1, 2, 0x7F00):
        view, owner = _dlpack.take(t.__dlpack__(stream=stream))
        assert (view.device_type, view.device_id) == (2, 1)
        del owner
    assert cuda.synchronized == [1]
    with pytest.raises(BufferError):
        t.__dlpack__(dl_device=(1, 0))


def test_gpu_tensor_copied_to_the_host_for_the_runtime(cuda: FakeCuda) -> None:
    values = np.arange(4, dtype=np.int64)
    t = pb.Tensor.from_dlpack("g", FakeDeviceTensor(values, device_id=0))
    host = t._host_array()
    np.testing.assert_array_equal(host, values)
    assert host.ctypes.data != values.ctypes.data


def test_gpu_bf16(cuda: FakeCuda) -> None:
    t = pb.Tensor.from_dlpack("g", FakeDeviceTensor(np.zeros(2, np.uint16), bf16=True))
    assert t.triton_dtype() == 14 and not t.is_cpu()
    assert _dlpack.take(t.to_dlpack())[0].dtype == (4, 16, 1)


def test_gpu_tensor_from_a_gpu_tensor_shares_it(cuda: FakeCuda) -> None:
    first = pb.Tensor.from_dlpack("a", FakeDeviceTensor(np.ones(2, dtype=np.float32)))
    second = pb.Tensor.from_dlpack("b", first)
    assert not second.is_cpu() and second.name() == "b"
    ptr = _dlpack.take(first.to_dlpack())[0].data
    assert _dlpack.take(second.to_dlpack())[0].data == ptr


def test_producer_released_when_the_last_holder_goes(cuda: FakeCuda) -> None:
    producer = FakeDeviceTensor(np.ones(8, dtype=np.float32))
    values = producer.values
    base = sys.getrefcount(values)
    t = pb.Tensor.from_dlpack("g", producer)
    held = sys.getrefcount(values) - base
    assert held >= 1
    capsule = t.to_dlpack()
    del t
    gc.collect()
    assert sys.getrefcount(values) - base == held  # the capsule keeps the tensor
    del capsule
    gc.collect()
    assert sys.getrefcount(values) - base == 0
