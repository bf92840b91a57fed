"""InferenceServer: the one in-process API that frontends and BLS both use."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from modelyard.backends.base import RequestContext
from modelyard.config.render import model_metadata as render_metadata
from modelyard.core.bls import CoreHandlers
from modelyard.core.lifecycle import LoadOptions, ModelVersion, load_model
from modelyard.core.registry import ModelRegistry
from modelyard.core.settings import LogSettings, TraceSettings
from modelyard.core.validation import validate
from modelyard.errors import (
    InvalidArgument,
    ModelyardError,
    NotFound,
    Unavailable,
    Unsupported,
)
from modelyard.types import InferRequest, InferResponse

log = logging.getLogger("modelyard")

SERVER_VERSION = "2.51.0"
EXTENSIONS = [
    "classification", "sequence", "model_repository", "model_repository(unload_dependents)",
    "schedule_policy", "model_configuration", "cuda_shared_memory",
    "binary_tensor_data", "parameters", "statistics", "trace", "logging",
]  # fmt: skip


@dataclass
class ServerOptions:
    repositories: list[str] = field(default_factory=list)
    control_mode: str = "none"  # none | explicit | poll
    load_models: list[str] = field(default_factory=list)
    server_id: str = "triton"
    strict_readiness: bool = True
    exit_on_error: bool = False
    exit_timeout: float = 30.0
    load: LoadOptions = field(default_factory=LoadOptions)


def parse_version(version: str) -> int | None:
    if version == "":
        return None
    if not (version.isascii() and version.isdigit()):
        raise InvalidArgument(
            f"failed to get model version from specified version string '{version}' "
            "(details: stol), version should be an integral value > 0"
        )
    return int(version)


class InferenceServer:
    def __init__(self, options: ServerOptions):
        self.options = options
        self.registry = ModelRegistry(options.repositories)
        self.handlers = CoreHandlers(self)
        self.log_settings = LogSettings()
        self.trace_settings = TraceSettings()
        self._live = True
        self._started = False

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> list[str]:
        """Load the models the control mode asks for; return the names that failed."""
        self.registry.scan()
        mode = self.options.control_mode
        if mode == "explicit":
            names = self.options.load_models
            if "*" in names:
                names = sorted(self.registry.locations)
        else:
            names = sorted(self.registry.locations)
        results = await asyncio.gather(*(self._load(n) for n in names), return_exceptions=True)
        failed = [n for n, r in zip(names, results, strict=False) if isinstance(r, BaseException)]
        self._started = True
        return failed

    async def _load(self, name: str, override: Any | None = None) -> None:
        location = self.registry.locations.get(name)
        if location is None and override is None:
            raise ModelyardError(f"failed to load '{name}', failed to poll from model repository")
        entry = self.registry.entry(name)
        if name in self.registry.errors and override is None:
            entry.state, entry.reason = "UNAVAILABLE", self.registry.errors[name]
            raise ModelyardError(f"failed to load '{name}': {self.registry.errors[name]}")
        entry.state, entry.reason = "LOADING", ""
        try:
            assert location is not None
            versions = await load_model(
                name, str(location), self.options.load, self.handlers, override
            )
        except ModelyardError as e:
            entry.state, entry.reason = "UNAVAILABLE", e.message
            log.error("failed to load '%s': %s", name, e.message)
            raise
        except Exception as e:
            entry.state, entry.reason = "UNAVAILABLE", f"{type(e).__name__}: {e}"
            log.exception("failed to load '%s'", name)
            raise ModelyardError(f"failed to load '{name}': {e}") from e
        old = entry.versions
        entry.versions = {mv.version: mv for mv in versions}
        entry.state, entry.reason = "READY", ""
        for mv in versions:
            log.info("successfully loaded '%s' version %d", name, mv.version)
        for _v, mv in old.items():
            await mv.stop(self.options.exit_timeout)

    async def stop(self) -> None:
        self._live = False
        await asyncio.gather(
            *(mv.stop(self.options.exit_timeout) for e in self.registry.entries.values()
              for mv in e.versions.values()),
            return_exceptions=True,
        )  # fmt: skip

    # -- health and metadata -----------------------------------------------------------------

    def is_live(self) -> bool:
        return self._live

    def is_ready(self) -> bool:
        if not (self._live and self._started):
            return False
        if not self.options.strict_readiness:
            return True
        return all(
            e.state == "READY" or e.reason == "unloaded"
            for e in self.registry.entries.values()
            if e.state != "" or e.versions
        )

    def server_metadata(self) -> dict[str, Any]:
        return {
            "name": self.options.server_id,
            "version": SERVER_VERSION,
            "extensions": list(EXTENSIONS),
        }

    def get_version(self, name: str, version: str = "") -> ModelVersion:
        """The model version a request names: the latest ready one when version is ""."""
        v = parse_version(version)
        entry = self.registry.entries.get(name)
        if entry is None:
            raise NotFound(f"Request for unknown model: '{name}' is not found")
        if v is None:
            if not entry.versions:
                raise NotFound(f"Request for unknown model: '{name}' has no available versions")
            return entry.versions[max(entry.versions)]
        mv = entry.versions.get(v)
        if mv is None:
            raise NotFound(f"Request for unknown model: '{name}' version {v} is not found")
        return mv

    def model_ready(self, name: str, version: str = "") -> bool:
        try:
            mv = self.get_version(name, version)
        except ModelyardError:
            return False
        return all(i.healthy for i in mv.instances)

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        mv = self.get_version(name, version)
        if version:
            versions = [version]
        else:
            versions = [str(v) for v in sorted(self.registry.entries[name].versions)]
        return render_metadata(mv.config, versions)

    def model_config(self, name: str, version: str = "") -> Any:
        return self.get_version(name, version).config

    def model_config_json(self, name: str, version: str = "") -> str:
        return self.get_version(name, version).config_json

    def is_decoupled(self, name: str, version: str = "") -> bool:
        return self.get_version(name, version).decoupled

    # -- inference ---------------------------------------------------------------------------

    def _prepare(self, request: InferRequest, on_response: Any,
                 chain: frozenset[str] = frozenset()) -> tuple[ModelVersion, RequestContext]:  # fmt: skip
        mv = self.get_version(request.model_name, request.model_version)
        output_names = validate(request, mv.signature)
        if not request.model_version:
            request.model_version = str(mv.version)
        # No closure over ctx here: a reference cycle would keep the request (and the shared
        # memory its tensors view) alive until the cyclic GC runs.
        ctx = RequestContext(request, output_names, on_response, chain=chain,
                             batch_size=_batch_of(request, mv))  # fmt: skip
        ctx.stats = mv.stats
        ctx.t_received = time.monotonic_ns()
        return mv, ctx

    async def infer(self, request: InferRequest) -> InferResponse:
        """One request, one response. Raises ModelyardError for any failure."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[InferResponse] = loop.create_future()

        def on_response(resp: InferResponse) -> None:
            if not fut.done():
                fut.set_result(resp)

        mv, ctx = self._prepare(request, on_response)
        if mv.decoupled:
            raise Unsupported(
                "ModelInfer RPC doesn't support models with decoupled transaction policy"
            )
        mv.scheduler.submit(ctx)
        try:
            resp = await fut
        except asyncio.CancelledError:
            ctx.cancel()
            raise
        if resp.error is not None:
            raise resp.error
        return resp

    def submit(self, request: InferRequest, on_response: Any,
               chain: frozenset[str] = frozenset(), caller: str = "") -> RequestContext:  # fmt: skip
        """Queue a request; every response goes to ``on_response`` (the last has final=True).

        Raises ModelyardError when the request cannot be queued (unknown model, bad input).
        """
        mv, ctx = self._prepare(request, on_response, chain)
        if caller:
            from modelyard.scheduling.deadlock import register, release

            ctx.caller = caller
            register(ctx)
            try:
                mv.scheduler.submit(ctx)
            except BaseException:
                release(ctx)
                raise
            return ctx
        mv.scheduler.submit(ctx)
        return ctx

    async def infer_stream_one(self, request: InferRequest,
                               chain: frozenset[str] = frozenset()) -> InferResponse:  # fmt: skip
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

    async def infer_stream(self, request: InferRequest,
                           chain: frozenset[str] = frozenset()) -> AsyncIterator[InferResponse]:  # fmt: skip
        """Every response of a request (decoupled or not), errors as ``response.error``."""
        queue: asyncio.Queue[InferResponse] = asyncio.Queue()
        mv, ctx = self._prepare(request, queue.put_nowait, chain)
        mv.scheduler.submit(ctx)
        try:
            while True:
                resp = await queue.get()
                yield resp
                if resp.final:
                    return
        finally:
            if not ctx.done:
                ctx.cancel()

    # -- repository --------------------------------------------------------------------------

    async def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        self.registry.scan()
        out: list[dict[str, Any]] = []
        for name in sorted(set(self.registry.locations) | set(self.registry.entries)):
            entry = self.registry.entries.get(name)
            if entry is None or (not entry.versions and entry.state == ""):
                if not ready_only:
                    out.append({"name": name})
                continue
            if entry.versions:
                for v in sorted(entry.versions):
                    item = {"name": name, "version": str(v), "state": entry.state}
                    if entry.reason:
                        item["reason"] = entry.reason
                    if not ready_only or entry.state == "READY":
                        out.append(item)
            elif not ready_only:
                item = {"name": name, "state": entry.state}
                if entry.reason:
                    item["reason"] = entry.reason
                out.append(item)
        return out

    def _require_explicit(self) -> None:
        if self.options.control_mode != "explicit":
            raise Unavailable("explicit model load / unload is not allowed if polling is enabled")

    async def load_model(self, name: str, config: str | None = None,
                         files: dict[str, bytes] | None = None, from_model: bool = False) -> None:  # fmt: skip
        # Models may load what they depend on in every control mode (beyond Triton).
        if not from_model:
            self._require_explicit()
        from modelyard.config.repository import validate_model_name

        validate_model_name(name)
        if files:
            raise Unsupported("file overrides in load requests are not supported yet")
        override = None
        if config:
            from modelyard.config.pbtxt import config_from_json

            override = config_from_json(config)
        self.registry.scan()
        await self._load(name, override)

    async def unload_model(self, name: str, unload_dependents: bool = False,
                           from_model: bool = False) -> None:  # fmt: skip
        if not from_model:
            self._require_explicit()
        entry = self.registry.entries.get(name)
        if entry is None:
            return
        if not entry.versions:  # e.g. a model that failed to load: it is now unloaded
            entry.state, entry.reason = "UNAVAILABLE", "unloaded"
            return
        versions, entry.versions = entry.versions, {}
        entry.state, entry.reason = "UNLOADING", ""
        for mv in versions.values():
            await mv.stop(self.options.exit_timeout)
        entry.state, entry.reason = "UNAVAILABLE", "unloaded"

    # -- statistics and settings ------------------------------------------------------------

    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        if not name:
            stats = [mv.stats.as_dict() for e in sorted(self.registry.entries.values(), key=lambda e: e.name)
                     for _, mv in sorted(e.versions.items())]  # fmt: skip
            return {"model_stats": stats}
        entry = self.registry.entries.get(name)
        if entry is None or not entry.versions:
            raise InvalidArgument(f"requested model '{name}' is not available")
        if version:
            v = parse_version(version)
            if v not in entry.versions:
                raise InvalidArgument(
                    f"requested model version is not available for model '{name}'"
                )
            return {"model_stats": [entry.versions[v].stats.as_dict()]}  # type: ignore[index]
        return {"model_stats": [mv.stats.as_dict() for _, mv in sorted(entry.versions.items())]}

    def get_log_settings(self) -> dict[str, Any]:
        return self.log_settings.as_dict()

    def update_log_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        self.log_settings.update(settings)
        return self.log_settings.as_dict()

    def get_trace_settings(self, model: str = "") -> dict[str, Any]:
        if model and model not in self.registry.entries:
            raise InvalidArgument(f"Request for unknown model : {model}")
        return self.trace_settings.get(model)

    def update_trace_settings(self, model: str, settings: dict[str, Any]) -> dict[str, Any]:
        if model and model not in self.registry.entries:
            raise InvalidArgument(f"Request for unknown model : {model}")
        return self.trace_settings.update(model, settings)


def _batch_of(request: InferRequest, mv: ModelVersion) -> int:
    if mv.signature.max_batch_size > 0 and request.inputs:
        return request.inputs[0].shape[0] if request.inputs[0].shape else 1
    return 1
