"""Benchmark modelyard against the reference Triton 2.51, side by side, with the shared suite.

Runs ``shared/bench/run.py`` once per server per round, alternating the servers
(modelyard, Triton, modelyard, Triton, ...), each launched by the suite itself through
``shared/bench/servers/{modelyard,triton}.sh`` on free ports and the same model
repository (the suite's ``models/`` unless ``--models`` says otherwise). The results
JSONs go to ``benchmarks/out/``; then it writes (and prints) a markdown table of the
medians per server and the modelyard/Triton ratio of each metric, plus the suite's
own ``report.py`` tables per server.

    python benchmarks/compare.py                                  # full suite, 2 rounds
    python benchmarks/compare.py --scenarios latency --quick --rounds 1
    python benchmarks/compare.py --tables-only 20250101-120000    # tables from saved JSONs

Needs the reference Triton (``shared/reference/triton install``) and a Python with
modelyard, ``tritonclient[all]`` and numpy (this one: the suite and the modelyard
server both run with ``sys.executable``). ``$MODELYARD_SHARED`` names ``shared/``
when it is not next to the repository.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
DEFAULT_OUT = HERE / "out"
SERVERS = ("modelyard", "triton", "baseline")
ALL_SCENARIOS = ("startup", "latency", "throughput", "stateful", "streaming", "large", "memory")
NOISE = 0.10  # ratios within 1 ± NOISE are within run-to-run noise on a small VM (bench/README)


# ------------------------------------------------------------------ locating things


def shared_dir() -> Path:
    """The project's ``shared/`` folder (``$MODELYARD_SHARED``, else beside the repository)."""
    candidates: list[Path] = []
    if os.environ.get("MODELYARD_SHARED"):
        candidates.append(Path(os.environ["MODELYARD_SHARED"]))
    candidates += [REPO_ROOT.parent / "shared", Path(__file__).parent.parent / ".." / "shared",
                   Path.cwd().parent / "shared"]  # fmt: skip
    for candidate in candidates:
        if (candidate / "bench" / "run.py").is_file():
            return candidate.resolve()
    raise SystemExit("cannot find shared/bench/run.py; set MODELYARD_SHARED to the shared/ folder")


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports that were free a moment ago."""
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


@dataclass(frozen=True)
class Server:
    name: str
    script: Path
    env: dict[str, str]
    extra_args: tuple[str, ...] = ()

    def command(self, metrics_port: int) -> str:
        """A ``--server-cmd`` template for run.py (its placeholders stay in braces)."""
        extra = "".join(" " + shlex.quote(a) for a in self.extra_args)
        return (
            f"{shlex.quote(str(self.script))} {{models}} {{http_port}} {{grpc_port}} {metrics_port}"
            + extra
        )


def servers(
    shared: Path, modelyard_args: tuple[str, ...] = (), baseline: Path | None = None
) -> dict[str, Server]:
    """The launchers; ``baseline``: a checkout of another modelyard commit, served as
    "baseline" with that checkout's ``src`` first on PYTHONPATH (its workers inherit it)."""
    launchers = shared / "bench" / "servers"
    out = {
        "modelyard": Server("modelyard", launchers / "modelyard.sh",
                            {"MODELYARD_PYTHON": sys.executable}, modelyard_args),
        "triton": Server("triton", launchers / "triton.sh", {}),
    }  # fmt: skip
    if baseline is not None:
        env = {"MODELYARD_PYTHON": sys.executable, "PYTHONPATH": str(baseline / "src")}
        out["baseline"] = Server("baseline", launchers / "modelyard.sh", env, modelyard_args)
    return out


# ------------------------------------------------------------------ running


@dataclass
class RunRecord:
    server: str
    round: int
    path: Path
    returncode: int
    seconds: float


def run_suite(
    shared: Path, server: Server, out: Path, args: argparse.Namespace, round_no: int
) -> RunRecord:
    http_port, grpc_port, metrics_port = free_ports(3)
    cmd = [
        sys.executable, str(shared / "bench" / "run.py"),
        "--http", f"127.0.0.1:{http_port}", "--grpc", f"127.0.0.1:{grpc_port}",
        "--out", str(out), "--models", str(args.models),
        "--server-cmd", server.command(metrics_port),
        "--scenarios", args.scenarios,
        "--client-procs", str(args.client_procs),
        "--label", f"{server.name} round {round_no}",
    ]  # fmt: skip
    if args.quick:
        cmd.append("--quick")
    print(f"\n##### round {round_no}: {server.name}  ->  {out}", flush=True)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env={**os.environ, **server.env}, cwd=shared / "bench", check=False)
    seconds = time.monotonic() - t0
    print(f"##### {server.name} round {round_no}: exit {proc.returncode} after {seconds:.0f} s",
          flush=True)  # fmt: skip
    return RunRecord(server.name, round_no, out, proc.returncode, seconds)


# ------------------------------------------------------------------ tables


@dataclass(frozen=True)
class Metric:
    section: str
    label: str
    path: tuple[Any, ...]
    ok_path: tuple[Any, ...] | None = None
    scale: float = 1.0
    digits: int = 0
    higher_is_better: bool = False


def _union_keys(runs: Iterable[dict[str, Any]], *path: str) -> list[str]:
    keys: list[str] = []
    for run in runs:
        node: Any = run
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        for key in node or {}:
            if key not in keys:
                keys.append(key)
    return keys


def _load_points(runs: Iterable[dict[str, Any]], section: str) -> list[tuple[str, str, int]]:
    points: list[tuple[str, str, int]] = []
    for run in runs:
        for entry in (run.get("results") or {}).get(section) or []:
            if isinstance(entry, dict) and "concurrency" in entry:
                point = (entry["case"], entry["protocol"], entry["concurrency"])
                if point not in points:
                    points.append(point)
    return points


def _matcher(case: str, protocol: str, concurrency: int) -> Callable[[Any], bool]:
    def match(item: Any) -> bool:
        return (isinstance(item, dict) and item.get("case") == case
                and item.get("protocol") == protocol and item.get("concurrency") == concurrency)  # fmt: skip

    return match


def metrics(runs: list[dict[str, Any]]) -> list[Metric]:
    """The compared metrics, for whatever scenarios the runs contain."""
    out: list[Metric] = [Metric("startup and memory", "startup: spawn → ready (s)",
                                ("results", "startup", "ready_s_median"), digits=2)]  # fmt: skip
    for key, when in (("memory_idle", "idle"), ("memory_after_load", "after load"),
                      ("memory_after_large", "after large tensors")):  # fmt: skip
        for kind in ("rss", "pss"):
            out.append(Metric("startup and memory", f"{kind.upper()} server + children, {when} (MB)",
                              ("results", key, f"{kind}_total_mb")))  # fmt: skip
    for case in _union_keys(runs, "results", "latency"):
        for proto in ("http", "grpc"):
            for q in ("p50", "p99"):
                out.append(Metric("latency (µs, one request at a time)", f"{case} {proto} {q}",
                                  ("results", "latency", case, proto, f"{q}_us")))  # fmt: skip
    for proto in ("http", "grpc"):
        for key in _union_keys(runs, "results", "bls", proto):
            out.append(Metric("BLS overheads (µs, from p50s)", f"{key} {proto}",
                              ("results", "bls", proto, key), ok_path=("results", "bls"),
                              digits=2 if "vs" in key else 0))  # fmt: skip
    base: tuple[Any, ...]
    for case, proto, conc in _load_points(runs, "throughput"):
        base = ("results", "throughput", _matcher(case, proto, conc))
        name = f"{case} {proto} c={conc}"
        out += [
            Metric("throughput", f"{name} req/s", (*base, "throughput_rps"), base,
                   higher_is_better=True),
            Metric("throughput", f"{name} p50 µs", (*base, "latency", "p50_us"), base),
            Metric("throughput", f"{name} server CPU µs/req", (*base, "server_cpu_us_per_request"),
                   base),
        ]  # fmt: skip
    for case, proto, conc in _load_points(runs, "stateful"):
        base = ("results", "stateful", _matcher(case, proto, conc))
        out += [
            Metric("stateful", f"{case} {proto} c={conc} req/s", (*base, "throughput_rps"), base,
                   higher_is_better=True),
            Metric("stateful", f"{case} {proto} c={conc} sequence p50 µs",
                   (*base, "latency", "p50_us"), base),
        ]  # fmt: skip
    for case in _union_keys(runs, "results", "streaming"):
        base = ("results", "streaming", case)
        out += [
            Metric("streaming", f"{case} responses/s", (*base, "responses_per_s"), base,
                   higher_is_better=True),
            Metric("streaming", f"{case} first response p50 µs",
                   (*base, "first_response", "p50_us"), base),
        ]  # fmt: skip
    for size in _union_keys(runs, "results", "large"):
        for transport in _union_keys(runs, "results", "large", size):
            base = ("results", "large", size, transport)
            out.append(Metric("large tensors", f"{size} {transport} p50 ms", (*base, "p50_us"),
                              base, scale=1e-3, digits=2))  # fmt: skip
    return out


def _ratio_text(mine: Any, ref: Any, metric: Metric, other: str = "Triton") -> tuple[str, str]:
    if mine.failed or ref.failed or mine.median is None or ref.median is None:
        return "-", ""
    if ref.median == 0:
        return "-", ""
    ratio = mine.median / ref.median
    if abs(ratio - 1) <= NOISE:
        verdict = "~"
    else:
        verdict = "modelyard" if (ratio > 1) == metric.higher_is_better else other
    return f"{ratio:.2f}", verdict


def compare_tables(
    report: Any, runs: dict[str, list[dict[str, Any]]], against: str = "triton"
) -> str:
    """Markdown: per metric, the median of each server and the modelyard / ``against`` ratio
    (``against``: "triton", or "baseline", another modelyard commit)."""
    mine, ref = runs["modelyard"], runs[against]
    sections: dict[str, list[list[str]]] = {}
    for metric in metrics(mine + ref):
        cells = [report.Cell(r, metric.path, ok_path=metric.ok_path, scale=metric.scale,
                             digits=metric.digits) for r in (mine, ref)]  # fmt: skip
        if not cells[0].values and not cells[1].values and not (cells[0].failed or cells[1].failed):
            continue
        ratio, verdict = _ratio_text(
            cells[0], cells[1], metric, "Triton" if against == "triton" else "baseline"
        )
        arrow = "↑" if metric.higher_is_better else "↓"
        row = [f"{metric.label} {arrow}", str(cells[0]), str(cells[1]), ratio, verdict]
        sections.setdefault(metric.section, []).append(row)
    parts = []
    other = "Triton 2.51" if against == "triton" else "baseline"
    header = ["metric", "modelyard", other, f"modelyard / {other.split()[0]}", "better"]
    for section, rows in sections.items():
        parts.append(f"### {section}\n\n" + report.table(header, rows))
    return "\n\n".join(parts)


def summary_header(records: list[RunRecord], runs: dict[str, list[dict[str, Any]]],
                   args_text: str, load: tuple[float, float, float] | None) -> str:  # fmt: skip
    any_run = next((r for rs in runs.values() for r in rs), {})
    env = any_run.get("environment", {})
    lines = [
        f"Command: `{args_text}`",
        "",
        f"Machine: {env.get('cpu', '?')}, {env.get('cores', '?')} cores, Python "
        f"{env.get('python', '?')}, numpy {env.get('numpy', '?')}, tritonclient "
        f"{env.get('tritonclient', '?')}.",
    ]
    if load is not None:
        lines.append(
            f"Load average before the first run: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}."
        )
    lines += ["", "| round | server | results JSON | exit | minutes | failures | busy cores before |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    for rec in records:
        doc = _load(rec.path) or {}
        before = doc.get("background_busy_cores_before")
        lines.append(
            f"| {rec.round} | {rec.server} | `{_rel(rec.path)}` | {rec.returncode} | "
            f"{rec.seconds / 60:.1f} | {len(doc.get('failures', []))} | "
            f"{'-' if before is None else format(before, '.2f')} |"
        )
    failures = sorted({f"{name}: {f}" for name, rs in runs.items() for r in rs
                       for f in r.get("failures", [])})  # fmt: skip
    lines.append("")
    lines.append(f"Failures: {len(failures)}" + "".join(f"\n- {f}" for f in failures))
    lines.append("")
    lines.append(
        "Cells: median over the rounds (with several rounds, the spread (max - min) / median in "
        "parentheses); FAIL = a wrong answer or error in some round; † = foreign CPU load during "
        "that measurement. ↓ lower is better, ↑ higher is better. Ratio = modelyard / Triton; "
        f"'better' names the faster server when the ratio is outside 1 ± {NOISE:.2f} (run-to-run "
        "noise), '~' otherwise."
    )
    return "\n".join(lines)


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _load(path: Path) -> dict[str, Any] | None:
    try:
        with open(path) as f:
            doc: dict[str, Any] = json.load(f)
            return doc
    except (OSError, ValueError):
        return None


def suite_report(shared: Path, paths: list[Path]) -> str:
    proc = subprocess.run([sys.executable, str(shared / "bench" / "report.py"), *map(str, paths)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    return proc.stdout if proc.returncode == 0 else f"report.py failed:\n{proc.stderr}"


def write_tables(shared: Path, out_dir: Path, stamp: str, records: list[RunRecord],
                 args_text: str, load: tuple[float, float, float] | None) -> Path:  # fmt: skip
    sys.path.insert(0, str(shared / "bench"))
    report = importlib.import_module("report")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in SERVERS}
    for rec in records:
        doc = _load(rec.path)
        if doc is not None:
            runs[rec.server].append(doc)
    text = [f"## modelyard vs Triton 2.51 ({stamp})", "",
            summary_header(records, runs, args_text, load)]  # fmt: skip
    compared = [other for other in ("triton", "baseline") if runs["modelyard"] and runs[other]]
    for other in compared:
        text += ["", f"## modelyard against {other}", "", compare_tables(report, runs, other)]
    if not compared:
        text += ["", "(no comparison: a server has no results)"]
    for name in SERVERS:
        paths = [r.path for r in records if r.server == name and r.path.exists()]
        if paths:
            per_server = suite_report(shared, paths)
            (out_dir / f"{stamp}-{name}.md").write_text(per_server)
    path = out_dir / f"{stamp}-compare.md"
    path.write_text("\n".join(text) + "\n")
    return path


# ------------------------------------------------------------------ main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument(
        "--rounds", type=int, default=2, help="rounds of (modelyard, Triton) (default 2)"
    )
    p.add_argument(
        "--scenarios",
        default=",".join(ALL_SCENARIOS),
        help=f"comma-separated subset of: {','.join(ALL_SCENARIOS)} (default: all)",
    )
    p.add_argument("--quick", action="store_true", help="the suite's short smoke settings")
    p.add_argument(
        "--models",
        type=Path,
        default=None,
        help="model repository both servers serve (default: shared/bench/models)",
    )
    p.add_argument("--client-procs", type=int, default=2, help="client worker processes (run.py)")
    p.add_argument("--out-dir", type=Path, default=DEFAULT_OUT, help="where JSONs and tables go")
    p.add_argument(
        "--modelyard-args",
        default="",
        help="extra arguments for modelyard serve, e.g. "
        "'--backend-config python,execution-mode=in-process'",
    )
    p.add_argument(
        "--servers",
        default="modelyard,triton",
        help="which servers, in the order they alternate (default: modelyard,triton; "
        "'baseline' with --baseline)",
    )
    p.add_argument(
        "--baseline",
        type=Path,
        metavar="CHECKOUT",
        help="also serve modelyard from another checkout (e.g. a `git worktree` of an older "
        "commit) as the server 'baseline', alternating with the others; add it to --servers",
    )
    p.add_argument(
        "--tables-only",
        metavar="STAMP",
        help="skip running; build the tables from out-dir/STAMP-r*-*.json",
    )
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    order = [s.strip() for s in args.servers.split(",") if s.strip()]
    if not order or set(order) - set(SERVERS):
        p.error(f"--servers takes names from: {', '.join(SERVERS)}")
    args.order = order
    if ("baseline" in order) != (args.baseline is not None):
        p.error("--baseline CHECKOUT and 'baseline' in --servers go together")
    unknown = {s.strip() for s in args.scenarios.split(",") if s.strip()} - set(ALL_SCENARIOS)
    if unknown:
        p.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    return args


def records_from_disk(out_dir: Path, stamp: str) -> list[RunRecord]:
    records = []
    for path in sorted(out_dir.glob(f"{stamp}-r*-*.json")):
        stem = path.stem[len(stamp) + 1 :]  # r<round>-<server>
        round_text, _, server = stem.partition("-")
        if server in SERVERS and round_text[1:].isdigit():
            records.append(RunRecord(server, int(round_text[1:]), path, 0, 0.0))
    return records


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    shared = shared_dir()
    args.models = (args.models or shared / "bench" / "models").resolve()
    out_dir: Path = args.out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    args_text = "python benchmarks/compare.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
    )

    if args.tables_only:
        saved = records_from_disk(out_dir, args.tables_only)
        if not saved:
            raise SystemExit(f"no {args.tables_only}-r*-*.json files in {out_dir}")
        path = write_tables(shared, out_dir, args.tables_only, saved, args_text, None)
        print(path.read_text())
        return 0

    launchers = servers(shared, tuple(shlex.split(args.modelyard_args)), args.baseline)
    load = os.getloadavg()
    print(f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores "
          f"({platform.node()})", flush=True)  # fmt: skip
    if load[0] > 0.5 * (os.cpu_count() or 1):
        print("warning: the machine is busy; the numbers will be distorted", flush=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    records: list[RunRecord] = []
    for round_no in range(1, args.rounds + 1):
        for name in args.order:
            out = out_dir / f"{stamp}-r{round_no}-{name}.json"
            records.append(run_suite(shared, launchers[name], out, args, round_no))
    path = write_tables(shared, out_dir, stamp, records, args_text, load)
    print("\n" + path.read_text())
    print(f"tables: {_rel(path)}; the suite's own tables: {stamp}-<server>.md")
    return 0 if all(r.returncode == 0 for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
