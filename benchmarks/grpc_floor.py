"""How much gRPC throughput can a grpcio front end serve at all? Measured against Triton.

Starts three servers in turn on free ports and drives each with the same closed loop the
shared suite uses for throughput (tritonclient.grpc.aio, 2 client processes, CONCURRENCY
requests in flight, add_sub_batched's request):

* ``grpc.aio``: a grpcio asyncio server on uvloop (modelyard's stack) whose ModelInfer
  returns a canned add_sub_batched answer without parsing the request or running anything;
* ``grpc thread pool``: the same canned answer from grpcio's thread-pool server;
* ``triton``: the reference Triton 2.51 running the real add_sub_batched.

Rounds alternate the servers. A canned answer is the most any server on that stack can do,
so if it stays below Triton's real model, a Python gRPC front end cannot reach Triton's
throughput on this machine, whatever runs behind it.

    python benchmarks/grpc_floor.py [--rounds 3] [--seconds 8] [--concurrency 16]
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
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("MODELYARD_SHARED", HERE.parent.parent / "shared"))
MODEL = "add_sub_batched"

_CANNED_SERVER = r"""
import asyncio, sys
from concurrent import futures
import grpc, numpy as np
from tritonclient.grpc import service_pb2
r = service_pb2.ModelInferResponse(model_name="add_sub_batched", model_version="1")
for name in ("OUTPUT0", "OUTPUT1"):
    o = r.outputs.add(); o.name = name; o.datatype = "FP32"; o.shape.extend([1, 4])
    r.raw_output_contents.append(np.arange(4, dtype=np.float32).tobytes())
CANNED = r.SerializeToString()
def generic(fn):
    return grpc.method_handlers_generic_handler(
        "inference.GRPCInferenceService", {"ModelInfer": grpc.unary_unary_rpc_method_handler(fn)})
port, kind = sys.argv[1], sys.argv[2]
if kind == "aio":
    import uvloop
    async def infer(request, context):
        return CANNED
    async def main():
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((generic(infer),))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start(); print("ready", flush=True); await server.wait_for_termination()
    uvloop.run(main())
else:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    server.add_generic_rpc_handlers((generic(lambda request, context: CANNED),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start(); print("ready", flush=True); server.wait_for_termination()
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _client(url: str, tasks: int, start: float, stop: float, out: Any) -> None:
    import tritonclient.grpc.aio as grpcaio

    async def main() -> int:
        client = grpcaio.InferenceServerClient(url)
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            inp = grpcaio.InferInput(name, [1, 4], "FP32")
            inp.set_data_from_numpy(np.arange(4, dtype=np.float32).reshape(1, 4))
            inputs.append(inp)
        done = 0

        async def loop() -> None:
            nonlocal done
            while time.time() < stop:
                await client.infer(MODEL, inputs)
                if start <= time.time() < stop:
                    done += 1

        await asyncio.gather(*(loop() for _ in range(tasks)))
        await client.close()
        return done

    out.put(asyncio.run(main()))


def _measure(url: str, concurrency: int, seconds: float) -> float:
    out: Any = mp.Queue()
    start = time.time() + 1.5
    stop = start + seconds
    procs = [mp.Process(target=_client, args=(url, concurrency // 2, start, stop, out))
             for _ in range(2)]  # fmt: skip
    for p in procs:
        p.start()
    total: int = sum(out.get(timeout=seconds + 60) for _ in procs)
    for p in procs:
        p.join(30)
    return total / seconds


def _start_canned(kind: str) -> tuple[subprocess.Popen[str], str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-c", _CANNED_SERVER, str(port), kind],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError(f"the canned {kind} server did not start")
    return proc, f"127.0.0.1:{port}"


def _start_triton() -> tuple[subprocess.Popen[str], str]:
    http, grpc_port, metrics = _free_port(), _free_port(), _free_port()
    env = {**os.environ, "REF_HTTP_PORT": str(http), "REF_GRPC_PORT": str(grpc_port),
           "REF_METRICS_PORT": str(metrics)}  # fmt: skip
    proc = subprocess.Popen(
        [str(SHARED / "reference" / "triton"), "serve", str(SHARED / "bench" / "models"),
         "--model-control-mode", "explicit", "--load-model", MODEL],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    import tritonclient.grpc as grpcclient

    url = f"127.0.0.1:{grpc_port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if grpcclient.InferenceServerClient(url).is_model_ready(MODEL):
                return proc, url
        except Exception:  # not up yet
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("the reference Triton did not become ready")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    starters = {
        "grpc.aio, canned answer": lambda: _start_canned("aio"),
        "grpc thread pool, canned answer": lambda: _start_canned("pool"),
        "triton, real add_sub_batched": _start_triton,
    }
    rates: dict[str, list[float]] = {name: [] for name in starters}
    for r in range(args.rounds):
        for name, start in starters.items():
            proc, url = start()
            try:
                rate = _measure(url, args.concurrency, args.seconds)
            finally:
                proc.terminate()
                proc.wait(30)
            rates[name].append(rate)
            print(f"round {r + 1}: {name}: {rate:,.0f} req/s", flush=True)
    triton = statistics.median(rates["triton, real add_sub_batched"])
    print(f"\n| server (c={args.concurrency}) | req/s, median of {args.rounds} | / Triton |")
    print("|---|---|---|")
    for name, values in rates.items():
        med = statistics.median(values)
        print(f"| {name} | {med:,.0f} | {med / triton:.2f} |")


if __name__ == "__main__":
    main()
