"""`modelyard bench`: read the model, build the requests, run the sweep, report.

Exit codes: 0 when every step measured requests and none failed; 1 when requests failed
(or a step measured none); 2 when bench could not start (bad flags, server or model).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from modelyard.bench.args import Options, UsageError, options_from
from modelyard.bench.inputs import build_streams
from modelyard.bench.load import StepPlan, WorkerResult
from modelyard.bench.model import ModelInfo, SetupError, fetch_model
from modelyard.bench.pool import WorkerPool
from modelyard.bench.report import (
    check_plot,
    print_errors,
    print_table,
    write_csv,
    write_json,
    write_plot,
)
from modelyard.bench.senders import SenderSpec, SequenceSpec
from modelyard.bench.stats import failed, step_record
from modelyard.bench.wire import grpc_request, http_request

START_DELAY_NS = 100_000_000  # lets every worker receive its plan before the load starts
STEP_SLACK_S = 30.0  # past a step's last possible request, before the parent gives up


def run(ns: argparse.Namespace) -> int:
    try:
        opts = options_from(ns)
        _check_outputs(opts)
        if opts.plot_path:
            check_plot()
        if opts.llm is not None:
            from modelyard.bench.llm_setup import llm_spec

            spec: SenderSpec = llm_spec(opts)
        else:
            model = fetch_model(
                opts.protocol, opts.url, opts.model, opts.model_version, opts.request_timeout_s
            )
            spec = sender_spec(opts, model)
        records = sweep(opts, spec, Console(stderr=True))
    except (UsageError, SetupError) as exc:
        print(f"modelyard bench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("modelyard bench: interrupted", file=sys.stderr)
        return 130
    out = Console()
    if not out.is_terminal:
        out = Console(width=120)
    if opts.llm is not None:
        from modelyard.bench.llm_report import print_llm_table, write_llm_plot

        print_llm_table(records, out)
        print_errors(records, out)
    else:
        print_table(records, out)
    try:
        if opts.json_path:
            write_json(records, opts.json_path)
        if opts.csv_path:
            write_csv(records, opts.csv_path)
        if opts.plot_path:
            (write_llm_plot if opts.llm is not None else write_plot)(records, opts.plot_path)
    except OSError as exc:
        print(
            f"modelyard bench: error: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr
        )
        return 2
    return 1 if any(failed(r) for r in records) else 0


def _check_outputs(opts: Options) -> None:
    """A missing folder fails now, not after the load has run."""
    for flag, path in (
        ("--json", opts.json_path),
        ("--csv", opts.csv_path),
        ("--plot", opts.plot_path),
    ):
        if path is not None and not Path(path).absolute().parent.is_dir():
            raise UsageError(f"{flag} {path}: no folder {Path(path).absolute().parent}")


def sender_spec(opts: Options, model: ModelInfo) -> SenderSpec:
    streaming = opts.streaming or model.decoupled
    if streaming and opts.protocol != "grpc":
        raise SetupError(
            f"model '{model.name}' is decoupled: use --protocol grpc, and bench reads its "
            "responses over a ModelStreamInfer stream"
        )
    sequence = sequence_spec(opts, model) if model.sequence else None
    streams = build_streams(model, opts)
    requests = [r for stream in streams for r in stream]
    indices, n = [], 0
    for stream in streams:
        indices.append(tuple(range(n, n + len(stream))))
        n += len(stream)
    name, version = opts.model, opts.model_version
    http = opts.protocol == "http"
    return SenderSpec(
        protocol=opts.protocol,
        url=opts.url,
        streaming=streaming,
        decoupled=model.decoupled,
        http_requests=tuple(http_request(name, version, r, model.outputs) for r in requests)
        if http
        else (),
        grpc_requests=()
        if http
        else tuple(grpc_request(name, version, r, streaming) for r in requests),
        streams=tuple(indices),
        timeout_s=opts.request_timeout_s,
        sequence=sequence,
    )


def sequence_spec(opts: Options, model: ModelInfo) -> SequenceSpec:
    if opts.request_rates:
        raise SetupError(
            f"model '{model.name}' uses the sequence batcher: bench drives sequences with "
            "--concurrency (one sequence per lane), not --request-rate"
        )
    start, end = opts.sequence_ids
    if end is not None and end - start < max(opts.concurrency):
        raise SetupError(
            f"--sequence-id-range {start}:{end} holds {end - start} ids, fewer than the "
            f"{max(opts.concurrency)} sequences in flight at --concurrency {max(opts.concurrency)}"
        )
    length = opts.sequence_length
    if length is None and opts.input_data[0] in ("random", "zero"):
        length = 20  # perf_analyzer's default; with data, each stream's own length
    return SequenceSpec(length, opts.sequence_length_variation / 100, start, end)


def plans_for(
    opts: Options, step: int, value: float, t0: int, t_meas: int, t_end: int | None
) -> list[StepPlan | None]:
    """Each worker's share of a step: lanes split as evenly as they go, or the rate split
    evenly with the constant schedules interleaved."""
    n = opts.workers
    plans: list[StepPlan | None] = []
    for i in range(n):
        if opts.request_rates:
            plans.append(
                StepPlan(
                    t0,
                    t_meas,
                    t_end,
                    rate=value / n,
                    phase_s=i / value,
                    poisson=opts.distribution == "poisson",
                    seed=step * 1000 + i,
                )
            )
        else:
            total = int(value)
            lanes = total // n + (1 if i < total % n else 0)
            offset = i * (total // n) + min(i, total % n)
            plan = StepPlan(
                t0,
                t_meas,
                t_end,
                lanes=lanes,
                seed=step * 1000 + i,
                lane_offset=offset,
                total_lanes=total,
            )
            plans.append(plan if lanes else None)
    return plans


def sweep(opts: Options, spec: SenderSpec, console: Console) -> list[dict[str, Any]]:
    rate_mode = bool(opts.request_rates)
    connections = 0 if rate_mode else math.ceil(max(opts.concurrency) / opts.workers)
    base = {
        "model": opts.model,
        "model_version": opts.model_version,
        "protocol": opts.protocol,
        "streaming": spec.streaming,
        "mode": opts.mode,
        "batch_size": opts.batch_size,
    }
    if opts.llm is not None:
        base["endpoint"] = opts.llm.endpoint
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[done]} requests"),
        TimeElapsedColumn(),
        console=console,
        disable=not opts.progress,
    )
    records = []
    with WorkerPool(spec, opts.workers, connections) as pool, progress:
        for step, value in enumerate(opts.steps):
            results, window_s = _run_step(opts, pool, progress, step, value)
            record = step_record(
                {**base, "concurrency": None if rate_mode else int(value)},
                results,
                window_s,
                opts.batch_size,
                float(value) if rate_mode else None,
                spec.sequence is not None,
            )
            if opts.llm is not None:
                from modelyard.bench.llm_report import llm_fields

                record.update(llm_fields(results, window_s))
            records.append(record)
    return records


def _run_step(
    opts: Options, pool: WorkerPool, progress: Progress, step: int, value: float
) -> tuple[list[WorkerResult], float]:
    """One step on every worker; returns their results and the measurement window (s)."""
    count = opts.request_count
    pool.quota.value = count or 0
    t0 = time.monotonic_ns() + START_DELAY_NS
    t_meas = t0 + int(opts.warmup_s * 1e9)
    t_end = None if opts.duration_s is None else t_meas + int(opts.duration_s * 1e9)
    label = f"rate {value:g}/s" if opts.request_rates else f"concurrency {value}"
    # the bar follows the clock for a duration, the requests measured for a request count
    total = float(count) if count is not None else (opts.warmup_s + (opts.duration_s or 0.0))
    task = progress.add_task(label, total=total, done=0)

    def tick() -> None:
        done = sum(pool.progress[:])
        elapsed = max(0.0, (time.monotonic_ns() - t0) / 1e9)
        progress.update(task, completed=done if count is not None else elapsed, done=done)

    longest = count * opts.request_timeout_s if count is not None else (opts.duration_s or 0.0)
    deadline = time.monotonic() + opts.warmup_s + longest + opts.request_timeout_s + STEP_SLACK_S
    results = pool.run(plans_for(opts, step, value, t0, t_meas, t_end), deadline, tick)
    tick()
    progress.update(task, completed=total)
    last = t_end if t_end is not None else max((r.last_end_ns for r in results), default=t_meas)
    return results, (last - t_meas) / 1e9
