"""System shared-memory extension: key rules and region checks (unit), and inputs/outputs in
client regions over HTTP and gRPC through the real server and tritonclient's shm helpers."""

from __future__ import annotations

import base64
import os
import queue
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import (
    InferenceServerException,
    serialize_byte_tensor,
    serialized_byte_size,
)

from modelyard.errors import ErrorCode, ModelyardError
from modelyard.serving import shm_regions as core_shm
from modelyard.serving.shm_regions import SharedMemoryManager, shm_path
from modelyard.types import InferRequest, InferResponse, RequestedOutput, Tensor
from tests.conftest import Serving
from tests.helpers import client_for
from tests.reference import reference_available, start_reference
from tests.serverproc import ServerProcess

MODEL = "shm_identity"
pytestmark = pytest.mark.timeout(120)


def _key() -> str:
    return f"/modelyard_test_{uuid.uuid4().hex[:12]}"


# -- unit: keys ---------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["/", "", "//", "/a/b", "/..", "/.", "a\0b", "/" + "x" * 256])
def test_invalid_keys_are_refused(key: str) -> None:
    with pytest.raises(ModelyardError) as e:
        shm_path("r", key)
    assert e.value.code == ErrorCode.INVALID_ARG
    assert e.value.message == f"cannot register shared memory region 'r' - invalid shm key '{key}'"


@pytest.mark.parametrize("key", ["/modelyard-123-0-s-4", "triton_python_backend_shm_region_1"])
def test_server_owned_segments_are_refused(key: str) -> None:
    with pytest.raises(ModelyardError, match="contains the reserved prefix"):
        shm_path("r", key)


def test_keys_map_under_dev_shm() -> None:
    assert shm_path("r", "/in0") == "/dev/shm/in0"
    assert shm_path("r", "in0") == "/dev/shm/in0"  # glibc's shm_open strips leading slashes


def test_symlinks_and_non_files_are_not_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(core_shm, "SHM_ROOT", str(tmp_path))
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"x" * 64)
    (tmp_path / "link").symlink_to(secret)
    (tmp_path / "dir").mkdir()
    manager = SharedMemoryManager()
    with pytest.raises(ModelyardError, match="Unable to open shared memory region: '/link'"):
        manager.register("r", "/link", 0, 16)
    with pytest.raises(ModelyardError) as e:
        manager.register("r", "/dir", 0, 16)
    assert e.value.code == ErrorCode.INTERNAL
    assert manager.status() == []


def test_disabled_manager_refuses_registration() -> None:
    manager = SharedMemoryManager(enabled=False)
    calls: list[Callable[[], object]] = [
        lambda: manager.register("r", "/k", 0, 8),
        lambda: manager.unregister("r"),
    ]
    for call in calls:
        with pytest.raises(ModelyardError) as e:
            call()
        assert e.value.code == ErrorCode.UNSUPPORTED
        assert "--allow-client-shm=true" in e.value.message
    assert manager.status() == []


# -- unit: regions ------------------------------------------------------------------------------


@pytest.fixture
def region() -> Iterator[Any]:
    key = _key()
    handle = shm.create_shared_memory_region("unit", key, 8192)
    yield key, handle
    shm.destroy_shared_memory_region(handle)


def test_inputs_are_zero_copy_views_and_outputs_land_in_the_region(region: Any) -> None:
    key, handle = region
    manager = SharedMemoryManager()
    manager.register("r", key, 16, 64)  # an unaligned registration offset works (Triton: no)
    shm.set_shared_memory_region(handle, [np.arange(4, dtype=np.float32)], offset=16 + 8)
    request = InferRequest(MODEL, [Tensor("INPUT0", "FP32", (4,), parameters={
        "shared_memory_region": "r", "shared_memory_offset": 8,
        "shared_memory_byte_size": 16})],
        outputs=[RequestedOutput("OUTPUT0", {"shared_memory_region": "r",
                                             "shared_memory_offset": 32,
                                             "shared_memory_byte_size": 32})])  # fmt: skip
    targets = manager.bind(request)
    raw = request.inputs[0].raw
    assert isinstance(raw, memoryview) and raw.readonly
    data = np.frombuffer(raw, np.float32)
    assert data.tolist() == [0, 1, 2, 3]
    assert targets is not None
    response = InferResponse(MODEL, "1", outputs=[Tensor.from_numpy("OUTPUT0", data * 10)])
    manager.write_outputs(response, targets)
    assert response.outputs[0].data is None
    got = shm.get_contents_as_numpy(handle, np.float32, [4], offset=16 + 32)
    assert got.tolist() == [0, 10, 20, 30]
    manager.unregister("r")  # the view the request still holds stays valid
    assert data.tolist() == [0, 1, 2, 3]
    del raw, data
    request.inputs[0].raw = None


def test_region_checks_use_tritons_texts(region: Any) -> None:
    key, _ = region
    manager = SharedMemoryManager()
    manager.register("r", key, 0, 64)
    cases = [
        ("nope", 0, 4, ErrorCode.NOT_FOUND, "Unable to find shared memory region: 'nope'"),
        ("r", 64, 4, ErrorCode.INVALID_ARG, "Invalid offset for shared memory region: 'r'"),
        ("r", 60, 8, ErrorCode.INVALID_ARG,
         "Invalid offset + byte size for shared memory region: 'r'"),
    ]  # fmt: skip
    for name, offset, size, code, text in cases:
        request = InferRequest(MODEL, [Tensor("INPUT0", "FP32", (1,), parameters={
            "shared_memory_region": name, "shared_memory_offset": offset,
            "shared_memory_byte_size": size})])  # fmt: skip
        with pytest.raises(ModelyardError) as e:
            manager.bind(request)
        assert (e.value.code, e.value.message) == (code, text)
    with pytest.raises(ModelyardError, match="already in manager"):
        manager.register("r", key, 0, 8)
    with pytest.raises(ModelyardError) as e:
        manager.register("big", key, 8192, 1)
    assert (e.value.code, e.value.message) == (
        ErrorCode.INVALID_ARG,
        "failed to register shared memory region 'big': invalid args",
    )
    manager.close()


# -- through the server -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(models=[MODEL], endpoints=("http", "grpc")) as srv:
        yield srv


@pytest.fixture
def regions() -> Iterator[tuple[str, Any, str, Any]]:
    in_key, out_key = _key(), _key()
    ih = shm.create_shared_memory_region("in", in_key, 256)
    oh = shm.create_shared_memory_region("out", out_key, 256)
    yield in_key, ih, out_key, oh
    shm.destroy_shared_memory_region(ih)
    shm.destroy_shared_memory_region(oh)


def _infer(client: Any, mod: Any, **kw: Any) -> Any:
    n = kw.get("n", 4)
    inputs = [mod.InferInput("INPUT0", [n], "FP32")]
    inputs[0].set_shared_memory(kw.get("region", "in"), kw.get("size", 4 * n), kw.get("off", 0))
    out = mod.InferRequestedOutput("OUTPUT0")
    out.set_shared_memory(kw.get("oregion", "out"), kw.get("osize", 4 * n), kw.get("ooff", 0))
    return client.infer(MODEL, inputs, outputs=[out])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_inputs_and_outputs_in_shared_memory(
    server: ServerProcess, regions: Any, protocol: str
) -> None:
    in_key, ih, out_key, oh = regions
    mod = httpclient if protocol == "http" else grpcclient
    client = client_for(server, protocol)
    try:
        assert "system_shared_memory" in (
            client.get_server_metadata()["extensions"]
            if protocol == "http"
            else client.get_server_metadata().extensions
        )
        client.register_system_shared_memory("in", in_key, 256)
        client.register_system_shared_memory("out", out_key, 128, offset=128)
        x = np.linspace(0, 1, 8, dtype=np.float32)
        shm.set_shared_memory_region(ih, [x], offset=32)
        result = _infer(client, mod, n=8, off=32, ooff=16)
        assert shm.get_contents_as_numpy(oh, np.float32, [8], offset=128 + 16).tolist() == (
            x.tolist()
        )
        if protocol == "http":
            entry = result.get_response()["outputs"][0]
            assert entry == {"name": "OUTPUT0", "datatype": "FP32", "shape": [8]}
        else:
            assert list(result.get_response().outputs[0].shape) == [8]
        # BYTES input and output through regions too
        text = np.array([b"a", b"shared", b""], dtype=np.object_)
        serialized = serialize_byte_tensor(text)
        shm.set_shared_memory_region(ih, [serialized], offset=64)
        nbytes = serialized_byte_size(serialized)
        inputs = [mod.InferInput("INPUT0", [1], "FP32"), mod.InferInput("TEXT", [3], "BYTES")]
        inputs[0].set_shared_memory("in", 4, 32)
        inputs[1].set_shared_memory("in", nbytes, 64)
        out = mod.InferRequestedOutput("TEXT_OUT")
        out.set_shared_memory("out", 64)
        client.infer(MODEL, inputs, outputs=[out])
        got = shm.get_contents_as_numpy(oh, np.object_, [3], offset=128)
        assert got.tolist() == text.tolist()
        status = client.get_system_shared_memory_status("out")
        if protocol == "http":
            assert status == [{"name": "out", "key": out_key, "offset": 128, "byte_size": 128}]
        else:
            assert status.regions["out"].offset == 128
    finally:
        client.unregister_system_shared_memory()
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bad_regions_are_rejected_and_the_server_keeps_serving(
    server: ServerProcess, regions: Any, protocol: str
) -> None:
    in_key, ih, out_key, oh = regions
    mod = httpclient if protocol == "http" else grpcclient
    client = client_for(server, protocol)
    http = protocol == "http"
    codes = {
        "400": ("400", "StatusCode.INVALID_ARGUMENT"),
        "404": ("404", "StatusCode.NOT_FOUND"),
        "500": ("500", "StatusCode.INTERNAL"),
        "ae": ("400", "StatusCode.ALREADY_EXISTS"),
    }

    def expect(kind: str, text: str, fn: Any) -> None:
        with pytest.raises(InferenceServerException) as e:
            fn()
        assert str(e.value.status()) == codes[kind][0 if http else 1]
        assert e.value.message() == text

    try:
        client.register_system_shared_memory("in", in_key, 64)
        client.register_system_shared_memory("out", out_key, 64)
        shm.set_shared_memory_region(ih, [np.ones(4, np.float32)])
        expect(
            "ae",
            "shared memory region 'in' already in manager",
            lambda: client.register_system_shared_memory("in", in_key, 64),
        )
        expect(
            "500",
            "Unable to open shared memory region: '/modelyard_test_absent'",
            lambda: client.register_system_shared_memory("x", "/modelyard_test_absent", 8),
        )
        expect(
            "400",
            "failed to register shared memory region 'x': invalid args",
            lambda: client.register_system_shared_memory("x", in_key, 512),
        )
        expect(
            "400",
            "cannot register shared memory region 'x' - invalid shm key '/../etc/passwd'",
            lambda: client.register_system_shared_memory("x", "/../etc/passwd", 8),
        )
        expect(
            "404",
            "Unable to find system shared memory region: 'nope'",
            lambda: client.get_system_shared_memory_status("nope"),
        )
        expect(
            "404",
            "Unable to find shared memory region: 'nope'",
            lambda: _infer(client, mod, region="nope"),
        )
        expect(
            "404",
            "Unable to find shared memory region: 'nope'",
            lambda: _infer(client, mod, oregion="nope"),
        )
        expect(
            "400",
            "Invalid offset for shared memory region: 'in'",
            lambda: _infer(client, mod, off=64),
        )
        expect(
            "400",
            "Invalid offset + byte size for shared memory region: 'in'",
            lambda: _infer(client, mod, off=56),
        )
        expect(
            "400",
            "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' "
            "for model 'shm_identity'. Expected 16, got 12",
            lambda: _infer(client, mod, size=12),
        )
        expect(
            "500",
            "shared memory size specified with the request for output 'OUTPUT0' "
            "(8 bytes) should be at least 16 bytes to hold the results",
            lambda: _infer(client, mod, osize=8),
        )
        expect(
            "404",
            "The region named 'in' is registered as system shared memory, not CUDA shared memory",
            lambda: client.get_cuda_shared_memory_status("in"),
        )
        handle = b"\0" * 64 if not http else base64.b64encode(b"\0" * 64)
        expect("400", "failed to register CUDA shared memory region: 'c', GPUs not supported",
               lambda: client.register_cuda_shared_memory("c", handle, 0, 64))  # fmt: skip
        _infer(client, mod)  # still serving
        assert shm.get_contents_as_numpy(oh, np.float32, [4]).tolist() == [1, 1, 1, 1]
        client.unregister_system_shared_memory("in")
        client.unregister_system_shared_memory("never-registered")
        expect("404", "Unable to find shared memory region: 'in'", lambda: _infer(client, mod))
    finally:
        client.unregister_system_shared_memory()
        client.close()


def test_allow_client_shm_false(serving: Serving, regions: Any) -> None:
    in_key = regions[0]
    with serving.server(None, "--allow-client-shm=false", models=[MODEL],
                        endpoints=("http", "grpc")) as srv:  # fmt: skip
        h = httpclient.InferenceServerClient(srv.http_url)
        g = grpcclient.InferenceServerClient(srv.grpc_url)
        assert "system_shared_memory" not in h.get_server_metadata()["extensions"]
        text = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
        cuda_handle, unimplemented = base64.b64encode(b"\0" * 64), "StatusCode.UNIMPLEMENTED"
        calls: list[tuple[Callable[[], object], str]] = [
            (lambda: h.register_system_shared_memory("in", in_key, 64), "501"),
            (lambda: g.register_system_shared_memory("in", in_key, 64), "StatusCode.UNIMPLEMENTED"),
            (lambda: h.unregister_system_shared_memory(), "501"),
            # CUDA regions too (Triton's HEAD, where the flag comes from, refuses them alike)
            (lambda: h.register_cuda_shared_memory("c", cuda_handle, 0, 8), "501"),
            (lambda: g.register_cuda_shared_memory("c", cuda_handle, 0, 8), unimplemented),
            (lambda: g.unregister_cuda_shared_memory(), unimplemented),
        ]
        for call, status in calls:
            with pytest.raises(InferenceServerException) as e:
                call()
            assert (str(e.value.status()), e.value.message()) == (status, text)
        assert h.get_system_shared_memory_status() == []
        with pytest.raises(InferenceServerException, match="Unable to find shared memory region"):
            _infer(h, httpclient)
        h.close()
        g.close()


# -- differential -------------------------------------------------------------------------------


def _observe(http_url: str, grpc_url: str, *regions: Any) -> list[Any]:
    """The same shared-memory calls on one server over both protocols."""
    h = httpclient.InferenceServerClient(http_url)
    g = grpcclient.InferenceServerClient(grpc_url)
    try:
        return _observe_one("http", h, httpclient, *regions) + _observe_one(
            "grpc", g, grpcclient, *regions
        )
    finally:
        h.close()
        g.close()


def _observe_one(
    protocol: str, client: Any, mod: Any, in_key: str, ih: Any, out_key: str, oh: Any
) -> list[Any]:
    """(protocol, what, "ok" | status and message | contents) for each call."""
    seen: list[Any] = []

    def run(what: str, fn: Any) -> None:
        try:
            fn()
            seen.append((protocol, what, "ok"))
        except InferenceServerException as e:
            seen.append((protocol, what, str(e.status()), e.message()))

    shm.set_shared_memory_region(ih, [np.arange(4, dtype=np.float32)])
    # (before "in": Triton 2.51 fails any second region on a key it has registered, reusing
    # the descriptor it closed; modelyard allows it, and only the size rule is compared here)
    run("register beyond", lambda: client.register_system_shared_memory("b", in_key, 4096 * 4))
    run("register in", lambda: client.register_system_shared_memory("in", in_key, 64))
    run("register out", lambda: client.register_system_shared_memory("out", out_key, 64))
    run("register dup", lambda: client.register_system_shared_memory("in", in_key, 64))
    run("register absent", lambda: client.register_system_shared_memory("a", "/mt_absent", 8))
    run("status unknown", lambda: client.get_system_shared_memory_status("nope"))
    run("infer", lambda: _infer(client, mod, ooff=8))
    seen.append((protocol, "out", shm.get_contents_as_numpy(oh, np.float32, [6]).tolist()))
    run("unknown in", lambda: _infer(client, mod, region="nope"))
    run("unknown out", lambda: _infer(client, mod, oregion="nope"))
    run("bad offset", lambda: _infer(client, mod, off=64))
    run("bad size", lambda: _infer(client, mod, off=60))
    run("mismatch", lambda: _infer(client, mod, size=12))
    run("small out", lambda: _infer(client, mod, osize=8))
    run("cuda status", lambda: client.get_cuda_shared_memory_status("in"))
    run("unregister unknown", lambda: client.unregister_system_shared_memory("nope"))
    run("unregister all", lambda: client.unregister_system_shared_memory())
    seen.append((protocol, "status", str(client.get_system_shared_memory_status())))
    shm.set_shared_memory_region(oh, [np.zeros(16, np.float32)])
    return seen


@pytest.mark.reference
@pytest.mark.skipif(not reference_available(), reason="reference Triton is not installed")
def test_differential_against_triton(server: ServerProcess, regions: Any, serving: Serving) -> None:
    ref = start_reference(serving.repo([MODEL]))
    try:
        theirs = _observe(ref.http_url, ref.grpc_url, *regions)
    finally:
        ref.stop()
    ours = _observe(server.http_url, server.grpc_url, *regions)
    assert ours == theirs
    assert os.path.exists("/dev/shm/" + regions[0].lstrip("/"))


def test_grpc_stream_writes_outputs_to_shared_memory(server: ServerProcess, regions: Any) -> None:
    in_key, ih, out_key, oh = regions
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: queue.Queue[Any] = queue.Queue()
    try:
        client.register_system_shared_memory("in", in_key, 64)
        client.register_system_shared_memory("out", out_key, 64)
        shm.set_shared_memory_region(ih, [np.array([4, 5, 6, 7], np.float32)])
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        inp = grpcclient.InferInput("INPUT0", [4], "FP32")
        inp.set_shared_memory("in", 16)
        for osize in (16, 8):  # the second output does not fit: an error on the open stream
            out = grpcclient.InferRequestedOutput("OUTPUT0")
            out.set_shared_memory("out", osize)
            client.async_stream_infer(MODEL, [inp], outputs=[out])
            result, error = results.get(timeout=30)
            if osize == 16:
                assert error is None and result is not None
                assert shm.get_contents_as_numpy(oh, np.float32, [4]).tolist() == [4, 5, 6, 7]
            else:
                assert error is not None and "should be at least 16 bytes" in str(error)
        client.stop_stream()
    finally:
        client.unregister_system_shared_memory()
        client.close()
