"""Triton's texts for a model's failures, the same in both execution modes (the worker process
and the in-process instance word them alike)."""

from __future__ import annotations

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
