"""pb_utils.Logger lines reach the server log in both execution modes, as Triton prints them,
and the logging extension (HTTP v2/logging, gRPC LogSettings) changes what is printed.

The model (tests/models/log_lines) logs from initialize, execute, a thread execute starts, and
finalize; the tests read the real server's output."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from modelyard.server import INITIAL_LOAD_DONE
from tests.conftest import Serving
from tests.helpers import MODES, grpc_input, http_input, make_repo, wait_until
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(90)

MODEL_FILE = Path(__file__).resolve().parents[2] / "models" / "log_lines" / "1" / "model.py"
WAIT_S = 20.0
# Triton's default line: level letter, mmdd hh:mm:ss.micros, pid, file:line] "message".
DEFAULT_LINE = r"([IWE])\d{4} \d\d:\d\d:\d\d\.\d{6} (\d+) model\.py:(\d+)\] (\".*\")$"
ISO_LINE = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ([IWE]) (\d+) model\.py:(\d+)\] (\".*\")$"


def marker_line(marker: str) -> int:
    """The line of model.py that ends with ``# @<marker>``."""
    for number, text in enumerate(MODEL_FILE.read_text().splitlines(), start=1):
        if text.rstrip().endswith(f"# @{marker}"):
            return number
    raise AssertionError(f"no marker {marker} in {MODEL_FILE}")


def model_lines(server: ServerProcess, pattern: str = DEFAULT_LINE) -> list[tuple[str, int, str]]:
    """(letter, line, message) of every model.py line the server printed."""
    found = []
    for text in server.output().splitlines():
        m = re.search(pattern, text)
        if m:
            assert int(m.group(2)) == server.proc.pid  # the server's pid, as in Triton
            found.append((m.group(1), int(m.group(3)), json.loads(m.group(4))))
    return found


def wait_for(server: ServerProcess, message: str, pattern: str = DEFAULT_LINE) -> None:
    wait_until(
        lambda: any(msg == message for _, _, msg in model_lines(server, pattern)),
        WAIT_S,
        what=lambda: f"the log line {message!r} in:\n{server.output()}",
    )


def infer_http(server: ServerProcess, tag: str) -> None:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=WAIT_S)
    t = http_input("TAG", np.array([tag.encode()], dtype=np.object_))
    assert client.infer("log_lines", [t]).as_numpy("OUT")[0] == tag.encode()
    client.close()


def infer_grpc(server: ServerProcess, tag: str) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        t = grpc_input("TAG", np.array([tag.encode()], dtype=np.object_))
        res = client.infer("log_lines", [t], client_timeout=WAIT_S)
        assert res.as_numpy("OUT")[0] == tag.encode()


def expected(tag: str) -> list[tuple[str, int, str]]:
    """The lines one request logs at the default settings (no verbose line)."""
    return [
        ("I", marker_line("info"), f"{tag} info"),
        ("W", marker_line("warn"), f"{tag} warn"),
        ("E", marker_line("error"), f"{tag} error"),
        ("W", marker_line("log"), f'{tag} "quoted"\nsecond line'),
        ("I", marker_line("thread"), f"{tag} thread"),
    ]


def lines_of(server: ServerProcess, tag: str, pattern: str = DEFAULT_LINE) -> list[Any]:
    return [x for x in model_lines(server, pattern) if x[2].startswith(tag + " ")]


@pytest.fixture(scope="module", params=MODES)
def served(request: pytest.FixtureRequest, serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(None, "--model-control-mode", "explicit", "--load-model", "log_lines",
                        models=["log_lines"], mode=request.param) as server:  # fmt: skip
        yield server


def test_lines_from_initialize_execute_threads_and_finalize(served: ServerProcess) -> None:
    wait_for(served, "init-info")
    assert ("I", marker_line("init-info"), "init-info") in model_lines(served)
    infer_http(served, "h1")
    infer_grpc(served, "g1")
    wait_for(served, "g1 thread")
    # In order, each at its file:line, the message JSON-quoted; no verbose line at level 0.
    assert lines_of(served, "h1") == expected("h1")
    assert lines_of(served, "g1") == expected("g1")
    assert not [x for x in model_lines(served) if "verbose" in x[2]]
    assert '"h1 \\"quoted\\"\\nsecond line"' in served.output()  # one line, as Triton writes it

    httpclient.InferenceServerClient(served.http_url).unload_model("log_lines")
    wait_for(served, "fini-info")
    assert ("I", marker_line("fini-info"), "fini-info") in model_lines(served)
    httpclient.InferenceServerClient(served.http_url).load_model("log_lines")


def test_logging_extension_changes_what_is_printed(served: ServerProcess) -> None:
    http = httpclient.InferenceServerClient(served.http_url)
    grpc = grpcclient.InferenceServerClient(served.grpc_url)
    try:
        # Verbose lines at level 1 (HTTP), printed with the letter I.
        http.update_log_settings({"log_verbose_level": 1})
        infer_http(served, "v1")
        wait_for(served, "v1 thread")
        assert ("I", marker_line("verbose"), "v1 verbose") in lines_of(served, "v1")

        # Severities one by one (gRPC): no info, no errors; warnings and verbose still print.
        grpc.update_log_settings({"log_info": False, "log_error": False})
        assert grpc.get_log_settings(as_json=True)["settings"]["log_info"] == {"bool_param": False}
        infer_grpc(served, "s1")
        grpc.update_log_settings({"log_info": True, "log_error": True, "log_verbose_level": 0})
        infer_grpc(served, "b1")  # a barrier: its lines come after every line of s1
        wait_for(served, "b1 thread")
        assert [(x[0], x[2]) for x in lines_of(served, "s1")] == [
            ("W", "s1 warn"),
            ("I", "s1 verbose"),
            ("W", 's1 "quoted"\nsecond line'),
        ]
        assert lines_of(served, "b1") == expected("b1")

        # ISO8601 time stamps (HTTP), then back.
        http.update_log_settings({"log_format": "ISO8601"})
        assert http.get_log_settings()["log_format"] == "ISO8601"
        infer_http(served, "iso")
        wait_for(served, "iso thread", ISO_LINE)
        assert lines_of(served, "iso", ISO_LINE) == expected("iso")
    finally:
        http.update_log_settings(
            {
                "log_format": "default",
                "log_info": True,
                "log_warning": True,
                "log_error": True,
                "log_verbose_level": 0,
            }
        )
        grpc.close()


@pytest.mark.parametrize("mode", MODES)
def test_log_verbose_flag_prints_verbose_lines_from_start(mode: str, serving: Serving) -> None:
    with serving.server(None, "--log-verbose", "1", models=["log_lines"], mode=mode) as server:
        settings = httpclient.InferenceServerClient(server.http_url).get_log_settings()
        assert settings["log_verbose_level"] == 1
        wait_for(server, "init-verbose")
        assert ("I", marker_line("init-verbose"), "init-verbose") in model_lines(server)


def test_log_file_takes_the_log(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    repo = make_repo(tmp_path / "repo", ["log_lines"])
    log_file = tmp_path / "server.log"
    cmd = [
        sys.executable,
        "-m",
        "modelyard",
        "serve",
        "--model-repository",
        str(repo),
        "--http-port",
        "0",
        "--grpc-port",
        "0",
        "--metrics-port",
        "0",
        "--log-file",
        str(log_file),
        "--log-verbose",
        "1",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(
            lambda: (
                proc.poll() is not None
                or INITIAL_LOAD_DONE in (log_file.read_text() if log_file.exists() else "")
            ),
            WAIT_S,
            what="the server to load its models",
        )
        assert proc.poll() is None, "the server exited"
        text = log_file.read_text()
        assert re.search(r"\nI\d{4} [\d:.]+ \d+ model\.py:\d+\] \"init-info\"\n", "\n" + text)
        assert '"init-verbose"' in text
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert "init-info" not in out  # nothing went to the terminal
