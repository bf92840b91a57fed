"""Crash under load: concurrent clients while the model's worker process is killed again and
again. Reports, per kill, the requests lost (answered with an error between this kill and the
next) and the time from the kill until the model reports ready again.

Starts modelyard on a repository with the examples' ``add_sub`` (one instance, one worker
process), runs ``--clients`` closed-loop client processes on it (the real tritonclient, every
answer checked), and ``--kills`` times: waits ``--interval`` seconds, SIGKILLs the worker,
and polls ``/v2/models/add_sub/ready`` until it answers 200 (the restarted worker is up).

    python benchmarks/crash_load.py --clients 9 --kills 5
    python benchmarks/crash_load.py --kills 3 --interval 2 --protocol http --json out/crash.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import (
    Counters,
    build_repository,
    get,
    start_clients,
    start_server,
    stop_clients,
    workers,
)

READY_LIMIT_S = 120.0


def kill_and_wait(server: Any, counters: Counters, model: str) -> dict[str, Any]:
    """SIGKILL the worker; wait until the model is ready on a new one."""
    pid = server.proc.pid
    (victim,) = workers(pid)
    failed0 = counters.failed.value
    t0 = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    # Not ready from the moment the server notices the death; ready again on the new worker.
    while True:
        if time.monotonic() - t0 > READY_LIMIT_S:
            raise RuntimeError(f"'{model}' not ready {READY_LIMIT_S:g} s after the kill")
        current = workers(pid)
        if (
            current
            and victim not in current
            and get(server.http_port, f"/v2/models/{model}/ready") == 200
        ):
            break
        time.sleep(0.005)
    return {"victim": victim, "ready_after_s": round(time.monotonic() - t0, 3),
            "failed_during_recovery": counters.failed.value - failed0}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=9)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--interval", type=float, default=3.0, help="seconds of load between kills")
    ap.add_argument("--protocol", choices=["grpc", "http"], default="grpc")
    ap.add_argument("--modelyard-args", default="", help="extra flags for modelyard serve")
    ap.add_argument("--json", type=Path, help="write the per-kill results and the summary here")
    args = ap.parse_args()
    model = "add_sub"

    with tempfile.TemporaryDirectory(prefix="crash-load-") as tmp:
        repo = build_repository(Path(tmp) / "repo", (model,))
        server = start_server(repo, args.modelyard_args, Path(tmp) / "server.log")
        counters = Counters.make()
        url = server.grpc_url if args.protocol == "grpc" else server.http_url
        clients = start_clients(args.clients, url, args.protocol, model, counters)
        kills: list[dict[str, Any]] = []
        print(f"{'kill':>4} {'ready after (s)':>16} {'failed meanwhile':>17} {'ok so far':>10}")
        try:
            for n in range(1, args.kills + 1):
                time.sleep(args.interval)
                failed0 = counters.failed.value
                result = kill_and_wait(server, counters, model)
                kills.append(result)
                # The requests lost to this kill: errors until the next one (or the end).
                if len(kills) > 1:
                    kills[-2]["lost"] = failed0 - kills[-2]["failed_at_kill"]
                result["failed_at_kill"] = failed0
                print(f"{n:>4} {result['ready_after_s']:>16} "
                      f"{result['failed_during_recovery']:>17} {counters.ok.value:>10}", flush=True)  # fmt: skip
            time.sleep(args.interval)
            if kills:
                kills[-1]["lost"] = counters.failed.value - kills[-1]["failed_at_kill"]
        finally:
            stop_clients(clients, counters)
            code = server.stop()
        for k in kills:
            del k["failed_at_kill"]
        lost = [k.get("lost", 0) for k in kills]
        ready = [k["ready_after_s"] for k in kills]
        summary = {
            "clients": args.clients, "kills": len(kills), "lost_per_kill": lost,
            "lost_per_kill_mean": round(statistics.mean(lost), 2) if lost else 0,
            "ready_after_s": ready,
            "ready_after_s_median": round(statistics.median(ready), 3) if ready else 0,
            "requests_ok": counters.ok.value, "requests_failed": counters.failed.value,
            "answers_wrong": counters.wrong.value, "server_exit_code": code,
        }  # fmt: skip
        print(json.dumps(summary, indent=2))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                             "kills": kills, "summary": summary}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
