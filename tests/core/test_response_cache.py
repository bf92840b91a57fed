"""Response cache: ``--cache-config`` parsing, the LRU (unit), and hits and misses through the
real server, visible in statistics over HTTP and gRPC (and as the reference Triton counts)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import json_format

from modelyard.core.response_cache import ResponseCache, parse_cache_config
from modelyard.types import InferRequest, InferResponse, Tensor
from tests.conftest import Serving
from tests.helpers import http_input, wait_until
from tests.reference import reference_available, reference_home, start_reference
from tests.serverproc import ServerProcess, refused_start

pytestmark = pytest.mark.timeout(120)


# -- unit ---------------------------------------------------------------------------------------


def test_parse_cache_config() -> None:
    assert parse_cache_config([]) == 0
    assert parse_cache_config(["local,size=1048576"]) == 1048576
    for bad, text in [
        ("redis,host=x", "cache 'redis' is not supported"),
        ("local,bytes=5", "unknown setting 'bytes'"),
        ("local,size=lots", "must be an integer"),
        ("local,size=-1", "must be >= 0"),
        ("local", "expects <cache>,<key>=<value>"),
    ]:
        with pytest.raises(ValueError, match=text):
            parse_cache_config([bad])


def test_bad_cache_config_stops_the_server_with_a_message(tmp_path: Path) -> None:
    stderr = refused_start(tmp_path, "--cache-config", "redis,host=localhost")
    assert "cache 'redis' is not supported (supported: local)" in stderr


def _request(x: np.ndarray[Any, Any], **kw: Any) -> InferRequest:
    return InferRequest("m", [Tensor.from_numpy("IN", x)], "1", **kw)


def _response(nbytes: int) -> InferResponse:
    return InferResponse("m", "1", outputs=[Tensor.from_numpy("OUT", np.zeros(nbytes, np.uint8))])


def test_keys_cover_inputs_outputs_and_parameters() -> None:
    x = np.arange(4, dtype=np.float32)
    key = ResponseCache.key(_request(x), None)
    assert key == ResponseCache.key(_request(x.copy()), None)
    assert key != ResponseCache.key(_request(x.astype(np.float64)), None)  # dtype
    assert key != ResponseCache.key(_request(x.reshape(2, 2)), None)  # shape
    assert key != ResponseCache.key(_request(x + 1), None)  # bytes
    assert key != ResponseCache.key(_request(x), ["OUT"])  # requested outputs
    assert key != ResponseCache.key(_request(x, parameters={"k": 1}), None)  # parameters
    text = np.array([b"a", b"bc"], dtype=np.object_)
    assert ResponseCache.key(_request(text), None) != ResponseCache.key(
        _request(np.array([b"ab", b"c"], dtype=np.object_)), None
    )


def test_lru_is_bounded_by_bytes() -> None:
    cache = ResponseCache(3000)
    for i in range(3):
        assert cache.insert(bytes([i]), _response(900))
    assert len(cache) == 3 and cache.used <= 3000
    assert cache.lookup(bytes([0])) is not None  # 0 is now the most recently used
    cache.insert(bytes([3]), _response(900))
    assert cache.lookup(bytes([1])) is None  # least recently used went first
    assert cache.lookup(bytes([0])) is not None
    assert not cache.insert(bytes([0]), _response(10))  # already there
    cache.insert(bytes([9]), _response(5000))  # larger than the cache: not stored
    assert cache.lookup(bytes([9])) is None and cache.used <= 3000


def test_cached_arrays_are_private_and_read_only() -> None:
    cache = ResponseCache(1 << 20)
    out = np.arange(4, dtype=np.float32)
    cache.insert(b"k", InferResponse("m", "1", outputs=[Tensor.from_numpy("OUT", out)]))
    out[:] = -1  # the model's (or a shared-memory) buffer changes afterwards
    entry = cache.lookup(b"k")
    assert entry is not None
    resp = cache.response(entry, _request(out, id="r7"))
    assert resp.id == "r7" and resp.outputs[0].data is not None
    assert resp.outputs[0].data.tolist() == [0, 1, 2, 3]
    assert not resp.outputs[0].data.flags.writeable


# -- through the server -------------------------------------------------------------------------


CACHE = ("--cache-config", "local,size=1048576")


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(None, *CACHE, models=["cache_double", "cache_decoupled", "shm_identity"],
                        endpoints=("http", "grpc")) as srv:  # fmt: skip
        yield srv


def _stats(client: Any, model: str) -> dict[str, Any]:
    stats = client.get_inference_statistics(model)
    if not isinstance(stats, dict):
        stats = json_format.MessageToDict(stats, preserving_proto_field_name=True)
    s = stats["model_stats"][0]
    inf = s["inference_stats"]
    return {
        "hit": int(inf["cache_hit"].get("count", 0)),
        "miss": int(inf["cache_miss"].get("count", 0)),
        "success": int(inf["success"].get("count", 0)),
        "executions": int(s.get("execution_count", 0)),
        "hit_ns": int(inf["cache_hit"].get("ns", 0)),
    }


def _double(client: Any, mod: Any, value: float, outputs: list[str] | None = None) -> Any:
    inp = mod.InferInput("INPUT0", [1, 4], "FP32")
    inp.set_data_from_numpy(np.full((1, 4), value, np.float32))
    requested = [mod.InferRequestedOutput(o) for o in outputs] if outputs else None
    return client.infer("cache_double", [inp], outputs=requested)


SEQUENCE = [(1.0, None), (1.0, None), (2.0, None), (1.0, None), (1.0, ["OUTPUT1"])]


def _settled_stats(client: Any, model: str, requests: int) -> dict[str, Any]:
    """The statistics once they count ``requests`` requests (each one a hit or a miss, and a
    success) and two readings in a row agree: Triton updates them just after it answers."""
    last: list[dict[str, Any]] = []

    def settled() -> dict[str, Any] | None:
        now = _stats(client, model)
        counted = now["success"] == now["hit"] + now["miss"] == requests
        agreed = counted and last and last[-1] == now
        last[:] = [now]
        return now if agreed else None

    return wait_until(settled, interval=0.05, what=lambda: f"{requests} requests in {last}")


def _run_sequence(client: Any, mod: Any, steps: int = len(SEQUENCE)) -> list[dict[str, Any]]:
    """Miss, hit, miss (other bytes), hit, miss (other outputs): stats after each."""
    seen = []
    first = _stats(client, "cache_double")
    for done, (value, outputs) in enumerate(SEQUENCE[:steps], start=1):
        result = _double(client, mod, value, outputs)
        if outputs is None:
            assert result.as_numpy("OUTPUT0").tolist() == [[2 * value] * 4]
            assert result.as_numpy("OUTPUT1").tolist() == [[3 * value] * 4]
        else:
            assert result.as_numpy("OUTPUT1").tolist() == [[3 * value] * 4]
            assert result.as_numpy("OUTPUT0") is None
        stats = _settled_stats(client, "cache_double", first["success"] + done)
        seen.append({k: v for k, v in stats.items() if k != "hit_ns"})
    return seen


EXPECTED = [
    {"hit": 0, "miss": 1, "success": 1, "executions": 1},
    {"hit": 1, "miss": 1, "success": 2, "executions": 1},
    {"hit": 1, "miss": 2, "success": 3, "executions": 2},
    {"hit": 2, "miss": 2, "success": 4, "executions": 2},
    {"hit": 2, "miss": 3, "success": 5, "executions": 3},
]


def _shift(rows: list[dict[str, Any]], base: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v + base[k] for k, v in row.items()} for row in rows]


def test_http_then_grpc_hits_and_misses(server: ServerProcess) -> None:
    h = httpclient.InferenceServerClient(server.http_url)
    g = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert _run_sequence(h, httpclient) == EXPECTED
        assert _stats(h, "cache_double")["hit_ns"] > 0
        # the same requests over gRPC hit what HTTP stored (the cache is protocol-neutral)
        _double(g, grpcclient, 1.0)
        after = _settled_stats(g, "cache_double", len(EXPECTED) + 1)
        assert (after["hit"], after["miss"], after["executions"]) == (3, 3, 3)
        base = {k: after[k] for k in ("hit", "miss", "success", "executions")}
        rows = _run_sequence(g, grpcclient)
        # every request of the sequence was stored by the HTTP run: five hits, no execution
        assert rows[-1] == {"hit": base["hit"] + 5, "miss": base["miss"],
                            "success": base["success"] + 5, "executions": base["executions"]}  # fmt: skip
    finally:
        h.close()
        g.close()


def test_models_without_response_cache_are_not_cached(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        for _ in range(2):
            client.infer("shm_identity", [http_input("INPUT0", np.ones(2, np.float32))])
        stats = _stats(client, "shm_identity")
        assert (stats["hit"], stats["miss"], stats["executions"]) == (0, 0, 2)
    finally:
        client.close()


def test_decoupled_model_with_cache_is_refused(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        index = {m["name"]: m for m in client.get_model_repository_index()}
        entry = index["cache_decoupled"]
        assert entry["state"] == "UNAVAILABLE"
        assert (
            "Response Cache does not currently support model cache_decoupled with 'decoupled' "
            "transaction policy. Please disable the response cache."
        ) in entry["reason"]
    finally:
        client.close()


@pytest.mark.reference
@pytest.mark.skipif(not reference_available(), reason="reference Triton is not installed")
def test_statistics_match_triton(serving: Serving) -> None:
    ref_repo, ours_repo = serving.repo(["cache_double"]), serving.repo(["cache_double"])
    caches = reference_home() / "wheel" / "pytriton" / "tritonserver" / "caches"
    ref = start_reference(ref_repo, "--cache-config", "local,size=1048576",
                          "--cache-directory", str(caches))  # fmt: skip
    try:
        h = httpclient.InferenceServerClient(ref.http_url)
        # Not the fifth step: Triton's key ignores the requested outputs, so it answers a
        # request for OUTPUT1 alone with the cached response holding both outputs.
        theirs = _run_sequence(h, httpclient, 4)
        h.close()
    finally:
        ref.stop()
    with serving.server(ours_repo, *CACHE, endpoints=("http", "grpc")) as srv:
        h = httpclient.InferenceServerClient(srv.http_url)
        ours = _run_sequence(h, httpclient, 4)
        h.close()
    assert ours == theirs == EXPECTED[:4]
