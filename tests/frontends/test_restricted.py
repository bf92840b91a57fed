"""Restricted APIs (``--http-restricted-api``) and protocols (``--grpc-restricted-protocol``):
the flag syntax and Triton's start-up errors, then every endpoint of every group over HTTP
and gRPC on the real server, each group restricted with its own header, so that each
endpoint is shown to belong to exactly its group. Allowed calls go through tritonclient with
``headers=``."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from modelyard.frontends.grpc.access import METHOD_GROUPS
from modelyard.frontends.restricted import (
    GROUPS,
    Restriction,
    RestrictionError,
    parse_restrictions,
)
from tests.conftest import Serving
from tests.serverproc import ServerProcess, refused_start

pytestmark = pytest.mark.timeout(180)

TIMEOUT = 30.0

# Every HTTP endpoint, by the group Triton's handler checks (http_server.cc).
HTTP_ENDPOINTS: dict[str, list[tuple[str, str]]] = {
    "health": [("GET", "/v2/health/live"), ("GET", "/v2/health/ready"),
               ("GET", "/v2/models/http_gate/ready"),
               ("GET", "/v2/models/http_gate/versions/1/ready")],
    "metadata": [("GET", "/v2"), ("GET", "/v2/models/http_gate"),
                 ("GET", "/v2/models/http_gate/versions/1")],
    "inference": [("POST", "/v2/models/http_gate/infer"),
                  ("POST", "/v2/models/http_gate/versions/1/infer"),
                  ("POST", "/v2/models/http_gate/generate"),
                  ("POST", "/v2/models/http_gate/generate_stream")],
    "shared-memory": [("GET", "/v2/systemsharedmemory/status"),
                      ("GET", "/v2/systemsharedmemory/region/r/status"),
                      ("POST", "/v2/systemsharedmemory/region/r/register"),
                      ("POST", "/v2/systemsharedmemory/unregister"),
                      ("GET", "/v2/cudasharedmemory/status"),
                      ("POST", "/v2/cudasharedmemory/region/r/register"),
                      ("POST", "/v2/cudasharedmemory/region/r/unregister")],
    "model-config": [("GET", "/v2/models/http_gate/config"),
                     ("GET", "/v2/models/http_gate/versions/1/config")],
    "model-repository": [("POST", "/v2/repository/index"),
                         ("POST", "/v2/repository/models/http_gate/load"),
                         ("POST", "/v2/repository/models/nosuch/unload")],
    "statistics": [("GET", "/v2/models/stats"), ("GET", "/v2/models/http_gate/stats")],
    "trace": [("GET", "/v2/trace/setting"), ("GET", "/v2/models/http_gate/trace/setting")],
    "logging": [("GET", "/v2/logging")],
}  # fmt: skip


def header(group: str) -> str:
    return f"key-{group}"


def restrict_each_group(flag: str) -> list[str]:
    """One flag value per group, each with its own header and value."""
    return [f"--{flag}={group}:{header(group)}=open-{group}" for group in GROUPS]


# -- the flag ----------------------------------------------------------------------------------


def test_parse_groups_headers_and_values() -> None:
    r = parse_restrictions(
        ["health,metadata:Admin-Key=s3cret", "inference:k=a=b", "trace:x:y=z"],
        "http-restricted-api", "api",
    )  # fmt: skip
    assert r.groups == {
        "health": Restriction("Admin-Key", "s3cret"),
        "metadata": Restriction("Admin-Key", "s3cret"),
        "inference": Restriction("k", "a=b"),  # the first '=' after the ':' splits
        "trace": Restriction("x:y", "z"),
    }
    grpc_r = parse_restrictions(["health:admin-key=v"], "grpc-restricted-protocol", "protocol",
                                "triton-grpc-protocol-")  # fmt: skip
    assert grpc_r.get("health") == Restriction("triton-grpc-protocol-admin-key", "v")
    assert not parse_restrictions([], "http-restricted-api", "api")


# Triton 2.51's messages (command_line_parser.cc, checked against the reference).
BAD_VALUES = [
    ("health", "--http-restricted-api option format is '<config name>:<setting>=<value>'. "
               "Got health"),
    ("health:k", "--http-restricted-api option format is '<config name>:<setting>=<value>'. "
                 "Got health:k"),
    ("health:k=", "--http-restricted-api option format is '<config name>:<setting>=<value>'. "
                  "Got health:k="),
    (":k=v", "--http-restricted-api option format is '<config name>:<setting>=<value>'. "
             "Got :k=v"),
    ("badgroup:k=v", "unknown restricted api 'badgroup'"),
    ("Health:k=v", "unknown restricted api 'Health'"),
    ("health, metadata:k=v", "unknown restricted api ' metadata'"),
    ("health,,metadata:k=v", "unknown restricted api ''"),
    ("health,health:k=v", "restricted api 'health' can not be specified in multiple config groups"),
]  # fmt: skip


@pytest.mark.parametrize(("value", "message"), BAD_VALUES)
def test_bad_flag_values(value: str, message: str) -> None:
    with pytest.raises(RestrictionError) as e:
        parse_restrictions([value], "http-restricted-api", "api")
    assert str(e.value) == message


def test_start_up_errors(tmp_path: Path) -> None:
    """The server refuses bad values at start with Triton's lines, exit code 1."""
    err = refused_start(tmp_path, "--http-restricted-api=badgroup:k=v")
    assert err.strip().splitlines()[-2:] == [
        'Bad option: "--http-restricted-api".',
        "unknown restricted api 'badgroup'",
    ]
    err = refused_start(
        tmp_path, "--grpc-restricted-protocol=health:a=b", "--grpc-restricted-protocol=health:c=d"
    )
    assert err.strip().splitlines()[-2:] == [
        'Bad option: "--grpc-restricted-protocol".',
        "restricted protocol 'health' can not be specified in multiple config groups",
    ]
    err = refused_start(tmp_path, "--grpc-restricted-protocol=foo")
    assert err.strip().splitlines()[-1] == (
        "--grpc-restricted-protocol option format is '<config name>:<setting>=<value>'. Got foo"
    )
    err = refused_start(tmp_path, "--http-max-input-size=0")
    assert err.strip().splitlines()[-1] == "Error: --http-max-input-size must be greater than 0."


# -- the server --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(
        None, "--model-control-mode=explicit", "--load-model=http_gate",
        *restrict_each_group("http-restricted-api"),
        *restrict_each_group("grpc-restricted-protocol"),
        models=["http_gate"], endpoints=("http", "grpc"),
    ) as srv:  # fmt: skip
        yield srv


def http_call(
    server_url: str, method: str, path: str, headers: dict[str, str]
) -> tuple[int, str, bytes]:
    """(status, content type, body) of one raw request; POST bodies are empty JSON."""
    host, port = server_url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT)
    try:
        body = b"{}" if method == "POST" else None
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        return r.status, r.getheader("Content-Type", ""), r.read()
    finally:
        conn.close()


def _denied(group: str) -> bytes:
    return b'{"error":"This API is restricted, expecting header \'%s\'"}' % header(group).encode()


ALL_ENDPOINTS = [(g, m, p) for g, endpoints in HTTP_ENDPOINTS.items() for m, p in endpoints]


@pytest.mark.parametrize(("group", "method", "path"), ALL_ENDPOINTS)
def test_http_endpoint_belongs_to_its_group(
    server: ServerProcess, group: str, method: str, path: str
) -> None:
    """Without headers, or with every other group's header: 403 naming this group's header.
    With this group's header (any case; the value exact): answered as usual."""
    others = {header(g): f"open-{g}" for g in GROUPS if g != group}
    for headers in ({}, others, {header(group): f"OPEN-{group}"}):
        assert http_call(server.http_url, method, path, headers) == (
            403, "text/plain", _denied(group)
        )  # fmt: skip
    for name in (header(group), header(group).upper()):
        status, _, _ = http_call(server.http_url, method, path, {name: f"open-{group}"})
        assert status != 403


def test_http_restriction_comes_before_the_method_and_route_checks(server: ServerProcess) -> None:
    """As in Triton: a wrong method on a restricted endpoint is 403, not 405; unknown models
    are 403 too; a path that matches no endpoint is 404 whatever the headers."""
    assert http_call(server.http_url, "POST", "/v2/health/live", {})[0] == 403
    assert http_call(server.http_url, "GET", "/v2/models/nosuch/infer", {})[0] == 403
    assert http_call(server.http_url, "GET", "/v2/nope", {})[0] == 404
    assert http_call(server.http_url, "GET", "/v2/models/http_gate/versions/1/trace/setting",
                     {})[0] == 404  # fmt: skip


def test_http_allowed_through_the_client(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=TIMEOUT)
    h = {header(g): f"open-{g}" for g in GROUPS}
    try:
        assert client.is_server_live(headers=h) and client.is_model_ready("http_gate", headers=h)
        assert not client.is_server_live()  # 403: not live as far as the client can tell
        with pytest.raises(InferenceServerException) as e:
            client.get_model_metadata("http_gate")
        assert e.value.status() == "403"
        assert e.value.message() == "This API is restricted, expecting header 'key-metadata'"
        assert client.get_model_metadata("http_gate", headers=h)["name"] == "http_gate"
        inp = httpclient.InferInput("IN", [2], "FP32")
        inp.set_data_from_numpy(np.array([1.0, 2.0], np.float32))
        result = client.infer("http_gate", [inp], headers=h)
        assert result.as_numpy("OUT").tolist() == [1.0, 2.0]
        with pytest.raises(InferenceServerException):
            client.infer("http_gate", [inp], headers={header("metadata"): "open-metadata"})
        assert client.get_log_settings(headers=h)["log_verbose_level"] == 0
        client.update_log_settings({"log_verbose_level": 0}, headers=h)
        assert client.get_model_repository_index(headers=h)[0]["name"] == "http_gate"
    finally:
        client.close()


# -- gRPC --------------------------------------------------------------------------------------


def _metadata(group: str) -> tuple[tuple[str, str], ...]:
    return ((f"triton-grpc-protocol-{header(group)}", f"open-{group}"),)


def _others(group: str) -> tuple[tuple[str, str], ...]:
    return tuple(m for g in GROUPS if g != group for m in _metadata(g))


def grpc_unary(channel: grpc.Channel, method: str, metadata: Any) -> tuple[Any, str]:
    """(status code, details) of a call with an empty request message."""
    if method == "Check":
        stub: Any = health_pb2_grpc.HealthStub(channel)
        request: Any = health_pb2.HealthCheckRequest()
    else:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = getattr(service_pb2, f"{method}Request", service_pb2.ModelInferRequest)()
        if method == "ModelStreamInfer":
            try:
                list(stub.ModelStreamInfer(iter([]), metadata=metadata, timeout=TIMEOUT))
                return grpc.StatusCode.OK, ""
            except grpc.RpcError as e:
                return e.code(), e.details()
    try:
        getattr(stub, method)(request, metadata=metadata, timeout=TIMEOUT)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details()


@pytest.mark.parametrize(("method", "group"), sorted(METHOD_GROUPS.items()))
def test_grpc_method_belongs_to_its_group(server: ServerProcess, method: str, group: str) -> None:
    refusal = (
        grpc.StatusCode.UNAVAILABLE,
        f"This protocol is restricted, expecting header 'triton-grpc-protocol-{header(group)}'",
    )
    with grpc.insecure_channel(server.grpc_url) as channel:
        for metadata in ((), _others(group), ((f"{header(group)}", f"open-{group}"),)):
            assert grpc_unary(channel, method, metadata) == refusal
        assert grpc_unary(channel, method, _metadata(group)) != refusal


def test_every_rpc_has_a_group() -> None:
    service = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert {m.name for m in service.methods} | {"Check"} == set(METHOD_GROUPS)
    assert set(METHOD_GROUPS.values()) == set(GROUPS)


def test_grpc_allowed_through_the_client(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    h = dict(m for g in GROUPS for m in _metadata(g))
    try:
        assert client.is_server_ready(headers=h, client_timeout=TIMEOUT)
        with pytest.raises(InferenceServerException) as e:
            client.is_server_ready(client_timeout=TIMEOUT)
        assert e.value.status() == "StatusCode.UNAVAILABLE"
        inp = grpcclient.InferInput("IN", [2], "FP32")
        inp.set_data_from_numpy(np.array([3.0, 4.0], np.float32))
        result = client.infer("http_gate", [inp], headers=h, client_timeout=TIMEOUT)
        assert result.as_numpy("OUT").tolist() == [3.0, 4.0]
        with pytest.raises(InferenceServerException) as e:
            client.infer("http_gate", [inp], client_timeout=TIMEOUT)
        assert e.value.message() == (
            "This protocol is restricted, expecting header 'triton-grpc-protocol-key-inference'"
        )
    finally:
        client.close()
