"""Queue policies of the dynamic batcher through the real server: refused requests get
Triton's errors, and statistics and metrics count them as Triton 2.51 does (a full queue
is not counted; a request timed out in the queue is a failure with reason REJECTED)."""

from __future__ import annotations

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

from tests.conftest import Serving
from tests.helpers import inputs, metric_value, read_metrics, wait_until
from tests.reference import reference_available, start_reference

QUEUE_TIMEOUT_S = 0.2  # beyond queue_slowt's queue timeout (100 ms)
CALLS = [
    ("r1", "grpc"),
    ("", "grpc"),
    ("r3", "grpc"),
    ("", "grpc"),
]  # gevent-based http: not in threads


def _one(
    urls: dict[str, str], model: str, rid: str, proto: str, params: dict[str, str] | None = None
) -> tuple[str, str, str]:
    mod: Any = grpcclient if proto == "grpc" else httpclient
    client = mod.InferenceServerClient(urls[proto])
    try:
        client.infer(model, inputs(mod, IN=np.ones((1, 1), np.float32)), request_id=rid,
                     parameters=params)  # fmt: skip
        return rid, "ok", ""
    except InferenceServerException as e:
        return rid, str(e.status()), str(e.message())


def _pending(urls: dict[str, str], model: str) -> int:
    text = read_metrics(urls["metrics"])
    return int(metric_value(text, "nv_inference_pending_request_count", model=model) or 0)


def _observe(urls: dict[str, str], gates: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for model in ("queue_slowq", "queue_slowt"):
        started, gate = gates / f"{model}-started", gates / f"{model}-gate"
        with ThreadPoolExecutor(len(CALLS)) as pool:
            # The first call holds the one instance until the gate opens; the others arrive
            # meanwhile: each one queues or is refused, however slow the machine.
            first = pool.submit(_one, urls, model, *CALLS[0],
                                {"started": str(started), "gate": str(gate)})  # fmt: skip
            try:
                wait_until(started.exists, what=f"the first call to run on {model}")
                rest = [pool.submit(_one, urls, model, *c) for c in CALLS[1:]]
                wait_until(
                    lambda: _pending(urls, model) + sum(f.done() for f in rest) == len(rest),  # noqa: B023 (used at once)
                    what=f"the other calls to queue or be refused on {model}",
                )
                time.sleep(QUEUE_TIMEOUT_S)  # at least this long: the queued ones time out
            finally:
                gate.touch()
            out[model] = [first.result(), *(f.result() for f in rest)]
        out[f"{model}-stats"] = _settled_stats(urls, model)
    text = read_metrics(urls["metrics"])
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


MODELS = ["queue_slowq", "queue_slowt"]


def test_refusals_errors_statistics_and_metrics(tmp_path: Path, serving: Serving) -> None:
    with serving.server(models=MODELS) as srv:
        obs = _observe(_urls(srv), tmp_path)
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
def test_matches_the_reference(tmp_path: Path, serving: Serving) -> None:
    repo = serving.repo(MODELS)
    (tmp_path / "ref").mkdir()
    (tmp_path / "ours").mkdir()
    ref = start_reference(repo)
    try:
        expected = _summary(_observe(_urls(ref), tmp_path / "ref"))
    finally:
        ref.stop()
    with serving.server(repo) as srv:
        got = _summary(_observe(_urls(srv), tmp_path / "ours"))
    assert got == expected
