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

As Triton 26.05 does (server#8763, ``src/http_server.cc`` ``ForEachHeader`` and
``src/grpc/infer_handler.h`` ``ForwardHeadersAsParameters``), a matching header named like
one of Triton's reserved parameter keys, or starting with ``triton_`` (compared with the name
as forwarded, case and all), fails the request with INVALID_ARG instead of reaching the model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from modelyard.errors import InvalidArgument
from modelyard.types import ParamValue

# The ASGI scope's key for the header names as sent (http/connection.py keeps them).
HEADER_NAMES_KEY = "modelyard.header_names"

# Triton 26.05's kReservedParameterKeys (src/common.h); "triton_*" is reserved too.
RESERVED_PARAMETER_KEYS = frozenset(
    {
        "sequence_id",
        "sequence_start",
        "sequence_end",
        "priority",
        "timeout",
        "headers",
        "binary_data_output",
    }
)


def check_not_reserved(name: str) -> None:
    """Refuse to forward a header whose name is a reserved parameter key (Triton 26.05)."""
    if name in RESERVED_PARAMETER_KEYS or name.startswith("triton_"):
        raise InvalidArgument(
            f"Header '{name}' is reserved for Triton usage and cannot be forwarded."
        )


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
        (same order and length as ``headers``, whose names the HTTP parser lower-cased).
        Raise InvalidArgument at the first reserved name."""
        search = self.regex.search
        for i, (lower, value) in enumerate(headers):
            name = (names[i] if names is not None else lower).decode("latin-1")
            if search(name):
                check_not_reserved(name)
                parameters[name] = value.decode("utf-8", "replace")

    def grpc(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> dict[str, ParamValue]:
        """The parameters the call's ``metadata`` forwards, ordered by name; raise
        InvalidArgument at the first reserved name."""
        search = self.regex.search
        found: dict[str, ParamValue] = {}
        for key, value in sorted(metadata or (), key=lambda kv: kv[0]):
            if search(key):
                check_not_reserved(key)
                found[key] = value if isinstance(value, str) else value.decode("utf-8", "replace")
        return found
