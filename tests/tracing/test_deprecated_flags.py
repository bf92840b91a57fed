"""Triton's deprecated trace flags (``--trace-file``, ``--trace-level``, ``--trace-rate``,
``--trace-count``, ``--trace-log-frequency``): their values, warnings and errors as Triton
2.51 prints them (the texts here are the reference binary's), how ``--trace-config``
combines with them, and the log-frequency files they ask for: every part a whole JSON array
while the server still runs, the rest written at stop."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tritonclient.http as httpclient

from modelyard.cli.main import build_parser
from modelyard.tracing.config import (
    LEVEL_OFF,
    LEVEL_TENSORS,
    LEVEL_TIMESTAMPS,
    TraceConfig,
    TraceConfigError,
    parse_trace_flags,
)
from tests.conftest import Serving
from tests.helpers import EXAMPLES
from tests.serverproc import refused_start
from tests.tracing.traces import infer, read_trace_file, requests_of


def _deprecated(flag: str, use: str) -> str:
    return (
        f"Warning: '--{flag}' has been deprecated and will be removed in future releases. "
        f"Please use '--trace-config {use} instead."
    )


FILE = _deprecated("trace-file", "triton,file=<filepath>")
LEVEL = _deprecated("trace-level", "level=<OFF|TIMESTAMPS|TENSORS>")
RATE = _deprecated("trace-rate", "rate=<rate value>")
COUNT = _deprecated("trace-count", "count=<count value>")
FREQUENCY = _deprecated("trace-log-frequency", "triton,log-frequency=<log frequency value>")


def _overriding(flag: str, what: str) -> str:
    return (
        f"Warning: Overriding deprecated '--{flag}' in favor of provided {what} in --trace-config!"
    )


def _parse(*argv: str) -> tuple[TraceConfig, list[str]]:
    """``serve``'s flags through its own parser, then Triton's rules; and the warnings."""
    args = build_parser().parse_args(["serve", "--model-repository", "repo", *argv])
    warnings: list[str] = []
    return parse_trace_flags(args.trace_flags, warnings.append), warnings


def test_values_and_warnings() -> None:
    config, warnings = _parse(
        "--trace-file=/tmp/t.json",
        "--trace-level=TIMESTAMPS",
        "--trace-level",
        "tensors",
        "--trace-rate=5",
        "--trace-count",
        "-3",
        "--trace-log-frequency=2",
    )
    assert config.level == LEVEL_TIMESTAMPS | LEVEL_TENSORS
    assert (config.rate, config.count, config.log_frequency) == (5, -3, 2)
    assert (config.file, config.mode) == ("/tmp/t.json", "triton")
    assert warnings == [FILE, LEVEL, LEVEL, RATE, COUNT, FREQUENCY]  # one per flag, in order
    assert _parse("--trace-rate=-1")[0].rate == 4294967295  # stored unsigned, as Triton


def test_trace_config_overrides_them() -> None:
    # What the reference printed and reported for these flags.
    config, warnings = _parse(
        *("--trace-level=TIMESTAMPS", "--trace-config", "level=TENSORS"),
        *("--trace-rate=5", "--trace-config", "rate=7"),
        *("--trace-count=3", "--trace-config", "count=9"),
        *("--trace-file=/tmp/c.json", "--trace-config", "triton,file=/tmp/d.json"),
        *("--trace-log-frequency=4", "--trace-config", "triton,log-frequency=6"),
    )
    assert config.level == LEVEL_TIMESTAMPS | LEVEL_TENSORS  # levels add up
    assert (config.rate, config.count, config.log_frequency) == (7, 9, 6)
    assert config.file == "/tmp/d.json"
    assert warnings == [
        LEVEL,
        RATE,
        COUNT,
        FILE,
        FREQUENCY,
        _overriding("trace-level", "level"),
        _overriding("trace-rate", "rate value"),
        _overriding("trace-count", "count"),
        _overriding("trace-file", "file"),
        _overriding("trace-log-frequency", "log-frequency"),
    ]


def test_off_disables_only_from_trace_level() -> None:
    # Triton 2.51 sets a copy of its "explicitly disabled" flag for --trace-config's levels.
    assert _parse("--trace-level=OFF", "--trace-config", "level=TIMESTAMPS")[0].level == LEVEL_OFF
    off_after = _parse("--trace-level=TIMESTAMPS", "--trace-config", "level=OFF")[0]
    assert off_after.level == LEVEL_TIMESTAMPS
    both = _parse("--trace-config", "level=TIMESTAMPS", "--trace-config", "level=OFF")[0]
    assert both.level == LEVEL_TIMESTAMPS
    assert _parse("--trace-level=TIMESTAMPS", "--trace-level=off")[0].level == LEVEL_OFF


def test_opentelemetry_mode_ignores_file_and_frequency() -> None:
    config, warnings = _parse(
        *("--trace-config", "mode=opentelemetry", "--trace-file=/tmp/q.json"),
        *("--trace-log-frequency=3", "--trace-level=TIMESTAMPS", "--trace-rate=2"),
    )
    assert (config.mode, config.file, config.log_frequency) == ("opentelemetry", "", 0)
    assert (config.level, config.rate) == (LEVEL_TIMESTAMPS, 2)
    assert warnings == [
        FILE,
        FREQUENCY,
        LEVEL,
        RATE,
        "Warning: '--trace-file' is deprecated and will be ignored with opentelemetry "
        "tracing mode. ",
        "Warning: '--trace-log-frequency' is deprecated and will be ignored with "
        "opentelemetry tracing mode.",
    ]


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--trace-rate=abc", 'Bad option: "--trace-rate".\nInvalid option value. Got abc'),
        ("--trace-count=", 'Bad option: "--trace-count".\nInvalid option value. Got '),
        (
            "--trace-log-frequency=99999999999",
            'Bad option: "--trace-log-frequency".\n'
            "Provided option value is out of bound. Got 99999999999",
        ),
        (
            "--trace-level=BoGus",  # Triton's message shows the value lowered
            'Bad option: "--trace-level".\ninvalid value for trace level option: bogus',
        ),
    ],
)
def test_errors(flag: str, message: str) -> None:
    warnings: list[str] = []
    args = build_parser().parse_args(["serve", "--model-repository", "repo", flag])
    with pytest.raises(TraceConfigError) as e:
        parse_trace_flags(args.trace_flags, warnings.append)
    assert str(e.value) == message
    assert len(warnings) == 1 and warnings[0].startswith(f"Warning: '{flag.split('=')[0]}' has")
    assert _parse("--trace-rate=12abc")[0].rate == 12  # std::stoi stops at the first non-digit


def test_serve_help_lists_them() -> None:
    text = subprocess.run(
        [sys.executable, "-m", "modelyard", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    for flag in ("trace-config", "trace-file", "trace-level", "trace-rate", "trace-count"):
        assert f"--{flag} " in text
    assert "--trace-log-frequency N" in text and "deprecated trace flags" in text


def test_serve_refuses_a_bad_value_after_its_warning() -> None:
    err = refused_start(EXAMPLES, "--trace-rate=abc")
    assert f'{RATE}\nBad option: "--trace-rate".\nInvalid option value. Got abc' in err


def _flags(path: Path) -> list[str]:
    return [
        f"--trace-file={path}",
        "--trace-level=TIMESTAMPS",
        "--trace-rate=1",
        "--trace-log-frequency=2",
    ]


def _requests(path: Path, part: int, wait: bool = False) -> dict[int, dict[str, Any]]:
    """The model records of part ``part`` (one per trace here), read as one whole JSON array
    (waiting for it, bounded, when ``wait``)."""
    return requests_of(read_trace_file(Path(f"{path}.{part}"), timeout=30 if wait else 0))


def test_log_frequency_parts_are_whole_json_while_serving(serving: Serving, tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    repo = serving.repo(["add_sub"], source=EXAMPLES)
    with serving.server(repo, *_flags(path)) as srv:
        assert [line for line in srv.output().splitlines() if line.startswith("Warning: ")] == [
            FILE,
            LEVEL,
            RATE,
            FREQUENCY,
        ]
        client = httpclient.InferenceServerClient(srv.http_url)
        try:
            assert client.get_trace_settings() == {
                "trace_level": ["TIMESTAMPS"],
                "trace_rate": "1",
                "trace_count": "-1",
                "log_frequency": "2",
                "trace_file": str(path),
                "trace_mode": "triton",
            }
        finally:
            client.close()
        for i in range(5):
            infer(srv.http_url, "http", "add_sub", request_id=str(i))
        # Two parts of two traces each, each read whole while the server runs (bounded wait).
        assert [len(_requests(path, n, wait=True)) for n in (0, 1)] == [2, 2]
        assert not Path(f"{path}.2").exists()  # the fifth waits for a partner or the stop
        assert srv.stop() == 0
    parts = [_requests(path, n) for n in (0, 1, 2)]
    assert [len(part) for part in parts] == [2, 2, 1]
    assert sorted(r["request_id"] for part in parts for r in part.values()) == list("01234")
    assert not path.exists() and not Path(f"{path}.3").exists()
