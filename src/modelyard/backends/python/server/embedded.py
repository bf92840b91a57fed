"""What an in-process model sees of the process, as in Triton's stub (an embedded interpreter).

- ``sys.argv`` is ``['']``. It is set for the whole process when the first in-process model
  loads (and again before each later one, so one model's changes do not reach the next), not
  swapped in and out around the model's calls: threads a model starts run whenever they like,
  and a value that changed under them would be worse than one that does not. The server reads
  its own arguments once, at start, before any model loads; ``sys.orig_argv`` keeps them.
- ``sys.stdout`` and ``sys.stderr`` write whole lines: each thread's text is kept until its
  line ends (or it flushes) and the line is written in one piece, so two models printing at
  once never merge their lines (``print`` writes the text and its end separately). Only the
  process's own streams are wrapped, not a test runner's capture (``modelyard.testing``).
"""

from __future__ import annotations

import io
import sys
import threading
from typing import Any, TextIO

# A thread's text with no line end yet is written anyway past this size.
_MAX_PENDING = 1 << 16


class WholeLines(io.TextIOBase):
    """A text stream that passes each thread's text to ``stream`` a whole line at a time."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream
        self._lock = threading.Lock()
        self._local = threading.local()

    def _pending(self) -> list[str]:
        pending: list[str] | None = getattr(self._local, "pending", None)
        if pending is None:
            pending = self._local.pending = []
        return pending

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        pending = self._pending()
        pending.append(text)
        if "\n" in text or sum(map(len, pending)) > _MAX_PENDING:
            joined = "".join(pending)
            end = joined.rfind("\n") + 1 or len(joined)
            pending[:] = [joined[end:]] if end < len(joined) else []
            with self._lock:
                self.stream.write(joined[:end])
                if self.stream.line_buffering:
                    self.stream.flush()
        return len(text)

    def flush(self) -> None:
        pending = self._pending()
        with self._lock:
            if pending:
                self.stream.write("".join(pending))
                pending.clear()
            self.stream.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.stream.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self.stream.errors

    def __getattr__(self, name: str) -> Any:  # buffer, line_buffering, reconfigure, ...
        return getattr(self.stream, name)


_streams_lock = threading.Lock()


def embed() -> None:
    """Give the process what Triton's stub gives a model (see the module's docstring); called
    before each in-process model loads."""
    sys.argv = [""]
    with _streams_lock:
        if type(sys.stdout) is io.TextIOWrapper:
            sys.stdout = WholeLines(sys.stdout)
        if type(sys.stderr) is io.TextIOWrapper:
            sys.stderr = WholeLines(sys.stderr)
