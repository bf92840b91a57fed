"""KIND_GPU models on a real GPU, driven by tritonclient over HTTP and gRPC in both execution
modes: the instances' initialize args and device, the config's resolved groups, Triton's
refusals (an invalid gpu id, --min-supported-compute-capability), GPU outputs made with
from_dlpack reaching the client, pb_utils.Tensor's GPU checks inside a model, and BLS with
GPU input tensors. Skipped without a GPU (tests/gpu/support.py says what is missing)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from modelyard.devices import discover_gpus, supported_gpus
from tests.conftest import Serving
from tests.gpu.support import GPU, MODELS
from tests.helpers import MODES, WAIT_S, infer_grpc, infer_http
from tests.serverproc import ServerProcess, refused_start

pytestmark = [*GPU, pytest.mark.timeout(300)]

NAMES = ["gpu_init_args", "gpu_init_args_pinned", "gpu_add_sub", "gpu_dlpack_checks",
         "gpu_bls_add_sub"]  # fmt: skip
START_S = 240.0  # torch's CUDA start in each instance is seconds; a guard, not a speed limit


def _repo(serving: Serving) -> Path:
    """The test models, plus two written here from gpu_init_args: ``gpu_auto`` with no
    instance_group (the Python backend prefers GPUs) and ``gpu_bad_id`` naming a GPU id the
    machine does not have."""
    repo = serving.repo(NAMES, source=MODELS)
    bad = max(d.index for d in discover_gpus().devices) + 1
    groups = {"gpu_auto": "", "gpu_bad_id": f"instance_group [{{ kind: KIND_GPU, gpus: [{bad}] }}]"}
    config = (MODELS / "gpu_init_args" / "config.pbtxt").read_text()
    config = config.replace("instance_group [{ kind: KIND_GPU, count: 2 }]", "")
    for name, group in groups.items():
        (repo / name / "1").mkdir(parents=True)
        shutil.copy(MODELS / "gpu_init_args" / "1" / "model.py", repo / name / "1" / "model.py")
        (repo / name / "config.pbtxt").write_text(config + group + "\n")
    return repo


@pytest.fixture(scope="module", params=MODES)
def served(request: pytest.FixtureRequest, serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(_repo(serving), mode=request.param, timeout=START_S) as server:
        yield server


def _args(server: ServerProcess, model: str, protocol: str) -> dict[str, Any]:
    arrays = {"IN": np.array([1], dtype=np.int32)}
    if protocol == "http":
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=WAIT_S)
        try:
            result = infer_http(client, model, arrays)
        finally:
            client.close()
    else:
        with grpcclient.InferenceServerClient(server.grpc_url) as gclient:
            result = infer_grpc(gclient, model, arrays)
    out: dict[str, Any] = json.loads(result.as_numpy("ARGS")[0])
    return out


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_kind_gpu_instances_get_tritons_args_and_choose_their_device(
    served: ServerProcess, protocol: str
) -> None:
    ids = supported_gpus().ids
    seen = set()
    for _ in range(8):
        args = _args(served, "gpu_init_args", protocol)
        assert args["model_instance_kind"] == "GPU"
        assert int(args["model_instance_device_id"]) in ids
        assert args["model_instance_name"] in ("gpu_init_args_0_0", "gpu_init_args_0_1")
        assert args["tensor_device"] == f"cuda:{args['model_instance_device_id']}"
        # Nothing renumbered the devices: the model sees every GPU of the machine.
        assert args["visible_devices"] == len(discover_gpus().devices)
        seen.add((args["model_instance_name"], args["model_instance_device_id"]))
    assert seen


def test_a_gpu_list_and_a_cpu_group(served: ServerProcess) -> None:
    allowed = {("GPU", "0", "pinned_0", "cuda:0"), ("CPU", "0", "gpu_init_args_pinned_1_0", "cpu")}
    for _ in range(6):
        args = _args(served, "gpu_init_args_pinned", "http")
        key = (args["model_instance_kind"], args["model_instance_device_id"],
               args["model_instance_name"], args["tensor_device"])  # fmt: skip
        assert key in allowed


def test_config_shows_the_resolved_groups(served: ServerProcess) -> None:
    ids = list(supported_gpus().ids)
    client = httpclient.InferenceServerClient(served.http_url, network_timeout=WAIT_S)
    try:
        groups = client.get_model_config("gpu_init_args")["instance_group"]
        auto = client.get_model_config("gpu_auto")["instance_group"]
    finally:
        client.close()
    assert [(g["name"], g["kind"], g["count"], g["gpus"]) for g in groups] == [
        ("gpu_init_args_0", "KIND_GPU", 2, ids)
    ]
    assert [(g["name"], g["kind"], g["count"], g["gpus"]) for g in auto] == [
        ("gpu_auto", "KIND_GPU", 1, ids)
    ]
    with grpcclient.InferenceServerClient(served.grpc_url) as gclient:
        config = gclient.get_model_config("gpu_init_args").config
    assert list(config.instance_group[0].gpus) == ids


def test_an_invalid_gpu_id_is_refused_with_tritons_text(served: ServerProcess) -> None:
    ids = supported_gpus().ids
    bad = max(d.index for d in discover_gpus().devices) + 1
    client = httpclient.InferenceServerClient(served.http_url, network_timeout=WAIT_S)
    try:
        index = {m["name"]: m for m in client.get_model_repository_index()}
    finally:
        client.close()
    assert index["gpu_bad_id"]["state"] == "UNAVAILABLE"
    assert index["gpu_bad_id"]["reason"].endswith(
        f"instance group gpu_bad_id_0 of model gpu_bad_id specifies invalid or unsupported gpu "
        f"id {bad}. GPUs with at least the minimum required CUDA compute compatibility of "
        f"6.000000 are: {', '.join(str(i) for i in ids)}"
    )


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_gpu_outputs_reach_the_client(served: ServerProcess, protocol: str) -> None:
    a = np.arange(16, dtype=np.float32)
    b = np.full(16, 2.0, dtype=np.float32)
    arrays = {"INPUT0": a, "INPUT1": b}
    for model in ("gpu_add_sub", "gpu_bls_add_sub"):
        if protocol == "http":
            client = httpclient.InferenceServerClient(served.http_url, network_timeout=WAIT_S)
            try:
                result: Any = infer_http(client, model, arrays)
            finally:
                client.close()
        else:
            with grpcclient.InferenceServerClient(served.grpc_url) as gclient:
                result = infer_grpc(gclient, model, arrays)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_large_gpu_output(served: ServerProcess) -> None:
    a = np.random.default_rng(1).random(16 << 20, dtype=np.float32)  # 64 MB
    b = np.ones_like(a)
    with grpcclient.InferenceServerClient(served.grpc_url) as gclient:  # (no message limits)
        result = infer_grpc(gclient, "gpu_add_sub", {"INPUT0": a, "INPUT1": b}, client_timeout=120)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


def test_tensor_gpu_checks_inside_a_model(served: ServerProcess) -> None:
    arrays = {"IN": np.array([1], dtype=np.int32)}
    client = httpclient.InferenceServerClient(served.http_url, network_timeout=120)
    try:
        result = infer_http(client, "gpu_dlpack_checks", arrays)
    finally:
        client.close()
    checks = json.loads(result.as_numpy("RESULTS")[0])
    failed = {name: text for name, text in checks.items() if text != "ok"}
    assert not failed, "\n".join(f"{n}:\n{t}" for n, t in failed.items())
    assert len(checks) >= 9


def test_min_supported_compute_capability_above_every_gpu(serving: Serving) -> None:
    repo = serving.repo(["gpu_add_sub"], source=MODELS)
    ports = ("--http-port=0", "--grpc-port=0", "--metrics-port=0")
    text = refused_start(
        repo, "--min-supported-compute-capability=99", "--exit-on-error=true", *ports,
        timeout=START_S,
    )  # fmt: skip
    assert (
        "instance group gpu_add_sub_0 of model gpu_add_sub has kind KIND_GPU but no GPUs are "
        "available"
    ) in text
