"""``modelyard check``: one line per model, the mistakes of broken ones at their file and line
with the source line, exit code 1 when any model is broken; ``--load`` runs initialize."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from modelyard.testing import start_server
from tests.helpers import EXAMPLES, MODELS

pytestmark = pytest.mark.timeout(180)


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "modelyard", "check", *args],
        capture_output=True,
        text=True,
        timeout=150,
    )


def _copy(source: Path, repo: Path, name: str, as_name: str | None = None) -> Path:
    target = repo / (as_name or name)
    shutil.copytree(source / name, target, ignore=shutil.ignore_patterns("__pycache__"))
    if as_name:
        config = target / "config.pbtxt"
        config.write_text(config.read_text().replace(f'name: "{name}"', f'name: "{as_name}"'))
    return target


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("check")
    _copy(EXAMPLES, repo, "add_sub")
    _copy(MODELS, repo, "py_init_error")  # imports fine: only --load finds its mistake
    config = _copy(EXAMPLES, repo, "add_sub", "bad_config") / "config.pbtxt"
    config.write_text(config.read_text().replace("data_type: TYPE_FP32", "data_type: FP32", 1))
    syntax = _copy(EXAMPLES, repo, "add_sub", "bad_syntax") / "1" / "model.py"
    syntax.write_text(
        syntax.read_text().replace("def execute(self, requests):", "def execute(self, requests)")
    )
    imports = _copy(EXAMPLES, repo, "add_sub", "bad_import") / "1" / "model.py"
    imports.write_text("import json\nfrom helpers_nowhere import thing\n" + imports.read_text())
    return repo


def _lines_of(output: str, name: str) -> list[str]:
    """The line of ``name`` and the indented lines after it."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[1:2] == [name])
    out = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith(" "):
            break
        out.append(line)
    return out


def test_check_reports_each_model_at_its_file_and_line(repo: Path) -> None:
    run = _check(str(repo))
    assert run.returncode == 1, run.stdout + run.stderr
    out = run.stdout
    assert _lines_of(out, "add_sub") == ["ok      add_sub"]
    assert _lines_of(out, "py_init_error") == ["ok      py_init_error"]

    config = repo / "bad_config" / "config.pbtxt"
    line = config.read_text().splitlines().index("    data_type: FP32") + 1
    [first, source] = _lines_of(out, "bad_config")
    assert first.startswith("FAILED  bad_config")
    assert f"{config}:{line}: failed to parse model configuration {config}:{line}:" in first
    assert source.strip() == "data_type: FP32"

    model_py = repo / "bad_syntax" / "1" / "model.py"
    line = model_py.read_text().splitlines().index("    def execute(self, requests)") + 1
    first, source, caret = _lines_of(out, "bad_syntax")
    assert first.endswith(
        f"{model_py}:{line}: Internal: SyntaxError: expected ':' (model.py, line {line})"
    )
    assert source.strip() == "def execute(self, requests)"
    assert caret.strip() == "^" and caret.index("^") == source.index(")") + 1

    model_py = repo / "bad_import" / "1" / "model.py"
    first, source = _lines_of(out, "bad_import")
    assert first.endswith(
        f"{model_py}:2: Internal: ModuleNotFoundError: No module named 'helpers_nowhere'"
    )
    assert source.strip() == "from helpers_nowhere import thing"
    assert out.splitlines()[-1] == "5 model(s): 2 ok, 3 failed"
    assert "importlib" not in out


def test_check_load_runs_initialize(repo: Path) -> None:
    run = _check(str(repo), "--load")
    assert run.returncode == 1
    model_py = repo / "py_init_error" / "1" / "model.py"
    first, source = _lines_of(run.stdout, "py_init_error")
    assert first.endswith(f"{model_py}:3: Internal: NameError: name 'lorem_ipsum' is not defined")
    assert source.strip().startswith("lorem_ipsum")
    assert _lines_of(run.stdout, "add_sub") == ["ok      add_sub"]
    assert run.stdout.splitlines()[-1] == "5 model(s): 1 ok, 4 failed"


def test_check_passes_the_examples() -> None:
    run = _check(str(EXAMPLES))
    assert run.returncode == 0, run.stdout + run.stderr
    names = sorted(p.name for p in EXAMPLES.iterdir() if (p / "config.pbtxt").is_file())
    assert run.stdout.splitlines()[:-1] == [f"ok      {n}" for n in names]
    assert run.stderr == ""


def test_check_of_no_repository(tmp_path: Path) -> None:
    run = _check(str(tmp_path / "nowhere"))
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.strip().splitlines() == [
        f"modelyard check: error: failed to poll model repository '{tmp_path / 'nowhere'}': "
        "No such file or directory"
    ]


def _places(text: str) -> list[str]:
    """Every ``path:line`` the output points at (not the log lines' own ``module.py:N]``)."""
    return re.findall(r"([^\s\"]*/[^\s\"]+\.(?:py|pbtxt)):\d+", text)


def test_printed_places_exist_for_a_relative_repository(tmp_path: Path) -> None:
    # `modelyard check repo` and `modelyard dev repo` from the folder above: every file:line
    # they print is a real path from where the user stands, with its source line.
    repo = tmp_path / "repo"
    config = _copy(EXAMPLES, repo, "add_sub", "typo") / "config.pbtxt"
    config.write_text(config.read_text().replace("data_type:", "data_tipe:", 1))
    model_py = _copy(EXAMPLES, repo, "add_sub", "bad_import") / "1" / "model.py"
    model_py.write_text(model_py.read_text() + "\nimport no_such_module_here\n")
    run = subprocess.run(
        [sys.executable, "-m", "modelyard", "check", "repo"],
        capture_output=True, text=True, timeout=150, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 1
    places = _places(run.stdout)
    assert len(set(places)) == 2, run.stdout
    assert all((tmp_path / p).is_file() for p in places), places
    assert "data_tipe" in run.stdout and "import no_such_module_here" in run.stdout
    server = start_server(
        "repo", "--allow-metrics=false", command="dev", expect=("http", "grpc"), cwd=tmp_path
    )
    try:
        server.wait_for_log("watching")
    finally:
        server.stop()
    places = _places(server.output())
    assert places and all((tmp_path / p).is_file() for p in places), places
