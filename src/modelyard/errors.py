"""One error hierarchy with protocol-neutral codes.

Each frontend owns one table from :class:`ErrorCode` to its wire status
(HTTP status / gRPC status code); nothing below the frontends knows about HTTP or gRPC.
The codes are Triton's (TRITONSERVER_Error_Code).
"""

from __future__ import annotations

import enum


class ErrorCode(enum.Enum):
    UNKNOWN = "UNKNOWN"
    INTERNAL = "INTERNAL"
    NOT_FOUND = "NOT_FOUND"
    INVALID_ARG = "INVALID_ARG"
    UNAVAILABLE = "UNAVAILABLE"
    UNSUPPORTED = "UNSUPPORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    CANCELLED = "CANCELLED"


class ModelyardError(Exception):
    """An error that reaches a client: a code and a message naming what is wrong."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.value}: {self.message!r})"


class InvalidArgument(ModelyardError):
    code = ErrorCode.INVALID_ARG


class NotFound(ModelyardError):
    code = ErrorCode.NOT_FOUND


class Unavailable(ModelyardError):
    code = ErrorCode.UNAVAILABLE


class Unsupported(ModelyardError):
    code = ErrorCode.UNSUPPORTED


class AlreadyExists(ModelyardError):
    code = ErrorCode.ALREADY_EXISTS


class Cancelled(ModelyardError):
    code = ErrorCode.CANCELLED


class InternalError(ModelyardError):
    code = ErrorCode.INTERNAL


class ConfigError(ModelyardError):
    """A model configuration that cannot be parsed or validated; names the file and field."""

    code = ErrorCode.INVALID_ARG
