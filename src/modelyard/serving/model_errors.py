"""Who hears about a request that failed inside its model (``execute`` raised).

Triton logs nothing for such a failure: only the client learns. ``modelyard dev`` listens, to
print each failure once at the model's file and line. One process-wide listener (or none,
which costs a failed response one check).
"""

from __future__ import annotations

from collections.abc import Callable

Listener = Callable[[str, str], None]  # (model name, error message)
_listener: Listener | None = None


def listen(listener: Listener | None) -> None:
    """Call ``listener`` for every request that fails inside its model (None: stop)."""
    global _listener
    _listener = listener


def report(model: str, message: str) -> None:
    listener = _listener
    if listener is not None:
        listener(model, message)
