"""Differential test of gRPC TLS and mutual TLS: the reference Triton 2.51 and modelyard
serve with the same certificates (made by the test) and the same flags; the same
tritonclient.grpc clients (trusting, untrusting, plain, with and without a client
certificate) must see the same answers and the same errors. Skipped without the reference.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.conftest import Serving
from tests.frontends.tls.certs import Certificates
from tests.frontends.tls.test_grpc_tls import MODEL, TIMEOUT_S, client, infer, tls_args
from tests.reference import reference_available, start_reference

pytestmark = [
    pytest.mark.reference,
    pytest.mark.skipif(not reference_available(), reason="reference Triton is not installed"),
]

# The clients: plain, TLS trusting nobody's authority, TLS trusting the test authority (and
# presenting the test client's certificate, or a stranger's).
CLIENTS = ("plain", "untrusting", "trusting", "client", "stranger")
KEYS = [
    f"{mode} {name} {call}"
    for mode in ("tls", "mtls")
    for name in CLIENTS
    for call in ("live", "infer")
]


def _client(url: str, certs: Certificates, name: str) -> Any:
    if name == "plain":
        return client(url, None)
    if name == "untrusting":
        return grpcclient.InferenceServerClient(url, ssl=True)
    return client(url, certs, "" if name == "trusting" else name)


def _outcome(call: Callable[[], Any]) -> dict[str, Any]:
    try:
        return {"value": call()}
    except InferenceServerException as e:
        # the peer's address differs between the two servers
        message = re.sub(r"(ipv4:127\.0\.0\.1|localhost):\d+", r"\1:PORT", str(e.message()))
        return {"status": e.status(), "message": message}


def _observe(url: str, certs: Certificates, mode: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for name in CLIENTS:
        with _client(url, certs, name) as c:
            live = _outcome(lambda: c.is_server_live(client_timeout=TIMEOUT_S))
        with _client(url, certs, name) as c:  # (a new channel: the same handshake again)
            seen[f"{mode} {name} infer"] = _outcome(lambda: infer(c))
        seen[f"{mode} {name} live"] = live
    return seen


def _probe_options(certs: Certificates, mutual: bool) -> dict[str, Any]:
    options: dict[str, Any] = {"ssl": True, "root_certificates": str(certs.ca)}
    if mutual:
        options.update(private_key=str(certs.client.key), certificate_chain=str(certs.client.cert))
    return options


@pytest.fixture(scope="module")
def observations(serving: Serving, certs: Certificates) -> Iterator[tuple[Any, Any]]:
    repo = serving.repo([MODEL], copy=True)
    theirs: dict[str, Any] = {}
    ours: dict[str, Any] = {}
    for mode, mutual in (("tls", False), ("mtls", True)):
        args = tls_args(certs, mutual=mutual)
        ref = start_reference(repo, *args, timeout=120, grpc_options=_probe_options(certs, mutual))
        try:
            theirs.update(_observe(ref.grpc_url, certs, mode))
        finally:
            ref.stop()
        with serving.server(repo, *args, endpoints=("grpc",)) as mine:
            ours.update(_observe(mine.grpc_url, certs, mode))
    yield theirs, ours


@pytest.mark.parametrize("key", KEYS)
def test_matches_reference(observations: tuple[dict[str, Any], dict[str, Any]], key: str) -> None:
    theirs, ours = observations
    assert ours[key] == theirs[key], "modelyard (left) differs from Triton 2.51 (right)"
