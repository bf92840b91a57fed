"""The pure parts of tracing: ``--trace-config`` parsing (Triton's messages, checked against
the reference binary's), settings semantics and sampling, Triton's tensor text, the stores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from modelyard.errors import InvalidArgument
from modelyard.tracing.config import (
    LEVEL_OFF,
    LEVEL_TENSORS,
    LEVEL_TIMESTAMPS,
    TraceConfigError,
    parse_trace_config,
)
from modelyard.tracing.settings import TraceSettings, parse_update
from modelyard.tracing.stores import CallGraph, RecentTraces
from modelyard.tracing.triton_file import tensor_text
from tests.helpers import EXAMPLES
from tests.serverproc import refused_start


def test_trace_config_values() -> None:
    config = parse_trace_config(
        [
            "triton,file=/tmp/t.json",
            "triton,log-frequency=5",
            "level=TIMESTAMPS",
            "level=tensors",
            "rate=1",
            "count=7",
        ]
    )
    assert config.level == LEVEL_TIMESTAMPS | LEVEL_TENSORS
    assert (config.rate, config.count, config.log_frequency) == (1, 7, 5)
    assert (config.file, config.mode) == ("/tmp/t.json", "triton")
    # Triton 2.51 drops a --trace-config level=OFF beside other levels (the reference reports
    # TIMESTAMPS); only --trace-level=OFF turns tracing off (test_deprecated_flags.py).
    assert parse_trace_config(["level=TIMESTAMPS", "level=OFF"]).level == LEVEL_TIMESTAMPS
    assert parse_trace_config(["level=OFF"]).level == LEVEL_OFF
    assert parse_trace_config(["rate=-1"]).rate == 4294967295  # stored unsigned, as Triton


def test_trace_config_opentelemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "99")
    config = parse_trace_config(
        [
            "mode=opentelemetry",
            "opentelemetry,url=localhost:4318/v1/traces",
            "opentelemetry,resource=a=b",
            "opentelemetry,resource=service.name=x",
            "opentelemetry,bsp_schedule_delay=10",
            "triton,file=/ignored.json",
        ]
    )
    assert config.mode == "opentelemetry" and config.file == ""
    assert config.resources == {"a": "b", "service.name": "x"}
    assert config.otel_value("bsp_schedule_delay") == "10"
    assert config.otel_value("bsp_max_queue_size") == "99"  # from the environment
    assert config.otel_value("bsp_max_export_batch_size") == "512"


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("rate=abc", 'Bad option: "--trace-config rate".\nInvalid option value. Got abc'),
        (
            "level=bogus",
            'Bad option: "--trace-config level".\ninvalid value for trace level option: bogus',
        ),
        (
            "mode=xyz",
            'Bad option: "--trace-config mode".\ninvalid value for trace mode option: xyz. '
            'Available options are "triton" and "opentelemetry"',
        ),
        (
            ",rate=1",
            'Bad option: "--trace-config".\nNo trace mode specified. --trace-config option '
            "format is <trace mode>,<setting>=<value> or <setting>=<value>. Got ,rate=1",
        ),
        (
            "rate",
            'Bad option: "--trace-config".\n--trace-config option format is '
            "'<trace mode>,<setting>=<value>'. Got rate",
        ),
        (
            "triton,file=",
            'Bad option: "--trace-config".\n--trace-config option format is '
            "'<trace mode>,<setting>=<value>'. Got triton,file=",
        ),
        (
            "triton,log-frequency=abc",
            'Bad option: "--trace-config triton,log-frequency".\nInvalid option value. Got abc',
        ),
        (
            "rate=99999999999",
            'Bad option: "--trace-config rate".\n'
            "Provided option value is out of bound. Got 99999999999",
        ),
        (
            "foo,rate=1",
            'Bad option: "--trace-config".\ninvalid value for trace mode option: foo. '
            'Available options are "triton" and "opentelemetry"',
        ),
    ],
)
def test_trace_config_errors(item: str, message: str) -> None:
    with pytest.raises(TraceConfigError) as e:
        parse_trace_config([item])
    assert str(e.value) == message


def test_bad_bsp_setting() -> None:
    with pytest.raises(TraceConfigError, match="opentelemetry,bsp_schedule_delay"):
        parse_trace_config(["mode=opentelemetry", "opentelemetry,bsp_schedule_delay=-1"])


def test_serve_refuses_a_bad_trace_config(tmp_path: Path) -> None:
    err = refused_start(EXAMPLES, "--trace-config", "level=bogus")
    assert "invalid value for trace level option: bogus" in err


def _settings(**kw: object) -> TraceSettings:
    items = [f"{k}={v}" for k, v in kw.items()]
    return TraceSettings(parse_trace_config(["triton,file=/tmp/x.json", *items]))


def test_sampling_rate_and_count() -> None:
    settings = _settings(level="TIMESTAMPS", rate=3, count=2)
    setting = settings.for_model("m")
    taken = [setting.take() for _ in range(9)]
    assert taken == [False, False, True, False, False, True, False, False, False]
    assert setting.take(force=True)  # a sampled traceparent forces a trace


def test_model_override_falls_back_to_global() -> None:
    settings = _settings(level="TIMESTAMPS", rate=1)
    assert settings.on
    settings.update("m", parse_update({"trace_rate": "5"}))
    settings.update("", parse_update({"trace_rate": "9", "log_frequency": "2"}))
    assert settings.get("m")["trace_rate"] == "5"
    assert settings.get("m")["log_frequency"] == "2"  # not set for m: the global value
    settings.update("m", parse_update({"trace_rate": None}))
    assert "m" not in settings.models  # nothing left specified: the global setting serves
    settings.update("", parse_update({"trace_level": ["OFF"]}))
    assert not settings.on


def test_invalid_update_is_refused() -> None:
    settings = TraceSettings()  # no trace file
    with pytest.raises(InvalidArgument, match="trace file name is not given"):
        settings.update("", parse_update({"trace_level": ["TIMESTAMPS"]}))
    with pytest.raises(InvalidArgument, match="Expecting value >= -1, got: -2"):
        parse_update({"trace_count": "-2"}, grpc=True)
    assert parse_update({"trace_rate": "-1"})["trace_rate"] == 4294967295


def test_tensor_text() -> None:
    assert tensor_text("FP32", np.array([1.0, 0.5, 1e6], np.float32)) == "1,0.5,1e+06"
    assert tensor_text("INT32", np.array([[1, -2]], np.int32)) == "1,-2"
    assert tensor_text("BOOL", np.array([True, False])) == "1,0"
    assert tensor_text("BYTES", np.array([b"a", b"bc"], object)) == '"a","bc"'
    assert tensor_text("FP16", np.array([1.0], np.float16)) == ""


def test_call_graph_percentiles() -> None:
    graph = CallGraph()
    for us in range(1, 101):
        graph.record("a", "b", us * 1000, error=us == 100)
    graph.record("a", "c", 5_000_000_000, error=False)  # 5 s
    [ab, ac] = graph.snapshot()
    assert (ab["caller"], ab["callee"], ab["calls"], ab["errors"]) == ("a", "b", 100, 1)
    assert ab["mean_us"] == pytest.approx(50.5)
    assert ab["p50_us"] == pytest.approx(50, rel=0.06)
    assert ab["p99_us"] == pytest.approx(99, rel=0.06)
    assert ac["p50_us"] == pytest.approx(5_000_000, rel=0.06)


def test_recent_traces_newest_first_and_bounded() -> None:
    store = RecentTraces(3)
    for i in range(5):
        store.add({"trace_id": str(i)})
    assert [t["trace_id"] for t in store.recent()] == ["4", "3", "2"]
    assert [t["trace_id"] for t in store.recent(1)] == ["4"]
