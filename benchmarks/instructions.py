"""Instructions per request, counted by callgrind: a cost measure a busy machine does not blur.

Latency on a shared 2-core box moves 5-10 % from one run to the next; the instructions a
request executes do not. For each ``--src`` (a modelyard checkout's ``src`` folder, e.g. of a
``git worktree`` at another commit) the script runs ``modelyard serve`` under
``valgrind --tool=callgrind`` (worker processes too: ``--trace-children=yes``), loads add_sub
and then ``--model``, warms it up, zeroes the counters of the server and its workers
(``callgrind_control -z``, by pid), sends ``--requests`` sequential requests of ``--model``
through tritonclient, dumps (``callgrind_control -d``) and divides what every process executed
by the number of requests. The client runs natively (not counted).

    python benchmarks/instructions.py --src src --src /tmp/before/src --model add_sub
    python benchmarks/instructions.py --src src --mode in-process --protocol http --model bls_sync

Printed per checkout: thousands of instructions per request, all processes together and the
server process alone. Needs valgrind (``apt-get install valgrind``). Under valgrind a
request takes ~50x its native time, so keep ``--requests`` in the hundreds.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.reference import free_ports, shared_dir  # noqa: E402

READY_S = 600.0  # a server under valgrind loads its models slowly
# (a dump's ``totals:`` line runs a fixed few million over its events' sum: ``summary:``)
_SUMMARY = re.compile(r"^summary:\s+(\d+)", re.M)


def _inputs(protocol: str) -> list[object]:
    if protocol == "grpc":
        import tritonclient.grpc as client
    else:
        import tritonclient.http as client
    ins = [client.InferInput("INPUT0", [4], "FP32"), client.InferInput("INPUT1", [4], "FP32")]
    ins[0].set_data_from_numpy(np.array([1, 2, 3, 4], np.float32))
    ins[1].set_data_from_numpy(np.array([4, 3, 2, 1], np.float32))
    return ins


def _client(protocol: str, url: str) -> object:
    if protocol == "grpc":
        import tritonclient.grpc as grpcclient

        return grpcclient.InferenceServerClient(url)
    import tritonclient.http as httpclient

    return httpclient.InferenceServerClient(url, connection_timeout=60, network_timeout=60)


def _callgrind_control(flag: str, pids: list[int]) -> None:
    """``-z`` zeroes, ``-d`` dumps the counters of ``pids`` (by pid: without one,
    callgrind_control reaches every callgrind process on the machine, others' runs too)."""
    for pid in pids:
        subprocess.run(
            ["callgrind_control", flag, str(pid)],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the server and its model workers)."""
    found = [pid]
    for children in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            kids = Path(children).read_text().split()
        except OSError:
            continue
        for kid in kids:
            found += _tree(int(kid))
    return found


def measure(src: Path, args: argparse.Namespace, out: Path) -> tuple[float, float]:
    """(all processes, server alone) in instructions per request."""
    http, grpc, metrics = free_ports(3)
    cmd = [
        sys.executable, "-m", "modelyard", "serve",
        "--model-repository", str(args.models),
        # add_sub (what bls_sync calls) first, the model after it: two workers starting at
        # once under valgrind on a busy box can miss their start timeout.
        "--model-control-mode", "explicit", "--load-model", "add_sub",
        "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
    ]  # fmt: skip
    if args.mode == "in-process":
        cmd += ["--backend-config", "python,execution-mode=in-process"]
    valgrind = [
        "valgrind", "--tool=callgrind", "--trace-children=yes", "--dump-instr=no",
        f"--callgrind-out-file={out}/cg.%p",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(src.resolve())}
    with open(out / "valgrind.log", "w") as log:
        proc = subprocess.Popen(valgrind + cmd, env=env, stdout=log, stderr=log)
    try:
        url = f"127.0.0.1:{grpc if args.protocol == 'grpc' else http}"
        client = _client(args.protocol, url)
        deadline = time.monotonic() + READY_S
        asked = args.model == "add_sub"
        while True:
            try:
                if not asked and client.is_model_ready("add_sub"):  # type: ignore[attr-defined]
                    client.load_model(args.model)  # type: ignore[attr-defined]
                    asked = True
                if asked and client.is_model_ready(args.model):  # type: ignore[attr-defined]
                    break
            except Exception:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not get ready; see {out}/valgrind.log")
            time.sleep(1.0)
        inputs = _inputs(args.protocol)
        for _ in range(args.warmup):
            client.infer(args.model, inputs)  # type: ignore[attr-defined]
        pids = _tree(proc.pid)
        _callgrind_control("-z", pids)
        _callgrind_control("-d", pids)  # dump 1: what zeroing leaves behind
        for _ in range(args.requests):
            client.infer(args.model, inputs)  # type: ignore[attr-defined]
        _callgrind_control("-d", pids)  # dump 2: the request window
    finally:
        proc.terminate()
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    everything = server = 0
    for path in glob.glob(f"{out}/cg.*.2"):  # the second dump of each process: the window
        found = _SUMMARY.search(Path(path).read_text(errors="replace"))
        count = int(found.group(1)) if found else 0
        everything += count
        if path.endswith(f"cg.{proc.pid}.2"):
            server = count
    return everything / args.requests, server / args.requests


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--src", type=Path, action="append", required=True,
                   help="a checkout's src folder; repeat to compare")  # fmt: skip
    p.add_argument("--model", default="add_sub", help="add_sub, or bls_sync (calls add_sub)")
    p.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    p.add_argument("--mode", choices=("process", "in-process"), default="process")
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--models", type=Path, default=None,
                   help="model repository (default: shared/bench/models)")  # fmt: skip
    args = p.parse_args()
    shared = shared_dir()
    if args.models is None:
        if shared is None:
            raise SystemExit("cannot find shared/; set MODELYARD_SHARED or pass --models")
        args.models = shared / "bench" / "models"
    print(f"{args.model} over {args.protocol}, {args.mode} mode, {args.requests} requests")
    print("| src | kIr/request, all processes | server process |")
    print("|---|---|---|")
    for src in args.src:
        with tempfile.TemporaryDirectory(prefix="cg-") as tmp:
            everything, server = measure(src, args, Path(tmp))
        print(f"| `{src}` | {everything / 1000:.0f} | {server / 1000:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
