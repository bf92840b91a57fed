from __future__ import annotations

from collections.abc import Iterator

import pytest

import triton_python_backend_utils as pb

from .fakes import FakeRuntime


@pytest.fixture(autouse=True)
def _no_runtime() -> Iterator[None]:
    """Every test starts and ends with no runtime installed."""
    pb.set_runtime(None)
    yield
    pb.set_runtime(None)


@pytest.fixture
def runtime() -> FakeRuntime:
    rt = FakeRuntime()
    pb.set_runtime(rt)
    return rt
