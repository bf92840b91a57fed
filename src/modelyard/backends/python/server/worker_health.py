"""What a worker instance's health is made of: a live, initialized process; restarts with
backoff when it dies (restart.py); and the model's own ``is_ready()`` (readiness.py).

A base of :class:`~.process_instance.PythonWorker`, which owns the process,
the channel and the shared-memory pool these methods work on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from modelyard.backends.instance import Instance
from modelyard.backends.python.protocol import framing, tensor_pool
from modelyard.backends.python.protocol.messages import IsReady, ServerMessage
from modelyard.backends.python.server.child_process import ChildProcess
from modelyard.backends.python.server.readiness import UserReadiness, check_result
from modelyard.backends.python.server.restart import Supervisor, describe_exit
from modelyard.errors import ModelyardError

if TYPE_CHECKING:
    from modelyard.backends.python.server.process_instance import WorkerSpec


class WorkerHealth(Instance):
    spec: WorkerSpec
    _alive: bool  # the process is connected
    _initialized: bool  # ... and its model's initialize succeeded
    _stopping: bool
    _prefix: str
    _pool: tensor_pool.ShmPool
    mapper: tensor_pool.ShmMapper
    _region_tokens: set[int]
    _proc: ChildProcess | None
    _proto: framing.FrameProtocol | None

    def _init_health(self) -> None:
        self._sup = Supervisor(self.name, self.spec.restart, self._respawn, self._reap)
        self._has_is_ready = False  # the model defines is_ready()
        self._user_ready = UserReadiness(self.name, self._probe_is_ready)

    def adopt(self, spec: WorkerSpec) -> None:
        """Become the instance ``spec`` names (the worker that ran auto-complete is kept)."""
        self.spec = spec
        self.name = spec.key
        self._init_health()

    async def _call(
        self, request: Callable[[int], ServerMessage] | None, timeout: float | None, what: str
    ) -> Any:
        raise NotImplementedError

    async def spawn(self) -> None:
        raise NotImplementedError

    async def _initialize(self) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    @property
    def healthy(self) -> bool:
        return self._alive and self._initialized

    @property
    def not_ready_reason(self) -> str:
        if self.healthy:
            return ""
        return self._sup.reason or f"Stub process '{self.name}' is not healthy."

    @property
    def restarts(self) -> int:
        return self._sup.restarts

    async def check_ready(self) -> str | None:
        if not self.healthy:
            return self.not_ready_reason
        if not self._has_is_ready:  # as Triton: no call into the worker at all
            return None
        return await self._user_ready.check()

    async def _probe_is_ready(self) -> bool:
        try:
            return check_result(await self._call(IsReady, None, "is_ready"))
        except ModelyardError:
            if not self._alive:
                raise ModelyardError(
                    "Stub process is not healthy while waiting for user-defined is_ready() response"
                ) from None
            raise

    def abort(self) -> None:
        self._stopping = True
        self._sup.cancel()
        self.kill()
        self._pool.close()
        tensor_pool.sweep(self._prefix + "-")

    def _recovered(self) -> None:
        if self.health_listener is not None:
            self.health_listener()

    async def _respawn(self) -> None:
        """One restart attempt: a fresh process, and the model's initialize."""
        self._pool.close()
        tensor_pool.sweep(self._prefix + "-")
        self._pool = tensor_pool.ShmPool(self._prefix + "-s", enabled=self.spec.shm_enabled)
        self.mapper.forget_prefix(self._prefix)
        self._region_tokens.clear()
        self._user_ready.forget()
        await self.spawn()
        await self._initialize()

    async def _reap(self, kill: bool) -> str:
        """Wait for the current process to end and say how it ended; ``kill``: end a process
        that is still connected (its initialize failed) and say nothing."""
        proc = self._proc
        if proc is None:
            return ""
        connected = self._alive
        if kill and connected:
            self.kill()
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.close()
        try:
            await asyncio.wait_for(proc.wait(), 10.0)
        except asyncio.TimeoutError:  # closed its channel but does not exit
            proc.kill()
            await proc.wait()
            return "closed its channel and did not exit"
        return "" if kill and connected else describe_exit(proc.returncode)
