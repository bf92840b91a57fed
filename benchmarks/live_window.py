"""What the dashboard's rolling window (src/modelyard/serving/live.py) costs per request.

``ModelStats.record_success`` feeds it once per request (``record_execution`` once per
batch, ``record_failure`` once per failed request). Measured here, in one process, no
server: ``LiveWindow.success`` against an empty method with the same arguments (the
difference is the window's own work) and against no call at all (its work and the call: what
a request pays), and, for scale, ``record_success`` with the window and with a no-op window.
Rounds alternate the variants; the table gives the minimum and the median.

    python benchmarks/live_window.py --rounds 7 --number 200000
"""

from __future__ import annotations

import argparse
import statistics
import time
import timeit
from collections.abc import Callable

from modelyard.serving.live import LiveWindow
from modelyard.serving.stats import ModelStats


class _NoWindow:
    """A window that does nothing: the call alone."""

    def success(self, t_received: int, t_queued: int, t_start: int, t_end: int) -> None:
        pass


def _success(target: object) -> Callable[[], None]:
    record = target.success  # type: ignore[attr-defined]

    def run() -> None:
        t = time.monotonic_ns()
        record(t - 250_000, t - 200_000, t - 150_000, t)

    return run


def _clock() -> None:
    t = time.monotonic_ns()
    a, b, c = t - 250_000, t - 200_000, t - 150_000  # noqa: F841 - the same arithmetic


def _stats(window: bool) -> Callable[[], None]:
    stats = ModelStats("m", "1")
    if not window:
        stats.live = _NoWindow()  # type: ignore[assignment]

    def run() -> None:
        t = time.monotonic_ns()
        stats.record_success(t - 250_000, t - 200_000, t - 150_000, t, 1)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--number", type=int, default=200_000)
    args = parser.parse_args()
    variants = {
        "no call (clock only)": _clock,
        "empty call (clock + call)": _success(_NoWindow()),
        "LiveWindow.success (clock + call)": _success(LiveWindow()),
        "record_success, window a no-op": _stats(False),
        "record_success with the window": _stats(True),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, run in variants.items():
            samples[name].append(timeit.timeit(run, number=args.number) / args.number * 1e9)
    print(f"{'ns per call':<36} {'min':>8} {'median':>8}")
    for name, values in samples.items():
        print(f"{name:<36} {min(values):8.0f} {statistics.median(values):8.0f}")
    own = min(samples["LiveWindow.success (clock + call)"])
    own -= min(samples["empty call (clock + call)"])
    total = min(samples["LiveWindow.success (clock + call)"])
    total -= min(samples["no call (clock only)"])
    print(f"the window's own work: {own:.0f} ns; with its call, per request: {total:.0f} ns")


if __name__ == "__main__":
    main()
