"""A model repository served by a two-node Ray cluster (``modelyard serve --ray``), driven by
the unmodified tritonclient through the frontends on both nodes.

The callers (rx_sync, rx_async) are pinned to node_a and their callees (rx_add, rx_count,
rx_gate) to node_b by their configs' ``ray_resources``; each model reports the raylet that ran
it, so the tests see that the calls crossed nodes. The models are in tests/ray/models; the BLS
error cases reuse tests/models' bls_driver and the error table of tests/backends/python.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("ray.serve", reason="ray[serve] is not installed (pip install modelyard[ray])")

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.backends.python.test_bls import ERRORS, drive_grpc_aio
from tests.conftest import Serving
from tests.helpers import (
    grpc_input,
    http_input,
    metric_value,
    read_metrics,
    wait_until,
)
from tests.ray.conftest import MODELS, RayCluster, RayServer, serve_on_cluster

pytestmark = pytest.mark.timeout(600)  # the module's server starts in the first test's setup

LOADED = [
    *("rx_add", "rx_count", "rx_gate", "rx_sync", "rx_async", "rx_seq", "rx_ver", "rx_victim"),
    *("rx_near", "rx_inline"),
]
BLS_MODELS = ["bls_driver", "bls_echo", "bls_fail", "bls_versioned"]
TIMEOUT_S = 60.0  # every client call is bounded by this


@pytest.fixture(scope="module")
def served(ray_cluster: RayCluster, serving: Serving) -> Iterator[RayServer]:
    bls = serving.repo(BLS_MODELS)
    loads = [f"--load-model={m}" for m in [*LOADED, *BLS_MODELS]]
    server = serve_on_cluster(ray_cluster, [MODELS, bls], "--model-control-mode=explicit", *loads)
    try:
        yield server
    finally:
        server.process.stop(60.0)


def http(url: str) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(
        url, connection_timeout=TIMEOUT_S, network_timeout=TIMEOUT_S
    )


def node_of(cluster: RayCluster, output: np.ndarray) -> str:
    return cluster.node_of(output[0].decode())


def ask(url: str, args: dict[str, Any]) -> dict[str, Any]:
    """One rx_async request over HTTP; its JSON report."""
    arg = np.array([json.dumps(args).encode()], dtype=object)
    res = http(url).infer("rx_async", [http_input("ARGS", arg, "BYTES")])
    report: dict[str, Any] = json.loads(res.as_numpy("INFO")[0])
    return report


# -- a pipeline across nodes, through both protocols and both frontends ---------------------


@pytest.mark.parametrize("size", [4, 64 * 1024])  # 64 Ki floats: through Ray's object store
def test_pipeline_across_nodes_http(ray_cluster: RayCluster, served: RayServer, size: int) -> None:
    a = np.linspace(-1, 1, size, dtype=np.float32)
    b = np.full(size, 0.5, dtype=np.float32)
    # Large inputs reach rx_add (through rx_sync) as views of Ray's object store; in place
    # writes work there (process mode: the worker gets its copy), as on one server.
    params = {"tag": "h", "inplace": size > 1024}
    for url in served.urls("http"):  # the frontend on each node
        res = http(url).infer(
            "rx_sync", [http_input("INPUT0", a), http_input("INPUT1", b)], parameters=params
        )
        np.testing.assert_allclose(res.as_numpy("OUTPUT0"), a + b, atol=1e-6)
        np.testing.assert_allclose(res.as_numpy("OUTPUT1"), a - b, atol=1e-6)
        assert node_of(ray_cluster, res.as_numpy("NODE")) == "node_a"
        assert node_of(ray_cluster, res.as_numpy("CALLEE_NODE")) == "node_b"
        assert json.loads(res.as_numpy("ECHO")[0])["parameters"] == {**params, "via": "rx_sync"}


def test_pipeline_across_nodes_grpc(ray_cluster: RayCluster, served: RayServer) -> None:
    a = np.arange(6, dtype=np.float32)
    b = np.ones(6, dtype=np.float32)
    for url in served.urls("grpc"):
        client = grpcclient.InferenceServerClient(url)
        res = client.infer(
            "rx_sync",
            [grpc_input("INPUT0", a), grpc_input("INPUT1", b)],
            parameters={"tag": "g"},
            client_timeout=TIMEOUT_S,
        )
        np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)
        assert node_of(ray_cluster, res.as_numpy("NODE")) == "node_a"
        assert node_of(ray_cluster, res.as_numpy("CALLEE_NODE")) == "node_b"
        client.close()


def test_bls_carries_ids_flags_and_parameters(served: RayServer) -> None:
    a = np.zeros(2, dtype=np.float32)
    res = http(served.urls("http")[0]).infer(
        "rx_sync",
        [http_input("INPUT0", a), http_input("INPUT1", a)],
        request_id="r-7",
        parameters={"n": 3, "flag": True},
    )
    echo = json.loads(res.as_numpy("ECHO")[0])
    assert echo["parameters"] == {"n": 3, "flag": True, "via": "rx_sync"}
    assert echo["correlation_id"] == 0
    assert echo["flags"] == 0


def test_client_inputs_may_be_written_in_place(ray_cluster: RayCluster, served: RayServer) -> None:
    # rx_add adds into its INPUT0 in place; 1 MiB arrives as a read-only view of Ray's object
    # store in the replica, and the model (process mode) still gets a writable copy.
    a = np.arange(256 * 1024, dtype=np.float32)
    b = np.full(a.shape, 2, dtype=np.float32)
    res = http(served.urls("http")[1]).infer(
        "rx_add", [http_input("INPUT0", a), http_input("INPUT1", b)]
    )
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)
    assert node_of(ray_cluster, res.as_numpy("NODE")) == "node_b"


def test_calls_go_to_the_replica_on_their_own_node(
    ray_cluster: RayCluster, served: RayServer
) -> None:
    """rx_near runs a replica on each node: each frontend's requests, and rx_async's BLS calls
    from node_a, stay on their own node (spread over both, ten calls in a row would land on
    one node by chance once in 500)."""
    x = np.zeros(1, dtype=np.float32)
    for node_id, urls in served.frontends.items():
        client = http(urls["http"])
        ran = {
            node_of(
                ray_cluster, client.infer("rx_near", [http_input("INPUT0", x)]).as_numpy("NODE")
            )
            for _ in range(10)
        }
        assert ran == {ray_cluster.node_ids[node_id]}
    report = ask(served.urls("http")[1], {"mode": "near", "n": 10})
    assert [ray_cluster.node_of(n) for n in report["nodes"]] == ["node_a"]


def test_calls_take_the_direct_path_once_they_know_it(
    ray_cluster: RayCluster, served: RayServer
) -> None:
    """Once a caller has asked rx_near's replicas where they listen (its first calls take
    Serve's handle meanwhile), its calls go over modelyard's own connections: each replica
    counts requests taken that way, from its node's frontend and from a BLS caller."""
    x = np.zeros(1, dtype=np.float32)

    def direct_counts() -> dict[str, int]:
        url = f"http://{served.urls('http')[0]}/dashboard/api/models"
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r:
            rows = {(m["name"], m.get("version")): m for m in json.load(r)["models"]}
        return {
            ray_cluster.node_ids[r["node"]]: r["direct"] for r in rows[("rx_near", "1")]["replicas"]
        }

    def both_direct() -> bool:
        for urls in served.frontends.values():
            http(urls["http"]).infer("rx_near", [http_input("INPUT0", x)])
        ask(served.urls("http")[1], {"mode": "near", "n": 2})  # rx_async on node_a
        counts = direct_counts()
        return counts.get("node_a", 0) >= 6 and counts.get("node_b", 0) >= 3

    wait_until(both_direct, timeout=TIMEOUT_S, what="rx_near's replicas served directly")


def test_an_in_process_replica_answers_each_request(served: RayServer) -> None:
    """rx_inline runs in-process in its replica: its first execute on the instance's thread,
    later short ones on the replica's loop (ModelHost.execute_on_loop; which loop a run takes
    depends on timing, tests/backends/python/test_host_seam.py pins that down). Every answer,
    over both protocols, is the model's."""
    urls = served.urls("http")[0], served.urls("grpc")[0]
    first = None
    for i in range(20):
        x = np.full(3, i, dtype=np.float32)
        if i % 2 == 0:
            res: Any = http(urls[0]).infer("rx_inline", [http_input("INPUT0", x)])
        else:
            res = grpcclient.InferenceServerClient(urls[1]).infer(
                "rx_inline", [grpc_input("INPUT0", x)], client_timeout=TIMEOUT_S
            )
        np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), x * 2)
        on_loop = res.as_numpy("ON_LOOP")
        assert on_loop is not None and on_loop.dtype == np.bool_ and on_loop.shape == (1,)
        if first is None:
            first = bool(on_loop[0])
    assert first is False  # the first run shows how long the model takes: on its thread


def test_a_small_request_may_have_a_large_response(served: RayServer) -> None:
    """A small request travels inside Serve's gRPC message, and so does its response: 16 MiB
    of it (over gRPC's default 4 MiB limit) arrives whole."""
    x = np.arange(4, dtype=np.float32)
    size = 4 << 20
    res = http(served.urls("http")[0]).infer(
        "rx_near", [http_input("INPUT0", x)], parameters={"size": size}
    )
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), np.resize(x, size))


# -- async fan-out, decoupled, cancellation, timeouts --------------------------------------


def test_async_fanout_across_nodes_runs_concurrently(
    ray_cluster: RayCluster, served: RayServer
) -> None:
    report = ask(served.urls("http")[0], {"mode": "fanout", "n": 4, "group": uuid.uuid4().hex})
    assert report["outputs"] == [0.0, 10.0, 20.0, 30.0]
    # rx_gate answers 1 only once all four calls were inside it at the same time.
    assert report["together"] == [1, 1, 1, 1]
    assert [ray_cluster.node_of(n) for n in report["nodes"]] == ["node_b"]


def test_decoupled_bls_across_nodes_streams(ray_cluster: RayCluster, served: RayServer) -> None:
    report = ask(served.urls("http")[1], {"mode": "stream", "count": 5})
    assert report["outs"] == [0, 1, 2, 3, 4]
    assert report["errors"] == []
    assert [ray_cluster.node_of(n) for n in report["nodes"]] == ["node_b"]


def test_decoupled_model_streams_to_grpc_client(served: RayServer) -> None:
    import queue

    results: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(served.urls("grpc")[0])
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        count = grpc_input("COUNT", np.array([3], dtype=np.int32))
        client.async_stream_infer("rx_count", [count], enable_empty_final_response=True)
        got = []
        while True:
            result, error = results.get(timeout=TIMEOUT_S)
            assert error is None, error
            params = result.get_response().parameters
            if params["triton_final_response"].bool_param:
                break
            got.append(int(result.as_numpy("OUT")[0]))
        assert got == [0, 1, 2]
    finally:
        client.stop_stream()
        client.close()


def test_model_cancels_its_decoupled_call(served: RayServer, tmp_path: Path) -> None:
    marker = tmp_path / "cancelled"
    report = ask(served.urls("http")[0], {"mode": "cancel", "marker": str(marker)})
    # The caller cancels after its second response; a third the callee had sent (every 50 ms)
    # before the cancellation reached it across the nodes is still delivered, as under Triton.
    assert report["data"] >= 2
    assert report["code"] == 7  # CANCELLED
    wait_until(marker.exists, timeout=TIMEOUT_S, what="the callee to see its cancellation")


def test_cancelled_caller_cancels_its_calls(served: RayServer, tmp_path: Path) -> None:
    """The client cancels its request to rx_async (node_a); the BLS call rx_async made to
    rx_count (node_b) is cancelled with it, and rx_count sees is_cancelled()."""
    started, marker = tmp_path / "started", tmp_path / "cancelled"
    args = {"mode": "hold", "marker": str(marker), "started": str(started)}
    arg = np.array([json.dumps(args).encode()], dtype=object)
    client = grpcclient.InferenceServerClient(served.urls("grpc")[1])
    done: list[Any] = []
    call = client.async_infer(
        "rx_async", [grpc_input("ARGS", arg, "BYTES")], callback=lambda r, e: done.append(e)
    )
    try:
        wait_until(started.exists, timeout=TIMEOUT_S, what="the BLS stream to start")
        call.cancel()
        wait_until(marker.exists, timeout=TIMEOUT_S, what="the callee to see the cancellation")
    finally:
        call.cancel()
        client.close()


def test_timeout_ends_the_call_with_triton_s_error(served: RayServer) -> None:
    report = ask(served.urls("http")[0], {"mode": "timeout", "group": uuid.uuid4().hex})
    assert report["error"] == "Request timeout expired"
    assert report["code"] == 4  # UNAVAILABLE


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors_come_back_as_error_responses(served: RayServer, case: str) -> None:
    spec, code, start, part = ERRORS[case]
    result = asyncio.run(drive_grpc_aio(served.urls("grpc")[0], spec))
    assert result["has_error"] is True
    assert result["message"].startswith(start), result["message"]
    assert part in result["message"]
    assert result["code"] == code


def test_unknown_model_from_a_pinned_caller(served: RayServer) -> None:
    report = ask(served.urls("http")[0], {"mode": "unknown"})
    assert report["error"] == (
        "Model rx_missing - Error when running inference: "
        "Failed for execute the inference request. Model 'rx_missing' is not ready."
    )
    assert report["code"] == 1  # INTERNAL, as Triton's stub answers a model that is not ready


def test_versions_are_deployments_of_their_own(served: RayServer) -> None:
    assert ask(served.urls("http")[0], {"mode": "version"}) == {"v1": 1.0, "v2": 2.0, "latest": 2.0}
    index = http(served.urls("http")[0]).get_model_repository_index()
    assert {(m["name"], m.get("version")) for m in index if m["name"] == "rx_ver"} == {
        ("rx_ver", "1"),
        ("rx_ver", "2"),
    }


def test_bad_input_is_refused_with_triton_s_message(served: RayServer) -> None:
    client = http(served.urls("http")[1])
    with pytest.raises(InferenceServerException) as e:
        client.infer("rx_add", [http_input("INPUT0", np.zeros(2, np.float32))])
    assert "expected 2 inputs but got 1 inputs for model 'rx_add'" in str(e.value)
    assert client.is_server_live()


# -- sequences stay on their replica ----------------------------------------------------------


def test_sequences_are_sticky_across_two_replicas(served: RayServer) -> None:
    clients = [grpcclient.InferenceServerClient(u) for u in served.urls("grpc")]
    replicas_seen: set[int] = set()
    base = 1000 + (os.getpid() % 1000) * 100
    for seq in range(32):  # until both replicas have served a sequence (2^-31 to fail)
        corrid, replicas, sums = base + seq, set(), []
        for step in range(3):
            client = clients[step % 2]  # alternate frontends within one sequence
            res = client.infer(
                "rx_seq",
                [grpc_input("VALUE", np.array([step + 1], dtype=np.int32))],
                sequence_id=corrid,
                sequence_start=step == 0,
                sequence_end=step == 2,
                client_timeout=TIMEOUT_S,
            )
            sums.append(int(res.as_numpy("SUM")[0]))
            replicas.add(int(res.as_numpy("REPLICA")[0]))
        assert sums == [1, 3, 6]
        assert len(replicas) == 1, f"sequence {corrid} moved between replicas {replicas}"
        replicas_seen |= replicas
        if len(replicas_seen) == 2:
            break
    assert len(replicas_seen) == 2
    for c in clients:
        c.close()


def test_sequences_through_bls_are_sticky(served: RayServer) -> None:
    report = ask(served.urls("http")[0], {"mode": "sticky", "base": 900_000 + os.getpid() % 1000})
    for seq in report.values():
        assert seq["sums"] == [1, 3, 6]
        assert len(seq["replicas"]) == 1


# -- health, metadata, statistics ---------------------------------------------------------


def test_health_metadata_and_config(served: RayServer) -> None:
    for url in served.urls("http"):
        client = http(url)
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready("rx_seq")
        assert not client.is_model_ready("rx_lazy")
        meta = client.get_model_metadata("rx_add")
        assert meta["versions"] == ["1"] and meta["platform"] == "python"
        config = client.get_model_config("rx_seq")
        assert [(g["count"], g["kind"]) for g in config["instance_group"]] == [(2, "KIND_CPU")]
        assert int(config["sequence_batching"]["max_sequence_idle_microseconds"]) == 60_000_000


def test_statistics_and_metrics_add_up_every_replica(served: RayServer) -> None:
    client = grpcclient.InferenceServerClient(served.urls("grpc")[0])
    for corrid in range(5000, 5008):
        client.infer(
            "rx_seq",
            [grpc_input("VALUE", np.array([1], dtype=np.int32))],
            sequence_id=corrid,
            sequence_start=True,
            sequence_end=True,
            client_timeout=TIMEOUT_S,
        )
    client.close()
    stats = http(served.urls("http")[1]).get_inference_statistics("rx_seq")["model_stats"]
    assert [s["version"] for s in stats] == ["1"]
    count = stats[0]["inference_stats"]["success"]["count"]
    assert count >= 8
    metrics = read_metrics(served.urls("metrics")[0])
    success = metric_value(metrics, "nv_inference_request_success", model="rx_seq", version="1")
    assert success is not None and success >= 8


def test_the_dashboard_shows_each_replica_and_its_node(
    ray_cluster: RayCluster, served: RayServer
) -> None:
    """Every frontend's dashboard lists each loaded version's replicas: the node each runs on
    (rx_near one per node, rx_add pinned to node_b) and its process."""
    for url in served.urls("http"):
        with urllib.request.urlopen(f"http://{url}/dashboard/api/models", timeout=TIMEOUT_S) as r:
            rows = {(m["name"], m.get("version")): m for m in json.load(r)["models"]}
        near = rows[("rx_near", "1")]["replicas"]
        assert sorted(ray_cluster.node_ids[r["node"]] for r in near) == ["node_a", "node_b"]
        assert len({r["pid"] for r in near}) == 2 and all(r["ip"] for r in near)
        add = rows[("rx_add", "1")]["replicas"]
        assert [ray_cluster.node_ids[r["node"]] for r in add] == ["node_b"]


# -- model control --------------------------------------------------------------------------


def test_load_and_unload_through_the_repository_api(served: RayServer) -> None:
    http_client, grpc_client = (
        http(served.urls("http")[0]),
        grpcclient.InferenceServerClient(served.urls("grpc")[1]),
    )
    x = np.array([2], dtype=np.float32)
    http_client.load_model("rx_lazy")
    assert grpc_client.is_model_ready("rx_lazy")  # (the other node's frontend)
    res = grpc_client.infer("rx_lazy", [grpc_input("INPUT0", x)], client_timeout=TIMEOUT_S)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), x * 3)
    grpc_client.unload_model("rx_lazy")
    with pytest.raises(InferenceServerException) as e:
        http_client.infer("rx_lazy", [http_input("INPUT0", x)])
    assert "rx_lazy" in str(e.value)
    index = {m["name"]: m for m in http_client.get_model_repository_index()}
    assert index["rx_lazy"]["state"] == "UNAVAILABLE"
    assert index["rx_lazy"]["reason"] == "unloaded"
    # A model loads it again through pb_utils.load_model, then calls it.
    report = ask(served.urls("http")[1], {"mode": "load"})
    assert report == {"ready": True, "output": 6.0}
    http_client.unload_model("rx_lazy")
    grpc_client.close()


def test_load_of_a_model_no_node_can_hold_fails_at_once(served: RayServer) -> None:
    client = http(served.urls("http")[0])
    config = {
        "name": "rx_lazy",
        "backend": "python",
        "parameters": {"ray_resources": {"string_value": '{"node_z": 1}'}},
    }
    with pytest.raises(InferenceServerException) as e:
        client.load_model("rx_lazy", config=json.dumps(config))
    assert "no node of the Ray cluster offers {node_z: 1} for one replica" in str(e.value)
    assert client.is_server_live()


# -- a replica that dies --------------------------------------------------------------------


def test_a_killed_replica_is_replaced(served: RayServer, tmp_path: Path) -> None:
    client = http(served.urls("http")[0])
    hold0 = [http_input("HOLD", np.array([0], dtype=np.int32))]
    before = int(client.infer("rx_victim", hold0).as_numpy("REPLICA")[0])
    started = tmp_path / "started"
    grpc_client = grpcclient.InferenceServerClient(served.urls("grpc")[0])
    outcome: list[Any] = []
    grpc_client.async_infer(
        "rx_victim",
        [grpc_input("HOLD", np.array([1], dtype=np.int32))],
        callback=lambda result, error: outcome.append(error),
        parameters={"started": str(started)},
    )
    wait_until(started.exists, timeout=TIMEOUT_S, what="the held request to start")
    assert int(started.read_text()) == before
    os.kill(before, signal.SIGKILL)
    wait_until(lambda: outcome, timeout=TIMEOUT_S, what="the in-flight request to end")
    error = outcome[0]
    assert error is not None
    assert "rx_victim" in str(error) and "died" in str(error)
    grpc_client.close()

    def serves_again() -> int | None:
        try:
            return int(client.infer("rx_victim", hold0).as_numpy("REPLICA")[0])
        except InferenceServerException:
            return None

    after = wait_until(serves_again, timeout=120.0, interval=0.5, what="a new replica")
    assert after != before
