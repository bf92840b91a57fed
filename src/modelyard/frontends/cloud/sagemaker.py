"""SageMaker's endpoint (``--allow-sagemaker``, ``--sagemaker-port``), as Triton 2.51 serves it.

- ``GET /ping``: the server's readiness (``SAGEMAKER_TRITON_PING_MODE=live``: liveness),
  200 or 400 with no body.
- ``POST /invocations``: an inference of ``SAGEMAKER_TRITON_DEFAULT_MODEL_NAME``'s latest
  version, in KServe's JSON, or with binary tensors when the request's ``Content-Type`` is
  ``application/vnd.sagemaker-triton.binary+json;json-header-size=<N>``; a response with
  binary outputs carries the same type with its own JSON length.
- The multi-model endpoint's routes (``/models...``) answer as a Triton that has loaded no
  model through them (list: ``{"models":[]}``, the others 404); loading one by URL
  (``POST /models``) is not supported (501).
- Any other path: 400 with no body.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from modelyard.errors import ModelyardError
from modelyard.frontends.cloud import forward
from modelyard.frontends.cloud.options import SageMakerOptions
from modelyard.frontends.http.asgiserver import AsgiServer, serve_asgi
from modelyard.frontends.http.errors import error_body
from modelyard.frontends.http.limits import HttpLimits
from modelyard.frontends.http.request_response import Message, Receive, Scope, Send
from modelyard.frontends.http.server import kserve_app

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer

log = logging.getLogger("modelyard")

MIME = "application/vnd.sagemaker-triton.binary+json;json-header-size="
_MODELS = re.compile(r"/models(?:/)?([^/]+)?(/invoke)?")
_UNSUPPORTED_LOAD = (
    b'{"error":"loading a model by URL (SageMaker multi-model endpoints) is not supported"}'
)


class SageMakerApp:
    """The endpoint's ASGI application."""

    def __init__(self, core: InferenceServer, options: SageMakerOptions, limits: HttpLimits):
        self.options = options
        self.kserve = kserve_app(core, limits)
        kind = "live" if options.ping_mode == "live" else "ready"  # Triton: anything else, ready
        self.ping_path = f"/v2/health/{kind}"
        self.infer_path = forward.model_path(options.default_model, "infer")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path == "/ping":
            forward.to_kserve(scope, method, self.ping_path, MIME)
            await self.kserve(scope, receive, send)
        elif path == "/invocations":
            try:
                forward.to_kserve(scope, method, self.infer_path, MIME)
            except ModelyardError as e:
                await forward.reply(send, 400, error_body(e.message))
                return
            await self.kserve(scope, receive, _binary_type(send))
        elif (m := _MODELS.fullmatch(path)) is not None:
            await _multi_model(method, m, send)
        else:
            await forward.reply(send, 400)


async def _multi_model(method: str, m: re.Match[str], send: Send) -> None:
    """The multi-model routes with no model loaded through them."""
    name, invoke = m.group(1), m.group(2)
    if method == "GET":
        await forward.reply(send, 404) if name else await forward.reply(send, 200, b'{"models":[]}')
    elif method == "POST":
        await forward.reply(send, 404 if invoke else 501, b"" if invoke else _UNSUPPORTED_LOAD)
    elif method == "DELETE":
        await forward.reply(send, 404)
    else:
        await forward.reply(send, 400)


def _binary_type(send: Send) -> Send:
    """A response with binary outputs says so in SageMaker's content type (with the JSON
    length) instead of KServe's header."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers: list[tuple[bytes, bytes]] = message["headers"]
            length = next((v for k, v in headers if k == forward.HEADER_LENGTH), None)
            if length is not None:
                message["headers"] = [
                    (b"content-type", MIME.encode() + length),
                    *(
                        (k, v)
                        for k, v in headers
                        if k not in (b"content-type", forward.HEADER_LENGTH)
                    ),
                ]
        await send(message)

    return sending


class SageMakerServer:
    def __init__(self, server: AsgiServer):
        self._server = server
        self.port = server.port

    async def close(self, grace: float = 1.0) -> None:
        await self._server.close(grace)


async def start_sagemaker_server(
    core: InferenceServer, options: SageMakerOptions, limits: HttpLimits | None = None
) -> SageMakerServer:
    limits = limits or HttpLimits()
    server = await serve_asgi(
        SageMakerApp(core, options, limits), options.address, options.port, limits
    )
    log.info("Started Sagemaker HTTPService at %s:%d", options.address, server.port)
    return SageMakerServer(server)
