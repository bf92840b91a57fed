"""InferenceServer: the one in-process API that frontends and BLS both use."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from modelyard.config.render import model_metadata as render_metadata
from modelyard.core import health
from modelyard.core.host import CoreHost
from modelyard.core.model_control import ModelControl
from modelyard.core.model_version import ModelVersion
from modelyard.core.options import EXTENSIONS, ServerOptions, parse_version
from modelyard.core.placement import ControlEvents, LocalPlacement, VersionPlacement
from modelyard.core.registry import ModelRegistry
from modelyard.core.response_cache import ResponseCache
from modelyard.core.settings import LogSettings
from modelyard.core.shutdown import stop_all, wait_retiring
from modelyard.core.validation import validate
from modelyard.errors import (
    InvalidArgument,
    ModelyardError,
    NotFound,
    Unsupported,
)
from modelyard.scheduling.rate_limiter import RateLimiter
from modelyard.serving.context import RequestContext
from modelyard.serving.shm_regions import SharedMemoryManager, uses_shared_memory
from modelyard.tracing.tracer import Tracer
from modelyard.types import InferRequest, InferResponse

log = logging.getLogger("modelyard")

SERVER_VERSION = "2.51.0"


class InferenceServer:
    """The one in-process API: inference, health, metadata, statistics, settings and shared
    memory here; loading and unloading models delegated to its :class:`ModelControl`, which
    starts a load's versions where ``placement`` says (this process unless told otherwise)
    and tells ``events`` when the serving versions change."""

    def __init__(
        self,
        options: ServerOptions,
        placement: VersionPlacement | None = None,
        events: ControlEvents | None = None,
    ):
        self.options = options
        self.registry = ModelRegistry(options.repositories, options.namespacing)
        # Tracing: settings, sampling, sinks; the last finished traces and the BLS call graph
        # (what the dashboard reads).
        self.tracer = Tracer(options.trace)
        self.traces = self.tracer.recent
        self.call_graph = self.tracer.call_graph
        self.host = CoreHost(self)  # what the backends get of the core
        self.log_settings = LogSettings()
        self.poller: Any = None  # RepositoryPoller in poll mode
        self._live = True
        self._started = False
        self._stopping = False
        self.shared_memory = SharedMemoryManager(options.allow_client_shm)
        self.response_cache = ResponseCache(options.cache_bytes) if options.cache_bytes else None
        # --rate-limit=execution_count: one limiter for the instances of every model
        limits = options.rate_limit
        self.rate_limiter = RateLimiter(limits.explicit()) if limits.enabled else None
        self.control = ModelControl(
            self, placement or LocalPlacement(), events, self.response_cache
        )

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> list[str]:
        """Load the models the control mode asks for; return the names that failed.
        ValueError: the trace exporter cannot be set up."""
        self.tracer.start()
        self.registry.scan()
        mode = self.options.control_mode
        if mode == "explicit":
            names = self.options.load_models
            if "*" in names:
                names = sorted(self.registry.locations)
            else:  # (with namespacing, a name's copy in every repository)
                names = [
                    k for n in names for k in self.registry.keys_named(n, self.registry.locations)
                ]
        else:
            names = sorted(self.registry.locations)
        if mode == "poll":
            from modelyard.core.polling import RepositoryPoller

            self.poller = RepositoryPoller(self, self.options.poll_secs)
            self.poller.prime()
        from modelyard.core.ensembles import ensembles_last

        groups = ensembles_last(self.registry.locations, names)  # step models before ensembles
        results: list[Any] = []
        for group in groups:
            loads = (self.control.load(n) for n in group)
            results += await asyncio.gather(*loads, return_exceptions=True)
        names = [n for group in groups for n in group]
        failed = [n for n, r in zip(names, results, strict=False) if isinstance(r, BaseException)]
        self.began_serving()
        if self.poller is not None:
            self.poller.start()
        return failed

    def began_serving(self) -> None:
        """Ready from now on, as once :meth:`start`'s loads are over: for a core whose models
        come another way (a Ray replica loads its one model; a node's frontends mirror the
        cluster's)."""
        self._started = True

    async def stop(self) -> bool:
        """Not ready at once (still live, as Triton), not live once shut down; True if clean."""
        self._stopping = True
        try:
            return await self.shut_down()
        finally:
            self._live = False

    async def shut_down(self) -> bool:
        """What stopping does (core/shutdown.py); a core of another kind does its own."""
        if self.poller is not None:
            await self.poller.stop()
        versions = [mv for e in self.registry.entries.values() for mv in e.versions.values()]
        timeout = self.options.exit_timeout
        clean, retired = await asyncio.gather(
            stop_all(versions, timeout), wait_retiring(self.control.retiring, timeout)
        )
        self.control.loads.release_all()
        self.shared_memory.close()
        self.tracer.close()
        return clean and retired

    # -- model control (core/model_control.py) ----------------------------------------------

    async def load(
        self,
        name: str,
        override: Any | None = None,
        files: dict[str, bytes] | None = None,
        from_model: bool = False,
    ) -> None:
        """Load (or reload) ``name`` now, whatever the control mode; raises the load's
        ModelyardError (see ``ModelControl.load``)."""
        await self.control.load(name, override, files, from_model)

    async def load_model(
        self,
        name: str,
        config: str | None = None,
        files: dict[str, bytes] | None = None,
        from_model: bool = False,
    ) -> None:
        """The model repository extension's load (explicit mode; models may always)."""
        await self.control.load_model(name, config, files, from_model)

    async def unload_model(
        self, name: str, unload_dependents: bool = False, from_model: bool = False
    ) -> None:
        await self.control.unload_model(name, unload_dependents, from_model)

    async def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        return await self.control.repository_index(ready_only)

    # -- health and metadata -----------------------------------------------------------------

    @property
    def started(self) -> bool:
        """The start-up loads are over."""
        return self._started

    def is_live(self) -> bool:
        return self._live

    def is_ready(self) -> bool:
        """Started, not stopping, and with strict readiness every model ready (instances
        live; the models' own is_ready() is not asked: see check_ready)."""
        if not (self._live and self._started) or self._stopping:
            return False
        return not self.options.strict_readiness or all(
            map(health.counts_as_ready, self.registry.entries.values())
        )

    async def check_ready(self) -> bool:
        """Server readiness as Triton 26 answers it: ``is_ready``, and with strict readiness
        the models' own is_ready() too."""
        ready = self.is_ready()
        if not ready or not self.options.strict_readiness:
            return ready
        results = await asyncio.gather(*map(health.check_entry, self.registry.entries.values()))
        return all(results)

    def server_metadata(self) -> dict[str, Any]:
        return {
            "name": self.options.server_id,
            "version": SERVER_VERSION,
            "extensions": [
                e for e in EXTENSIONS if e != "system_shared_memory" or self.shared_memory.enabled
            ],
        }

    def get_version(self, name: str, version: str = "") -> ModelVersion:
        """The model version a request names: the latest ready one when version is ""."""
        v = parse_version(version) if version else None
        entry = self.registry.find(name)  # (with namespacing: Triton's answers for a name)
        if entry is None or (not entry.versions and entry.state == ""):  # (a failed ensemble)
            who = name if entry is None else self.registry.label(entry.name)
            raise NotFound(f"Request for unknown model: '{who}' is not found")
        if v is None:
            if not entry.versions:
                who = self.registry.label(entry.name)
                raise NotFound(f"Request for unknown model: '{who}' has no available versions")
            return entry.versions[max(entry.versions)]
        mv = entry.versions.get(v)
        if mv is None:
            who = self.registry.label(entry.name)
            raise NotFound(f"Request for unknown model: '{who}' version {v} is not found")
        return mv

    def _ready_version(self, name: str, version: str) -> ModelVersion | None:
        try:
            mv = self.get_version(name, version)
        except ModelyardError:
            return None
        entry = self.registry.lookup(name)
        return mv if entry is not None and entry.state == "READY" else None

    def model_ready(self, name: str, version: str = "") -> bool:
        """Loaded, READY, and every instance live and initialized (no model code runs)."""
        mv = self._ready_version(name, version)
        return mv is not None and not health.version_trouble(mv)

    async def check_model_ready(self, name: str, version: str = "") -> bool:
        """``model_ready``, and the model's own is_ready() (Triton 26.03), bounded."""
        mv = self._ready_version(name, version)
        return mv is not None and not await health.check_version(mv)

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        mv = self.get_version(name, version)
        if version:
            versions = [version]
        else:
            entry = self.registry.lookup(name)
            versions = [str(v) for v in sorted(entry.versions)] if entry else [str(mv.version)]
        return render_metadata(mv.config, versions)

    def model_config(self, name: str, version: str = "") -> Any:
        return self.get_version(name, version).config

    def model_config_json(self, name: str, version: str = "") -> str:
        return self.get_version(name, version).config_json

    def is_decoupled(self, name: str, version: str = "") -> bool:
        return self.get_version(name, version).decoupled

    # -- inference ---------------------------------------------------------------------------

    def _prepare(
        self, request: InferRequest, on_response: Any, chain: frozenset[str] = frozenset()
    ) -> tuple[ModelVersion, RequestContext]:
        mv = self.get_version(request.model_name, request.model_version)
        try:
            output_names = validate(request, mv.signature)
        except ModelyardError:
            # Triton's statistics leave a refused request out; the dashboard counts it.
            mv.stats.live.refusal(time.monotonic_ns())
            raise
        if not request.model_version:
            request.model_version = str(mv.version)
        # No closure over ctx here: a reference cycle would keep the request (and the shared
        # memory its tensors view) alive until the cyclic GC runs.
        ctx = RequestContext(
            request, output_names, on_response, chain=chain, batch_size=_batch_of(request, mv)
        )
        ctx.stats = mv.stats
        ctx.t_received = time.monotonic_ns()
        if request.trace is not None:
            ctx.trace = request.trace.start_request(
                request, mv.version, mv.decoupled, mv.platform != "ensemble"
            )
        return mv, ctx

    async def infer(self, request: InferRequest) -> InferResponse:
        """One request, one response. Raises ModelyardError for any failure."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[InferResponse] = loop.create_future()

        def on_response(resp: InferResponse) -> None:
            if not fut.done():
                fut.set_result(resp)

        shm_out = self.shared_memory.bind(request) if uses_shared_memory(request) else None
        mv, ctx = self._prepare(request, on_response)
        if mv.decoupled:
            _abandon(ctx)
            mv.stats.live.refusal(time.monotonic_ns())
            raise Unsupported(
                "ModelInfer RPC doesn't support models with decoupled transaction policy"
            )
        _submit(mv, ctx)
        try:
            resp = await fut
        except asyncio.CancelledError:
            ctx.cancel()
            raise
        if resp.error is not None:
            raise resp.error
        if shm_out:
            self.shared_memory.write_outputs(resp, shm_out)
        return resp

    def submit(
        self,
        request: InferRequest,
        on_response: Any,
        chain: frozenset[str] = frozenset(),
        caller: str = "",
    ) -> RequestContext:
        """Queue a request; every response goes to ``on_response`` (the last has final=True).

        Raises ModelyardError when the request cannot be queued (unknown model, bad input).
        """
        mv, ctx = self._prepare(request, on_response, chain)
        ctx.nested = True  # BLS calls and ensemble steps come this way, clients never do
        if caller:
            from modelyard.serving.deadlock import register, release

            ctx.caller = caller
            register(ctx)
            try:
                _submit(mv, ctx)
            except BaseException:
                release(ctx)
                raise
            return ctx
        _submit(mv, ctx)
        return ctx

    async def infer_stream_one(
        self, request: InferRequest, chain: frozenset[str] = frozenset()
    ) -> InferResponse:
        """The first response of a request (a BLS exec); errors come back as ``response.error``."""
        first: InferResponse | None = None
        try:
            async for resp in self.infer_stream(request, chain):
                if first is None:
                    first = resp
                if resp.final:
                    break
        except ModelyardError as e:
            return InferResponse(request.model_name, request.model_version, request.id, error=e)
        return first or InferResponse(request.model_name, request.model_version, request.id)

    async def infer_stream(
        self, request: InferRequest, chain: frozenset[str] = frozenset()
    ) -> AsyncIterator[InferResponse]:
        """Every response of a request (decoupled or not), errors as ``response.error``."""
        queue: asyncio.Queue[InferResponse] = asyncio.Queue()
        shm_out = self.shared_memory.bind(request) if uses_shared_memory(request) else None
        mv, ctx = self._prepare(request, queue.put_nowait, chain)
        _submit(mv, ctx)
        try:
            while True:
                resp = await queue.get()
                if shm_out and resp.error is None:
                    try:
                        self.shared_memory.write_outputs(resp, shm_out)
                    except ModelyardError as e:
                        resp = InferResponse(
                            resp.model_name, resp.model_version, resp.id, error=e, final=resp.final
                        )
                yield resp
                if resp.final:
                    return
        finally:
            if not ctx.done:
                ctx.cancel()

    # -- statistics and settings ------------------------------------------------------------

    async def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """Triton's statistics extension (a coroutine: on a cluster it asks the replicas)."""
        if not name:
            stats = [
                mv.stats.as_dict()
                for e in sorted(self.registry.entries.values(), key=lambda e: e.name)
                for _, mv in sorted(e.versions.items())
            ]
            return {"model_stats": stats}
        entry = self.registry.lookup(name)
        if entry is None or not entry.versions:
            raise InvalidArgument(f"requested model '{name}' is not available")
        if version:
            v = parse_version(version)
            if v not in entry.versions:
                raise InvalidArgument(
                    f"requested model version is not available for model '{name}'"
                )
            return {"model_stats": [entry.versions[v].stats.as_dict()]}
        return {"model_stats": [mv.stats.as_dict() for _, mv in sorted(entry.versions.items())]}

    async def replicas(self) -> dict[tuple[str, str], list[dict[str, Any]]]:
        """Where each version's replicas run: none here (a Ray frontend's core has them)."""
        return {}

    def live_statistics(self) -> list[dict[str, Any]]:
        """Per loaded version, the last minute second by second (``serving/live.py``) and
        its counts since it loaded (``since_load``): what the dashboard shows."""
        out = []
        now = time.monotonic_ns()
        for e in sorted(self.registry.entries.values(), key=lambda e: e.name):
            for v, mv in sorted(e.versions.items()):
                stats = mv.stats
                out.append(
                    {
                        "name": e.name,
                        "version": str(v),
                        "success": stats.success.count,
                        "fail": stats.fail.count,
                        "inference_count": stats.inference_count,
                        "execution_count": stats.execution_count,
                        "refused_total": stats.live.refused_total,
                        "since_load": True,
                        **stats.live.snapshot(now),
                    }
                )
        return out

    # -- system and CUDA shared memory (serving/shm_regions.py, cuda_regions.py) -------------

    def shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.shared_memory.register(name, key, offset, byte_size)

    def shm_unregister(self, name: str = "") -> None:
        self.shared_memory.unregister(name)

    def shm_status(self, name: str = "") -> list[dict[str, Any]]:
        return self.shared_memory.status(name)

    def cuda_shm_register(self, name: str, handle: bytes, device_id: int, byte_size: int) -> None:
        self.shared_memory.cuda_register(name, handle, device_id, byte_size)

    def cuda_shm_unregister(self, name: str = "") -> None:
        self.shared_memory.cuda_unregister(name)

    def cuda_shm_status(self, name: str = "") -> list[dict[str, Any]]:
        return self.shared_memory.cuda_status(name)

    def get_log_settings(self) -> dict[str, Any]:
        return self.log_settings.as_dict()

    def update_log_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        self.log_settings.update(settings)
        return self.log_settings.as_dict()

    def get_trace_settings(self, model: str = "") -> dict[str, Any]:
        if model and self.registry.lookup(model) is None:
            raise InvalidArgument(f"Request for unknown model : {model}")
        return self.tracer.get_settings(model)

    def update_trace_settings(self, model: str, settings: dict[str, Any]) -> dict[str, Any]:
        """``settings``: parsed by ``modelyard.tracing.settings.parse_update`` (levels as
        bits, numbers as ints, None to clear)."""
        if model and self.registry.lookup(model) is None:
            raise InvalidArgument(f"Request for unknown model : {model}")
        return self.tracer.update_settings(model, settings)


def _submit(mv: ModelVersion, ctx: RequestContext) -> None:
    """Hand ``ctx`` to the version's scheduler; a request it refuses drops its trace."""
    try:
        mv.scheduler.submit(ctx)
    except BaseException:
        _abandon(ctx)
        raise


def _abandon(ctx: RequestContext) -> None:
    if ctx.trace is not None:
        ctx.trace.abandon()


def _batch_of(request: InferRequest, mv: ModelVersion) -> int:
    if mv.signature.max_batch_size > 0 and request.inputs:
        return request.inputs[0].shape[0] if request.inputs[0].shape else 1
    return 1
