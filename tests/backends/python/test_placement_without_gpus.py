"""Instance placement through the real server on a machine without GPUs (tests/gpu has the
same models on a GPU): KIND_GPU groups fail their load with Triton's texts while the other
models serve, KIND_AUTO becomes KIND_CPU in the config endpoint and in initialize's args,
--min-supported-compute-capability is Triton's flag (a bad value is one argparse line), and
FORCE_CPU_ONLY_INPUT_TENSORS takes "yes" or "no" only, as Triton checks it at load."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from modelyard.devices import discover_gpus
from tests.conftest import Serving
from tests.helpers import MODELS, WAIT_S, http_input
from tests.serverproc import ServerProcess

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        bool(discover_gpus().devices), reason="this machine has GPUs (tests/gpu covers them)"
    ),
]

_FORCE = 'parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value: { string_value: "%s" } }'
GROUPS = {
    "place_gpu": "instance_group [{ kind: KIND_GPU }]",
    "place_gpu_ids": "instance_group [{ name: 'g', kind: KIND_GPU, gpus: [0, 1] }]",
    "place_auto": "instance_group [{ kind: KIND_AUTO, count: 2 }]",
    "force_no": _FORCE % "no",
    "force_maybe": _FORCE % "maybe",
}


@pytest.fixture(scope="module")
def served(serving: Serving) -> Iterator[ServerProcess]:
    repo = serving.repo()
    source = MODELS / "py_init_args"
    for name, group in GROUPS.items():
        (repo / name / "1").mkdir(parents=True)
        shutil.copy(source / "1" / "model.py", repo / name / "1" / "model.py")
        config = (source / "config.pbtxt").read_text().replace("py_init_args", name)
        (repo / name / "config.pbtxt").write_text(config + group + "\n")
    with serving.server(repo, "--min-supported-compute-capability=7.5") as server:
        yield server


def test_kind_gpu_refused_with_tritons_texts(served: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(served.http_url, network_timeout=WAIT_S)
    try:
        index = {m["name"]: m for m in client.get_model_repository_index()}
    finally:
        client.close()
    assert index["place_gpu"]["state"] == "UNAVAILABLE"
    assert index["place_gpu"]["reason"].endswith(
        "instance group place_gpu_0 of model place_gpu has kind KIND_GPU but no GPUs are available"
    )
    assert index["place_gpu_ids"]["reason"].endswith(
        "instance group g of model place_gpu_ids specifies invalid or unsupported gpu id 0. "
        "GPUs with at least the minimum required CUDA compute compatibility of 7.500000 are: "
    )
    assert index["place_auto"]["state"] == "READY"


def test_kind_auto_is_cpu(served: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(served.http_url, network_timeout=WAIT_S)
    try:
        groups = client.get_model_config("place_auto")["instance_group"]
        result = client.infer("place_auto", [http_input("IN", np.array([1], np.int32), "INT32")])
    finally:
        client.close()
    assert [(g["name"], g["kind"], g["count"], g["gpus"]) for g in groups] == [
        ("place_auto_0", "KIND_CPU", 2, [])
    ]
    args = json.loads(result.as_numpy("ARGS")[0])
    assert args["model_instance_kind"] == "CPU"
    assert args["model_instance_device_id"] == "0"
    assert args["model_instance_name"] in ("place_auto_0_0", "place_auto_0_1")


def test_a_bad_compute_capability_is_one_line(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "modelyard", "serve", "--model-repository", str(tmp_path),
         "--min-supported-compute-capability", "seven"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1] == (
        "modelyard serve: error: argument --min-supported-compute-capability: expected a "
        "number, got 'seven'"
    )


def test_force_cpu_only_input_tensors_is_yes_or_no(served: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(served.http_url, network_timeout=WAIT_S)
    try:
        index = {m["name"]: m for m in client.get_model_repository_index()}
        result = client.infer("force_no", [http_input("IN", np.array([1], np.int32), "INT32")])
    finally:
        client.close()
    assert index["force_maybe"]["state"] == "UNAVAILABLE"
    assert index["force_maybe"]["reason"].endswith(
        "Incorrect value for FORCE_CPU_ONLY_INPUT_TENSORS: maybe'"
    )
    assert json.loads(result.as_numpy("ARGS")[0])["model_instance_kind"] == "CPU"
