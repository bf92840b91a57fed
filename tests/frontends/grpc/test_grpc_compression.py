"""``--grpc-infer-response-compression-level``: ModelInfer and ModelStreamInfer responses are
compressed on the wire (what a counting TCP proxy between client and server sees), other
RPCs and the default level are not; tritonclient reads the answers unchanged."""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.conftest import Serving
from tests.helpers import WAIT_S, grpc_inputs, infer_grpc
from tests.serverproc import ServerProcess

ZEROS = {"INPUT0": np.zeros(1 << 18, np.float32)}  # 1 MiB that compresses to almost nothing


class CountingProxy:
    """Forwards TCP connections to ``port`` and counts the bytes the server sends back."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.received = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.port))
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, count: bool) -> None:
        try:
            while data := source.recv(1 << 16):
                if count:
                    with self._lock:
                        self.received += len(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._listener.close()


@pytest.fixture(scope="module", params=["none", "low", "high"])
def server(request: pytest.FixtureRequest, serving: Serving) -> Iterator[ServerProcess]:
    flag = f"--grpc-infer-response-compression-level={request.param}"
    with serving.server(None, flag, models=["py_identity"], endpoints=("grpc",)) as srv:
        yield srv


def _level(server: ServerProcess) -> str:
    for arg in server.proc.args:  # type: ignore[union-attr]
        if str(arg).startswith("--grpc-infer-response-compression-level="):
            return str(arg).split("=", 1)[1]
    raise AssertionError("no level")


def test_infer_responses_are_compressed_at_the_level(server: ServerProcess) -> None:
    proxy = CountingProxy(server.ports["grpc"])
    try:
        with grpcclient.InferenceServerClient(proxy.address) as c:
            result = infer_grpc(c, "py_identity", ZEROS)
            assert np.array_equal(result.as_numpy("OUTPUT0"), ZEROS["INPUT0"])
            after_infer = proxy.received
            answers: queue.Queue[object] = queue.Queue()
            c.start_stream(lambda result, error: answers.put(error or result))
            try:
                c.async_stream_infer("py_identity", grpc_inputs(ZEROS))
                streamed = answers.get(timeout=WAIT_S)
            finally:
                c.stop_stream()
            assert np.array_equal(streamed.as_numpy("OUTPUT0"), ZEROS["INPUT0"])  # type: ignore[attr-defined]
            after_stream = proxy.received - after_infer
    finally:
        proxy.close()
    size = ZEROS["INPUT0"].nbytes
    if _level(server) == "none":
        assert after_infer > size and after_stream > size
    else:
        assert after_infer < size // 10 and after_stream < size // 10
