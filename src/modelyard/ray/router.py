"""Sticky routing for sequence models: every request of one sequence (the handle's
``session_id``, the correlation id) goes to the same replica, from any frontend or replica.

Rendezvous hashing over the deployment's live replicas: every router computes the same owner
with no coordination, because all of them see the same replica set. Requests without a
session spread as usual. A key moves only when its replica goes away (its sequences fail, as
on one server when the instance dies); sequence models therefore get a fixed replica count.
"""

from __future__ import annotations

import hashlib

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica


def _weight(key: str, replica: RunningReplica) -> bytes:
    text = f"{key}|{replica.replica_id.unique_id}".encode()
    return hashlib.blake2b(text, digest_size=8).digest()


def owner(key: str, replicas: list[RunningReplica]) -> RunningReplica:
    """The replica that serves ``key``."""
    return max(replicas, key=lambda r: _weight(key, r))


class StickyRouter(RequestRouter):
    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        key = pending_request.metadata.session_id if pending_request is not None else ""
        if not key or not candidate_replicas:
            return [candidate_replicas]
        # The owner among all live replicas, not only those with a free slot: the owner or
        # nobody (the request waits for it).
        best = owner(key, list(self.curr_replicas.values()))
        if pending_request is not None:
            pending_request.routing_context.should_backoff = True
        return [[best]]
