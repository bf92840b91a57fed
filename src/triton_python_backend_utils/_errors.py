"""TritonError (an error value a model puts in a response) and TritonModelException."""

from __future__ import annotations

# The codes are modelyard's one table (modelyard.errors is a leaf: importing it loads nothing
# else of the server).
from modelyard.errors import ErrorCode

__all__ = ["ErrorCode", "TritonError", "TritonModelException"]


class TritonModelException(Exception):
    """Raised by every pb_utils API failure; models may raise it too."""


class TritonError:
    """An error carried by an InferenceResponse (not an exception: it cannot be raised).

    `code` must be one of the class constants (``TritonError.NOT_FOUND`` ...); a plain int is
    a TypeError, as in Triton. ``str(err)`` is not the message; use ``err.message()``.
    """

    __slots__ = ("_code", "_message")

    UNKNOWN = ErrorCode.UNKNOWN
    INTERNAL = ErrorCode.INTERNAL
    NOT_FOUND = ErrorCode.NOT_FOUND
    INVALID_ARG = ErrorCode.INVALID_ARG
    UNAVAILABLE = ErrorCode.UNAVAILABLE
    UNSUPPORTED = ErrorCode.UNSUPPORTED
    ALREADY_EXISTS = ErrorCode.ALREADY_EXISTS
    CANCELLED = ErrorCode.CANCELLED

    def __init__(self, message: str, code: ErrorCode = ErrorCode.INTERNAL) -> None:
        if isinstance(message, bytes):
            message = message.decode("utf-8")
        if not isinstance(message, str):
            raise TypeError(
                "TritonError(): incompatible arguments: 'message' must be str, "
                f"got {type(message).__name__}"
            )
        if not isinstance(code, ErrorCode):
            raise TypeError(
                "TritonError(): incompatible arguments: 'code' must be one of the TritonError "
                f"constants (e.g. TritonError.INTERNAL), got {type(code).__name__}"
            )
        self._message = message
        self._code = code

    @classmethod
    def _from_server(cls, message: str, code: int = 1) -> TritonError:
        """Server-side constructor taking a plain int code (unknown codes become INTERNAL)."""
        err = cls.__new__(cls)
        err._message = message
        try:
            err._code = ErrorCode(code)
        except ValueError:
            err._code = ErrorCode.INTERNAL
        return err

    def message(self) -> str:
        return self._message

    def code(self) -> ErrorCode:
        return self._code

    def __repr__(self) -> str:
        return (
            f"<triton_python_backend_utils.TritonError code={self._code.name} "
            f"message={self._message!r}>"
        )
