"""The server-wide CPU gauges (``--allow-cpu-metrics``), computed as Triton's core computes them.

- ``nv_cpu_utilization``: busy over busy-plus-idle jiffies of ``/proc/stat``'s aggregate line
  between two polls; busy is user, nice, system, irq, softirq and steal, idle is idle and
  iowait (guest time is already counted in user and nice).
- ``nv_cpu_memory_total_bytes`` / ``_used_bytes``: ``/proc/meminfo``'s MemTotal, and MemTotal
  minus MemAvailable.

Triton polls them on a thread every half ``--metrics-interval-ms`` (its poll loop sleeps
``interval / 2``) and a scrape reads the last values; the metrics endpoint runs the same
timer (:meth:`CpuSampler.run`). A sampler nobody runs (another frontend's ``/metrics``) polls
at each scrape instead.
"""

from __future__ import annotations

import asyncio


class CpuSampler:
    """The last polled CPU utilization and memory."""

    def __init__(self) -> None:
        self._last = read_cpu_times()
        self._timed = False
        self.utilization = 0.0
        self.memory_total, self.memory_used = read_memory()

    def poll(self) -> None:
        now = read_cpu_times()
        if now is not None and self._last is not None:
            busy = sum(max(0, a - b) for a, b in zip(now[0], self._last[0], strict=True))
            idle = sum(max(0, a - b) for a, b in zip(now[1], self._last[1], strict=True))
            if busy + idle:  # (no jiffy passed: keep the last value)
                self.utilization = busy / (busy + idle)
        if now is not None:
            self._last = now
        self.memory_total, self.memory_used = read_memory()

    def current(self) -> tuple[float, int, int]:
        """(utilization, total bytes, used bytes): the timer's last poll, or a poll now."""
        if not self._timed:
            self.poll()
        return self.utilization, self.memory_total, self.memory_used

    async def run(self, interval_ms: float) -> None:
        """Poll every ``interval_ms / 2`` until cancelled (Triton's poll loop)."""
        self._timed = True
        try:
            while True:
                await asyncio.sleep(max(interval_ms, 1.0) / 2000.0)
                self.poll()
        finally:
            self._timed = False


Jiffies = tuple[tuple[int, ...], tuple[int, ...]]


def read_cpu_times(path: str = "/proc/stat") -> Jiffies | None:
    """((user, nice, system, irq, softirq, steal), (idle, iowait)) of all CPUs, or None."""
    try:
        with open(path) as f:
            line = f.readline()
        if not line.startswith("cpu "):
            return None
        fields = [int(x) for x in line.split()[1:9]]
    except (OSError, ValueError):
        return None
    fields += [0] * (8 - len(fields))
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    return (user, nice, system, irq, softirq, steal), (idle, iowait)


def read_memory(path: str = "/proc/meminfo") -> tuple[int, int]:
    """(total, used) bytes of RAM; (0, 0) when they cannot be read (Triton's gauges then)."""
    info: dict[str, int] = {}
    try:
        with open(path) as f:
            for line in f:
                key, _, rest = line.partition(":")
                words = rest.split()
                if words:
                    info[key] = int(words[0]) * 1024
    except (OSError, ValueError):
        return 0, 0
    total, available = info.get("MemTotal"), info.get("MemAvailable")
    if total is None or available is None or available > total:
        return 0, 0
    return total, total - available


__all__ = ["CpuSampler", "read_cpu_times", "read_memory"]
