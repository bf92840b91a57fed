"""Soak: a long closed-loop load on a BLS model, sampling the server's memory and file
descriptors over time. A leak shows as growth after the warm-up.

Starts modelyard on a repository of the examples' ``bls_add_sub`` (a BLS model that calls
``add_sub`` with a blocking ``exec()``) and ``add_sub``, runs ``--clients`` client processes
(the real tritonclient, one request at a time each, every answer checked) for ``--minutes``,
and every ``--interval`` seconds records the server process's RSS and open file-descriptor
count, the workers' total RSS, and the requests served. Prints a table and a summary (growth
of RSS and file descriptors from the first sample after the warm-up to the last), and writes
every sample as JSON with ``--json``.

    python benchmarks/soak.py --minutes 10 --clients 8
    python benchmarks/soak.py --minutes 1 --interval 5 --protocol http --json out/soak.json
    python benchmarks/soak.py --modelyard-args "--backend-config python,execution-mode=in-process"
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import (
    Counters,
    build_repository,
    open_fds,
    rss_kib,
    start_clients,
    start_server,
    stop_clients,
    workers,
)


def sample(pid: int, t0: float, counters: Counters) -> dict[str, Any]:
    return {
        "t_s": round(time.monotonic() - t0, 1),
        "rss_mib": round(rss_kib(pid) / 1024, 1),
        "fds": open_fds(pid),
        "workers_rss_mib": round(sum(rss_kib(w) for w in workers(pid)) / 1024, 1),
        "ok": counters.ok.value,
        "failed": counters.failed.value,
        "wrong": counters.wrong.value,
    }


def summarize(samples: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    base = samples[min(warmup, len(samples) - 1)]
    last = samples[-1]
    elapsed = last["t_s"] - base["t_s"]
    return {
        "samples": len(samples),
        "rss_mib_after_warmup": base["rss_mib"],
        "rss_mib_last": last["rss_mib"],
        "rss_growth_pct": round(100 * (last["rss_mib"] / base["rss_mib"] - 1), 2),
        "rss_mib_max": max(s["rss_mib"] for s in samples),
        "workers_rss_growth_pct": round(
            100 * (last["workers_rss_mib"] / max(base["workers_rss_mib"], 0.1) - 1), 2
        ),
        "fds_min": min(s["fds"] for s in samples),
        "fds_max": max(s["fds"] for s in samples),
        "fds_growth": last["fds"] - base["fds"],
        "requests_ok": last["ok"],
        "requests_failed": last["failed"],
        "answers_wrong": last["wrong"],
        "req_per_s_after_warmup": round((last["ok"] - base["ok"]) / elapsed, 1) if elapsed else 0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--warmup", type=int, default=1, help="samples before the baseline")
    ap.add_argument("--protocol", choices=["grpc", "http"], default="grpc")
    ap.add_argument("--model", default="bls_add_sub")
    ap.add_argument("--modelyard-args", default="", help="extra flags for modelyard serve")
    ap.add_argument("--json", type=Path, help="write the samples and the summary here")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        repo = build_repository(Path(tmp) / "repo")
        server = start_server(repo, args.modelyard_args, Path(tmp) / "server.log")
        counters = Counters.make()
        url = server.grpc_url if args.protocol == "grpc" else server.http_url
        clients = start_clients(args.clients, url, args.protocol, args.model, counters)
        samples: list[dict[str, Any]] = []
        t0 = time.monotonic()
        end = t0 + args.minutes * 60
        print(f"{'t (s)':>8} {'RSS MiB':>9} {'fds':>5} {'workers MiB':>12} {'ok':>9} "
              f"{'failed':>7} {'wrong':>6}")  # fmt: skip
        try:
            while True:
                now = time.monotonic()
                if now >= end:
                    break
                time.sleep(min(args.interval, end - now))
                s = sample(server.proc.pid, t0, counters)
                samples.append(s)
                print(f"{s['t_s']:>8} {s['rss_mib']:>9} {s['fds']:>5} "
                      f"{s['workers_rss_mib']:>12} {s['ok']:>9} {s['failed']:>7} "
                      f"{s['wrong']:>6}", flush=True)  # fmt: skip
        finally:
            stop_clients(clients, counters)
            code = server.stop()
        summary = summarize(samples, args.warmup) if samples else {}
        summary["server_exit_code"] = code
        print(json.dumps(summary, indent=2))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                             "samples": samples, "summary": summary}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
