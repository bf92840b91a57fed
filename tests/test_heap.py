"""Large freed buffers stay in the heap: measured as page faults, in a fresh interpreter (the
setting lasts for the process) and in the real server under 48 MB gRPC requests."""

from __future__ import annotations

import platform
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.conftest import Serving
from tests.serverproc import ServerProcess, refused_start

MODELS = Path(__file__).parent / "models"

glibc_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="the allocator setting applies to glibc only",
)

# Allocates, fills and frees a 64 MB buffer, then prints the page faults of a second one.
_PROBE = """
import resource, sys
from modelyard.heap import retain_freed_memory
applied = retain_freed_memory(int(sys.argv[1]))
size = 64 << 20
b = b"x" * size
del b
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
b = b"y" * size
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults_of_second_buffer(retain_bytes: int) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", _PROBE, str(retain_bytes)],
                         capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    applied, faults = out.stdout.split()
    return applied == "True", int(faults)


@glibc_only
def test_a_freed_large_buffer_is_reused_without_page_faults() -> None:
    applied, faults = _faults_of_second_buffer(256 << 20)
    assert applied
    assert faults < 1000  # 64 MB of fresh pages would be 16,384 faults


@glibc_only
def test_zero_keeps_glibc_defaults() -> None:
    applied, faults = _faults_of_second_buffer(0)
    assert not applied
    assert faults > 10_000  # glibc mmaps and unmaps each 64 MB buffer: every page faults again


def test_negative_value_is_refused() -> None:
    stderr = refused_start(MODELS, "--heap-retain-mb", "-1")
    assert "--heap-retain-mb must be 0 or more, got -1" in stderr


# -- through the server -------------------------------------------------------------------------


def _minor_faults(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[7])  # minflt: field 10 of proc(5), counted after the command name


@pytest.fixture(params=["default", "off"])
def server(request: pytest.FixtureRequest, serving: Serving) -> Iterator[tuple[str, ServerProcess]]:
    args = ("--heap-retain-mb", "0") if request.param == "off" else ()
    with serving.server(None, *args, models=["shm_identity"], endpoints=("grpc",)) as srv:
        yield request.param, srv


@glibc_only
def test_server_reuses_memory_across_large_grpc_requests(server: tuple[str, ServerProcess]) -> None:
    mode, srv = server
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    data = np.arange(12 << 20, dtype=np.float32)  # 48 MB: above glibc's largest mmap threshold
    inp = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
    inp.set_data_from_numpy(data)

    def one() -> None:
        out = client.infer("shm_identity", [inp]).as_numpy("OUTPUT0")
        assert out is not None and out.shape == data.shape and out[-1] == data[-1]

    for _ in range(8):  # the heap grows to the high-water mark of these requests
        one()
    faults = []
    for _ in range(6):
        before = _minor_faults(srv.proc.pid)
        one()
        faults.append(_minor_faults(srv.proc.pid) - before)
    client.close()
    # With glibc's defaults every request maps fresh 48 MB buffers (12,288 faults each); kept
    # in the heap, requests reuse mapped pages (the heap may still grow now and then, as the
    # order of frees varies, so the best request is the measure).
    if mode == "default":
        assert min(faults) < 4000, faults
    else:
        assert min(faults) > 12_288, faults
