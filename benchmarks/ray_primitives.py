"""Ray's candidate primitives for modelyard's data path on a cluster (issue 29): what one call
from a frontend actor (or from one replica to another, a BLS hop) costs with each.

Every call is made by a *caller actor* (an async Ray actor, as modelyard's frontend is) to a
callee that returns its argument, with two payloads: ``small`` (a dict of two 4-float numpy
arrays, add_sub's inputs) and ``large`` (one 256 KiB float32 array). For each candidate: the
p50 of sequential calls and the calls per second with 16 in flight (16 coroutines of the caller
in a closed loop). The candidates:

- ``serve``: a Serve ``DeploymentHandle`` (what ``serve --ray`` uses today), by reference;
- ``serve-grpc``: the same handle with ``_by_reference=False`` (Serve's gRPC transport);
- ``tput-grpc`` / ``tput-ref``: the handle on a cluster started with
  ``RAY_SERVE_THROUGHPUT_OPTIMIZED=1`` (gRPC is then the default; ``-ref`` asks for by-reference);
- ``replica``: a plain actor call to the Serve replica's actor (``handle_request`` with a
  hand-made ``RequestMetadata``: Serve's private interface, no public way exists), i.e. Serve's
  replica without its router;
- ``actor``: a plain async actor method call (``actor.echo.remote(x)`` awaited), the floor for
  direct calls to replica actors;
- ``cgraph``: a Ray Compiled Graph of the one edge caller -> callee, compiled in the caller
  with ``enable_asyncio=True`` (``await (await dag.execute_async(x))``);
- ``socket``: no Ray call at all: the callee actor listens on a TCP port of its node and the
  caller sends each call over a connection of its own (length-prefixed pickle, a pool of
  connections, one call per connection at a time): the floor of a data path of modelyard's
  own between processes Ray placed.

Each group of candidates that share an environment runs in a fresh Ray instance of its own
(``ray.init(num_cpus=2)`` under a private ``RAY_TMPDIR``), in a child process, so that Serve's
environment settings reach the controller, the replicas and the caller. Then the two fastest
candidates (by small-payload p50) run on a two-node ``ray.cluster_utils.Cluster`` on this
machine, with the callee on the caller's node and on the other node: the difference is the
cross-node extra (a second raylet and object store; no network).

    python benchmarks/ray_primitives.py                 # 2 rounds, ~7.5 min on a quiet 2-core box
    python benchmarks/ray_primitives.py --quick         # 1 round, ~2 min
    python benchmarks/ray_primitives.py --candidates actor,cgraph --rounds 1

Prints a markdown table and writes the raw numbers to benchmarks/out/ray-primitives-*.json.
Needs ray[serve] (pip install -e ".[test]").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
OBJECT_STORE = 256 << 20  # per node
CONCURRENCY = 16
PAYLOADS = ("small", "large")
TPUT = {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1"}

# name -> (environment of its Ray instance, kind of call, extra options for the caller)
CANDIDATES: dict[str, tuple[dict[str, str], str, dict[str, Any]]] = {
    "serve": ({}, "handle", {"by_reference": True}),
    "serve-grpc": ({}, "handle", {"by_reference": False}),
    "replica": ({}, "replica", {}),
    "tput-grpc": (TPUT, "handle", {"by_reference": False}),
    "tput-ref": (TPUT, "handle", {"by_reference": True}),
    "actor": ({}, "actor", {}),
    "cgraph": ({}, "cgraph", {}),
    "socket": ({}, "socket", {}),
}
LABELS = {
    "serve": "Serve handle, by reference (today)",
    "serve-grpc": "Serve handle, gRPC (`_by_reference=False`)",
    "replica": "Serve replica's actor, direct (private API)",
    "tput-grpc": "Serve handle, THROUGHPUT_OPTIMIZED, gRPC",
    "tput-ref": "Serve handle, THROUGHPUT_OPTIMIZED, by reference",
    "actor": "plain async actor, direct call",
    "cgraph": "Compiled Graph, one edge",
    "socket": "a TCP connection of our own between the two actors (pickle, length-prefixed)",
}


def payload(name: str) -> Any:
    if name == "small":
        return {
            "INPUT0": np.array([1, 2, 3, 4], dtype=np.float32),
            "INPUT1": np.array([4, 3, 2, 1], dtype=np.float32),
        }
    return np.arange(65536, dtype=np.float32)  # 256 KiB: over Ray's 100 KiB inline limit


def same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(np.array_equal(a, b))


# ---------------------------------------------------------------- the child: one Ray instance


def child(spec: dict[str, Any]) -> None:
    """Start a Ray instance (one node, or two with ``spec["nodes"] == 2``), run each job's
    measurement from a caller actor on node_a, write the results to ``spec["out"]``."""
    import ray

    cluster: Any = None
    common: dict[str, Any] = {"num_cpus": 2, "object_store_memory": OBJECT_STORE}
    if spec["nodes"] == 2:
        from ray.cluster_utils import Cluster

        cluster = Cluster(
            initialize_head=True,
            head_node_args={**common, "resources": {"node_a": 100}, "include_dashboard": False},
        )
        cluster.add_node(**common, resources={"node_b": 100})
        ray.init(address=cluster.address, log_to_driver=False)
    else:
        ray.init(**common, resources={"node_a": 100}, include_dashboard=False, log_to_driver=False)
    results: list[dict[str, Any]] = []
    try:
        for job in spec["jobs"]:
            t0 = time.perf_counter()
            # A caller of its own per job: a call left hanging by a failed job stays there.
            caller = _actors()["Caller"].options(resources={"node_a": 0.01}).remote()
            try:
                res = _run_job(caller, job, spec)
            except Exception as e:  # one failed candidate must not hide the others
                res = {"error": f"{type(e).__name__}: {e}"[:600]}
            ray.kill(caller)
            res.update(job, job_s=round(time.perf_counter() - t0, 1))
            results.append(res)
            print(f"  {job['cand']} ({job['node']}): {res}", flush=True)
    finally:
        Path(spec["out"]).write_text(json.dumps(results))
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()


_CLASSES: dict[str, Any] = {}


def _actors() -> dict[str, Any]:
    """The actor classes, made once on first use (the parent process does not import Ray)."""
    if _CLASSES:
        return _CLASSES
    import ray

    @ray.remote(num_cpus=0)
    class AsyncEcho:
        async def echo(self, x: Any) -> Any:
            return x

        async def listen(self) -> tuple[str, int]:
            """Serve ``echo`` on a TCP port of this node too: Ray only placed the process."""
            server = await asyncio.start_server(_echo_connection, "0.0.0.0", 0)
            self.server = server  # (kept alive with the actor)
            port = server.sockets[0].getsockname()[1]
            return ray.util.get_node_ip_address(), int(port)

    @ray.remote(num_cpus=0)
    class SyncEcho:  # a Compiled Graph runs its tasks on the actor's own thread
        def echo(self, x: Any) -> Any:
            return x

    @ray.remote(num_cpus=0)
    class Caller:
        async def measure(
            self, kind: str, target: Any, opts: dict[str, Any], calls: int, seconds: float
        ) -> dict[str, Any]:
            return await _measure(kind, target, opts, calls, seconds)

    _CLASSES.update(AsyncEcho=AsyncEcho, SyncEcho=SyncEcho, Caller=Caller)
    return _CLASSES


def _run_job(caller: Any, job: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    import ray

    _, kind, opts = CANDIDATES[job["cand"]]
    pin = {job["node"]: 0.01}
    if kind in ("handle", "replica"):
        app = _deploy(job["node"])
        target: Any = app if kind == "handle" else _replica_name(app)
    else:
        cls = _actors()["SyncEcho" if kind == "cgraph" else "AsyncEcho"]
        target = cls.options(resources=pin).remote()
        ray.get(target.echo.remote(0), timeout=120)
        if kind == "socket":
            actor, target = target, ray.get(target.listen.remote(), timeout=60)
    # The caller guards its own waits; this one bounds the whole measurement.
    limit = 120 + spec["calls"] * 0.1 + spec["seconds"] * 4
    out = ray.get(
        caller.measure.remote(kind, target, opts, spec["calls"], spec["seconds"]), timeout=limit
    )
    if kind in ("actor", "cgraph"):
        ray.kill(target)
    if kind == "socket":
        ray.kill(actor)
    return dict(out)


_DEPLOYED: set[str] = set()


def _deploy(node: str) -> str:
    """An echo Serve application with its one replica on ``node``; its name."""
    from ray import serve

    app = f"echo_{node}"
    if app in _DEPLOYED:
        return app
    if not _DEPLOYED:
        serve.start(proxy_location="Disabled", logging_config={"log_level": "WARNING"})

    class Echo:
        async def echo(self, x: Any) -> Any:
            return x

    # As modelyard deploys a model: no CPU reserved, a high request limit, pinned by resource.
    dep = serve.deployment(
        Echo,
        name="Echo",
        max_ongoing_requests=1000,
        ray_actor_options={"num_cpus": 0, "resources": {node: 0.01}},
    )
    serve.run(dep.bind(), name=app, route_prefix=None)  # bounded by the child's timeout
    _DEPLOYED.add(app)
    return app


def _replica_name(app: str) -> str:
    import ray

    names = [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith(f"SERVE_REPLICA::{app}#")
    ]
    if len(names) != 1:
        raise RuntimeError(f"expected one replica actor of {app}, found {names}")
    return str(names[0])


# ------------------------------------------------------------- the caller actor's measurement


async def _measure(
    kind: str, target: Any, opts: dict[str, Any], calls: int, seconds: float
) -> dict[str, Any]:
    """Runs in the caller actor: p50 of sequential calls and the rate at 16 in flight, per
    payload."""
    from ray.serve._private import constants

    call, close = await _make_call(kind, target, opts)
    out: dict[str, Any] = {
        "router_in_separate_loop": constants.RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP,
        "grpc_by_default": constants.RAY_SERVE_USE_GRPC_BY_DEFAULT,
    }
    try:
        for name in PAYLOADS:
            x = payload(name)
            for _ in range(3):  # the first calls set up routers, channels, connections
                y = await asyncio.wait_for(call(x), 120)
                if not same(x, y):
                    raise RuntimeError(f"{kind} answered a wrong {name} payload")
                del y
            out[name] = await asyncio.wait_for(_sequential(call, x, calls), 60 + calls * 0.1)
            out[name]["rate"] = await asyncio.wait_for(_rate(call, x, seconds), 60 + seconds * 4)
    finally:
        await close()
    return out


async def _sequential(call: Any, x: Any, calls: int) -> dict[str, float]:
    for _ in range(max(10, calls // 10)):  # warm-up
        await call(x)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        await call(x)
        times.append(time.perf_counter() - t0)
    times.sort()
    return {
        "p50_us": statistics.median(times) * 1e6,
        "p90_us": times[int(len(times) * 0.9)] * 1e6,
    }


async def _rate(call: Any, x: Any, seconds: float) -> float:
    """Calls per second, 16 in flight, closed loop."""
    done = 0
    stop = time.perf_counter() + seconds

    async def loop() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await call(x)
            done += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(CONCURRENCY)))
    return done / (time.perf_counter() - t0)


async def _make_call(kind: str, target: Any, opts: dict[str, Any]) -> tuple[Any, Any]:
    """``call(x) -> y`` for this candidate and ``close()`` that releases what it holds."""

    async def nothing() -> None:
        return None

    if kind == "actor":

        async def call(x: Any) -> Any:
            return await target.echo.remote(x)

        return call, nothing
    if kind == "handle":
        from ray import serve

        handle = serve.get_deployment_handle("Echo", app_name=target, _check_exists=False)
        handle = handle.options(_by_reference=opts["by_reference"])

        async def call_handle(x: Any) -> Any:
            return await handle.echo.remote(x)

        return call_handle, nothing
    if kind == "replica":
        import ray
        from ray.serve._private.common import RequestMetadata

        app = target.split("::", 1)[1].split("#", 1)[0]
        replica = ray.get_actor(target, namespace="serve")

        async def call_replica(x: Any) -> Any:
            rid = uuid.uuid4().hex
            meta = RequestMetadata(
                request_id=rid, internal_request_id=rid, call_method="echo", app_name=app
            )
            return await replica.handle_request.remote(pickle.dumps(meta), x)

        return call_replica, nothing
    if kind == "socket":
        return await _socket_call(target)
    if kind == "cgraph":
        from ray.dag import InputNode

        with InputNode() as inp:
            dag = target.echo.bind(inp)
        compiled = dag.experimental_compile(
            enable_asyncio=True, _max_inflight_executions=4 * CONCURRENCY
        )

        async def call_graph(x: Any) -> Any:
            return await (await compiled.execute_async(x))

        async def teardown() -> None:
            compiled.teardown()

        return call_graph, teardown
    raise ValueError(kind)


async def _read_frame(reader: asyncio.StreamReader) -> Any:
    (size,) = struct.unpack("!I", await reader.readexactly(4))
    return pickle.loads(await reader.readexactly(size))


def _write_frame(writer: asyncio.StreamWriter, value: Any) -> None:
    body = pickle.dumps(value, protocol=5)
    writer.write(struct.pack("!I", len(body)) + body)


async def _echo_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            _write_frame(writer, await _read_frame(reader))
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def _socket_call(address: tuple[str, int]) -> tuple[Any, Any]:
    """Calls over a pool of connections to the callee's port, one call per connection at a
    time (16 in flight: 16 connections)."""
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    opened: list[asyncio.StreamWriter] = []

    async def call(x: Any) -> Any:
        if idle:
            conn = idle.pop()
        else:
            conn = await asyncio.open_connection(*address)
            conn[1].get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            opened.append(conn[1])
        _write_frame(conn[1], x)
        y = await _read_frame(conn[0])
        idle.append(conn)
        return y

    async def close() -> None:
        for writer in opened:
            writer.close()

    return call, close


# ---------------------------------------------------------------------- the parent: the runs


def run_child(spec: dict[str, Any], env: dict[str, str], timeout: float, log: Path) -> list[Any]:
    """One Ray instance in a child process; killed with everything it started on timeout."""
    tmp = tempfile.mkdtemp(prefix="myrp", dir="/tmp")  # short: Ray's socket paths must fit
    out = Path(tmp) / "out.json"
    full_env = {**os.environ, **env, "RAY_TMPDIR": tmp}
    full_env.pop("GRPC_EXPERIMENTS", None)  # Ray's gRPC does not know grpcio's
    spec = {**spec, "out": str(out)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    with open(log, "ab") as f:
        proc = subprocess.Popen(
            cmd, env=full_env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            print(f"  timed out after {timeout:.0f} s; stopping its Ray processes", flush=True)
            _kill_ours(tmp, proc.pid)
            proc.wait(30)
    _kill_ours(tmp, None)  # whatever outlived ray.shutdown()
    try:
        return list(json.loads(out.read_text())) if out.exists() else []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _kill_ours(tmp: str, pid: int | None) -> None:
    """SIGKILL ``pid`` and every process started with our private RAY_TMPDIR, by process id."""
    mark = f"RAY_TMPDIR={tmp}".encode()
    pids = {pid} if pid else set()
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and int(p.name) != os.getpid():
            try:
                if mark in (p / "environ").read_bytes().split(b"\0"):
                    pids.add(int(p.name))
            except OSError:
                continue
    for p_id in pids:
        try:
            os.kill(p_id, signal.SIGKILL)
        except OSError:
            pass


def med(rows: list[dict[str, Any]], *keys: str) -> float | None:
    vals = []
    for r in rows:
        for k in keys:
            r = r.get(k) if isinstance(r, dict) else None
        if isinstance(r, int | float):
            vals.append(float(r))
    return statistics.median(vals) if vals else None


def fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:,.0f}"


def table(one: dict[str, list[Any]], cross: dict[str, dict[str, list[Any]]]) -> str:
    lines = [
        "| candidate | payload | p50 µs | p90 µs | req/s at 16 in flight "
        "| two-node cluster: p50 µs same node / other node (extra) | req/s same / other node |",
        "|---|---|---|---|---|---|---|",
    ]
    for cand in [*one, *(c for c in cross if c not in one)]:
        rows = one.get(cand, [])
        ok = [r for r in rows if "error" not in r]
        if not ok and cand in one:
            err = rows[0].get("error", "no result") if rows else "no result"
            lines.append(f"| {LABELS[cand]} | — | failed: {err[:200]} | | | | |")
            continue
        for p in PAYLOADS:
            cells = [fmt(med(ok, p, "p50_us")), fmt(med(ok, p, "p90_us")), fmt(med(ok, p, "rate"))]
            extra, rates = "", ""
            if cand in cross:
                a, b = (
                    med(cross[cand]["node_a"], p, "p50_us"),
                    med(cross[cand]["node_b"], p, "p50_us"),
                )
                if a is not None and b is not None:
                    extra = f"{a:,.0f} / {b:,.0f} ({b - a:+,.0f})"
                ra, rb = (
                    med(cross[cand]["node_a"], p, "rate"),
                    med(cross[cand]["node_b"], p, "rate"),
                )
                rates = f"{fmt(ra)} / {fmt(rb)}"
            lines.append(f"| {LABELS[cand]} | {p} | {' | '.join(cells)} | {extra} | {rates} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2, help="fresh Ray instances per candidate")
    ap.add_argument("--calls", type=int, default=400, help="sequential calls per payload")
    ap.add_argument("--seconds", type=float, default=2.5, help="length of each 16-in-flight load")
    ap.add_argument("--quick", action="store_true", help="1 round, 200 calls, 1.5 s loads")
    ap.add_argument("--candidates", default=",".join(CANDIDATES), help="comma-separated")
    ap.add_argument(
        "--cross",
        default="",
        help="candidates for the two-node run (default: the "
        "two fastest by small-payload p50); 'none' skips it",
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    if args.quick:
        args.rounds, args.calls, args.seconds = 1, 200, 1.5
    cands = [c for c in args.candidates.split(",") if c]
    unknown = set(cands) - set(CANDIDATES)
    if unknown:
        raise SystemExit(f"unknown candidates {sorted(unknown)}; known: {list(CANDIDATES)}")
    outdir = HERE / "out"  # gitignored
    outdir.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log = outdir / f"ray-primitives-{stamp}.log"
    spec = {"calls": args.calls, "seconds": args.seconds}
    # Per job: start-up (Serve's ~30 s at load), warm-up, 2 x calls at up to ~20 ms, 2 loads.
    per_job = 60 + args.calls * 0.05 + args.seconds * 3
    groups: dict[str, list[str]] = {}
    for c in cands:
        env, kind, _ = CANDIDATES[c]
        key = ("tput-" if env else "") + ("serve" if kind in ("handle", "replica") else "plain")
        groups.setdefault(key, []).append(c)
    one: dict[str, list[Any]] = {c: [] for c in cands}
    cross: dict[str, dict[str, list[Any]]] = {}
    t_start, load = time.perf_counter(), os.getloadavg()
    for rnd in range(args.rounds):
        for key, members in groups.items():
            print(f"round {rnd + 1}: {key} {members}", flush=True)
            jobs = [{"cand": c, "node": "node_a"} for c in members]
            env = CANDIDATES[members[0]][0]
            for r in run_child(
                {**spec, "nodes": 1, "jobs": jobs}, env, 90 + per_job * len(jobs), log
            ):
                one[r["cand"]].append(r)
    if args.cross != "none":
        by_p50 = {c: med([r for r in one[c] if "error" not in r], "small", "p50_us") for c in cands}
        ranked = sorted((v, c) for c, v in by_p50.items() if v is not None)
        picks = args.cross.split(",") if args.cross else [c for _, c in ranked[:2]]
        for rnd in range(args.rounds):
            for env_key in sorted({json.dumps(CANDIDATES[c][0]) for c in picks}):
                members = [c for c in picks if json.dumps(CANDIDATES[c][0]) == env_key]
                print(f"round {rnd + 1}: two nodes {members}", flush=True)
                jobs = [{"cand": c, "node": n} for c in members for n in ("node_a", "node_b")]
                timeout = 120 + per_job * len(jobs)
                for r in run_child(
                    {**spec, "nodes": 2, "jobs": jobs}, json.loads(env_key), timeout, log
                ):
                    cross.setdefault(r["cand"], {"node_a": [], "node_b": []})[r["node"]].append(r)
    elapsed = time.perf_counter() - t_start
    raw = {
        "args": vars(args),
        "load_before": load,
        "load_after": os.getloadavg(),
        "elapsed_s": elapsed,
        "one_node": one,
        "two_nodes": cross,
    }
    path = outdir / f"ray-primitives-{stamp}.json"
    path.write_text(json.dumps(raw, indent=1, default=str))
    print()
    print(table(one, cross))
    print(f"\n{elapsed:.0f} s; raw numbers: {path}; Ray logs of the children: {log}")


if __name__ == "__main__":
    main()
