"""``--trace-config`` and Triton's deprecated trace flags as Triton 2.51 parses them
(src/command_line_parser.cc), with its messages and warnings.

Global settings are ``<setting>=<value>`` (``rate``, ``level``, ``count``, ``mode``); mode
settings are ``<mode>,<setting>=<value>``: ``triton,file=PATH``, ``triton,log-frequency=N``,
``opentelemetry,url=URL``, ``opentelemetry,resource=KEY=VALUE`` (repeatable) and the batch
span processor's ``bsp_max_queue_size``, ``bsp_schedule_delay``,
``bsp_max_export_batch_size`` (defaults from ``OTEL_BSP_*`` or 2048, 5000, 512). ``level``
may be given several times (the levels add up).

The deprecated ``--trace-file``, ``--trace-level`` (repeatable, levels add up),
``--trace-rate``, ``--trace-count`` and ``--trace-log-frequency`` each print a warning as
they are read; ``--trace-config`` is applied on top of them (a warning for each setting it
overrides; its levels add to theirs), and in OpenTelemetry mode the file and log frequency
are ignored (a warning each). ``OFF`` disables tracing only from ``--trace-level``: Triton
2.51 drops a ``--trace-config level=OFF`` among other levels (it sets a copy of its flag).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# Trace levels: bits, as TRITONSERVER_InferenceTraceLevel.
LEVEL_OFF = 0
LEVEL_TIMESTAMPS = 0x4
LEVEL_TENSORS = 0x8

MODE_TRITON = "triton"
MODE_OPENTELEMETRY = "opentelemetry"

_INT32 = (-(1 << 31), (1 << 31) - 1)
_UINT32 = (0, (1 << 32) - 1)
_UNSIGNED = 0xFFFFFFFF  # Triton stores rate and log frequency as uint32

TRACE_CONFIG = "trace-config"
# Triton's deprecated flags -> what its warning says to use instead.
DEPRECATED_FLAGS = {
    "trace-file": "triton,file=<filepath>",
    "trace-level": "level=<OFF|TIMESTAMPS|TENSORS>",
    "trace-rate": "rate=<rate value>",
    "trace-count": "count=<count value>",
    "trace-log-frequency": "triton,log-frequency=<log frequency value>",
}
# The --trace-config setting that overrides each, as its override warning names it.
_OVERRIDES = {
    ("", "rate"): ("trace-rate", "rate value"),
    ("", "level"): ("trace-level", "level"),
    ("", "count"): ("trace-count", "count"),
    (MODE_TRITON, "file"): ("trace-file", "file"),
    (MODE_TRITON, "log-frequency"): ("trace-log-frequency", "log-frequency"),
}

# Batch span processor settings, their environment variables and defaults (as Triton's).
BSP_DEFAULTS = (
    ("bsp_max_export_batch_size", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512"),
    ("bsp_schedule_delay", "OTEL_BSP_SCHEDULE_DELAY", "5000"),
    ("bsp_max_queue_size", "OTEL_BSP_MAX_QUEUE_SIZE", "2048"),
)


class TraceConfigError(ValueError):
    """A bad ``--trace-config``: the text is Triton's."""


@dataclass
class TraceConfig:
    level: int = LEVEL_OFF
    rate: int = 1000
    count: int = -1
    log_frequency: int = 0
    file: str = ""
    mode: str = MODE_TRITON
    # OpenTelemetry mode's settings in the order given (then the defaults Triton adds):
    # url, resource (KEY=VALUE, repeatable), bsp_* (integers, as text).
    otel: list[tuple[str, str]] = field(default_factory=list)

    def otel_value(self, key: str) -> str | None:
        values = [v for k, v in self.otel if k == key]
        return values[-1] if values else None

    @property
    def resources(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for key, value in self.otel:
            if key == "resource":
                name, _, val = value.partition("=")
                out[name] = val
        return out


def parse_level(text: str) -> int:
    arg = text.lower()  # (the message shows it lowered too)
    if arg in ("false", "off"):
        return LEVEL_OFF
    if arg in ("true", "on", "min", "max", "timestamps"):
        return LEVEL_TIMESTAMPS
    if arg == "tensors":
        return LEVEL_TENSORS
    raise TraceConfigError(f"invalid value for trace level option: {arg}")


def parse_mode(text: str) -> str:
    arg = text.lower()
    if arg in (MODE_TRITON, MODE_OPENTELEMETRY):
        return arg
    raise TraceConfigError(
        f"invalid value for trace mode option: {arg}. "
        'Available options are "triton" and "opentelemetry"'
    )


def parse_int(text: str, bounds: tuple[int, int] = _INT32) -> int:
    """std::stoi-like: leading blanks, a sign and digits; what follows is ignored."""
    stripped = text.lstrip()
    end = 1 if stripped[:1] in ("+", "-") else 0
    while end < len(stripped) and stripped[end].isdigit():
        end += 1
    digits = stripped[:end]
    if not digits.lstrip("+-"):
        raise TraceConfigError(f"Invalid option value. Got {text}")
    value = int(digits)
    if not bounds[0] <= value <= bounds[1]:
        raise TraceConfigError(f"Provided option value is out of bound. Got {text}")
    return value


def split_item(item: str) -> tuple[str, str, str]:
    """``[mode,]setting=value`` -> (mode or "", setting, value), as ParseTraceConfigOption."""
    comma = item.find(",")
    mode = ""
    if comma > 0:
        mode = parse_mode(item[:comma])
    elif comma == 0:
        raise TraceConfigError(
            "No trace mode specified. --trace-config option format is "
            f"<trace mode>,<setting>=<value> or <setting>=<value>. Got {item}"
        )
    eq = item.find("=", comma + 1)
    setting, value = item[comma + 1 : eq], item[eq + 1 :]
    if eq < 0 or not setting or not value:
        raise TraceConfigError(
            f"--trace-config option format is '<trace mode>,<setting>=<value>'. Got {item}"
        )
    return mode, setting, value


def parse_trace_config(items: list[str]) -> TraceConfig:
    """The ``--trace-config`` flags, in order; TraceConfigError with Triton's text."""
    return parse_trace_flags([(TRACE_CONFIG, item) for item in items])


def _quiet(_: str) -> None:
    pass


def parse_trace_flags(
    flags: Sequence[tuple[str, str]], warn: Callable[[str], None] = _quiet
) -> TraceConfig:
    """The tracing flags in the order given, each ``(name, value)``: ``("trace-config",
    item)`` or a deprecated one (``("trace-rate", "1")``). ``warn`` gets Triton's warnings
    as Triton prints them (the deprecation's as each flag is read, so before its error);
    TraceConfigError with Triton's text."""
    config = TraceConfig()
    parsed: list[tuple[str, str, str]] = []
    given: set[str] = set()
    disabled = False
    for name, value in flags:
        try:
            if name == TRACE_CONFIG:
                parsed.append(split_item(value))
                continue
            warn(
                f"Warning: '--{name}' has been deprecated and will be removed in future "
                f"releases. Please use '--trace-config {DEPRECATED_FLAGS[name]} instead."
            )
            given.add(name)
            disabled |= _deprecated_flag(config, name, value)
        except TraceConfigError as e:
            raise TraceConfigError(f'Bad option: "--{name}".\n{e}') from None

    def overriding(mode: str, setting: str) -> None:
        flag, what = _OVERRIDES.get((mode, setting), ("", ""))
        if flag in given:
            warn(
                f"Warning: Overriding deprecated '--{flag}' in favor of provided {what} "
                "in --trace-config!"
            )

    for mode, setting, value in parsed:
        if not mode:
            try:
                overriding(mode, setting)
                _global_setting(config, setting, value)
            except TraceConfigError as e:
                raise TraceConfigError(f'Bad option: "--trace-config {setting}".\n{e}') from None
    if config.mode == MODE_TRITON:
        for mode, setting, value in parsed:
            if mode == MODE_TRITON:
                try:
                    overriding(mode, setting)
                    _triton_setting(config, setting, value)
                except TraceConfigError as e:
                    raise TraceConfigError(
                        f'Bad option: "--trace-config triton,{setting}".\n{e}'
                    ) from None
    else:
        for flag, tail in (("trace-file", " "), ("trace-log-frequency", "")):
            if flag in given:
                warn(
                    f"Warning: '--{flag}' is deprecated and will be ignored with "
                    f"opentelemetry tracing mode.{tail}"  # (Triton's, trailing blank too)
                )
        config.file, config.log_frequency = "", 0
        config.otel = _otel_settings([(s, v) for m, s, v in parsed if m == MODE_OPENTELEMETRY])
    if disabled:
        config.level = LEVEL_OFF
    return config


def _deprecated_flag(config: TraceConfig, name: str, value: str) -> bool:
    """Apply a deprecated flag; True when it is ``--trace-level OFF``, which (alone of the
    ways to say OFF) turns tracing off whatever other levels say."""
    if name == "trace-file":
        config.file = value
    elif name == "trace-level":
        level = parse_level(value)
        config.level |= level
        return level == LEVEL_OFF
    elif name == "trace-rate":
        config.rate = parse_int(value) & _UNSIGNED
    elif name == "trace-count":
        config.count = parse_int(value)
    else:
        config.log_frequency = parse_int(value) & _UNSIGNED
    return False


def _global_setting(config: TraceConfig, setting: str, value: str) -> None:
    if setting == "rate":
        config.rate = parse_int(value) & _UNSIGNED
    elif setting == "level":
        config.level |= parse_level(value)
    elif setting == "mode":
        config.mode = parse_mode(value)
    elif setting == "count":
        config.count = parse_int(value)


def _triton_setting(config: TraceConfig, setting: str, value: str) -> None:
    if setting == "file":
        config.file = value
    elif setting == "log-frequency":
        config.log_frequency = parse_int(value) & _UNSIGNED


def _otel_settings(given: list[tuple[str, str]]) -> list[tuple[str, str]]:
    out = []
    for setting, value in given:
        if setting.startswith("bsp_"):
            try:
                value = str(parse_int(value, _UINT32))
            except TraceConfigError as e:
                raise TraceConfigError(
                    f'Bad option: "--trace-config opentelemetry,{setting}".\n{e}'
                ) from None
        out.append((setting, value))
    names = {s for s, _ in out}
    for setting, env, default in BSP_DEFAULTS:
        if setting not in names:
            value = os.environ.get(env, default)
            try:
                out.append((setting, str(parse_int(value, _UINT32))))
            except TraceConfigError as e:
                raise TraceConfigError(f'Bad option: "{env}".\n{e}') from None
    return out
