"""One error hierarchy with protocol-neutral codes.

:class:`ErrorCode` is the one table of Triton's error codes: the server's errors, the codes
that cross the worker boundary and ``pb_utils.TritonError``'s constants are its members. Each
frontend owns one table from it to its wire status (HTTP status / gRPC status code); nothing
below the frontends knows about HTTP or gRPC.
"""

from __future__ import annotations

import enum
from typing import Any


class ErrorCode(enum.IntEnum):
    """Triton's TRITONSERVER_Error_Code: a member's name is Triton's name for the code, its
    value Triton's number (what ``pb_utils.TritonError`` codes are), ``text`` Triton's words
    for it (TRITONSERVER_ErrorCodeString)."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    @property
    def text(self) -> str:
        return _CODE_TEXT[self]


_CODE_TEXT = {
    ErrorCode.UNKNOWN: "Unknown",
    ErrorCode.INTERNAL: "Internal",
    ErrorCode.NOT_FOUND: "Not found",
    ErrorCode.INVALID_ARG: "Invalid argument",
    ErrorCode.UNAVAILABLE: "Unavailable",
    ErrorCode.UNSUPPORTED: "Unsupported",
    ErrorCode.ALREADY_EXISTS: "Already exists",
    ErrorCode.CANCELLED: "Cancelled",
}


class ModelyardError(Exception):
    """An error that reaches a client: a code and a message naming what is wrong."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.name}: {self.message!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Errors cross process boundaries (Ray): keep the class, code, message and attributes
        # (the default pickling would call __init__ with the message alone).
        return (_restore, (type(self), self.message, self.__dict__))


def _restore(cls: type[ModelyardError], message: str, attrs: dict[str, Any]) -> ModelyardError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(attrs)
    return err


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


class VersionLoadError(ModelyardError):
    """A model version whose instances failed to initialize. The core reports it as Triton
    does: INVALID_ARG ``load failed for model '<m>': version <v> is at UNAVAILABLE state:
    <Code>: <detail>;\n``, and ``<Code>: <detail>`` as the model's reason in the index."""

    code = ErrorCode.INVALID_ARG

    def __init__(self, version: int, detail: str, detail_code: ErrorCode) -> None:
        self.version = version
        self.reason = f"{detail_code.text}: {detail}"
        super().__init__(f"version {version} is at UNAVAILABLE state: {self.reason};\n")


class ConfigError(ModelyardError):
    """A model configuration that cannot be parsed or validated; names the file and field."""

    code = ErrorCode.INVALID_ARG
