"""The BLS pipeline of the shared suite (``pipe_image``: Python preprocessing, a BLS exec() to
the dynamically batched ``pipe_classifier``, postprocessing) on modelyard in both execution
modes and on the reference Triton, servers alternating round after round.

Each server serves ``shared/bench/models`` (``pipe_image`` and ``pipe_classifier`` loaded);
``modelyard bench`` (the load generator, the same client for every server) measures p50 at
concurrency 1 and throughput at concurrency 8, over HTTP and gRPC, with random images.
Printed: the medians per server and the ratios modelyard / Triton.

    python benchmarks/pipeline.py --rounds 3
    python benchmarks/pipeline.py --rounds 1 --duration 3 --servers process,triton
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from startup import _get, _stop, modelyard_cmd, triton_cmd  # noqa: E402
from tests.reference import shared_dir  # noqa: E402

MODELS = ("pipe_classifier", "pipe_image")
READY_S = 180.0
IN_PROCESS = ["--backend-config", "python,execution-mode=in-process"]
SERVERS = ("process", "in-process", "triton")
# (label, protocol, concurrency, what is read from the step's JSON record)
CELLS = (
    ("p50 µs, HTTP, c=1", "http", 1, "p50"),
    ("p50 µs, gRPC, c=1", "grpc", 1, "p50"),
    ("req/s, HTTP, c=8", "http", 8, "throughput"),
    ("req/s, gRPC, c=8", "grpc", 8, "throughput"),
)


def start(server: str, repo: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    load = [f"--load-model={m}" for m in MODELS]
    if server == "triton":
        cmd, env, http = triton_cmd(repo, ["--model-control-mode=explicit", *load])
        grpc = int(env["REF_GRPC_PORT"])
    else:
        extra = ["--model-control-mode=explicit", *load]
        cmd, env, http = modelyard_cmd(repo, extra + (IN_PROCESS if server == "in-process" else []))
        grpc = int(cmd[cmd.index("--grpc-port") + 1])
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + READY_S
    while _get(http, "/v2/models/pipe_image/ready")[0] != 200:
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            raise SystemExit(f"{server} did not get ready")
        time.sleep(0.2)
    return proc, http, grpc


def bench(port: int, protocol: str, concurrency: int, duration: float) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [
            sys.executable, "-m", "modelyard", "bench", "pipe_image", "-u", f"127.0.0.1:{port}",
            "-i", protocol, "--concurrency", str(concurrency), "--duration", str(duration),
            "--warmup", "1", "--json", out.name, "--no-progress",
        ]  # fmt: skip
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        records: list[dict[str, Any]] = json.loads(Path(out.name).read_text())
    return records[0]


def _value(record: dict[str, Any], what: str) -> float:
    if what == "throughput":
        return float(record["throughput"])
    return float(record["p50_us"])


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=5.0, help="seconds per measurement")
    p.add_argument("--servers", default=",".join(SERVERS), help="subset, in alternating order")
    args = p.parse_args()
    shared = shared_dir()
    if shared is None:
        raise SystemExit("cannot find shared/; set MODELYARD_SHARED")
    repo = shared / "bench" / "models"
    order = [s for s in args.servers.split(",") if s]
    samples: dict[tuple[str, str], list[float]] = {}
    for round_no in range(1, args.rounds + 1):
        for server in order:
            proc, http, grpc = start(server, repo)
            try:
                for label, protocol, concurrency, what in CELLS:
                    port = http if protocol == "http" else grpc
                    record = bench(port, protocol, concurrency, args.duration)
                    value = _value(record, what)
                    samples.setdefault((server, label), []).append(value)
                    print(f"round {round_no} {server:10s} {label:20s} {value:10.1f}", flush=True)
            finally:
                _stop(proc)
    print()
    header = (
        "| metric | "
        + " | ".join(order)
        + " | "
        + " | ".join(f"{s} / triton" for s in order if s != "triton")
        + " |"
    )
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for label, *_ in CELLS:
        med = {s: statistics.median(samples[(s, label)]) for s in order}
        ratios = [
            f"{med[s] / med['triton']:.2f}" for s in order if s != "triton" and "triton" in med
        ]
        cells = [f"{med[s]:,.0f}" for s in order]
        print(f"| {label} | " + " | ".join(cells + ratios) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
