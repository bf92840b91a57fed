"""exec_env's pure parts: the ``$$TRITON_MODEL_DIRECTORY`` substitution and safe extraction
(the server-level tests are in test_execution_env.py)."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from modelyard.backends.python.server import exec_env
from tests.backends.python.envbuild import malicious


def _parameters(text: str) -> object:
    cfg = text_format.Parse(text, model_config_pb2.ModelConfig())
    return cfg.parameters


def test_model_directory_substitution() -> None:
    params = _parameters(
        'parameters { key: "EXECUTION_ENV_PATH" '
        'value { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }'
    )
    assert exec_env.configured_path(params, "/repo/m") == "/repo/m/env.tar.gz"
    assert exec_env.configured_path(_parameters(""), "/repo/m") == ""


def test_extraction_keeps_relative_entries_and_symlinks(tmp_path: Path) -> None:
    archive = tmp_path / "ok.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, body in (("bin/activate", b"#"), ("lib/x.py", b"X = 1\n")):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
        link = tarfile.TarInfo("bin/python")
        link.type, link.linkname = tarfile.SYMTYPE, "/usr/bin/python3"  # as a venv has it
        tar.addfile(link)
    dest = tmp_path / "dest"
    dest.mkdir()
    exec_env.extract(str(archive), dest)
    assert (dest / "lib" / "x.py").read_bytes() == b"X = 1\n"
    assert (dest / "bin" / "python").is_symlink()


def _refused(text: str, code: int = -25) -> str:
    # python_backend r26.06 src/pb_env.cc ExtractTarFile's frame around libarchive's text.
    return f"archive_write_header() failed with error code = {code} error message is {text}"


@pytest.mark.parametrize(
    ("entry", "text"),
    [
        ("../escape", "Path contains '..'"),
        ("a/../../escape", "Path contains '..'"),
        ("./a/..", "Path contains '..'"),
        ("/tmp/escape_abs", "Path is absolute"),
    ],
)
def test_escaping_entries_are_refused(tmp_path: Path, entry: str, text: str) -> None:
    dest = tmp_path / "dest" / "inner"
    dest.mkdir(parents=True)
    with pytest.raises(exec_env.EnvError) as e:
        exec_env.extract(str(malicious(tmp_path / "bad.tar.gz", entry)), dest)
    assert str(e.value) == _refused(text)
    assert not list((tmp_path / "dest").rglob("escape*"))


def _tar(path: Path, *members: tarfile.TarInfo) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for member in members:
            body = b"x" if member.isfile() else b""
            member.size = len(body)
            tar.addfile(member, io.BytesIO(body))
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


def test_links_are_checked_as_libarchive_checks_them(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s")
    dest = tmp_path / "dest"

    def extract(*members: tarfile.TarInfo) -> None:
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir()
        exec_env.extract(str(_tar(tmp_path / "t.tar.gz", *members)), dest)

    # A path through a symlink on disk (one the archive made) is refused, with the entry's
    # path as libarchive cleans it.
    with pytest.raises(exec_env.EnvError) as e:
        extract(_member("d", tarfile.SYMTYPE, str(outside)), _member("./d//f"))
    assert str(e.value) == _refused("Cannot extract through symlink d/f")
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    # A hard link's target is checked like a path.
    for target, text in (("../x", "Path contains '..'"), ("/etc/hostname", "Path is absolute")):
        with pytest.raises(exec_env.EnvError) as e:
            extract(_member("h", tarfile.LNKTYPE, target))
        assert str(e.value) == _refused(text)
    with pytest.raises(exec_env.EnvError) as e:
        extract(_member("h", tarfile.LNKTYPE, "h"))
    assert str(e.value) == _refused("Skipping hardlink pointing to itself: h", -20)
    # A symlink as the last component is replaced, not written through.
    extract(_member("s", tarfile.SYMTYPE, str(outside / "secret")), _member("s"))
    assert (dest / "s").read_bytes() == b"x" and not (dest / "s").is_symlink()
    assert (outside / "secret").read_text() == "s"
    # A hard link to a symlink links the symlink itself (linkat), not what it points to.
    extract(
        _member("s", tarfile.SYMTYPE, str(outside / "secret")), _member("h", tarfile.LNKTYPE, "s")
    )
    assert (dest / "h").is_symlink() and os.path.samefile(dest / "h", outside / "secret")
    assert os.lstat(dest / "h").st_ino == os.lstat(dest / "s").st_ino
