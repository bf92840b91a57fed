"""A model's own ``is_ready(self)`` (Triton's Python backend since 26.03), called when model
or server readiness is queried.

As Triton (python_be.cc ``RunUserModelReadinessCheck``): one check in flight per instance,
concurrent queries share its result; each query waits at most 5 s; an exception or a result
that is not a ``bool`` makes the instance not ready, with Triton's texts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from modelyard.errors import ModelyardError

TIMEOUT_S = 5.0  # kUserModelReadinessTimeoutMs
NOT_BOOL = "is_ready() must return a boolean value"


def check_result(result: object) -> bool:
    """The value ``is_ready`` returned, if it is a real bool (numpy's bool_ is not, as in
    Triton's pybind check)."""
    if type(result) is not bool:
        raise ModelyardError(NOT_BOOL)
    return result


class UserReadiness:
    """Runs ``probe`` (the model's ``is_ready``, wherever it lives) for one instance.

    ``probe`` returns the bool or raises ModelyardError with the text to report.
    """

    def __init__(self, instance_name: str, probe: Callable[[], Awaitable[bool]]):
        self.instance_name = instance_name
        self._probe = probe
        self._inflight: asyncio.Task[bool] | None = None

    async def check(self) -> str | None:
        """None when the model says it is ready, else Triton's reason."""
        joined = self._inflight is not None and not self._inflight.done()
        if not joined:
            self._inflight = asyncio.get_running_loop().create_task(self._run())
        task = self._inflight
        assert task is not None
        try:
            ready = await asyncio.wait_for(asyncio.shield(task), TIMEOUT_S)
        except asyncio.TimeoutError:
            if joined:
                return "Timed out waiting for in-flight is_ready() response"
            return "Timed out waiting for user-defined is_ready() response"
        except ModelyardError as e:
            return e.message
        if not ready:
            return f"Model '{self.instance_name}' is not ready (user-defined check failed)."
        return None

    async def _run(self) -> bool:
        return await self._probe()

    def forget(self) -> None:
        """The instance went away (or restarts): a check still running is not waited for."""
        self._inflight = None
