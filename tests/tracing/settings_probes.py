"""The trace-setting extension observed the same way on modelyard and the reference Triton
(test_settings_reference.py): a fixed sequence of reads and updates over HTTP and gRPC,
each answer as plain JSON-able data (``["ok", settings]`` or ``["err", status, message]``).
The sequence is stateful on purpose: per-model overrides, clearing and fallback to the
global settings are part of what is compared."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

MODEL = "add_sub"


def _call(fn: Callable[[], Any]) -> list[Any]:
    try:
        return ["ok", fn()]
    except Exception as e:
        status = e.status() if hasattr(e, "status") else None
        message = e.message() if hasattr(e, "message") else str(e)
        return ["err", str(status), message]


def _grpc_settings(answer: Any) -> dict[str, Any]:
    """gRPC answers {"settings": {key: {"value": [...]}}}: flattened to HTTP's shape."""
    flat: dict[str, Any] = {}
    for key, value in answer.get("settings", {}).items():
        values = value.get("value", [])
        flat[key] = values if key == "trace_level" else (values[0] if values else "")
    return flat


# (label, model, settings): None settings reads; a value None clears that setting.
STEPS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("get_global", "", None),
    ("get_model", MODEL, None),
    ("rate_global", "", {"trace_rate": "5"}),
    ("rate_zero", "", {"trace_rate": "0"}),
    ("rate_negative", "", {"trace_rate": "-1"}),
    ("rate_text", "", {"trace_rate": "abc"}),
    ("count_below", "", {"trace_count": "-2"}),
    ("count_zero", "", {"trace_count": "0"}),
    ("log_frequency_text", "", {"log_frequency": "x"}),
    ("level_off_and_more", "", {"trace_level": ["OFF", "TIMESTAMPS"]}),
    ("level_bogus", "", {"trace_level": ["BOGUS"]}),
    ("level_timestamps", "", {"trace_level": ["TIMESTAMPS"]}),
    ("level_model", MODEL, {"trace_level": ["TIMESTAMPS", "TENSORS"]}),
    ("mode", "", {"trace_mode": "opentelemetry"}),
    ("unknown_key", "", {"no_such_setting": "1"}),
    ("file", "", {"trace_file": "/tmp/x.json"}),
    ("model_override", MODEL, {"trace_rate": "7", "trace_count": "3"}),
    ("global_after_override", "", {"trace_rate": "9", "log_frequency": "2"}),
    ("model_after_global", MODEL, None),
    ("model_clear_rate", MODEL, {"trace_rate": None}),
    ("model_clear_rest", MODEL, {"trace_count": None, "trace_level": None}),
    ("global_clear", "", {"trace_rate": None, "log_frequency": None, "trace_count": None}),
    ("unknown_model_get", "nosuch", None),
    ("unknown_model_update", "nosuch", {"trace_rate": "2"}),
    ("level_off", "", {"trace_level": ["OFF"]}),
    ("global_end", "", None),
]


def _http_step(client: Any, model: str, settings: dict[str, Any] | None) -> Callable[[], Any]:
    if settings is None:
        return lambda: client.get_trace_settings(model)
    return lambda: client.update_trace_settings(model, settings)


def _grpc_step(client: Any, model: str, settings: dict[str, Any] | None) -> Callable[[], Any]:
    if settings is None:
        return lambda: client.get_trace_settings(model, as_json=True)
    return lambda: client.update_trace_settings(model, settings, as_json=True)


def http_probes(url: str) -> dict[str, list[Any]]:
    client = httpclient.InferenceServerClient(url)
    out: dict[str, list[Any]] = {}
    try:
        for label, model, settings in STEPS:
            out[label] = _call(_http_step(client, model, settings))
    finally:
        client.close()
    return out


def grpc_probes(url: str) -> dict[str, list[Any]]:
    client = grpcclient.InferenceServerClient(url)
    out: dict[str, list[Any]] = {}
    try:
        for label, model, settings in STEPS:
            answer = _call(_grpc_step(client, model, settings))
            if answer[0] == "ok":
                answer = ["ok", _grpc_settings(answer[1])]
            out[label] = answer
    finally:
        client.close()
    return out
