"""Triton's deprecated trace flags against the reference Triton: the same flags give the same
warnings and trace settings (``/v2/trace/setting``, globally and for a model), and the same
log-frequency files (which parts exist while serving and after the stop, each a whole JSON
array, the traces in each and their records' shape)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tritonclient.http as httpclient

from tests.conftest import Serving
from tests.helpers import EXAMPLES
from tests.reference import reference_available, start_reference
from tests.tracing.traces import infer, read_trace_file, requests_of, structure

pytestmark = pytest.mark.reference

FLAG_SETS = {
    "rotation": [
        "--trace-file=TRACE_FILE",
        "--trace-level=TIMESTAMPS",
        "--trace-rate=1",
        "--trace-log-frequency=2",
    ],
    "overridden": [
        *("--trace-level=TIMESTAMPS", "--trace-level=TENSORS", "--trace-level=OFF"),
        *("--trace-config", "level=TIMESTAMPS", "--trace-rate=5", "--trace-config", "rate=7"),
        *("--trace-count=3", "--trace-config", "count=9", "--trace-file=TRACE_FILE"),
        *("--trace-config", "triton,file=TRACE_FILE.b", "--trace-log-frequency=4"),
        *("--trace-config", "triton,log-frequency=6"),
    ],
    "opentelemetry": [
        *("--trace-config", "mode=opentelemetry", "--trace-file=TRACE_FILE"),
        *("--trace-config", "opentelemetry,url=127.0.0.1:9/v1/traces"),
        *("--trace-log-frequency=3", "--trace-level=TIMESTAMPS", "--trace-rate=-1"),
        "--trace-count=-5",
    ],
}
REQUESTS = 5


def _args(name: str, trace_file: Path) -> list[str]:
    return [a.replace("TRACE_FILE", str(trace_file)) for a in FLAG_SETS[name]]


def _warnings(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("Warning: ")]


def _settings(url: str) -> dict[str, Any]:
    client = httpclient.InferenceServerClient(url)
    try:
        return {
            "global": client.get_trace_settings(),
            "add_sub": client.get_trace_settings(model_name="add_sub"),
        }
    finally:
        client.close()


def _parts(trace_file: Path) -> dict[str, Any]:
    """The log-frequency parts there now: per part, its traces and their records' shape."""
    out = {}
    for path in sorted(trace_file.parent.glob(f"{trace_file.name}*")):
        records = read_trace_file(path, timeout=0)  # each part is a whole JSON array
        shape = {f"{m} <- {p or '-'}": v for (m, p), v in structure(records).items()}
        out[path.name] = {"traces": len(requests_of(records)), "shape": shape}
    return out


def _observe(name: str, url: str, output: Any, stop: Any, trace_file: Path) -> dict[str, Any]:
    seen: dict[str, Any] = {"warnings": _warnings(output()), "settings": _settings(url)}
    if name == "rotation":
        for i in range(REQUESTS):
            infer(url, "http", "add_sub", request_id=str(i))
        for part in (0, 1):  # both whole (bounded wait) while the server runs
            read_trace_file(Path(f"{trace_file}.{part}"))
        seen["serving"] = _parts(trace_file)
    stop()
    if name == "rotation":
        seen["stopped"] = _parts(trace_file)
    return seen


@pytest.mark.parametrize("name", list(FLAG_SETS))
def test_deprecated_flags_match_the_reference(
    name: str, serving: Serving, tmp_path_factory: pytest.TempPathFactory
) -> None:
    if not reference_available():
        pytest.skip("reference Triton is not installed")
    repo = serving.repo(["add_sub"], source=EXAMPLES, copy=True)
    ours_file = tmp_path_factory.mktemp("ours") / "trace.json"
    theirs_file = tmp_path_factory.mktemp("theirs") / "trace.json"
    with serving.server(repo, *_args(name, ours_file)) as srv:
        ours = _observe(name, srv.http_url, srv.output, srv.stop, ours_file)
    ref = start_reference(repo, *_args(name, theirs_file))
    try:
        theirs = _observe(name, ref.http_url, ref.output, ref.stop, theirs_file)
    finally:
        ref.stop()
    # The trace file names differ by their folder only.
    folders = json.dumps(theirs).replace(str(theirs_file.parent), str(ours_file.parent))
    assert ours == json.loads(folders)
    if name == "rotation":
        assert list(ours["stopped"]) == [f"trace.json.{n}" for n in (0, 1, 2)]
        assert [p["traces"] for p in ours["stopped"].values()] == [2, 2, 1]
