"""BLS hop cost from long chains, modelyard vs the reference Triton.

The suite's hop figures are differences of p50s of short requests (0, 1 and 10 hops), which
on a small VM move by 10-30 % between runs. This script sends the suite's ``bls_chain`` model
long chains instead: per hop = (p50 of an H-hop request - p50 of a 0-hop request) / H, with
the two kinds of request interleaved. It also reports the first hop of a request alone
(p50 of 1 hop - p50 of 0 hops, interleaved), which pays for cold caches. Servers alternate,
``--rounds`` times each; medians and ratios modelyard / Triton are printed.

    python benchmarks/chain_hop.py --rounds 3
    python benchmarks/chain_hop.py --rounds 3 \\
        --modelyard-args "--backend-config python,execution-mode=in-process"

Needs the reference Triton (``shared/reference/triton install``) unless ``--skip-triton``.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
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

TIMEOUT_S = 300.0


def _inputs(hops: int) -> list[httpclient.InferInput]:
    ins = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32"),
           httpclient.InferInput("HOPS", [1], "INT32")]  # fmt: skip
    ins[0].set_data_from_numpy(np.zeros(4, np.float32))
    ins[1].set_data_from_numpy(np.ones(4, np.float32))
    ins[2].set_data_from_numpy(np.array([hops], np.int32))
    return ins


def _interleaved_p50s(client: Any, a: int, b: int, count: int) -> tuple[float, float]:
    """p50 (s) of ``a``-hop and ``b``-hop requests sent alternately, checking each answer."""
    reqs = {a: _inputs(a), b: _inputs(b)}
    times: dict[int, list[float]] = {a: [], b: []}
    for _ in range(count):
        for hops in (a, b):
            t0 = time.perf_counter()
            out = client.infer("bls_chain", reqs[hops]).as_numpy("OUTPUT0")
            times[hops].append(time.perf_counter() - t0)
            if out[0] != hops:
                raise RuntimeError(f"bls_chain with {hops} hops answered {out[0]}")
    return statistics.median(times[a]), statistics.median(times[b])


def measure(url: str, long_hops: int) -> dict[str, float]:
    client = httpclient.InferenceServerClient(url, network_timeout=120)
    _interleaved_p50s(client, 0, 1, 50)  # warm up
    h0, h1 = _interleaved_p50s(client, 0, 1, 500)
    z, long = _interleaved_p50s(client, 0, long_hops, 15)
    return {"first_hop_us": (h1 - h0) * 1e6, "per_hop_us": (long - z) / long_hops * 1e6}


def run_server(make: Any, extra: list[str], repo: Path, long_hops: int) -> dict[str, float]:
    cmd, env, port = make(repo, extra)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        t0 = time.perf_counter()
        while _get(port, "/v2/models/bls_chain/ready")[0] != 200:
            if proc.poll() is not None or time.perf_counter() - t0 > TIMEOUT_S:
                raise RuntimeError(f"server did not come up: {shlex.join(cmd)}")
            time.sleep(0.05)
        return measure(f"127.0.0.1:{port}", long_hops)
    finally:
        _stop(proc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hops", type=int, default=300, help="hops of the long chain")
    ap.add_argument("--modelyard-args", default="", help="extra modelyard serve flags")
    ap.add_argument("--skip-triton", action="store_true")
    args = ap.parse_args()
    shared = shared_dir()
    if shared is None:
        raise SystemExit("shared/ not found beside the repository (or set MODELYARD_SHARED)")
    repo = shared / "bench" / "models"
    servers = {"modelyard": (modelyard_cmd, shlex.split(args.modelyard_args))}
    if not args.skip_triton:
        servers["triton"] = (triton_cmd, [])
    results: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
    for rnd in range(args.rounds):
        for name, (make, extra) in servers.items():
            r = run_server(make, extra, repo, args.hops)
            results[name].append(r)
            print(f"round {rnd + 1}: {name:9s} per hop {r['per_hop_us']:7.1f} us, "
                  f"first hop {r['first_hop_us']:7.1f} us", flush=True)  # fmt: skip
    print()
    print(
        "| metric (µs) | "
        + " | ".join(servers)
        + (" | modelyard / Triton |" if len(servers) > 1 else " |")
    )
    print("|---|" + "---|" * (len(servers) + (1 if len(servers) > 1 else 0)))
    for key in ("per_hop_us", "first_hop_us"):
        med = {n: statistics.median(r[key] for r in results[n]) for n in servers}
        cells = " | ".join(f"{med[n]:.1f}" for n in servers)
        ratio = f" | {med['modelyard'] / med['triton']:.2f} |" if "triton" in med else " |"
        print(f"| {key} | {cells}{ratio}")


if __name__ == "__main__":
    main()
