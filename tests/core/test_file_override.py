"""``file:`` overrides in load requests: the path rules (unit) and loads through the real
HTTP and gRPC clients: a model with no folder in the repository, a private temporary folder
that goes away on unload, and every escaping path refused with Triton's status for a load
whose files cannot be had (INTERNAL, ``failed to load '<m>'``), nothing written."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from modelyard.core import file_override
from modelyard.errors import ErrorCode, ModelyardError
from tests.conftest import Serving
from tests.core.modelfiles import config_json, infer_grpc, infer_http, model_source, write_model
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(120)

PREFIX = "failed to load 'esc', failed to poll from model repository"
BAD_PATHS = ["file:../x.py", "file:/../abs.py", "file:1/../../x.py", "file:a/../b.py",
             "file:", "file:1/", "file:.", "file:1\\x.py", "file:1/\0.py"]  # fmt: skip


# -- unit ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", BAD_PATHS)
def test_escaping_paths_are_refused(key: str) -> None:
    with pytest.raises(file_override.OverrideError, match="invalid file override path"):
        file_override.check_path(key)
    with pytest.raises(ModelyardError) as e:
        file_override.materialise("m", {key: b"x"})
    assert e.value.code == ErrorCode.INTERNAL
    assert e.value.message.startswith(
        "failed to load 'm', failed to poll from model repository: invalid file override path"
    )


def test_plain_paths_are_accepted_and_normalised() -> None:
    assert str(file_override.check_path("file:1/model.py")) == "1/model.py"
    assert str(file_override.check_path("./1//model.py")) == "1/model.py"
    # A leading "/" is the override folder's root, as in Triton (its own tests send these).
    assert str(file_override.check_path("file:/1/model.py")) == "1/model.py"
    with pytest.raises(file_override.OverrideError, match="more than once"):
        file_override.check_files({"file:1/m.py": b"", "file:./1/m.py": b""})


def test_materialise_writes_only_inside_a_private_folder(tmp_path: Path) -> None:
    model_dir = file_override.materialise("m", {"file:1/model.py": b"x", "file:1/sub/a.txt": b"y"})
    try:
        assert (model_dir / "1" / "model.py").read_bytes() == b"x"
        assert (model_dir / "1" / "sub" / "a.txt").read_bytes() == b"y"
        assert oct(model_dir.parent.stat().st_mode & 0o777) == "0o700"
    finally:
        file_override.remove(model_dir)
    assert not model_dir.parent.exists()


def test_a_symlink_inside_the_folder_cannot_lead_out(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    base = tmp_path / "base"
    base.mkdir()
    (base / "1").symlink_to(outside)
    with pytest.raises(file_override.OverrideError, match="leaves the model folder"):
        file_override._write(os.path.realpath(base), file_override.check_path("1/model.py"), b"x")
    (base / "2").mkdir()
    (base / "2" / "model.py").symlink_to(outside / "target.py")
    with pytest.raises(file_override.OverrideError, match="failed to write file override"):
        file_override._write(os.path.realpath(base), file_override.check_path("2/model.py"), b"x")
    assert list(outside.iterdir()) == []


# -- through the clients ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(
    serving: Serving, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, Path, Path]]:
    repo = serving.repo()
    write_model(repo, "inrepo", k=1.0)
    tmpdir = tmp_path_factory.mktemp("override_tmp")
    with serving.server(repo, "--model-control-mode=explicit", "--load-model=inrepo",
                        env={"TMPDIR": str(tmpdir)}) as srv:  # fmt: skip
        yield srv, repo, tmpdir


def test_file_override_creates_a_model_outside_the_repository(
    server: tuple[ServerProcess, Path, Path],
) -> None:
    srv, repo, tmpdir = server
    http = httpclient.InferenceServerClient(srv.http_url)
    grpc = grpcclient.InferenceServerClient(srv.grpc_url)
    http.load_model("made_http", config=config_json("made_http"),
                    files={"file:1/model.py": model_source(k=10).encode()})  # fmt: skip
    grpc.load_model("made_grpc", config=config_json("made_grpc"),
                    files={"file:1/model.py": model_source(k=20).encode()})  # fmt: skip
    np.testing.assert_array_equal(infer_http(http, "made_http"), [11.0, 12.0])
    np.testing.assert_array_equal(infer_grpc(grpc, "made_grpc"), [21.0, 22.0])
    assert sorted(p.name for p in repo.iterdir()) == ["inrepo"]  # the repository is untouched
    assert len(list(tmpdir.glob("modelyard-override-*"))) == 2
    index = {m["name"]: m for m in http.get_model_repository_index()}
    assert index["made_http"]["state"] == index["made_grpc"]["state"] == "READY"

    # A repository model reloaded from files serves the files; unloading removes the folders.
    http.load_model("inrepo", config=config_json("inrepo"),
                    files={"file:1/model.py": model_source(k=5).encode()})  # fmt: skip
    np.testing.assert_array_equal(infer_grpc(grpc, "inrepo"), [6.0, 7.0])
    http.load_model("inrepo")  # back to the repository's files
    np.testing.assert_array_equal(infer_grpc(grpc, "inrepo"), [2.0, 3.0])
    http.unload_model("made_http")
    grpc.unload_model("made_grpc")
    assert list(tmpdir.glob("modelyard-override-*")) == []
    with pytest.raises(InferenceServerException, match="failed to poll from model repository"):
        http.load_model("made_http")  # it never had a folder in the repository


@pytest.mark.parametrize("key", BAD_PATHS[:5])
def test_escaping_paths_are_refused_by_both_protocols(
    server: tuple[ServerProcess, Path, Path], key: str
) -> None:
    srv, _repo, tmpdir = server
    http = httpclient.InferenceServerClient(srv.http_url)
    grpc = grpcclient.InferenceServerClient(srv.grpc_url)
    before = sorted(p for p in tmpdir.parent.rglob("*"))
    with pytest.raises(InferenceServerException) as e:
        http.load_model("esc", config=config_json("esc"), files={key: b"x = 1\n"})
    assert e.value.status() == "500" and e.value.message().startswith(PREFIX)
    assert "invalid file override path" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        grpc.load_model("esc", config=config_json("esc"), files={key: b"x = 1\n"})
    assert e.value.status() == "StatusCode.INTERNAL" and e.value.message().startswith(PREFIX)
    assert "invalid file override path" in e.value.message()
    assert sorted(p for p in tmpdir.parent.rglob("*")) == before  # nothing written anywhere
    assert http.is_server_live() and http.is_model_ready("inrepo")


def test_files_need_a_config(server: tuple[ServerProcess, Path, Path]) -> None:
    grpc = grpcclient.InferenceServerClient(server[0].grpc_url)
    with pytest.raises(InferenceServerException) as e:
        grpc.load_model("esc", files={"file:1/model.py": b"x = 1\n"})
    assert e.value.status() == "StatusCode.INTERNAL"
    assert e.value.message() == f"{PREFIX}: {file_override.CONFIG_REQUIRED}"
    http = httpclient.InferenceServerClient(server[0].http_url)
    with pytest.raises(InferenceServerException) as e:
        http.load_model("esc", files={"file:1/model.py": b"x = 1\n"})
    assert e.value.status() == "500"
    assert e.value.message() == f"{PREFIX}: {file_override.CONFIG_REQUIRED}"


def test_a_failed_override_load_leaves_no_trace(server: tuple[ServerProcess, Path, Path]) -> None:
    srv, _repo, tmpdir = server
    http = httpclient.InferenceServerClient(srv.http_url)
    with pytest.raises(InferenceServerException, match="broken on purpose"):
        http.load_model("ghost", config=config_json("ghost"),
                        files={"file:1/model.py": model_source(fail=True).encode()})  # fmt: skip
    assert "ghost" not in {m["name"] for m in http.get_model_repository_index()}
    assert http.is_server_ready()
    assert list(tmpdir.glob("modelyard-override-*")) == []
