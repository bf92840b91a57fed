"""Flags of `modelyard bench`, named after perf_analyzer's where it has one, and their checks."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

from modelyard.bench.llm_args import (
    OPENAI_PORT,
    LlmOptions,
    LlmUsageError,
    add_llm_arguments,
    llm_options,
)

DEFAULT_PORTS = {"http": 8000, "grpc": 8001}


class UsageError(Exception):
    """A flag value that cannot work; reported as one line, exit code 2."""


@dataclass(frozen=True)
class Options:
    model: str
    url: str
    protocol: str  # "http" or "grpc"
    model_version: str = ""
    streaming: bool = False  # forced on for decoupled models
    concurrency: tuple[int, ...] = (1,)
    request_rates: tuple[float, ...] = ()  # non-empty: request-rate mode instead of concurrency
    distribution: str = "constant"  # or "poisson" (request-rate mode)
    duration_s: float | None = 5.0  # per step; None when request_count is set
    request_count: int | None = None
    warmup_s: float = 0.5
    batch_size: int = 1
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    input_data: tuple[str, ...] = ("random",)
    string_length: int = 128
    string_data: str | None = None
    sequence_length: int | None = None  # None: 20, or each data stream's length
    sequence_length_variation: float = 20.0  # percent
    sequence_ids: tuple[int, int | None] = (1, None)  # [start, end)
    workers: int = 1
    request_timeout_s: float = 30.0
    json_path: str | None = None
    csv_path: str | None = None
    plot_path: str | None = None
    progress: bool = True
    llm: LlmOptions | None = None  # --endpoint: LLM mode

    @property
    def mode(self) -> str:
        return "request_rate" if self.request_rates else "concurrency"

    @property
    def steps(self) -> tuple[int, ...] | tuple[float, ...]:
        return self.request_rates or self.concurrency


def linear_range(text: str, what: str, integer: bool) -> list[float]:
    """perf_analyzer's START[:END[:STEP]]: START, START+STEP, ... while <= END (END included
    when the steps land on it); END defaults to START, STEP to 1."""
    parts = text.split(":")
    if not 1 <= len(parts) <= 3 or not all(parts):
        raise UsageError(f"{what} expects START[:END[:STEP]], got '{text}'")
    try:
        values = [int(p) if integer else float(p) for p in parts]
    except ValueError:
        kind = "integers" if integer else "numbers"
        raise UsageError(f"{what} expects {kind} in START[:END[:STEP]], got '{text}'") from None
    start = values[0]
    end = values[1] if len(values) > 1 else start
    step = values[2] if len(values) > 2 else 1
    if start <= 0 or step <= 0:
        raise UsageError(f"{what}: START and STEP must be positive, got '{text}'")
    if end == 0:
        raise UsageError(
            f"{what}: END 0 (perf_analyzer's search up to a latency threshold) is not "
            f"supported: give END, got '{text}'"
        )
    if end < start:
        raise UsageError(f"{what}: END must be at least START, got '{text}'")
    out: list[float] = []
    k = 0
    while start + k * step <= end * (1 + 1e-12):  # float steps: 0.1 * 3 may overshoot 0.3
        out.append(start + k * step)
        k += 1
    return out


def parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """perf_analyzer's --shape NAME:D1,D2,... (dims without the batch dimension)."""
    name, sep, dims = text.rpartition(":")
    try:
        shape = tuple(int(d) for d in dims.split(",")) if dims else ()
    except ValueError:
        shape = (-1,)
    if not sep or not name or not shape or any(d < 0 for d in shape):
        raise UsageError(f"--shape expects NAME:D1,D2,... with dims >= 0, got '{text}'")
    return name, shape


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench",
        help="generate load against a Triton-protocol server and report latency",
        description="Load generator for any server speaking Triton's HTTP/gRPC protocol "
        "(modelyard or Triton): a concurrency sweep or request rates, one table row and one "
        "JSON/CSV record per step.",
    )
    p.add_argument("model", help="model name")
    p.add_argument(
        "-x", "--model-version", default="", help="model version (default: the server's choice)"
    )
    p.add_argument(
        "-u",
        "--url",
        default=None,
        help="server HOST:PORT (default localhost:8000 for http, localhost:8001 for grpc)",
    )
    p.add_argument("-i", "--protocol", choices=["http", "grpc"], default="http", type=str.lower)
    p.add_argument(
        "--streaming",
        action="store_true",
        help="send over gRPC ModelStreamInfer (always on for decoupled models)",
    )
    load = p.add_mutually_exclusive_group()
    load.add_argument(
        "--concurrency",
        "--concurrency-range",
        default="1",
        metavar="START[:END[:STEP]]",
        help="requests kept in flight; a range sweeps START, START+STEP, ... <= END (default 1)",
    )
    load.add_argument(
        "--request-rate",
        "--request-rate-range",
        default=None,
        metavar="START[:END[:STEP]]",
        help="open-loop requests per second instead of a concurrency; a range sweeps",
    )
    p.add_argument(
        "--request-distribution",
        choices=["constant", "poisson"],
        default="constant",
        help="spacing of requests in request-rate mode",
    )
    stop = p.add_mutually_exclusive_group()
    stop.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="measurement time per step (default 5)",
    )
    stop.add_argument(
        "--requests",
        type=int,
        default=None,
        metavar="N",
        help="measure N requests per step instead of a fixed time",
    )
    p.add_argument(
        "--warmup",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="load sent before each step's measurement starts, not counted (default 0.5)",
    )
    p.add_argument(
        "-b", "--batch-size", type=int, default=1, help="batch size of each request (default 1)"
    )
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME:D1,D2",
        help="shape of an input with variable dims (without the batch dim); repeatable",
    )
    p.add_argument(
        "--input-data",
        action="append",
        default=[],
        metavar="random|zero|PATH",
        help="random (default), zero, a perf_analyzer input-data JSON file (repeatable), "
        "or a folder with one raw file per input",
    )
    p.add_argument(
        "--string-length",
        type=int,
        default=128,
        help="length of random BYTES elements (default 128)",
    )
    p.add_argument(
        "--string-data",
        default=None,
        help="fill BYTES inputs with this string instead of random ones",
    )
    p.add_argument(
        "--sequence-length",
        type=int,
        default=None,
        metavar="N",
        help="sequence models: requests per sequence (default 20, or each data stream's length)",
    )
    p.add_argument(
        "--sequence-length-variation",
        type=float,
        default=20.0,
        metavar="PERCENT",
        help="sequence models: lengths vary by up to this much around --sequence-length (default 20)",
    )
    p.add_argument(
        "--sequence-id-range",
        default="1",
        metavar="START[:END]",
        help="sequence models: correlation ids used, END excluded (default: from 1, unbounded)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="client processes (default: the CPU count, at most the largest concurrency)",
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="a request unanswered this long counts as an error (default 30)",
    )
    p.add_argument(
        "--json",
        dest="json_path",
        default=None,
        metavar="FILE",
        help="write one record per step as JSON",
    )
    p.add_argument(
        "--csv", dest="csv_path", default=None, metavar="FILE", help="write one row per step as CSV"
    )
    p.add_argument(
        "--plot",
        dest="plot_path",
        default=None,
        metavar="FILE.png",
        help="plot throughput and latency per step (needs modelyard[plot])",
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    add_llm_arguments(p)


def _url(value: str | None, protocol: str, default_port: int | None = None) -> str:
    if value is None:
        return f"localhost:{default_port or DEFAULT_PORTS[protocol]}"
    url = value.removeprefix("http://") if protocol == "http" else value
    host, sep, port = url.rpartition(":")
    if "://" in url or "/" in url or not sep or not host or not port.isdigit():
        raise UsageError(f"--url expects HOST:PORT, got '{value}'")
    return url


def _id_range(text: str) -> tuple[int, int | None]:
    start, sep, end = text.partition(":")
    try:
        ids = (int(start), int(end) if sep else None)
    except ValueError:
        ids = (-1, None)
    if ids[0] < 0 or (ids[1] is not None and ids[1] <= ids[0]):
        raise UsageError(
            f"--sequence-id-range expects START[:END] with 0 <= START < END, got '{text}'"
        )
    return ids


def options_from(ns: argparse.Namespace) -> Options:
    """Check the parsed flags together and fill in defaults that depend on each other."""
    if ns.duration is not None and not ns.duration > 0:
        raise UsageError(f"--duration must be positive, got {ns.duration}")
    if ns.requests is not None and ns.requests < 1:
        raise UsageError(f"--requests must be at least 1, got {ns.requests}")
    if ns.warmup < 0:
        raise UsageError(f"--warmup must be >= 0, got {ns.warmup}")
    if ns.batch_size < 1:
        raise UsageError(f"-b/--batch-size must be at least 1, got {ns.batch_size}")
    if not ns.request_timeout > 0:
        raise UsageError(f"--request-timeout must be positive, got {ns.request_timeout}")
    if ns.string_length < 0:
        raise UsageError(f"--string-length must be >= 0, got {ns.string_length}")
    if ns.workers is not None and ns.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {ns.workers}")
    try:
        llm = llm_options(ns)
    except LlmUsageError as exc:
        raise UsageError(str(exc)) from None
    if ns.streaming and ns.protocol != "grpc":
        raise UsageError("--streaming needs --protocol grpc (ModelStreamInfer is a gRPC call)")
    rates: list[float] = []
    concurrency: list[int] = [1]
    if ns.request_rate is not None:
        rates = linear_range(ns.request_rate, "--request-rate", integer=False)
    else:
        concurrency = [int(c) for c in linear_range(ns.concurrency, "--concurrency", integer=True)]
    if ns.sequence_length is not None and ns.sequence_length < 1:
        raise UsageError(f"--sequence-length must be at least 1, got {ns.sequence_length}")
    if not 0 <= ns.sequence_length_variation < 100:
        raise UsageError("--sequence-length-variation must be in [0, 100)")
    input_data = tuple(ns.input_data) or ("random",)
    if len(input_data) > 1 and {"random", "zero"} & set(input_data):
        raise UsageError("--input-data random/zero cannot be combined with other --input-data")
    shapes = dict(parse_shape(s) for s in ns.shape)
    cpus = os.cpu_count() or 1
    workers = ns.workers or (cpus if rates else min(cpus, max(concurrency)))
    return Options(
        model=ns.model,
        url=_url(ns.url, ns.protocol, OPENAI_PORT if llm and llm.openai else None),
        protocol=ns.protocol,
        model_version=ns.model_version,
        streaming=ns.streaming,
        concurrency=tuple(concurrency),
        request_rates=tuple(rates),
        distribution=ns.request_distribution,
        duration_s=None if ns.requests is not None else (ns.duration or 5.0),
        request_count=ns.requests,
        warmup_s=ns.warmup,
        batch_size=ns.batch_size,
        shapes=shapes,
        input_data=input_data,
        string_length=ns.string_length,
        string_data=ns.string_data,
        sequence_length=ns.sequence_length,
        sequence_length_variation=ns.sequence_length_variation,
        sequence_ids=_id_range(ns.sequence_id_range),
        workers=workers,
        request_timeout_s=ns.request_timeout,
        json_path=ns.json_path,
        csv_path=ns.csv_path,
        plot_path=ns.plot_path,
        progress=ns.progress,
        llm=llm,
    )
