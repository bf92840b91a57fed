"""Differential checks against the reference Triton 2.51 for answers that once differed: a load
with files but no config, a ``file:`` path that leaves the model folder, a shared-memory
registration larger than its segment, ``pb_utils.load_model`` of a model the repository lacks,
and a model folder deleted under poll mode.

Where modelyard says more than Triton (the reason after Triton's text), its message starts
with Triton's whole message; statuses are the same."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from tests.backends.python.test_model_control import control_grpc, control_http
from tests.conftest import Serving
from tests.core.modelfiles import config_json, model_source, write_model
from tests.helpers import wait_until
from tests.reference import reference_available, start_reference
from tests.serverproc import start_server

pytestmark = [
    pytest.mark.reference,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not reference_available(), reason="reference Triton is not installed"),
]

MODELS = Path(__file__).resolve().parents[1] / "models"
ESCAPING = ["file:../escape.py", "file:1/../../escape.py"]


def _error(call: Callable[[], Any]) -> tuple[str, str] | None:
    try:
        call()
    except InferenceServerException as e:
        return str(e.status()), e.message()
    return None


def _observe(http_url: str, grpc_url: str, shm_key: str) -> dict[str, Any]:
    http = httpclient.InferenceServerClient(http_url)
    grpc = grpcclient.InferenceServerClient(grpc_url)
    src = {"file:1/model.py": model_source(k=1).encode()}
    seen: dict[str, Any] = {
        "no_config_http": _error(lambda: http.load_model("newm", files=src)),
        "no_config_grpc": _error(lambda: grpc.load_model("newm", files=src)),
    }
    cfg = config_json("newm")
    for key in ESCAPING:
        files = {**src, key: b"x = 1\n"}
        seen[f"escape_http {key}"] = _error(
            partial(http.load_model, "newm", config=cfg, files=files)
        )
        seen[f"escape_grpc {key}"] = _error(
            partial(grpc.load_model, "newm", config=cfg, files=files)
        )
    # A leading "/" names the override folder's root (Triton's own tests send such paths).
    rooted = {"file:/1/model.py": src["file:1/model.py"]}
    rooted_cfg = config_json("rooted")
    seen["rooted"] = _error(lambda: http.load_model("rooted", config=rooted_cfg, files=rooted))
    seen["rooted_ready"] = http.is_model_ready("rooted")
    http.unload_model("rooted")
    seen["shm_http"] = _error(lambda: http.register_system_shared_memory("big", shm_key, 1 << 20))
    seen["shm_grpc"] = _error(lambda: grpc.register_system_shared_memory("big", shm_key, 8193))
    seen["shm_offset"] = _error(
        lambda: http.register_system_shared_memory("off", shm_key, 16, offset=8192)
    )
    seen["index"] = http.get_model_repository_index()
    return seen


def _same_start(mine: tuple[str, str] | None, theirs: tuple[str, str] | None) -> None:
    assert mine is not None and theirs is not None
    assert mine[0] == theirs[0]
    assert mine[1].startswith(theirs[1]), (mine, theirs)


def test_load_shm_and_model_control_answers_match_triton(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serving: Serving
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "control_probe").symlink_to(MODELS / "control_probe")
    scratch = tmp_path / "tmp" / "inner"  # both servers' TMPDIR: an escape would land beside
    scratch.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(scratch))
    key = f"/modelyard_diff_{tmp_path.name}"
    region = shm.create_shared_memory_region("small", key, 8192)
    args = ("--model-control-mode=explicit", "--load-model=control_probe")
    try:
        with serving.server(repo, *args) as ours:
            mine = _observe(ours.http_url, ours.grpc_url, key)
        ref = start_reference(repo, *args, "--exit-timeout-secs=2")
        try:
            theirs = _observe(ref.http_url, ref.grpc_url, key)
        finally:
            ref.stop()
    finally:
        shm.destroy_shared_memory_region(region)
    for name in ["no_config_http", "no_config_grpc"] + [k for k in mine if "escape" in k]:
        _same_start(mine[name], theirs[name])
        assert mine[name][1].startswith("failed to load 'newm'")
    same = ["rooted", "rooted_ready", "shm_http", "shm_grpc", "shm_offset", "index"]
    for name in same:
        assert mine[name] == theirs[name], name
    assert mine["rooted_ready"] is True
    assert not list((tmp_path / "tmp").rglob("escape.py"))  # nothing written, by either


def test_load_model_of_a_missing_model_raises_tritons_text(
    tmp_path: Path, serving: Serving
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "control_probe").symlink_to(MODELS / "control_probe")
    args = ("--model-control-mode=explicit", "--load-model=control_probe")
    with serving.server(repo, *args) as ours:
        op = "load:does_not_exist"
        mine = [control_http(ours.http_url, op), control_grpc(ours.grpc_url, op)]
        mine.append(control_http(ours.http_url, op))  # the same every time
    # Triton 2.51 often aborts on this error path (boost::interprocess::lock_exception in the
    # stub's IPC): ask a fresh server once each time, until one answers.
    theirs = None
    for _ in range(4):
        ref = start_reference(repo, *args, "--exit-timeout-secs=2")
        try:
            theirs = control_http(ref.http_url, op)
            break
        except Exception:
            continue
        finally:
            ref.stop()
    if theirs is None:
        pytest.skip("the reference Triton aborted on every try")
    assert mine == [theirs] * 3
    assert theirs.startswith("TritonModelException: Failed to load model: ")


def test_a_folder_deleted_in_poll_mode_leaves_the_index_as_in_triton(tmp_path: Path) -> None:
    def observe(start: Callable[[Path], Any], repo: Path) -> list[Any]:
        for name in ("a", "b"):
            write_model(repo, name)
        server = start(repo)
        try:
            http = httpclient.InferenceServerClient(server.http_url)
            before = http.get_model_repository_index()
            shutil.rmtree(repo / "b")
            wait_until(
                lambda: "b" not in {m["name"] for m in http.get_model_repository_index()},
                interval=0.2,
                what="the deleted model to leave the index",
            )
            # (Triton unloads in the background: "b" may still answer ready for a moment)
            return [before, http.get_model_repository_index()]
        finally:
            server.stop()

    args = ("--model-control-mode=poll", "--repository-poll-secs=1")
    mine = observe(lambda r: start_server(r, *args), tmp_path / "ours")
    theirs = observe(lambda r: start_reference(r, *args, "--exit-timeout-secs=2"), tmp_path / "ref")
    assert mine == theirs
    assert [m["name"] for m in mine[1]] == ["a"]
