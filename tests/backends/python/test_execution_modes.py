"""What differs between the Python backend's execution modes, through the real server:
where a model runs, how BLS hands arrays over, module isolation, the concurrency of
``async def execute``, and that BLS traffic leaves no shared-memory segments behind."""

from __future__ import annotations

import asyncio
import glob
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient

from tests.backends.python.test_bls import TIMEOUT_S, Served, X, drive, meta
from tests.conftest import Serving
from tests.helpers import MODES, grpc_input, http_input

pytestmark = pytest.mark.timeout(60)

MODE_MODELS = [
    "bls_echo",
    "bls_driver",
    "bls_helper_a",
    "bls_helper_b",
    "bls_helper_lazy",
    "bls_async_sleep",
]


@pytest.fixture(scope="module", params=MODES)
def served(request: pytest.FixtureRequest, serving: Serving) -> Iterator[Served]:
    with serving.server(models=MODE_MODELS, mode=request.param) as server:
        yield Served(server, request.param)


def test_where_execute_runs(served: Served) -> None:
    result, _ = drive(served.http(), {"model": "bls_echo", "outputs": ["OUTPUT0", "META"]})
    server_pid = served.server.proc.pid
    caller, callee = result["pid"], meta(result)["pid"]
    if served.mode == "in-process":
        assert caller == callee == server_pid
    else:  # one worker process per instance
        assert len({caller, callee, server_pid}) == 3


@pytest.mark.parametrize("path", ["direct", "via-event-loop"])
def test_in_process_bls_hands_arrays_over_without_copying(served: Served, path: str) -> None:
    if served.mode != "in-process":
        pytest.skip("worker processes exchange tensors through shared memory")
    spec: dict[str, Any] = {"model": "bls_echo"}
    if path == "via-event-loop":
        spec["timeout"] = 10_000_000  # a BLS timeout takes the scheduler's path
    result, out = drive(served.http(), spec)
    # bls_echo returns its input array; the caller gets back the very array it sent.
    assert result["has_error"] is False
    assert result["shares_memory"] is True
    np.testing.assert_array_equal(out, X)


def _who(served: Served, model: str) -> str:
    res = served.http().infer(model, [http_input("INPUT0", X, "FP32")])
    return str(res.as_numpy("OUT")[0].decode())


def test_sibling_modules_of_the_same_name_stay_apart(served: Served) -> None:
    for _ in range(2):
        assert _who(served, "bls_helper_a") == "helper of bls_helper_a"
        assert _who(served, "bls_helper_b") == "helper of bls_helper_b"


def test_sibling_module_imported_inside_execute(served: Served) -> None:
    assert _who(served, "bls_helper_lazy") == "helper of bls_helper_lazy"


async def test_async_execute_runs_requests_concurrently(served: Served) -> None:
    """bls_async_sleep has one instance; with "together" 4 each request waits in execute until
    all four are in it at once (and fails when they never are)."""
    async with grpcaio.InferenceServerClient(served.server.grpc_url) as client:
        await client.infer(
            "bls_async_sleep", [grpc_input("INPUT0", X, "FP32")], client_timeout=TIMEOUT_S
        )
        results = await asyncio.gather(*[
            client.infer("bls_async_sleep", [grpc_input("INPUT0", X + i, "FP32")],
                         parameters={"together": 4}, client_timeout=2 * TIMEOUT_S)
            for i in range(4)
        ])  # fmt: skip
    for i, res in enumerate(results):
        np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), X + i)


def _rss_mb(pid: int) -> float:
    """Resident memory of a process and its children (the workers), in MB."""
    pids = [pid]
    for children in glob.glob(f"/proc/{pid}/task/*/children"):
        pids += [int(p) for p in Path(children).read_text().split()]
    total = 0
    for p in pids:
        status = Path(f"/proc/{p}/status").read_text()
        total += int(
            next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1]
        )
    return total / 1024


def test_bls_loop_leaves_no_shared_memory_behind(served: Served) -> None:
    """20,000 BLS calls with 256 KB tensors (5 requests of 4,000): the set of /dev/shm
    segments and the memory of the server and its workers stay flat after the first."""
    if served.mode != "process":
        pytest.skip("in-process BLS uses no shared memory")
    pid = served.server.proc.pid
    client = httpclient.InferenceServerClient(served.server.http_url, network_timeout=30)
    x = np.random.default_rng(0).random(65536, dtype=np.float32)  # 256 KB
    counts, rss = [], []
    for _ in range(5):
        result, out = drive(client, {"model": "bls_echo", "how": "loop", "count": 4000}, x)
        assert result["has_error"] is False, result
        np.testing.assert_array_equal(out, x)
        counts.append(len(glob.glob(f"/dev/shm/modelyard-{pid}-*")))
        rss.append(_rss_mb(pid))
    assert counts[0] > 0  # the tensors did travel through shared memory
    # A pool keeps as many segments as were ever in use at once. A reply sent straight from
    # the callee's worker may let the caller start its next call before the server has
    # dropped its view of the last call's input: a rare interleaving that adds one segment
    # once. A leak adds segments round after round.
    assert counts[-1] <= counts[0] + 1, f"/dev/shm segments after each 4,000 calls: {counts}"
    assert rss[-1] - rss[0] < 40, f"RSS (MB) of server and workers: {rss}"
