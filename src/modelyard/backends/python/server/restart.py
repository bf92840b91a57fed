"""Restarting a worker process that died, with exponential backoff.

The first crash after a worker has proved itself (it completed a batch, or ran for a while)
is restarted at once, so a rare crash costs only the requests it was running. Each further
crash or failed restart (``initialize`` raised, or the process died again) doubles the wait
before the next attempt, up to a maximum: a model that crashes on every request is held
back, and its requests fail at once meanwhile, instead of a busy loop of process starts that
would starve the other models. Once ``initialize`` succeeds the instance serves again.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from modelyard.errors import ModelyardError

log = logging.getLogger("modelyard")


@dataclass(frozen=True)
class RestartPolicy:
    """``--backend-config python,restart-backoff-seconds=N`` / ``restart-backoff-max-seconds=N``."""

    initial: float = 1.0  # wait before the second attempt in a row
    maximum: float = 30.0
    stable_after: float = 60.0  # a worker up this long has proved itself (as a served batch)

    def delay(self, failures: int) -> float:
        """Seconds to wait before the next attempt after ``failures`` failures in a row."""
        if failures <= 1:
            return 0.0
        return float(min(self.maximum, self.initial * 2 ** (failures - 2)))


def describe_exit(returncode: int | None) -> str:
    """How a worker process ended, for logs and reasons."""
    if returncode is None:
        return "closed its channel"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {-returncode} ({name})"
    return f"exited with code {returncode}"


class Supervisor:
    """Keeps one worker instance's restart state and runs its restart loop.

    ``attempt`` starts a fresh process and initializes the model (raises ModelyardError);
    ``reap`` waits for (or kills, with ``kill=True``) the current process and describes how
    it ended, or returns "" when there was none or it was killed here.
    """

    def __init__(
        self,
        instance_name: str,
        policy: RestartPolicy,
        attempt: Callable[[], Awaitable[None]],
        reap: Callable[[bool], Awaitable[str]],
    ):
        self.name = instance_name
        self.policy = policy
        self._attempt = attempt
        self._reap = reap
        self.failures = 0  # crashes and failed restarts in a row
        self.reason = ""  # why the instance is not healthy now ("" when it is)
        self.restarts = 0
        self.served = False  # this life completed a batch
        self._born = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        # Resolved when the attempt in progress ends (True: the instance serves again).
        self._outcome: asyncio.Future[bool] | None = None
        self._listener: Callable[[], None] | None = None

    @property
    def active(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def attempting(self) -> asyncio.Future[bool] | None:
        """The outcome of the attempt in progress, or None while none runs (backing off)."""
        fut = self._outcome
        return fut if fut is not None and not fut.done() else None

    def crashed(self, on_recovered: Callable[[], None]) -> None:
        """The worker died: start the restart loop (unless one runs already)."""
        if self.active:
            return
        self._listener = on_recovered
        stable = self.served or time.monotonic() - self._born >= self.policy.stable_after
        self.failures = 1 if stable else self.failures + 1
        self.reason = f"Stub process '{self.name}' is not healthy."
        loop = asyncio.get_running_loop()
        # Requests handed over from now until the first attempt ends wait for its outcome.
        self._outcome = loop.create_future()
        self._task = loop.create_task(self._run())

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._outcome is not None and not self._outcome.done():
            self._outcome.set_result(False)

    async def _run(self) -> None:
        try:
            await self._restart()
        finally:  # cancelled (the instance stops), or a bug: nobody may wait forever
            if self._outcome is not None and not self._outcome.done():
                self._outcome.set_result(False)

    def _backoff_text(self, delay: float) -> str:
        if not delay:
            return ""
        return f" in {delay:g} s (backing off: {self.failures} failures in a row)"

    async def _restart(self) -> None:
        how = await self._reap(False) or "went away"
        log.error(
            "worker process of model instance '%s' %s; restarting it%s",
            self.name,
            how,
            self._backoff_text(self.policy.delay(self.failures)),
        )
        # Triton's text first (its QA greps it), then ours.
        base = f"Stub process '{self.name}' is not healthy. Its worker {how}"
        failed = ""  # why the last attempt failed
        attempt = 0
        while True:
            attempt += 1
            delay = self.policy.delay(self.failures)
            if delay:  # requests fail at once meanwhile
                if self._outcome is not None and not self._outcome.done():
                    self._outcome.set_result(False)
                self.reason = f"{base}; restarting it{self._backoff_text(delay)}{failed}"
                await asyncio.sleep(delay)
            if self._outcome is None or self._outcome.done():
                self._outcome = asyncio.get_running_loop().create_future()
            self.reason = f"{base}; restarting it (attempt {attempt}){failed}"
            try:
                await self._attempt()
            except Exception as e:  # ModelyardError, or OSError from starting the process
                message = e.message if isinstance(e, ModelyardError) else f"{type(e).__name__}: {e}"
                died = await self._reap(True)
                self.failures += 1
                detail = f"the new worker {died}: {message}" if died else message
                failed = f"; attempt {attempt} failed: {detail}"
                log.error(
                    "restart of model instance '%s' failed (attempt %d; its worker %s; "
                    "next attempt in %g s): %s",
                    self.name,
                    attempt,
                    how,
                    self.policy.delay(self.failures),
                    detail,
                )
                self._outcome.set_result(False)
                continue
            self.restarts += 1
            self.served = False
            self._born = time.monotonic()
            self.reason = ""
            log.info("model instance '%s' restarted", self.name)
            self._outcome.set_result(True)
            if self._listener is not None:
                self._listener()
            return
