"""What a backend needs of whoever hosts it: the seam between backends and the core.

The core implements :class:`ModelHost` for one server (core/host.py); tests pass fakes; a Ray
implementation can route the same calls across a cluster. Backends receive a host and never
import the core: BLS calls, model control, readiness and log lines all go through it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from modelyard.serving.context import RequestContext, ResponseCallback
from modelyard.tracing.tracer import Tracer
from modelyard.types import InferRequest, InferResponse


class ModelLogRecord(NamedTuple):
    """One log line of a model (level 0=INFO 1=WARNING 2=ERROR 3=VERBOSE, as pb_utils')."""

    level: int
    message: str
    filename: str  # the model's source file that logged it
    line: int
    instance: str  # the model instance that logged it ("" when unknown)


class ModelHost(Protocol):
    """What a backend needs of whoever hosts it (the core on one server, fakes in tests, a Ray
    cluster later). ``instance`` arguments are the backend's own Instance objects (typed
    loosely: this layer sits below the backends)."""

    # The trace sink: BLS calls count in ``tracer.call_graph``; a traced request's calls and
    # the spans its model opens join its trace (``InferRequest.trace``, ``ctx.trace``), and
    # ``tracer.activate`` makes a span current for plain OpenTelemetry API calls.
    tracer: Tracer
    # True where the host's event loop serves this one model (a Ray replica): an in-process
    # sync execute that has shown it is short and never calls the server runs right on the
    # loop, without the hop to its instance's thread (on one server, other models' requests
    # and the frontends share the loop, and such an execute only runs there for an
    # async_exec() made on it).
    execute_on_loop: bool

    def submit(
        self,
        request: InferRequest,
        on_response: ResponseCallback,
        chain: frozenset[str] = frozenset(),
        caller: str = "",
    ) -> RequestContext:
        """Run ``request`` on its model: every response goes to ``on_response``, the last
        with final=True. ``chain``: the instances blocked waiting on it (BLS deadlock
        detection); ``caller``: the instance whose sync execute waits on it. Raises
        ModelyardError when the request cannot be queued (unknown model, bad input)."""
        ...

    def is_decoupled(self, name: str, version: str = "") -> bool:
        """Whether the model version a request names is decoupled; ModelyardError when there
        is none."""
        ...

    def run_direct(
        self,
        request: InferRequest,
        chain: frozenset[str],
        accept: Callable[[Any], bool],
        run: Callable[[Any, RequestContext], None],
    ) -> list[InferResponse] | None:
        """The in-process fast path: when ``request``'s model is default-scheduled, not
        decoupled and has an idle instance that ``accept`` allows, claim that instance,
        validate the request (ModelyardError), call ``run(instance, ctx)`` on this thread and
        record the model's statistics; returns the responses it delivered meanwhile. None:
        nothing was run, take the ordinary path (``submit``). Called on a model's thread, or
        on the event loop (an in-process ``async_exec``), where it must not wait."""
        ...

    async def load_model(
        self, name: str, config: str | None, files: dict[str, bytes] | None
    ) -> None:
        """Load or reload a model for a model (in every control mode); ModelyardError."""
        ...

    async def unload_model(self, name: str, unload_dependents: bool) -> None: ...

    def model_ready(self, name: str, version: str = "") -> bool:
        """Loaded, ready and every instance live (runs no model code)."""
        ...

    async def check_model_ready(self, name: str, version: str = "") -> bool:
        """``model_ready``, and the model's own ``is_ready()`` (bounded)."""
        ...

    def log(self, record: ModelLogRecord) -> None:
        """A model's log line, at its file and line, by the server's log settings."""
        ...
