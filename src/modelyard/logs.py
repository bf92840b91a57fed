"""The server log, written as Triton writes it, and the settings the logging extension changes.

Every line has Triton's shape: the level letter, the time, the server's process id, the source
``file:line`` and the message as a JSON string (Triton 2.51 quotes messages, so a model cannot
forge log lines with embedded newlines)::

    I1125 08:05:59.331360 11814 model.py:14] "exec info"            (log_format "default")
    2026-11-25T08:05:59Z I 11814 model.py:14] "exec info"           (log_format "ISO8601")

Severities are switched on and off one by one (``log_info``, ``log_warning``, ``log_error``),
and verbose lines (Python's DEBUG, printed with the letter I) appear while
``log_verbose_level`` is 1 or more, whatever ``log_info`` says, as in Triton. Model lines from
``pb_utils.Logger`` come in through :func:`model_line` with the model's own file and line.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import asdict, dataclass

ROOT = "modelyard"
# The line a server prints once its initial model load is over (tests and tools wait for it).
INITIAL_LOAD_DONE = "initial model load done"
_MODEL = "modelyard.model"

# pb_utils.Logger levels (Triton's numbering) -> Python levels; VERBOSE is verbose level 1.
MODEL_LEVELS = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR, 3: logging.DEBUG}


@dataclass
class LogConfig:
    """What GET v2/logging reports; ``log_file`` is fixed at start (``--log-file``)."""

    log_file: str = ""
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = "default"  # or "ISO8601"


class TritonFormatter(logging.Formatter):
    def __init__(self, config: LogConfig) -> None:
        super().__init__()
        self.config = config

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message = f"{message}\n{self.formatException(record.exc_info)}"
        letter = _letter(record.levelno)
        where = f"{record.process} {record.filename}:{record.lineno}] {json.dumps(message)}"
        if self.config.log_format == "ISO8601":
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))
            return f"{stamp} {letter} {where}"
        stamp = time.strftime("%m%d %H:%M:%S", time.localtime(record.created))
        micros = int((record.created % 1) * 1_000_000)
        return f"{letter}{stamp}.{micros:06d} {where}"


def _letter(levelno: int) -> str:
    if levelno >= logging.ERROR:
        return "E"
    if levelno >= logging.WARNING:
        return "W"
    return "I"  # info and verbose lines alike


class SeverityFilter(logging.Filter):
    """Triton's per-severity switches (a level threshold cannot say "warnings but no info")."""

    def __init__(self, config: LogConfig) -> None:
        super().__init__()
        self.config = config

    def filter(self, record: logging.LogRecord) -> bool:
        c = self.config
        level = record.levelno
        if level >= logging.ERROR:
            return c.log_error
        if level >= logging.WARNING:
            return c.log_warning
        if level >= logging.INFO:
            return c.log_info
        return c.log_verbose_level >= 1


_config = LogConfig()


def configure(config: LogConfig) -> None:
    """Send the ``modelyard`` loggers to stderr (or ``config.log_file``) in Triton's format."""
    global _config
    _config = config
    handler: logging.Handler
    if config.log_file:
        handler = logging.FileHandler(config.log_file, encoding="utf-8")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TritonFormatter(config))
    handler.addFilter(SeverityFilter(config))
    root = logging.getLogger(ROOT)
    for old in root.handlers:
        old.close()
    root.handlers[:] = [handler]
    root.propagate = False
    _apply_level()


def current() -> LogConfig:
    return _config


def update(**changes: object) -> LogConfig:
    """Change settings at run time (values already checked by the caller)."""
    for key, value in changes.items():
        setattr(_config, key, value)
    _apply_level()
    return _config


def as_dict() -> dict[str, object]:
    return asdict(_config)


def _apply_level() -> None:
    # The logger's level only spares building records nobody prints; the filter decides.
    verbose = _config.log_verbose_level >= 1
    logging.getLogger(ROOT).setLevel(logging.DEBUG if verbose else logging.INFO)


def model_line(level: int, message: str, filename: str, line: int) -> None:
    """One ``pb_utils.Logger`` line (level 0=INFO 1=WARNING 2=ERROR 3=VERBOSE) from a model,
    at the model's ``filename:line``; from any thread."""
    logger = logging.getLogger(_MODEL)
    py_level = MODEL_LEVELS.get(level, logging.INFO)
    if not logger.isEnabledFor(py_level):
        return
    record = logger.makeRecord(_MODEL, py_level, filename, line, "%s", (message,), None)
    logger.handle(record)
