"""``--http-header-forward-pattern`` / ``--grpc-header-forward-pattern``: request headers
whose names match a regular expression reach the model as string request parameters, as
Triton 2.51 passes them.

Triton prefixes the pattern with ``(?i)`` and keeps a header when the pattern matches
anywhere in its name (RE2 ``PartialMatch``: ``re.search`` here). The parameter's name is the
header's name as the client wrote it over HTTP (libevhtp keeps its case), and as gRPC
delivers it (HTTP/2 names are lower case), its value the header's value as a string.
Forwarded headers come after the body's parameters: a header named like a body parameter
replaces its value (Triton adds both, and the model's ``json.loads`` keeps the later one).
HTTP forwards on ``/infer`` only (not ``/generate``), in the order the headers came; gRPC on
ModelInfer and ModelStreamInfer, by name (Triton reads gRPC's sorted metadata map).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from modelyard.types import ParamValue

# The ASGI scope's key for the header names as sent (http/connection.py keeps them).
HEADER_NAMES_KEY = "modelyard.header_names"


class PatternError(ValueError):
    """The pattern is not a regular expression."""


@dataclass(frozen=True)
class HeaderForward:
    pattern: str  # as the operator wrote it
    regex: re.Pattern[str]

    @classmethod
    def compile(cls, pattern: str) -> HeaderForward:
        try:
            return cls(pattern, re.compile(pattern, re.IGNORECASE))
        except re.error as e:
            raise PatternError(f"not a regular expression: {e}") from None

    def http(
        self,
        headers: Sequence[tuple[bytes, bytes]],
        names: Sequence[bytes] | None,
        parameters: dict[str, ParamValue],
    ) -> None:
        """Add the matching ``headers`` to ``parameters``; ``names`` are the names as sent
        (same order and length as ``headers``, whose names the HTTP parser lower-cased)."""
        search = self.regex.search
        for i, (lower, value) in enumerate(headers):
            name = (names[i] if names is not None else lower).decode("latin-1")
            if search(name):
                parameters[name] = value.decode("utf-8", "replace")

    def grpc(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> dict[str, ParamValue]:
        """The parameters the call's ``metadata`` forwards, ordered by name."""
        search = self.regex.search
        found: dict[str, ParamValue] = {}
        for key, value in sorted(metadata or (), key=lambda kv: kv[0]):
            if search(key):
                found[key] = value if isinstance(value, str) else value.decode("utf-8", "replace")
        return found
