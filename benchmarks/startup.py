"""Startup benchmark: time to ready with 20 Python models, modelyard vs the reference Triton.

Builds a repository of 20 copies of the ``add_sub`` example (``add_sub_00`` ...) in a
temporary folder, then alternately starts modelyard and the reference Triton 2.51 on it,
``--rounds`` times each, and measures the wall time from process start until
``/v2/health/ready`` answers 200 and the repository index lists all 20 models READY. Prints
the median per server and the ratio modelyard / Triton (lower is better; target <= 1.0).

    python benchmarks/startup.py --rounds 3
    python benchmarks/startup.py --rounds 3 --markdown out/startup.md
    python benchmarks/startup.py --models 40 --modelyard-args "--model-load-thread-count 8"

Needs the reference Triton (``shared/reference/triton install``); ``--skip-triton`` measures
modelyard alone. modelyard runs with this interpreter (``sys.executable -m modelyard``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
EXAMPLE = REPO_ROOT / "examples" / "model_repository" / "add_sub"
sys.path.insert(0, str(REPO_ROOT))

from tests.reference import free_ports, reference_available, reference_script  # noqa: E402

POLL_S = 0.01
TIMEOUT_S = 300.0


def build_repository(root: Path, count: int) -> list[str]:
    names = [f"add_sub_{i:02d}" for i in range(count)]
    config = (EXAMPLE / "config.pbtxt").read_text()
    for name in names:
        folder = root / name
        shutil.copytree(EXAMPLE, folder)
        (folder / "config.pbtxt").write_text(config.replace('name: "add_sub"', f'name: "{name}"'))
    return names


def _get(port: int, path: str, method: str = "GET") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request(method, path, body=b"{}" if method == "POST" else None)
        r = conn.getresponse()
        return r.status, r.read()
    except (OSError, http.client.HTTPException):  # not up yet, or not ours (a taken port)
        return 0, b""
    finally:
        conn.close()


def _all_ready(port: int, names: list[str]) -> bool:
    status, body = _get(port, "/v2/repository/index", "POST")
    if status != 200:
        return False
    ready = {m["name"] for m in json.loads(body) if m.get("state") == "READY"}
    return ready >= set(names)


def time_to_ready(cmd: list[str], env: dict[str, str], http_port: int, names: list[str]) -> float:
    """Seconds from spawning ``cmd`` until it is ready with every model; then stop it."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        while True:
            ready = _get(http_port, "/v2/health/ready")[0] == 200 and _all_ready(http_port, names)
            if proc.poll() is not None:  # (checked after: a port it lost may answer for another)
                raise RuntimeError(f"{cmd[0]} exited with {proc.returncode} before it was ready")
            if ready:
                return time.perf_counter() - t0
            if time.perf_counter() - t0 > TIMEOUT_S:
                raise TimeoutError(f"not ready after {TIMEOUT_S:.0f} s: {shlex.join(cmd)}")
            time.sleep(POLL_S)
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
    try:  # stubs/workers share the group; make sure none is left behind
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def modelyard_cmd(repo: Path, extra: list[str]) -> tuple[list[str], dict[str, str], int]:
    http, grpc, metrics = free_ports(3)
    cmd = [sys.executable, "-m", "modelyard", "serve", "--model-repository", str(repo),
           "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
           "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
           "--metrics-address", "127.0.0.1", *extra]  # fmt: skip
    return cmd, dict(os.environ), http


def triton_cmd(repo: Path, extra: list[str]) -> tuple[list[str], dict[str, str], int]:
    script = reference_script()
    if script is None or not reference_available():
        raise SystemExit("reference Triton is not installed (shared/reference/triton install)")
    http, grpc, metrics = free_ports(3)
    env = {**os.environ, "REF_HTTP_PORT": str(http), "REF_GRPC_PORT": str(grpc),
           "REF_METRICS_PORT": str(metrics)}  # fmt: skip
    return [str(script), "serve", str(repo), *extra], env, http


def _measure(make: Any, extra: list[str], repo: Path, names: list[str]) -> float:
    """One timing; retried (on new ports) when the server dies, e.g. a port was taken."""
    for attempt in range(3):
        cmd, env, port = make(repo, extra)
        try:
            return time_to_ready(cmd, env, port, names)
        except RuntimeError as e:
            print(f"  retrying: {e}", flush=True)
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def markdown(times: dict[str, list[float]], models: int) -> str:
    my, tr = times.get("modelyard", []), times.get("triton", [])
    lines = [
        f"Startup: time to ready with {models} Python models (s, median of {len(my)} rounds)",
        "",
        "| server | median | runs |",
        "|---|---|---|",
    ]
    for name, runs in times.items():
        lines.append(f"| {name} | {statistics.median(runs):.2f} | "
                     f"{', '.join(f'{t:.2f}' for t in runs)} |")  # fmt: skip
    if my and tr:
        lines += [
            "",
            f"ratio modelyard / Triton: **{statistics.median(my) / statistics.median(tr):.2f}**",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", type=int, default=20)
    ap.add_argument("--modelyard-args", default="", help="extra modelyard serve flags")
    ap.add_argument("--triton-args", default="", help="extra tritonserver flags")
    ap.add_argument("--skip-triton", action="store_true")
    ap.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="modelyard-startup-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        names = build_repository(repo, args.models)
        servers = {"modelyard": (modelyard_cmd, shlex.split(args.modelyard_args))}
        if not args.skip_triton:
            servers["triton"] = (triton_cmd, shlex.split(args.triton_args))
        times: dict[str, list[float]] = {name: [] for name in servers}
        for rnd in range(args.rounds):
            for name, (make, extra) in servers.items():
                t = _measure(make, extra, repo, names)
                times[name].append(t)
                print(f"round {rnd + 1}: {name:9s} ready in {t:.2f} s", flush=True)
    table = markdown(times, args.models)
    print()
    print(table, end="")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(table)


if __name__ == "__main__":
    main()
