"""Run one model exactly as the server does, in this process, with no server and no ports.

``load_model(model_dir)`` loads the model through the server's own core: config parsing,
normalisation, ``auto_complete_config`` and validation, Triton's ``initialize`` arguments,
one instance per ``instance_group`` count, the model's scheduler. Python models run
in-process (``breakpoint()`` and debuggers stop in ``execute``). A sync ``execute`` runs on
the thread that calls :meth:`ModelHandle.infer`, as the in-process direct BLS path runs it;
``async def execute``, decoupled models and batching or sequence schedulers go through the
core on the harness's event loop (a thread of its own). Closing the handle unloads the model
(``finalize``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import numpy as np

from modelyard.backends.loader import LoadOptions
from modelyard.backends.python.server.inprocess import InProcessInstance
from modelyard.backends.python.server.inprocess_runtime import InProcessRuntime
from modelyard.config.pbtxt import config_from_json, parse_config_text
from modelyard.core.api import InferenceServer
from modelyard.core.host import CoreHost
from modelyard.core.loader import read_config
from modelyard.core.model_version import ModelVersion
from modelyard.core.options import ServerOptions
from modelyard.core.validation import validate
from modelyard.errors import ModelyardError
from modelyard.scheduling.default import DefaultScheduler
from modelyard.serving.context import RequestContext
from modelyard.testing.host import Fake, HarnessHost
from modelyard.testing.loop import LoopThread, Runtimes
from modelyard.testing.responses import (
    ParamValue,
    Request,
    Responses,
    Sink,
    error_response,
    responses_of,
)
from modelyard.types import InferRequest, RequestedOutput, Tensor, datatype_of

DEFAULT_TIMEOUT_S = 60.0  # bounds every wait: a load, a request's final response, the close

T = TypeVar("T")


class LoadError(Exception):
    """The model did not load. ``reason`` is what the server would report (its log line and
    the repository index), with the file, line and source line of the mistake."""

    def __init__(self, model: str, reason: str) -> None:
        super().__init__(f"model '{model}' failed to load: {reason}")
        self.model = model
        self.reason = reason


def load_model(
    model_dir: str | Path,
    *,
    repository: str | Path | None = None,
    version: int | None = None,
    config: str | Mapping[str, Any] | None = None,
    bls: Mapping[str, Fake] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> ModelHandle:
    """Load the model in ``model_dir`` (a folder with ``config.pbtxt`` and ``<version>/model.py``,
    named after the folder) and return a handle to run it (close it, or use it as a context
    manager). ``repository``: a model repository whose models the model's BLS calls reach,
    each loaded in-process on its first call. ``version``: load only that version (default:
    what the config's version policy selects; requests go to the latest). ``config``: a
    config to use instead of ``config.pbtxt`` (a dict or JSON text, as Triton's load API
    takes it, or protobuf text). ``bls``: fakes for the models it calls, by name (see
    modelyard.testing.host). ``timeout``: seconds any wait may take (the load, a final
    response). Raises LoadError when the model does not load."""
    return ModelHandle(
        Path(model_dir).absolute(),
        Path(repository).absolute() if repository is not None else None,
        version,
        config,
        bls or {},
        timeout,
    )


class ModelHandle:
    """A loaded model (see :func:`load_model`)."""

    def __init__(
        self,
        model_dir: Path,
        repository: Path | None,
        version: int | None,
        config: str | Mapping[str, Any] | None,
        fakes: Mapping[str, Fake],
        timeout: float,
    ) -> None:
        self.name = model_dir.name
        self.timeout = timeout
        self._closed = True  # (until the loop runs: close() has nothing to stop before)
        if not model_dir.is_dir():
            raise LoadError(self.name, f"there is no model folder {model_dir}")
        self._closed = False
        self._loop = LoopThread(self.name)
        options = ServerOptions(
            repositories=[str(repository)] if repository is not None else [],
            control_mode="explicit",
            exit_timeout=timeout,
            load=LoadOptions(backend_settings={"python": {"execution-mode": "in-process"}}),
        )
        self._core = InferenceServer(options)
        self.host = HarnessHost(self._core, fakes, self._loop.loop)
        self._core.host = self.host  # type: ignore[assignment]  # what the instances get
        self._core_host = CoreHost(self._core)  # the model's own requests: the core's path
        Runtimes.push(self, InProcessRuntime(self.host, self._loop.loop))
        try:
            self._core.registry.scan()
            self._core.registry.locations[self.name] = model_dir  # the model under test wins
            override = _override(self.name, model_dir, config, version)
            self._call(self._core.load(self.name, override))
        except ModelyardError as e:
            entry = self._core.registry.entries.get(self.name)
            reason = entry.reason if entry is not None and entry.reason else e.message
            self.close()
            raise LoadError(self.name, reason) from None
        except BaseException:
            self.close()
            raise
        entry = self._core.registry.entries[self.name]
        self.version: int = version if version is not None else max(entry.versions)
        self._mv: ModelVersion = entry.versions[self.version]
        self.config: dict[str, Any] = json.loads(self._mv.config_json)
        # A sync execute of an in-process, default-scheduled, non-decoupled model runs right on
        # the caller's thread (the direct path); anything else goes through the core.
        self._direct = (
            not self._mv.decoupled
            and isinstance(self._mv.scheduler, DefaultScheduler)
            and all(_runs_sync(i) for i in self._mv.instances)
        )

    # -- requests -----------------------------------------------------------------------

    def infer(
        self,
        inputs: Mapping[str, Any],
        *,
        requested_outputs: Sequence[str] | None = None,
        parameters: Mapping[str, ParamValue] | None = None,
        correlation_id: int | str | None = None,
        flags: int = 0,
        request_id: str = "",
    ) -> Responses:
        """Run one request (``inputs``: numpy arrays by input name; str arrays travel as BYTES)
        and return every response it got (see Responses), waiting for the final one at most
        ``timeout`` seconds (TimeoutError). ``flags``: Triton's request flags (sequence start
        1, end 2); ``correlation_id``: the sequence id of a stateful model."""
        request = self._request(
            Request(inputs, requested_outputs, parameters, correlation_id, flags, request_id)
        )
        if self._direct:
            sink = Sink()
            ran = False

            def run(instance: Any, ctx: RequestContext) -> None:
                nonlocal ran
                ran = True
                sink.attach(ctx)
                instance.run_direct([ctx])

            try:
                self._core_host.run_direct(request, frozenset(), _runs_sync, run)
            except ModelyardError as e:  # the request does not fit the model
                return responses_of([error_response(request, e)])
            if ran:
                return sink.wait(self.timeout, self.name)
        return self._submit([request])[0]

    def infer_batch(self, requests: Iterable[Request | Mapping[str, Any]]) -> list[Responses]:
        """Run several requests in one ``execute`` call, on one instance, as a scheduler
        forms a batch (a request the server refuses gets its error response and stays out of
        the batch). Returns each request's responses, in order. The model's scheduler is
        bypassed: use ``infer`` for what a scheduler adds (a sequence's control inputs)."""
        batch = [r if isinstance(r, Request) else Request(r) for r in requests]
        core_requests = [self._request(r) for r in batch]
        sinks = [Sink() for _ in batch]
        contexts: list[RequestContext] = []
        for request, sink in zip(core_requests, sinks, strict=True):
            try:
                names = validate(request, self._mv.signature)
            except ModelyardError as e:
                sink.add(error_response(request, e))
                continue
            ctx = RequestContext(request, names, sink.add, batch_size=_batch_of(request, self._mv))
            ctx.stats = self._mv.stats
            contexts.append(ctx)
        limit = self._mv.signature.max_batch_size
        if limit > 0 and sum(ctx.batch_size for ctx in contexts) > limit:
            raise ValueError(
                f"the batch holds {sum(c.batch_size for c in contexts)} items, more than model "
                f"'{self.name}' takes (max_batch_size {limit})"
            )
        if contexts:
            self._run_batch(contexts)
        return [sink.wait(self.timeout, self.name) for sink in sinks]

    def _run_batch(self, contexts: list[RequestContext]) -> None:
        sched = self._mv.scheduler
        claimed = None
        if isinstance(sched, DefaultScheduler):
            claimed = _wait_for(lambda: sched.try_claim(lambda i: True), self.timeout, self.name)
        instance = claimed if claimed is not None else self._mv.instances[0]
        try:
            if _runs_sync(instance):
                assert isinstance(instance, InProcessInstance)
                instance.run_direct(contexts)
            else:
                from modelyard.scheduling.base import run_batch

                self._call(run_batch(instance, contexts, self._mv.stats))
        finally:
            if claimed is not None and isinstance(sched, DefaultScheduler):
                sched.release_claimed(claimed)

    def _submit(self, requests: list[InferRequest]) -> list[Responses]:
        """Through the core, on the loop (async execute, decoupled models, batchers)."""
        sinks = [Sink() for _ in requests]
        contexts: list[RequestContext | None] = [None] * len(requests)

        def start() -> None:
            for i, (request, sink) in enumerate(zip(requests, sinks, strict=True)):
                try:
                    contexts[i] = self._core.submit(request, sink.add)
                except ModelyardError as e:
                    sink.add(error_response(request, e))

        self._loop.loop.call_soon_threadsafe(start)
        try:
            return [sink.wait(self.timeout, self.name) for sink in sinks]
        except TimeoutError:
            for ctx in contexts:
                if ctx is not None:
                    self._loop.loop.call_soon_threadsafe(ctx.cancel)
            raise

    def _request(self, r: Request) -> InferRequest:
        if self._closed:
            raise RuntimeError(f"model '{self.name}' is closed")
        inputs = []
        for name, value in r.inputs.items():
            array = _array(value)
            inputs.append(Tensor(name, datatype_of(array.dtype), tuple(array.shape), array))
        outputs = [RequestedOutput(n) for n in r.requested_outputs] if r.requested_outputs else None
        return InferRequest(
            model_name=self.name,
            inputs=inputs,
            model_version=str(self.version),
            id=r.request_id,
            outputs=outputs,
            parameters=dict(r.parameters or {}),
            correlation_id=r.correlation_id if r.correlation_id is not None else 0,
            flags=r.flags,
        )

    # -- lifetime -----------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the harness's loop and wait for it (bounded)."""
        future = asyncio.run_coroutine_threadsafe(coro, self._loop.loop)
        try:
            return future.result(self.timeout)
        except TimeoutError:
            future.cancel()
            raise TimeoutError(
                f"model '{self.name}': no answer within {self.timeout:g} s"
            ) from None

    def close(self) -> None:
        """Unload the model (``finalize`` runs) and every model its BLS calls loaded."""
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self._core.stop())
        finally:
            Runtimes.pop(self)
            self._loop.stop(self.timeout)

    def __enter__(self) -> ModelHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<ModelHandle {self.name!r} {state}>"


# -- helpers ------------------------------------------------------------------------------


def _array(value: Any) -> np.ndarray[Any, Any]:
    array = np.asarray(value)
    if array.dtype.kind == "U":  # text travels as UTF-8 bytes, as clients send it
        array = np.vectorize(lambda s: s.encode(), otypes=[object])(array)
    elif array.dtype.kind == "S":
        array = array.astype(object)
    return array


def _runs_sync(instance: Any) -> bool:
    return isinstance(instance, InProcessInstance) and instance.sync_execute


def _batch_of(request: InferRequest, mv: ModelVersion) -> int:
    if mv.signature.max_batch_size > 0 and request.inputs and request.inputs[0].shape:
        return request.inputs[0].shape[0]
    return 1


def _wait_for(claim: Callable[[], T | None], timeout: float, name: str) -> T:
    """Claim an idle instance, waiting (bounded) while the instances are busy."""
    deadline = time.monotonic() + timeout
    while True:
        got = claim()
        if got is not None:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"every instance of model '{name}' stayed busy for {timeout:g} s")
        time.sleep(0.005)


def _override(name: str, model_dir: Path, config: Any, version: int | None) -> Any:
    """The config to load instead of config.pbtxt (None: config.pbtxt as it is)."""
    if config is None and version is None:
        return None
    if config is None:
        cfg = read_config(name, str(model_dir), None)
    elif isinstance(config, Mapping):
        cfg = config_from_json(json.dumps(config))
    elif config.lstrip().startswith("{"):
        cfg = config_from_json(config)
    else:
        cfg = parse_config_text(config, "<config>")
    if version is not None:
        cfg.version_policy.Clear()
        cfg.version_policy.specific.versions.append(version)
    return cfg
