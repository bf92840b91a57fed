"""CUDA shared-memory extension through the real server: what a register body gets before any
GPU is looked for (Triton 2.51's texts, codes and order, compared with the reference Triton
where it is installed), and, on a machine without a GPU, "GPUs not supported" over HTTP and
gRPC through tritonclient and the one namespace with system regions. With a GPU:
tests/gpu/test_cuda_shared_memory.py."""

from __future__ import annotations

import base64
import http.client
import json
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from modelyard.devices import discover_gpus
from tests.conftest import Serving
from tests.helpers import client_for
from tests.reference import reference_available, start_reference
from tests.serverproc import ServerProcess

MODEL = "shm_identity"
HANDLE = base64.b64encode(bytes(range(64))).decode()  # the size of a cudaIpcMemHandle_t
UNSUPPORTED = "failed to register CUDA shared memory region: '{}', GPUs not supported"
BAD_HANDLE = "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(models=[MODEL], endpoints=("http", "grpc")) as srv:
        yield srv


@pytest.fixture
def system_region() -> Iterator[tuple[str, Any]]:
    """A system region's key and handle, holding [1, 2, 3, 4] as FP32."""
    key = f"/modelyard_test_{uuid.uuid4().hex[:12]}"
    handle = shm.create_shared_memory_region("in", key, 64)
    shm.set_shared_memory_region(handle, [np.arange(1, 5, dtype=np.float32)])
    yield key, handle
    shm.destroy_shared_memory_region(handle)


def _post(url: str, path: str, body: bytes | None = None) -> tuple[int, str]:
    host, port = url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("POST", path, body=body)
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def _register_body(**fields: Any) -> bytes:
    doc = {"raw_handle": {"b64": HANDLE}, "device_id": 0, "byte_size": 64}
    doc.update(fields)
    return json.dumps({k: v for k, v in doc.items() if v is not None}).encode()


# What each malformed register body gets, in the order Triton checks: the region name, the
# body's members one by one, the handle's size, then the name's uniqueness ("in" is a system
# region). All before a GPU is looked for.
BODIES: list[tuple[str, str, bytes]] = [
    ("no name", "/v2/cudasharedmemory/register", _register_body()),
    ("no raw_handle", "/v2/cudasharedmemory/region/c/register", _register_body(raw_handle=None)),
    ("raw_handle not an object", "/v2/cudasharedmemory/region/c/register",
     _register_body(raw_handle="x")),
    ("no b64", "/v2/cudasharedmemory/region/c/register", _register_body(raw_handle={})),
    ("b64 not a string", "/v2/cudasharedmemory/region/c/register",
     _register_body(raw_handle={"b64": 5})),
    ("no byte_size", "/v2/cudasharedmemory/region/c/register", _register_body(byte_size=None)),
    ("negative byte_size", "/v2/cudasharedmemory/region/c/register",
     _register_body(byte_size=-1, device_id="x")),
    ("no device_id", "/v2/cudasharedmemory/region/c/register", _register_body(device_id=None)),
    ("device_id a string", "/v2/cudasharedmemory/region/c/register",
     _register_body(device_id="0")),
    ("short handle", "/v2/cudasharedmemory/region/c/register",
     _register_body(raw_handle={"b64": "AAAA"})),
    ("long handle", "/v2/cudasharedmemory/region/c/register",
     _register_body(raw_handle={"b64": HANDLE + "AAAA"})),
    ("short handle, taken name", "/v2/cudasharedmemory/region/in/register",
     _register_body(raw_handle={"b64": "AAAA"})),
    ("taken name", "/v2/cudasharedmemory/region/in/register", _register_body()),
]  # fmt: skip

EXPECTED = {
    "no name": (400, "'region name' is necessary to register cuda shared memory region"),
    "no raw_handle": (400, "Shared memory register request has no 'raw_handle' field"),
    "raw_handle not an object": (500, "attempt to access non-existing object member 'b64'"),
    "no b64": (500, "attempt to access non-existing object member 'b64'"),
    "b64 not a string": (500, "attempt to access JSON non-string as string"),
    "no byte_size": (500, "attempt to access non-existing object member 'byte_size'"),
    "negative byte_size": (500, "attempt to access JSON non-unsigned-integer as unsigned-integer"),
    "no device_id": (500, "attempt to access non-existing object member 'device_id'"),
    "device_id a string": (500, "attempt to access JSON non-unsigned-integer as unsigned-integer"),
    "short handle": (400, BAD_HANDLE),
    "long handle": (400, BAD_HANDLE),
    "short handle, taken name": (400, BAD_HANDLE),
    "taken name": (400, "shared memory region 'in' already in manager"),
}


def _bodies(url: str, key: str) -> dict[str, tuple[int, str]]:
    client = httpclient.InferenceServerClient(url)
    try:
        client.register_system_shared_memory("in", key, 64)
        seen = {}
        for what, path, body in BODIES:
            status, text = _post(url, path, body)
            seen[what] = (status, json.loads(text)["error"])
        return seen
    finally:
        client.unregister_system_shared_memory()
        client.close()


def test_register_bodies_are_checked_before_any_gpu(
    server: ServerProcess, system_region: tuple[str, Any]
) -> None:
    assert _bodies(server.http_url, system_region[0]) == EXPECTED


@pytest.mark.reference
@pytest.mark.skipif(not reference_available(), reason="reference Triton is not installed")
def test_register_bodies_as_the_reference_answers(
    server: ServerProcess, system_region: tuple[str, Any], serving: Serving
) -> None:
    ref = start_reference(serving.repo([MODEL], copy=True))
    try:
        theirs = _bodies(ref.http_url, system_region[0])
        # A well-formed register on a machine without a GPU: the reference (a GPU build)
        # fails to open the handle; modelyard answers as Triton's CPU-only build.
        assert _post(ref.http_url, "/v2/cudasharedmemory/region/c/register", _register_body()) == (
            400,
            '{"error":"failed to register shared memory region: invalid args"}',
        )
    finally:
        ref.stop()
    assert _bodies(server.http_url, system_region[0]) == theirs


@pytest.mark.skipif(bool(discover_gpus().devices), reason="this machine has a GPU")
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_without_a_gpu_register_answers_gpus_not_supported_and_the_server_serves_on(
    server: ServerProcess, system_region: tuple[str, Any], protocol: str
) -> None:
    key, _ = system_region
    http = protocol == "http"
    mod: Any = httpclient if http else grpcclient
    client = client_for(server, protocol)

    def expect(status: tuple[str, str], text: str, fn: Any) -> None:
        with pytest.raises(InferenceServerException) as e:
            fn()
        assert (str(e.value.status()), e.value.message()) == (status[0 if http else 1], text)

    invalid = ("400", "StatusCode.INVALID_ARGUMENT")
    not_found = ("404", "StatusCode.NOT_FOUND")
    try:
        assert "cuda_shared_memory" in (
            client.get_server_metadata()["extensions"]
            if http
            else client.get_server_metadata().extensions
        )
        client.register_system_shared_memory("in", key, 64)
        client.register_system_shared_memory("out", key, 64)
        handle = HANDLE.encode()  # tritonclient's get_raw_handle gives base64 bytes
        expect(invalid, UNSUPPORTED.format("c"),
               lambda: client.register_cuda_shared_memory("c", handle, 0, 64))  # fmt: skip
        if not http:  # gRPC carries the bytes as they are: no size check comes first
            short = base64.b64encode(b"\0" * 3)
            expect(invalid, UNSUPPORTED.format("c"),
                   lambda: client.register_cuda_shared_memory("c", short, 0, 64))  # fmt: skip
        expect(("400", "StatusCode.ALREADY_EXISTS"),
               "shared memory region 'in' already in manager",
               lambda: client.register_cuda_shared_memory("in", handle, 0, 64))  # fmt: skip
        status = client.get_cuda_shared_memory_status()
        assert status == [] if http else not status.regions
        expect(not_found, "Unable to find cuda shared memory region: 'c'",
               lambda: client.get_cuda_shared_memory_status("c"))  # fmt: skip
        expect(not_found,
               "The region named 'in' is registered as system shared memory, not CUDA shared "
               "memory", lambda: client.get_cuda_shared_memory_status("in"))  # fmt: skip
        # A CUDA unregister passes system regions by, by name and all.
        client.unregister_cuda_shared_memory("in")
        client.unregister_cuda_shared_memory("never-registered")
        client.unregister_cuda_shared_memory()
        names = (
            [r["name"] for r in client.get_system_shared_memory_status()]
            if http
            else sorted(client.get_system_shared_memory_status().regions)
        )
        assert names == ["in", "out"]
        # An input naming a region no one registered: Triton's NOT_FOUND, as before.
        inp = mod.InferInput("INPUT0", [4], "FP32")
        inp.set_shared_memory("c", 16)
        expect(not_found, "Unable to find shared memory region: 'c'",
               lambda: client.infer(MODEL, [inp]))  # fmt: skip
        # still serving, through the system region
        inp.set_shared_memory("in", 16)
        out = mod.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("out", 16, 16)
        client.infer(MODEL, [inp], outputs=[out])
        assert shm.get_contents_as_numpy(system_region[1], np.float32, [4], offset=16).tolist() == [
            1, 2, 3, 4,
        ]  # fmt: skip
    finally:
        client.unregister_system_shared_memory()
        client.close()
