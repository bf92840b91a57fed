"""Pool the rounds of several ``compare.py`` runs: per-server medians over every round and
the modelyard/Triton ratio, for the streaming, large-tensor and concurrency-16 throughput cells
(the noisiest ones on a small machine, where one run's two or three rounds say little).

    python benchmarks/pool.py 20261123-134159 20261123-140917 20261123-142640

Reads ``benchmarks/out/<stamp>-r<N>-<server>.json`` as ``compare.py`` writes them.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "out"
SERVERS = ("modelyard", "triton")


def _cells(results: dict[str, Any]) -> Iterator[tuple[str, float, bool]]:
    """(metric, value, higher_is_better) for every streaming, large-tensor and concurrency-16
    throughput cell."""
    for name, cell in results.get("streaming", {}).items():
        if isinstance(cell, dict) and cell.get("responses_per_s"):
            yield f"{name} responses/s", float(cell["responses_per_s"]), True
    for size, by_path in results.get("large", {}).items():
        for path, cell in by_path.items():
            if isinstance(cell, dict) and cell.get("ok") and cell.get("p50_us"):
                yield f"{size} {path} p50 ms", float(cell["p50_us"]) / 1000, False
    for cell in results.get("throughput", []):
        if cell.get("ok") and cell.get("concurrency") == 16 and cell.get("throughput_rps"):
            name = f"{cell['case']} {cell['protocol']} c=16"
            yield f"{name} req/s", float(cell["throughput_rps"]), True
            if cell.get("server_cpu_us_per_request"):
                yield f"{name} server CPU µs/req", float(cell["server_cpu_us_per_request"]), False


def pool(stamps: list[str]) -> str:
    values: dict[tuple[str, str], list[float]] = {}
    better_up: dict[str, bool] = {}
    for stamp in stamps:
        for server in SERVERS:
            for path in sorted(OUT.glob(f"{stamp}-r*-{server}.json")):
                results = json.loads(path.read_text())["results"]
                for metric, value, up in _cells(results):
                    values.setdefault((metric, server), []).append(value)
                    better_up[metric] = up
    lines = [
        "| metric | rounds | modelyard median | Triton median | modelyard / Triton |",
        "|---|---|---|---|---|",
    ]
    for metric, up in better_up.items():
        mine, ref = values.get((metric, "modelyard")), values.get((metric, "triton"))
        if not mine or not ref:
            continue
        m, t = statistics.median(mine), statistics.median(ref)
        arrow = "↑" if up else "↓"
        lines.append(
            f"| {metric} {arrow} | {len(mine)} + {len(ref)} | {m:,.2f} | {t:,.2f} | {m / t:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stamps", nargs="+", help="compare.py run stamps (YYYYMMDD-HHMMSS)")
    print(pool(parser.parse_args().stamps))


if __name__ == "__main__":
    main()
