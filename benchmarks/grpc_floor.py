"""gRPC cost step by step: grpcio's floor, modelyard's gRPC frontend, the whole server, Triton.

Starts every server at once on free ports (an idle server costs nothing) and measures them in
turn, the order reversing from one round to the next, so a busy machine's drift hits all alike:

* ``floor``: grpc.aio on uvloop whose ModelInfer parses the request and returns a prebuilt
  response (``grpc_canned.py aio``), in the gRPC environment ``modelyard serve`` sets
  (``GRPC_EXPERIMENTS``...): the least any grpc.aio server can cost;
* ``floor-default``: the same in grpcio's default environment;
* ``pool``: the canned answer from grpcio's thread-pool server;
* ``frontend``: modelyard's gRPC frontend (servicer, request decoding, response encoding) on a
  core that answers at once (``grpc_canned.py frontend``);
* ``modelyard``, ``modelyard-inproc``: the whole server running the real model, in process
  mode (the default) and in-process mode;
* ``triton``: the reference Triton 2.51 running the real model.

    python benchmarks/grpc_floor.py latency [--rounds 10] [--requests 300] [--model add_sub]
    python benchmarks/grpc_floor.py throughput [--rounds 3] [--seconds 8] [--concurrency 16]

``latency``: one request at a time from tritonclient's sync gRPC client, a block of
``--requests`` per server per round; the p50 of each block, median over the rounds, and the
server's CPU per request (its process and children, from /proc). ``throughput``: the suite's
closed loop (tritonclient.grpc.aio, 2 client processes, ``--concurrency`` requests in flight)
for ``--seconds`` per server per round. ``--servers`` picks some (comma-separated keys).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.reference import free_ports, shared_dir  # noqa: E402

from modelyard.cli.grpc_environment import apply_grpc_environment  # noqa: E402

READY_TIMEOUT_S = 180.0
SERVERS = ["floor-default", "floor", "pool", "frontend", "modelyard-inproc", "modelyard", "triton"]
LABELS = {
    "floor-default": "grpc.aio, canned answer, grpcio's default environment",
    "floor": "grpc.aio, canned answer (the floor)",
    "pool": "grpc thread pool, canned answer",
    "frontend": "modelyard's gRPC frontend, canned core",
    "modelyard-inproc": "modelyard, in-process mode",
    "modelyard": "modelyard, process mode",
    "triton": "Triton 2.51",
}
Started = tuple[subprocess.Popen[Any], str]


def _shared() -> Path:
    shared = shared_dir()
    if shared is None:
        raise SystemExit("shared/ not found: set MODELYARD_SHARED")
    return shared


def _modelyard_env() -> dict[str, str]:
    env = dict(os.environ)
    apply_grpc_environment(env)  # as `modelyard serve` does
    return env


def _wait_ready(proc: subprocess.Popen[Any], url: str, model: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server for {url} exited with {proc.returncode}")
        try:
            if grpcclient.InferenceServerClient(url).is_model_ready(model):
                return
        except Exception:  # not up yet
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the server for {url} did not become ready")


def _start_canned(kind: str, model: str, env: dict[str, str]) -> Started:
    (port,) = free_ports(1)
    cmd = [sys.executable, str(HERE / "grpc_canned.py"), kind, str(port), model]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError(f"the canned {kind} server did not start")
    return proc, f"127.0.0.1:{port}"


def _start_modelyard(model: str, extra: list[str]) -> Started:
    grpc_port, http_port, metrics_port = free_ports(3)
    cmd = [
        sys.executable,
        "-m",
        "modelyard",
        "serve",
        "--model-repository",
        str(_shared() / "bench" / "models"),
        "--model-control-mode",
        "explicit",
        "--load-model",
        model,
        "--grpc-port",
        str(grpc_port),
        "--http-port",
        str(http_port),
        "--metrics-port",
        str(metrics_port),
        *extra,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"127.0.0.1:{grpc_port}"
    _wait_ready(proc, url, model)
    return proc, url


def _start_triton(model: str) -> Started:
    http_port, grpc_port, metrics_port = free_ports(3)
    env = {
        **os.environ,
        "REF_HTTP_PORT": str(http_port),
        "REF_GRPC_PORT": str(grpc_port),
        "REF_METRICS_PORT": str(metrics_port),
    }
    shared = _shared()
    cmd = [
        str(shared / "reference" / "triton"),
        "serve",
        str(shared / "bench" / "models"),
        "--model-control-mode",
        "explicit",
        "--load-model",
        model,
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"127.0.0.1:{grpc_port}"
    _wait_ready(proc, url, model)
    return proc, url


def _starters(model: str) -> dict[str, Callable[[], Started]]:
    default_env = {**os.environ, "GRPC_EXPERIMENTS": ""}
    inproc = ["--backend-config", "python,execution-mode=in-process"]
    return {
        "floor-default": lambda: _start_canned("aio", model, default_env),
        "floor": lambda: _start_canned("aio", model, _modelyard_env()),
        "pool": lambda: _start_canned("pool", model, _modelyard_env()),
        "frontend": lambda: _start_canned("frontend", model, _modelyard_env()),
        "modelyard-inproc": lambda: _start_modelyard(model, inproc),
        "modelyard": lambda: _start_modelyard(model, []),
        "triton": lambda: _start_triton(model),
    }


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and every process below it."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in os.listdir(f"/proc/{p}/task"):
                todo += [
                    int(c) for c in Path(f"/proc/{p}/task/{task}/children").read_text().split()
                ]
        except OSError:  # exited meanwhile
            pass
    return total


def _inputs(module: Any, model: str) -> list[Any]:
    shape = [1, 4] if model == "add_sub_batched" else [4]
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        inp = module.InferInput(name, shape, "FP32")
        inp.set_data_from_numpy(np.arange(4, dtype=np.float32).reshape(shape))
        inputs.append(inp)
    return inputs


def _latency_block(client: Any, model: str, inputs: list[Any], count: int) -> float:
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        client.infer(model, inputs)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _client(url: str, model: str, tasks: int, start: float, stop: float, out: Any) -> None:
    import tritonclient.grpc.aio as grpcaio

    async def main() -> int:
        client = grpcaio.InferenceServerClient(url)
        inputs = _inputs(grpcaio, model)
        done = 0

        async def loop() -> None:
            nonlocal done
            while time.time() < stop:
                await client.infer(model, inputs)
                if start <= time.time() < stop:
                    done += 1

        await asyncio.gather(*(loop() for _ in range(tasks)))
        await client.close()
        return done

    out.put(asyncio.run(main()))


def _throughput(
    url: str, model: str, concurrency: int, seconds: float, pid: int
) -> tuple[float, float]:
    # spawn, not fork: this process has used grpc (readiness checks), and a forked child of
    # it can hang in grpc.
    ctx = mp.get_context("spawn")
    out: Any = ctx.Queue()
    start = time.time() + 3.0
    stop = start + seconds
    procs = [
        ctx.Process(target=_client, args=(url, model, concurrency // 2, start, stop, out))
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    time.sleep(max(0.0, start - time.time()))
    cpu0 = _cpu_seconds(pid)
    time.sleep(seconds)
    cpu = _cpu_seconds(pid) - cpu0
    total: int = sum(out.get(timeout=seconds + 60) for _ in procs)
    for p in procs:
        p.join(30)
    return total / seconds, cpu / max(total, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["latency", "throughput"])
    parser.add_argument("--rounds", type=int, default=0, help="default: latency 10, throughput 3")
    parser.add_argument("--requests", type=int, default=300, help="latency: requests per block")
    parser.add_argument("--seconds", type=float, default=8.0, help="throughput: per measurement")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--model", default="", help="default: latency add_sub, throughput add_sub_batched"
    )
    parser.add_argument(
        "--servers", default="", help=f"comma-separated subset of {','.join(SERVERS)}"
    )
    args = parser.parse_args()
    latency = args.mode == "latency"
    rounds = args.rounds or (10 if latency else 3)
    model = args.model or ("add_sub" if latency else "add_sub_batched")
    default = [s for s in SERVERS if s != "pool"] if latency else SERVERS
    keys = args.servers.split(",") if args.servers else default
    unknown = set(keys) - set(SERVERS)
    if unknown:
        raise SystemExit(f"unknown servers: {', '.join(sorted(unknown))}")

    starters = _starters(model)
    running: dict[str, Started] = {}
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in keys}
    try:
        for key in keys:
            running[key] = starters[key]()
        for r in range(rounds):
            for key in keys if r % 2 == 0 else keys[::-1]:
                proc, url = running[key]
                if latency:
                    client = grpcclient.InferenceServerClient(url)
                    inputs = _inputs(grpcclient, model)
                    if r == 0:
                        _latency_block(client, model, inputs, 200)  # warm up
                    cpu0 = _cpu_seconds(proc.pid)
                    p50 = _latency_block(client, model, inputs, args.requests)
                    cpu = (_cpu_seconds(proc.pid) - cpu0) / args.requests
                    client.close()
                    samples[key].append((p50 * 1e6, cpu * 1e6))
                    print(f"round {r + 1}: {key}: p50 {p50 * 1e6:,.0f} µs", flush=True)
                else:
                    rate, cpu = _throughput(url, model, args.concurrency, args.seconds, proc.pid)
                    samples[key].append((rate, cpu * 1e6))
                    print(f"round {r + 1}: {key}: {rate:,.0f} req/s", flush=True)
    finally:
        for proc, _ in running.values():
            proc.terminate()
        for proc, _ in running.values():
            proc.wait(30)
    _report(samples, latency, rounds, model, args)


def _report(
    samples: dict[str, list[tuple[float, float]]],
    latency: bool,
    rounds: int,
    model: str,
    args: argparse.Namespace,
) -> None:
    value = {k: statistics.median(v for v, _ in s) for k, s in samples.items()}
    cpu = {k: statistics.median(c for _, c in s) for k, s in samples.items()}
    refs = [k for k in ("floor", "triton") if k in value]
    what = (
        f"{model} p50 µs, {args.requests} sequential requests"
        if latency
        else f"{model} req/s at {args.concurrency} clients"
    )
    print(
        f"\n| server | {what}, median of {rounds} | "
        + " | ".join(f"/ {r}" for r in refs)
        + " | server CPU µs/request |"
    )
    print("|---|---|" + "---|" * len(refs) + "---|")
    for key in samples:
        ratios = " | ".join(f"{value[key] / value[r]:.2f}" for r in refs)
        print(f"| {LABELS[key]} | {value[key]:,.0f} | {ratios} | {cpu[key]:,.0f} |")


if __name__ == "__main__":
    main()
