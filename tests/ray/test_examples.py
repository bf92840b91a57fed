"""The example repository (examples/model_repository), unchanged, on the two-node Ray cluster:
the examples' own clients through the frontends of both nodes, and the models those clients do
not call, each answering correctly."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ray.serve", reason="ray[serve] is not installed (pip install modelyard[ray])")

import tritonclient.http as httpclient

from tests.helpers import EXAMPLES, http_input
from tests.ray.conftest import RayCluster, RayServer, serve_on_cluster

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def served(ray_cluster: RayCluster) -> Iterator[RayServer]:
    server = serve_on_cluster(ray_cluster, EXAMPLES)
    try:
        yield server
    finally:
        server.process.stop(60.0)


def test_every_example_model_is_ready(served: RayServer) -> None:
    examples = sorted(p.name for p in EXAMPLES.iterdir() if (p / "config.pbtxt").is_file())
    client = httpclient.InferenceServerClient(served.urls("http")[0])
    index = client.get_model_repository_index()
    assert [(m["name"], m["state"]) for m in index] == [(n, "READY") for n in examples]
    assert client.is_server_ready()


@pytest.mark.parametrize("script", ["client.py", "pipeline_client.py"])
def test_example_clients(served: RayServer, script: str) -> None:
    """add_sub, bls_add_sub, ensemble_add_sub, repeat (gRPC stream), accumulate (sequence);
    the signal pipeline (BLS to a Python and an ONNX model)."""
    for http_url, grpc_url in zip(served.urls("http"), served.urls("grpc"), strict=True):
        run = subprocess.run(
            [sys.executable, str(ROOT / "examples" / script), "--http-url", http_url,
             "--grpc-url", grpc_url],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr
        assert "WRONG" not in run.stdout


def test_the_other_example_models(served: RayServer) -> None:
    client = httpclient.InferenceServerClient(served.urls("http")[1])
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    res = client.infer("scale_batched", [http_input("INPUT0", x)])
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), x * 2)
    n = np.array([[1, 2, 3]], dtype=np.int32)
    res = client.infer("square_auto", [http_input("INPUT0", n)])
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), n * n)
    config = client.get_model_config("square_auto")  # auto-completed inside its replica
    assert config["max_batch_size"] == 4 and "dynamic_batching" in config
    words = np.array([b"ray", b"serve"], dtype=np.object_)
    res = client.infer("string_upper", [http_input("INPUT0", words, "BYTES")])
    assert res.as_numpy("OUTPUT0").tolist() == [b"RAY", b"SERVE"]
