"""``modelyard dev``: serves in-process, reloads the model whose files change (and only it),
keeps the last good version serving through a broken edit, loads new folders and unloads
removed ones; each step is seen in its log and through tritonclient."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from modelyard.testing import ServerProcess, start_server
from tests.helpers import EXAMPLES, MODELS, http_input, wait_until

pytestmark = pytest.mark.timeout(180)

ADD = "(in0 + in1).astype(self.output0_dtype)"


def _write(path: Path, text: str, scratch: Path) -> None:
    """Replace ``path`` at once (an editor's save): the watcher never sees half a file."""
    tmp = scratch / f"{path.name}.new"
    tmp.write_text(text)
    os.replace(tmp, path)


def _sum(server: ServerProcess) -> list[float]:
    client = httpclient.InferenceServerClient(server.http_url)
    ones = np.ones(4, np.float32)
    result = client.infer("add_sub", [http_input("INPUT0", ones), http_input("INPUT1", ones)])
    out: list[float] = result.as_numpy("OUTPUT0").tolist()
    return out


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    repo = tmp_path / "repo"
    for name, source in (
        ("add_sub", EXAMPLES),
        ("bls_add_sub", EXAMPLES),
        ("py_instances", MODELS),
    ):
        shutil.copytree(source / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    server = start_server(repo, "--allow-metrics=false", command="dev", expect=("http", "grpc"))
    try:
        server.wait_for_log("watching")
        yield server, repo
    finally:
        server.stop()


def test_dev_serves_in_process(dev: tuple[ServerProcess, Path]) -> None:
    server, _repo = dev
    client = httpclient.InferenceServerClient(server.http_url)
    result = client.infer("py_instances", [http_input("IN", np.ones(1, np.float32))])
    assert result.as_numpy("PID").tolist() == [server.proc.pid]  # breakpoint() stops here


def test_dev_reloads_the_changed_model_and_survives_a_broken_edit(
    dev: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    server, repo = dev
    model_py = repo / "add_sub" / "1" / "model.py"
    source = model_py.read_text()
    assert ADD in source
    assert _sum(server) == [2.0] * 4

    # An edit: add_sub alone reloads, and answers with the new code.
    mark = len(server.output())
    _write(model_py, source.replace(ADD, f"{ADD} + 100"), tmp_path)
    server.wait_for_log(re.compile(r"reloaded 'add_sub' version 1 in [\d.]+ s"), start=mark)
    assert "reloading 'add_sub' (changed: 1/model.py)" in server.output()[mark:]
    assert "'bls_add_sub'" not in server.output()[mark:]
    assert _sum(server) == [102.0] * 4

    # A broken edit: the error points at the line; version 1 of the last edit keeps serving.
    mark = len(server.output())
    broken = source.replace("def execute(self, requests):", "def execute(self, requests)")
    _write(model_py, broken.replace(ADD, f"{ADD} + 100"), tmp_path)
    failed = server.wait_for_log(
        re.compile(r"reload of 'add_sub' failed after [\d.]+ s; version 1 keeps serving:"),
        start=mark,
    )
    line = broken.splitlines().index("    def execute(self, requests)") + 1
    server.wait_for_log(f"\"  {model_py}:{line}: Internal: SyntaxError: expected ':'", start=mark)
    server.wait_for_log('"      def execute(self, requests)"', start=failed.start())
    assert _sum(server) == [102.0] * 4
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    assert grpc.is_model_ready("add_sub") and grpc.is_server_ready()

    # Fixed: served again.
    mark = len(server.output())
    _write(model_py, source.replace(ADD, f"{ADD} - 1"), tmp_path)
    server.wait_for_log("reloaded 'add_sub' version 1", start=mark)
    assert _sum(server) == [1.0] * 4


def test_dev_loads_a_new_model_and_unloads_a_removed_one(
    dev: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    server, repo = dev
    client = httpclient.InferenceServerClient(server.http_url)
    mark = len(server.output())
    staged = tmp_path / "py_identity"
    shutil.copytree(MODELS / "py_identity", staged, ignore=shutil.ignore_patterns("__pycache__"))
    os.replace(staged, repo / "py_identity")
    server.wait_for_log("loaded 'py_identity' version 1", start=mark)
    assert client.is_model_ready("py_identity")

    mark = len(server.output())
    shutil.rmtree(repo / "py_identity")
    server.wait_for_log("model 'py_identity' was removed: unloaded", start=mark)
    wait_until(lambda: not client.is_model_ready("py_identity"), what="py_identity unloaded")
    assert client.is_model_ready("add_sub")


def test_dev_points_at_a_model_broken_from_the_start(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(
        EXAMPLES / "add_sub", repo / "add_sub", ignore=shutil.ignore_patterns("__pycache__")
    )
    model_py = repo / "add_sub" / "1" / "model.py"
    model_py.write_text(model_py.read_text() + "\nimport no_such_module_here\n")
    line = len(model_py.read_text().splitlines())
    server = start_server(repo, "--allow-metrics=false", command="dev", expect=("http", "grpc"))
    try:
        server.wait_for_log("model 'add_sub' is not serving:")
        server.wait_for_log(
            f'"  {model_py}:{line}: Internal: ModuleNotFoundError: No module named '
            "'no_such_module_here'\""
        )
        server.wait_for_log('"      import no_such_module_here"')
        server.wait_for_log("for changes")  # (edits before this line could go unseen)
        mark = len(server.output())
        _write(model_py, model_py.read_text().replace("import no_such_module_here", ""), tmp_path)
        server.wait_for_log("loaded 'add_sub' version 1 in", start=mark)
        assert _sum(server) == [2.0] * 4
    finally:
        assert server.stop() == 0
    assert server.output().rstrip().endswith('"stopped"')


def test_dev_prints_a_failed_execute_once_at_its_line(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(
        EXAMPLES / "add_sub", repo / "add_sub", ignore=shutil.ignore_patterns("__pycache__")
    )
    model_py = repo / "add_sub" / "1" / "model.py"
    lines = model_py.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "def execute" in line) + 1
    lines.insert(at, '        raise ValueError("boom in execute")')
    model_py.write_text("\n".join(lines) + "\n")
    server = start_server(repo, "--allow-metrics=false", command="dev", expect=("http", "grpc"))
    try:
        server.wait_for_log("watching")
        client = httpclient.InferenceServerClient(server.http_url)
        ones = np.ones(4, np.float32)
        with pytest.raises(Exception, match="boom in execute"):
            client.infer("add_sub", [http_input("INPUT0", ones), http_input("INPUT1", ones)])
        server.wait_for_log(f"  {model_py}:{at + 1}: Failed to process the request(s)")
        server.wait_for_log('"      raise ValueError(\\"boom in execute\\")"')
    finally:
        assert server.stop() == 0
    assert server.output().count("execute failed:") == 1


def test_dev_reports_a_syntax_error_once(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(
        EXAMPLES / "add_sub", repo / "add_sub", ignore=shutil.ignore_patterns("__pycache__")
    )
    model_py = repo / "add_sub" / "1" / "model.py"
    model_py.write_text(model_py.read_text() + "\ndef broken(:\n")
    server = start_server(repo, "--allow-metrics=false", command="dev", expect=("http", "grpc"))
    try:
        server.wait_for_log("watching")
    finally:
        assert server.stop() == 0
    out = server.output()
    assert out.count("SyntaxError") == 1, out  # dev's own report, not the server's line too
    assert f"{model_py}:" in out
