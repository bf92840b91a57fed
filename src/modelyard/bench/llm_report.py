"""LLM mode's part of a step's record, its table and its plot.

The metrics are genai-perf's: time to first token (request sent to the first event carrying
a token, one value per request), inter-token latency (the gap before each later token event
divided by the tokens it carries, one value per event), output sequence length (tokens per
request), output token throughput (all output tokens over the measurement window), output
token throughput per user (a request's tokens after the first over its generation phase) and
request throughput (the record's ``throughput``). Samples are pooled over the workers;
percentiles follow stats.py's rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from modelyard.bench.load import WorkerResult
from modelyard.bench.stats import failed, latency_summary

COUNT_FIELDS = ("avg", "min", "p50", "p90", "p99", "max")


def _pooled(results: list[WorkerResult], name: str) -> np.ndarray[Any, np.dtype[Any]]:
    """One sample array of every worker's, joined (int64, or float64 for ``per_user``)."""
    parts = [np.array(getattr(r.tokens, name)) for r in results if r.tokens is not None]
    parts = [p for p in parts if p.size]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _prefixed(prefix: str, summary: dict[str, Any]) -> dict[str, Any]:
    return {f"{prefix}_{key}": value for key, value in summary.items()}


def rank(n: int, q: float) -> int:
    """stats.percentile's rule (the sample at rank round(q% of (n - 1))) for any values."""
    return int(q / 100.0 * (n - 1) + 0.5)


def _counts(values: np.ndarray[Any, np.dtype[Any]]) -> dict[str, float | None]:
    if values.size == 0:
        return dict.fromkeys(COUNT_FIELDS)
    ordered = np.sort(values)
    return {
        "avg": round(float(ordered.mean()), 3),
        "min": round(float(ordered[0]), 3),
        **{f"p{q}": round(float(ordered[rank(ordered.size, q)]), 3) for q in (50, 90, 99)},
        "max": round(float(ordered[-1]), 3),
    }


def llm_fields(results: list[WorkerResult], window_s: float) -> dict[str, Any]:
    """The LLM fields of a step's record (latencies in µs, like the record's others)."""
    window = max(window_s, 1e-9)
    osl = _pooled(results, "output_tokens")
    ttft = _pooled(results, "ttft_ns")
    return {
        "output_tokens": int(osl.sum()),
        "output_token_throughput": float(osl.sum()) / window,
        **_prefixed("ttft", latency_summary(ttft)),
        **_prefixed("itl", latency_summary(_pooled(results, "itl_ns"))),
        **_prefixed("output_sequence_length", _counts(osl)),
        **_prefixed("output_token_throughput_per_user", _counts(_pooled(results, "per_user"))),
        "requests_with_tokens": int(ttft.size),
        "requests_without_tokens": sum(r.tokens.without_tokens for r in results if r.tokens),
    }


def _ms(us: int | None) -> str:
    return "-" if us is None else f"{us / 1000:.2f}"


def print_llm_table(records: list[dict[str, Any]], console: Console) -> None:
    first = records[0]
    rate_mode = first["mode"] == "request_rate"
    table = Table(
        title=f"{first['model']} over {first['endpoint']} (times in ms)", title_justify="left"
    )
    step = "rate/s" if rate_mode else "concurrency"
    table.add_column(step, justify="right", min_width=len(step))
    for name in ("requests", "req/s", "tokens/s", "tokens/req"):
        table.add_column(name, justify="right")
    for name in ("TTFT p50", "TTFT p99", "ITL p50", "ITL p99"):
        table.add_column(name, justify="right")
    table.add_column("errors", justify="right")
    for r in records:
        osl = r["output_sequence_length_avg"]
        bad = failed(r)
        table.add_row(
            f"{r['request_rate']:g}" if rate_mode else str(r["concurrency"]),
            str(r["requests"]),
            f"{r['throughput']:.1f}",
            f"{r['output_token_throughput']:.1f}",
            "-" if osl is None else f"{osl:.1f}",
            *(_ms(r[k]) for k in ("ttft_p50_us", "ttft_p99_us", "itl_p50_us", "itl_p99_us")),
            f"{r['errors'] + r['warmup_errors'] + r['unanswered']}" + (" !" if bad else ""),
            style="red" if bad else None,
        )
    console.print(table)
    for r in records:
        if r["requests_without_tokens"]:
            step = (
                f"rate {r['request_rate']:g}/s" if rate_mode else f"concurrency {r['concurrency']}"
            )
            console.print(
                f"[yellow]{step}: {r['requests_without_tokens']} request(s) answered with no "
                "token (no text in any event)[/yellow]",
                highlight=False,
            )


def write_llm_plot(records: list[dict[str, Any]], path: str) -> None:
    """Token throughput, time to first token and inter-token latency per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rate_mode = records[0]["mode"] == "request_rate"
    xs = [r["request_rate"] if rate_mode else r["concurrency"] for r in records]
    fig, (top, middle, bottom) = plt.subplots(3, 1, sharex=True, figsize=(7, 8))
    top.plot(xs, [r["output_token_throughput"] for r in records], marker="o")
    top.set_ylabel("output tokens/s")
    for axis, prefix, label in (
        (middle, "ttft", "time to first token"),
        (bottom, "itl", "inter-token latency"),
    ):
        for key in ("p50", "p90", "p99"):
            values = [r[f"{prefix}_{key}_us"] for r in records]
            axis.plot(
                xs,
                [v / 1000 if v is not None else float("nan") for v in values],
                marker="o",
                label=key,
            )
        axis.set_ylabel(f"{label} (ms)")
        axis.legend()
    for axis in (top, middle, bottom):
        axis.set_ylim(bottom=0)
        axis.grid(True, alpha=0.3)
    bottom.set_xlabel("request rate (requests/s)" if rate_mode else "concurrency")
    first = records[0]
    top.set_title(f"{first['model']} ({first['endpoint']})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
