"""Errors in OpenAI's JSON shape: ``{"error": {"message", "type", "param", "code"}}`` with
OpenAI's status codes; core errors map through the HTTP frontend's one status table."""

from __future__ import annotations

from typing import Any

import orjson

from modelyard.errors import ModelyardError
from modelyard.frontends.http.errors import HTTP_STATUS

INVALID_REQUEST = "invalid_request_error"
AUTHENTICATION = "authentication_error"
SERVER_ERROR = "server_error"


class OpenAIError(Exception):
    """An answer in OpenAI's error shape: ``status`` and the four fields of its body."""

    def __init__(
        self,
        status: int,
        message: str,
        type: str = INVALID_REQUEST,
        param: str | None = None,
        code: str | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def doc(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def body(self) -> bytes:
        return orjson.dumps(self.doc())


def bad_request(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, INVALID_REQUEST, param, code)


def unknown_model(name: str) -> OpenAIError:
    return OpenAIError(
        404,
        f"The model `{name}` does not exist or is not served over the OpenAI API.",
        INVALID_REQUEST,
        "model",
        "model_not_found",
    )


def from_core(error: ModelyardError) -> OpenAIError:
    """A core or model error: the HTTP frontend's status for its code; 4xx are the client's
    (``invalid_request_error``), the others the server's (``server_error``)."""
    status = HTTP_STATUS.get(error.code, 500)
    kind = INVALID_REQUEST if status < 500 else SERVER_ERROR
    return OpenAIError(status, error.message, kind, None, error.code.name.lower())
