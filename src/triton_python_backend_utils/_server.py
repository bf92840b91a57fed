"""The pb_utils calls that reach the server: Logger, the model-control API, get_model_dir."""

from __future__ import annotations

import enum
import sys
from typing import Any

from ._errors import TritonModelException
from ._runtime import caller_dir, get_runtime, print_log, require_runtime

__all__ = ["Logger", "get_model_dir", "is_model_ready", "load_model", "unload_model"]


class _LogLevel(enum.IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


class Logger:
    """Static logging API: ``Logger.log_info(msg)`` ... or ``Logger.log(msg, Logger.WARNING)``.

    Lines go to the server log with the caller's file and line; with no server, to stderr.
    """

    LogLevel = _LogLevel
    INFO = _LogLevel.INFO
    WARNING = _LogLevel.WARNING
    ERROR = _LogLevel.ERROR
    VERBOSE = _LogLevel.VERBOSE

    def __new__(cls, *args: Any, **kwargs: Any) -> Logger:
        raise TypeError("triton_python_backend_utils.Logger: No constructor defined!")

    @staticmethod
    def log(message: str, level: _LogLevel = _LogLevel.INFO) -> None:
        if not isinstance(level, _LogLevel):
            raise TypeError(
                "Logger.log(): 'level' must be a Logger level (Logger.INFO, Logger.WARNING, "
                f"Logger.ERROR, Logger.VERBOSE), got {type(level).__name__}"
            )
        _emit(int(level), message)

    @staticmethod
    def log_info(message: str) -> None:
        _emit(0, message)

    @staticmethod
    def log_warn(message: str) -> None:
        _emit(1, message)

    @staticmethod
    def log_error(message: str) -> None:
        _emit(2, message)

    @staticmethod
    def log_verbose(message: str) -> None:
        _emit(3, message)


_LogLevel.__name__ = "LogLevel"
_LogLevel.__qualname__ = "Logger.LogLevel"


def _emit(level: int, message: str) -> None:
    if not isinstance(message, str):
        raise TypeError(f"Logger: 'message' must be str, got {type(message).__name__}")
    # Two frames up: the model code that called Logger.log_*.
    try:
        frame = sys._getframe(2)
        filename, line = frame.f_code.co_filename, frame.f_lineno
    except ValueError:
        filename, line = "<unknown>", 0
    rt = get_runtime()
    if rt is None:
        print_log(level, message, filename, line)
    else:
        rt.log(level, message, filename, line)


# -- model control -------------------------------------------------------------------------------


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Load (or reload) a model; ``config`` is a JSON config override, ``files`` maps
    "file:<path>" to bytes for an override model directory (needs ``config``)."""
    model_name = _as_str(model_name, "model_name")
    config = _as_str(config, "config")
    if files is not None:
        if not isinstance(files, dict):
            raise TritonModelException(
                f"failed to load model '{model_name}', files should be a dictionary of file "
                "paths and file contents"
            )
        for path, content in files.items():
            if not isinstance(path, str) or not isinstance(content, bytes):
                raise TritonModelException(
                    f"failed to load model '{model_name}', files should be a dictionary of "
                    "file paths (str) and file contents (bytes)"
                )
        if files and not config:
            raise TritonModelException(
                "Failed to load model: Load parameter 'config' must be specified for model "
                "file override"
            )
    require_runtime("load_model").load_model(model_name, config, files)


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Unload a model (and, with ``unload_dependents``, the models depending on it)."""
    model_name = _as_str(model_name, "model_name")
    if unload_dependents is None:
        raise TypeError("unload_model(): 'unload_dependents' must be a bool, got None")
    require_runtime("unload_model").unload_model(model_name, bool(unload_dependents))


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Whether a model (``model_version`` as a string, "" = latest) is ready on the server."""
    model_name = _as_str(model_name, "model_name")
    if not isinstance(model_version, str):
        raise TypeError(
            "is_model_ready(): 'model_version' must be a str (e.g. \"1\"), got "
            f"{type(model_version).__name__}"
        )
    if model_version:
        try:
            valid = int(model_version) >= 0
        except ValueError:
            valid = False
        if not valid:
            raise TritonModelException(
                "failed to get model version from specified version string "
                f"'{model_version}', version should be an integral value > 0"
            )
    return bool(require_runtime("is_model_ready").is_model_ready(model_name, model_version))


def get_model_dir() -> str:
    """The model's version directory (``<repo>/<model>/<version>``).

    Outside a server: the folder of the file that calls this, i.e. the model.py's folder.
    """
    rt = get_runtime()
    if rt is None:
        return caller_dir(1)
    return rt.model_dir()


def _as_str(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    raise TypeError(f"'{what}' must be str, got {type(value).__name__}")
