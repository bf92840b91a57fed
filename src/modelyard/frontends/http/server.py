"""The HTTP/REST frontend: KServe v2 plus Triton's extensions, as a raw ASGI application
served by uvicorn (httptools) in the server's event loop.

The router follows Triton's own path regexes and order (``HTTPAPIServer::Handle``), with
fast exits first: ``POST /v2/models/{m}/infer`` is recognised by a prefix/suffix check and
the fixed endpoints by one dict lookup; other model paths go through one compiled regex.
Unmatched paths get ``404 {"error":"Not Found"}``, a wrong method
``405 {"error":"Method Not Allowed"}``. Path segments arrive percent-encoded (clients
``quote()`` model and region names) and are decoded after matching. Query strings are
ignored.

Restricted APIs (``--http-restricted-api``) are checked as Triton checks them: once a path
matches an endpoint, before its method, ``403 {"error":"This API is restricted, expecting
header '<key>'"}`` unless the request carries the header (any case) with the exact value.
Each endpoint's group is the one Triton's handler for it checks.

``/dashboard`` (``--allow-dashboard``, on by default) is modelyard's: its group is the
``dashboard`` pseudo-group when that is restricted, else it is guarded by each of
``statistics``, ``model-repository`` and ``trace`` that is (it shows what they show).

Beyond Triton, the port may serve HTTPS (``--http-use-ssl``..., ``frontends/tls.py``);
``--http-header-forward-pattern`` and ``--reuse-http-port`` are Triton's.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING
from urllib.parse import unquote

from modelyard.errors import ModelyardError, Unsupported
from modelyard.frontends import restricted as groups
from modelyard.frontends.header_forward import HeaderForward
from modelyard.frontends.http import handlers
from modelyard.frontends.http.asgiserver import AsgiServer, serve_asgi
from modelyard.frontends.http.compression import UnsupportedCompression
from modelyard.frontends.http.dashboard import PREFIX as DASHBOARD_PREFIX
from modelyard.frontends.http.dashboard import Dashboard
from modelyard.frontends.http.errors import (
    METHOD_NOT_ALLOWED_BODY,
    NOT_FOUND_BODY,
    restricted_body,
)
from modelyard.frontends.http.generate import handle_generate
from modelyard.frontends.http.infer import handle_infer
from modelyard.frontends.http.limits import HttpLimits
from modelyard.frontends.http.request_response import (
    TEXT_HEADERS,
    ClientGone,
    Receive,
    Request,
    Response,
    Scope,
    Send,
    error_response,
    message_response,
)
from modelyard.frontends.tls import TlsSettings, server_context

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer

log = logging.getLogger("modelyard")

_MODEL_RE = re.compile(
    r"/v2/models/([^/]+)(?:/versions/([0-9]+))?"
    r"(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?"
)
_SERVER_RE = re.compile(r"/v2(?:/health/(live|ready))?")
_SYSTEM_SHM_RE = re.compile(
    r"/v2/systemsharedmemory(?:/region/([^/]+))?/(status|register|unregister)"
)
_CUDA_SHM_RE = re.compile(r"/v2/cudasharedmemory(?:/region/([^/]+))?/(status|register|unregister)")
# Both shared-memory extensions route alike (and are one restricted group): prefix, path
# pattern, handler.
_SHM_ROUTES = (
    ("/v2/systemsharedmemory/", _SYSTEM_SHM_RE, handlers.system_shm),
    ("/v2/cudasharedmemory/", _CUDA_SHM_RE, handlers.cuda_shm),
)
_REPOSITORY_RE = re.compile(r"/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))")

# The restricted group of each model endpoint (the regex's third group).
_MODEL_GROUPS = {
    None: groups.METADATA,
    "infer": groups.INFERENCE,
    "generate": groups.INFERENCE,
    "generate_stream": groups.INFERENCE,
    "ready": groups.HEALTH,
    "config": groups.MODEL_CONFIG,
    "stats": groups.STATISTICS,
    "trace/setting": groups.TRACE,
}

_MODELS = "/v2/models/"
_INFER = "/infer"
_ACCEPT_ENCODING = [(b"accept-encoding", b"gzip, deflate")]

# Triton answers these early exits before it sets a JSON content type.
_NOT_FOUND = Response(NOT_FOUND_BODY, 404, TEXT_HEADERS)
_NOT_ALLOWED = Response(METHOD_NOT_ALLOWED_BODY, 405, TEXT_HEADERS)


def _segment(raw: str | None) -> str:
    if not raw:
        return ""
    return unquote(raw) if "%" in raw else raw


Handler = Callable[[Request], Awaitable[Response]]
# Endpoints without path parameters: path -> (allowed methods, handler, restricted group).
Fixed = tuple[tuple[str, ...], Handler, str]


class _Guard:
    """The restricted groups: group -> (lower-case header name, expected value, 403)."""

    def __init__(self, restrictions: groups.Restrictions):
        self.groups: dict[str, tuple[bytes, bytes, Response]] = {}
        for group, r in restrictions.groups.items():
            denied = Response(restricted_body(r.header), 403, TEXT_HEADERS)
            self.groups[group] = (r.header.lower().encode("latin-1"), os.fsencode(r.value), denied)

    def check(self, request: Request, group: str) -> Response | None:
        """None when ``group`` is open to the request; otherwise Triton's 403."""
        rule = self.groups.get(group)
        if rule is None:
            return None
        name, value, denied = rule
        for key, given in request.scope["headers"]:
            if key == name:  # the first one counts, as in libevhtp's lookup
                return None if given == value else denied
        return denied

    def guards_dashboard(self) -> bool:
        """Whether a request to the dashboard needs a header (it is restricted)."""
        return any(g in self.groups for g in (groups.DASHBOARD, *groups.DASHBOARD_SHOWS))

    def check_dashboard(self, request: Request) -> Response | None:
        """The dashboard's own group if it has one, else every group whose data it shows."""
        if groups.DASHBOARD in self.groups:
            return self.check(request, groups.DASHBOARD)
        for group in groups.DASHBOARD_SHOWS:
            denied = self.check(request, group)
            if denied is not None:
                return denied
        return None


class _Router:
    """The ASGI application: ``await router(scope, receive, send)``."""

    def __init__(
        self,
        core: InferenceServer,
        limits: HttpLimits | None = None,
        guard: _Guard | None = None,
        dashboard: bool = False,
        forward: HeaderForward | None = None,
    ):
        self.core = core
        self.limits = limits or HttpLimits()
        self.guard = guard
        self.forward = forward  # --http-header-forward-pattern
        self.dashboard = Dashboard(core) if dashboard else None
        self.fixed: dict[str, Fixed] = self._fixed_routes()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # no lifespan, no websockets
            return
        request = Request(scope, receive, send)
        raw: bytes = scope["raw_path"]
        path = raw.decode("latin-1")
        q = path.find("?")
        if q >= 0:
            path = path[:q]
        method = request.method
        response: Response | None
        try:
            # The hot path: POST /v2/models/{m}/infer, without a regex.
            if path.endswith(_INFER) and path.startswith(_MODELS):
                model = path[len(_MODELS) : -len(_INFER)]
                if model and "/" not in model:
                    denied = self.guard.check(request, groups.INFERENCE) if self.guard else None
                    if denied is not None:
                        response = denied
                    elif method != "POST":
                        response = _NOT_ALLOWED
                    else:
                        response = await handle_infer(
                            self.core,
                            request,
                            _segment(model),
                            "",
                            self.limits.max_input_size,
                            forward=self.forward,
                        )
                else:
                    response = await self._route(request, path, method)
            else:
                response = await self._route(request, path, method)
        except ClientGone:
            return
        except asyncio.CancelledError:
            if request.client_gone():
                return  # the connection cancelled the handler: there is no one to answer
            raise
        except Exception as e:
            if request.started:
                raise  # mid-stream: the server closes the connection
            response = _error(e, method, path)
        if response is not None:
            await response.send(send)

    def _fixed_routes(self) -> dict[str, Fixed]:
        core = self.core

        def sync(fn: Callable[[], Response]) -> Handler:
            async def handler(_: Request) -> Response:
                return fn()

            return handler

        def system_shm(action: str) -> Handler:
            return lambda request: handlers.system_shm(core, request, "", action)

        def cuda_shm(action: str) -> Handler:
            return lambda request: handlers.cuda_shm(core, request, "", action)

        get, post, both = ("GET",), ("POST",), ("GET", "POST")
        shm, repo = groups.SHARED_MEMORY, groups.MODEL_REPOSITORY
        return {
            "/v2": (get, sync(lambda: handlers.server_metadata(core)), groups.METADATA),
            "/v2/health/live": (get, lambda _: handlers.health(core, "live"), groups.HEALTH),
            "/v2/health/ready": (get, lambda _: handlers.health(core, "ready"), groups.HEALTH),
            "/v2/models/stats": (
                get,
                lambda _: handlers.statistics(core, "", ""),
                groups.STATISTICS,
            ),
            "/v2/logging": (
                both,
                lambda request: handlers.logging_settings(core, request),
                groups.LOGGING,
            ),
            "/v2/trace/setting": (
                both,
                lambda request: handlers.trace_settings(core, request),
                groups.TRACE,
            ),
            "/v2/repository/index": (post, lambda r: handlers.repository_index(core, r), repo),
            "/v2/systemsharedmemory/status": (get, system_shm("status"), shm),
            "/v2/systemsharedmemory/register": (post, system_shm("register"), shm),
            "/v2/systemsharedmemory/unregister": (post, system_shm("unregister"), shm),
            "/v2/cudasharedmemory/status": (get, cuda_shm("status"), shm),
            "/v2/cudasharedmemory/register": (post, cuda_shm("register"), shm),
            "/v2/cudasharedmemory/unregister": (post, cuda_shm("unregister"), shm),
        }

    async def _route(self, request: Request, path: str, method: str) -> Response | None:
        guard = self.guard
        fixed = self.fixed.get(path)
        if fixed is not None:
            methods, handler, group = fixed
            if guard and (denied := guard.check(request, group)):
                return denied
            if method not in methods:
                return _NOT_ALLOWED
            return await handler(request)
        core = self.core
        if path.startswith(_MODELS):
            m = _MODEL_RE.fullmatch(path)
            # Triton has no versioned trace endpoint: that path matches nothing.
            if m is not None and not (m.group(3) == "trace/setting" and m.group(2)):
                if guard and (denied := guard.check(request, _MODEL_GROUPS[m.group(3)])):
                    return denied
                return await self._model(request, method, m)
            return _NOT_FOUND
        for prefix, regex, shm_handler in _SHM_ROUTES:
            if path.startswith(prefix):
                m = regex.fullmatch(path)
                if m is None:
                    return _NOT_FOUND
                if guard and (denied := guard.check(request, groups.SHARED_MEMORY)):
                    return denied
                action = m.group(2)
                if method != ("GET" if action == "status" else "POST"):
                    return _NOT_ALLOWED
                return await shm_handler(core, request, _segment(m.group(1)), action)
        if path.startswith("/v2/repository/"):
            m = _REPOSITORY_RE.fullmatch(path)
            if m is not None:
                if guard and (denied := guard.check(request, groups.MODEL_REPOSITORY)):
                    return denied
                return await self._repository(request, method, m)
        if self.dashboard is not None and (
            path == DASHBOARD_PREFIX or path.startswith(DASHBOARD_PREFIX + "/")
        ):
            if guard and (denied := guard.check_dashboard(request)):
                return denied
            return await self.dashboard.handle(request, path)
        return _NOT_FOUND

    async def _model(self, request: Request, method: str, m: re.Match[str]) -> Response | None:
        core = self.core
        model = _segment(m.group(1))
        version = m.group(2) or ""
        kind = m.group(3)
        if kind == "infer":
            if method != "POST":
                return _NOT_ALLOWED
            return await handle_infer(
                core, request, model, version, self.limits.max_input_size, forward=self.forward
            )
        if kind is None:
            if method != "GET":
                return _NOT_ALLOWED
            return handlers.model_metadata(core, model, version)
        if kind == "ready":
            if method != "GET":
                return _NOT_ALLOWED
            return await handlers.model_ready(core, model, version)
        if kind == "config":
            if method != "GET":
                return _NOT_ALLOWED
            return handlers.model_config(core, model, version)
        if kind == "stats":
            if method != "GET":
                return _NOT_ALLOWED
            return await handlers.statistics(core, model, version)
        if kind == "trace/setting":
            if method not in ("GET", "POST"):
                return _NOT_ALLOWED
            return await handlers.trace_settings(core, request, model)
        # generate / generate_stream
        if method != "POST":
            return _NOT_ALLOWED
        return await handle_generate(core, request, model, version, kind == "generate_stream")

    async def _repository(self, request: Request, method: str, m: re.Match[str]) -> Response:
        if method != "POST":
            return _NOT_ALLOWED
        if m.group(2) == "index":  # Triton ignores a repository name here
            return await handlers.repository_index(self.core, request)
        if m.group(1):
            raise Unsupported("'repository_name' specification is not supported")
        model = _segment(m.group(3))
        if m.group(4) == "load":
            return await handlers.load_model(self.core, request, model)
        return await handlers.unload_model(self.core, request, model)


def kserve_app(core: InferenceServer, limits: HttpLimits | None = None) -> _Router:
    """The KServe routes as a bare ASGI application (no restricted APIs, no forwarded
    headers, no dashboard): what the SageMaker and Vertex AI endpoints hand requests to."""
    return _Router(core, limits)


def _error(e: Exception, method: str, path: str) -> Response:
    if isinstance(e, UnsupportedCompression):
        return error_response(e, _ACCEPT_ENCODING)
    if isinstance(e, ModelyardError):
        return error_response(e)
    # a bug: keep serving, tell the client what broke
    log.exception("HTTP %s %s failed", method, path, exc_info=e)
    return message_response(f"internal error: {type(e).__name__}: {e}", 500)


class HttpServer:
    """A running HTTP frontend: ``port`` is the bound port; ``close()`` stops it."""

    def __init__(self, server: AsgiServer, host: str):
        self._server = server
        self.host = host
        self.port = server.port

    async def close(self, grace: float = 1.0) -> None:
        """Stop accepting, let in-flight requests finish for up to ``grace`` seconds."""
        await self._server.close(grace)


async def start_http_server(
    core: InferenceServer,
    host: str,
    port: int,
    limits: HttpLimits | None = None,
    restrictions: groups.Restrictions | None = None,
    dashboard: bool = False,
    tls: TlsSettings | None = None,
    forward: HeaderForward | None = None,
    reuse_port: bool = False,
) -> HttpServer:
    """Bind and serve; logs ``Started HTTPService at {host}:{port}`` once bound.
    ``dashboard``: also serve the read-only page at ``/dashboard``, and log its address
    (unless it is restricted: a browser sends no header). ``tls``: serve HTTPS;
    ``forward``: the headers that become request parameters; ``reuse_port``: SO_REUSEPORT."""
    limits = limits or HttpLimits()
    guard = _Guard(restrictions) if restrictions else None
    router = _Router(core, limits, guard, dashboard, forward)
    server = await serve_asgi(
        router,
        host,
        port,
        limits,
        tls=server_context(tls) if tls is not None else None,
        reuse_port=reuse_port,
        keep_header_case=forward is not None,
    )
    log.info("Started HTTPService at %s:%d", host, server.port)
    if dashboard and not (guard and guard.guards_dashboard()):
        scheme = "https" if tls else "http"
        where = f"{_browsable(host)}:{server.port}{DASHBOARD_PREFIX}/"
        log.info("Dashboard at %s://%s", scheme, where)
    return HttpServer(server, host)


def _browsable(host: str) -> str:
    """The address a browser on this machine opens for ``host`` (a wildcard is every one)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host
