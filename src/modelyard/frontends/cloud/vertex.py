"""Vertex AI's endpoint (``--allow-vertex-ai``, ``--vertex-ai-port``), as Triton 2.51 serves it.

- ``AIP_HEALTH_ROUTE`` (a regular expression the path must match): ``GET`` answers the
  server's readiness, 200 or 400 with no body.
- ``AIP_PREDICT_ROUTE``: ``POST`` runs the default model (``--vertex-ai-default-model``, or
  the repository's only model), in KServe's JSON, or with binary tensors under
  ``Content-Type: application/vnd.vertex-ai-triton.binary+json;json-header-size=<N>``;
  responses are KServe's (binary outputs: ``Inference-Header-Content-Length``).
- With ``X-Vertex-Ai-Triton-Redirect: <path>`` the prediction goes to that KServe route
  instead: model metadata, ready, config, stats and infer, server metadata and health,
  statistics, shared memory, the repository index and load/unload, and ``metrics``. The
  request must be a POST (405, no body); read-only routes run as GETs; another route is
  400 with no body.

The default model is checked once the models have loaded, as Triton does when it starts the
endpoint: not loaded (or no default and not exactly one model) stops the server.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from modelyard.errors import ModelyardError, Unavailable
from modelyard.frontends.cloud import forward
from modelyard.frontends.cloud.options import VertexOptions
from modelyard.frontends.http.asgiserver import AsgiServer, serve_asgi
from modelyard.frontends.http.errors import error_body, http_status
from modelyard.frontends.http.limits import HttpLimits
from modelyard.frontends.http.request_response import Receive, Scope, Send
from modelyard.frontends.http.server import kserve_app
from modelyard.metrics.host_gauges import CpuSampler
from modelyard.metrics.server import scrape

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer

log = logging.getLogger("modelyard")

MIME = "application/vnd.vertex-ai-triton.binary+json;json-header-size="
REDIRECT = b"x-vertex-ai-triton-redirect"

# Triton's KServe routes (http_server.cc), matched against "/" + the redirect header.
_MODEL = re.compile(
    r"/v2/models/([^/]+)(?:/versions/([0-9]+))?"
    r"(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?"
)
_SERVER = re.compile(r"/v2(?:/health/(live|ready))?")
_SHM = re.compile(r"/v2/(?:system|cuda)sharedmemory(?:/region/[^/]+)?/(status|register|unregister)")
_REPOSITORY = re.compile(r"/v2/repository(?:/[^/]+)?/(index|models/[^/]+/(?:load|unload))")
_READ_ONLY_MODEL_ROUTES = (None, "ready", "config", "stats")


def redirect_method(endpoint: str) -> str | None:
    """The method Triton's Vertex AI endpoint runs a redirected KServe route with, or None
    when it does not route ``endpoint`` there (``/metrics`` aside)."""
    if endpoint == "/v2/models/stats":
        return "GET"
    m = _MODEL.fullmatch(endpoint)
    if m is not None:
        if m.group(3) in _READ_ONLY_MODEL_ROUTES:
            return "GET"
        if m.group(3) == "infer":
            return "POST"
    if _SERVER.fullmatch(endpoint):
        return "GET"
    if m := _SHM.fullmatch(endpoint):
        return "GET" if m.group(1) == "status" else "POST"
    if _REPOSITORY.fullmatch(endpoint):
        return "POST"
    return None


class VertexApp:
    """The endpoint's ASGI application."""

    def __init__(self, core: InferenceServer, options: VertexOptions, limits: HttpLimits):
        self.core = core
        self.options = options
        self.kserve = kserve_app(core, limits)
        self.default_model: str | None = None  # known once the models have loaded
        self._cpu: CpuSampler | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        try:
            if self.options.health_route.fullmatch(path):
                forward.to_kserve(scope, method, "/v2/health/ready", MIME)
            elif self.options.predict_route.fullmatch(path):
                target = next((v for k, v in scope["headers"] if k == REDIRECT), None)
                if target is None:
                    forward.to_kserve(scope, method, self._default_infer(), MIME)
                elif method != "POST":
                    await forward.reply(send, 405)
                    return
                else:
                    endpoint = "/" + target.decode("latin-1")
                    if endpoint == "/metrics":
                        await self._metrics(send)
                        return
                    routed = redirect_method(endpoint)
                    if routed is None:
                        await forward.reply(send, 400)
                        return
                    forward.to_kserve(scope, routed, endpoint, MIME)
            else:
                await forward.reply(send, 400)
                return
        except ModelyardError as e:
            await forward.reply(send, http_status(e), error_body(e.message))
            return
        await self.kserve(scope, receive, send)

    def _default_infer(self) -> str:
        if self.default_model is None:
            raise Unavailable("the Vertex AI endpoint's default model is not known yet")
        return forward.model_path(self.default_model, "infer")

    async def _metrics(self, send: Send) -> None:
        """The metrics endpoint's text (400, no body, with metrics off: Triton's)."""
        settings = self.core.options.metrics
        if not settings.enabled:
            await forward.reply(send, 400)
            return
        if settings.cpu and self._cpu is None:
            self._cpu = CpuSampler()
        await forward.reply(send, 200, await scrape(self.core, self._cpu))

    async def models_loaded(self) -> None:
        """Pick the default model as Triton does once the models are loaded; raise
        ModelyardError (Triton's message) when it cannot."""
        index = await self.core.repository_index(ready_only=True)
        names = [item["name"] for item in index]
        wanted = self.options.default_model
        if not wanted:
            if len(names) != 1:
                raise ModelyardError(
                    "Expect the model repository contains only a single model if default "
                    "model is not specified"
                )
            wanted = names[0]
        elif wanted not in names:
            raise ModelyardError(f"Expect the default model '{wanted}' is loaded")
        self.default_model = wanted


class VertexServer:
    def __init__(self, server: AsgiServer, app: VertexApp):
        self._server = server
        self.app = app
        self.port = server.port

    async def models_loaded(self) -> str | None:
        """None once the default model is known; else the line Triton logs as it exits."""
        try:
            await self.app.models_loaded()
        except ModelyardError as e:
            return f"failed to start Vertex AI service: Invalid argument - {e.message}"
        return None

    async def close(self, grace: float = 1.0) -> None:
        await self._server.close(grace)


async def start_vertex_server(
    core: InferenceServer, options: VertexOptions, limits: HttpLimits | None = None
) -> VertexServer:
    limits = limits or HttpLimits()
    app = VertexApp(core, options, limits)
    server = await serve_asgi(app, options.address, options.port, limits)
    log.info("Started Vertex AI HTTPService at %s:%d", options.address, server.port)
    return VertexServer(server, app)
