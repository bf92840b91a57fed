"""Worker processes and the load they drive, one step at a time.

Each worker is a spawned process with one asyncio loop (uvloop where installed) and one
sender, kept for the whole sweep. For a step it gets a plan: a number of closed-loop lanes
(concurrency: each sends its next request as soon as the last one is answered), or a share
of an open-loop request rate. All workers share CLOCK_MONOTONIC, so one plan's instants
(start, end of warm-up, end) line up across processes. As perf_analyzer does, a request
counts for the step when it completes inside the measurement window; the worker returns
every counted latency, so the parent computes exact percentiles over all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import queue
import random
import time
import traceback
from array import array
from dataclasses import dataclass, field
from multiprocessing.sharedctypes import Synchronized
from typing import Any

from modelyard.bench.llm_sender import LlmSpec, Streamed, TokenSamples, TokenSender
from modelyard.bench.senders import RequestFailed, Sender, SenderSpec, SequenceSpec, make_sender
from modelyard.bench.wire import Sequence

AnySender = Sender | TokenSender

ERROR_BACKOFF_S = 0.01  # after a failed request, so a broken server is not hammered
DELAY_SLACK_NS = 1_000_000  # request-rate mode: a send this late counts as delayed
START_TIMEOUT_S = 120.0  # spawning and importing on a loaded machine
MAX_ERROR_SAMPLES = 5


@dataclass(frozen=True)
class StepPlan:
    """One worker's share of a step. Instants are time.monotonic_ns() values."""

    t0_ns: int  # load starts (warm-up)
    t_meas_ns: int  # measurement starts
    t_end_ns: int | None  # measurement ends; None: when the shared request quota is used up
    lanes: int = 0  # concurrency mode
    rate: float = 0.0  # request-rate mode: this worker's requests per second
    phase_s: float = 0.0  # constant rate: offset of this worker's first request
    poisson: bool = False
    seed: int = 0
    lane_offset: int = 0  # sequence models: this worker's first lane among all lanes
    total_lanes: int = 0  # sequence models: the step's concurrency


@dataclass
class WorkerResult:
    latencies_ns: bytes = b""  # int64 array of the counted requests' latencies
    requests: int = 0  # succeeded inside the window
    responses: int = 0
    errors: int = 0  # failed inside the window
    warmup_errors: int = 0
    error_samples: dict[str, int] = field(default_factory=dict)
    sent: int = 0  # request-rate mode: sent inside the window
    delayed: int = 0
    last_end_ns: int = 0  # latest counted completion: ends a request-count window
    cpu_s: float = 0.0  # this process's CPU time over the measurement
    unanswered: int = 0
    sequences: int = 0  # sequence models: sequences whose last request counted
    tokens: TokenSamples | None = None  # LLM mode


def _cpu_s() -> float:
    return time.process_time()  # every thread of this process (grpc's included)


class _Recorder:
    """Counts one worker's requests for one step."""

    def __init__(
        self, plan: StepPlan, quota: Synchronized[int], timeout_s: float, llm: bool = False
    ) -> None:
        self.plan = plan
        self.quota = quota
        self.timeout_s = timeout_s
        self.latencies = array("q")
        self.result = WorkerResult(tokens=TokenSamples() if llm else None)
        self._cpu0: float | None = None
        self.orphaned = False  # the parent is gone: stop sending

    def stopped(self, at: int | None = None) -> bool:
        """Whether a request sent now (or at ``at``) would start after the step's end."""
        if self.orphaned:
            return True
        if self.plan.t_end_ns is None:
            return self.quota.value <= 0
        return (time.monotonic_ns() if at is None else at) >= self.plan.t_end_ns

    def _counts(self, end_ns: int) -> bool:
        """Whether a request completing at ``end_ns`` is measured (and takes a quota slot)."""
        if end_ns < self.plan.t_meas_ns:
            return False
        if self.plan.t_end_ns is not None:
            return end_ns <= self.plan.t_end_ns
        with self.quota.get_lock():
            if self.quota.value <= 0:
                return False
            self.quota.value -= 1
            return True

    def succeeded(
        self,
        start_ns: int,
        end_ns: int,
        responses: int,
        ends_sequence: bool,
        streamed: Streamed | None = None,
    ) -> None:
        if self._counts(end_ns):
            self.latencies.append(end_ns - start_ns)
            self.result.requests += 1
            self.result.responses += responses
            self.result.sequences += ends_sequence
            self.result.last_end_ns = max(self.result.last_end_ns, end_ns)
            if streamed is not None and self.result.tokens is not None:
                self.result.tokens.add(start_ns, streamed)

    def failed(self, end_ns: int, message: str) -> None:
        if self._counts(end_ns):
            self.result.errors += 1
            self.result.last_end_ns = max(self.result.last_end_ns, end_ns)
        elif end_ns < self.plan.t_meas_ns:
            self.result.warmup_errors += 1
        else:
            return  # after the window: neither measured nor warm-up
        samples = self.result.error_samples
        if message in samples or len(samples) < MAX_ERROR_SAMPLES:
            samples[message] = samples.get(message, 0) + 1

    async def watch(self, progress: Any, index: int) -> None:
        """Marks CPU time at the window's start, publishes progress and watches the parent
        until cancelled."""
        parent = mp.parent_process()
        await _sleep_until(self.plan.t_meas_ns)
        self._cpu0 = _cpu_s()
        while True:
            progress[index] = self.result.requests + self.result.errors
            if parent is not None and not parent.is_alive():
                self.orphaned = True
            await asyncio.sleep(0.1)

    def finish(self) -> WorkerResult:
        if self._cpu0 is not None:
            self.result.cpu_s = _cpu_s() - self._cpu0
        self.result.latencies_ns = self.latencies.tobytes()
        return self.result


async def _sleep_until(t_ns: int) -> None:
    delay = (t_ns - time.monotonic_ns()) / 1e9
    if delay > 0:
        await asyncio.sleep(delay)


async def _send(
    sender: AnySender, rec: _Recorder, index: int, sequence: Sequence | None = None
) -> bool:
    start = time.monotonic_ns()
    try:
        answer = await sender.send(index, sequence)
    except RequestFailed as exc:
        rec.failed(time.monotonic_ns(), str(exc))
        return False
    if isinstance(answer, Streamed):
        rec.succeeded(start, answer.end_ns, answer.responses, False, answer)
    else:
        rec.succeeded(start, answer[1], answer[0], sequence is not None and sequence[2])
    return True


async def _closed_loop(
    sender: AnySender, rec: _Recorder, indices: tuple[int, ...], first: int
) -> None:
    plan = rec.plan
    counter = iter(range(first, 1 << 62))

    async def lane() -> None:
        await _sleep_until(plan.t0_ns)
        while not rec.stopped():
            if not await _send(sender, rec, indices[next(counter) % len(indices)]):
                await asyncio.sleep(ERROR_BACKOFF_S)

    await _drain([asyncio.ensure_future(lane()) for _ in range(plan.lanes)], rec)


def sequence_id(seq: SequenceSpec, lanes: int, lane: int, j: int) -> int:
    """The correlation id of ``lane``'s ``j``-th sequence: lanes keep distinct residues modulo
    ``lanes``, so sequences in flight together never share an id, even when ids wrap."""
    n = lane + lanes * j
    if seq.id_end is not None:
        n %= (seq.id_end - seq.id_start) // lanes * lanes
    return seq.id_start + n


def sequence_length(seq: SequenceSpec, stream_length: int, rng: random.Random) -> int:
    if seq.length is None:
        return stream_length
    return max(1, round(seq.length * rng.uniform(1 - seq.variation, 1 + seq.variation)))


async def _sequence_loop(
    sender: AnySender, rec: _Recorder, spec: SenderSpec, seq: SequenceSpec
) -> None:
    """Each lane sends whole sequences, one request at a time. A lane told to stop sends its
    next request as its sequence's last, so the server holds no sequence open."""
    plan = rec.plan
    rng = random.Random(plan.seed)

    async def lane(g: int) -> None:
        await _sleep_until(plan.t0_ns)
        j = 0
        while not rec.stopped():
            corrid = sequence_id(seq, plan.total_lanes, g, j)
            stream = spec.streams[(g + plan.total_lanes * j) % len(spec.streams)]
            length = sequence_length(seq, len(stream), rng)
            j += 1
            for step in range(length):
                last = step == length - 1 or rec.stopped()
                if not await _send(
                    sender, rec, stream[step % len(stream)], (corrid, step == 0, last)
                ):
                    await asyncio.sleep(ERROR_BACKOFF_S)
                if last:
                    break

    lanes = range(plan.lane_offset, plan.lane_offset + plan.lanes)
    await _drain([asyncio.ensure_future(lane(g)) for g in lanes], rec)


async def _open_loop(
    sender: AnySender, rec: _Recorder, indices: tuple[int, ...], first: int
) -> None:
    plan = rec.plan
    rng = random.Random(plan.seed)
    gap_ns = 1e9 / plan.rate
    due = plan.t0_ns + plan.phase_s * 1e9
    in_flight: set[asyncio.Future[bool]] = set()
    k = first
    while not rec.stopped(at=int(due)):
        await _sleep_until(int(due))
        if due >= plan.t_meas_ns and (plan.t_end_ns is None or due <= plan.t_end_ns):
            rec.result.sent += 1
            if time.monotonic_ns() - due > DELAY_SLACK_NS:
                rec.result.delayed += 1
        task = asyncio.ensure_future(_send(sender, rec, indices[k % len(indices)]))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
        k += 1
        due += rng.expovariate(1.0) * gap_ns if plan.poisson else gap_ns
    await _drain(list(in_flight), rec)


async def _drain(tasks: list[asyncio.Future[Any]], rec: _Recorder) -> None:
    """Waits for the requests still in flight, at most one request timeout past the end."""
    if not tasks:
        return
    end = rec.plan.t_end_ns
    limit = None if end is None else max(0.0, (end - time.monotonic_ns()) / 1e9)
    timeout = None if limit is None else limit + rec.timeout_s + 5.0
    _, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in pending:
        task.cancel()
    rec.result.unanswered = len(pending)


async def run_step(
    sender: AnySender, spec: SenderSpec, plan: StepPlan, worker: int, quota: Any, progress: Any
) -> WorkerResult:
    rec = _Recorder(plan, quota, spec.timeout_s, isinstance(spec, LlmSpec))
    progress[worker] = 0
    watcher = asyncio.ensure_future(rec.watch(progress, worker))
    first = worker * 7919  # workers start at different payloads, so all of them get sent
    try:
        if plan.lanes and spec.sequence is not None:
            await _sequence_loop(sender, rec, spec, spec.sequence)
        elif plan.lanes:
            await _closed_loop(sender, rec, spec.streams[0], first)
        elif plan.rate > 0:
            await _open_loop(sender, rec, spec.streams[0], first)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    result = rec.finish()
    progress[worker] = result.requests + result.errors
    return result


def worker_main(
    spec: SenderSpec,
    worker: int,
    connections: int,
    commands: Any,
    results: Any,
    progress: Any,
    quota: Any,
) -> None:
    """A worker process: build the sender, then run the plans it is sent until told to stop
    (a None), or until its parent is gone."""
    try:
        import uvloop

        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)

    async def build() -> AnySender:
        if isinstance(spec, LlmSpec):
            return TokenSender(spec, connections)
        return make_sender(spec, connections)

    try:
        sender = loop.run_until_complete(build())
    except Exception as exc:
        results.put(("error", worker, f"{type(exc).__name__}: {exc}"))
        return
    results.put(("ready", worker, None))
    parent = mp.parent_process()
    try:
        while parent is None or parent.is_alive():
            try:
                plan = commands.get(timeout=1.0)
            except queue.Empty:
                continue
            if plan is None:
                break
            try:
                result = loop.run_until_complete(
                    run_step(sender, spec, plan, worker, quota, progress)
                )
            except Exception:
                results.put(("error", worker, traceback.format_exc(limit=5)))
                break
            results.put(("result", worker, result))
    except KeyboardInterrupt:
        pass  # Ctrl-C reaches the whole process group: the parent reports it
    finally:
        loop.run_until_complete(sender.close())
        loop.close()
