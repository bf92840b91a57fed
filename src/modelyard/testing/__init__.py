"""Test Triton Python models without a server: ``load_model(model_dir)`` runs a model exactly
as the server does (config, auto-complete, ``initialize``, sync and async ``execute``,
decoupled responses, BLS to fakes or to the models of a repository, ``finalize``), in this
process and with no ports; ``start_server(repository)`` runs the real server on free ports
for tests that go through a client. The pytest plugin (``modelyard.testing.pytest_plugin``,
registered by the package) offers both as fixtures: ``modelyard_model`` and
``modelyard_server``.
"""

from modelyard.testing.harness import DEFAULT_TIMEOUT_S, LoadError, ModelHandle, load_model
from modelyard.testing.host import Fake
from modelyard.testing.responses import Request, Responses
from modelyard.testing.server import ServerProcess, refused_start, start_server

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "Fake",
    "LoadError",
    "ModelHandle",
    "Request",
    "Responses",
    "ServerProcess",
    "load_model",
    "refused_start",
    "start_server",
]
