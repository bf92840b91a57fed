"""Zero-copy system shared memory with process-mode Python workers (client_regions.py): the
worker reads inputs from the client's region and writes outputs into it, through the real
server and tritonclient over HTTP and gRPC."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from modelyard.backends.python.worker.region_maps import ClientRegions
from tests.conftest import Serving
from tests.helpers import client_for, wait_until
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(120)

MODEL = "zc_probe"
N = 256 * 1024  # 1 MiB of FP32: far above the size that goes through the worker pools
MB = 4 * N


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(None, "--cache-config", "local,size=1048576",
                        models=[MODEL, "cache_double"], endpoints=("http", "grpc")) as srv:  # fmt: skip
        yield srv


class Regions:
    """Client regions made for one test, destroyed after it."""

    def __init__(self) -> None:
        self.handles: dict[str, Any] = {}
        self.keys: dict[str, str] = {}

    def make(self, name: str, size: int) -> Any:
        key = f"/modelyard_zc_{uuid.uuid4().hex[:12]}"
        self.keys[name] = key
        self.handles[name] = shm.create_shared_memory_region(name, key, size)
        return self.handles[name]

    def destroy(self, name: str) -> None:
        shm.destroy_shared_memory_region(self.handles.pop(name))


@pytest.fixture
def regions() -> Iterator[Regions]:
    r = Regions()
    yield r
    for name in list(r.handles):
        r.destroy(name)


def _infer(client: Any, protocol: str, *, osize: int = MB, ooff: int = 0,
           params: dict[str, Any] | None = None, iregion: str = "in",
           oregion: str = "out") -> Any:  # fmt: skip
    mod = httpclient if protocol == "http" else grpcclient
    inp = mod.InferInput("INPUT0", [N], "FP32")
    inp.set_shared_memory(iregion, MB, 4096 + 4)  # an odd offset inside the region
    out = mod.InferRequestedOutput("OUTPUT0")
    out.set_shared_memory(oregion, osize, ooff)
    wanted = [out, mod.InferRequestedOutput("WRITABLE"), mod.InferRequestedOutput("MAPS")]
    return client.infer(MODEL, [inp], outputs=wanted, parameters=params)


def _pool_segments(server: ServerProcess) -> list[str]:
    prefix = f"modelyard-{server.proc.pid}-"
    return [n for n in os.listdir("/dev/shm") if n.startswith(prefix)]


def _setup(client: Any, regions: Regions, x: np.ndarray[Any, Any]) -> Any:
    ih = regions.make("in", 2 * MB)
    oh = regions.make("out", 3 * MB)
    shm.set_shared_memory_region(ih, [x], offset=4096 + 4)
    shm.set_shared_memory_region(oh, [np.full(3 * N, 7, np.float32)])  # sentinels
    client.register_system_shared_memory("in", regions.keys["in"], 2 * MB)
    client.register_system_shared_memory("out", regions.keys["out"], 3 * MB)
    return oh


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_worker_reads_and_writes_the_client_regions(
    server: ServerProcess, regions: Regions, protocol: str
) -> None:
    client = client_for(server, protocol)
    x = np.random.default_rng(1).random(N, dtype=np.float32)
    try:
        oh = _setup(client, regions, x)
        for i in range(2):  # the second request reuses the worker's cached mappings
            result = _infer(client, protocol, osize=MB + 64, ooff=MB)
            got = shm.get_contents_as_numpy(oh, np.float32, [3 * N])
            assert np.array_equal(got[N : 2 * N], x * 2)
            # nothing written outside [offset, offset + output size)
            assert (got[:N] == 7).all() and (got[2 * N :] == 7).all()
            assert result.as_numpy("WRITABLE").tolist() == [False]  # a view of the region
            maps = {m.decode() for m in result.as_numpy("MAPS").tolist()}
            assert f"/dev/shm{regions.keys['in']}" in maps
            # the output region is mapped once the first response is written
            assert (f"/dev/shm{regions.keys['out']}" in maps) == (i == 1)
        # neither side copied the tensors into its pool of segments
        assert _pool_segments(server) == []
    finally:
        client.unregister_system_shared_memory()
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_output_larger_than_its_region_fails_as_before(
    server: ServerProcess, regions: Regions, protocol: str
) -> None:
    client = client_for(server, protocol)
    x = np.ones(N, np.float32)
    try:
        oh = _setup(client, regions, x)
        with pytest.raises(InferenceServerException) as e:
            _infer(client, protocol, osize=MB - 4)
        assert str(e.value.status()) == ("500" if protocol == "http" else "StatusCode.INTERNAL")
        assert e.value.message() == (
            f"shared memory size specified with the request for output 'OUTPUT0' ({MB - 4} "
            f"bytes) should be at least {MB} bytes to hold the results"
        )
        got = shm.get_contents_as_numpy(oh, np.float32, [3 * N])
        assert (got == 7).all()  # the region is untouched
        _infer(client, protocol)  # the server and the worker keep serving
        assert (shm.get_contents_as_numpy(oh, np.float32, [N]) == 2).all()
    finally:
        client.unregister_system_shared_memory()
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unregister_during_a_request(
    server: ServerProcess, regions: Regions, protocol: str, tmp_path: Path
) -> None:
    client = client_for(server, protocol)
    x = np.arange(N, dtype=np.float32)
    results: list[Any] = []
    started, gate = tmp_path / "started", tmp_path / "gate"
    try:
        oh = _setup(client, regions, x)
        _infer(client, protocol)  # the worker maps both regions now
        params = {"started": str(started), "gate": str(gate)}
        worker = threading.Thread(
            target=lambda: results.append(
                _infer(client_for(server, protocol), protocol, params=params)
            )
        )
        worker.start()
        wait_until(started.exists, what="the request to run in the model")
        client.unregister_system_shared_memory()  # while the request waits in the model
        gate.touch()
        worker.join(30)
        assert results and np.array_equal(shm.get_contents_as_numpy(oh, np.float32, [N]), x * 2)
        old = set(regions.keys.values())
        regions.destroy("in")
        regions.destroy("out")
        # New regions: the worker has dropped its mappings of the unregistered ones.
        _setup(client, regions, x)
        maps = {m.decode() for m in _infer(client, protocol).as_numpy("MAPS").tolist()}
        assert not [m for m in maps if any(k in m for k in old)]
        assert f"/dev/shm{regions.keys['in']}" in maps
    finally:
        client.unregister_system_shared_memory()
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_region_recreated_after_registration_reads_the_registered_object(
    server: ServerProcess, regions: Regions, protocol: str
) -> None:
    client = client_for(server, protocol)
    x = np.arange(N, dtype=np.float32)
    try:
        oh = _setup(client, regions, x)
        key = regions.keys["in"]
        regions.destroy("in")  # unlinked and made again under the same key: another object
        regions.handles["in"] = shm.create_shared_memory_region("in", key, 2 * MB)
        _infer(client, protocol)  # as Triton: the object mapped at registration is read
        assert np.array_equal(shm.get_contents_as_numpy(oh, np.float32, [N]), x * 2)
    finally:
        client.unregister_system_shared_memory()
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_cached_model_keeps_outputs_in_the_response(
    server: ServerProcess, regions: Regions, protocol: str
) -> None:
    mod = httpclient if protocol == "http" else grpcclient
    client = client_for(server, protocol)
    x = np.array([[1, 2, 3, float(protocol == "http")]], np.float32)  # a fresh cache key
    try:
        oh = regions.make("out", 64)
        client.register_system_shared_memory("out", regions.keys["out"], 64)
        inp = mod.InferInput("INPUT0", [1, 4], "FP32")
        inp.set_data_from_numpy(x)
        out = mod.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("out", 16)
        client.infer("cache_double", [inp], outputs=[out])
        assert np.array_equal(shm.get_contents_as_numpy(oh, np.float32, [1, 4]), x * 2)
        # the same request without a region is answered from the cache, data included
        plain = client.infer("cache_double", [inp], outputs=[mod.InferRequestedOutput("OUTPUT0")])
        assert np.array_equal(plain.as_numpy("OUTPUT0"), x * 2)
    finally:
        client.unregister_system_shared_memory()
        client.close()


def test_worker_writes_only_inside_its_destination(regions: Regions) -> None:
    handle = regions.make("r", 3 * 4096)
    shm.set_shared_memory_region(handle, [np.full(3 * 1024, 7, np.float32)])
    st = os.stat(f"/dev/shm{regions.keys['r']}")
    info = (1, regions.keys["r"], (st.st_dev, st.st_ino), 4096, 8192)  # region: [4096, 12288)
    mapped = ClientRegions()
    assert mapped.write((info, 100, 16), np.ones(5, np.float32)) is None  # too large
    assert mapped.write((info, 8190, 16), np.ones(4, np.float32)) is None  # past the region
    assert mapped.write((info, 100, 16), np.arange(4, dtype=np.float32)) == 16
    got = shm.get_contents_as_numpy(handle, np.uint8, [3 * 4096])
    expect = np.full(3 * 1024, 7, np.float32).view(np.uint8).copy()
    expect[4196:4212] = np.arange(4, dtype=np.float32).view(np.uint8)
    assert np.array_equal(got, expect)
    other = (2, regions.keys["r"], (st.st_dev, st.st_ino + 1), 0, 4096)  # not that object
    assert mapped.write((other, 0, 16), np.ones(4, np.float32)) is None
    mapped.forget([1])
