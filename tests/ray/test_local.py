"""``modelyard serve --ray local`` on a laptop-sized Ray instance it starts itself (2 CPUs,
no GPU): the example repository with the default flags, a stop (SIGINT) while a model
deploys, the frontends' health while models deploy, and models the cluster cannot hold.

Each server runs with a temporary folder of its own (TMPDIR), which must be empty once it
has stopped: Ray's session, the replicas' files and modelyard's all go away with it. The
models are in tests/ray/models (rl_*); rl_slow's initialize holds its deploy until the test
opens its gate (a file named by MODELYARD_TEST_GATE, which the server passes to its replicas).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ray.serve", reason="ray[serve] is not installed (pip install modelyard[ray])")

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from modelyard.ray.driver import STOP_GRACE_S, descendants
from modelyard.testing.server import ServerProcess, start_server
from tests.helpers import EXAMPLES, grpc_input, http_input, wait_for_log, wait_until
from tests.ray.conftest import MODELS, START_TIMEOUT_S

pytestmark = pytest.mark.timeout(600)
ROOT = Path(__file__).resolve().parents[2]
LOCAL = ("--ray", "local", "--ray-num-cpus", "2", "--ray-num-gpus", "0")
EXIT_TIMEOUT_S = 15.0
# A stop ends the process within the exit timeout, plus the time Ray takes to stop the local
# instance; past that the server's backstop ends it.
STOP_BOUND_S = EXIT_TIMEOUT_S + STOP_GRACE_S
# Long enough for rl_slow's replica to start on a loaded 2-core machine (its initialize then
# waits for the test), short enough to wait for rl_room's load to fail.
DEPLOY_TIMEOUT_S = 60.0
TIMEOUT_S = 60.0  # every client call is bounded by this


@dataclass
class LocalServer:
    """A ``--ray local`` server, the temporary folder it runs with and its test model's gate."""

    process: ServerProcess
    tmp: Path
    gate: Path

    def open_gate(self) -> None:
        self.gate.touch()

    def stop(self) -> int:
        """Ctrl-C, as a terminal sends it (SIGINT to the server and every process it started:
        they are in its process group); the exit code once it is gone, within the bound."""
        pid = self.process.proc.pid
        for each in [pid, *descendants(pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(each, signal.SIGINT)
        try:
            return self.process.proc.wait(STOP_BOUND_S)
        except subprocess.TimeoutExpired:
            self.process.stop(5.0)
            raise AssertionError(
                f"still running {STOP_BOUND_S:g} s after SIGINT:\n{self.process.output()}"
            ) from None

    def left_behind(self) -> list[str]:
        """What the stopped server left in its temporary folder (the gate files are ours)."""
        return sorted(
            str(p.relative_to(self.tmp))
            for p in self.tmp.rglob("*")
            if not p.name.startswith("gate")
        )


def wait_for_initialize(server: LocalServer) -> None:
    """Until rl_slow's initialize runs (its deploy is under way); its failed load ends the
    wait with the server's output."""
    started = server.gate.with_name("gate.started")
    failed = "failed to load 'rl_slow'"
    wait_until(
        lambda: started.exists() or failed in server.process.output(),
        timeout=START_TIMEOUT_S,
        what="rl_slow's initialize",
    )
    assert started.exists(), server.process.output()


def serve_local(*args: str, wait_for_models: bool = True) -> LocalServer:
    # A short folder: Ray's socket paths, under it, must stay short.
    tmp = Path(tempfile.mkdtemp(prefix="myl", dir="/tmp"))
    gate = tmp / "gate"
    env = {"TMPDIR": str(tmp), "RAY_TMPDIR": str(tmp), "MODELYARD_TEST_GATE": str(gate)}
    try:
        process = start_server(
            [],
            *args,
            "--exit-timeout-secs",
            str(EXIT_TIMEOUT_S),
            env=env,
            timeout=START_TIMEOUT_S,
            wait_for_models=wait_for_models,
        )
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return LocalServer(process, tmp, gate)


def finish(server: LocalServer) -> None:
    """Stop ``server`` if still running; remove its folder."""
    if server.process.proc.poll() is None:
        server.process.stop(STOP_BOUND_S)
    shutil.rmtree(server.tmp, ignore_errors=True)


def status(server: ServerProcess, path: str) -> int:
    host, port = server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT_S)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


def client_of(
    server: ServerProcess, timeout: float = TIMEOUT_S
) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(
        server.http_url, connection_timeout=timeout, network_timeout=timeout
    )


def identity(server: ServerProcess, model: str) -> None:
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    res = client_of(server).infer(model, [http_input("INPUT0", x)])
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), x)


def process_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"  # (not reaped yet)
    except FileNotFoundError:
        return True


# -- the README's repository with the default flags -----------------------------------------


def the_other_example_models(client: httpclient.InferenceServerClient) -> None:
    """The example models the examples' clients do not call, each answering correctly."""
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


def test_examples_with_the_default_flags() -> None:
    """``modelyard serve examples/model_repository --ray local`` on 2 CPUs: every replica finds
    room (a fraction of a CPU each by default), the examples' clients and models give their
    answers, Ctrl-C stops it and nothing is left in the temporary folder. (The examples across
    the two nodes of a cluster: test_cluster.py's pipelines.)"""
    server = serve_local(str(EXAMPLES), "--ray", "local", "--ray-num-cpus", "2")
    try:
        proc = server.process
        examples = sorted(p.name for p in EXAMPLES.iterdir() if (p / "config.pbtxt").is_file())
        client = client_of(proc)
        index = client.get_model_repository_index()
        assert [(m["name"], m["state"]) for m in index] == [(n, "READY") for n in examples]
        assert client.is_server_ready()
        x = np.array([1, 2, 3, 4], dtype=np.float32)
        grpc = grpcclient.InferenceServerClient(proc.grpc_url)
        res = grpc.infer("add_sub", [grpc_input("INPUT0", x), grpc_input("INPUT1", x)])
        np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), x + x)
        grpc.close()
        # add_sub, bls_add_sub, ensemble_add_sub, repeat (gRPC stream), accumulate (sequence);
        # the signal pipeline (BLS to a Python and an ONNX model)
        for script in ("client.py", "pipeline_client.py"):
            run = subprocess.run(
                [sys.executable, str(ROOT / "examples" / script), "--http-url", proc.http_url,
                 "--grpc-url", proc.grpc_url],
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert run.returncode == 0, run.stdout + run.stderr
            assert "WRONG" not in run.stdout
        the_other_example_models(client)
        # The dashboard, as on a single server: every model, and the requests just served.
        with urllib.request.urlopen(f"http://{proc.http_url}/dashboard/api/models",
                                    timeout=TIMEOUT_S) as reply:  # fmt: skip
            rows = {m["name"]: m for m in json.load(reply)["models"]}
        assert sorted(rows) == examples and all(r["state"] == "READY" for r in rows.values())
        assert rows["add_sub"]["live"]["success"] > 0
        assert server.stop() == 0, proc.output()
        assert server.left_behind() == []
    finally:
        finish(server)


# -- a stop while a model deploys -----------------------------------------------------------


def test_sigint_while_a_model_deploys() -> None:
    server = serve_local(
        str(MODELS), *LOCAL, "--model-control-mode=explicit", "--load-model=rl_slow",
        wait_for_models=False,
    )  # fmt: skip
    try:
        wait_for_initialize(server)
        worker, replica = map(int, server.gate.with_name("gate.started").read_text().split())
        assert server.process.proc.poll() is None
        assert server.stop() == 0, server.process.output()
        assert "stopping while the models load" in server.process.output()
        # The replica in its model's initialize, and the model's process, are gone too.
        wait_until(lambda: process_gone(worker) and process_gone(replica), timeout=30.0)
        assert server.left_behind() == []
    finally:
        finish(server)


# -- the frontends while models deploy; models the cluster cannot hold ----------------------


@pytest.fixture(scope="module")
def served() -> Iterator[LocalServer]:
    """rl_ok and rl_slow (held by its gate) load at start; the tests load the others."""
    server = serve_local(
        str(MODELS), *LOCAL, "--model-control-mode=explicit", "--load-model=rl_ok",
        "--load-model=rl_slow", f"--ray-deploy-timeout-secs={DEPLOY_TIMEOUT_S:g}",
        wait_for_models=False,
    )  # fmt: skip
    try:
        yield server
        assert server.stop() == 0, server.process.output()
        assert server.left_behind() == []
    finally:
        finish(server)


def ready(served: LocalServer) -> None:
    served.open_gate()
    wait_for_log(served.process, "initial model load done", timeout=START_TIMEOUT_S)


def test_live_not_ready_while_models_deploy(served: LocalServer) -> None:
    proc = served.process
    if not served.gate.exists():  # (the first test of the module: rl_slow is deploying)
        wait_for_initialize(served)
        assert status(proc, "/v2/health/live") == 200
        assert status(proc, "/v2/health/ready") == 400
        grpc = grpcclient.InferenceServerClient(proc.grpc_url)
        assert grpc.is_server_live() and not grpc.is_server_ready()
        grpc.close()
        # A model serves as soon as its deployment runs, while the others still deploy.
        wait_until(lambda: client_of(proc).is_model_ready("rl_ok"), timeout=TIMEOUT_S)
        identity(proc, "rl_ok")
        assert status(proc, "/v2/health/ready") == 400
    ready(served)
    wait_until(lambda: status(proc, "/v2/health/ready") == 200, timeout=TIMEOUT_S)
    identity(proc, "rl_slow")
    identity(proc, "rl_ok")


@pytest.mark.parametrize(
    ("model", "needs", "has"),
    [
        ("rl_gpu", "no node of the Ray cluster offers {CPU: 0.1, GPU: 1} for one replica",
         "(its node has {CPU: 2, GPU: 0})"),
        ("rl_cpus", "no node of the Ray cluster offers {CPU: 3} for one replica",
         "(its node has {CPU: 2})"),
        ("rl_pair", "its 2 replicas need {CPU: 3} together", "the Ray cluster has {CPU: 2}"),
    ],
)  # fmt: skip
def test_a_model_no_node_can_hold_fails_at_once(
    served: LocalServer, model: str, needs: str, has: str
) -> None:
    ready(served)
    with pytest.raises(InferenceServerException) as e:
        client_of(served.process).load_model(model)
    message = str(e.value)
    assert f"model '{model}' cannot be deployed: {needs}" in message and has in message
    line = wait_for_log(served.process, f"model '{model}' cannot be deployed")
    logged = served.process.output()[line.start() :].partition("\n")[0]
    assert needs in logged and has in logged  # one line says it all
    identity(served.process, "rl_ok")  # the rest serves


def test_a_model_without_room_fails_after_the_deploy_timeout(served: LocalServer) -> None:
    """rl_room fits an empty node, but rl_ok's and rl_slow's replicas hold part of its CPUs:
    it waits for room, and its load fails after its deploy timeout (its config's
    ray_deploy_timeout_secs, 8 s, in place of the server's --ray-deploy-timeout-secs) naming
    what it needs and what the cluster has free."""
    ready(served)
    with pytest.raises(InferenceServerException) as e:
        client_of(served.process, DEPLOY_TIMEOUT_S + TIMEOUT_S).load_model("rl_room")
    message = str(e.value)
    assert (
        "model 'rl_room' did not start on the Ray cluster within 8 s "
        "(its parameter ray_deploy_timeout_secs): 1 of its 1 replicas found no room: each needs "
        "{CPU: 1.95}, and the Ray cluster has {CPU: 1.8} free of {CPU: 2}"
    ) in message
    index = {m["name"]: m for m in client_of(served.process).get_model_repository_index()}
    assert index["rl_room"]["state"] == "UNAVAILABLE"
    identity(served.process, "rl_ok")
