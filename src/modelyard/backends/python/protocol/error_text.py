"""Triton's texts for a model's failures, the same in both execution modes (the worker process
and the in-process instance word them alike)."""

from __future__ import annotations

import importlib
import linecache
import os
import traceback

import modelyard

# Frames from the server's own code are hidden: in Triton they are C++ and never show.
_SRC = os.path.dirname(os.path.dirname(os.path.abspath(modelyard.__file__)))
_OWN_CODE = tuple(
    os.path.join(_SRC, pkg) + os.sep for pkg in ("modelyard", "triton_python_backend_utils")
)


def format_exception(exc: BaseException) -> str:
    """Triton's (pybind11's) text for a Python error: type, message and the model's frames,
    innermost first."""
    lines = [f"{type(exc).__name__}: {exc}", "", "At:"]
    frames = traceback.extract_tb(exc.__traceback__)
    for fr in reversed(frames):
        path = os.path.abspath(fr.filename)
        if path.startswith(_OWN_CODE) or "/concurrent/futures/" in path:
            continue
        lines.append(f"  {fr.filename}({fr.lineno}): {fr.name}")
    return "\n".join(lines) + "\n"


# Frames of the import machinery (and of the thread that ran the import): Triton shows some of
# them under a model's import error; they never point at the model's mistake.
_MACHINERY = (
    os.path.dirname(os.path.abspath(importlib.__file__)) + os.sep,
    os.path.join(os.path.dirname(os.path.abspath(os.__file__)), "asyncio") + os.sep,
    os.path.join(os.path.dirname(os.path.abspath(os.__file__)), "concurrent") + os.sep,
)


def format_import_error(exc: BaseException) -> str:
    """A model file that failed to import (a syntax error, a missing module, an exception at
    module level): Triton's text -- type and message first, so clients comparing the start see
    what Triton writes -- and under ``At:`` the frames innermost first without the import
    machinery's, each model frame followed by its source line (a syntax error's with a caret
    under the column), so the message points at ``file(line)``."""
    lines = [f"{type(exc).__name__}: {exc}", "", "At:"]
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        lines.append(f"  {exc.filename}({exc.lineno})")
        lines += _source(exc.filename, exc.lineno, exc.text, exc.offset)
    for fr in reversed(traceback.extract_tb(exc.__traceback__)):
        path = os.path.abspath(fr.filename)
        if fr.filename.startswith("<frozen ") or path.startswith(_OWN_CODE + _MACHINERY):
            continue
        lines.append(f"  {fr.filename}({fr.lineno}): {fr.name}")
        lines += _source(fr.filename, fr.lineno or 0, fr.line, None)
    if lines[-1] == "At:":
        del lines[-2:]
    return "\n".join(lines) + "\n"


def _source(filename: str, lineno: int, text: str | None, offset: int | None) -> list[str]:
    """The source line (indented by four), and a caret under ``offset`` when given."""
    raw = text if text is not None else linecache.getline(filename, lineno)
    raw = raw.rstrip("\r\n")
    code = raw.strip()
    if not code:
        return []
    out = [f"    {code}"]
    if offset is not None and offset > 0:
        col = offset - 1 - (len(raw) - len(raw.lstrip()))
        out.append("    " + " " * max(0, min(col, len(code))) + "^")
    return out


def batch_error(instance: str, detail: str) -> str:
    """The error of every request of a batch whose ``execute`` failed."""
    return f"Failed to process the request(s) for model '{instance}', message: {detail}"


# What a failed model-control call raises in the model, as Triton words it: the operation's
# prefix, then the stub's "request for model '<instance>'" wrapper around the server's error.
_CONTROL_PREFIX = {
    "load": "Failed to load model: ",
    "unload": "Failed to unload model: ",
    "ready": "Failed to check model readiness: ",
}


def control_error_text(op: str, instance: str, message: str) -> str:
    prefix = _CONTROL_PREFIX.get(op, "")
    return f"{prefix}Failed to process the request for model '{instance}', message: {message}"


def forked_bls_text(pid: int, owner: int) -> str:
    """The error a BLS or model-control call gets in a process the model forked (a
    ``multiprocessing`` pool, ``os.fork``): the channel to the server belongs to the model's
    own process, whose threads read the replies, so the call could never be answered."""
    return (
        f"BLS is not supported in a process the model forked (pid {pid}): only the model's "
        f"own process (pid {owner}) can reach the server; make the call there"
    )
