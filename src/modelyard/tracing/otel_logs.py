"""OpenTelemetry mode's log lines. The SDK reports export failures (a refused connection, a
retry, a dropped batch) through Python logging under ``opentelemetry``, where the server has
no handler: they came out raw (logging's last resort), outside the log format, once per
failed batch. Here they go to the server's log in its format, at most one a minute (the next
one says how many were left out), and at start-up one warning says when the collector cannot
be reached. No OpenTelemetry import: this is plain logging and a socket."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

SDK_LOGGER = "opentelemetry"
INTERVAL_S = 60.0
PROBE_TIMEOUT_S = 2.0


class SdkLines(logging.Handler):
    """The SDK's records into ``target`` (the server's logger), at most one per
    ``interval_s``; each counts the records left out before it."""

    def __init__(
        self,
        target: logging.Logger,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._target = target
        self._interval = interval_s
        self._clock = clock
        self._last: float | None = None
        self.suppressed = 0

    def emit(self, record: logging.LogRecord) -> None:  # (under the handler's lock)
        now = self._clock()
        if self._last is not None and now - self._last < self._interval:
            self.suppressed += 1
            return
        self._last = now
        text = f"OpenTelemetry SDK: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            # The cause in one line: the whole traceback, once a minute, says nothing more.
            error = record.exc_info[1]
            text = f"{text}: {type(error).__name__}: {error}"
        if self.suppressed:
            text += f" ({self.suppressed} more OpenTelemetry SDK lines left out before it)"
            self.suppressed = 0
        line = logging.makeLogRecord(record.__dict__)
        line.msg, line.args, line.exc_info, line.exc_text = text, None, None, None
        self._target.handle(line)

    def summary(self) -> None:
        """At shutdown: how many lines the limit left out since the last one."""
        self.acquire()
        try:
            count, self.suppressed = self.suppressed, 0
        finally:
            self.release()
        if count:
            self._target.warning(
                "%d more OpenTelemetry SDK lines left out (at most one a minute)", count
            )


def route_sdk_logs(target: logging.Logger, interval_s: float = INTERVAL_S) -> SdkLines:
    """Send the SDK's warnings and errors to ``target``, rate limited; replaces an earlier
    route (one exporter at a time), and stops them reaching the root logger."""
    sdk = logging.getLogger(SDK_LOGGER)
    for old in [h for h in sdk.handlers if isinstance(h, SdkLines)]:
        sdk.removeHandler(old)
    handler = SdkLines(target, interval_s)
    sdk.addHandler(handler)
    sdk.setLevel(logging.WARNING)
    sdk.propagate = False
    return handler


def unreachable(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Why a TCP connection to ``url``'s host and port fails, or None when it connects."""
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as e:  # a port that is not a number
        return str(e)
    try:
        with socket.create_connection((parts.hostname or "localhost", port), timeout_s):
            return None
    except OSError as e:
        return e.strerror or str(e) or type(e).__name__


def check_reachable(
    url: str, target: logging.Logger, timeout_s: float = PROBE_TIMEOUT_S
) -> threading.Thread:
    """Try ``url`` once on a thread of its own (start-up waits for nothing) and log one
    warning naming it when it cannot be reached."""

    def probe() -> None:
        reason = unreachable(url, timeout_s)
        if reason is not None:
            target.warning(
                "OpenTelemetry collector %s cannot be reached (%s): traces are dropped "
                "until it can; export failures are logged at most once a minute",
                url,
                reason,
            )

    thread = threading.Thread(target=probe, name="modelyard-otel-probe", daemon=True)
    thread.start()
    return thread
