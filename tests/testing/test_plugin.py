"""The pytest plugin (entry point ``pytest11``): a test session of its own, in a folder of its
own, uses the ``modelyard_model`` and ``modelyard_server`` fixtures."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

from tests.helpers import EXAMPLES

TESTS = textwrap.dedent(
    """
    import numpy as np
    import tritonclient.http as httpclient

    EXAMPLES = {examples!r}
    opened = []


    def test_a_model(modelyard_model):
        model = modelyard_model(EXAMPLES + "/add_sub")
        opened.append(model)
        ones = np.ones(4, np.float32)
        assert model.infer({{"INPUT0": ones, "INPUT1": ones}}).output("OUTPUT0").tolist() == [2] * 4


    def test_the_model_was_closed_after_its_test():
        assert repr(opened[0]) == "<ModelHandle 'add_sub' closed>"


    def test_a_server(modelyard_server):
        server = modelyard_server(EXAMPLES, "--allow-metrics=false", expect=("http", "grpc"))
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.is_server_ready() and client.is_model_ready("bls_add_sub")
        assert "initial model load done" in server.output()
    """
)


def _plugin_installed() -> bool:
    return any(
        ep.value == "modelyard.testing.pytest_plugin" for ep in entry_points(group="pytest11")
    )


def test_the_fixtures_in_a_session_of_their_own(tmp_path: Path) -> None:
    (tmp_path / "test_with_modelyard.py").write_text(TESTS.format(examples=str(EXAMPLES)))
    # Installed, the entry point loads the plugin; from a source tree, name it.
    plugin = [] if _plugin_installed() else ["-p", "modelyard.testing.pytest_plugin"]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 passed" in run.stdout
