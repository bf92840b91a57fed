"""Log settings, as the logging extension exposes them (trace settings: modelyard.tracing)."""

from __future__ import annotations

from typing import Any

from modelyard import logs
from modelyard.errors import InvalidArgument, Unsupported


class LogSettings:
    """The logging extension's view of the server log (modelyard.logs holds the state, which
    the log handler reads on every line)."""

    def as_dict(self) -> dict[str, Any]:
        return logs.as_dict()

    def update(self, settings: dict[str, Any]) -> None:
        known = logs.as_dict()
        for key, value in settings.items():
            if key == "log_file":
                raise Unsupported("log file location can not be updated through network protocol")
            if key not in known:
                raise InvalidArgument(f"unknown log setting '{key}'")
            if key in ("log_info", "log_warning", "log_error") and not isinstance(value, bool):
                raise InvalidArgument(f"expect bool for '{key}'")
            if key == "log_verbose_level" and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise InvalidArgument(f"expect unsigned int for '{key}'")
            if key == "log_format" and value not in ("default", "ISO8601"):
                raise InvalidArgument(f"invalid log format '{value}'")
        logs.update(**settings)
