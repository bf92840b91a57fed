"""Shared fixtures for the gRPC frontend tests: each module provides its own ``server``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import tritonclient.grpc as grpcclient

from tests.serverproc import ServerProcess


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Any]:
    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        yield c
    finally:
        c.close()
