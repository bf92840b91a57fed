"""A real modelyard server in a subprocess, on free ports, for tests.

``start_server(repository)`` runs ``python -m modelyard serve`` on port 0 for every endpoint,
reads the bound ports from the log lines the server writes once each endpoint listens
(``Started HTTPService at 127.0.0.1:40123``), and by default also waits for the line that
ends the initial model load (the endpoints listen before any model loads: a client that
came earlier would see the server live but not ready). Every wait is bounded.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from modelyard.server import INITIAL_LOAD_DONE

_STARTED = re.compile(
    r"Started (HTTPService|GRPCInferenceService|Metrics Service|OpenAIService"
    r"|Sagemaker HTTPService|Vertex AI HTTPService) at ([\d.]+):(\d+)"
)
_KEYS = {
    "HTTPService": "http",
    "GRPCInferenceService": "grpc",
    "Metrics Service": "metrics",
    "OpenAIService": "openai",  # only with --openai-port
    "Sagemaker HTTPService": "sagemaker",  # only with --allow-sagemaker
    "Vertex AI HTTPService": "vertex",  # only with --allow-vertex-ai
}
ENDPOINTS = ("http", "grpc", "metrics")


@dataclass
class ServerProcess:
    """A server started by :func:`start_server`: its process, bound ports and output so far."""

    proc: subprocess.Popen[str]
    ports: dict[str, int] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    eof: threading.Event = field(default_factory=threading.Event)  # all output has been read
    loaded: threading.Event = field(default_factory=threading.Event)  # initial load is over

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.ports['http']}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.ports['grpc']}"

    @property
    def metrics_url(self) -> str:
        return f"127.0.0.1:{self.ports['metrics']}"

    @property
    def sagemaker_url(self) -> str:
        """SageMaker's endpoint (``--allow-sagemaker``), host:port."""
        return f"127.0.0.1:{self.ports['sagemaker']}"

    @property
    def vertex_url(self) -> str:
        """Vertex AI's endpoint (``--allow-vertex-ai``), host:port."""
        return f"127.0.0.1:{self.ports['vertex']}"

    @property
    def openai_url(self) -> str:
        """The OpenAI API's base URL (``--openai-port``)."""
        return f"http://127.0.0.1:{self.ports['openai']}/v1"

    def output(self) -> str:
        """Everything the server has written so far (stdout and stderr)."""
        return "".join(self.log)

    def wait_for_log(
        self, pattern: str | re.Pattern[str], timeout: float = 30.0, start: int = 0
    ) -> re.Match[str]:
        """The first match of ``pattern`` (a regular expression, or plain text when a str) in
        the output from character ``start`` on, waiting at most ``timeout`` seconds for it;
        AssertionError with the output when it does not come (or the server exits first)."""
        regex = pattern if isinstance(pattern, re.Pattern) else re.compile(re.escape(pattern))
        deadline = time.monotonic() + timeout
        while True:
            ended = self.eof.is_set()  # read before the output: then nothing more can come
            match = regex.search(self.output(), start)
            if match:
                return match
            if ended or time.monotonic() > deadline:
                raise AssertionError(
                    f"no log line matching {regex.pattern!r} after {timeout:g} s:\n{self.output()}"
                )
            time.sleep(0.02)

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def refused_start(repo: Path | str, *args: str, timeout: float = 60.0) -> str:
    """Run ``python -m modelyard serve`` with arguments it must refuse: assert that it exits
    with an error, and return what it wrote to stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", "modelyard", "serve", "--model-repository", str(repo), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode != 0, proc.stdout + proc.stderr
    return proc.stderr


def start_server(
    repos: Path | str | Sequence[Path | str],
    *args: str,
    timeout: float = 60.0,
    env: Mapping[str, str] | None = None,
    expect: tuple[str, ...] = ENDPOINTS,
    wait_for_models: bool = True,
    command: str = "serve",
    exit_on_error: bool = False,
    cwd: Path | str | None = None,
) -> ServerProcess:
    """Run ``python -m modelyard serve`` (or ``dev``: ``command``) on ``repos`` with ``args``,
    every endpoint on port 0 of 127.0.0.1; return once the ``expect`` endpoints listen and,
    with ``wait_for_models``, the initial model load is over. A model that fails to load
    leaves ``serve`` serving the others (``--exit-on-error=false``, so a test can ask it why)
    unless ``exit_on_error`` or ``args`` say otherwise (``dev`` always keeps serving).
    ``cwd``: the folder it runs in (relative repositories are found from there). A server that exits first
    raises RuntimeError, one that takes longer than ``timeout`` seconds TimeoutError (both
    with its output); either way it is stopped."""
    repositories = [repos] if isinstance(repos, (str, Path)) else list(repos)
    cmd = [sys.executable, "-m", "modelyard", command]
    if command == "dev":
        cmd.append(str(repositories.pop(0)))
    for repo in repositories:
        cmd += ["--model-repository", str(repo)]
    for endpoint in ENDPOINTS:
        cmd += [f"--{endpoint}-port", "0", f"--{endpoint}-address", "127.0.0.1"]
    if (
        command == "serve"
        and not exit_on_error
        and not any(a.startswith("--exit-on-error") for a in args)
    ):
        cmd.append("--exit-on-error=false")
    cmd += args
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        cwd=cwd,
    )
    server = ServerProcess(proc)
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            server.log.append(line)
            m = _STARTED.search(line)
            if m:
                server.ports[_KEYS[m.group(1)]] = int(m.group(3))
            elif INITIAL_LOAD_DONE in line:
                server.loaded.set()
            if all(k in server.ports for k in expect) and (
                server.loaded.is_set() or not wait_for_models
            ):
                ready.set()
        server.eof.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(timeout):
        server.stop()
        raise TimeoutError(f"server did not start in {timeout}s:\n{server.output()}")
    if not all(k in server.ports for k in expect):
        server.stop()
        raise RuntimeError(f"server exited before binding its ports:\n{server.output()}")
    if wait_for_models and not server.loaded.is_set():
        server.stop()
        raise RuntimeError(f"server exited before its models loaded:\n{server.output()}")
    return server
