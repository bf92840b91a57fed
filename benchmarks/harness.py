"""What soak.py and crash_load.py share: a modelyard server on free ports over a repository
of the examples' ``add_sub`` and ``bls_add_sub``, closed-loop client processes (the real
tritonclient) that check every answer, and the server's resource figures from /proc."""

from __future__ import annotations

import http.client
import multiprocessing as mp
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
EXAMPLES = REPO_ROOT / "examples" / "model_repository"
sys.path.insert(0, str(REPO_ROOT))

from tests.reference import free_ports  # noqa: E402

READY_TIMEOUT_S = 120.0


def build_repository(root: Path, names: tuple[str, ...] = ("add_sub", "bls_add_sub")) -> Path:
    """Copies of the examples ``names`` (the BLS model ``bls_add_sub`` calls ``add_sub``)."""
    for name in names:
        shutil.copytree(EXAMPLES / name, root / name)
    return root


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    http_port: int
    grpc_port: int
    log_path: Path

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def start_server(repo: Path, extra: str, log_path: Path) -> Server:
    """modelyard on ``repo`` with this interpreter; waits until it is ready."""
    http_port, grpc_port, metrics_port = free_ports(3)
    cmd = [sys.executable, "-m", "modelyard", "serve", "--model-repository", str(repo),
           "--http-port", str(http_port), "--grpc-port", str(grpc_port),
           "--metrics-port", str(metrics_port), "--http-address", "127.0.0.1",
           "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1", *shlex.split(extra)]  # fmt: skip
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = Server(proc, http_port, grpc_port, log_path)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while get(http_port, "/v2/health/ready") != 200:
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"modelyard did not become ready; its log: {log_path}")
        time.sleep(0.05)
    return server


def get(port: int, path: str) -> int:
    """The HTTP status of GET ``path`` (0 when nothing answers)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status
    except (OSError, http.client.HTTPException):
        return 0
    finally:
        conn.close()


# -- the server's resources --------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def workers(pid: int) -> list[int]:
    """The model worker processes the server ``pid`` runs (their argv names it)."""
    marker = f"modelyard-{pid}-".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return sorted(found)


# -- clients -----------------------------------------------------------------------------------


@dataclass
class Counters:
    """Shared between the client processes and the parent."""

    ok: Any
    failed: Any
    wrong: Any
    stop: Any

    @classmethod
    def make(cls) -> Counters:
        return cls(mp.Value("q", 0), mp.Value("q", 0), mp.Value("q", 0), mp.Event())


def client_loop(url: str, protocol: str, model: str, counters: Counters, seed: int) -> None:
    """Closed loop until ``counters.stop``: one request at a time, every answer checked."""
    if protocol == "grpc":
        import tritonclient.grpc as client_mod
    else:
        import tritonclient.http as client_mod  # type: ignore[no-redef]
    from tritonclient.utils import InferenceServerException

    client: Any = client_mod.InferenceServerClient(url)
    rng = np.random.default_rng(seed)
    while not counters.stop.is_set():
        a = rng.random(4, dtype=np.float32)
        b = rng.random(4, dtype=np.float32)
        inputs = []
        for name, value in (("INPUT0", a), ("INPUT1", b)):
            x = client_mod.InferInput(name, [4], "FP32")
            x.set_data_from_numpy(value)
            inputs.append(x)
        try:
            result = client.infer(model, inputs)
        except InferenceServerException:
            with counters.failed.get_lock():
                counters.failed.value += 1
            continue
        good = np.allclose(result.as_numpy("OUTPUT0"), a + b) and np.allclose(
            result.as_numpy("OUTPUT1"), a - b
        )
        target = counters.ok if good else counters.wrong
        with target.get_lock():
            target.value += 1


def start_clients(count: int, url: str, protocol: str, model: str,
                  counters: Counters) -> list[mp.Process]:  # fmt: skip
    procs = [mp.Process(target=client_loop, args=(url, protocol, model, counters, i), daemon=True)
             for i in range(count)]  # fmt: skip
    for p in procs:
        p.start()
    return procs


def stop_clients(procs: list[mp.Process], counters: Counters) -> None:
    counters.stop.set()
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
