"""Workers' inboxes (protocol/inbox.py): a BLS reply sent from one worker to another as one
datagram, decoded as the server's frames are; what cannot go that way reports so."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from modelyard.backends.python.protocol import framing, inbox
from modelyard.backends.python.protocol.messages import (
    BlsResponse,
    Response,
    decode_server_message,
)


def _reply(data: bytes) -> BlsResponse:
    return BlsResponse(7, Response([("OUT", "UINT8", (len(data),), data)], {"k": 1}, None), True)


def test_a_reply_reaches_the_inbox_and_decodes(tmp_path: Path) -> None:
    box = inbox.Inbox(str(tmp_path / "w1"))
    a, b = socket.socketpair()
    try:
        chan = framing.BlockingChannel(a, decode_server_message)
        sent = _reply(b"\x01\x02\x03")
        assert inbox.Outbox().send(box.path, sent)
        got = [chan.decode_datagram(d) for d in box.read()]
        assert got == [sent]
        assert box.read() == []  # nothing more waits
    finally:
        box.close()
        a.close()
        b.close()
    assert not (tmp_path / "w1").exists()


def test_what_cannot_go_as_a_datagram_is_refused(tmp_path: Path) -> None:
    box = inbox.Inbox(str(tmp_path / "w1"))
    try:
        out = inbox.Outbox()
        big = np.zeros(inbox.MAX_DATAGRAM, np.uint8).tobytes()
        assert not out.send(box.path, _reply(big))  # too large: through the server
        assert not out.send(str(tmp_path / "gone"), _reply(b"x"))  # no such inbox
        assert box.read() == []
    finally:
        box.close()


def test_inbox_paths_live_in_one_private_folder() -> None:
    path = inbox.inbox_path("12")
    assert path.endswith("/12")
    folder = Path(path).parent
    assert folder.stat().st_mode & 0o777 == 0o700
    assert inbox.inbox_path("13") == str(folder / "13")


def test_a_killed_servers_inbox_folder_is_swept(tmp_path: Path) -> None:
    code = "import os; print(os.getpid())"
    dead = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    left = Path(tempfile.gettempdir()) / f"modelyard-inbox-{dead.stdout.strip()}-test"
    left.mkdir()
    (left / "3").touch()
    inbox._sweep()
    assert not left.exists()
    assert Path(inbox.inbox_path("1")).parent.exists()  # this process's own folder stays
