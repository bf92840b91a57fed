"""exec_env's pure parts: the ``$$TRITON_MODEL_DIRECTORY`` substitution and safe extraction
(the server-level tests are in test_execution_env.py)."""

from __future__ import annotations

import io
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


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("../escape", "has a '..' component"),
        ("a/../../escape", "has a '..' component"),
        ("/tmp/escape_abs", "has an absolute path"),
    ],
)
def test_escaping_entries_are_refused(tmp_path: Path, entry: str, why: str) -> None:
    dest = tmp_path / "dest" / "inner"
    dest.mkdir(parents=True)
    with pytest.raises(exec_env.EnvError, match=f"archive entry '{entry}' {why}"):
        exec_env.extract(str(malicious(tmp_path / "bad.tar.gz", entry)), dest)
    assert not list((tmp_path / "dest").rglob("escape*"))
