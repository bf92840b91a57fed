"""Ensembles (``platform: "ensemble"``) through the real server and tritonclient, and the same
calls against the reference Triton 2.51 (when installed)."""

from __future__ import annotations

import asyncio
import http.client
import json
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import Serving
from tests.helpers import EXAMPLES, inputs, make_repo, wait_until
from tests.reference import reference_available, start_reference
from tests.serverproc import ServerProcess

ENSEMBLES = ["ens_batched", "ens_bls", "ens_diamond", "ens_nested", "ens_parallel", "ens_stream"]
STEPS = ["ens_check", "ens_double", "ens_plus100", "ens_sleep"]
A = np.array([1, 2, 3, 4], np.float32)
B = np.array([1, 1, 1, 1], np.float32)


def _repo(root: Path, bad: bool = True) -> Path:
    make_repo(root, [*ENSEMBLES, *STEPS, *(["ens_bad_step"] if bad else [])])
    return make_repo(root, ["add_sub", "bls_add_sub", "repeat"], EXAMPLES)


def _live(hostport: str) -> bool:
    try:
        return bool(httpclient.InferenceServerClient(hostport).is_server_live())
    except Exception:
        return False


def _ready(hostport: str) -> None:
    wait_until(lambda: _live(hostport), 60, 0.1, what=f"{hostport} to be live")


@pytest.fixture(scope="module")
def server(serving: Serving, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    barrier = tmp_path_factory.mktemp("ens_sleep_barrier")
    with serving.server(_repo(serving.repo()), env={"ENS_SLEEP_BARRIER": str(barrier)}) as srv:
        _ready(srv.http_url)
        yield srv


def test_diamond_answers_over_http_and_grpc(server: ServerProcess) -> None:
    for mod, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
        client = mod.InferenceServerClient(url)
        res = client.infer("ens_diamond", inputs(mod, A=A, B=B))
        np.testing.assert_array_equal(res.as_numpy("SUM10"), (A + B) * 10)
        np.testing.assert_array_equal(res.as_numpy("DIFF10"), (A - B) * 10)
        res = client.infer("ens_diamond", inputs(mod, A=A, B=B),
                           outputs=[mod.InferRequestedOutput("DIFF10")])  # fmt: skip
        assert res.as_numpy("SUM10") is None
        np.testing.assert_array_equal(res.as_numpy("DIFF10"), (A - B) * 10)


def test_independent_steps_run_at_the_same_time(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=30)
    res = client.infer("ens_parallel", inputs(httpclient, X=np.ones(1, np.float32)))
    t1, t2 = res.as_numpy("T1"), res.as_numpy("T2")
    # Each step waits until the other one has started too (10 s at most): they overlap when
    # both started before either ended.
    assert t1[0] < t2[1] and t2[0] < t1[1], (t1, t2)


def test_python_step_calling_bls(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    res = client.infer("ens_bls", inputs(grpcclient, X=A, Y=B))
    np.testing.assert_array_equal(res.as_numpy("Z"), (A + B) * 10)


def test_step_error_reaches_the_client(server: ServerProcess) -> None:
    neg = {"A": np.zeros(4, np.float32), "B": B}
    with pytest.raises(InferenceServerException) as e:
        httpclient.InferenceServerClient(server.http_url).infer(
            "ens_diamond", inputs(httpclient, **neg)
        )
    assert (e.value.status(), e.value.message()) == (
        "500",
        "in ensemble 'ens_diamond', negative input",
    )
    with pytest.raises(InferenceServerException) as e:
        grpcclient.InferenceServerClient(server.grpc_url).infer(
            "ens_diamond", inputs(grpcclient, **neg)
        )
    assert e.value.status() == "StatusCode.INTERNAL"
    assert e.value.message() == "in ensemble 'ens_diamond', negative input"
    test_diamond_answers_over_http_and_grpc(server)  # still serving


async def test_batched_ensemble_under_concurrent_clients(server: ServerProcess) -> None:
    client = grpcaio.InferenceServerClient(server.grpc_url)
    try:
        batches = [np.full((n, 2), i, np.float32) for i, n in enumerate((1, 2, 3, 1, 2, 1, 3, 1))]

        async def one(x: np.ndarray) -> np.ndarray:
            res = await client.infer("ens_batched", inputs(grpcaio, X=x))
            y: np.ndarray = res.as_numpy("Y")
            return y

        results = await asyncio.wait_for(asyncio.gather(*(one(x) for x in batches)), 30)
        for x, y in zip(batches, results, strict=True):
            np.testing.assert_array_equal(y, x * 4)
    finally:
        await client.close()


def test_decoupled_step_streams_through_the_ensemble(server: ServerProcess) -> None:
    assert _stream(server.grpc_url, 3) == [([100], False), ([101], False), ([102], True)]
    assert _stream(server.grpc_url, 0) == [(None, True)]  # only the final flag
    config = httpclient.InferenceServerClient(server.http_url).get_model_config("ens_stream")
    assert config["model_transaction_policy"] == {"decoupled": True}
    x = httpclient.InferInput("COUNT", [1], "INT32")
    x.set_data_from_numpy(np.ones(1, np.int32))
    with pytest.raises(InferenceServerException) as e:  # decoupled: streaming only
        httpclient.InferenceServerClient(server.http_url).infer("ens_stream", [x])
    assert (e.value.status(), e.value.message()) == (
        "501",
        "HTTP end point doesn't support models with decoupled transaction policy",
    )


def test_ensemble_as_a_step(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    res = client.infer("ens_nested", inputs(httpclient, X=x))
    np.testing.assert_array_equal(res.as_numpy("Y"), x * 8)


def test_statistics_count_ensemble_and_step_requests(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)

    def stats(name: str) -> dict[str, Any]:
        s: dict[str, Any] = client.get_inference_statistics(name)["model_stats"][0]
        return s

    e0, c0 = stats("ens_diamond"), stats("ens_check")
    client.infer("ens_diamond", inputs(httpclient, A=A, B=B))
    with pytest.raises(InferenceServerException):
        client.infer("ens_diamond", inputs(httpclient, A=np.zeros(4, np.float32), B=B))
    e1, c1 = stats("ens_diamond"), stats("ens_check")

    def count(stats: dict[str, Any], kind: str) -> int:
        return int(stats["inference_stats"][kind]["count"])

    assert count(e1, "success") - count(e0, "success") == 1
    assert count(e1, "fail") - count(e0, "fail") in (1, 2)  # once or twice, as Triton 2.51
    assert e1["execution_count"] - e0["execution_count"] == 1
    # The step answered one request with an error response: a failure (Triton 2.51 counts
    # it as a success).
    assert count(c1, "success") - count(c0, "success") == 3
    assert count(c1, "fail") - count(c0, "fail") == 1


def test_metadata_config_and_bad_step(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    meta = client.get_model_metadata("ens_batched")
    assert meta["platform"] == "ensemble"
    assert meta["inputs"] == [{"name": "X", "datatype": "FP32", "shape": [-1, 2]}]
    config = client.get_model_config("ens_diamond")
    assert config["instance_group"] == [] and config["model_transaction_policy"] == {
        "decoupled": False
    }
    assert [s["model_version"] for s in config["ensemble_scheduling"]["step"]] == [1, -1, -1]
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["ens_bad_step"] == {"name": "ens_bad_step"}  # as Triton lists it


def test_explicit_mode_loads_the_step_models(tmp_path: Path, serving: Serving) -> None:
    with serving.server(_repo(tmp_path / "repo"), "--model-control-mode", "explicit") as srv:
        _ready(srv.http_url)
        client = httpclient.InferenceServerClient(srv.http_url)
        assert not client.is_model_ready("add_sub")
        client.load_model("ens_diamond")
        assert all(client.is_model_ready(m) for m in ("ens_diamond", "add_sub", "ens_check"))
        res = client.infer("ens_diamond", inputs(httpclient, A=A, B=B))
        np.testing.assert_array_equal(res.as_numpy("SUM10"), (A + B) * 10)
        with pytest.raises(InferenceServerException) as e:  # Triton 2.51's answer
            client.load_model("ens_bad_step")
        assert (e.value.status(), e.value.message()) == (
            "400",
            (
                "load failed for model 'ens_bad_step': in ensemble ens_bad_step, ensemble tensor X "
                "is mapping to non-existing input NOPE in model ens_double\n"
            ),
        )
        assert client.is_model_ready("ens_double")


# ----------------------------------------------------------------- against the reference


def _observe(http_url: str, grpc_url: str) -> dict[str, Any]:
    """What clients see of the ensembles, minus timings."""
    hc, gc = httpclient.InferenceServerClient(http_url), grpcclient.InferenceServerClient(grpc_url)
    out: dict[str, Any] = {}
    calls = {
        "diamond": ("ens_diamond", {"A": A, "B": B}),
        "diamond_error": ("ens_diamond", {"A": np.zeros(4, np.float32), "B": B}),
        "bls": ("ens_bls", {"X": A, "Y": B}),
        "batched": ("ens_batched", {"X": np.arange(6, dtype=np.float32).reshape(3, 2)}),
        "nested": ("ens_nested", {"X": np.arange(4, dtype=np.float32).reshape(2, 2)}),
        "bad_input": ("ens_batched", {"Q": np.ones((1, 2), np.float32)}),
    }
    for key, (model, arrays) in calls.items():
        for proto, client, mod in (("http", hc, httpclient), ("grpc", gc, grpcclient)):
            try:
                res = client.infer(model, inputs(mod, **arrays))
                resp = res.get_response() if proto == "http" else res.get_response(as_json=True)
                names = sorted(o["name"] for o in resp["outputs"])
                out[f"{key}-{proto}"] = {
                    "outputs": {n: res.as_numpy(n).tolist() for n in names},
                    "parameters": resp.get("parameters"),
                }
            except InferenceServerException as e:
                out[f"{key}-{proto}"] = {"status": e.status(), "message": e.message()}
    for model in ENSEMBLES:
        out[f"config-{model}"] = hc.get_model_config(model)
        out[f"meta-{model}"] = hc.get_model_metadata(model)
        out[f"gmeta-{model}"] = gc.get_model_metadata(model, as_json=True)
    for model in ("ens_diamond", "ens_check", "ens_batched", "add_sub"):
        s = hc.get_inference_statistics(model)["model_stats"][0]
        out[f"stats-{model}"] = (
            s["inference_count"], s["execution_count"],
            # Triton counts a failed ensemble request once or twice, depending on timing.
            {k: v["count"] for k, v in s["inference_stats"].items() if k != "fail"},
            s["inference_stats"]["fail"]["count"] > 0,
            [(b["batch_size"], b["compute_infer"]["count"]) for b in s["batch_stats"]],
        )  # fmt: skip
    out["index"] = [m for m in hc.get_model_repository_index() if m["name"].startswith("ens_")]
    for count in (3, 0):
        out[f"stream-{count}"] = _stream(grpc_url, count)
    return out


def _stream(grpc_url: str, count: int) -> list[Any]:
    """Every response of ens_stream over a gRPC stream: (Y, final flag), or the error."""
    got: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(grpc_url)
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    try:
        x = grpcclient.InferInput("COUNT", [1], "INT32")
        x.set_data_from_numpy(np.array([count], np.int32))
        client.async_stream_infer("ens_stream", [x], enable_empty_final_response=True)
        out: list[Any] = []
        while True:
            result, error = got.get(timeout=30)
            if error is not None:
                return [*out, str(error)]
            resp = result.get_response()
            final = resp.parameters["triton_final_response"].bool_param
            y = result.as_numpy("Y")
            out.append((None if y is None else y.tolist(), final))
            if final:
                return out
    finally:
        client.stop_stream()


@pytest.mark.reference
@pytest.mark.skipif(not reference_available(), reason="reference Triton is not installed")
def test_ensembles_match_the_reference(tmp_path: Path, serving: Serving) -> None:
    repo = _repo(tmp_path / "repo")
    ref = start_reference(repo, "--exit-on-error=false")
    try:
        expected = _observe(ref.http_url, ref.grpc_url)
    finally:
        ref.stop()
    with serving.server(repo) as mine:
        _ready(mine.http_url)
        got = _observe(mine.http_url, mine.grpc_url)
    expected["stats-ens_check"] = _error_responses_fail(expected["stats-ens_check"], 2)
    assert json.dumps(got, sort_keys=True, default=str) == json.dumps(
        expected, sort_keys=True, default=str
    )


def _error_responses_fail(stats: Any, n: int) -> Any:
    """Triton's statistics with ``n`` requests answered by an error response counted as
    modelyard counts them: failures, not successes (the model still executed them)."""
    count, executions, counts, _failed, batches = stats
    per_request = {
        k: v - n if k in ("success", "queue") or k.startswith("compute_") else v
        for k, v in counts.items()
    }
    return (count - n, executions, per_request, True, batches)


def test_metrics_list_the_ensemble(server: ServerProcess) -> None:
    httpclient.InferenceServerClient(server.http_url).infer("ens_bls", inputs(httpclient, X=A, Y=B))
    host, port = server.metrics_url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("GET", "/metrics")
    body = conn.getresponse().read().decode()
    assert 'nv_inference_request_success{model="ens_bls",version="1"}' in body
    # A failed ensemble request has Triton's reason OTHER; a step that answered with an error
    # response failed with reason BACKEND.
    failures = {
        line.split("{")[1].split("}")[0]: int(line.rsplit(" ", 1)[1])
        for line in body.splitlines()
        if line.startswith("nv_inference_request_failure{")
    }
    assert failures['model="ens_diamond",reason="OTHER",version="1"'] >= 1
    assert failures['model="ens_diamond",reason="BACKEND",version="1"'] == 0
    step = {k: v for k, v in failures.items() if '"ens_check"' in k and v}
    assert list(step) == ['model="ens_check",reason="BACKEND",version="1"']


# ----------------------------------------------------------------- the scheduler alone


def _fake_submit(order: list[str], fail: str = "") -> Any:
    """Step models that answer at once (inside submit): O = I + 1, or an error."""
    from modelyard.errors import InvalidArgument
    from modelyard.serving.context import RequestContext
    from modelyard.types import InferResponse, Tensor

    def submit(req: Any, on_response: Any) -> RequestContext:
        order.append(req.model_name)
        if req.model_name == fail:
            on_response(InferResponse(req.model_name, "1", error=InvalidArgument("boom")))
        else:
            out = Tensor.from_numpy("O", req.inputs[0].data + 1)
            on_response(InferResponse(req.model_name, "1", outputs=[out]))
        return RequestContext(req, None, on_response)

    return submit


async def _run_scheduler(fail: str = "") -> tuple[list[str], Any]:
    from modelyard.scheduling.ensemble import EnsembleScheduler, Step
    from modelyard.serving.context import RequestContext
    from modelyard.types import InferRequest, Tensor

    steps = [
        Step("a", "", (("I", "X"),), (("O", "Y"),)),
        Step("b", "", (("I", "Y"),), (("O", "Z"),)),
        Step("c", "", (("I", "X"),), (("O", "W"),)),
    ]
    order: list[str] = []
    sched = EnsembleScheduler("e", steps, _fake_submit(order, fail), ["W", "Z"])
    fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    request = InferRequest("e", [Tensor.from_numpy("X", np.zeros(2, np.float32))], "1")
    sched.submit(RequestContext(request, None, fut.set_result))
    resp = await asyncio.wait_for(fut, 5)
    assert await sched.drain(1.0)
    return order, resp


async def test_scheduler_follows_the_data_flow() -> None:
    order, resp = await _run_scheduler()
    assert order == ["a", "b", "c"]  # b as soon as a answered; each step once
    assert {t.name: t.data.tolist() for t in resp.outputs} == {"W": [1, 1], "Z": [2, 2]}


async def test_scheduler_stops_at_a_failing_step() -> None:
    order, resp = await _run_scheduler(fail="a")
    assert order == ["a"]
    assert (resp.error.code.name, resp.error.message) == ("INVALID_ARG", "in ensemble 'e', boom")
