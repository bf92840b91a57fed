"""HTTPS on the HTTP port (``--http-use-ssl``, ``--http-use-ssl-mutual``: beyond Triton, the
same options as gRPC's), through tritonclient.http (``ssl=True``, ``ssl_options``,
``insecure``) and a plain HTTPS client for the dashboard and ``generate_stream``."""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Iterator
from typing import Any

import gevent.ssl
import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.conftest import Serving
from tests.frontends.tls.certs import Certificates
from tests.helpers import infer_http
from tests.serverproc import ServerProcess

MODELS = ["hdr_params", "http_stream"]
TIMEOUT_S = 20.0


def tls_args(certs: Certificates, *, mutual: bool = False) -> list[str]:
    return [
        "--http-use-ssl-mutual" if mutual else "--http-use-ssl",
        f"--http-server-cert={certs.server.cert}",
        f"--http-server-key={certs.server.key}",
        f"--http-root-cert={certs.ca}",
    ]


@pytest.fixture(scope="module")
def https_server(serving: Serving, certs: Certificates) -> Iterator[ServerProcess]:
    with serving.server(None, *tls_args(certs), models=MODELS, endpoints=("http",)) as srv:
        yield srv


@pytest.fixture(scope="module")
def mtls_server(serving: Serving, certs: Certificates) -> Iterator[ServerProcess]:
    args = tls_args(certs, mutual=True)
    with serving.server(None, *args, models=MODELS, endpoints=("http",)) as srv:
        yield srv


def client(server: ServerProcess, certs: Certificates, who: str = "", **kwargs: Any) -> Any:
    options = {"ca_certs": str(certs.ca)}
    if who:
        pem = getattr(certs, who)
        options.update(certfile=str(pem.cert), keyfile=str(pem.key))
    return httpclient.InferenceServerClient(
        server.http_url, ssl=True, ssl_options=options, network_timeout=TIMEOUT_S, **kwargs
    )


def infer(c: Any) -> dict[str, Any]:
    result = infer_http(c, "hdr_params", {"IN": np.array([1], np.int32)})
    return dict(json.loads(result.as_numpy("PARAMS")[0]))


def https(server: ServerProcess, certs: Certificates, who: str = "") -> http.client.HTTPSConnection:
    context = ssl.create_default_context(cafile=str(certs.ca))
    if who:
        pem = getattr(certs, who)
        context.load_cert_chain(str(pem.cert), str(pem.key))
    host, port = server.http_url.rsplit(":", 1)
    return http.client.HTTPSConnection(host, int(port), context=context, timeout=TIMEOUT_S)


def test_https_client_infers(https_server: ServerProcess, certs: Certificates) -> None:
    with client(https_server, certs) as c:
        assert c.is_server_ready()
        assert c.get_server_metadata()["name"] == "triton"
        assert infer(c) == {}


def test_insecure_client_skips_verification(https_server: ServerProcess) -> None:
    def unverified(**_: Any) -> ssl.SSLContext:
        context: ssl.SSLContext = gevent.ssl._create_unverified_context()
        return context

    with httpclient.InferenceServerClient(
        https_server.http_url, ssl=True, insecure=True, ssl_context_factory=unverified
    ) as c:
        assert c.is_server_live()


def test_client_that_does_not_trust_the_server_is_refused(https_server: ServerProcess) -> None:
    with (
        httpclient.InferenceServerClient(https_server.http_url, ssl=True) as c,
        pytest.raises(ssl.SSLError, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        c.is_server_live()


def test_plain_http_is_refused_and_https_still_serves(
    https_server: ServerProcess, certs: Certificates
) -> None:
    host, port = https_server.http_url.rsplit(":", 1)
    plain = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT_S)
    try:
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            plain.request("GET", "/v2/health/live")
            plain.getresponse()
    finally:
        plain.close()
    with client(https_server, certs) as c:
        assert c.is_server_live()


def test_dashboard_over_https(https_server: ServerProcess, certs: Certificates) -> None:
    assert "Dashboard at https://127.0.0.1:" in https_server.output()
    conn = https(https_server, certs)
    try:
        conn.request("GET", "/dashboard/")
        page = conn.getresponse()
        assert page.status == 200 and b"<html" in page.read().lower()
    finally:
        conn.close()


def test_generate_stream_over_https(https_server: ServerProcess, certs: Certificates) -> None:
    conn = https(https_server, certs)
    try:
        conn.request("POST", "/v2/models/http_stream/generate_stream", body=b'{"COUNT":3}')
        reply = conn.getresponse()
        assert reply.status == 200
        assert reply.getheader("Content-Type") == "text/event-stream; charset=utf-8"
        events = [json.loads(e.removeprefix(b"data: ")) for e in reply.read().split(b"\n\n") if e]
    finally:
        conn.close()
    assert [e["OUT"] for e in events] == [0, 1, 2]


def test_mtls_client_with_its_certificate_infers(
    mtls_server: ServerProcess, certs: Certificates
) -> None:
    with client(mtls_server, certs, "client") as c:
        assert infer(c) == {}


@pytest.mark.parametrize("who", ["", "stranger"])
def test_mtls_refuses_clients_without_a_certificate_the_authority_signed(
    mtls_server: ServerProcess, certs: Certificates, who: str
) -> None:
    conn = https(mtls_server, certs, who)
    try:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            conn.request("GET", "/v2/health/live")
            conn.getresponse()
    finally:
        conn.close()
    with client(mtls_server, certs, "client") as c:
        assert c.is_server_live()
