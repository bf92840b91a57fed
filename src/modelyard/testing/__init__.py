"""For tests of models and of servers: ``start_server(repository)`` runs the real server on
free ports, for tests that go through a client."""

from modelyard.testing.server import ServerProcess, refused_start, start_server

__all__ = ["ServerProcess", "refused_start", "start_server"]
