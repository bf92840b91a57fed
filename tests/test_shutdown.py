"""Shutdown within ``--exit-timeout-secs`` from SIGTERM, whatever the models do, through the
real server and tritonclient: requests in flight either complete or are answered (queued ones
UNAVAILABLE, running ones CANCELLED), new ones get Triton's UNAVAILABLE text, finalize is
abandoned and workers killed at the deadline; exit code 0 for a clean drain, 1 otherwise (as
Triton's "failed to stop server")."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from tests.conftest import Serving
from tests.healthmodels import GATED, write_model
from tests.helpers import (
    MODES,
    final_output,
    grpc_input,
    metric_value,
    read_metrics,
    wait_for_log,
    wait_until_async,
)
from tests.serverproc import ServerProcess

WAIT_S = 90.0  # guards against hanging only
STOPPING = "Server is stopping, scheduler for model has stopped accepting new inference requests"


def _in(value: float) -> list[grpcaio.InferInput]:
    return [grpc_input("IN", np.array([value], np.float32))]


async def _outcome(client: grpcaio.InferenceServerClient, value: float, rid: str) -> Any:
    try:
        result = await client.infer("gated", _in(value), request_id=rid)
        return float(result.as_numpy("OUT")[0])
    except InferenceServerException as e:
        return e.status(), e.message()


async def _until(what: str, check: Any) -> None:
    await wait_until_async(check, WAIT_S, what=what)


async def _exit_code(server: ServerProcess) -> int:
    code: int = await asyncio.get_running_loop().run_in_executor(None, server.proc.wait, WAIT_S)
    return code


def _workers_of(pid: int) -> list[int]:
    """Worker processes the server with ``pid`` started (their argv names it)."""
    marker = f"modelyard-{pid}-".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


@pytest.mark.parametrize("mode", MODES)
async def test_a_hung_model_is_cut_off_at_the_exit_timeout(
    tmp_path: Path, mode: str, serving: Serving
) -> None:
    """One request hangs in execute for good, two wait behind it, finalize would hang too:
    SIGTERM with a 2 s exit timeout still ends the server, every request has its answer."""
    folder = write_model(tmp_path, "gated", GATED)
    (folder / "hang_finalize").touch()
    with serving.server(tmp_path, "--exit-timeout-secs", "2", mode=mode) as server:
        async with grpcaio.InferenceServerClient(server.grpc_url) as client:
            hung = asyncio.ensure_future(_outcome(client, -1, "hung"))
            await _until("the hung request to run", (folder / "started").exists)
            waiting = [asyncio.ensure_future(_outcome(client, 1, f"waits{i}")) for i in range(2)]
            # Both are pending (in process mode the first to come is staged in the busy worker:
            # it has not started, so Triton's gauge counts it).
            await _until("the two requests to queue", lambda: _pending(server) == 2)
            server.proc.send_signal(signal.SIGTERM)
            await _until("the drain to start", lambda: "Waiting for in-flight" in server.output())
            late = await _outcome(client, 1, "late")
            assert late == ("StatusCode.UNAVAILABLE", f"[request id: late] {STOPPING}")
            assert await asyncio.wait_for(hung, WAIT_S) == (
                "StatusCode.CANCELLED",
                "Request was cancelled: the server is stopping and its exit timeout (2 s) "
                "expired while the request ran",
            )
            for request in waiting:
                assert await asyncio.wait_for(request, WAIT_S) == (
                    "StatusCode.UNAVAILABLE",
                    "Server is stopping, the exit timeout (2 s) expired before the request ran",
                )
            assert await _exit_code(server) == 1
        log = final_output(server)
        assert "failed to stop server: Exit timeout expired. Exiting immediately." in log
        await _until("its workers to end", lambda: not _workers_of(server.proc.pid))


def _pending(server: ServerProcess) -> int:
    """nv_inference_pending_request_count of the model: requests waiting to start."""
    text = read_metrics(server.metrics_url)
    return int(metric_value(text, "nv_inference_pending_request_count", model="gated") or 0)


async def test_a_clean_drain_completes_in_flight_requests_and_exits_0(
    tmp_path: Path, serving: Serving
) -> None:
    folder = write_model(tmp_path, "gated", GATED)
    (folder / "hold").touch()
    with serving.server(tmp_path, "--exit-timeout-secs", "60") as server:
        async with grpcaio.InferenceServerClient(server.grpc_url) as client:
            running = asyncio.ensure_future(_outcome(client, 3, "running"))
            await _until("the request to run", (folder / "started").exists)
            server.proc.send_signal(signal.SIGTERM)
            await _until("the drain to start", lambda: "Waiting for in-flight" in server.output())
            assert await _outcome(client, 1, "") == (
                "StatusCode.UNAVAILABLE",
                f"[request id: <id_unknown>] {STOPPING}",
            )
            assert not running.done()
            (folder / "hold").unlink()
            assert await asyncio.wait_for(running, WAIT_S) == 3
            assert await _exit_code(server) == 0
        assert "Exit timeout expired" not in final_output(server)


async def test_a_hung_finalize_is_abandoned(tmp_path: Path, serving: Serving) -> None:
    folder = write_model(tmp_path, "gated", GATED)
    (folder / "hang_finalize").touch()
    with serving.server(tmp_path, "--exit-timeout-secs", "1") as server:
        async with grpcaio.InferenceServerClient(server.grpc_url) as client:
            assert await _outcome(client, 5, "ok") == 5
        server.proc.send_signal(signal.SIGTERM)
        assert await _exit_code(server) == 1
        wait_for_log(server, "finalize of gated_0_0 did not finish within the exit timeout (1 s): "
                     "abandoned")  # fmt: skip
        await _until("its workers to end", lambda: not _workers_of(server.proc.pid))
