"""The runtime hook: everything in pb_utils that needs a server goes through one object.

The server installs it with ``set_runtime(rt)`` (process-wide) or, for one thread or task,
``with runtime_context(rt): ...`` (a ContextVar; threads the model starts do not inherit it,
they see the process-wide runtime). With none installed, a model file still imports and its
``execute`` can be called in a unit test: BLS and the model-control API raise
TritonModelException, Logger prints to stderr, get_model_dir() answers the caller's folder.
"""

from __future__ import annotations

import contextvars
import os
import sys
import time
from collections.abc import Awaitable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ._errors import TritonModelException

if TYPE_CHECKING:
    from ._request import InferenceRequest
    from ._response import InferenceResponse

__all__ = ["Runtime", "get_runtime", "require_runtime", "runtime_context", "set_runtime"]


@runtime_checkable
class Runtime(Protocol):
    """What the server provides to pb_utils. All methods may be called from any thread.

    Errors: a method raises ``TritonModelException`` with the complete text the model should
    see (pb_utils adds no prefix). ``exec``/``async_exec`` report inference failures as an
    InferenceResponse whose ``has_error()`` is True, not as exceptions; they raise only when
    BLS is impossible (e.g. "BLS is only supported during the 'execute' function.").
    """

    def exec(
        self, request: InferenceRequest, decoupled: bool
    ) -> InferenceResponse | Iterator[InferenceResponse]:
        """Run a BLS request and block until it completes.

        decoupled=False: return the one InferenceResponse.
        decoupled=True: return an iterator of the callee's responses, ending after the final
        one; a flag-only final shows up as a last empty InferenceResponse (no outputs, no
        error). ``__next__`` blocks until the next response and must work from any thread
        (it is also called from event-loop threads). An object with a ``cancel()`` method
        gets ``ResponseIterator.cancel()`` forwarded.
        """
        ...

    def async_exec(self, request: InferenceRequest, decoupled: bool) -> Awaitable[Any]:
        """Start a BLS request from a coroutine; called on the running event loop.

        Returns an awaitable resolving to what ``exec`` returns: the InferenceResponse
        (decoupled=False), or the blocking, thread-safe response iterator (decoupled=True);
        Triton models iterate the awaited value with a plain ``for`` on the loop's thread, so
        that iterator must not depend on the loop to make progress.
        """
        ...

    def log(self, level: int, message: str, filename: str, line: int) -> None:
        """One Logger line: level 0=INFO 1=WARNING 2=ERROR 3=VERBOSE; ``filename`` is the full
        path of the caller's source file. The runtime applies the server's log settings."""
        ...

    def load_model(self, name: str, config: str, files: dict[str, bytes] | None) -> None:
        """Load or reload a model. ``config`` is a JSON config override or ""; ``files`` maps
        "file:<relative path>" to content (arguments already checked by pb_utils)."""
        ...

    def unload_model(self, name: str, unload_dependents: bool) -> None: ...

    def is_model_ready(self, name: str, version: str) -> bool:
        """``version`` is "" (latest) or a decimal string (checked by pb_utils)."""
        ...

    def model_dir(self) -> str:
        """The calling model's version directory ``<repo>/<model>/<version>``."""
        ...


_process_runtime: Runtime | None = None
_context_runtime: contextvars.ContextVar[Runtime | None] = contextvars.ContextVar(
    "triton_python_backend_utils_runtime", default=None
)


def set_runtime(runtime: Runtime | None) -> None:
    """Install the process-wide runtime (None removes it)."""
    global _process_runtime
    _process_runtime = runtime


def get_runtime() -> Runtime | None:
    """The runtime for the calling context: a ``runtime_context`` one, else the process one."""
    rt = _context_runtime.get()
    return rt if rt is not None else _process_runtime


class runtime_context:  # a class, not a generator: in-process models enter it per execute
    """Use ``runtime`` for the calling thread/task (and tasks it creates) inside the block."""

    __slots__ = ("_runtime", "_token")

    def __init__(self, runtime: Runtime | None) -> None:
        self._runtime = runtime

    def __enter__(self) -> None:
        self._token = _context_runtime.set(self._runtime)

    def __exit__(self, *exc: object) -> None:
        _context_runtime.reset(self._token)


def require_runtime(what: str) -> Runtime:
    rt = get_runtime()
    if rt is None:
        raise TritonModelException(
            f"{what} needs a running modelyard server: no server runtime is installed in this "
            "process (the model is being run outside a server, e.g. from a unit test). "
            "Serve the model repository with `modelyard serve`, or install a runtime with "
            "triton_python_backend_utils.set_runtime()."
        )
    return rt


# -- fallbacks without a runtime -------------------------------------------------------------

_LEVEL_LETTERS = "IWEV"


def print_log(level: int, message: str, filename: str, line: int) -> None:
    """Write one log line to stderr in Triton's format (used when no runtime is installed)."""
    now = time.time()
    tm = time.localtime(now)
    micros = int((now % 1) * 1_000_000)
    letter = _LEVEL_LETTERS[level] if 0 <= level < len(_LEVEL_LETTERS) else "I"
    stamp = time.strftime("%m%d %H:%M:%S", tm)
    sys.stderr.write(
        f"{letter}{stamp}.{micros:06d} {os.getpid()} {os.path.basename(filename)}:{line}] "
        f"{message}\n"
    )
    sys.stderr.flush()


def caller_dir(depth: int) -> str:
    """The folder of the source file ``depth`` frames above the caller (fallback model dir)."""
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:
        return os.getcwd()
    filename = frame.f_code.co_filename
    if not filename or filename.startswith("<"):
        return os.getcwd()
    return os.path.dirname(os.path.abspath(filename))
