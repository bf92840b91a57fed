"""Differential checks against the reference Triton 2.51: the same repository API calls on
both servers give the same states, status codes and messages (several repositories with a
duplicate name, failed loads and reloads, the API refused outside explicit mode)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import Serving
from tests.core.modelfiles import config, write_model
from tests.reference import reference_available, start_reference

pytestmark = [
    pytest.mark.reference,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not reference_available(), reason="reference Triton is not installed"),
]


def _error(call: Callable[[], Any]) -> tuple[str, str] | None:
    try:
        call()
    except InferenceServerException as e:
        return str(e.status()), e.message()
    return None


def _observe(http_url: str, grpc_url: str) -> dict[str, Any]:
    http = httpclient.InferenceServerClient(http_url)
    grpc = grpcclient.InferenceServerClient(grpc_url)
    seen: dict[str, Any] = {
        "index": http.get_model_repository_index(),
        "load_dup_http": _error(lambda: http.load_model("dup")),
        "load_dup_grpc": _error(lambda: grpc.load_model("dup")),
        "load_nosuch": _error(lambda: grpc.load_model("nosuch")),
        "load_two": _error(lambda: http.load_model("two")),
    }
    # A reload with a config that cannot load: the error, and the old version keeps serving.
    bad = json.dumps(config("one", max_batch_size=-3))
    seen["bad_reload_failed"] = _error(lambda: http.load_model("one", config=bad)) is not None
    seen["after_bad_reload"] = (http.is_model_ready("one"), http.is_server_ready(),
                                http.get_model_repository_index())  # fmt: skip
    seen["unload_unknown"] = _error(lambda: http.unload_model("nosuch"))
    return seen


def test_repository_api_matches_triton(tmp_path: Path, serving: Serving) -> None:
    r1, r2 = tmp_path / "r1", tmp_path / "r2"
    write_model(r1, "one", k=1.0)
    write_model(r2, "two", k=2.0)
    write_model(r1, "dup")
    write_model(r2, "dup")
    args = ("--model-control-mode=explicit", "--load-model=one")
    with serving.server([r1, r2], *args) as ours:
        mine = _observe(ours.http_url, ours.grpc_url)
    ref = start_reference(r1, f"--model-repository={r2}", *args, "--exit-timeout-secs=2")
    try:
        theirs = _observe(ref.http_url, ref.grpc_url)
    finally:
        ref.stop()
    assert mine == theirs


def test_load_api_refused_outside_explicit_mode_as_in_triton(
    tmp_path: Path, serving: Serving
) -> None:
    write_model(tmp_path, "one")

    def observe(http_url: str, grpc_url: str) -> list[tuple[str, str] | None]:
        http = httpclient.InferenceServerClient(http_url)
        grpc = grpcclient.InferenceServerClient(grpc_url)
        return [_error(lambda: http.load_model("one")), _error(lambda: grpc.unload_model("one"))]

    # ("none" only: poll mode refuses through the same path, see test_polling.py)
    with serving.server(tmp_path, "--model-control-mode=none") as ours:
        mine = observe(ours.http_url, ours.grpc_url)
    ref = start_reference(tmp_path, "--model-control-mode=none", "--exit-timeout-secs=2")
    try:
        theirs = observe(ref.http_url, ref.grpc_url)
    finally:
        ref.stop()
    assert mine == theirs
    assert mine[0] is not None and "explicit model load / unload is not allowed" in mine[0][1]
