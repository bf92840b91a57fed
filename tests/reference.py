"""Run the reference Triton Inference Server (2.51, CPU) on a model repository, for tests.

The reference is installed by ``shared/reference/triton install`` into
``~/.cache/modelyard-reference`` (``$REF_HOME`` overrides). Tests that need it call
:func:`reference_available` first and skip when it returns False::

    if not reference_available():
        pytest.skip("reference Triton is not installed")
    ref = start_reference(repo)
    try:
        client = tritonclient.http.InferenceServerClient(ref.http_url)
        ...
    finally:
        ref.stop()

``shared/`` lies beside the repository (``<root>/main`` and ``<root>/shared``; in CI
``<tmp>/p`` and ``<tmp>/shared``) or beside a folder above it (a worktree
``<root>/wt/<name>``); ``$MODELYARD_SHARED`` names it explicitly.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0

_REPO_ROOT = Path(__file__).resolve().parents[1]


def reference_home() -> Path:
    """Where ``shared/reference/triton install`` put Triton and its virtualenv."""
    return Path(os.environ.get("REF_HOME", Path.home() / ".cache" / "modelyard-reference"))


def shared_dir() -> Path | None:
    """The project's ``shared/`` folder, or None when it cannot be found: ``$MODELYARD_SHARED``,
    else a ``shared/`` holding ``reference/triton`` beside the repository or beside any folder
    above it (a git worktree such as ``<root>/wt/<name>`` finds ``<root>/shared``)."""
    candidates: list[Path] = []
    if os.environ.get("MODELYARD_SHARED"):
        candidates.append(Path(os.environ["MODELYARD_SHARED"]))
    for start in (_REPO_ROOT, Path(__file__).absolute().parents[1], Path.cwd()):
        # resolved and as written: the two differ under symlinks
        candidates += [folder / "shared" for folder in start.parents]
    for candidate in candidates:
        if (candidate / "reference" / "triton").is_file():
            return candidate.resolve()
    return None


def reference_script() -> Path | None:
    shared = shared_dir()
    return shared / "reference" / "triton" if shared else None


def reference_available() -> bool:
    """True when the launcher script, the tritonserver binary and its virtualenv all exist."""
    home = reference_home()
    binary = home / "wheel" / "pytriton" / "tritonserver" / "bin" / "tritonserver"
    venv_python = home / "venv" / "bin" / "python"
    return reference_script() is not None and os.access(binary, os.X_OK) and venv_python.exists()


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports that were free a moment ago (bound to port 0 together)."""
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def _accepts(hostport: str, timeout: float = 1.0) -> bool:
    host, port = hostport.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def _http_status(
    hostport: str, path: str, timeout: float = 1.0, headers: dict[str, str] | None = None
) -> int | None:
    host, port = hostport.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


def _grpc_ready(
    hostport: str, headers: dict[str, str] | None = None, options: dict[str, Any] | None = None
) -> bool:
    """The gRPC endpoint answers ServerReady with true (a listening port is not enough: under
    load Triton's gRPC service has refused calls for a moment after its port accepted);
    ``options`` go to the client (TLS: ``ssl``, ``root_certificates``...)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    try:
        with grpcclient.InferenceServerClient(hostport, **(options or {})) as client:
            return bool(client.is_server_ready(headers=headers, client_timeout=2.0))
    except InferenceServerException:
        return False


@dataclass
class ReferenceServer:
    """A running reference Triton; its process is the leader of its own process group."""

    proc: subprocess.Popen[bytes]
    http_port: int
    grpc_port: int
    metrics_port: int
    log_path: Path
    _stopped: bool = field(default=False, repr=False)

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"127.0.0.1:{self.metrics_port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def running(self) -> bool:
        """Whether the server's process has not exited (Triton 2.51 can abort mid-test)."""
        return self.proc.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM the process group, SIGKILL it after ``timeout`` s; returns the exit code."""
        if self._stopped:
            return self.proc.returncode
        self._stopped = True
        self._signal_group(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            self.proc.wait(10)
        # Python-backend stubs may outlive the server by a moment; they share its group.
        self._signal_group(signal.SIGKILL)
        try:
            self.log_path.unlink()
        except OSError:
            pass
        return self.proc.returncode

    def _signal_group(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def start_reference(
    repo: Path | str,
    *args: str,
    timeout: float = READY_TIMEOUT_S,
    ready_headers: dict[str, str] | None = None,
    grpc_options: dict[str, Any] | None = None,
    metrics: bool = True,
) -> ReferenceServer:
    """Start the reference Triton on ``repo`` (extra ``args`` go to tritonserver) on free
    ports, and wait until both endpoints answer that the server is ready (HTTP
    ``/v2/health/ready`` 200 and gRPC ServerReady true) and the metrics port accepts
    connections (at most ``timeout`` s): on a loaded machine Triton's gRPC service can come
    up after HTTP already answers. ``ready_headers`` go with both readiness probes (the
    header a restricted ``health`` API expects; gRPC gets it as a restricted protocol wants
    it, with the ``triton-grpc-protocol-`` prefix). ``grpc_options`` go to the gRPC probe's
    client (a TLS port needs ``ssl=True`` and the certificates). ``metrics=False``: the
    metrics port is not waited for (``--allow-metrics=false``)."""
    script = reference_script()
    if script is None or not reference_available():
        raise RuntimeError(
            "reference Triton is not installed (run shared/reference/triton install)"
        )
    http_port, grpc_port, metrics_port = free_ports(3)
    env = {
        **os.environ,
        "REF_HTTP_PORT": str(http_port),
        "REF_GRPC_PORT": str(grpc_port),
        "REF_METRICS_PORT": str(metrics_port),
    }
    fd, log_name = tempfile.mkstemp(prefix="reference-triton-", suffix=".log")
    with os.fdopen(fd, "wb") as log:
        proc = subprocess.Popen(
            [str(script), "serve", str(repo), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    server = ReferenceServer(proc, http_port, grpc_port, metrics_port, Path(log_name))
    # A restricted gRPC protocol expects its header with this prefix (Triton's convention).
    grpc_headers = {f"triton-grpc-protocol-{k}": v for k, v in (ready_headers or {}).items()}
    deadline = time.monotonic() + timeout
    while True:
        if (
            _http_status(server.http_url, "/v2/health/ready", headers=ready_headers) == 200
            and (not metrics or _accepts(server.metrics_url))
            and _grpc_ready(server.grpc_url, grpc_headers, grpc_options)
        ):
            return server
        if proc.poll() is not None:
            text = server.output()
            server.stop()
            raise RuntimeError(
                f"reference Triton exited with code {proc.returncode}:\n{text[-4000:]}"
            )
        if time.monotonic() > deadline:
            text = server.output()
            server.stop()
            raise TimeoutError(f"reference Triton not ready after {timeout:.0f} s:\n{text[-4000:]}")
        time.sleep(0.2)
