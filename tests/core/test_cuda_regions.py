"""CUDA shared-memory regions without a GPU: the handle's decoding, and the bookkeeping behind
``cuda_regions.CudaRuntime`` (one namespace with system regions, Triton's texts, copies in and
out of a region, a region held open by a request after it is unregistered) with a stand-in
runtime whose "device memory" is host memory; then the real cuda-python runtime on this
machine, and that a machine without a GPU never imports CUDA."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.utils.shared_memory as shm

from modelyard.errors import ErrorCode, ModelyardError
from modelyard.serving.cuda_regions import BAD_HANDLE, CudaFailure, decode_handle
from modelyard.serving.shm_regions import SharedMemoryManager
from modelyard.types import InferRequest, InferResponse, RequestedOutput, Tensor

OPEN_FAILED = "failed to register shared memory region: invalid args"
UNSUPPORTED = "failed to register CUDA shared memory region: '{}', GPUs not supported"


class StandIn:
    """A CUDA runtime whose device memory is host memory: ``export`` allocates and returns an
    IPC handle; every copy must fall inside memory that is open, so a copy through a closed
    region fails the test instead of passing silently."""

    def __init__(self, devices: int = 2) -> None:
        self.devices = devices
        self.exported: dict[bytes, np.ndarray[Any, Any]] = {}
        self.opened: dict[int, np.ndarray[Any, Any]] = {}
        self.closed: list[int] = []
        self.fail_open: str | None = None
        self.fail_copy = False

    def export(self, nbytes: int) -> tuple[bytes, np.ndarray[Any, Any]]:
        handle = uuid.uuid4().bytes * 4  # 64 bytes
        self.exported[handle] = memory = np.zeros(nbytes, np.uint8)
        return handle, memory

    def device_count(self) -> int:
        return self.devices

    def open(self, handle: bytes, device_id: int) -> int:
        if self.fail_open:
            raise CudaFailure("cudaIpcOpenMemHandle", self.fail_open)
        memory = self.exported.get(handle)
        if memory is None:
            raise CudaFailure("cudaIpcOpenMemHandle", "cudaErrorInvalidResourceHandle")
        ptr = int(memory.ctypes.data)
        self.opened[ptr] = memory
        return ptr

    def span(self, ptr: int, device_id: int) -> int:
        return self.opened[ptr].nbytes

    def _inside(self, ptr: int, nbytes: int) -> None:
        assert any(p <= ptr and ptr + nbytes <= p + m.nbytes for p, m in self.opened.items())

    def to_host(self, dst: int, src: int, nbytes: int, device_id: int) -> None:
        if self.fail_copy:
            raise CudaFailure("cudaMemcpyAsync", "cudaErrorIllegalAddress")
        self._inside(src, nbytes)
        ctypes.memmove(dst, src, nbytes)

    def to_device(self, dst: int, src: int, nbytes: int, device_id: int) -> None:
        self._inside(dst, nbytes)
        ctypes.memmove(dst, src, nbytes)

    def close(self, ptr: int, device_id: int) -> None:
        del self.opened[ptr]
        self.closed.append(ptr)


@pytest.fixture
def cuda() -> StandIn:
    return StandIn()


@pytest.fixture
def manager(cuda: StandIn) -> Iterator[SharedMemoryManager]:
    m = SharedMemoryManager(cuda=lambda: cuda)
    yield m
    m.close()


def _error(fn: Any) -> tuple[ErrorCode, str]:
    with pytest.raises(ModelyardError) as e:
        fn()
    return e.value.code, e.value.message


def _shm(name: str, offset: int = 0, size: int = 16) -> dict[str, Any]:
    return {
        "shared_memory_region": name,
        "shared_memory_offset": offset,
        "shared_memory_byte_size": size,
    }


# -- the handle ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("AAAA", 3),
        ("A" * 86 + "==", 64),  # what tritonclient sends for a 64-byte handle
        ("A" * 86, 64),  # padding is optional
        ("A" * 43 + "\n*-" + "A" * 43 + "==", 64),  # characters outside the alphabet skipped
        ("A" * 87, 65),
        ("A" * 85, 63),  # a last lone character adds nothing
        ("", 0),
    ],
)
def test_handles_decode_as_tritons_base64_does(text: str, size: int) -> None:
    assert len(decode_handle(text)) == size


def test_the_bytes_survive_decoding() -> None:
    import base64

    raw = bytes(range(64))
    assert decode_handle(base64.b64encode(raw).decode()) == raw
    assert BAD_HANDLE == "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"


# -- registration -------------------------------------------------------------------------------


def test_register_status_and_unregister(manager: SharedMemoryManager, cuda: StandIn) -> None:
    h1, _ = cuda.export(64)
    h2, _ = cuda.export(128)
    manager.cuda_register("b", h1, 1, 64)
    manager.cuda_register("a", h2, 0, 100)  # less than the allocation is fine
    assert manager.cuda_status() == [
        {"name": "a", "device_id": 0, "byte_size": 100},
        {"name": "b", "device_id": 1, "byte_size": 64},
    ]
    assert manager.cuda_status("b") == [{"name": "b", "device_id": 1, "byte_size": 64}]
    assert manager.status() == []
    assert _error(lambda: manager.cuda_status("nope")) == (
        ErrorCode.NOT_FOUND,
        "Unable to find cuda shared memory region: 'nope'",
    )
    assert _error(lambda: manager.cuda_register("a", h1, 0, 64)) == (
        ErrorCode.ALREADY_EXISTS,
        "shared memory region 'a' already in manager",
    )
    manager.cuda_unregister("a")
    manager.cuda_unregister("never-registered")
    assert [r["name"] for r in manager.cuda_status()] == ["b"]
    assert len(cuda.closed) == 1
    manager.cuda_unregister()
    assert manager.cuda_status() == [] and cuda.opened == {} and len(cuda.closed) == 2


def test_system_and_cuda_regions_share_one_namespace(
    manager: SharedMemoryManager, cuda: StandIn
) -> None:
    key = f"/modelyard_test_{uuid.uuid4().hex[:12]}"
    handle = shm.create_shared_memory_region("sys", key, 64)
    try:
        manager.register("sys", key, 0, 64)
        h, _ = cuda.export(64)
        manager.cuda_register("gpu", h, 0, 64)
        assert _error(lambda: manager.cuda_register("sys", h, 0, 64)) == (
            ErrorCode.ALREADY_EXISTS,
            "shared memory region 'sys' already in manager",
        )
        assert _error(lambda: manager.register("gpu", key, 0, 64)) == (
            ErrorCode.ALREADY_EXISTS,
            "shared memory region 'gpu' already in manager",
        )
        assert _error(lambda: manager.cuda_status("sys")) == (
            ErrorCode.NOT_FOUND,
            "The region named 'sys' is registered as system shared memory, not CUDA shared memory",
        )
        assert _error(lambda: manager.status("gpu")) == (
            ErrorCode.NOT_FOUND,
            "The region named 'gpu' is registered as CUDA shared memory, not system shared memory",
        )
        # Each kind's unregister leaves the other kind's regions alone, by name or all.
        manager.unregister("gpu")
        manager.cuda_unregister("sys")
        manager.unregister()
        assert [r["name"] for r in manager.cuda_status()] == ["gpu"]
        manager.register("sys", key, 0, 64)
        manager.cuda_unregister()
        assert [r["name"] for r in manager.status()] == ["sys"]
        assert manager.cuda_status() == []
    finally:
        manager.close()
        shm.destroy_shared_memory_region(handle)


def test_handles_that_do_not_open_get_tritons_texts(
    manager: SharedMemoryManager, cuda: StandIn
) -> None:
    h, _ = cuda.export(64)
    cases = [
        (lambda: manager.cuda_register("c", h[:63], 0, 64), OPEN_FAILED),  # (gRPC sends bytes)
        (lambda: manager.cuda_register("c", h, 2, 64), OPEN_FAILED),  # no device 2
        (lambda: manager.cuda_register("c", h, -1, 64), OPEN_FAILED),
        (lambda: manager.cuda_register("c", b"\1" * 64, 0, 64), OPEN_FAILED),  # not exported
        (
            lambda: manager.cuda_register("c", h, 0, 65),  # beyond the allocation
            "failed to register shared memory region 'c': invalid args",
        ),
    ]
    for call, text in cases:
        assert _error(call) == (ErrorCode.INVALID_ARG, text)
    assert manager.cuda_status() == []
    assert cuda.opened == {} and len(cuda.closed) == 1  # the one opened, then too small


def test_a_machine_that_cannot_do_cuda_ipc_answers_gpus_not_supported(
    manager: SharedMemoryManager, cuda: StandIn
) -> None:
    h, _ = cuda.export(64)
    cuda.fail_open = "cudaErrorNotSupported"  # (WSL has no CUDA IPC)
    assert _error(lambda: manager.cuda_register("c", h, 0, 64)) == (
        ErrorCode.INVALID_ARG,
        UNSUPPORTED.format("c"),
    )
    cuda.fail_open = "cudaErrorInvalidValue"  # a bad handle instead
    assert _error(lambda: manager.cuda_register("c", h, 0, 64)) == (
        ErrorCode.INVALID_ARG,
        OPEN_FAILED,
    )


def test_without_a_runtime_the_name_is_checked_then_gpus_not_supported() -> None:
    loads: list[int] = []

    def load() -> None:
        loads.append(1)

    key = f"/modelyard_test_{uuid.uuid4().hex[:12]}"
    handle = shm.create_shared_memory_region("sys", key, 64)
    manager = SharedMemoryManager(cuda=load)
    try:
        manager.register("sys", key, 0, 64)
        assert _error(lambda: manager.cuda_register("sys", b"\0" * 64, 0, 64)) == (
            ErrorCode.ALREADY_EXISTS,
            "shared memory region 'sys' already in manager",
        )
        assert loads == []  # the runtime is looked for only when a region could be opened
        for name, handle_bytes in (("c", b"\0" * 64), ("d", b"\0" * 3)):
            assert _error(lambda: manager.cuda_register(name, handle_bytes, 0, 64)) == (  # noqa: B023
                ErrorCode.INVALID_ARG,
                UNSUPPORTED.format(name),
            )
        assert loads == [1]
        manager.cuda_unregister()
        assert manager.cuda_status() == []
    finally:
        manager.close()
        shm.destroy_shared_memory_region(handle)


def test_disabled_client_shm_refuses_cuda_too(cuda: StandIn) -> None:
    manager = SharedMemoryManager(enabled=False, cuda=lambda: cuda)
    h, _ = cuda.export(64)
    for call in (lambda: manager.cuda_register("c", h, 0, 64), lambda: manager.cuda_unregister()):
        code, text = _error(call)
        assert code == ErrorCode.UNSUPPORTED and "--allow-client-shm=true" in text
    assert manager.cuda_status() == []


# -- inference ----------------------------------------------------------------------------------


def test_inputs_are_copied_out_and_outputs_copied_in(
    manager: SharedMemoryManager, cuda: StandIn
) -> None:
    h_in, device_in = cuda.export(64)
    h_out, device_out = cuda.export(64)
    manager.cuda_register("in", h_in, 0, 64)
    manager.cuda_register("out", h_out, 1, 64)
    device_in[8:24] = np.arange(4, dtype=np.float32).view(np.uint8)
    request = InferRequest(
        "m",
        [Tensor("INPUT0", "FP32", (4,), parameters=_shm("in", 8, 16))],
        outputs=[RequestedOutput("OUTPUT0", _shm("out", 16, 32))],
    )
    targets = manager.bind(request)
    raw = request.inputs[0].raw
    assert raw is not None and request.inputs[0].data is None
    data = np.frombuffer(raw, np.float32)
    assert data.tolist() == [0, 1, 2, 3]
    device_in[8:24] = 0  # a copy, not a view of the region
    assert data.tolist() == [0, 1, 2, 3]
    # A Python worker maps neither: nothing of a CUDA region is passed by reference.
    assert request.shm_inputs is None and request.shm_outputs is None
    assert targets is not None
    response = InferResponse("m", "1", outputs=[Tensor.from_numpy("OUTPUT0", data * 10)])
    manager.write_outputs(response, targets)
    out = response.outputs[0]
    assert out.data is None and out.raw is None
    assert out.parameters == {"shared_memory_region": "out", "shared_memory_byte_size": 16}
    assert device_out[16:32].view(np.float32).tolist() == [0, 10, 20, 30]
    assert not device_out[:16].any() and not device_out[32:].any()


def test_bytes_and_a_system_region_in_one_request(
    manager: SharedMemoryManager, cuda: StandIn
) -> None:
    from modelyard import tensor_bytes

    key = f"/modelyard_test_{uuid.uuid4().hex[:12]}"
    handle = shm.create_shared_memory_region("sys", key, 64)
    try:
        manager.register("sys", key, 0, 64)
        h, device = cuda.export(64)
        manager.cuda_register("gpu", h, 0, 64)
        text = np.array([b"a", b"cuda", b""], dtype=np.object_)
        payload = np.frombuffer(tensor_bytes.serialize_bytes(text), np.uint8)
        device[: payload.size] = payload
        shm.set_shared_memory_region(handle, [np.ones(2, np.float32)])
        request = InferRequest(
            "m",
            [
                Tensor("TEXT", "BYTES", (3,), parameters=_shm("gpu", 0, payload.size)),
                Tensor("INPUT0", "FP32", (2,), parameters=_shm("sys", 0, 8)),
            ],
            outputs=[
                RequestedOutput("TEXT_OUT", _shm("gpu", 32, 32)),
                RequestedOutput("OUTPUT0", _shm("sys", 32, 8)),
            ],
        )
        targets = manager.bind(request)
        assert targets is not None and set(targets) == {"TEXT_OUT", "OUTPUT0"}
        raw = request.inputs[0].raw
        assert raw is not None
        assert tensor_bytes.deserialize_bytes(raw) == text.tolist()
        # only the system region goes to a Python worker by reference
        assert request.shm_inputs is not None and set(request.shm_inputs) == {"INPUT0"}
        assert request.shm_outputs is not None and set(request.shm_outputs) == {"OUTPUT0"}
        response = InferResponse(
            "m",
            "1",
            outputs=[
                Tensor.from_numpy("TEXT_OUT", text[::-1].copy()),
                Tensor.from_numpy("OUTPUT0", np.full(2, 5, np.float32)),
            ],
        )
        manager.write_outputs(response, targets)
        got = tensor_bytes.deserialize_bytes(device[32 : 32 + payload.size].tobytes())
        assert got == text[::-1].tolist()
        assert shm.get_contents_as_numpy(handle, np.float32, [2], offset=32).tolist() == [5, 5]
        del raw
        request.inputs[1].raw = None
        request.shm_inputs = None
    finally:
        manager.close()
        shm.destroy_shared_memory_region(handle)


def test_slices_use_the_system_regions_checks(manager: SharedMemoryManager, cuda: StandIn) -> None:
    h, _ = cuda.export(64)
    manager.cuda_register("r", h, 0, 64)
    cases = [
        ("nope", 0, 4, ErrorCode.NOT_FOUND, "Unable to find shared memory region: 'nope'"),
        ("r", 64, 4, ErrorCode.INVALID_ARG, "Invalid offset for shared memory region: 'r'"),
        ("r", 2**64 - 32, 4, ErrorCode.INVALID_ARG, "Invalid offset for shared memory region: 'r'"),
        ("r", 60, 8, ErrorCode.INVALID_ARG,
         "Invalid offset + byte size for shared memory region: 'r'"),
    ]  # fmt: skip
    for name, offset, size, code, text in cases:
        for as_output in (False, True):
            params = _shm(name, offset, size)
            request = InferRequest(
                "m",
                [] if as_output else [Tensor("INPUT0", "FP32", (1,), parameters=params)],
                outputs=[RequestedOutput("OUTPUT0", params)] if as_output else None,
            )
            assert _error(lambda: manager.bind(request)) == (code, text)  # noqa: B023
    # nothing failed halfway holds the region: unregistering closes it at once
    manager.cuda_unregister("r")
    assert cuda.opened == {}


def test_an_output_still_on_a_gpu_is_written_from_its_host_copy(
    manager: SharedMemoryManager, cuda: StandIn
) -> None:
    from modelyard.types import StagedOnHost

    h, device = cuda.export(16)
    manager.cuda_register("out", h, 0, 16)
    request = InferRequest("m", [], outputs=[RequestedOutput("OUTPUT0", _shm("out", 0, 16))])
    targets = manager.bind(request)
    assert targets is not None
    on_gpu = Tensor("OUTPUT0", "FP32", (4,), device=StagedOnHost(0, np.full(4, 3, np.float32)))
    response = InferResponse("m", "1", outputs=[on_gpu])
    manager.write_outputs(response, targets)
    assert device.view(np.float32).tolist() == [3, 3, 3, 3]


def test_an_output_larger_than_its_slice_fails_the_request(
    manager: SharedMemoryManager, cuda: StandIn
) -> None:
    h, device = cuda.export(64)
    manager.cuda_register("out", h, 0, 64)
    request = InferRequest("m", [], outputs=[RequestedOutput("OUTPUT0", _shm("out", 0, 8))])
    targets = manager.bind(request)
    assert targets is not None
    response = InferResponse("m", "1", outputs=[Tensor.from_numpy("OUTPUT0", np.ones(4, "f4"))])
    assert _error(lambda: manager.write_outputs(response, targets)) == (
        ErrorCode.INTERNAL,
        "shared memory size specified with the request for output 'OUTPUT0' (8 bytes) "
        "should be at least 16 bytes to hold the results",
    )
    assert not device.any()


def test_a_failed_copy_is_an_internal_error(manager: SharedMemoryManager, cuda: StandIn) -> None:
    h, _ = cuda.export(64)
    manager.cuda_register("in", h, 0, 64)
    cuda.fail_copy = True
    request = InferRequest("m", [Tensor("INPUT0", "FP32", (4,), parameters=_shm("in", 0, 16))])
    assert _error(lambda: manager.bind(request)) == (
        ErrorCode.INTERNAL,
        "failed to copy CUDA shared memory region 'in': cudaMemcpyAsync: cudaErrorIllegalAddress",
    )
    manager.cuda_unregister("in")
    assert cuda.opened == {}  # the failed copy let go of the region


def test_a_region_in_use_is_closed_after_its_requests(
    manager: SharedMemoryManager, cuda: StandIn
) -> None:
    h_in, device_in = cuda.export(16)
    h_out, device_out = cuda.export(16)
    manager.cuda_register("in", h_in, 0, 16)
    manager.cuda_register("out", h_out, 0, 16)
    device_in[:] = 7
    request = InferRequest(
        "m",
        [Tensor("INPUT0", "UINT8", (16,), parameters=_shm("in", 0, 16))],
        outputs=[RequestedOutput("OUTPUT0", _shm("out", 0, 16))],
    )
    targets = manager.bind(request)
    assert targets is not None
    manager.cuda_unregister()  # while the request runs
    assert manager.cuda_status() == []
    # the input was copied when bound: that region is closed; the output's waits
    assert list(cuda.opened) == [int(device_out.ctypes.data)]
    response = InferResponse("m", "1", outputs=[Tensor.from_numpy("OUTPUT0", device_in * 2)])
    manager.write_outputs(response, targets)
    assert device_out.tolist() == [14] * 16
    assert list(cuda.opened) == [int(device_out.ctypes.data)]  # (a decoupled model may send more)
    del targets
    assert cuda.opened == {}
    # the name is free again at once
    manager.cuda_register("out", h_out, 0, 16)
    assert manager.cuda_status() == [{"name": "out", "device_id": 0, "byte_size": 16}]


def test_shutdown_closes_every_region(cuda: StandIn) -> None:
    manager = SharedMemoryManager(cuda=lambda: cuda)
    for name in ("a", "b"):
        manager.cuda_register(name, cuda.export(8)[0], 0, 8)
    request = InferRequest("m", [], outputs=[RequestedOutput("OUT", _shm("a", 0, 8))])
    targets = manager.bind(request)
    manager.close()
    assert len(cuda.opened) == 1  # "a" waits for its request
    del targets
    assert cuda.opened == {} and len(cuda.closed) == 2


# -- the real runtime, on this machine ----------------------------------------------------------


def test_cuda_python_without_a_usable_gpu_answers_gpus_not_supported() -> None:
    """cuda-python's runtime where the driver or device is missing: its failures read as a
    machine without GPUs. (On a machine whose GPU works this is tests/gpu's business.)"""
    from modelyard.devices import cuda_bindings, discover_gpus
    from modelyard.serving.cuda_runtime import CudaPython

    if discover_gpus().devices:
        pytest.skip("this machine has a GPU (tests/gpu/test_cuda_shared_memory.py)")
    rt, driver = cuda_bindings("runtime"), cuda_bindings("driver")
    if rt is None or driver is None:
        pytest.skip("cuda-python is not installed")
    manager = SharedMemoryManager(cuda=lambda: CudaPython(rt, driver, 1))
    assert _error(lambda: manager.cuda_register("c", b"\1" * 64, 0, 64)) == (
        ErrorCode.INVALID_ARG,
        UNSUPPORTED.format("c"),
    )


def test_no_gpu_no_cuda_import() -> None:
    """Without the NVIDIA driver a server imports no CUDA module, at start or when a client
    registers a CUDA region."""
    if sys.platform != "linux" or any(
        os.path.exists(n) for n in ("/dev/nvidiactl", "/dev/dxg", "/dev/nvmap")
    ):
        pytest.skip("this machine has an NVIDIA driver node")
    code = (
        "import sys\n"
        "import modelyard.core.api\n"
        "from modelyard.serving.shm_regions import SharedMemoryManager\n"
        "m = SharedMemoryManager()\n"
        "try:\n"
        "    m.cuda_register('c', b'\\0' * 64, 0, 64)\n"
        "except Exception as e:\n"
        "    print(e)\n"
        "print(sorted(n for n in sys.modules if n == 'cuda' or n.startswith('cuda.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout.splitlines()
    assert out == [UNSUPPORTED.format("c"), "[]"]
