"""The worker launcher (backends/python/server/child_process.py): a real process's exit code,
a kill, and several waiters on one exit."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from modelyard.backends.python.server import child_process

BOUND_S = 60.0


def test_the_exit_code_reaches_every_waiter() -> None:
    async def main() -> list[int]:
        child = child_process.spawn([sys.executable, "-c", "raise SystemExit(3)"], None, ())
        first, second = await asyncio.wait_for(asyncio.gather(child.wait(), child.wait()), BOUND_S)
        return [first, second]

    assert asyncio.run(main()) == [3, 3]


def test_a_kill_is_reported_as_the_signal() -> None:
    async def main() -> tuple[int | None, int, int | None]:
        child = child_process.spawn([sys.executable, "-c", "import time; time.sleep(600)"],
                                    None, ())  # fmt: skip
        before = child.returncode
        child.kill()
        code = await asyncio.wait_for(child.wait(), BOUND_S)
        child.kill()  # a second kill of an ended process is harmless
        return before, code, child.returncode

    assert asyncio.run(main()) == (None, -signal.SIGKILL, -signal.SIGKILL)


def test_a_passed_descriptor_stays_open_in_the_child() -> None:
    read, write = os.pipe()

    async def main() -> int:
        code = f"import os; os.write({write}, b'hi')"
        child = child_process.spawn([sys.executable, "-c", code], None, (write,))
        return await asyncio.wait_for(child.wait(), BOUND_S)

    try:
        assert asyncio.run(main()) == 0
        assert os.read(read, 2) == b"hi"
    finally:
        os.close(read)
        os.close(write)
