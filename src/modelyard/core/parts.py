"""What the core's parts need of the server they serve, each as a narrow Protocol.

Loading, ensembles, polling and the core's ``ModelHost`` take one of these instead of the
``InferenceServer`` class, so none of them imports the module that assembles them (and a
``--ray`` core, or a test, can stand in with whatever has these members).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from modelyard.core.model_version import ModelVersion
    from modelyard.core.options import ServerOptions
    from modelyard.core.registry import ModelRegistry
    from modelyard.scheduling.rate_limiter import RateLimiter
    from modelyard.serving.context import RequestContext
    from modelyard.serving.host import ModelHost
    from modelyard.tracing.stores import CallGraph
    from modelyard.tracing.tracer import Tracer
    from modelyard.types import InferRequest


class Requests(Protocol):
    """Running requests on the models that are loaded."""

    @property
    def options(self) -> ServerOptions: ...

    @property
    def registry(self) -> ModelRegistry: ...

    def get_version(self, name: str, version: str = "") -> ModelVersion: ...

    def submit(
        self,
        request: InferRequest,
        on_response: Any,
        chain: frozenset[str] = frozenset(),
        caller: str = "",
    ) -> RequestContext: ...


class Unloads(Protocol):
    """Unloading a model (the repository API's, or a model's own through pb_utils)."""

    async def unload_model(
        self, name: str, unload_dependents: bool = False, from_model: bool = False
    ) -> None: ...


class Loads(Requests, Unloads, Protocol):
    """What loading a model (and an ensemble's steps, and polling) needs."""

    @property
    def host(self) -> ModelHost: ...

    @property
    def rate_limiter(self) -> RateLimiter | None: ...

    @property
    def call_graph(self) -> CallGraph: ...

    @property
    def started(self) -> bool:
        """The start-up loads are over."""
        ...

    async def load(
        self,
        name: str,
        override: Any | None = None,
        files: dict[str, bytes] | None = None,
        from_model: bool = False,
    ) -> None: ...


class Hosted(Requests, Unloads, Protocol):
    """What the core's ``ModelHost`` (BLS, model control from models) needs."""

    @property
    def tracer(self) -> Tracer: ...

    def is_decoupled(self, name: str, version: str = "") -> bool: ...

    def model_ready(self, name: str, version: str = "") -> bool: ...

    async def check_model_ready(self, name: str, version: str = "") -> bool: ...

    async def load_model(
        self,
        name: str,
        config: str | None = None,
        files: dict[str, bytes] | None = None,
        from_model: bool = False,
    ) -> None: ...
