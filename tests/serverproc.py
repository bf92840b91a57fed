"""Start the real modelyard server in a subprocess on port 0 and find its ports.

The server logs Triton-style lines when each endpoint is bound, e.g.
``Started HTTPService at 127.0.0.1:40123``; the ports are read from there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

_STARTED = re.compile(
    r"Started (HTTPService|GRPCInferenceService|Metrics Service) at ([\d.]+):(\d+)"
)
_KEYS = {"HTTPService": "http", "GRPCInferenceService": "grpc", "Metrics Service": "metrics"}


@dataclass
class ServerProcess:
    proc: subprocess.Popen[str]
    ports: dict[str, int] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    eof: threading.Event = field(default_factory=threading.Event)  # all output has been read

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.ports['http']}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.ports['grpc']}"

    @property
    def metrics_url(self) -> str:
        return f"127.0.0.1:{self.ports['metrics']}"

    def output(self) -> str:
        return "".join(self.log)

    def stop(self, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def refused_start(repo: Path, *args: str) -> str:
    """Run ``python -m modelyard serve`` with arguments it must refuse: assert that it exits
    with an error, and return what it wrote to stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", "modelyard", "serve", "--model-repository", str(repo), *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode != 0, proc.stdout + proc.stderr
    return proc.stderr


def start_server(
    repos: Path | list[Path],
    *args: str,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
    expect: tuple[str, ...] = ("http", "grpc", "metrics"),
) -> ServerProcess:
    """Run ``python -m modelyard serve`` on port 0 and wait until every endpoint is bound."""
    cmd = [sys.executable, "-m", "modelyard", "serve"]
    for repo in repos if isinstance(repos, list) else [repos]:
        cmd += ["--model-repository", str(repo)]
    cmd += ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
            "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1",
            *args]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )  # fmt: skip
    server = ServerProcess(proc)
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            server.log.append(line)
            m = _STARTED.search(line)
            if m:
                server.ports[_KEYS[m.group(1)]] = int(m.group(3))
                if all(k in server.ports for k in expect):
                    ready.set()
        server.eof.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout
    while not ready.wait(0.1):
        if time.monotonic() > deadline:
            server.stop()
            raise TimeoutError(f"server did not start in {timeout}s:\n{server.output()}")
    if not all(k in server.ports for k in expect):
        server.stop()
        raise RuntimeError(f"server exited before binding its ports:\n{server.output()}")
    return server
