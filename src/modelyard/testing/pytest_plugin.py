"""modelyard's pytest plugin (the ``pytest11`` entry point ``modelyard``): two fixtures.

- ``modelyard_model``: ``modelyard_model(model_dir, **options)`` loads a model with
  :func:`modelyard.testing.load_model` (same options) and closes it after the test.
- ``modelyard_server``: ``modelyard_server(repository, *flags, **options)`` starts the real
  server on free ports with :func:`modelyard.testing.start_server` and stops it after the
  test; the result has ``http_url``, ``grpc_url``, ``metrics_url`` and ``output()``.

Nothing is imported until a fixture is used: the plugin costs a test session nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from modelyard.testing.harness import ModelHandle
    from modelyard.testing.server import ServerProcess


@pytest.fixture
def modelyard_model() -> Iterator[Callable[..., ModelHandle]]:
    """Load models for one test: ``modelyard_model("models/add_sub", bls={...})``."""
    from modelyard.testing.harness import load_model

    handles: list[ModelHandle] = []

    def load(model_dir: Any, **options: Any) -> ModelHandle:
        handle = load_model(model_dir, **options)
        handles.append(handle)
        return handle

    yield load
    for handle in reversed(handles):
        handle.close()


@pytest.fixture
def modelyard_server() -> Iterator[Callable[..., ServerProcess]]:
    """Start real servers for one test: ``modelyard_server("model_repository", "--flag")``."""
    from modelyard.testing.server import start_server

    servers: list[ServerProcess] = []

    def start(repository: Any, *flags: str, **options: Any) -> ServerProcess:
        server = start_server(repository, *flags, **options)
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        server.stop()
