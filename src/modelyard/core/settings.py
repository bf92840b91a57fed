"""Log and trace settings, as the logging and trace extensions expose them."""

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


_TRACE_DEFAULTS: dict[str, Any] = {
    "trace_level": ["OFF"],
    "trace_rate": "1000",
    "trace_count": "-1",
    "log_frequency": "0",
    "trace_file": "",
    "trace_mode": "triton",
}


class TraceSettings:
    """Stored and reported as Triton does; tracing itself is not collected."""

    def __init__(self) -> None:
        self.globals: dict[str, Any] = dict(_TRACE_DEFAULTS)
        self.models: dict[str, dict[str, Any]] = {}

    def get(self, model: str = "") -> dict[str, Any]:
        return {**self.globals, **self.models.get(model, {})}

    def update(self, model: str, settings: dict[str, Any]) -> dict[str, Any]:
        target = self.models.setdefault(model, {}) if model else self.globals
        for key, value in settings.items():
            if key == "trace_file":
                raise Unsupported("trace file location can not be updated through network protocol")
            if key not in _TRACE_DEFAULTS:
                raise InvalidArgument(f"unknown trace setting '{key}'")
            if value is None:
                if model:
                    target.pop(key, None)
                else:
                    target[key] = _TRACE_DEFAULTS[key]
            elif key == "trace_level":
                levels = value if isinstance(value, list) else [value]
                target[key] = [str(v) for v in levels]
            else:
                target[key] = str(value)
        return self.get(model)
