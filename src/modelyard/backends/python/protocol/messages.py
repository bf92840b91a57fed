"""The messages between the server and a worker process.

Error codes cross the boundary as :class:`modelyard.errors.ErrorCode` members (re-exported
here: the worker part imports the protocol only).
"""

from __future__ import annotations

from modelyard.errors import ErrorCode

__all__ = ["ErrorCode"]
