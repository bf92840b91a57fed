"""TritonError, TritonModelException, Logger, the model-control API and get_model_dir."""

from __future__ import annotations

import os
import re

import pytest

import triton_python_backend_utils as pb

from .fakes import FakeRuntime


def test_triton_error() -> None:
    err = pb.TritonError("boom")
    assert err.message() == "boom"
    assert err.code() == pb.TritonError.INTERNAL
    assert (
        pb.TritonError(message="m", code=pb.TritonError.CANCELLED).code()
        == pb.TritonError.CANCELLED
    )
    assert str(err) != "boom"
    assert not isinstance(err, BaseException)
    codes = {
        "UNKNOWN": 0, "INTERNAL": 1, "NOT_FOUND": 2, "INVALID_ARG": 3, "UNAVAILABLE": 4,
        "UNSUPPORTED": 5, "ALREADY_EXISTS": 6, "CANCELLED": 7,
    }  # fmt: skip
    for name, value in codes.items():
        assert int(getattr(pb.TritonError, name)) == value


def test_triton_error_argument_errors() -> None:
    with pytest.raises(TypeError):
        pb.TritonError(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        pb.TritonError("m", 3)  # type: ignore[arg-type]


def test_triton_error_from_server() -> None:
    assert pb.TritonError._from_server("x", 7).code() == pb.TritonError.CANCELLED
    assert pb.TritonError._from_server("x", 99).code() == pb.TritonError.INTERNAL


def test_triton_model_exception() -> None:
    e = pb.TritonModelException("tme error")
    assert isinstance(e, Exception)
    assert str(e) == "tme error"
    assert e.args == ("tme error",)


def test_logger_is_static_only() -> None:
    with pytest.raises(TypeError):
        pb.Logger()
    assert [
        int(x) for x in (pb.Logger.INFO, pb.Logger.WARNING, pb.Logger.ERROR, pb.Logger.VERBOSE)
    ] == [0, 1, 2, 3]
    assert pb.Logger.LogLevel.WARNING is pb.Logger.WARNING


def test_logger_argument_errors() -> None:
    with pytest.raises(TypeError):
        pb.Logger.log("x", 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        pb.Logger.log_info(5)  # type: ignore[arg-type]


def test_logger_without_runtime_prints_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    pb.Logger.log_warn("PROBE_LOG_LINE")
    line = capsys.readouterr().err
    assert re.match(
        r"^W\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ test_server_api\.py:\d+\] PROBE_LOG_LINE\n$", line
    ), line


def test_logger_goes_to_runtime_with_caller_location(runtime: FakeRuntime) -> None:
    pb.Logger.log_info("i")
    pb.Logger.log_warn("w")
    pb.Logger.log_error("e")
    pb.Logger.log_verbose("v")
    pb.Logger.log("x", pb.Logger.ERROR)
    pb.Logger.log("d")
    assert [(level, msg) for level, msg, _, _ in runtime.logs] == [
        (0, "i"), (1, "w"), (2, "e"), (3, "v"), (2, "x"), (0, "d"),
    ]  # fmt: skip
    _, _, filename, line = runtime.logs[0]
    assert filename == __file__
    assert line > 0


def test_model_control_without_runtime() -> None:
    with pytest.raises(pb.TritonModelException, match="needs a running modelyard server"):
        pb.load_model("m")
    with pytest.raises(pb.TritonModelException, match="needs a running modelyard server"):
        pb.unload_model("m")
    with pytest.raises(pb.TritonModelException, match="needs a running modelyard server"):
        pb.is_model_ready("m")


def test_model_control_through_runtime(runtime: FakeRuntime) -> None:
    pb.load_model("m")
    pb.load_model("m", config='{"backend": "python"}', files={"file:1/model.py": b"x"})
    pb.unload_model("m", unload_dependents=True)
    assert pb.is_model_ready("m") is True
    assert pb.is_model_ready("m", "2") is True
    assert runtime.control == [
        ("load", "m", "", None),
        ("load", "m", '{"backend": "python"}', {"file:1/model.py": b"x"}),
        ("unload", "m", True),
        ("ready", "m", ""),
        ("ready", "m", "2"),
    ]


def test_model_control_argument_errors(runtime: FakeRuntime) -> None:
    with pytest.raises(pb.TritonModelException, match="files should be a dictionary"):
        pb.load_model("m", config="{}", files=[b"x"])  # type: ignore[arg-type]
    with pytest.raises(pb.TritonModelException, match="files should be a dictionary"):
        pb.load_model("m", config="{}", files={"file:a": "text"})  # type: ignore[dict-item]
    with pytest.raises(pb.TritonModelException, match="'config' must be specified"):
        pb.load_model("m", files={"file:a": b"x"})
    with pytest.raises(TypeError):
        pb.load_model(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        pb.is_model_ready("m", 1)  # type: ignore[arg-type]
    with pytest.raises(pb.TritonModelException, match="version should be an integral value"):
        pb.is_model_ready("m", "abc")
    with pytest.raises(pb.TritonModelException, match="version should be an integral value"):
        pb.is_model_ready("m", "-1")
    assert runtime.control == []


def test_get_model_dir() -> None:
    # Outside a server: the folder of the calling file (the model.py's version folder).
    assert pb.get_model_dir() == os.path.dirname(os.path.abspath(__file__))
    rt = FakeRuntime(model_dir="/repo/identity/1")
    pb.set_runtime(rt)
    assert pb.get_model_dir() == "/repo/identity/1"
