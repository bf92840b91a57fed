"""The TLS tests' certificates: one authority, server and client certificates, and a
stranger's client certificate, made once per session (certs.py)."""

from __future__ import annotations

import pytest

from tests.frontends.tls.certs import Certificates, make_certificates


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))
