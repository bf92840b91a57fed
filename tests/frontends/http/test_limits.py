"""Bounded resources of the HTTP frontend, on the real server with low limits: oversized heads
and bodies, a gzip bomb, slow and silent clients, idle keep-alive connections, the connection
cap and the open-file limit. Abusive clients speak raw sockets; after each abuse the real
``tritonclient`` (a fresh connection) must still be served. Timeouts are set short by flag
and waited for with a bound; nothing asserts how long anything took."""

from __future__ import annotations

import json
import resource
import socket
import struct
import zlib
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import Serving
from tests.helpers import http_input, wait_for_log, wait_until
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(180)

BOUND_S = 30.0  # the most any wait for a server-side timeout may take
MAX_INPUT = 65536
MAX_HEADER = 4096
MAX_BODY = 2_000_000


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(
        None, f"--http-max-input-size={MAX_INPUT}", f"--http-max-header-size={MAX_HEADER}",
        f"--http-max-body-size={MAX_BODY}", "--http-read-timeout=1", "--http-idle-timeout=1",
        models=["http_add"], endpoints=("http", "grpc"),
    ) as srv:  # fmt: skip
        yield srv


def _inputs(a: np.ndarray[Any, Any], binary: bool = True) -> list[httpclient.InferInput]:
    return [http_input(name, a, "FP32", binary) for name in ("A", "B")]


def assert_serving(server: ServerProcess) -> None:
    """A real client on a fresh connection gets a correct answer."""
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=BOUND_S)
    try:
        a = np.arange(4, dtype=np.float32)
        result = client.infer("http_add", _inputs(a))
        np.testing.assert_array_equal(result.as_numpy("SUM"), a + a)
    finally:
        client.close()


def _connect(server: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.ports["http"]), timeout=BOUND_S)


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (bounded by the socket timeout)."""
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    return out


def _exchange(server: ServerProcess, data: bytes) -> bytes:
    sock = _connect(server)
    sock.sendall(data)
    return _read_all(sock)


def _status_and_error(raw: bytes) -> tuple[int, str]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)["error"]


def _infer_head(length: int, extra: bytes = b"") -> bytes:
    return (
        b"POST /v2/models/http_add/infer HTTP/1.1\r\nHost: t\r\n"
        + extra
        + b"Content-Length: %d\r\n\r\n" % length
    )


# -- heads and bodies --------------------------------------------------------------------------


def test_oversized_header_through_the_client(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=BOUND_S)
    try:
        with pytest.raises(InferenceServerException) as e:
            client.get_server_metadata(headers={"X-Big": "a" * MAX_HEADER})
        assert e.value.status() == "431"
        assert e.value.message() == (
            f"request header fields exceed the maximum allowed size of {MAX_HEADER} bytes. "
            "Use --http-max-header-size to increase the limit."
        )
    finally:
        client.close()
    assert_serving(server)


def test_oversized_header_still_arriving(server: ServerProcess) -> None:
    """A head that never ends is refused once its bytes pass the limit."""
    raw = _exchange(server, b"GET /v2 HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * (2 * MAX_HEADER))
    assert _status_and_error(raw)[0] == 431
    assert b"connection: close" in raw
    assert_serving(server)


def test_oversized_body_announced(server: ServerProcess) -> None:
    """A Content-Length over the limit is refused before the body is read (the issue's 1 GB
    promise), and the tritonclient sees the 413 with its message."""
    raw = _exchange(server, _infer_head(10**9) + b"{}")
    status, error = _status_and_error(raw)
    assert status == 413
    assert error == (
        f"request body of 1000000000 bytes exceeds the maximum allowed size of {MAX_BODY} "
        "bytes. Use --http-max-body-size to increase the limit."
    )
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=BOUND_S)
    try:
        with pytest.raises(InferenceServerException) as e:
            client.infer("http_add", _inputs(np.zeros(MAX_BODY // 4, np.float32)))
        assert e.value.status() == "413"
    finally:
        client.close()
    assert_serving(server)


def test_oversized_chunked_body(server: ServerProcess) -> None:
    chunk = b"x" * 65536
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(MAX_BODY // len(chunk) + 2)
    )
    head = (
        b"POST /v2/models/http_add/infer HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    sock = _connect(server)
    try:
        sock.sendall(head + chunks)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may close before it has read everything
    raw = _read_all(sock)
    assert _status_and_error(raw) == (
        413,
        f"request body exceeds the maximum allowed size of {MAX_BODY} bytes. "
        "Use --http-max-body-size to increase the limit.",
    )
    assert_serving(server)


def test_max_input_size_caps_json_and_raw_bodies(server: ServerProcess) -> None:
    """--http-max-input-size, with Triton's messages: the JSON part, a JSON input's byte size
    (from its shape) and a raw binary body; binary inputs after the JSON are not capped."""
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=BOUND_S)
    try:
        big = np.zeros(MAX_INPUT // 4 + 1, np.float32)
        with pytest.raises(InferenceServerException) as e:
            client.infer("http_add", _inputs(big, binary=False))
        assert e.value.status() == "400"
        assert e.value.message().startswith("request JSON size of ")
        assert e.value.message().endswith(
            f"bytes exceeds the maximum allowed input size of {MAX_INPUT} bytes. "
            "Use --http-max-input-size to increase the limit."
        )
        result = client.infer("http_add", _inputs(big))  # binary: not capped
        assert result.as_numpy("SUM").shape == big.shape
    finally:
        client.close()
    doc = {"inputs": [{"name": "A", "shape": [MAX_INPUT], "datatype": "FP32", "data": [1.0]}]}
    body = json.dumps(doc).encode()
    status, error = _status_and_error(
        _exchange(server, _infer_head(len(body), b"Connection: close\r\n") + body)
    )
    assert (status, error) == (
        400,
        f"JSON input 'A' has a byte_size ({4 * MAX_INPUT} bytes) that exceeds the maximum "
        f"allowed value of {MAX_INPUT} bytes. Use --http-max-input-size to increase the limit.",
    )
    raw_body = bytes(MAX_INPUT + 1)
    extra = b"Inference-Header-Content-Length: 0\r\nConnection: close\r\n"
    status, error = _status_and_error(
        _exchange(server, _infer_head(len(raw_body), extra) + raw_body)
    )
    assert (status, error) == (
        400,
        f"Raw input has a byte_size ({MAX_INPUT + 1} bytes) that exceeds the maximum allowed "
        f"value of {MAX_INPUT} bytes. Use --http-max-input-size to increase the limit.",
    )


# -- compression -------------------------------------------------------------------------------


def _gzip_bomb(inflated_mib: int) -> bytes:
    """A valid gzip body of zeros: ~1 KiB per MiB inflated (repeated full-flush blocks)."""
    chunk = bytes(1 << 20)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(inflated_mib):
        crc = zlib.crc32(chunk, crc)
    trailer = struct.pack("<II", crc, (inflated_mib << 20) & 0xFFFFFFFF)
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + block * inflated_mib + c.flush() + trailer


def test_gzip_bomb(server: ServerProcess) -> None:
    """A 1 MiB gzip body that inflates to 1 GiB stops at the limit (checked while inflating)
    with Triton's 400; so does the tritonclient's own gzip of an input too large."""
    bomb = _gzip_bomb(1024)
    assert len(bomb) < 1100 * 1024
    extra = b"Content-Encoding: gzip\r\nConnection: close\r\n"
    status, error = _status_and_error(_exchange(server, _infer_head(len(bomb), extra) + bomb))
    message = (
        f"Decompressed data size exceeds the maximum allowed value of {MAX_INPUT} bytes. "
        "Use --http-max-input-size to increase the limit."
    )
    assert (status, error) == (400, message)
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=BOUND_S)
    try:
        with pytest.raises(InferenceServerException) as e:
            client.infer(
                "http_add", _inputs(np.zeros(MAX_INPUT, np.float32)),
                request_compression_algorithm="gzip",
            )  # fmt: skip
        assert (e.value.status(), e.value.message()) == ("400", message)
        a = np.arange(8, dtype=np.float32)
        result = client.infer("http_add", _inputs(a), request_compression_algorithm="deflate")
        np.testing.assert_array_equal(result.as_numpy("SUM"), a + a)
    finally:
        client.close()


# -- timeouts ----------------------------------------------------------------------------------

_TIMED_OUT = (
    408,
    "no request data received for 1 s; closing the connection. "
    "Use --http-read-timeout to change the limit.",
)


def test_slow_body_is_cut(server: ServerProcess) -> None:
    """A client that promises a body and sends 100 bytes of it gets 408 and is closed."""
    sock = _connect(server)
    sock.sendall(_infer_head(500_000) + b"x" * 100)
    assert _status_and_error(_read_all(sock)) == _TIMED_OUT
    assert_serving(server)


def test_slow_head_and_silent_connection_are_cut(server: ServerProcess) -> None:
    sock = _connect(server)
    sock.sendall(b"GET /v2 HTTP/1.1\r\nHost: t\r\n")  # the head never ends
    assert _status_and_error(_read_all(sock)) == _TIMED_OUT
    assert _status_and_error(_read_all(_connect(server))) == _TIMED_OUT  # never a byte
    assert_serving(server)


def test_idle_keep_alive_connection_is_closed(server: ServerProcess) -> None:
    """After a response, a keep-alive connection that stays idle past --http-idle-timeout is
    closed without a response (the client reconnects)."""
    sock = _connect(server)
    sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n")
    raw = _read_all(sock)  # the 200, then the close
    assert raw.startswith(b"HTTP/1.1 200 ") and raw.count(b"HTTP/1.1") == 1
    assert_serving(server)


# -- connections and file descriptors ----------------------------------------------------------

CAP = 3


@pytest.fixture
def capped(serving: Serving) -> Iterator[ServerProcess]:
    """A server with --http-max-connections=3, started with the soft open-file limit lowered
    to 256 (the server raises it)."""
    with ExitStack() as stack:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
        try:
            srv = stack.enter_context(serving.server(
                None, f"--http-max-connections={CAP}", "--http-read-timeout=2",
                models=["http_add"], endpoints=("http", "grpc"),
            ))  # fmt: skip
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        yield srv


def _open_files_limits(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no 'Max open files' line")


@pytest.mark.skipif(not Path("/proc/self/limits").exists(), reason="needs /proc")
def test_fd_soft_limit_is_raised(capped: ServerProcess) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    soft_now, hard_now = _open_files_limits(capped.proc.pid)
    assert hard_now == hard
    if hard > 256:
        assert soft_now == min(hard, int(Path("/proc/sys/fs/nr_open").read_text()))
        assert "raised the open-file limit from 256 to" in capped.output()


def test_connection_cap_refuses_then_recovers(capped: ServerProcess) -> None:
    """CAP clients that each promise a 1 GB body and send 100 bytes fill the cap: the next
    connection is answered 503 at once (the real client sees it), gRPC keeps serving, and once
    the read timeout has cut the abusers real HTTP clients are served again."""
    abusers = []
    for _ in range(CAP):
        sock = _connect(capped)
        sock.sendall(_infer_head(10**9) + b"x" * 100)
        abusers.append(sock)
    assert _grpc_serving(capped)
    refused = _exchange(capped, b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n")
    assert _status_and_error(refused) == (
        503,
        f"the server has reached its limit of {CAP} open HTTP connections; try again later. "
        "Use --http-max-connections to change the limit.",
    )
    client = httpclient.InferenceServerClient(capped.http_url, network_timeout=BOUND_S)
    try:
        with pytest.raises(InferenceServerException) as e:
            client.get_server_metadata()
        assert e.value.status() == "503"
    finally:
        client.close()
    for sock in abusers:  # each is cut by the read timeout
        assert _status_and_error(_read_all(sock))[0] == 408
    wait_until(lambda: _serving_again(capped), BOUND_S, 0.1, what="the slots to be freed")
    wait_for_log(capped, "HTTP connections refused")
    assert capped.output().count("HTTP connections refused") == 1  # one warning per flood


def _serving_again(server: ServerProcess) -> bool:
    """The server frees the slots as it closes them."""
    try:
        assert_serving(server)
        return True
    except InferenceServerException:
        return False


def _grpc_serving(server: ServerProcess) -> bool:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        return bool(client.is_server_ready(client_timeout=BOUND_S))
    finally:
        client.close()
