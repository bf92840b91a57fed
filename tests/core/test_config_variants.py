"""``--model-config-name`` (a model's ``configs/<name>.pbtxt`` before its ``config.pbtxt``, as
Triton's L0_custom_model_config checks it) and ``--model-load-retry-count``, through the real
server and tritonclient, and against the reference Triton."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import Serving
from tests.helpers import http_input
from tests.reference import reference_available, start_reference

IDENTITY = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
"""
# Fails its first initialize (a marker file counts the tries), then loads.
FLAKY_INIT = """\
import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        marker = os.path.join(args["model_repository"], "tries")
        tries = int(open(marker).read()) if os.path.exists(marker) else 0
        with open(marker, "w") as f:
            f.write(str(tries + 1))
        if tries == 0:
            raise pb_utils.TritonModelException("first initialize fails")

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
"""
IO = """\
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""
DEFAULT, H100, V100, CUSTOM = [1, 3], [1], [2], [3]


def _config(name: str, versions: list[int]) -> str:
    policy = f"version_policy: {{ specific: {{ versions: [{', '.join(map(str, versions))}] }} }}"
    return f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n{policy}\n{IO}'


def _variants_repo(root: Path) -> Path:
    model = root / "variants"
    for v in (1, 2, 3):
        (model / str(v)).mkdir(parents=True)
        (model / str(v) / "model.py").write_text(IDENTITY)
    (model / "configs").mkdir()
    (model / "config.pbtxt").write_text(_config("variants", DEFAULT))
    (model / "configs" / "h100.pbtxt").write_text(_config("variants", H100))
    (model / "configs" / "v100.pbtxt").write_text(_config("variants", V100))
    (model / "configs" / "config.pbtxt").write_text(_config("variants", CUSTOM))
    return root


def _flaky_repo(root: Path) -> Path:
    (root / "flaky" / "1").mkdir(parents=True)
    (root / "flaky" / "1" / "model.py").write_text(FLAKY_INIT)
    (root / "flaky" / "config.pbtxt").write_text(
        'name: "flaky"\nbackend: "python"\nmax_batch_size: 0\n' + IO
    )
    return root


CASES = [([], DEFAULT), (["--model-config-name=h100"], H100), (["--model-config-name=v100"], V100),
         (["--model-config-name=config"], CUSTOM), (["--model-config-name=h200"], DEFAULT)]  # fmt: skip


def _versions(url: str) -> Any:
    config = httpclient.InferenceServerClient(url).get_model_config("variants")
    return config["version_policy"]["specific"]["versions"]


def test_the_config_name_picks_the_variant(serving: Serving, tmp_path: Path) -> None:
    repo = _variants_repo(tmp_path / "repo")
    for flags, versions in CASES:
        with serving.server(repo, *flags) as server:
            assert _versions(server.http_url) == versions, flags
            client = httpclient.InferenceServerClient(server.http_url)
            for v in (1, 2, 3):
                assert client.is_model_ready("variants", str(v)) == (v in versions)


def test_an_empty_config_name_is_refused() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "modelyard", "serve", "repo", "--model-config-name="],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2
    assert run.stderr.splitlines()[-1] == (
        "modelyard serve: error: argument --model-config-name: empty argument"
    )


def test_check_reads_the_variant(tmp_path: Path) -> None:
    repo = _variants_repo(tmp_path / "repo")
    (repo / "variants" / "configs" / "broken.pbtxt").write_text("no_such_field: 1\n")
    run = subprocess.run(
        [sys.executable, "-m", "modelyard", "check", str(repo), "--model-config-name=broken"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 1
    assert "configs/broken.pbtxt:1" in run.stdout


def _infer(url: str) -> Any:
    client = httpclient.InferenceServerClient(url)
    res = client.infer("flaky", [http_input("IN", np.array([1.0, 2.0], np.float32))])
    return res.as_numpy("OUT").tolist()


def test_a_failed_load_is_retried(serving: Serving, tmp_path: Path) -> None:
    repo = _flaky_repo(tmp_path / "once")
    with serving.server(repo) as server:  # no retry: the first failure stands
        with pytest.raises(InferenceServerException, match="has no available versions"):
            _infer(server.http_url)
        assert "Internal: TritonModelException: first initialize fails" in server.output()
    repo = _flaky_repo(tmp_path / "twice")
    with serving.server(repo, "--model-load-retry-count=1") as server:
        assert _infer(server.http_url) == [1.0, 2.0]
        assert (
            "(try 1 of 2): Internal: TritonModelException: first initialize fails"
            in server.output()
        )


@pytest.mark.reference
@pytest.mark.skipif(not reference_available(), reason="reference Triton is not installed")
def test_variants_and_retries_match_the_reference(serving: Serving, tmp_path: Path) -> None:
    repo = _variants_repo(tmp_path / "repo")
    for flags, versions in CASES:
        ref = start_reference(repo, *flags)
        try:
            assert _versions(ref.http_url) == versions, flags
        finally:
            ref.stop()
    repo = _flaky_repo(tmp_path / "flaky")
    ref = start_reference(repo, "--model-load-retry-count=1")
    try:
        assert _infer(ref.http_url) == [1.0, 2.0]
    finally:
        ref.stop()
