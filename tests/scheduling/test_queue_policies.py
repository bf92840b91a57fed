"""Queue policies of the dynamic batcher through the real server: refused requests get
Triton's errors, and statistics and metrics count them as Triton 2.51 does (a full queue
is not counted; a request timed out in the queue is a failure with reason REJECTED)."""

from __future__ import annotations

import http.client
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.reference import reference_available, start_reference
from tests.serverproc import start_server

MODELS = Path(__file__).resolve().parents[1] / "models"
CALLS = [
    ("r1", "grpc"),
    ("", "grpc"),
    ("r3", "grpc"),
    ("", "grpc"),
]  # gevent-based http: not in threads


def _one(urls: dict[str, str], model: str, rid: str, proto: str) -> tuple[str, str, str]:
    mod: Any = grpcclient if proto == "grpc" else httpclient
    client = mod.InferenceServerClient(urls[proto])
    x = mod.InferInput("IN", [1, 1], "FP32")
    x.set_data_from_numpy(np.ones((1, 1), np.float32))
    try:
        client.infer(model, [x], request_id=rid)
        return rid, "ok", ""
    except InferenceServerException as e:
        return rid, str(e.status()), str(e.message())


def _observe(urls: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for model in ("queue_slowq", "queue_slowt"):
        with ThreadPoolExecutor(len(CALLS)) as pool:
            # The first call starts executing (0.3 s) before the others arrive, so exactly one
            # of them queues (or waits past the queue timeout), however slow the machine.
            first = pool.submit(_one, urls, model, *CALLS[0])
            time.sleep(0.15)
            rest = [pool.submit(_one, urls, model, *c) for c in CALLS[1:]]
            out[model] = [first.result(), *(f.result() for f in rest)]
        out[f"{model}-stats"] = _settled_stats(urls, model)
    host, port = urls["metrics"].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    out["failures"] = sorted(line for line in text.splitlines()
                             if line.startswith("nv_inference_request_failure{model=\"queue_"))  # fmt: skip
    return out


def _settled_stats(urls: dict[str, str], model: str) -> tuple[int, int]:
    """(inference count, failure count) once two readings 0.1 s apart agree: Triton records a
    refusal's statistics just after it sends the error, so a reading at once can miss one."""
    client = httpclient.InferenceServerClient(urls["http"])
    last: tuple[int, int] | None = None
    for _ in range(20):
        s = client.get_inference_statistics(model)["model_stats"][0]
        now = (int(s["inference_count"]), int(s["inference_stats"]["fail"]["count"]))
        if now == last:
            break
        last = now
        time.sleep(0.1)
    assert last is not None
    return last


def _summary(obs: dict[str, Any]) -> dict[str, Any]:
    """Which request (and protocol) was refused depends on timing: compare counts and
    id-free texts, HTTP 503 as gRPC UNAVAILABLE (the per-protocol codes are checked above)."""
    out = dict(obs)
    for model in ("queue_slowq", "queue_slowt"):
        out[model] = sorted(
            (s.replace("503", "StatusCode.UNAVAILABLE"), re.sub(r"\[request id: [^]]*\] ", "", m))
            for _, s, m in obs[model]
        )
    return out


def _urls(srv: Any) -> dict[str, str]:
    return {"http": srv.http_url, "grpc": srv.grpc_url, "metrics": srv.metrics_url}


def _repo(root: Path) -> Path:
    root.mkdir()
    for name in ("queue_slowq", "queue_slowt"):
        (root / name).symlink_to(MODELS / name)
    return root


def test_refusals_errors_statistics_and_metrics(tmp_path: Path) -> None:
    srv = start_server(_repo(tmp_path / "repo"))
    try:
        obs = _observe(_urls(srv))
    finally:
        srv.stop()
    refused = [(rid, m) for rid, s, m in obs["queue_slowq"] if s != "ok"]
    assert len(refused) == 2
    for rid, message in refused:
        assert message == f"[request id: {rid or '<id_unknown>'}] Exceeds maximum queue size"
    assert [s for _, s, _ in obs["queue_slowt"]].count("ok") == 1
    assert obs["queue_slowq-stats"] == (2, 0)  # a full queue is not a failure
    assert obs["queue_slowt-stats"] == (1, 3)
    assert (
        'nv_inference_request_failure{model="queue_slowt",reason="REJECTED",version="1"} 3'
        in obs["failures"]
    )


@pytest.mark.reference
@pytest.mark.skipif(not reference_available(), reason="reference Triton is not installed")
def test_matches_the_reference(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    ref = start_reference(repo)
    try:
        expected = _summary(_observe(_urls(ref)))
    finally:
        ref.stop()
    srv = start_server(repo)
    try:
        got = _summary(_observe(_urls(srv)))
    finally:
        srv.stop()
    assert got == expected
