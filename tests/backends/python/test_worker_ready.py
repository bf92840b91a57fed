"""A worker's READY must not be lost when the server's event loop is busy while the worker
starts. Seen when a TorchScript model imported torch on the loop during another model's
start: under uvloop the stub's READY was read before the server waited for it, and the start
timed out after 30 s."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from modelyard.backends.python.server.process_instance import PythonWorker, WorkerSpec

MODELS = Path(__file__).resolve().parents[2] / "models"


def _run(loop_kind: str, coro: Coroutine[Any, Any, None]) -> None:
    if loop_kind == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        uvloop.run(coro)
    else:
        asyncio.run(coro)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("loop_kind", ["uvloop"])  # asyncio's loop never lost it
def test_ready_arrives_while_the_loop_is_busy(
    loop_kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_dir = MODELS / "py_identity"
    spec = WorkerSpec(
        model_name="py_identity", version=1, model_dir=str(model_dir),
        model_file=str(model_dir / "1" / "model.py"), instance_name="py_identity_0",
        instance_kind="CPU", device_id=0, config_json="{}", decoupled=False,
        shm_enabled=False, start_timeout=10.0,
    )  # fmt: skip
    spawn = asyncio.create_subprocess_exec

    async def spawn_then_block(*args: Any, **kwargs: Any) -> Any:
        proc = await spawn(*args, **kwargs)
        time.sleep(2.5)  # the loop is blocked: the stub starts and sends READY meanwhile
        return proc

    monkeypatch.setattr(asyncio, "create_subprocess_exec", spawn_then_block)

    async def main() -> None:
        worker = PythonWorker(spec)
        try:
            await asyncio.wait_for(worker.spawn(), 20)
            await asyncio.wait_for(worker.start(), 20)  # READY came: initialize only
            assert worker.healthy
        finally:
            await worker.stop()

    _run(loop_kind, main())
