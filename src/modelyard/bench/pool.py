"""The parent's side of the worker processes: start them once, hand out plans, collect results."""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from modelyard.bench.load import START_TIMEOUT_S, StepPlan, WorkerResult, worker_main
from modelyard.bench.model import SetupError
from modelyard.bench.senders import SenderSpec

STOP_TIMEOUT_S = 10.0


class WorkerPool:
    def __init__(self, spec: SenderSpec, workers: int, connections: int) -> None:
        ctx = mp.get_context("spawn")  # no inherited gRPC or event-loop state
        self.size = workers
        self.quota: Any = ctx.Value("q", 0)  # request-count mode: requests left in the step
        self.progress: Any = ctx.Array("q", workers, lock=False)
        self._results: Any = ctx.Queue()
        self._commands: list[Any] = [ctx.Queue() for _ in range(workers)]
        self._procs = [
            ctx.Process(
                target=worker_main,
                args=(
                    spec,
                    i,
                    connections,
                    self._commands[i],
                    self._results,
                    self.progress,
                    self.quota,
                ),
                name=f"modelyard-bench-{i}",
                daemon=True,
            )
            for i in range(workers)
        ]
        for proc in self._procs:
            proc.start()
        try:
            self._await_ready()
        except BaseException:
            self.close()
            raise

    def _await_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        for _ in self._procs:
            kind, worker, message = self._get(deadline, "start")
            if kind != "ready":
                raise SetupError(f"client worker {worker} failed to start: {message}")

    def _get(self, deadline: float, what: str) -> tuple[str, int, Any]:
        while True:
            try:
                item: tuple[str, int, Any] = self._results.get(timeout=0.1)
                return item
            except queue.Empty:
                pass
            dead = [p.name for p in self._procs if p.exitcode not in (None, 0)]
            if dead:
                raise SetupError(
                    f"client worker(s) {dead} died (exit codes {[p.exitcode for p in self._procs]})"
                )
            if time.monotonic() > deadline:
                raise SetupError(f"client workers did not {what} within the time allowed")

    def run(
        self,
        plans: list[StepPlan | None],
        deadline: float,
        tick: Callable[[], None] = lambda: None,
    ) -> list[WorkerResult]:
        """Send each worker its plan (None: sits this step out) and collect the results,
        calling ``tick`` about ten times a second meanwhile."""
        self.progress[:] = [0] * self.size  # a worker sitting this step out shows 0, not its last
        busy = 0
        for command, plan in zip(self._commands, plans, strict=True):
            if plan is not None:
                command.put(plan)
                busy += 1
        results: list[WorkerResult] = []
        while len(results) < busy:
            tick()
            try:
                kind, worker, payload = self._results.get(timeout=0.1)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise SetupError(
                        "client workers did not finish the step within the time allowed"
                    ) from None
                if any(p.exitcode not in (None, 0) for p in self._procs):
                    raise SetupError("a client worker died during the step") from None
                continue
            if kind != "result":
                raise SetupError(f"client worker {worker} failed: {payload}")
            results.append(payload)
        return results

    def close(self) -> None:
        for proc, command in zip(self._procs, self._commands, strict=True):
            if proc.is_alive():
                command.put(None)
        for proc in self._procs:
            proc.join(STOP_TIMEOUT_S)
        for proc in self._procs:
            if proc.is_alive():  # our own child, by its handle
                proc.terminate()
                proc.join(STOP_TIMEOUT_S)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
