"""modelyard.logs: Triton's line format and per-severity switches (the server-side tests are in
tests/backends/python/test_model_logs.py)."""

from __future__ import annotations

import logging
import re

from modelyard.logs import LogConfig, SeverityFilter, TritonFormatter


def _record(level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord(
        "modelyard.model", level, "/repo/m/1/model.py", 12, "%s", (message,), None
    )


def test_default_and_iso8601_lines() -> None:
    config = LogConfig()
    fmt = TritonFormatter(config)
    rec = _record(logging.WARNING, 'a "b"\nc')
    line = fmt.format(rec)
    assert re.fullmatch(r'W\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ model\.py:12\] "a \\"b\\"\\nc"', line)
    config.log_format = "ISO8601"
    line = fmt.format(rec)
    assert re.fullmatch(
        r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ W \d+ model\.py:12\] "a \\"b\\"\\nc"', line
    )


def test_verbose_lines_print_with_the_letter_i() -> None:
    assert TritonFormatter(LogConfig()).format(_record(logging.DEBUG, "x")).startswith("I")
    assert TritonFormatter(LogConfig()).format(_record(logging.ERROR, "x")).startswith("E")


def test_each_severity_has_its_own_switch() -> None:
    config = LogConfig(log_info=False, log_warning=True, log_error=False, log_verbose_level=1)
    keep = SeverityFilter(config).filter
    assert not keep(_record(logging.INFO, "x"))
    assert keep(_record(logging.WARNING, "x"))
    assert not keep(_record(logging.ERROR, "x"))
    assert keep(_record(logging.DEBUG, "x"))  # verbose does not depend on log_info
    config.log_verbose_level = 0
    assert not keep(_record(logging.DEBUG, "x"))
