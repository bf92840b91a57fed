"""Client CUDA shared memory on a real GPU, through tritonclient over HTTP and gRPC in both
execution modes: regions made with ``tritonclient.utils.cuda_shared_memory`` registered,
listed and unregistered (one and all, one namespace with system regions); inputs read from
and outputs written into regions for a CPU model (the examples' add_sub), the GPU model
(gpu_add_sub) and BYTES (shm_identity), also on a gRPC stream; Triton 2.51's errors
(registration beyond the allocation, a handle that does not open, an output region too
small, an unknown region, offsets out of range), each followed by a request that works; and a
region unregistered while a request still writes to it. What Triton's
qa/L0_cuda_shared_memory checks, where it applies. Skipped without a GPU (tests/gpu/support.py
says what is missing); tests/core/test_cuda_regions.py covers the bookkeeping without one."""

from __future__ import annotations

import base64
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

from modelyard.devices import discover_gpus
from tests.conftest import Serving
from tests.gpu.support import GPU, MODELS
from tests.helpers import EXAMPLES, MODES, WAIT_S, client_for
from tests.helpers import MODELS as TEST_MODELS
from tests.serverproc import ServerProcess

pytestmark = [*GPU, pytest.mark.timeout(300)]

START_S = 240.0  # torch's CUDA start in gpu_add_sub's instance is seconds; a guard
CODES = {  # (HTTP, gRPC) status of each kind of error
    "invalid": ("400", "StatusCode.INVALID_ARGUMENT"),
    "exists": ("400", "StatusCode.ALREADY_EXISTS"),
    "not found": ("404", "StatusCode.NOT_FOUND"),
    "internal": ("500", "StatusCode.INTERNAL"),
}
A = np.arange(4, dtype=np.float32)
B = np.full(4, 2.0, dtype=np.float32)


def _cshm() -> Any:
    # (imported here: it needs cuda-python, and collection must work on machines without it)
    import tritonclient.utils.cuda_shared_memory as cshm

    return cshm


@pytest.fixture(scope="module", params=MODES)
def served(request: pytest.FixtureRequest, serving: Serving) -> Iterator[ServerProcess]:
    repo = serving.repo(["gpu_add_sub"], source=MODELS)
    for source in (EXAMPLES / "add_sub", TEST_MODELS / "shm_identity", TEST_MODELS / "grpc_slow"):
        (repo / source.name).symlink_to(source)
    with serving.server(repo, mode=request.param, timeout=START_S) as server:
        yield server


class Regions:
    """CUDA regions this test made (destroyed at its end), registered with a client."""

    def __init__(self) -> None:
        self.cshm = _cshm()
        self.made: dict[str, Any] = {}

    def make(self, name: str, byte_size: int, device_id: int = 0) -> Any:
        handle = self.cshm.create_shared_memory_region(name, byte_size, device_id)
        self.made[name] = handle
        return handle

    def register(
        self, client: Any, name: str, byte_size: int, device_id: int = 0, size: int | None = None
    ) -> Any:
        """Make a region of ``size`` bytes (default ``byte_size``) and register ``byte_size``
        of it as ``name``."""
        handle = self.make(name, size or byte_size, device_id)
        client.register_cuda_shared_memory(
            name, self.cshm.get_raw_handle(handle), device_id, byte_size
        )
        return handle

    def set(self, name: str, *arrays: np.ndarray[Any, Any]) -> None:
        """Write ``arrays`` one after the other from the start of the region."""
        self.cshm.set_shared_memory_region(self.made[name], list(arrays))

    def read(self, name: str, size: int, offset: int = 0, dtype: Any = np.float32) -> Any:
        """``size`` elements of ``dtype`` from byte ``offset`` of the region."""
        nbytes = offset + size * np.dtype(dtype).itemsize
        raw = self.cshm.get_contents_as_numpy(self.made[name], np.uint8, [nbytes])
        return raw[offset:].view(dtype)

    def destroy(self) -> None:
        for handle in self.made.values():
            self.cshm.destroy_shared_memory_region(handle)
        self.made.clear()


@pytest.fixture
def regions() -> Iterator[Regions]:
    made = Regions()
    yield made
    made.destroy()


@pytest.fixture(params=["http", "grpc"])
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def client(protocol: str, served: ServerProcess, regions: Regions) -> Iterator[Any]:
    """A client of ``served``; at the end the server lets go of every region before the
    regions themselves are freed (``regions`` is torn down after this)."""
    c = client_for(served, protocol)
    try:
        yield c
    finally:
        try:
            c.unregister_cuda_shared_memory()
            c.unregister_system_shared_memory()
        finally:
            c.close()


def _mod(protocol: str) -> Any:
    return httpclient if protocol == "http" else grpcclient


def _expect(
    protocol: str, kind: str, text: str, fn: Callable[[], object], exact: bool = True
) -> None:
    with pytest.raises(InferenceServerException) as e:
        fn()
    assert str(e.value.status()) == CODES[kind][0 if protocol == "http" else 1]
    if exact:
        assert e.value.message() == text
    else:
        assert text in e.value.message()


def _status(client: Any, name: str = "") -> dict[str, tuple[int, int]]:
    """The CUDA regions the server lists, as {name: (device_id, byte_size)}."""
    if isinstance(client, httpclient.InferenceServerClient):
        listed = client.get_cuda_shared_memory_status(name)
        assert all(set(r) == {"name", "device_id", "byte_size"} for r in listed)
        return {r["name"]: (r["device_id"], r["byte_size"]) for r in listed}
    regions = client.get_cuda_shared_memory_status(name).regions
    assert all(r.name == n for n, r in regions.items())
    return {n: (r.device_id, r.byte_size) for n, r in regions.items()}


def _add_sub(
    client: Any,
    model: str,
    ins: tuple[tuple[str, int, int] | np.ndarray[Any, Any], ...] = (("in0", 16, 0), ("in1", 16, 0)),
    outs: tuple[tuple[str, int, int], ...] = (("out0", 16, 0), ("out1", 16, 0)),
    **kwargs: Any,
) -> Any:
    """One add_sub request: each input from (region, byte size, offset) or an array; each
    output into (region, byte size, offset)."""
    grpc = isinstance(client, grpcclient.InferenceServerClient)
    mod = grpcclient if grpc else httpclient
    inputs = []
    for name, source in zip(("INPUT0", "INPUT1"), ins, strict=True):
        inp = mod.InferInput(name, [4], "FP32")
        if isinstance(source, np.ndarray):
            inp.set_data_from_numpy(source)
        else:
            inp.set_shared_memory(*source)
        inputs.append(inp)
    outputs = []
    for name, (region, size, offset) in zip(("OUTPUT0", "OUTPUT1"), outs, strict=True):
        out = mod.InferRequestedOutput(name)
        out.set_shared_memory(region, size, offset)
        outputs.append(out)
    if grpc:
        kwargs.setdefault("client_timeout", WAIT_S)
    return client.infer(model, inputs, outputs=outputs, **kwargs)


def _add_sub_regions(regions: Regions, client: Any, size: int = 64) -> None:
    """in0 = A, in1 = B; out0 and out1 zeroed; each ``size`` bytes, registered whole."""
    for name in ("in0", "in1", "out0", "out1"):
        regions.register(client, name, size)
    regions.set("in0", A)
    regions.set("in1", B)
    for name in ("out0", "out1"):
        regions.set(name, np.zeros(size // 4, np.float32))


def _served_on(client: Any, regions: Regions, model: str = "add_sub") -> None:
    """A request through the regions still works (after an error)."""
    regions.set("out0", np.zeros(4, np.float32))
    _add_sub(client, model)
    np.testing.assert_array_equal(regions.read("out0", 4), A + B)


# -- registration -------------------------------------------------------------------------------


def test_register_status_and_unregister(client: Any, protocol: str, regions: Regions) -> None:
    regions.register(client, "r_in", 64)
    regions.register(client, "r_out", 32, size=64)  # part of an allocation
    assert _status(client) == {"r_in": (0, 64), "r_out": (0, 32)}
    assert _status(client, "r_out") == {"r_out": (0, 32)}
    # a second registration of a name (Triton's test_reregister_after_register)
    handle = regions.cshm.get_raw_handle(regions.made["r_in"])
    _expect(protocol, "exists", "shared memory region 'r_in' already in manager",
            lambda: client.register_cuda_shared_memory("r_in", handle, 0, 64))  # fmt: skip
    assert len(_status(client)) == 2
    _expect(protocol, "not found", "Unable to find cuda shared memory region: 'nope'",
            lambda: client.get_cuda_shared_memory_status("nope"))  # fmt: skip
    client.unregister_cuda_shared_memory("r_in")
    client.unregister_cuda_shared_memory("never-registered")
    assert _status(client) == {"r_out": (0, 32)}
    regions.register(client, "r_more", 16)  # registering after unregistering
    assert set(_status(client)) == {"r_out", "r_more"}
    client.unregister_cuda_shared_memory()
    assert _status(client) == {}
    _expect(protocol, "not found", "Unable to find cuda shared memory region: 'r_out'",
            lambda: client.get_cuda_shared_memory_status("r_out"))  # fmt: skip


def test_one_namespace_with_system_regions(client: Any, protocol: str, regions: Regions) -> None:
    key = f"/modelyard_test_{uuid.uuid4().hex[:12]}"
    sys_handle = shm.create_shared_memory_region("sys", key, 64)
    try:
        client.register_system_shared_memory("sys", key, 64)
        regions.register(client, "gpu", 64)
        cuda_handle = regions.cshm.get_raw_handle(regions.made["gpu"])
        _expect(protocol, "exists", "shared memory region 'sys' already in manager",
                lambda: client.register_cuda_shared_memory("sys", cuda_handle, 0, 64))  # fmt: skip
        _expect(protocol, "exists", "shared memory region 'gpu' already in manager",
                lambda: client.register_system_shared_memory("gpu", key, 64))  # fmt: skip
        _expect(protocol, "not found",
                "The region named 'sys' is registered as system shared memory, not CUDA shared "
                "memory", lambda: client.get_cuda_shared_memory_status("sys"))  # fmt: skip
        _expect(protocol, "not found",
                "The region named 'gpu' is registered as CUDA shared memory, not system shared "
                "memory", lambda: client.get_system_shared_memory_status("gpu"))  # fmt: skip
        client.unregister_system_shared_memory()  # leaves the CUDA region
        assert _status(client) == {"gpu": (0, 64)}
        client.register_system_shared_memory("sys", key, 64)
        client.unregister_cuda_shared_memory()  # leaves the system region
        assert _status(client) == {}
        listed = client.get_system_shared_memory_status()
        names = [r["name"] for r in listed] if protocol == "http" else list(listed.regions)
        assert names == ["sys"]
    finally:
        client.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(sys_handle)


def test_registration_errors_and_the_server_serves_on(
    client: Any, protocol: str, regions: Regions
) -> None:
    _add_sub_regions(regions, client)
    big = regions.make("big", 64)
    raw = regions.cshm.get_raw_handle(big)
    # beyond the allocation (Triton's test_register_out_of_bound)
    _expect(protocol, "invalid", "failed to register shared memory region 'big': invalid args",
            lambda: client.register_cuda_shared_memory("big", raw, 0, 65))  # fmt: skip
    _served_on(client, regions)
    # a device the server does not have, and a handle no process exported
    gpus = len(discover_gpus().devices)
    for handle, device in ((raw, gpus), (base64.b64encode(b"\0" * 64), 0)):
        _expect(protocol, "invalid", "failed to register shared memory region: invalid args",
                lambda: client.register_cuda_shared_memory("big", handle, device, 64))  # noqa: B023  # fmt: skip
        _served_on(client, regions)
    assert "big" not in _status(client)
    client.register_cuda_shared_memory("big", raw, 0, 64)  # the name was not taken by a failure
    assert _status(client)["big"] == (0, 64)


# -- inference ----------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["add_sub", "gpu_add_sub"])
def test_inputs_and_outputs_in_cuda_regions(
    client: Any, protocol: str, regions: Regions, model: str
) -> None:
    _add_sub_regions(regions, client)
    result = _add_sub(client, model)
    np.testing.assert_array_equal(regions.read("out0", 4), A + B)
    np.testing.assert_array_equal(regions.read("out1", 4), A - B)
    if protocol == "http":
        entries = result.get_response()["outputs"]
        assert {e["name"]: e for e in entries} == {
            n: {"name": n, "datatype": "FP32", "shape": [4]} for n in ("OUTPUT0", "OUTPUT1")
        }
    else:
        assert [list(o.shape) for o in result.get_response().outputs] == [[4], [4]]
    # offsets into the regions, new values each time (no stale copy is reused)
    for i in range(3):
        a, b = A * (i + 3), B + i
        regions.set("in0", np.zeros(4, np.float32), a)  # a at byte 16
        regions.set("in1", np.zeros(8, np.float32), b)  # b at byte 32
        _add_sub(client, model, ins=(("in0", 16, 16), ("in1", 16, 32)),
                 outs=(("out0", 16, 48), ("out1", 16, 8)))  # fmt: skip
        np.testing.assert_array_equal(regions.read("out0", 4, offset=48), a + b)
        np.testing.assert_array_equal(regions.read("out1", 4, offset=8), a - b)
    # one input in a region, the other sent (Triton's test_mixed_raw_shm)
    regions.set("out0", np.zeros(16, np.float32))
    _add_sub(client, model, ins=(("in0", 16, 16), B * 5))
    np.testing.assert_array_equal(regions.read("out0", 4), A * 5 + B * 5)
    # the unregistered output region's neighbours still work (Triton's
    # test_unregister_after_inference)
    client.unregister_cuda_shared_memory("out1")
    assert set(_status(client)) == {"in0", "in1", "out0"}


def test_bytes_in_cuda_regions(client: Any, protocol: str, regions: Regions) -> None:
    mod = _mod(protocol)
    text = np.array([b"cuda", b"", b"shared memory"], dtype=np.object_)
    serialized = serialize_byte_tensor(text)
    nbytes = len(serialized.item())
    regions.register(client, "t_in", 64)
    regions.register(client, "t_out", 64)
    regions.register(client, "f_out", 64)
    regions.set("t_in", np.arange(4, dtype=np.float32), serialized)  # text at byte 16
    inputs = [mod.InferInput("INPUT0", [4], "FP32"), mod.InferInput("TEXT", [3], "BYTES")]
    inputs[0].set_shared_memory("t_in", 16)
    inputs[1].set_shared_memory("t_in", nbytes, 16)
    outputs = [mod.InferRequestedOutput("TEXT_OUT"), mod.InferRequestedOutput("OUTPUT0")]
    outputs[0].set_shared_memory("t_out", 64)
    outputs[1].set_shared_memory("f_out", 16)
    client.infer("shm_identity", inputs, outputs=outputs)
    got = regions.cshm.get_contents_as_numpy(regions.made["t_out"], np.object_, [3])
    assert got.tolist() == text.tolist()
    np.testing.assert_array_equal(regions.read("f_out", 4), np.arange(4, dtype=np.float32))


def test_inference_errors_and_the_server_serves_on(
    client: Any, protocol: str, regions: Regions
) -> None:
    _add_sub_regions(regions, client)
    http = protocol == "http"
    for model in ("add_sub", "gpu_add_sub"):
        _expect(protocol, "internal",
                "shared memory size specified with the request for output 'OUTPUT0' (8 bytes) "
                "should be at least 16 bytes to hold the results",
                lambda: _add_sub(client, model, outs=(("out0", 8, 0), ("out1", 16, 0))))  # noqa: B023  # fmt: skip
        _served_on(client, regions, model)
    cases: list[tuple[str, str, Callable[[], object]]] = [
        ("not found", "Unable to find shared memory region: 'nope'",
         lambda: _add_sub(client, "add_sub", ins=(("nope", 16, 0), ("in1", 16, 0)))),
        ("not found", "Unable to find shared memory region: 'nope'",
         lambda: _add_sub(client, "add_sub", outs=(("out0", 16, 0), ("nope", 16, 0)))),
        # Triton's test_infer_offset_out_of_bound (HTTP: -32 as an unsigned 64-bit offset)
        ("invalid", "Invalid offset for shared memory region: 'out0'",
         lambda: _add_sub(client, "add_sub",
                          outs=(("out0", 16, 2**64 - 32 if http else 64), ("out1", 16, 0)))),
        # Triton's test_infer_byte_size_out_of_bound
        ("invalid", "Invalid offset + byte size for shared memory region: 'out0'",
         lambda: _add_sub(client, "add_sub", outs=(("out0", 64, 60), ("out1", 16, 0)))),
        ("invalid", "Invalid offset + byte size for shared memory region: 'in0'",
         lambda: _add_sub(client, "add_sub", ins=(("in0", 16, 56), ("in1", 16, 0)))),
    ]  # fmt: skip
    for kind, text, call in cases:
        _expect(protocol, kind, text, call)
        _served_on(client, regions)
    # an input region larger than the input (Triton's test_too_big_shm)
    _expect(protocol, "invalid",
            "input byte size mismatch for input 'INPUT1' for model 'add_sub'. Expected 16, got 64",
            lambda: _add_sub(client, "add_sub", ins=(("in0", 16, 0), ("in1", 64, 0))),
            exact=False)  # fmt: skip
    _served_on(client, regions)


def test_grpc_stream_writes_outputs_to_cuda_regions(
    served: ServerProcess, regions: Regions
) -> None:
    client = grpcclient.InferenceServerClient(served.grpc_url)
    results: queue.Queue[Any] = queue.Queue()
    try:
        _add_sub_regions(regions, client)
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        for osize in (16, 8):  # the second output does not fit: an error on the open stream
            inputs = [grpcclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
            inputs[0].set_shared_memory("in0", 16)
            inputs[1].set_shared_memory("in1", 16)
            outputs = [grpcclient.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
            outputs[0].set_shared_memory("out0", osize)
            outputs[1].set_shared_memory("out1", 16)
            client.async_stream_infer("gpu_add_sub", inputs, outputs=outputs)
            result, error = results.get(timeout=WAIT_S)
            if osize == 16:
                assert error is None and result is not None
                np.testing.assert_array_equal(regions.read("out0", 4), A + B)
                np.testing.assert_array_equal(regions.read("out1", 4), A - B)
            else:
                assert error is not None and "should be at least 16 bytes" in str(error)
        client.stop_stream()
        _served_on(client, regions, "gpu_add_sub")
    finally:
        client.unregister_cuda_shared_memory()
        client.close()


def test_a_region_unregistered_during_a_request_is_written_then_closed(
    client: Any, protocol: str, regions: Regions, served: ServerProcess
) -> None:
    """Triton 2.51 refuses to unregister a region in use; modelyard (as Triton's later
    releases) unregisters it at once and closes its handle when the request is done."""
    mod = _mod(protocol)
    regions.register(client, "slow_in", 16)
    regions.register(client, "slow_out", 16)
    regions.set("slow_in", A)
    regions.set("slow_out", np.zeros(4, np.float32))
    done: queue.Queue[Any] = queue.Queue()

    def slow_request() -> None:
        other = client_for(served, protocol)  # (its own connection, on this thread)
        try:
            inp = mod.InferInput("IN", [4], "FP32")
            inp.set_shared_memory("slow_in", 16)
            out = mod.InferRequestedOutput("OUT")
            out.set_shared_memory("slow_out", 16)
            done.put(other.infer("grpc_slow", [inp], outputs=[out],
                                 parameters={"delay_ms": 3000}))  # fmt: skip
        except Exception as e:
            done.put(e)
        finally:
            other.close()

    thread = threading.Thread(target=slow_request)
    thread.start()
    time.sleep(1.0)  # the request is in the model by now
    client.unregister_cuda_shared_memory()
    assert _status(client) == {}
    thread.join(WAIT_S)
    outcome = done.get(timeout=1)
    assert not isinstance(outcome, Exception), outcome
    np.testing.assert_array_equal(regions.read("slow_out", 4), A)
    # the names are free again, and the regions can be registered anew
    client.register_cuda_shared_memory(
        "slow_out", regions.cshm.get_raw_handle(regions.made["slow_out"]), 0, 16
    )
    assert _status(client) == {"slow_out": (0, 16)}


def test_a_region_on_another_gpu(client: Any, regions: Regions) -> None:
    devices = discover_gpus().devices
    if len(devices) < 2:
        pytest.skip("one GPU: no other device to place a region on")
    last = devices[-1].index
    for name in ("in0", "in1", "out0", "out1"):
        regions.register(client, name, 16, device_id=last)
    regions.set("in0", A)
    regions.set("in1", B)
    assert _status(client)["out0"] == (last, 16)
    _add_sub(client, "gpu_add_sub")  # the model runs on GPU 0's instance
    np.testing.assert_array_equal(regions.read("out0", 4), A + B)
