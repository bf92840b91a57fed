"""What tracing costs: tracing off against OpenTelemetry at rate 1, side by side on one server.

The server runs in OpenTelemetry mode, exporting to an OTLP/HTTP receiver in this process
(tests/tracing/otlp_receiver.py, which decodes every export). The trace level is switched
between OFF and TIMESTAMPS through the trace-setting API, in alternating blocks, so both
sides see the same machine. With level OFF the server takes the same path as with no
``--trace-config`` at all (the one check per request).

Reported, per execution mode: p50 latency of ``add_sub`` (one request) and ``bls_sync``
(a request making one BLS call to add_sub) with tracing off and on; the cost per traced
request (add_sub on - off) and per BLS span (the extra cost of bls_sync beyond a traced
request: its call's model and compute spans). Latency only; run on a quiet machine.

``--baseline CHECKOUT`` measures instead what tracing costs when it is off: this checkout's
server and another commit's (a ``git worktree`` of it, served with its ``src`` first on
PYTHONPATH), both started with no ``--trace-config``, side by side, in alternating blocks,
over HTTP and gRPC.

    python benchmarks/tracing_cost.py --rounds 5 --requests 400
    python benchmarks/tracing_cost.py --modes in-process
    git worktree add /tmp/base <commit> && python benchmarks/tracing_cost.py --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from startup import _get, _stop, modelyard_cmd  # noqa: E402
from tests.reference import shared_dir  # noqa: E402
from tests.tracing.otlp_receiver import OtlpReceiver  # noqa: E402

MODELS = ("add_sub", "bls_sync")
MODE_ARGS = {"process": [], "in-process": ["--backend-config", "python,execution-mode=in-process"]}
TIMEOUT_S = 300.0


def _repo(tmp: Path) -> Path:
    shared = shared_dir()
    if shared is None:
        raise SystemExit("shared/ not found (set MODELYARD_SHARED)")
    repo = tmp / "repo"
    repo.mkdir()
    for name in MODELS:
        (repo / name).symlink_to(shared / "bench" / "models" / name)
    return repo


def _inputs(mod: Any = httpclient) -> list[Any]:
    out = []
    for name in ("INPUT0", "INPUT1"):
        inp = mod.InferInput(name, [4], "FP32")
        inp.set_data_from_numpy(np.arange(4, dtype=np.float32))
        out.append(inp)
    return out


def _latencies_us(client: Any, model: str, count: int, mod: Any = httpclient) -> list[float]:
    inputs = _inputs(mod)
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        client.infer(model, inputs)
        times.append((time.perf_counter() - t0) * 1e6)
    return times


def _wait_ready(port: int) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while _get(port, "/v2/health/ready")[0] != 200:
        if time.monotonic() > deadline:
            raise SystemExit("the server did not become ready")
        time.sleep(0.2)


def measure(mode: str, rounds: int, requests: int, receiver: OtlpReceiver) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        trace = [
            "mode=opentelemetry",
            f"opentelemetry,url={receiver.url}",
            "opentelemetry,bsp_schedule_delay=200",
            "rate=1",
        ]
        extra = [a for t in trace for a in ("--trace-config", t)] + MODE_ARGS[mode]
        cmd, env, port = modelyard_cmd(_repo(Path(tmp)), extra)
        proc = subprocess.Popen(
            cmd,
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_ready(port)
            client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
            samples: dict[tuple[str, str], list[float]] = {}
            for model in MODELS:  # warm up both paths
                _latencies_us(client, model, 50)
            for _ in range(rounds):
                for level in ("OFF", "TIMESTAMPS"):
                    client.update_trace_settings(settings={"trace_level": [level]})
                    for model in MODELS:
                        samples.setdefault((model, level), []).extend(
                            _latencies_us(client, model, requests)
                        )
            client.update_trace_settings(settings={"trace_level": ["OFF"]})
            client.close()
        finally:
            _stop(proc)
    p50 = {f"{m}/{lvl}": statistics.median(v) for (m, lvl), v in samples.items()}
    per_request = p50["add_sub/TIMESTAMPS"] - p50["add_sub/OFF"]
    bls_extra = p50["bls_sync/TIMESTAMPS"] - p50["bls_sync/OFF"]
    return {**p50, "per_request_us": per_request, "per_bls_span_us": bls_extra - per_request}


def _start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def measure_off(mode: str, rounds: int, requests: int, baseline: Path) -> dict[str, float]:
    """p50 per (server, protocol, model), tracing off: this checkout against ``baseline``."""
    procs = []
    clients: dict[tuple[str, str], Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        repo = _repo(Path(tmp))
        try:
            for server in ("current", "baseline"):
                cmd, env, port = modelyard_cmd(repo, MODE_ARGS[mode])
                if server == "baseline":
                    env["PYTHONPATH"] = str(baseline / "src")
                procs.append(_start(cmd, env))
                _wait_ready(port)
                grpc_port = int(cmd[cmd.index("--grpc-port") + 1])
                clients[(server, "http")] = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
                clients[(server, "grpc")] = grpcclient.InferenceServerClient(
                    f"127.0.0.1:{grpc_port}"
                )
            mods = {"http": httpclient, "grpc": grpcclient}
            samples: dict[str, list[float]] = {}
            for (_, protocol), client in clients.items():  # warm up every path
                for model in MODELS:
                    _latencies_us(client, model, 50, mods[protocol])
            for _ in range(rounds):
                for protocol in ("http", "grpc"):
                    for server in ("current", "baseline"):
                        for model in MODELS:
                            times = _latencies_us(
                                clients[(server, protocol)], model, requests, mods[protocol]
                            )
                            samples.setdefault(f"{server}/{protocol}/{model}", []).extend(times)
            for client in clients.values():
                client.close()
        finally:
            for proc in procs:
                _stop(proc)
    return {key: statistics.median(v) for key, v in samples.items()}


def main_baseline(args: argparse.Namespace) -> None:
    baseline = Path(args.baseline).resolve()
    if not (baseline / "src" / "modelyard").is_dir():
        raise SystemExit(f"--baseline {baseline}: not a modelyard checkout (no src/modelyard)")
    for mode in args.modes.split(","):
        result = measure_off(mode, args.rounds, args.requests, baseline)
        print(f"\n## {mode}: tracing off (no --trace-config), p50 latency, us, one client")
        print("| protocol | model | this checkout | baseline | this / baseline |")
        print("|---|---|---|---|---|")
        for protocol in ("http", "grpc"):
            for model in MODELS:
                ours = result[f"current/{protocol}/{model}"]
                theirs = result[f"baseline/{protocol}/{model}"]
                print(f"| {protocol} | {model} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modes", default="process,in-process")
    parser.add_argument("--rounds", type=int, default=5, help="OFF/TIMESTAMPS block pairs")
    parser.add_argument("--requests", type=int, default=300, help="requests per model and block")
    parser.add_argument(
        "--baseline",
        metavar="CHECKOUT",
        help="compare tracing off against another commit's checkout (see the docstring)",
    )
    args = parser.parse_args()
    if args.baseline:
        main_baseline(args)
        return
    receiver = OtlpReceiver()
    try:
        for mode in args.modes.split(","):
            result = measure(mode, args.rounds, args.requests, receiver)
            print(f"\n## {mode}  (p50 latency, us; HTTP, one client)")
            print("| model | tracing off | OpenTelemetry rate 1 | on / off |")
            print("|---|---|---|---|")
            for model in MODELS:
                off, on = result[f"{model}/OFF"], result[f"{model}/TIMESTAMPS"]
                print(f"| {model} | {off:.1f} | {on:.1f} | {on / off:.3f} |")
            print(f"\ncost per traced request: {result['per_request_us']:.1f} us")
            print(f"cost per BLS span (beyond the request's): {result['per_bls_span_us']:.1f} us")
        print(f"\n(spans received by the OTLP receiver: {len(receiver.spans)})")
    finally:
        receiver.close()


if __name__ == "__main__":
    main()
