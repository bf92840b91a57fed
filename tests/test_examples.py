"""The example pipeline on modelyard alone (the reference Triton cannot load its ONNX model):
examples/pipeline_client.py over HTTP and gRPC, in both Python execution modes, and the
differential test's model list covering every example model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Serving
from tests.helpers import MODES
from tests.test_differential import EXAMPLES, MODELS, REFERENCE_CANNOT_LOAD

ROOT = Path(__file__).resolve().parents[1]


def test_differential_models_cover_every_example() -> None:
    examples = {p.name for p in EXAMPLES.iterdir() if (p / "config.pbtxt").is_file()}
    assert set(MODELS) | set(REFERENCE_CANNOT_LOAD) == examples
    assert not set(MODELS) & set(REFERENCE_CANNOT_LOAD)


@pytest.mark.parametrize("mode", MODES)
def test_pipeline_client(mode: str, serving: Serving) -> None:
    with serving.server(EXAMPLES, mode=mode) as server:
        run = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "pipeline_client.py"),
             "--http-url", server.http_url, "--grpc-url", server.grpc_url],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr + server.output()
    assert run.stdout.count(" ok") == 10  # five signals, two protocols
    assert "noisy     -> low       after 2 round(s)" in run.stdout
