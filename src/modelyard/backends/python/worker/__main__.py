"""The worker process's entry point:
``python -m modelyard.backends.python.worker FD SHM_PREFIX [INBOX]``.

FD is the worker's end of the socket pair to the server, SHM_PREFIX the name prefix of the
shared-memory segments this worker creates, INBOX the path of its inbox for replies other
workers send it directly (protocol/inbox.py). Everything the worker imports comes from the
worker and protocol parts and ``triton_python_backend_utils``: no server module is loaded.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading

from modelyard.backends.python.protocol.messages import Log
from modelyard.backends.python.worker.stub import Stub


class _ServerLog(logging.Handler):
    """The worker's own log lines (e.g. an error of a decoupled model's background coroutine)
    go to the server log like the model's Logger lines, at their file and line."""

    def __init__(self, stub: Stub) -> None:
        super().__init__()
        self.stub = stub

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level = record.levelno
            pb_level = 2 if level >= logging.ERROR else 1 if level >= logging.WARNING else 0
            if level < logging.INFO:
                pb_level = 3
            text = self.format(record)
            try:
                self.stub.send(Log(pb_level, text, record.pathname, record.lineno))
            except OSError:  # the server is gone: keep the line anyway
                sys.stderr.write(text + "\n")
        except Exception:
            self.handleError(record)


def main() -> None:
    fd = int(sys.argv[1])
    prefix = sys.argv[2]
    inbox = sys.argv[3] if len(sys.argv) > 3 else ""
    # The model sees what Triton's stub (an embedded interpreter) gives it, not our arguments:
    # `unittest.main()` or `argparse` in a model would take them for its own.
    sys.argv = [""]
    # Shutdown is message-driven (as Triton's stub): a Ctrl-C at the terminal reaches the whole
    # process group, and the server finalizes us in order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)
    stub = Stub(sock, prefix, inbox)
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the model's own logging
    own = logging.getLogger("modelyard")
    own.handlers[:] = [_ServerLog(stub)]
    own.propagate = False
    parent = os.getppid()

    def watch_parent() -> None:
        # Exit on our own if the server dies without closing the socket cleanly.
        while True:
            threading.Event().wait(1.0)
            if os.getppid() != parent:
                stub.close()
                os._exit(1)

    threading.Thread(target=watch_parent, name="modelyard-parent-watch", daemon=True).start()
    try:
        stub.run()
    finally:
        stub.close()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
