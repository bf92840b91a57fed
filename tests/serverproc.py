"""Start the real modelyard server in a subprocess on port 0 and find its ports: the tests use
the launcher the package ships for everyone's tests (``modelyard.testing.server``), which
also waits until the initial model load is over."""

from __future__ import annotations

from modelyard.testing.server import ServerProcess, refused_start, start_server

__all__ = ["ServerProcess", "refused_start", "start_server"]
