"""Worker processes started with the standard library's ``vfork`` + ``exec``.

The event loop's own spawn (uvloop: libuv's ``uv_spawn``) calls ``fork()``, which runs every
``pthread_atfork`` handler the server's libraries registered. gRPC's child handler, forked
while other threads were inside gRPC ("skipping fork() handlers"), let the child die of
SIGSEGV before it reached ``exec``: about one spawn in a few hundred on a loaded machine,
seen as "Stub process '<m>_autocomplete' is not healthy" on a model load. ``vfork`` runs no
fork handlers and copies no page tables (the server may be large); CPython's ``subprocess``
uses it on Linux whenever no ``preexec_fn`` is given.

The exit is awaited through a pidfd (Linux 5.3+) read by the loop, or a thread elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import Mapping, Sequence


class ChildProcess:
    """One started process: its pid, exit code once known, ``kill()`` and ``await wait()``."""

    def __init__(self, popen: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop):
        self._popen = popen
        self._loop = loop
        self._exited: asyncio.Future[int] | None = None

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        """The exit code (negative: the signal) once the process has ended, else None."""
        return self._popen.poll()

    def kill(self) -> None:
        if self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._popen.kill()

    async def wait(self) -> int:
        """The exit code, once the process has ended (any number of callers may wait)."""
        code = self._popen.poll()
        if code is not None:
            return code
        if self._exited is None:
            self._exited = self._watch()
        return await asyncio.shield(self._exited)

    def _watch(self) -> asyncio.Future[int]:
        loop = self._loop
        try:
            fd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # no pidfd here: a thread waits instead
            return asyncio.ensure_future(asyncio.to_thread(self._popen.wait))
        fut: asyncio.Future[int] = loop.create_future()

        def exited() -> None:  # the pidfd reads ready once the process has ended
            loop.remove_reader(fd)
            os.close(fd)
            if not fut.done():
                fut.set_result(self._popen.wait())

        loop.add_reader(fd, exited)
        return fut


def spawn(
    command: Sequence[str], env: Mapping[str, str] | None, pass_fds: Sequence[int]
) -> ChildProcess:
    """Start ``command`` (stdin, stdout and stderr inherited), keeping ``pass_fds`` open."""
    popen = subprocess.Popen(list(command), env=env, pass_fds=tuple(pass_fds))
    return ChildProcess(popen, asyncio.get_running_loop())
