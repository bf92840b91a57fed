"""``nv_inference_pending_request_count`` against the reference Triton: a request waiting
behind a running one is pending, wherever modelyard keeps it (its queue, or staged in the busy
worker so it starts the moment the running one ends)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.conftest import Serving
from tests.helpers import MODELS, http_input, metric_value, read_metrics, wait_until
from tests.reference import reference_available, start_reference

pytestmark = [pytest.mark.reference, pytest.mark.timeout(180)]


def _send(url: str, rid: str, params: dict[str, str], errors: list[BaseException]) -> None:
    try:
        client = httpclient.InferenceServerClient(url, network_timeout=60)
        client.infer("stage_probe", [http_input("IN", np.array([1.0], np.float32))],
                     request_id=rid, parameters=params)  # fmt: skip
        client.close()
    except BaseException as e:  # reported by the test
        errors.append(e)


def _pending_while_one_waits(http_url: str, metrics_url: str, tmp: Path) -> list[float | None]:
    """The gauge while nothing runs, while a gated request runs alone, and while a second one
    waits behind it."""

    def pending() -> float | None:
        text = read_metrics(metrics_url)
        return metric_value(text, "nv_inference_pending_request_count", model="stage_probe")

    seen = [pending()]
    gate, started = tmp / "gate", tmp / "started"
    errors: list[BaseException] = []
    params = {"first": {"gate": str(gate), "started": str(started)}, "second": {}}
    first, second = (
        threading.Thread(target=_send, args=(http_url, rid, p, errors)) for rid, p in params.items()
    )
    first.start()
    try:
        wait_until(started.exists, what="the first request to run")
        seen.append(pending())
        second.start()
        wait_until(lambda: pending() == 1, what="the second request to be pending")
        seen.append(pending())
    finally:
        gate.touch()
        for thread in (first, second):
            if thread.ident is not None:  # (started)
                thread.join(60)
    assert not errors, errors
    return seen


def test_a_request_waiting_behind_a_running_one_is_pending(
    serving: Serving, tmp_path: Path
) -> None:
    if not reference_available():
        pytest.skip("reference Triton is not installed")
    repo = serving.repo(["stage_probe"], copy=True)
    (tmp_path / "mine").mkdir()
    (tmp_path / "ref").mkdir()
    with serving.server(repo) as server:
        mine = _pending_while_one_waits(server.http_url, server.metrics_url, tmp_path / "mine")
    ref_repo = tmp_path / "ref_repo"
    shutil.copytree(MODELS / "stage_probe", ref_repo / "stage_probe")
    ref = start_reference(ref_repo)
    try:
        theirs = _pending_while_one_waits(ref.http_url, ref.metrics_url, tmp_path / "ref")
    finally:
        ref.stop()
    assert mine == theirs == [0, 0, 1]
