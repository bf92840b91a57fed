"""Stopping every model within ``--exit-timeout-secs``, whatever the models do.

As Triton's ``InferenceServer::Stop``: every scheduler stops taking requests at once (new
ones get Triton's UNAVAILABLE text), the requests already accepted run to completion, then
the models are finalized. When the exit timeout expires first, the rest is cut off instead
of waited for: requests still queued are answered UNAVAILABLE (they never ran, so a client
may retry them elsewhere), requests still running CANCELLED, finalize is abandoned and the
workers are killed. Triton itself just exits then, so its clients see the connection drop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from modelyard.errors import Cancelled, Unavailable

if TYPE_CHECKING:
    from modelyard.core.model_version import ModelVersion

log = logging.getLogger("modelyard")


async def stop_all(versions: Sequence[ModelVersion], timeout: float) -> bool:
    """Drain, then finalize, every version within ``timeout`` seconds; True when all of it
    finished in time, False when something had to be cut off."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, timeout)
    for mv in versions:
        mv.scheduler.close(shutdown=True)
    log.info("Waiting for in-flight requests to complete.")
    drained = await asyncio.gather(
        *(mv.scheduler.drain(max(0.0, deadline - loop.time())) for mv in versions)
    )
    if not all(drained):
        late = [mv for mv, ok in zip(versions, drained, strict=True) if not ok]
        _cut_off(versions, late, timeout)
        return False
    stops = {
        loop.create_task(instance.stop()): instance for mv in versions for instance in mv.instances
    }
    if not stops:
        return True
    _, pending = await asyncio.wait(stops, timeout=max(0.0, deadline - loop.time()))
    if not pending:
        return True
    for task in pending:
        task.cancel()
    names = sorted({stops[t].name for t in pending})
    log.error(
        "finalize of %s did not finish within the exit timeout (%g s): abandoned",
        ", ".join(names),
        timeout,
    )
    _cut_off(versions, [], timeout)
    return False


async def wait_retiring(
    retiring: Mapping[asyncio.Future[None], Sequence[ModelVersion]], timeout: float
) -> bool:
    """Wait for the versions a reload or unload is still draining (core/model_control.py);
    True when they finished within ``timeout``, else they are cut off like the others."""
    if not retiring:
        return True
    tasks = dict(retiring)
    _, pending = await asyncio.wait(tasks, timeout=max(0.0, timeout))
    if not pending:
        return True
    late = [mv for task in pending for mv in tasks[task]]
    for task in pending:
        task.cancel()
    _cut_off(late, late, timeout)
    return False


def _cut_off(
    versions: Sequence[ModelVersion], late: Sequence[ModelVersion], timeout: float
) -> None:
    """Answer what is left and kill the workers, now."""
    if late:
        log.error(
            "exit timeout (%g s) expired with requests in flight for %s; cutting them off",
            timeout,
            ", ".join(f"'{mv.name}' version {mv.version}" for mv in late),
        )
    queued = Unavailable(
        f"Server is stopping, the exit timeout ({timeout:g} s) expired before the request ran"
    )
    running = Cancelled(
        f"Request was cancelled: the server is stopping and its exit timeout ({timeout:g} s) "
        "expired while the request ran"
    )
    for mv in versions:
        mv.scheduler.abort(queued, running)
    for mv in versions:
        for instance in mv.instances:
            instance.abort()
    log.error("failed to stop server: Exit timeout expired. Exiting immediately.")
