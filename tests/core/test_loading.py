"""Load coordination through the real server: ``--model-load-thread-count``,
``--strict-readiness``, several ``--model-repository`` folders (and a name in two of them),
and ``unload_dependents``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from modelyard.config.pbtxt import config_from_json
from modelyard.core.dependents import dependents
from tests.conftest import Serving
from tests.core.modelfiles import infer_grpc, infer_http, write_model

pytestmark = pytest.mark.timeout(120)


def _intervals(log: Path) -> list[tuple[float, float]]:
    starts: dict[str, float] = {}
    out = []
    for line in log.read_text().splitlines():
        name, what, t = line.split()
        if what == "start":
            starts[name] = float(t)
        else:
            out.append((starts.pop(name), float(t)))
    return out


def _most_at_once(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


@pytest.mark.parametrize("threads", [1, 2])
def test_load_thread_count_bounds_parallel_loads(
    tmp_path: Path, threads: int, serving: Serving
) -> None:
    repo = tmp_path / "repo"
    log = tmp_path / "inits.txt"
    for name in ("m1", "m2", "m3", "m4"):
        write_model(repo, name, init_sleep=0.3)
    with serving.server(
        repo, f"--model-load-thread-count={threads}", env={"MM_LOG": str(log)}
    ) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        assert client.is_server_ready()
        intervals = _intervals(log)
        assert len(intervals) == 4
        assert _most_at_once(intervals) <= threads


def test_several_repositories_a_duplicate_and_strict_readiness(
    tmp_path: Path, serving: Serving
) -> None:
    r1, r2 = tmp_path / "r1", tmp_path / "r2"
    write_model(r1, "one", k=1.0)
    write_model(r2, "two", k=2.0)
    write_model(r1, "dup")
    write_model(r2, "dup")
    write_model(r2, "broken", fail=True)
    for strict in ("true", "false"):
        with serving.server([r1, r2], f"--strict-readiness={strict}") as srv:
            http = httpclient.InferenceServerClient(srv.http_url)
            grpc = grpcclient.InferenceServerClient(srv.grpc_url)
            assert infer_http(http, "one", [0.0])[0] == 1.0
            assert infer_grpc(grpc, "two", [0.0])[0] == 2.0
            assert {"name": "dup", "state": "UNAVAILABLE",
                    "reason": "model appears in two or more repositories"} in (
                http.get_model_repository_index())  # fmt: skip
            # Strict readiness: a model that failed to load makes the server not ready (the
            # duplicate does not count: it never got as far as a load, as in Triton).
            assert http.is_server_ready() is (strict == "false")
            assert grpc.is_server_ready() is (strict == "false")
            assert http.is_server_live()
    # Explicit mode: loading the duplicate fails with Triton's text; the others are untouched.
    with serving.server([r1, r2], "--model-control-mode=explicit", "--load-model=one") as srv:
        http = httpclient.InferenceServerClient(srv.http_url)
        with pytest.raises(InferenceServerException) as e:
            http.load_model("dup")
        assert (e.value.status(), e.value.message()) == (
            "500", "failed to load 'dup', failed to poll from model repository")  # fmt: skip
        http.load_model("two")  # from the second repository
        assert http.is_model_ready("two") and http.is_server_ready()


def _ensemble(name: str, *steps: str) -> model_config_pb2.ModelConfig:
    return config_from_json(json.dumps({
        "name": name, "platform": "ensemble",
        "ensemble_scheduling": {"step": [{"model_name": s, "model_version": -1} for s in steps]},
    }))  # fmt: skip


def test_dependents_are_the_ensembles_that_reach_a_model() -> None:
    plain = config_from_json('{"name": "a", "backend": "python"}')
    configs = {
        "a": [plain], "b": [plain],
        "ens1": [_ensemble("ens1", "a", "b")],
        "ens2": [_ensemble("ens2", "ens1")],  # reaches a through ens1
        "ens3": [_ensemble("ens3", "b")],
    }  # fmt: skip
    assert dependents("a", configs) == ["ens1", "ens2"]
    assert dependents("b", configs) == ["ens1", "ens3", "ens2"]
    assert dependents("ens2", configs) == []


def test_unload_dependents_unloads_the_ensembles_using_a_model(
    tmp_path: Path, serving: Serving
) -> None:
    repo = tmp_path / "repo"
    write_model(repo, "step")
    write_model(repo, "other")
    ens = repo / "ens"
    (ens / "1").mkdir(parents=True)
    (ens / "config.pbtxt").write_text(
        'name: "ens"\nplatform: "ensemble"\nmax_batch_size: 0\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'ensemble_scheduling { step [ { model_name: "step" model_version: -1\n'
        '  input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ] }\n'
    )
    with serving.server(repo, "--model-control-mode=explicit", "--load-model=*") as srv:
        http = httpclient.InferenceServerClient(srv.http_url)
        grpc = grpcclient.InferenceServerClient(srv.grpc_url)
        assert http.is_model_ready("ens")
        http.unload_model("step")  # without dependents: the ensemble stays
        assert http.is_model_ready("ens")
        http.load_model("step")
        grpc.unload_model("step", unload_dependents=True)
        assert not http.is_model_ready("step") and not http.is_model_ready("ens")
        assert http.is_model_ready("other")


PARENT = """
import numpy as np
import triton_python_backend_utils as pb_utils
SRC = {src!r}
CFG = {cfg!r}
class TritonPythonModel:
    def initialize(self, args):
        # Beyond Triton: works in "none" mode, from initialize, with one load slot.
        pb_utils.load_model("kid", config=CFG, files={{"file:1/model.py": SRC.encode()}})
        try:
            pb_utils.load_model("nosuch")
            self.error = "no error"
        except pb_utils.TritonModelException as e:
            self.error = str(e)
    def execute(self, requests):
        x = pb_utils.get_input_tensor_by_name(requests[0], "INPUT0")
        resp = pb_utils.InferenceRequest(model_name="kid", inputs=[x],
                                         requested_output_names=["OUTPUT0"]).exec()
        out = pb_utils.get_output_tensor_by_name(resp, "OUTPUT0").as_numpy()
        ok = "failed to poll from model repository" in self.error
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out + (100 if ok else 0))])]
"""


def test_a_model_loads_what_it_calls_from_initialize(tmp_path: Path, serving: Serving) -> None:
    from tests.core.modelfiles import config_json, model_source

    repo = tmp_path / "repo"
    write_model(repo, "parent")
    (repo / "parent" / "1" / "model.py").write_text(
        PARENT.format(src=model_source(k=5), cfg=config_json("kid"))
    )
    with serving.server(repo, "--model-load-thread-count=1") as srv:  # control mode "none"
        http = httpclient.InferenceServerClient(srv.http_url)
        assert http.is_model_ready("kid") and http.is_server_ready()
        assert infer_http(http, "parent", [1.0])[0] == 106.0


def test_cli_flags_for_model_management() -> None:
    from modelyard.cli.main import build_parser

    args = build_parser().parse_args(["serve", "--model-repository", "r", "--model-control-mode",
                                      "poll", "--repository-poll-secs", "0.5",
                                      "--model-load-thread-count", "2", "--strict-readiness=false"])  # fmt: skip
    assert (args.model_control_mode, args.repository_poll_secs) == ("poll", 0.5)
    assert (args.model_load_thread_count, args.strict_readiness) == (2, False)
    defaults = build_parser().parse_args(["serve", "--model-repository", "r"])
    assert (defaults.repository_poll_secs, defaults.model_load_thread_count) == (15.0, 4)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--model-repository", "r",
                                   "--model-load-thread-count", "0"])  # fmt: skip
