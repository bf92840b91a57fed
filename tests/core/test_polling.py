"""``--model-control-mode poll`` through the real clients: added, changed and removed models,
only what changed reloads, a broken model recovers once its files are fixed, and the load API
is refused with Triton's message."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from modelyard.core.polling import fingerprint
from tests.conftest import Serving
from tests.core.modelfiles import infer_grpc, infer_http, write_model
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(120)

REFUSED = "explicit model load / unload is not allowed if polling is enabled"


def _answers(client: httpclient.InferenceServerClient, name: str, expected: float) -> bool:
    try:
        return float(infer_http(client, name, [0.0])[0]) == expected
    except InferenceServerException:
        return False


def _inits(log: Path, name: str) -> int:
    lines = log.read_text().splitlines() if log.exists() else []
    return sum(1 for line in lines if line.startswith(f"{name} start "))


def test_fingerprint_sees_content_changes(tmp_path: Path) -> None:
    folder = write_model(tmp_path, "m", k=1.0)
    before = fingerprint(folder)
    assert before == fingerprint(folder)
    write_model(tmp_path, "m", k=2.0)
    assert fingerprint(folder) != before
    assert fingerprint(tmp_path / "missing") == ()


def test_poll_mode_adds_changes_removes_and_recovers(tmp_path: Path, serving: Serving) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    log = tmp_path / "inits.txt"
    write_model(repo, "a", k=1.0)
    write_model(repo, "b", k=2.0)
    with serving.server(repo, "--model-control-mode=poll", "--repository-poll-secs=0.2", env={"MM_LOG": str(log)}) as srv:  # fmt: skip
        http = httpclient.InferenceServerClient(srv.http_url)
        grpc = grpcclient.InferenceServerClient(srv.grpc_url)
        assert http.is_server_ready() and _answers(http, "a", 1.0) and _answers(http, "b", 2.0)

        # The load API is refused in poll mode, with Triton's message and status.
        with pytest.raises(InferenceServerException) as e:
            http.load_model("a")
        assert (e.value.status(), e.value.message()) == ("503", REFUSED)
        with pytest.raises(InferenceServerException) as e:
            grpc.unload_model("a")
        assert (e.value.status(), e.value.message()) == ("StatusCode.UNAVAILABLE", REFUSED)

        write_model(repo, "c", k=3.0)  # added
        write_model(repo, "a", k=10.0)  # changed
        wait_until(lambda: _answers(http, "c", 3.0), what="the added model")
        wait_until(lambda: _answers(http, "a", 10.0), what="the changed model")
        np.testing.assert_array_equal(infer_grpc(grpc, "b"), [3.0, 4.0])
        assert _inits(log, "b") == 1  # unchanged: never reloaded
        assert _inits(log, "a") == 2

        # A broken change keeps the old version serving; fixing the files recovers.
        write_model(repo, "a", k=20.0, fail=True)
        wait_until(lambda: _inits(log, "a") == 3, what="the broken reload")
        assert _answers(http, "a", 10.0)
        write_model(repo, "d", k=4.0, fail=True)  # a new model that cannot load
        wait_until(lambda: _inits(log, "d") == 1, what="the broken new model")
        wait_until(lambda: any(m["name"] == "d" and m.get("state") == "UNAVAILABLE"
                               for m in http.get_model_repository_index()), what="d unavailable")  # fmt: skip
        write_model(repo, "a", k=30.0)
        write_model(repo, "d", k=5.0)
        wait_until(lambda: _answers(http, "a", 30.0), what="a recovered")
        wait_until(lambda: _answers(http, "d", 5.0), what="d recovered")

        # Removed: unloaded, and out of the index (as in Triton) once its folder is gone.
        (repo / "c" / "1" / "model.py").unlink()
        (repo / "c" / "1").rmdir()
        (repo / "c" / "config.pbtxt").unlink()
        (repo / "c").rmdir()
        wait_until(lambda: not http.is_model_ready("c"), what="the removed model unloaded")
        assert _inits(log, "b") == 1
        # (not ready while the model is UNLOADING, as in Triton; ready once it is unloaded)
        wait_until(http.is_server_ready, what="the server ready again")
        assert "c" not in {m["name"] for m in http.get_model_repository_index()}
