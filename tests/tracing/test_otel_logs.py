"""OpenTelemetry mode with no collector: one warning at start-up naming the URL, and the SDK's
export failures in the server's log format, at most one a minute (the pure parts with a fake
clock; the real server with a closed port)."""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Iterator

import pytest

from modelyard.tracing.otel_logs import (
    SDK_LOGGER,
    SdkLines,
    check_reachable,
    route_sdk_logs,
    unreachable,
)
from tests.conftest import Serving
from tests.helpers import EXAMPLES, WAIT_S
from tests.tracing.traces import infer

# A line of the server's log (log_format "default"): letter, time, pid, file:line, message.
LOG_LINE = re.compile(r'^[IWE]\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ [^ ]+:\d+\] ".*"$')
# gRPC's C core writes to stderr itself (absl's format), whatever Python logging does.
GRPC_CORE = re.compile(
    r"^(WARNING: All log messages before absl|[IWEF]\d{4} [\d:.]+ +\d+ \S+\.cc:\d+\])"
)
SDK_LINE = "OpenTelemetry SDK: "
UNREACHABLE = "cannot be reached"


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @property
    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]


@pytest.fixture
def target() -> Iterator[tuple[logging.Logger, _Lines]]:
    """A logger standing for the server's, and what reaches it; the SDK's logger as it was."""
    logger = logging.getLogger("tests.otel_logs")
    lines = _Lines()
    logger.addHandler(lines)
    logger.propagate = False
    sdk = logging.getLogger(SDK_LOGGER)
    saved = (sdk.handlers[:], sdk.level, sdk.propagate)
    yield logger, lines
    logger.removeHandler(lines)
    sdk.handlers[:], sdk.level, sdk.propagate = saved


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_at_most_one_line_a_minute(target: tuple[logging.Logger, _Lines]) -> None:
    logger, lines = target
    clock = _Clock()
    handler = SdkLines(logger, 60.0, clock)
    sdk = logging.getLogger("opentelemetry.sdk.trace.export")
    sdk.addHandler(handler)
    sdk.propagate = False
    try:
        for now in (0.0, 1.0, 30.0, 59.9, 60.0, 61.0):
            clock.now = now
            sdk.warning("export failed %d", int(now))
        assert lines.messages == [
            f"{SDK_LINE}export failed 0",
            f"{SDK_LINE}export failed 60 (3 more OpenTelemetry SDK lines left out before it)",
        ]
        assert lines.records[0].levelno == logging.WARNING
        handler.summary()  # at shutdown: the one left out since
        assert (
            lines.messages[-1] == "1 more OpenTelemetry SDK lines left out (at most one a minute)"
        )
        handler.summary()  # nothing more to say
        assert len(lines.records) == 3
    finally:
        sdk.removeHandler(handler)
        sdk.propagate = True


def test_an_exception_is_one_line(target: tuple[logging.Logger, _Lines]) -> None:
    logger, lines = target
    route_sdk_logs(logger)
    try:
        raise ConnectionError("Connection refused")
    except ConnectionError:
        logging.getLogger("opentelemetry.sdk.trace.export").exception("Exception while exporting")
    [record] = lines.records
    assert record.getMessage() == f"{SDK_LINE}Exception while exporting: ConnectionError: " + (
        "Connection refused"
    )
    assert record.exc_info is None and record.levelno == logging.ERROR


def test_route_replaces_an_earlier_one_and_keeps_the_root_out(
    target: tuple[logging.Logger, _Lines], caplog: pytest.LogCaptureFixture
) -> None:
    logger, lines = target
    route_sdk_logs(logger)
    route_sdk_logs(logger)
    sdk = logging.getLogger(SDK_LOGGER)
    assert sum(isinstance(h, SdkLines) for h in sdk.handlers) == 1
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("opentelemetry.exporter").warning("retrying")
        logging.getLogger("opentelemetry.exporter").info("not an SDK warning")
    assert lines.messages == [f"{SDK_LINE}retrying"]
    # The SDK's own record never reaches the root (only the server's line does, where the
    # server's logger sends it).
    assert not [r for r in caplog.records if r.getMessage() in ("retrying", "not an SDK warning")]


def _closed_port() -> int:
    """A port nothing listens on (bound a moment ago, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert unreachable(f"http://127.0.0.1:{port}/v1/traces") is None
    assert unreachable(f"http://127.0.0.1:{_closed_port()}/v1/traces") is not None
    assert unreachable("http://127.0.0.1:port/v1/traces") is not None


def test_check_reachable_warns_once_naming_the_url(target: tuple[logging.Logger, _Lines]) -> None:
    logger, lines = target
    url = f"http://127.0.0.1:{_closed_port()}/v1/traces"
    check_reachable(url, logger).join(WAIT_S)
    [record] = lines.records
    assert record.levelno == logging.WARNING and url in record.getMessage()
    assert UNREACHABLE in record.getMessage()


def test_no_collector_logs_in_the_server_format(serving: Serving) -> None:
    url = f"127.0.0.1:{_closed_port()}/v1/traces"
    settings = ["mode=opentelemetry", f"opentelemetry,url={url}", "level=TIMESTAMPS", "rate=1"]
    settings.append("opentelemetry,bsp_schedule_delay=50")  # export attempts come quickly
    flags = [a for s in settings for a in ("--trace-config", s)]
    with serving.server(serving.repo(["add_sub"], source=EXAMPLES), *flags) as srv:
        for _ in range(3):
            infer(srv.http_url, "http", "add_sub")
        srv.wait_for_log(re.compile(re.escape(SDK_LINE) + ".*"))  # the first failed export
        for _ in range(3):  # more batches fail: left out, counted
            infer(srv.http_url, "http", "add_sub")
        srv.stop(timeout=60)  # (stopping flushes the last batch: the exporter retries it)
    lines = [line for line in srv.output().splitlines() if line.strip()]
    raw = [line for line in lines if not LOG_LINE.match(line) and not GRPC_CORE.match(line)]
    assert not raw, "\n".join(raw)
    sdk = [line for line in lines if SDK_LINE in line]
    assert sdk and all(LOG_LINE.match(line) for line in sdk)
    # Every failure is accounted for: logged, or counted on a later line (the last at stop).
    counted = [int(n) for n in re.findall(r"(\d+) more OpenTelemetry SDK lines", srv.output())]
    assert len(sdk) + sum(counted) >= 2, lines
    warnings = [line for line in lines if UNREACHABLE in line]
    assert len(warnings) == 1 and f"http://{url}" in warnings[0]
    assert warnings[0].startswith("W")
