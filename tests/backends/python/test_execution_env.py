"""Triton's ``EXECUTION_ENV_PATH`` through the real server: a model runs in a Python
environment of its own (a packed ``.tar.gz`` or a folder) and imports what only that
environment has; archives are extracted once and again when they change; entries that would
escape the extraction folder are refused with Triton 26.06's status and text (see _refused),
another Python minor version is refused."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.backends.python.envbuild import VALUE, build_env, malicious, other_python, pack
from tests.conftest import Serving
from tests.helpers import MODELS, MODES, grpc_input, http_input, wait_until
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(180)

EXTRACTING = "Extracting Python execution env"


@pytest.fixture(scope="module")
def env_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_env(tmp_path_factory.mktemp("envs") / "env")


@pytest.fixture(scope="module")
def archive(env_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack(env_dir, tmp_path_factory.mktemp("packed") / "env.tar.gz")


def add_model(repo: Path, name: str, env_path: str, archive: Path | None = None) -> Path:
    """env_probe as ``name`` with ``EXECUTION_ENV_PATH: env_path`` (and ``archive`` copied
    into the model's folder, for ``$$TRITON_MODEL_DIRECTORY`` paths)."""
    folder = repo / name
    shutil.copytree(MODELS / "env_probe", folder)
    config = (folder / "config.pbtxt").read_text().replace('"env_probe"', f'"{name}"')
    config += f'parameters {{ key: "EXECUTION_ENV_PATH" value {{ string_value: "{env_path}" }} }}\n'
    (folder / "config.pbtxt").write_text(config)
    if archive is not None:
        shutil.copy(archive, folder / archive.name)
    return folder


def probe_http(server: ServerProcess, model: str) -> dict[str, Any]:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    t = http_input("IN", np.ones(1, np.float32))
    try:
        out: dict[str, Any] = json.loads(client.infer(model, [t]).as_numpy("OUT")[0])
        return out
    finally:
        client.close()


def probe_grpc(server: ServerProcess, model: str) -> dict[str, Any]:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        t = grpc_input("IN", np.ones(1, np.float32))
        out: dict[str, Any] = json.loads(
            client.infer(model, [t], client_timeout=60).as_numpy("OUT")[0]
        )
        return out


@pytest.fixture(scope="module", params=MODES)
def served(
    request: pytest.FixtureRequest, serving: Serving, env_dir: Path, archive: Path
) -> Iterator[tuple[ServerProcess, str]]:
    repo = serving.repo()
    add_model(repo, "packed", "$$TRITON_MODEL_DIRECTORY/env.tar.gz", archive)
    add_model(repo, "unpacked", str(env_dir))
    with serving.server(repo, "--log-verbose", "1", mode=request.param) as server:
        yield server, request.param


def test_models_import_what_only_their_environment_has(
    served: tuple[ServerProcess, str], env_dir: Path
) -> None:
    server, mode = served
    packed, unpacked = probe_http(server, "packed"), probe_grpc(server, "unpacked")
    assert packed["value"] == unpacked["value"] == VALUE
    # The archive was extracted into a private folder; the folder is used as it is.
    assert Path(unpacked["prefix"]).resolve() == env_dir.resolve()
    assert unpacked["virtual_env"] == str(env_dir.resolve())
    assert Path(packed["prefix"]).resolve() != env_dir.resolve()
    assert Path(packed["package"]).resolve().is_relative_to(Path(packed["prefix"]).resolve())
    # In worker processes whatever the server-wide mode (an in-process model would share the
    # server's interpreter and packages).
    assert packed["pid"] != server.proc.pid and unpacked["pid"] != server.proc.pid
    assert f"Using Python execution env {env_dir}" in server.output()
    assert server.output().count(EXTRACTING) == 1
    if mode == "in-process":
        assert "its instances run in worker processes, not in-process" in server.output()


def test_an_archive_is_extracted_once_and_again_when_it_changes(
    tmp_path: Path, archive: Path, serving: Serving
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    shared = tmp_path / "shared.tar.gz"
    shutil.copy(archive, shared)
    add_model(repo, "first", str(shared))
    add_model(repo, "second", str(shared))  # the same archive: extracted once for both
    args = ("--log-verbose", "1", "--model-control-mode", "explicit", "--load-model", "*")
    with serving.server(repo, *args) as server:
        http = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
        assert probe_http(server, "first")["value"] == probe_http(server, "second")["value"]
        assert server.output().count(EXTRACTING) == 1
        os.utime(repo / "first" / "1" / "model.py")  # the model changes, not its environment
        http.load_model("first")
        assert server.output().count(EXTRACTING) == 1
        later = time.time() + 5
        os.utime(shared, (later, later))  # the archive changes: extracted again
        http.load_model("first")
        # The line may not have been read from the server's output yet.
        wait_until(lambda: server.output().count(EXTRACTING) >= 2, what="the second extraction")
        assert server.output().count(EXTRACTING) == 2
        assert probe_http(server, "first")["value"] == VALUE
        assert probe_http(server, "second")["value"] == VALUE  # its folder is still there
        http.close()


@pytest.fixture()
def explicit(tmp_path: Path, serving: Serving) -> Iterator[tuple[ServerProcess, Path]]:
    repo = tmp_path / "repo"
    repo.mkdir()
    with serving.server(repo, "--model-control-mode", "explicit",
                        env={"TMPDIR": str(tmp_path)}) as server:  # fmt: skip
        yield server, repo


def _load_error(server: ServerProcess, name: str) -> tuple[str, str]:
    http = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    with pytest.raises(InferenceServerException) as e:
        http.load_model(name)
    assert http.is_server_live() and not http.is_model_ready(name)
    http.close()
    return str(e.value.status()), e.value.message()


def _expected(name: str, reason: str) -> str:
    return f"load failed for model '{name}': version 1 is at UNAVAILABLE state: Internal: {reason}"


def _refused(text: str) -> str:
    """Triton 26.06's text for an archive entry libarchive refuses: python_backend r26.06
    src/pb_env.cc ExtractTarFile (SECURE_NODOTDOT, SECURE_NOABSOLUTEPATHS, SECURE_SYMLINKS;
    the load fails with INTERNAL), libarchive's archive_write_disk_posix.c texts and -25
    (ARCHIVE_FAILED); server r26.06 qa/L0_backend_python/env/test.sh greps the log for the
    first two, with archives built by qa/L0_backend_python/env/zipslip_test.py."""
    return f"archive_write_header() failed with error code = -25 error message is {text}"


@pytest.mark.parametrize(
    ("entry", "text"),
    [
        ("../../escaped_by_test", "Path contains '..'"),
        ("/tmp/escaped_by_test_abs", "Path is absolute"),
    ],
)
def test_archives_with_escaping_entries_are_refused(
    explicit: tuple[ServerProcess, Path], tmp_path: Path, entry: str, text: str
) -> None:
    server, repo = explicit
    bad = malicious(tmp_path / "bad.tar.gz", entry)
    add_model(repo, "zipslip", str(bad))
    assert _load_error(server, "zipslip") == ("400", _expected("zipslip", _refused(text) + ";\n"))
    assert not (tmp_path / "escaped_by_test").exists()
    assert not list(tmp_path.rglob("escaped_by_test*"))
    assert not Path("/tmp/escaped_by_test_abs").exists()
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        (entry_row,) = [m for m in grpc.get_model_repository_index().models if m.name == "zipslip"]
    assert entry_row.reason == f"Internal: {_refused(text)}"


def test_a_path_through_a_symlink_in_the_archive_is_refused(
    explicit: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    import io
    import tarfile

    server, repo = explicit
    outside = tmp_path / "outside"
    outside.mkdir()
    bad = tmp_path / "link.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        link = tarfile.TarInfo("lib")
        link.type, link.linkname = tarfile.SYMTYPE, str(outside)
        tar.addfile(link)
        body = b"x"
        info = tarfile.TarInfo("./lib/planted.txt")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    add_model(repo, "through_link", str(bad))
    _, message = _load_error(server, "through_link")
    assert message == _expected(
        "through_link", _refused("Cannot extract through symlink lib/planted.txt") + ";\n"
    )
    assert list(outside.iterdir()) == []


def test_missing_paths_and_environments_without_activate(
    explicit: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    server, repo = explicit
    add_model(repo, "nowhere", str(tmp_path / "no_such_env.tar.gz"))
    assert _load_error(server, "nowhere") == (
        "400",
        _expected(
            "nowhere", f"Failed to get the canonical path for {tmp_path}/no_such_env.tar.gz.;\n"
        ),
    )
    bare = tmp_path / "bare"
    (bare / "bin").mkdir(parents=True)
    add_model(repo, "bare", str(bare))
    _, message = _load_error(server, "bare")
    assert message == _expected(
        "bare",
        f"Path {bare}/bin/activate does not exist. The Python environment should contain an "
        "'activate' script.;\n",
    )


def test_another_python_minor_version_is_refused(
    explicit: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    python = other_python()
    if python is None:
        pytest.skip("no CPython of another minor version on this machine")
    server, repo = explicit
    env = build_env(tmp_path / "other_env", python)
    add_model(repo, "other_python", str(env))
    _, message = _load_error(server, "other_python")
    assert re.search(
        r"has Python 3\.\d+, but this server runs Python 3\.\d+: the environment's Python must "
        r"have the server's major\.minor version",
        message,
    ), message


def test_in_process_models_cannot_name_an_environment(
    tmp_path: Path, env_dir: Path, serving: Serving
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    folder = add_model(repo, "inproc", str(env_dir))
    config = folder / "config.pbtxt"
    config.write_text(
        config.read_text()
        + 'parameters { key: "MODELYARD_EXECUTION_MODE" value { string_value: "in-process" } }\n'
    )
    with serving.server(repo, "--model-control-mode", "explicit") as server:
        status, message = _load_error(server, "inproc")
    assert status == "400"
    assert (
        "MODELYARD_EXECUTION_MODE 'in-process' cannot be combined with EXECUTION_ENV_PATH"
        in message
    )
