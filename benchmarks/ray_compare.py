"""add_sub and bls_sync on a Ray cluster against modelyard's single-process server and the
reference Triton, side by side in one run; and the cost of one BLS hop across Ray nodes.

The script starts a local two-node Ray cluster (``ray.cluster_utils.Cluster``: node_a, node_b,
each a raylet on this machine) and, round after round, three servers on a copy of the suite's
``add_sub`` and ``bls_sync`` (shared/bench/models; bls_sync calls add_sub with a blocking
exec()):

- ``modelyard``: ``modelyard serve`` (one process, Python models in worker processes);
- ``ray``: ``modelyard serve --ray <cluster>`` with both models pinned to node_a (one node),
  the client talking to node_a's frontend;
- ``triton``: the reference Triton 2.51 (``shared/reference/triton``).

For each: p50 of sequential HTTP requests (add_sub and bls_sync interleaved) and throughput
at concurrency 16 (2 client processes x 8 asyncio tasks of tritonclient.http.aio, closed loop,
every answer checked). Then one more Ray server with add_sub pinned to node_b: bls_sync's p50
minus add_sub's, against the same difference with both on node_a, is the cost of a cross-node
hop (on one host: no network, only the second raylet and object store).

    python benchmarks/ray_compare.py                 # 2 rounds (~6 min on a quiet box)
    python benchmarks/ray_compare.py --quick --skip-triton

Needs ray[serve] (pip install -e ".[test]") and, unless --skip-triton, the reference Triton.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http as httpclient

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from startup import _get, _stop, modelyard_cmd, triton_cmd  # noqa: E402
from tests.reference import shared_dir  # noqa: E402

START_S = 300.0
A = np.array([1, 2, 3, 4], dtype=np.float32)
B = np.array([4, 3, 2, 1], dtype=np.float32)
PIN = 'parameters {{ key: "ray_resources" value: {{ string_value: "{{\\"{node}\\": 0.01}}" }} }}\n'
_FRONTEND = re.compile(r"Started HTTPService at ([\d.]+):(\d+) \(Ray node")


def repository(root: Path, shared: Path, pins: dict[str, str] | None = None) -> Path:
    """add_sub and bls_sync from the suite; ``pins``: model -> Ray node resource."""
    root.mkdir(parents=True)
    for name in ("add_sub", "bls_sync"):
        shutil.copytree(shared / "bench" / "models" / name, root / name,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
        if pins and name in pins:
            with open(root / name / "config.pbtxt", "a") as f:
                f.write(PIN.format(node=pins[name]))
    return root


def _inputs() -> list[httpclient.InferInput]:
    ins = [
        httpclient.InferInput("INPUT0", [4], "FP32"),
        httpclient.InferInput("INPUT1", [4], "FP32"),
    ]
    ins[0].set_data_from_numpy(A)
    ins[1].set_data_from_numpy(B)
    return ins


def _check(result: Any, model: str) -> None:
    if not (np.array_equal(result.as_numpy("OUTPUT0"), A + B)
            and np.array_equal(result.as_numpy("OUTPUT1"), A - B)):  # fmt: skip
        raise RuntimeError(f"{model} answered wrong")


def p50s(url: str, count: int) -> dict[str, float]:
    """p50 (µs) of add_sub and bls_sync, requests sent alternately, every answer checked."""
    client = httpclient.InferenceServerClient(url, network_timeout=120)
    ins = _inputs()
    times: dict[str, list[float]] = {"add_sub": [], "bls_sync": []}
    for i in range(count + 50):
        for model in times:
            t0 = time.perf_counter()
            result = client.infer(model, ins)
            if i >= 50:  # after the warm-up
                times[model].append(time.perf_counter() - t0)
            _check(result, model)
    client.close()
    return {m: statistics.median(t) * 1e6 for m, t in times.items()}


async def _load(url: str, model: str, tasks: int, seconds: float) -> int:
    import tritonclient.http.aio as aioclient

    client = aioclient.InferenceServerClient(url, conn_limit=tasks)
    ins = _inputs()
    done = 0
    stop = time.perf_counter() + seconds

    async def loop() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            _check(await client.infer(model, ins), model)
            done += 1

    await asyncio.gather(*(loop() for _ in range(tasks)))
    await client.close()
    return done


def _load_proc(args: tuple[str, str, int, float]) -> int:
    return asyncio.run(_load(*args))


def throughput(url: str, model: str, seconds: float, procs: int = 2, tasks: int = 8) -> float:
    """Requests per second at concurrency procs x tasks (16), closed loop."""
    _load_proc((url, model, 4, 1.0))  # warm up
    with multiprocessing.get_context("spawn").Pool(procs) as pool:
        t0 = time.perf_counter()
        counts = pool.map(_load_proc, [(url, model, tasks, seconds)] * procs)
        elapsed = time.perf_counter() - t0
    return sum(counts) / elapsed


# Where the CPU goes on the Ray server, by process (matched on the command line).
ROLES = (
    ("frontend actor", "ray::Frontend"),
    ("replica (Serve + modelyard core)", "ray::ServeReplica"),
    ("model worker process", "modelyard.backends.python.worker"),
    ("raylets", "raylet"),
    ("GCS", "gcs_server"),
    ("Serve controller", "ray::ServeController"),
    ("modelyard controller", "ray::Controller"),
)
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_by_role() -> dict[str, float]:
    """CPU seconds used so far by the processes of each role, of this script's cluster only
    (they inherit its RAY_TMPDIR)."""
    out = dict.fromkeys((r for r, _ in ROLES), 0.0)
    ours = f"RAY_TMPDIR={os.environ.get('RAY_TMPDIR', '')}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            if ours not in (proc / "environ").read_bytes().split(b"\0"):
                continue
        except OSError:
            continue
        for role, mark in ROLES:
            if mark in cmd:
                out[role] += (int(fields[11]) + int(fields[12])) / _TICK
                break
    return out


def start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip


def wait_ready(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    t0 = time.perf_counter()
    while _get(port, "/v2/health/ready")[0] != 200:  # (every model: add_sub may load last)
        if proc.poll() is not None or time.perf_counter() - t0 > START_S:
            raise RuntimeError(f"server did not come up; its log: {log}")
        time.sleep(0.1)


def ray_frontend(proc: subprocess.Popen[bytes], log: Path) -> int:
    """The HTTP port of the frontend on the head node (the first address the driver logs)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < START_S:
        m = _FRONTEND.search(log.read_text(errors="replace"))
        if m:
            return int(m.group(2))
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise RuntimeError(f"the Ray server did not start; its log: {log}")


def measure(
    url: str, count: int, seconds: float, costs: dict[str, list[dict[str, float]]] | None = None
) -> dict[str, float]:
    """p50s and c16 throughputs; with ``costs``, the CPU µs per request of each role during
    each model's c16 load (appended under the model's name)."""
    out = {f"{m} p50 µs": v for m, v in p50s(url, count).items()}
    for model in ("add_sub", "bls_sync"):
        before = cpu_by_role() if costs is not None else {}
        rate = throughput(url, model, seconds)
        out[f"{model} c16 req/s"] = rate
        if costs is not None:
            after, requests = cpu_by_role(), rate * seconds
            costs.setdefault(model, []).append(
                {r: (after[r] - before[r]) / requests * 1e6 for r in after}
            )
    return out


def run_plain(
    make: Any, repo: Path, logs: Path, name: str, count: int, seconds: float
) -> dict[str, float]:
    cmd, env, port = make(repo, [])
    log = logs / f"{name}.log"
    proc = start(cmd, env, log)
    try:
        wait_ready(proc, port, log)
        return measure(f"127.0.0.1:{port}", count, seconds)
    finally:
        _stop(proc)


def run_ray(address: str, repo: Path, logs: Path, name: str, count: int, seconds: float,
            hop_only: bool = False, costs: Any = None,
            extra: tuple[str, ...] = ()) -> dict[str, float]:  # fmt: skip
    cmd = [sys.executable, "-m", "modelyard", "serve", "--model-repository", str(repo),
           "--ray", address, "--ray-replica-cpus", "0", "--http-port", "0", "--grpc-port", "0",
           "--metrics-port", "0", "--ray-frontend-resource", "node_a",
           "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
           "--metrics-address", "127.0.0.1", *extra]  # fmt: skip
    log = logs / f"{name}.log"
    proc = start(cmd, dict(os.environ), log)
    try:
        port = ray_frontend(proc, log)
        wait_ready(proc, port, log)
        url = f"127.0.0.1:{port}"
        if hop_only:
            return {f"{m} p50 µs": v for m, v in p50s(url, count).items()}
        return measure(url, count, seconds, costs)
    finally:
        _stop(proc)


def start_cluster(tmp: Path) -> Any:
    os.environ["RAY_TMPDIR"] = str(tmp)
    os.environ.pop("GRPC_EXPERIMENTS", None)
    from ray.cluster_utils import Cluster

    common: dict[str, Any] = {"num_cpus": 2, "object_store_memory": 256 << 20}
    cluster = Cluster(initialize_head=True, head_node_args={
        **common, "resources": {"node_a": 100}, "include_dashboard": False})  # fmt: skip
    cluster.add_node(**common, resources={"node_b": 100})
    return cluster


def table(results: dict[str, list[dict[str, float]]]) -> str:
    names = list(results)
    keys = list(next(iter(results.values()))[0])
    lines = ["| metric | " + " | ".join(names) + " | ray / modelyard | ray / triton |",
             "|---|" + "---|" * (len(names) + 2)]  # fmt: skip
    for key in keys:
        med = {n: statistics.median(r[key] for r in results[n]) for n in names}
        cells = " | ".join(f"{med[n]:,.0f}" for n in names)
        ratio_m = f"{med['ray'] / med['modelyard']:.2f}" if "modelyard" in med else ""
        ratio_t = f"{med['ray'] / med['triton']:.2f}" if "triton" in med else ""
        lines.append(f"| {key} | {cells} | {ratio_m} | {ratio_t} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=1000, help="sequential requests per model")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each c16 load")
    ap.add_argument("--quick", action="store_true", help="1 round, 200 requests, 3 s loads")
    ap.add_argument("--skip-triton", action="store_true")
    ap.add_argument("--skip-modelyard", action="store_true")
    ap.add_argument(
        "--ray-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment of the Ray cluster, e.g. RAY_SERVE_THROUGHPUT_OPTIMIZED=1",
    )
    ap.add_argument(
        "--ray-arg",
        action="append",
        default=[],
        metavar="FLAG",
        help="a serve flag for the Ray server, e.g. --ray-arg=--backend-config=python,execution-mode=process",
    )
    args = ap.parse_args()
    for item in args.ray_env:
        key, _, value = item.partition("=")
        os.environ[key] = value  # the cluster's processes inherit it
    if args.quick:
        args.rounds, args.requests, args.seconds = 1, 200, 3.0
    shared = shared_dir()
    if shared is None:
        raise SystemExit("shared/ not found beside the repository (or set MODELYARD_SHARED)")
    tmp = Path(tempfile.mkdtemp(prefix="myrb", dir="/tmp"))
    logs = HERE / "out" / f"ray-{time.strftime('%Y%m%d-%H%M%S')}"
    logs.mkdir(parents=True)
    plain = repository(tmp / "plain", shared)
    one_node = repository(tmp / "one", shared, {"add_sub": "node_a", "bls_sync": "node_a"})
    cross = repository(tmp / "cross", shared, {"add_sub": "node_b", "bls_sync": "node_a"})
    cluster = start_cluster(tmp / "ray")
    try:
        results: dict[str, list[dict[str, float]]] = {"modelyard": [], "ray": []}
        if args.skip_modelyard:
            del results["modelyard"]
        if not args.skip_triton:
            results["triton"] = []
        hops: dict[str, list[float]] = {"same node": [], "cross node": []}
        costs: dict[str, list[dict[str, float]]] = {}
        for rnd in range(args.rounds):
            for name in results:
                if name == "ray":
                    r = run_ray(cluster.address, one_node, logs, f"r{rnd}-ray", args.requests,
                                args.seconds, costs=costs, extra=tuple(args.ray_arg))  # fmt: skip
                    hops["same node"].append(r["bls_sync p50 µs"] - r["add_sub p50 µs"])
                else:
                    make = modelyard_cmd if name == "modelyard" else triton_cmd
                    r = run_plain(make, plain, logs, f"r{rnd}-{name}", args.requests, args.seconds)
                results[name].append(r)
                print(f"round {rnd + 1} {name:9s} " + ", ".join(f"{k} {v:,.0f}" for k, v in r.items()),
                      flush=True)  # fmt: skip
            c = run_ray(cluster.address, cross, logs, f"r{rnd}-cross", args.requests, 0, True,
                        extra=tuple(args.ray_arg))  # fmt: skip
            hops["cross node"].append(c["bls_sync p50 µs"] - c["add_sub p50 µs"])
            print(f"round {rnd + 1} cross-node: bls_sync - add_sub = {hops['cross node'][-1]:,.0f} µs",
                  flush=True)  # fmt: skip
    finally:
        cluster.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(table(results))
    print()
    print("| one BLS hop on Ray (bls_sync p50 - add_sub p50) | µs |")
    print("|---|---|")
    for key, values in hops.items():
        print(f"| {key} | {statistics.median(values):,.0f} |")
    print()
    print("| CPU µs per request at c16 on Ray (one node), by process | add_sub | bls_sync |")
    print("|---|---|---|")
    for role, _ in ROLES:
        cells = [statistics.median(c[role] for c in costs[m]) for m in ("add_sub", "bls_sync")]
        print(f"| {role} | {cells[0]:,.0f} | {cells[1]:,.0f} |")
    print(f"\nserver logs: {logs}")


if __name__ == "__main__":
    main()
