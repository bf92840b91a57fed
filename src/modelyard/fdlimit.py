"""Raise the soft open-file limit to the hard limit at start.

Every HTTP and gRPC connection, worker pipe and shared-memory region takes a file
descriptor; the common soft limit of 1,024 runs out long before the hard limit does. The
server raises the soft limit as far as the hard limit (and the kernel's ``nr_open``) allow,
once, before it opens anything; worker processes inherit it.
"""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("modelyard")

_NR_OPEN = "/proc/sys/fs/nr_open"


def _nr_open() -> int | None:
    try:
        with open(_NR_OPEN) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def raise_fd_limit() -> int:
    """Raise RLIMIT_NOFILE's soft limit towards the hard one; return the soft limit now in
    force (0 where the platform has no such limit)."""
    if sys.platform == "win32":
        return 0
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if target == resource.RLIM_INFINITY:  # Linux refuses an infinite soft limit here
        target = _nr_open() or soft
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("raised the open-file limit from %d to %d", soft, target)
            soft = target
        except (ValueError, OSError) as e:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, e)
    return int(soft) if soft != resource.RLIM_INFINITY else 1 << 20
