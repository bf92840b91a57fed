"""Unit tests: a model file's import error as the server words it (format_import_error), and
the file and line tools find in such a text (error_location)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from modelyard.backends.python.protocol.error_text import format_import_error
from modelyard.error_location import Location, describe, locate


def _import_error(folder: Path, files: dict[str, str]) -> BaseException:
    for name, text in files.items():
        (folder / name).write_text(text)
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location("model_under_test", folder / "model.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        with pytest.raises(BaseException) as e:
            spec.loader.exec_module(module)
        error = e.value
        assert error.__traceback__ is not None
        error.__traceback__ = error.__traceback__.tb_next  # from the loader on, as in a server
        return error
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("helper_for_test", None)


def test_a_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    error = _import_error(tmp_path, {"model.py": "x = 1\nif x\n    pass\n"})
    text = format_import_error(error)
    assert text == (
        "SyntaxError: expected ':' (model.py, line 2)\n\nAt:\n"
        f"  {tmp_path / 'model.py'}(2)\n"
        "    if x\n"
        "        ^\n"
    )
    assert locate(text) == Location(str(tmp_path / "model.py"), 2, ["if x", "    ^"])


def test_a_syntax_error_in_a_sibling_module(tmp_path: Path) -> None:
    files = {"model.py": "import helper_for_test\n", "helper_for_test.py": "def f(:\n    pass\n"}
    text = format_import_error(_import_error(tmp_path, files))
    lines = text.splitlines()
    assert lines[0].startswith("SyntaxError: ")
    at = lines.index("At:")
    # innermost first: the helper's line, then the model's import of it
    assert lines[at + 1] == f"  {tmp_path / 'helper_for_test.py'}(1)"
    assert lines[at + 2] == "    def f(:"
    assert f"  {tmp_path / 'model.py'}(1): <module>" in lines
    assert "    import helper_for_test" in lines
    assert "importlib" not in text


def test_a_raise_at_module_level_keeps_its_frames_without_the_import_machinery(
    tmp_path: Path,
) -> None:
    files = {"model.py": "import json\n\ndef boom():\n    raise ValueError('no')\n\nboom()\n"}
    text = format_import_error(_import_error(tmp_path, files))
    model = tmp_path / "model.py"
    assert text == (
        "ValueError: no\n\nAt:\n"
        f"  {model}(4): boom\n"
        "    raise ValueError('no')\n"
        f"  {model}(6): <module>\n"
        "    boom()\n"
    )
    assert describe(text) == [f"  {model}:4: ValueError: no", "      raise ValueError('no')"]


def test_a_config_error_names_its_line(tmp_path: Path) -> None:
    config = tmp_path / "config.pbtxt"
    config.write_text('name: "m"\nmax_batch_size: x\n')
    text = f"failed to parse model configuration {config}:2:17: bad value"
    assert locate(text) == Location(str(config), 2, ["max_batch_size: x"])
    assert locate(f"model '{config}' is wrong") == Location(str(config))


def test_a_message_that_names_no_place() -> None:
    assert locate("Request was cancelled") is None
    assert describe("first line\nsecond") == ["  first line"]


def test_a_relative_config_path_is_kept_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repository given relative to where the command runs (``modelyard check repo``)."""
    (tmp_path / "repo" / "m").mkdir(parents=True)
    (tmp_path / "repo" / "m" / "config.pbtxt").write_text('name: "m"\nmax_batch_size: x\n')
    monkeypatch.chdir(tmp_path)
    text = "failed to parse model configuration repo/m/config.pbtxt:2:17: bad value"
    assert locate(text) == Location("repo/m/config.pbtxt", 2, ["max_batch_size: x"])
