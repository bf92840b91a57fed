"""The pure parts of the cloud endpoints: the flags and the AIP_* defaults, Triton's port check,
the binary content type's JSON length, and which routes a Vertex AI redirect reaches."""

from __future__ import annotations

import argparse

import pytest

from modelyard.cli.cloud_flags import add_cloud_flags, default_repositories
from modelyard.cli.main import build_parser
from modelyard.errors import InvalidArgument
from modelyard.frontends.cloud.forward import header_length
from modelyard.frontends.cloud.options import (
    NO_DEFAULT_MODEL,
    CloudError,
    cloud_options,
)
from modelyard.frontends.cloud.sagemaker import MIME
from modelyard.frontends.cloud.vertex import redirect_method
from modelyard.server_config import ServerConfig


def _serve(*flags: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", "repo", *flags])


def _config(*flags: str) -> ServerConfig:
    return ServerConfig.from_args(["repo", *flags])


def test_tritons_defaults() -> None:
    args = _serve()
    assert (args.allow_sagemaker, args.sagemaker_port, args.sagemaker_safe_port_range) == (
        False, 8080, None,
    )  # fmt: skip
    assert (args.allow_vertex_ai, args.vertex_ai_port, args.vertex_ai_default_model) == (
        False, 8080, "",
    )  # fmt: skip
    assert _serve("--sagemaker-safe-port-range", "8000-8002").sagemaker_safe_port_range == (
        8000, 8002,
    )  # fmt: skip


def test_aip_mode_prediction_turns_vertex_on_and_http_grpc_off() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--allow-http", default=True)
    parser.add_argument("--allow-grpc", default=True)
    add_cloud_flags(parser, {"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": "9000"})
    args = parser.parse_args([])
    assert (args.allow_vertex_ai, args.vertex_ai_port) == (True, 9000)
    assert (args.allow_http, args.allow_grpc) == (False, False)
    args = parser.parse_args(["--allow-http", "1", "--allow-vertex-ai=false"])
    assert (args.allow_vertex_ai, args.allow_http) == (False, "1")


def test_a_bad_aip_http_port_is_the_flags_error(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="p")
    add_cloud_flags(parser, {"AIP_HTTP_PORT": "http"})
    with pytest.raises(SystemExit):
        parser.parse_args([])
    assert "argument --vertex-ai-port: invalid int value: 'http'" in capsys.readouterr().err


def test_aip_storage_uri_is_the_repository_when_none_is_given() -> None:
    assert default_repositories([], {"AIP_STORAGE_URI": "/mnt/models"}) == ["/mnt/models"]
    assert default_repositories(["/mine"], {"AIP_STORAGE_URI": "/mnt/models"}) == ["/mine"]
    assert default_repositories([], {}) == []


def test_the_environment_the_endpoints_read() -> None:
    settings = _config("--allow-sagemaker", "--sagemaker-port", "9000", "--allow-vertex-ai").cloud
    with pytest.raises(CloudError, match="API_PREDICT_ROUTE is not defined"):
        cloud_options(settings, {})
    cloud = cloud_options(settings, {"AIP_PREDICT_ROUTE": "/p", "AIP_HEALTH_ROUTE": "/h.*",
                                 "SAGEMAKER_TRITON_PING_MODE": "live"})  # fmt: skip
    assert cloud.sagemaker is not None and cloud.vertex is not None
    assert (cloud.sagemaker.default_model, cloud.sagemaker.ping_mode) == (NO_DEFAULT_MODEL, "live")
    assert cloud.vertex.health_route.fullmatch(
        "/health"
    ) and not cloud.vertex.predict_route.fullmatch("/px")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ((), None),
        (("--http-port", "8080", "--allow-sagemaker"),
         "The server cannot listen to HTTP requests and SageMaker requests at the same "
         "address and port 0.0.0.0:8080"),
        (("--http-port", "8080", "--allow-sagemaker", "--http-address", "127.0.0.1"), None),
        (("--allow-sagemaker", "--allow-vertex-ai"),
         "The server cannot listen to SageMaker requests and Vertex AI requests at the same "
         "address and port 0.0.0.0:8080"),
        (("--allow-sagemaker", "--sagemaker-port", "9000", "--sagemaker-safe-port-range",
          "8000-8001"),
         "The server cannot listen to metrics requests at port 8002, allowed port range is "
         "[8000, 8001]"),
        (("--metrics-port", "0", "--grpc-port", "0", "--http-port", "0"), None),
        (("--allow-grpc=false", "--grpc-port", "8000"), None),
    ],
)  # fmt: skip
def test_tritons_port_check(
    flags: tuple[str, ...], message: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    if message is None:
        _config(*flags)
        return
    with pytest.raises(SystemExit) as e:  # a bad command line: one line, exit code 2
        _config(*flags)
    assert e.value.code == 2
    assert capsys.readouterr().err == f"modelyard serve: error: {message}\n"


@pytest.mark.parametrize(
    ("content_type", "length"),
    [(None, None), ("application/json", None), (f"{MIME}12", "12"), (f"{MIME}abc", "0"),
     (f"{MIME} 7x", "7"), (f"{MIME}-3", "-3")],
)  # fmt: skip
def test_the_json_length_in_the_content_type(content_type: str | None, length: str | None) -> None:
    assert header_length(content_type, MIME) == length


def test_the_binary_type_must_come_first() -> None:
    with pytest.raises(InvalidArgument, match="expect MIME type for binary data starts with"):
        header_length(f"text/plain;{MIME}12", MIME)


@pytest.mark.parametrize(
    ("endpoint", "method"),
    [("/v2/models/m", "GET"), ("/v2/models/m/versions/2/ready", "GET"),
     ("/v2/models/m/config", "GET"), ("/v2/models/m/stats", "GET"), ("/v2/models/stats", "GET"),
     ("/v2/models/m/infer", "POST"), ("/v2", "GET"), ("/v2/health/ready", "GET"),
     ("/v2/systemsharedmemory/status", "GET"), ("/v2/cudasharedmemory/region/r/register", "POST"),
     ("/v2/repository/index", "POST"), ("/v2/repository/models/m/load", "POST"),
     ("/v2/models/m/generate", None), ("/v2/models/m/trace/setting", None),
     ("/v2/logging", None), ("/v2/trace/setting", None), ("//v2", None)],
)  # fmt: skip
def test_which_routes_a_redirect_reaches(endpoint: str, method: str | None) -> None:
    assert redirect_method(endpoint) == method
