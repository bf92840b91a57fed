"""The trace-setting extension against the reference Triton: the same stateful sequence of
reads and updates (errors included) over HTTP, then gRPC, on servers started with the same
``--trace-config`` (none, a Triton-mode file, OpenTelemetry mode)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Serving
from tests.helpers import EXAMPLES
from tests.reference import reference_available, start_reference
from tests.tracing.settings_probes import grpc_probes, http_probes

pytestmark = pytest.mark.reference

CONFIGS = {
    "none": [],
    "triton_file": ["--trace-config", "triton,file=TRACE_FILE", "--trace-config", "rate=1"],
    "opentelemetry": [
        "--trace-config",
        "mode=opentelemetry",
        "--trace-config",
        "opentelemetry,url=127.0.0.1:9/v1/traces",
        "--trace-config",
        "opentelemetry,resource=test.key=test.value",
    ],
}


def _args(config: str, trace_file: str) -> list[str]:
    return [a.replace("TRACE_FILE", trace_file) for a in CONFIGS[config]]


def _observe(http_url: str, grpc_url: str) -> dict[str, Any]:
    # The HTTP sequence leaves the settings as the server started (it clears what it set).
    return {"http": http_probes(http_url), "grpc": grpc_probes(grpc_url)}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_trace_settings_match_the_reference(
    config: str, serving: Serving, tmp_path_factory: pytest.TempPathFactory
) -> None:
    if not reference_available():
        pytest.skip("reference Triton is not installed")
    repo = serving.repo(["add_sub"], source=EXAMPLES, copy=True)
    trace_file = str(tmp_path_factory.mktemp("trace") / "trace.json")
    with serving.server(repo, *_args(config, trace_file)) as srv:
        ours = _observe(srv.http_url, srv.grpc_url)
    ref = start_reference(repo, *_args(config, trace_file))
    try:
        theirs = _observe(ref.http_url, ref.grpc_url)
    finally:
        ref.stop()
    for protocol in ("http", "grpc"):
        for label, answer in theirs[protocol].items():
            assert ours[protocol][label] == answer, (protocol, label)
