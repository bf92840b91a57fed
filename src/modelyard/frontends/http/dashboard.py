"""``/dashboard/...`` on the HTTP port: the page's files and its JSON API, GET only.

The files are read once from the package when the frontend starts and served from memory,
with a Content-Security-Policy that allows only this origin (the page loads nothing else).
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

import orjson

from modelyard.dashboard import data
from modelyard.frontends.http.errors import METHOD_NOT_ALLOWED_BODY, NOT_FOUND_BODY
from modelyard.frontends.http.request_response import (
    TEXT_HEADERS,
    Headers,
    Request,
    Response,
    message_response,
)

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer

PREFIX = "/dashboard"
_TYPES = {
    ".html": b"text/html; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".svg": b"image/svg+xml",
}
_SAFE: Headers = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        b"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]
_API_HEADERS: Headers = [
    (b"content-type", b"application/json"),
    (b"cache-control", b"no-store"),
    *_SAFE,
]
_NOT_FOUND = Response(NOT_FOUND_BODY, 404, TEXT_HEADERS)
_NOT_ALLOWED = Response(METHOD_NOT_ALLOWED_BODY, 405, [*TEXT_HEADERS, (b"allow", b"GET")])


def _static_files() -> dict[str, Response]:
    """Path under /dashboard/ -> its response, for every file in ``static/``."""
    out: dict[str, Response] = {}
    folder = resources.files("modelyard.dashboard").joinpath("static")
    for item in folder.iterdir():
        kind = _TYPES.get("." + item.name.rsplit(".", 1)[-1])
        if kind is None or not item.is_file():
            continue
        headers = [(b"content-type", kind), (b"cache-control", b"no-cache"), *_SAFE]
        out["static/" + item.name] = Response(item.read_bytes(), 200, headers)
    out[""] = out.pop("static/index.html")
    return out


class Dashboard:
    """Answers every path under ``/dashboard`` (the router checks access first)."""

    def __init__(self, core: InferenceServer) -> None:
        self.core = core
        self.files = _static_files()
        # The page's links are relative: /dashboard sends the browser to /dashboard/.
        self._redirect = Response(b"", 308, [(b"location", b"dashboard/")])

    async def handle(self, request: Request, path: str) -> Response:
        rest = path[len(PREFIX) :]
        if rest and not rest.startswith("/"):
            return _NOT_FOUND  # /dashboardX is not ours
        if request.method != "GET":
            return _NOT_ALLOWED  # read-only
        if not rest:
            return self._redirect
        rest = rest[1:]
        if rest.startswith("api/"):
            return await self._api(request, rest[4:])
        return self.files.get(rest, _NOT_FOUND)

    async def _api(self, request: Request, name: str) -> Response:
        core = self.core
        if name == "models":
            value = await data.models(core)
        elif name == "call_graph":
            value = data.call_graph(core)
        elif name == "traces":
            query = parse_qs(request.scope.get("query_string", b"").decode("latin-1"))
            limit = data.DEFAULT_TRACES
            if "limit" in query:
                text = query["limit"][-1]
                if not text.isdigit():
                    return message_response(
                        f"'limit' must be a non-negative integer, got '{text}'", 400
                    )
                limit = int(text)
            model = query["model"][-1] if "model" in query else ""
            value = data.traces(core, limit, model)
        else:
            return _NOT_FOUND
        return Response(orjson.dumps(value), 200, _API_HEADERS)
