"""What both cloud endpoints do to hand a request to the KServe handlers: point the ASGI scope
at the KServe route, carry the binary extension's JSON length from the ``Content-Type``
parameter over to ``Inference-Header-Content-Length``, drop the compression headers (Triton's
cloud endpoints neither decompress nor compress), and answer their own early exits."""

from __future__ import annotations

from urllib.parse import quote

from modelyard.errors import InvalidArgument
from modelyard.frontends.http.request_response import TEXT_HEADERS, Scope, Send

# KServe's header, and the request headers the cloud endpoints do not honour.
HEADER_LENGTH = b"inference-header-content-length"
_DROPPED = {b"content-encoding", b"accept-encoding", HEADER_LENGTH}


def header_length(content_type: str | None, mime: str) -> str | None:
    """The JSON length a ``<mime><N>`` content type announces, as the text to give KServe's
    header (None: the body is all JSON). Like Triton, the number is read as C's ``atoi``
    reads it (``abc`` is 0: a raw binary body), and the type must start with ``mime``."""
    if content_type is None:
        return None
    at = content_type.find(mime)
    if at < 0:
        return None
    if at > 0:
        raise InvalidArgument(
            f"expect MIME type for binary data starts with '{mime}', got: {content_type}"
        )
    text = content_type[len(mime) :]
    try:
        int(text)
        return text  # (its own text in an out-of-range message, as Triton's)
    except ValueError:
        return str(_atoi(text))


def _atoi(text: str) -> int:
    text = text.lstrip(" \t\n\r\f\v")
    sign, digits = 1, ""
    if text[:1] in ("+", "-"):
        sign, text = (-1 if text[0] == "-" else 1), text[1:]
    for ch in text:
        if not ch.isdigit() or not ch.isascii():
            break
        digits += ch
    return sign * int(digits) if digits else 0


def to_kserve(scope: Scope, method: str, path: str, mime: str) -> None:
    """Turn ``scope`` (in place: the connection watches this object for a client that goes
    away) into a request for KServe's ``method path``."""
    headers = [(k, v) for k, v in scope["headers"] if k not in _DROPPED]
    content_type = next((v for k, v in scope["headers"] if k == b"content-type"), None)
    length = header_length(None if content_type is None else content_type.decode("latin-1"), mime)
    if length is not None:
        headers.append((HEADER_LENGTH, length.encode("latin-1")))
    scope["headers"] = headers
    scope["method"] = method
    scope["path"] = path
    scope["raw_path"] = path.encode("latin-1")
    scope["query_string"] = b""


def model_path(model: str, kind: str) -> str:
    """``/v2/models/<model>/<kind>`` with the name quoted as a client quotes it."""
    return f"/v2/models/{quote(model, safe='')}/{kind}"


async def reply(send: Send, status: int, body: bytes = b"") -> None:
    """One of Triton's bare answers (text/plain, usually empty): 400 for a route the
    endpoint does not have, 404, 405."""
    headers = [*TEXT_HEADERS, (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
