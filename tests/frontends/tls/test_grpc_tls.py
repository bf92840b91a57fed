"""gRPC over TLS (``--grpc-use-ssl``) and mutual TLS (``--grpc-use-ssl-mutual``) through
tritonclient.grpc with certificates the test makes: a client that trusts the authority
infers; a plain client, a client that does not trust the server, and (mutual) a client
without a certificate or with a stranger's are refused; the server keeps serving."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.conftest import Serving
from tests.frontends.tls.certs import Certificates
from tests.helpers import infer_grpc
from tests.serverproc import ServerProcess

MODEL = "hdr_params"
TIMEOUT_S = 20.0


def tls_args(certs: Certificates, *, mutual: bool = False) -> list[str]:
    return [
        "--grpc-use-ssl-mutual=true" if mutual else "--grpc-use-ssl=true",
        f"--grpc-server-cert={certs.server.cert}",
        f"--grpc-server-key={certs.server.key}",
        f"--grpc-root-cert={certs.ca}",
    ]


def client(url: str, certs: Certificates | None, who: str = "", **kwargs: Any) -> Any:
    """A tritonclient.grpc client of ``url``: plain without ``certs``; else TLS trusting the
    test authority, presenting ``who``'s certificate ("client", "stranger") if named."""
    if certs is None:
        return grpcclient.InferenceServerClient(url, **kwargs)
    options: dict[str, Any] = {"ssl": True, "root_certificates": str(certs.ca)}
    if who:
        pem = getattr(certs, who)
        options.update(private_key=str(pem.key), certificate_chain=str(pem.cert))
    return grpcclient.InferenceServerClient(url, **options, **kwargs)


def infer(c: Any) -> dict[str, Any]:
    result = infer_grpc(c, MODEL, {"IN": np.array([1], np.int32)}, client_timeout=TIMEOUT_S)
    return dict(json.loads(result.as_numpy("PARAMS")[0]))


def refusal(call: Any) -> str:
    with pytest.raises(InferenceServerException) as info:
        call()
    assert info.value.status() == "StatusCode.UNAVAILABLE", info.value
    return str(info.value.message())


@pytest.fixture(scope="module")
def tls_server(serving: Serving, certs: Certificates) -> Iterator[ServerProcess]:
    with serving.server(None, *tls_args(certs), models=[MODEL], endpoints=("grpc",)) as srv:
        yield srv


@pytest.fixture(scope="module")
def mtls_server(serving: Serving, certs: Certificates) -> Iterator[ServerProcess]:
    args = tls_args(certs, mutual=True)
    with serving.server(None, *args, models=[MODEL], endpoints=("grpc",)) as srv:
        yield srv


def test_tls_client_that_trusts_the_authority_infers(
    tls_server: ServerProcess, certs: Certificates
) -> None:
    with client(tls_server.grpc_url, certs) as c:
        assert c.is_server_live(client_timeout=TIMEOUT_S)
        assert infer(c) == {}


def test_tls_server_takes_a_client_certificate_without_asking_for_one(
    tls_server: ServerProcess, certs: Certificates
) -> None:
    # Without --grpc-use-ssl-mutual no client certificate is requested: any is accepted.
    for who in ("client", "stranger"):
        with client(tls_server.grpc_url, certs, who) as c:
            assert c.is_server_ready(client_timeout=TIMEOUT_S)


def test_plain_client_is_refused_on_a_tls_port(
    tls_server: ServerProcess, certs: Certificates
) -> None:
    with client(tls_server.grpc_url, None) as c:
        refusal(lambda: c.is_server_live(client_timeout=TIMEOUT_S))
    with client(tls_server.grpc_url, certs) as c:  # and the server still serves
        assert c.is_server_live(client_timeout=TIMEOUT_S)


def test_client_that_does_not_trust_the_server_is_refused(tls_server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(tls_server.grpc_url, ssl=True) as c:
        message = refusal(lambda: c.is_server_live(client_timeout=TIMEOUT_S))
    assert "CERTIFICATE_VERIFY_FAILED" in message


def test_mtls_client_with_its_certificate_infers(
    mtls_server: ServerProcess, certs: Certificates
) -> None:
    with client(mtls_server.grpc_url, certs, "client") as c:
        assert infer(c) == {}


@pytest.mark.parametrize("who", ["", "stranger"])
def test_mtls_refuses_clients_without_a_certificate_the_authority_signed(
    mtls_server: ServerProcess, certs: Certificates, who: str
) -> None:
    with client(mtls_server.grpc_url, certs, who) as c:
        refusal(lambda: c.is_server_live(client_timeout=TIMEOUT_S))
    with client(mtls_server.grpc_url, None) as c:
        refusal(lambda: c.is_server_live(client_timeout=TIMEOUT_S))
    with client(mtls_server.grpc_url, certs, "client") as c:
        assert c.is_server_live(client_timeout=TIMEOUT_S)
