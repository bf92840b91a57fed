"""``--reuse-grpc-port`` / ``--reuse-http-port``: two servers with the flag listen on one
port (SO_REUSEPORT) and both answer; a server without it cannot have the port."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.conftest import Serving
from tests.reference import free_ports
from tests.serverproc import ServerProcess, refused_start

MODEL = "hdr_params"
IDS = ("yard-a", "yard-b")
CONNECTIONS = 200  # new connections tried until both servers have answered (a bound)


@pytest.fixture(scope="module")
def shared(serving: Serving) -> Iterator[tuple[int, int, list[ServerProcess]]]:
    http_port, grpc_port = free_ports(2)
    flags = (
        f"--http-port={http_port}",
        f"--grpc-port={grpc_port}",
        "--reuse-http-port=true",
        "--reuse-grpc-port=true",
    )
    with ExitStack() as stack:
        servers = [
            stack.enter_context(serving.server(None, *flags, f"--id={name}", models=[MODEL]))
            for name in IDS
        ]
        yield http_port, grpc_port, servers


def answers(ask: Callable[[], str]) -> set[str]:
    """The server ids that answer ``ask`` over new connections, until both have."""
    seen: set[str] = set()
    for _ in range(CONNECTIONS):
        seen.add(ask())
        if seen == set(IDS):
            break
    return seen


def test_two_servers_answer_on_one_grpc_port(shared: tuple[int, int, list[ServerProcess]]) -> None:
    _, grpc_port, servers = shared
    assert all(s.ports["grpc"] == grpc_port for s in servers)

    def ask() -> str:  # a new client: a new connection, which the kernel spreads
        with grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}") as c:
            return str(c.get_server_metadata(client_timeout=10).name)

    assert answers(ask) == set(IDS)


def test_two_servers_answer_on_one_http_port(shared: tuple[int, int, list[ServerProcess]]) -> None:
    http_port, _, servers = shared
    assert all(s.ports["http"] == http_port for s in servers)

    def ask() -> str:
        with httpclient.InferenceServerClient(f"127.0.0.1:{http_port}") as c:
            return str(c.get_server_metadata()["name"])

    assert answers(ask) == set(IDS)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_server_without_the_flag_cannot_have_the_port(
    shared: tuple[int, int, list[ServerProcess]], tmp_path: Path, protocol: str
) -> None:
    http_port, grpc_port, _ = shared
    port = grpc_port if protocol == "grpc" else http_port
    other = "http" if protocol == "grpc" else "grpc"
    err = refused_start(
        tmp_path, f"--{protocol}-port={port}", f"--{other}-port=0", "--metrics-port=0"
    )
    assert "address already in use" in err, err
