"""A model's outputs made with ``pb_utils.Tensor.from_dlpack`` of torch tensors (FP32, and BF16,
which only DLPack can carry) reach tritonclient over HTTP and gRPC in both execution modes;
its input reaches torch through ``torch.from_dlpack`` of the pb_utils tensor."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.conftest import Serving
from tests.helpers import MODES, WAIT_S, infer_grpc, infer_http
from tests.serverproc import ServerProcess

pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module", params=MODES)
def served(request: pytest.FixtureRequest, serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(models=["dlpack_outputs"], mode=request.param) as server:
        yield server


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_dlpack_outputs_reach_the_client(served: ServerProcess, protocol: str) -> None:
    x = np.array([1.0, -2.5, 3.25, 1e3], dtype=np.float32)
    if protocol == "http":
        client = httpclient.InferenceServerClient(served.http_url, network_timeout=WAIT_S)
        try:
            result = infer_http(client, "dlpack_outputs", {"INPUT0": x})
        finally:
            client.close()
    else:
        with grpcclient.InferenceServerClient(served.grpc_url) as gclient:
            result = infer_grpc(gclient, "dlpack_outputs", {"INPUT0": x})
    np.testing.assert_array_equal(result.as_numpy("DOUBLED"), x * 2)
    output = result.get_output("AS_BF16")
    assert (output["datatype"] if protocol == "http" else output.datatype) == "BF16"
    np.testing.assert_array_equal(np.asarray(result.as_numpy("AS_BF16"), dtype=np.float32), x)
