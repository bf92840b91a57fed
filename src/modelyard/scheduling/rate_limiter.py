"""Triton's rate limiter (``--rate-limit=execution_count``): which model instance may run next
when instances of several models share resources.

Each instance asks for the resources of its group's ``rate_limiter`` (a resource is per device,
counted on the instance's device, unless ``global``) and has a ``priority``. An instance with
work to do is *staged*; staged instances are served in the order of their scaled priority
(executions so far times ``max(priority, 1)``, lowest first; ties in staging order), and the
first of them runs as soon as what it asks for is free: it holds its resources while it runs
a batch and gives them back after. The head of the order waits for its resources even while
others behind it could run (Triton's strict order), so an instance with ``priority: 2`` gets
half the turns of one with ``priority: 1``.

How many of a resource there are: the ``--rate-limit-resource`` counts when any is given (a
resource not named there has none), else the most any registered instance asks for. A
registration that asks for more than there is, or names one resource both global and per
device, is refused with Triton's texts and the model fails to load.

Beyond Triton: after a release every staged instance that fits at the head of the order runs
(Triton starts at most one per event, which can leave free resources idle until the next one).

The limiter is plain state on the event loop: a grant calls its callback synchronously, once
the limiter's own state is consistent, so the callback may stage, release or withdraw.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelInstanceGroup

from modelyard.errors import InvalidArgument

GLOBAL_DEVICE = -2  # Triton's key for global resources
PER_DEVICE = -1  # a --rate-limit-resource without a device: every device has that many
# Triton runs each instance's initialization and its warm-up as payloads through the limiter,
# and both count as executions.
INITIAL_EXECUTIONS = 2
MODES = ("execution_count", "off")
_SIZE_T = 1 << 64

Key = tuple[int, str]  # (device or GLOBAL_DEVICE, resource name)


@dataclass(frozen=True)
class RateLimitSettings:
    """``--rate-limit`` and ``--rate-limit-resource``, as given (Triton's default: off)."""

    mode: str = "off"
    resources: tuple[tuple[str, int, int], ...] = ()  # (name, count, device or PER_DEVICE)

    @property
    def enabled(self) -> bool:
        return self.mode == "execution_count"

    def explicit(self) -> dict[int, dict[str, int]]:
        """device -> name -> count; a resource named twice for a device keeps the smaller count,
        and a negative count wraps as Triton's ``size_t`` does."""
        out: dict[int, dict[str, int]] = {}
        for name, count, device in self.resources:
            count = count % _SIZE_T
            per = out.setdefault(device, {})
            per[name] = min(per.get(name, count), count)
        return out


@dataclass(frozen=True)
class ResourceAsk:
    name: str
    count: int
    is_global: bool = False


@dataclass(frozen=True)
class InstanceLimits:
    """What one instance asks of the limiter."""

    resources: tuple[ResourceAsk, ...] = ()
    priority: int = 0
    device: int = 0


def instance_limits(cfg: Any) -> list[InstanceLimits]:
    """Each instance's limits, in the order the backends create instances
    (``config/placement.py``: group by group, ``count`` each, and on a KIND_GPU group one
    per listed GPU, on that device; CPU and MODEL instances are on device 0, as in Triton)."""
    out: list[InstanceLimits] = []
    for group in cfg.instance_group:
        rl = group.rate_limiter
        asks = tuple(
            ResourceAsk(r.name, int(r.count), bool(getattr(r, "global"))) for r in rl.resources
        )
        gpu = int(group.kind) == ModelInstanceGroup.KIND_GPU and len(group.gpus) > 0
        devices = [int(d) for d in group.gpus] if gpu else [0]
        for _ in range(max(1, int(group.count))):
            out += [InstanceLimits(asks, int(rl.priority), device) for device in devices]
    return out


class Ticket:
    """One registered instance: what it asks, how often it ran, where it is in the cycle
    available -> staged -> allocated -> available."""

    __slots__ = ("asks", "executions", "name", "on_grant", "priority", "seq", "state")

    def __init__(self, name: str, asks: dict[Key, int], priority: int) -> None:
        self.name = name
        self.asks = asks
        self.priority = max(priority, 1)  # 0 counts as 1
        self.executions = INITIAL_EXECUTIONS
        self.state = "available"  # | "staged" | "allocated" | "removed"
        self.seq = 0
        self.on_grant: Callable[[], None] | None = None

    @property
    def scaled_priority(self) -> int:
        return self.executions * self.priority

    def __repr__(self) -> str:
        return f"Ticket({self.name!r}, {self.state}, executions={self.executions})"


def _asks(limits: InstanceLimits) -> dict[Key, int]:
    asks: dict[Key, int] = {}
    for r in limits.resources:  # (a name repeated in one group: the last count, as Triton)
        asks[(GLOBAL_DEVICE if r.is_global else limits.device, r.name)] = r.count
    return asks


class RateLimiter:
    def __init__(self, explicit: Mapping[int, Mapping[str, int]] | None = None) -> None:
        self._explicit = {d: dict(per) for d, per in (explicit or {}).items()}
        self._tickets: list[Ticket] = []
        self._limits: dict[Key, int] = {}
        self._allocated: dict[Key, int] = {}
        self._staged: list[tuple[int, int, Ticket]] = []  # heap: (scaled priority, seq, ticket)
        self._seq = itertools.count(1)

    # -- registration ------------------------------------------------------------------------

    def register(self, names: Sequence[str], limits: Sequence[InstanceLimits]) -> list[Ticket]:
        """Register a version's instances, all or none; InvalidArgument with Triton's text when
        the resources cannot serve them."""
        added: list[Ticket] = []
        try:
            for name, lim in zip(names, limits, strict=True):
                ticket = Ticket(name, _asks(lim), lim.priority)
                self._tickets.append(ticket)
                added.append(ticket)
                self._limits = self._compute_limits()
        except InvalidArgument:
            self.unregister(added)
            raise
        self._allocate()  # more of a resource may be there now
        return added

    def unregister(self, tickets: Iterable[Ticket]) -> None:
        """Forget instances (their version stopped). Resources a running batch still holds come
        back now; its later release is ignored. An instance still waiting for its turn gets it
        at once, without resources, so what waited for it is answered (by a stopping
        instance) rather than left waiting."""
        gone = {id(t) for t in tickets}
        waiting: list[Callable[[], None]] = []
        for ticket in self._tickets:
            if id(ticket) in gone:
                if ticket.state == "allocated":
                    self._give_back(ticket)
                if ticket.state == "staged" and ticket.on_grant is not None:
                    waiting.append(ticket.on_grant)
                ticket.state, ticket.on_grant = "removed", None
        self._tickets = [t for t in self._tickets if id(t) not in gone]
        self._limits = self._compute_limits()  # (fewer asks cannot break what held)
        self._allocate()
        for callback in waiting:
            callback()

    def _compute_limits(self) -> dict[Key, int]:
        most: dict[Key, int] = {}
        for ticket in self._tickets:
            for key, count in ticket.asks.items():
                most[key] = max(most.get(key, 0), count)
        if self._explicit:
            for key in sorted(most):  # Triton's map order: global first, then by device, name
                available = self._explicit_count(key)
                if available < most[key]:
                    raise InvalidArgument(
                        f'Resource count for "{key[1]}" is limited to {available} which will '
                        "prevent scheduling of one or more model instances, the minimum "
                        f"required count is {most[key]}"
                    )
                most[key] = available
        global_names = {name for device, name in most if device == GLOBAL_DEVICE}
        for device, name in sorted(most):
            if device != GLOBAL_DEVICE and name in global_names:
                raise InvalidArgument(
                    f'Resource "{name}" is present as both global and device-specific '
                    "resource in the model configuration."
                )
        return most

    def _explicit_count(self, key: Key) -> int:
        device, name = key
        if device == GLOBAL_DEVICE:  # a global resource takes its count from any device
            found = [per[name] for per in self._explicit.values() if name in per]
        else:
            found = [
                self._explicit[d][name]
                for d in (device, PER_DEVICE)
                if name in self._explicit.get(d, {})
            ]
        return max(found, default=0)

    # -- the cycle ---------------------------------------------------------------------------

    def request(self, ticket: Ticket, on_grant: Callable[[], None]) -> None:
        """Stage an available instance: ``on_grant`` runs when it may execute (possibly now)."""
        if ticket.state != "available":
            raise RuntimeError(f"cannot stage {ticket!r}")
        ticket.state, ticket.on_grant, ticket.seq = "staged", on_grant, next(self._seq)
        heapq.heappush(self._staged, (ticket.scaled_priority, ticket.seq, ticket))
        self._allocate()

    def withdraw(self, ticket: Ticket) -> bool:
        """Unstage an instance that has nothing to run after all; False if it was not staged."""
        if ticket.state != "staged":
            return False
        ticket.state, ticket.on_grant = "available", None
        self._allocate()  # it may have been the head others waited behind
        return True

    @contextmanager
    def released(self, ticket: Ticket, executed: bool = True) -> Iterator[None]:
        """Give an allocated instance's resources back (one more execution when it ran); inside
        the block its scheduler may stage it again, which (as in Triton) happens before the
        freed resources go to the next staged instance."""
        if ticket.state == "allocated":
            self._give_back(ticket)
            ticket.state = "available"
            if executed:
                ticket.executions += 1
        try:
            yield
        finally:
            self._allocate()

    def _give_back(self, ticket: Ticket) -> None:
        for key, count in ticket.asks.items():
            self._allocated[key] -= count

    def _fits(self, ticket: Ticket) -> bool:
        return all(
            self._allocated.get(key, 0) + count <= self._limits.get(key, 0)
            for key, count in ticket.asks.items()
        )

    def _allocate(self) -> None:
        granted: list[Ticket] = []
        staged = self._staged
        while staged:
            _, seq, ticket = staged[0]
            if ticket.state != "staged" or ticket.seq != seq:  # withdrawn or removed meanwhile
                heapq.heappop(staged)
                continue
            if not self._fits(ticket):
                break
            heapq.heappop(staged)
            for key, count in ticket.asks.items():
                self._allocated[key] = self._allocated.get(key, 0) + count
            ticket.state = "allocated"
            granted.append(ticket)
        for ticket in granted:
            callback, ticket.on_grant = ticket.on_grant, None
            if callback is not None:
                callback()

    # -- what tests and the docs look at ------------------------------------------------------

    def limits(self) -> dict[Key, int]:
        return dict(self._limits)

    def allocated(self) -> dict[Key, int]:
        return {key: n for key, n in self._allocated.items() if n}


class Gate:
    """A scheduler's view of the limiter: its instances' tickets, by instance."""

    def __init__(self, limiter: RateLimiter, instances: Sequence[object], tickets: list[Ticket]):
        self.limiter = limiter
        self.tickets = tickets
        self._by_instance = {id(i): t for i, t in zip(instances, tickets, strict=True)}

    def ticket(self, instance: object) -> Ticket:
        return self._by_instance[id(instance)]

    def request(self, instance: object, on_grant: Callable[[], None]) -> None:
        ticket = self._by_instance[id(instance)]
        if ticket.state == "removed":  # the version stopped: what is left runs (and fails) now
            on_grant()
            return
        self.limiter.request(ticket, on_grant)

    def released(self, instance: object, executed: bool = True) -> Any:
        """A context manager: see :meth:`RateLimiter.released`."""
        return self.limiter.released(self._by_instance[id(instance)], executed)

    def preference(self, instance: object) -> int:
        """Lower first: which idle instance of a model the limiter would stage first."""
        return self._by_instance[id(instance)].scaled_priority

    def close(self) -> None:
        """The version stopped: unstage and forget its instances."""
        self.limiter.unregister(self.tickets)
