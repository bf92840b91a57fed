"""The OpenAI frontend's ASGI application and its start: routes, the API key, restricted
groups, health and metrics, on uvicorn as the HTTP frontend runs it (its connection limits,
and its cancellation of a request whose client disconnected).

Routes: ``GET /v1/models``, ``GET /v1/models/{id}``, ``POST /v1/completions``,
``POST /v1/chat/completions``, ``POST /v1/embeddings``, ``GET /health/ready`` (200 when the
server is ready, else 400, as Triton's OpenAI frontend), ``GET /health`` (200 while live),
``GET /metrics`` (the metrics port's text). With ``--openai-api-key`` every ``/v1/`` route
wants ``Authorization: Bearer <key>`` (else 401); ``--openai-restricted-api`` guards groups
of routes by a header (else 401, Triton's OpenAI frontend's answer).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from typing import TYPE_CHECKING
from urllib.parse import unquote

import orjson

from modelyard.errors import ModelyardError
from modelyard.frontends.http.asgiserver import AsgiServer, serve_asgi
from modelyard.frontends.http.limits import HttpLimits
from modelyard.frontends.http.request_response import (
    JSON_HEADERS,
    ClientGone,
    Receive,
    Request,
    Response,
    Scope,
    Send,
)
from modelyard.frontends.openai.catalog import Catalog, ServedModel
from modelyard.frontends.openai.completions import handle_completion
from modelyard.frontends.openai.embeddings import handle_embeddings
from modelyard.frontends.openai.errors import (
    AUTHENTICATION,
    INVALID_REQUEST,
    SERVER_ERROR,
    OpenAIError,
    from_core,
    unknown_model,
)
from modelyard.frontends.openai.options import METRICS, OpenAIOptions
from modelyard.frontends.openai.templates import default_template, from_folder
from modelyard.frontends.restricted import HEALTH, INFERENCE, MODEL_REPOSITORY

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer

log = logging.getLogger("modelyard")

OWNED_BY = "modelyard"
_MODELS = "/v1/models"
_METRICS_HEADERS = [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")]
# path -> (method, restricted group)
_ROUTES = {
    "/v1/completions": ("POST", INFERENCE),
    "/v1/chat/completions": ("POST", INFERENCE),
    "/v1/embeddings": ("POST", INFERENCE),
    _MODELS: ("GET", MODEL_REPOSITORY),
    "/health/ready": ("GET", HEALTH),
    "/health": ("GET", HEALTH),
    "/metrics": ("GET", METRICS),
}


def _model_doc(model: ServedModel) -> dict[str, object]:
    return {"id": model.id, "object": "model", "created": model.created, "owned_by": OWNED_BY}


def _json(doc: object, status: int = 200) -> Response:
    return Response(orjson.dumps(doc), status, JSON_HEADERS)


class OpenAIApp:
    """The ASGI application: ``await app(scope, receive, send)``."""

    def __init__(self, core: InferenceServer, options: OpenAIOptions, max_input_size: int):
        self.core = core
        self.options = options
        self.max_input_size = max_input_size
        template = from_folder(options.tokenizer) if options.tokenizer else None
        self.catalog = Catalog(core, template or default_template())
        self._key = options.api_key.encode("utf-8")
        self._guards = {
            group: (r.header.lower().encode("latin-1"), r.value.encode("latin-1"), r.header)
            for group, r in options.restrictions.groups.items()
        }
        self._cpu: object | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive, send)
        path = scope["raw_path"].decode("latin-1").split("?", 1)[0]
        try:
            response = await self._route(request, path)
        except ClientGone:
            return
        except asyncio.CancelledError:
            if request.client_gone():
                return  # the connection cancelled the handler: there is no one to answer
            raise
        except OpenAIError as e:
            if request.started:
                raise
            response = _json(e.doc(), e.status)
        except ModelyardError as e:
            if request.started:
                raise
            error = from_core(e)
            response = _json(error.doc(), error.status)
        except Exception as e:
            if request.started or request.client_gone():
                raise
            log.exception("OpenAI API %s %s failed", request.method, path, exc_info=e)
            error = OpenAIError(500, f"internal error: {type(e).__name__}: {e}", SERVER_ERROR)
            response = _json(error.doc(), 500)
        if response is not None:
            await response.send(send)

    async def _route(self, request: Request, path: str) -> Response | None:
        method = request.method
        model_id = ""
        if path.startswith(_MODELS + "/") and len(path) > len(_MODELS) + 1:
            model_id = unquote(path[len(_MODELS) + 1 :])
            route = _ROUTES[_MODELS]
        else:
            found = _ROUTES.get(path)
            if found is None:
                raise OpenAIError(404, f"Invalid URL ({method} {path})", INVALID_REQUEST)
            route = found
        expected, group = route
        self._check_restricted(request, group)
        if path.startswith("/v1/"):
            self._check_key(request)
        if method != expected:
            raise OpenAIError(405, f"Method Not Allowed ({method} {path})", INVALID_REQUEST)
        core = self.core
        if path in ("/v1/completions", "/v1/chat/completions"):
            chat = path == "/v1/chat/completions"
            max_tokens, limit = self.options.default_max_tokens, self.max_input_size
            return await handle_completion(core, self.catalog, request, chat, max_tokens, limit)
        if path == "/v1/embeddings":
            return await handle_embeddings(core, self.catalog, request, self.max_input_size)
        if group == MODEL_REPOSITORY:
            return self._models(model_id)
        if path == "/health/ready":
            if core.is_ready():
                return Response(b"", 200, JSON_HEADERS)
            raise OpenAIError(400, "The server is not ready for inference requests.", SERVER_ERROR)
        if path == "/health":
            return Response(b"", 200 if core.is_live() else 503, JSON_HEADERS)
        return await self._metrics()

    def _models(self, model_id: str) -> Response:
        models = self.catalog.models()
        if not model_id:
            return _json({"object": "list", "data": [_model_doc(m) for m in models]})
        for model in models:
            if model.id == model_id:
                return _json(_model_doc(model))
        raise unknown_model(model_id)

    async def _metrics(self) -> Response:
        from modelyard.metrics import custom
        from modelyard.metrics.exposition import CpuSampler, render_core

        if self._cpu is None:
            self._cpu = CpuSampler()
        assert isinstance(self._cpu, CpuSampler)
        models = custom.render(await custom.gather(self.core))
        return Response(render_core(self.core, self._cpu) + models, 200, _METRICS_HEADERS)

    def _check_key(self, request: Request) -> None:
        if not self._key:
            return
        given = request.header(b"authorization")
        if given is None:
            raise OpenAIError(
                401,
                "You didn't provide an API key: send it in an Authorization header using "
                "Bearer auth (Authorization: Bearer YOUR_KEY).",
                INVALID_REQUEST,
            )
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode("latin-1", "replace"), self._key
        ):
            raise OpenAIError(401, "Incorrect API key provided.", INVALID_REQUEST, None,
                              "invalid_api_key")  # fmt: skip

    def _check_restricted(self, request: Request, group: str) -> None:
        guard = self._guards.get(group)
        if guard is None:
            return
        name, value, header = guard
        for key, given in request.scope["headers"]:
            if key == name and hmac.compare_digest(given, value):
                return
        raise OpenAIError(
            401,
            f"This API is restricted, expecting header '{header}' with valid value",
            AUTHENTICATION,
            None,
            "invalid_auth",
        )


class OpenAIServer:
    """A running OpenAI frontend: ``port`` is the bound port; ``close()`` stops it."""

    def __init__(self, server: AsgiServer):
        self._server = server
        self.port = server.port

    async def close(self, grace: float = 1.0) -> None:
        await self._server.close(grace)


async def start_openai_server(
    core: InferenceServer, options: OpenAIOptions, limits: HttpLimits | None = None
) -> OpenAIServer:
    """Bind and serve; logs ``Started OpenAIService at {host}:{port}`` once bound."""
    limits = limits or HttpLimits()
    app = OpenAIApp(core, options, limits.max_input_size)
    server = await serve_asgi(app, options.address, options.port, limits)
    log.info("Started OpenAIService at %s:%d", options.address, server.port)
    return OpenAIServer(server)
