"""What bench writes: the table on stdout, and the JSON, CSV and PNG files asked for."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from modelyard.bench.model import SetupError
from modelyard.bench.stats import failed

PLOT_MISSING = "--plot needs matplotlib: pip install 'modelyard[plot]'"
# CSV: every record field but the list of error messages, in record order.
CSV_SKIP = ("error_samples",)


def _ms(us: int | None) -> str:
    return "-" if us is None else f"{us / 1000:.2f}"


def print_table(records: list[dict[str, Any]], console: Console) -> None:
    rate_mode = records[0]["mode"] == "request_rate"
    streaming = records[0]["streaming"]
    table = Table(
        title=f"{records[0]['model']} over {records[0]['protocol']}", title_justify="left"
    )
    first = "rate/s" if rate_mode else "concurrency"
    table.add_column(first, justify="right", min_width=len(first))
    table.add_column("requests", justify="right")
    table.add_column("req/s", justify="right")
    if streaming:
        table.add_column("resp/s", justify="right")
    for name in ("p50", "p90", "p99", "p99.9"):
        table.add_column(f"{name} ms", justify="right")
    table.add_column("errors", justify="right")
    for r in records:
        row = [
            f"{r['request_rate']:g}" if rate_mode else str(r["concurrency"]),
            str(r["requests"]),
            f"{r['throughput']:.1f}",
        ]
        if streaming:
            row.append(f"{r['response_throughput']:.1f}")
        row += [_ms(r[k]) for k in ("p50_us", "p90_us", "p99_us", "p99_9_us")]
        bad = failed(r)
        row.append(f"{r['errors'] + r['warmup_errors'] + r['unanswered']}" + (" !" if bad else ""))
        table.add_row(*row, style="red" if bad else None)
    console.print(table)
    print_errors(records, console)


def print_errors(records: list[dict[str, Any]], console: Console) -> None:
    """Each step's error messages, or why it measured nothing."""
    rate_mode = records[0]["mode"] == "request_rate"
    for r in records:
        step = f"rate {r['request_rate']:g}/s" if rate_mode else f"concurrency {r['concurrency']}"
        for sample in r["error_samples"]:
            console.print(f"[red]{step}: {sample}[/red]", highlight=False)
        if not r["requests"] and not r["error_samples"]:
            console.print(f"[red]{step}: no request completed inside the measurement window[/red]")


def write_json(records: list[dict[str, Any]], path: str) -> None:
    Path(path).write_text(json.dumps(records, indent=2) + "\n")


def write_csv(records: list[dict[str, Any]], path: str) -> None:
    fields = [k for k in records[0] if k not in CSV_SKIP]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for r in records:
            writer.writerow({k: "" if r[k] is None else r[k] for k in fields})


def check_plot() -> None:
    """Fail before the load runs, not after, when the plot cannot be drawn."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SetupError(PLOT_MISSING) from None


def write_plot(records: list[dict[str, Any]], path: str) -> None:
    """Throughput and latency percentiles against concurrency (or request rate)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    rate_mode = records[0]["mode"] == "request_rate"
    xs = [r["request_rate"] if rate_mode else r["concurrency"] for r in records]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(7, 6))
    top.plot(xs, [r["throughput"] for r in records], marker="o")
    top.set_ylabel("throughput (requests/s)")
    top.set_ylim(bottom=0)
    top.grid(True, alpha=0.3)
    for key, label in (
        ("p50_us", "p50"),
        ("p90_us", "p90"),
        ("p99_us", "p99"),
        ("p99_9_us", "p99.9"),
    ):
        ys = [r[key] / 1000 if r[key] is not None else float("nan") for r in records]
        bottom.plot(xs, ys, marker="o", label=label)
    bottom.set_ylabel("latency (ms)")
    bottom.set_xlabel("request rate (requests/s)" if rate_mode else "concurrency")
    bottom.set_ylim(bottom=0)
    bottom.grid(True, alpha=0.3)
    bottom.legend()
    first = records[0]
    top.set_title(f"{first['model']} ({first['protocol']}, batch {first['batch_size']})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
