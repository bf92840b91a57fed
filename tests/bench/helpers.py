"""Run `modelyard bench` as a user does (a subprocess) and check the records it writes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tritonclient.http as httpclient

from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "model_repository"
TEST_MODELS = ROOT / "tests" / "models"
BENCH_TIMEOUT_S = 180


@dataclass
class BenchRun:
    returncode: int
    stdout: str
    stderr: str
    records: list[dict[str, Any]]

    def __str__(self) -> str:
        return f"exit {self.returncode}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


def bench(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> BenchRun:
    """``modelyard bench ARGS --json FILE`` (quiet, short warm-up); the records it wrote."""
    out = tmp_path / f"bench-{time.monotonic_ns()}.json"
    proc = subprocess.run(
        [sys.executable, "-m", "modelyard", "bench", *args, "--json", str(out), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=BENCH_TIMEOUT_S,
        env=env,
    )
    records = json.loads(out.read_text()) if out.exists() else []
    return BenchRun(proc.returncode, proc.stdout, proc.stderr, records)


def _ready(hostport: str) -> bool:
    try:
        with httpclient.InferenceServerClient(hostport) as client:
            return bool(client.is_server_ready())
    except Exception:
        return False


def wait_ready(hostport: str, timeout: float = 60.0) -> None:
    wait_until(lambda: _ready(hostport), timeout, 0.1, what=f"the server at {hostport} to be ready")


def check_records(
    run: BenchRun, steps: list[int], *, protocol: str, responses_per_request: int = 1
) -> None:
    """One record per concurrency step, in order, each consistent in itself."""
    assert run.returncode == 0, str(run)
    assert [r["concurrency"] for r in run.records] == steps, str(run)
    for r in run.records:
        assert r["protocol"] == protocol
        assert r["mode"] == "concurrency" and r["request_rate"] is None
        assert r["errors"] == r["warmup_errors"] == r["unanswered"] == 0, r["error_samples"]
        assert r["requests"] > 0
        assert r["duration_s"] > 0
        assert r["throughput"] > 0
        assert r["throughput"] == pytest.approx(r["requests"] / r["duration_s"], rel=1e-4)
        assert r["infer_per_s"] == pytest.approx(r["throughput"] * r["batch_size"])
        assert r["responses"] == r["requests"] * responses_per_request
        latencies = [
            r[k] for k in ("min_us", "p50_us", "p90_us", "p95_us", "p99_us", "p99_9_us", "max_us")
        ]
        assert latencies == sorted(latencies), latencies
        assert latencies[0] > 0
        assert r["min_us"] <= r["avg_us"] <= r["max_us"]
