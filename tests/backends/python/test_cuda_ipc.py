"""protocol/cuda_ipc.py's bookkeeping, with a stand-in for the CUDA calls (this machine may
have no GPU; tests/gpu/test_gpu_bls.py runs the real thing): an export is held by its pool
until a FREE for its name comes back; a receiver maps each allocation once however many
tensors use it, keeps a bounded number of unused mappings open for the allocation's next
tensors, and frees each export; on the server an
IpcTensor is handed on to one worker only, and frees its export if nobody took it over."""

from __future__ import annotations

import gc
import os
from typing import Any

import numpy as np
import pytest

from modelyard.backends.python.protocol import cuda_ipc, tensor_pool
from triton_python_backend_utils import _cuda
from triton_python_backend_utils._memory import DeviceMemory

HANDLE = bytes(range(64))


class FakeIpc:
    """What cuda_ipc asks of CUDA, on host memory: 'device' addresses are numpy buffers."""

    def __init__(self) -> None:
        self.block = np.arange(64, dtype=np.float32)  # the exporter's allocation
        self.opened: list[bytes] = []
        self.closed: list[int] = []

    def ipc_export(self, address: int, device_id: int) -> tuple[bytes, int]:
        return HANDLE, address - self.block.ctypes.data

    def ipc_open(self, handle: bytes, device_id: int) -> int:
        self.opened.append(handle)
        return int(self.block.ctypes.data)

    def ipc_close(self, base: int, device_id: int) -> None:
        self.closed.append(base)

    def copy_to_host(self, src: int, dst: int, nbytes: int, device_id: int) -> None:
        import ctypes

        ctypes.memmove(dst, src, nbytes)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeIpc:
    ipc = FakeIpc()
    monkeypatch.setattr(_cuda, "ipc", lambda: ipc)
    monkeypatch.setattr(_cuda, "runtime", lambda: ipc)
    monkeypatch.setattr(cuda_ipc, "_MAPS", cuda_ipc._Maps())  # (no mapping of another test)
    return ipc


def _memory(ipc: FakeIpc, first: int, count: int) -> DeviceMemory:
    address = ipc.block.ctypes.data + 4 * first
    return DeviceMemory(address, 0, (count,), 11, ipc.block)  # FP32


def test_an_export_lives_until_its_receiver_frees_it(fake: FakeIpc) -> None:
    pool = tensor_pool.ShmPool(f"modelyard-test-{os.getpid()}-ipc", enabled=False)
    freed: list[str] = []
    ref = cuda_ipc.export(_memory(fake, 8, 4), pool.keep)
    ref2 = cuda_ipc.export(_memory(fake, 16, 2), pool.keep)
    assert ref is not None and ref2 is not None
    name = ref[2]
    assert tensor_pool.owner(name) == pool.prefix
    assert tensor_pool.segments([("x", "FP32", (4,), ref)]) == [name]
    a = cuda_ipc.imported(ref, (4,), "FP32", freed.append)
    b = cuda_ipc.imported(ref2, (2,), "FP32", freed.append)
    assert fake.opened == [HANDLE]  # one mapping for both tensors of the allocation
    np.testing.assert_array_equal(a.to_host(), [8, 9, 10, 11])
    np.testing.assert_array_equal(b.to_host(), [16, 17])
    del a
    gc.collect()
    assert freed == [name] and fake.closed == []  # b still uses the mapping
    del b
    gc.collect()
    assert freed == [name, ref2[2]]
    assert fake.closed == []  # unused, the mapping stays for the allocation's next tensor
    assert set(pool._kept) == {name, ref2[2]}
    pool.release(freed)
    assert not pool._kept
    again = cuda_ipc.export(_memory(fake, 1, 1), pool.keep)
    assert again is not None
    np.testing.assert_array_equal(cuda_ipc.host_copy(again, (1,), "FP32", freed.append), [1])
    assert fake.opened == [HANDLE]


def test_idle_mappings_beyond_the_bound_are_closed(
    fake: FakeIpc, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cuda_ipc._Maps, "IDLE", 0)
    pool = tensor_pool.ShmPool(f"modelyard-test-{os.getpid()}-ipc5", enabled=False)
    ref = cuda_ipc.export(_memory(fake, 0, 2), pool.keep)
    assert ref is not None
    cuda_ipc.host_copy(ref, (2,), "FP32", lambda _name: None)
    gc.collect()
    assert fake.closed == [fake.block.ctypes.data]


def test_a_host_copy_frees_the_export_at_once(fake: FakeIpc) -> None:
    pool = tensor_pool.ShmPool(f"modelyard-test-{os.getpid()}-ipc2", enabled=False)
    freed: list[str] = []
    ref = cuda_ipc.export(_memory(fake, 0, 3), pool.keep)
    assert ref is not None
    mapper = tensor_pool.ShmMapper(freed.append)
    _name, dt, arr = tensor_pool.unpack(("x", "FP32", (3,), ref), mapper)
    gc.collect()
    np.testing.assert_array_equal(arr, [0, 1, 2])
    assert dt == "FP32" and freed == [ref[2]]
    assert tensor_pool.gpu_of(("x", "FP32", (3,), ref)) == 0


def test_the_server_hands_an_export_on_once_or_frees_it(fake: FakeIpc) -> None:
    pool = tensor_pool.ShmPool(f"modelyard-test-{os.getpid()}-ipc3", enabled=False)
    freed: list[str] = []
    ref = cuda_ipc.export(_memory(fake, 4, 2), pool.keep)
    assert ref is not None
    passing = cuda_ipc.IpcTensor(ref, (2,), "FP32", freed.append)
    np.testing.assert_array_equal(passing.to_host(), [4, 5])  # (read here: still held)
    assert passing.hand_on() == ref and passing.hand_on() is None
    del passing
    gc.collect()
    assert freed == []  # the worker it was handed to frees it
    dropped = cuda_ipc.IpcTensor(ref, (2,), "FP32", freed.append)
    del dropped
    gc.collect()
    assert freed == [ref[2]]


def test_without_cuda_python_nothing_is_exported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cuda, "ipc", lambda: None)
    pool = tensor_pool.ShmPool(f"modelyard-test-{os.getpid()}-ipc4", enabled=False)
    memory: Any = DeviceMemory(0, 0, (1,), 11, None)
    assert cuda_ipc.export(memory, pool.keep) is None
    assert not pool._kept
