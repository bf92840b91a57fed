"""Restricted API groups, as Triton's ``--http-restricted-api`` and
``--grpc-restricted-protocol`` define them (Triton's ``restricted_features.h``).

A flag value is ``<group>[,<group>...]:<header>=<value>``: each listed group answers only
requests that carry ``<header>`` with exactly ``<value>`` (HTTP: 403; gRPC: UNAVAILABLE).
A group may appear in one flag value only. For gRPC the header is the metadata key
``triton-grpc-protocol-<header>``. Which endpoint belongs to which group is each frontend's
table; this module holds the names, the parsing and the lookup.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

# Triton's RESTRICTED_CATEGORY_NAMES, in its order.
HEALTH = "health"
METADATA = "metadata"
INFERENCE = "inference"
SHARED_MEMORY = "shared-memory"
MODEL_CONFIG = "model-config"
MODEL_REPOSITORY = "model-repository"
STATISTICS = "statistics"
TRACE = "trace"
LOGGING = "logging"
GROUPS = (
    HEALTH,
    METADATA,
    INFERENCE,
    SHARED_MEMORY,
    MODEL_CONFIG,
    MODEL_REPOSITORY,
    STATISTICS,
    TRACE,
    LOGGING,
)

# modelyard's pseudo-group for the HTTP dashboard (no Triton API; --http-restricted-api
# only). Unless it is restricted itself, the dashboard is guarded by each of the groups
# whose data it shows.
DASHBOARD = "dashboard"
HTTP_GROUPS = (*GROUPS, DASHBOARD)
DASHBOARD_SHOWS = (STATISTICS, MODEL_REPOSITORY, TRACE)

GRPC_HEADER_PREFIX = "triton-grpc-protocol-"


@dataclass(frozen=True)
class Restriction:
    """The header a restricted group expects, and its value (compared exactly)."""

    header: str
    value: str


@dataclass
class Restrictions:
    """The restricted groups of one frontend: group name -> Restriction."""

    groups: dict[str, Restriction] = field(default_factory=dict)

    def get(self, group: str) -> Restriction | None:
        return self.groups.get(group)

    def __bool__(self) -> bool:
        return bool(self.groups)


class RestrictionError(ValueError):
    """A flag value Triton refuses at start-up; the message is Triton's."""


def _split_option(arg: str, option: str) -> tuple[str, str, str]:
    """``<groups>:<header>=<value>`` -> its three parts, each non-empty (Triton's
    ParseGenericConfigOption: the first ':' and the first '=' after it)."""
    colon = arg.find(":")
    equals = arg.find("=", colon + 1) if colon >= 0 else -1
    groups, header, value = arg[:colon], arg[colon + 1 : equals], arg[equals + 1 :]
    if colon < 0 or equals < 0 or not groups or not header or not value:
        raise RestrictionError(
            f"--{option} option format is '<config name>:<setting>=<value>'. Got {arg}"
        )
    return groups, header, value


def parse_restrictions(
    values: Iterable[str],
    option: str,
    kind: str,
    header_prefix: str = "",
    known: tuple[str, ...] = GROUPS,
) -> Restrictions:
    """Parse every value of one flag (``option`` without dashes; ``kind`` is 'api' or
    'protocol', the word Triton's messages use; ``known``: the groups it accepts). Raises
    RestrictionError."""
    restrictions = Restrictions()
    for arg in values:
        names, header, value = _split_option(arg, option)
        for name in names.split(","):
            if name not in known:
                raise RestrictionError(f"unknown restricted {kind} '{name}'")
            if name in restrictions.groups:
                raise RestrictionError(
                    f"restricted {kind} '{name}' can not be specified in multiple config groups"
                )
            restrictions.groups[name] = Restriction(header_prefix + header, value)
    return restrictions
