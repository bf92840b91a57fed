"""The HTTP frontend's one table from core error codes to HTTP statuses, and error bodies."""

from __future__ import annotations

import orjson

from modelyard.errors import ErrorCode, ModelyardError

# Triton's HttpCodeFromError (protocol.md §5.1).
HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.INTERNAL: 500,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.UNSUPPORTED: 501,
    ErrorCode.INVALID_ARG: 400,
    ErrorCode.ALREADY_EXISTS: 400,
    ErrorCode.CANCELLED: 400,
    ErrorCode.UNKNOWN: 400,
}

NOT_FOUND_BODY = b'{"error":"Not Found"}'
METHOD_NOT_ALLOWED_BODY = b'{"error":"Method Not Allowed"}'


def http_status(error: ModelyardError) -> int:
    return HTTP_STATUS.get(error.code, 500)


def error_body(message: str) -> bytes:
    """``{"error": message}`` as JSON bytes."""
    return orjson.dumps({"error": message})


def restricted_body(header: str) -> bytes:
    """Triton's 403 body for a restricted API called without its header."""
    return error_body(f"This API is restricted, expecting header '{header}'")
