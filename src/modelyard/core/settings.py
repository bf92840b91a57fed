"""Log and trace settings, as the logging and trace extensions expose them."""

from __future__ import annotations

import logging
from typing import Any

from modelyard.errors import InvalidArgument, Unsupported


class LogSettings:
    def __init__(self) -> None:
        self.values: dict[str, Any] = {
            "log_file": "", "log_info": True, "log_warning": True, "log_error": True,
            "log_verbose_level": 0, "log_format": "default",
        }  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return dict(self.values)

    def update(self, settings: dict[str, Any]) -> None:
        for key, value in settings.items():
            if key == "log_file":
                raise Unsupported("log file location can not be updated through network protocol")
            if key not in self.values:
                raise InvalidArgument(f"unknown log setting '{key}'")
            if key in ("log_info", "log_warning", "log_error") and not isinstance(value, bool):
                raise InvalidArgument(f"expect bool for '{key}'")
            if key == "log_verbose_level" and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise InvalidArgument(f"expect unsigned int for '{key}'")
            if key == "log_format" and value not in ("default", "ISO8601"):
                raise InvalidArgument(f"invalid log format '{value}'")
        self.values.update(settings)
        logger = logging.getLogger("modelyard")
        if self.values["log_verbose_level"] > 0:
            logger.setLevel(logging.DEBUG)
        elif self.values["log_info"]:
            logger.setLevel(logging.INFO)
        elif self.values["log_warning"]:
            logger.setLevel(logging.WARNING)
        else:
            logger.setLevel(logging.ERROR)


_TRACE_DEFAULTS: dict[str, Any] = {
    "trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1",
    "log_frequency": "0", "trace_file": "", "trace_mode": "triton",
}  # fmt: skip


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
