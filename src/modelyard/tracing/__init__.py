"""Tracing: Triton's trace settings and files, OpenTelemetry export, BLS calls as child
spans, the store of recent traces and the BLS call graph (``tracer.py`` and beside it).

For model code, :func:`span` opens a span of the model's own under the request's::

    from modelyard import tracing

    def execute(self, requests):
        with tracing.span("tokenize", {"tokens": 12}):
            ...
        # BLS calls made inside a span hang under it

It works in both execution modes (in a worker process the span travels to the server with
the request's other spans) and does nothing when the request is not traced or no modelyard
server runs the model (a unit test). This module imports nothing of the server: a worker
process can load it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from triton_python_backend_utils._runtime import get_runtime

__all__ = ["span"]


def span(
    name: str, attributes: Mapping[str, Any] | None = None
) -> contextlib.AbstractContextManager[None]:
    """A context manager: a span named ``name`` (with ``attributes``: str, bool, int or
    float values) under the current request's span, from entering to leaving the block."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"span name must be a non-empty str, got {name!r}")
    opener = getattr(get_runtime(), "open_span", None)
    if opener is None:
        return contextlib.nullcontext()
    result: contextlib.AbstractContextManager[None] = opener(name, dict(attributes or {}))
    return result
