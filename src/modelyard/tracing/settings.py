"""Trace settings with Triton's run-time semantics (src/tracer.cc TraceManager):

* a global setting, the one the server started with (``default``), and per-model settings
  that override some fields and fall back to the global setting for the rest;
* an update replaces a setting object (traces in flight keep the one that sampled them);
  ``None`` for a field clears it (a model falls back to the global value, the global
  setting to the startup value); a model setting with nothing left specified is removed;
* an update that would leave tracing on but unable to sample is refused with Triton's
  "Attempting to set invalid trace setting :<reason>";
* each setting samples on its own: every ``rate``-th request, at most ``count`` traces
  (-1: no limit), and a propagated sampled ``traceparent`` forces a trace (OpenTelemetry).

The HTTP and gRPC update parsers keep each frontend's messages (they differ by a space).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any

from modelyard.errors import InvalidArgument, Unsupported
from modelyard.tracing.config import (
    LEVEL_OFF,
    LEVEL_TENSORS,
    LEVEL_TIMESTAMPS,
    MODE_TRITON,
    TraceConfig,
)

_FIELDS = ("level", "rate", "count", "log_frequency")
_KEYS = {
    "trace_level": "level",
    "trace_rate": "rate",
    "trace_count": "count",
    "log_frequency": "log_frequency",
}
_INT32_MAX = (1 << 31) - 1
_UINT32_MAX = (1 << 32) - 1


@dataclass
class TraceSetting:
    """One setting object: what samples a request's trace, and how it is recorded."""

    level: int
    rate: int
    count: int
    log_frequency: int
    file: str
    mode: str
    otel: list[tuple[str, str]]
    specified: frozenset[str] = frozenset()  # the fields set for this setting itself
    # Sampling state (under the lock) and the traces the Triton file writer collected.
    sample: int = 0
    collected: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def reason(self) -> str:
        """Why this setting cannot trace ("" when it can, or only its count stops it)."""
        if self.level == LEVEL_OFF:
            return "tracing is disabled"
        if self.rate == 0:
            return "sample rate must be non-zero"
        if self.mode == MODE_TRITON and not self.file:
            return "trace file name is not given"
        return ""

    @property
    def valid(self) -> bool:
        return not self.reason and self.count != 0

    def take(self, force: bool = False) -> bool:
        """Whether the next request is traced (Triton's SampleTrace)."""
        hit = False
        with self._lock:
            if self.rate != 0:
                if not self.valid and not force:
                    return False
                self.sample += 1
                hit = self.sample % self.rate == 0
                if hit and self.count > 0:
                    self.count -= 1
                elif hit and self.count == 0:
                    hit = False
        return hit or force

    def as_dict(self) -> dict[str, Any]:
        """As the trace-setting extension answers (repeated keys of the mode's settings, such
        as ``resource``, as a list; the HTTP frontend keeps the last)."""
        levels = []
        if self.level & LEVEL_TIMESTAMPS:
            levels.append("TIMESTAMPS")
        if self.level & LEVEL_TENSORS:
            levels.append("TENSORS")
        out: dict[str, Any] = {
            "trace_level": levels or ["OFF"],
            "trace_rate": str(self.rate),
            "trace_count": str(self.count),
        }
        if self.mode == MODE_TRITON:
            out["log_frequency"] = str(self.log_frequency)
            out["trace_file"] = self.file
        out["trace_mode"] = self.mode
        if self.mode != MODE_TRITON:
            for key, value in self.otel:
                if key in out:
                    previous = out[key]
                    out[key] = [*(previous if isinstance(previous, list) else [previous]), value]
                else:
                    out[key] = value
        return out


def from_config(config: TraceConfig) -> TraceSetting:
    return TraceSetting(
        config.level,
        config.rate,
        config.count,
        config.log_frequency,
        config.file,
        config.mode,
        list(config.otel),
    )


class TraceSettings:
    """The global setting and the per-model ones; ``on`` is False when no setting can
    trace anything (the one check a request pays with tracing off)."""

    def __init__(self, config: TraceConfig | None = None) -> None:
        self.default = from_config(config or TraceConfig())
        self.global_ = replace(self.default, _lock=threading.Lock())
        self.models: dict[str, TraceSetting] = {}
        self._fallback: set[str] = set()  # models with fields from the global setting
        self._lock = threading.Lock()
        self.on = self._any_on()

    def _any_on(self) -> bool:
        return any(s.level != LEVEL_OFF for s in (self.global_, *self.models.values()))

    def for_model(self, model: str) -> TraceSetting:
        return self.models.get(model, self.global_)

    def get(self, model: str = "") -> dict[str, Any]:
        return self.for_model(model).as_dict()

    def update(self, model: str, update: dict[str, Any]) -> dict[str, Any]:
        """Apply a parsed update (``trace_level`` as level bits, numbers as ints, None to
        clear); InvalidArgument as Triton's."""
        with self._lock:
            self._update(model, update)
            if not model:  # models that mirror global fields follow the new values
                for name in list(self._fallback):
                    self._update(name, {})
            self.on = self._any_on()
        return self.get(model)

    def _update(self, model: str, update: dict[str, Any]) -> None:
        current = self.models.get(model) if model else self.global_
        fallback = self.global_ if model else self.default
        values = {f: getattr(fallback, f) for f in _FIELDS}
        specified = set()
        for key, name in _KEYS.items():
            if key in update and update[key] is None:
                continue  # cleared
            if key in update:
                values[name] = update[key]
                specified.add(name)
            elif current is not None and name in current.specified:
                values[name] = getattr(current, name)
                specified.add(name)
        if model:
            if not specified:
                self.models.pop(model, None)
                self._fallback.discard(model)
                return
            self._fallback.add(model)  # (the file is never specified per model)
        setting = TraceSetting(
            values["level"],
            values["rate"],
            values["count"],
            values["log_frequency"],
            fallback.file,
            fallback.mode,
            fallback.otel,
            frozenset(specified),
        )
        if not setting.valid and setting.level != LEVEL_OFF:
            raise InvalidArgument(f"Attempting to set invalid trace setting :{setting.reason}")
        if model:
            self.models[model] = setting
        else:
            self.global_ = setting

    def forget_model(self, model: str) -> None:
        with self._lock:
            self.models.pop(model, None)
            self._fallback.discard(model)
            self.on = self._any_on()


# -- the extension's update requests --------------------------------------------------------


def _stoi(key: str, text: str, low: int, high: int, grpc: bool) -> int:
    """std::stoi's reading of ``text`` with Triton's messages for ``key``."""
    stripped = text.lstrip()
    end = 1 if stripped[:1] in ("+", "-") else 0
    while end < len(stripped) and stripped[end].isdigit():
        end += 1
    if not stripped[:end].lstrip("+-"):
        raise InvalidArgument(f"Unable to parse '{key}', got: {text}")
    value = int(stripped[:end])
    if not -(1 << 31) <= value <= _INT32_MAX:
        raise InvalidArgument(
            f"Unable to parse '{key}', value is out of range [ {low}, {high} ], got: {text}"
        )
    return value


def parse_update(settings: dict[str, Any], grpc: bool = False) -> dict[str, Any]:
    """An update as the frontends receive it (strings, lists of level names, None to clear)
    -> typed values for :meth:`TraceSettings.update`; errors with the frontend's text.
    Unknown keys (``trace_mode`` too) are ignored, as Triton does."""
    if "trace_file" in settings:
        raise Unsupported("trace file location can not be updated through network protocol")
    out: dict[str, Any] = {}
    if "trace_level" in settings:
        levels = settings["trace_level"]
        if levels is None:
            out["trace_level"] = None
        else:
            bits = LEVEL_OFF
            names = levels if isinstance(levels, list) else [levels]
            for name in names:
                if name == "OFF" and len(names) > 1:
                    raise InvalidArgument("Expect only one trace level 'OFF' is specified")
                bits |= {"TIMESTAMPS": LEVEL_TIMESTAMPS, "TENSORS": LEVEL_TENSORS}.get(name, 0)
            out["trace_level"] = bits
    if "trace_rate" in settings:
        text = settings["trace_rate"]
        out["trace_rate"] = (
            None if text is None else _stoi("trace_rate", text, 0, _UINT32_MAX, grpc) & _UINT32_MAX
        )
    if "trace_count" in settings:
        text = settings["trace_count"]
        if text is None:
            out["trace_count"] = None
        else:
            count = _stoi("trace_count", text, -1, _INT32_MAX, grpc)
            if count < -1:
                space = " " if grpc else ""
                raise InvalidArgument(
                    f"Unable to parse 'trace_count'. Expecting value >= -1, got:{space}{text}"
                )
            out["trace_count"] = count
    if "log_frequency" in settings:
        text = settings["log_frequency"]
        out["log_frequency"] = (
            None
            if text is None
            else _stoi("log_frequency", text, 0, _UINT32_MAX, grpc) & _UINT32_MAX
        )
    return out
