"""The server the dashboard's tests drive: the dashboard repository with Triton-mode tracing
at rate 1 (so traces appear); one per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import Serving
from tests.dashboard.pages import dashboard_repo
from tests.serverproc import ServerProcess


@pytest.fixture(scope="module")
def server(serving: Serving, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    trace_file = tmp_path_factory.mktemp("traces") / "trace.json"
    with serving.server(
        dashboard_repo(serving),
        "--trace-config", f"triton,file={trace_file}",
        "--trace-config", "rate=1",
    ) as srv:  # fmt: skip
        yield srv
