"""The metrics options against the reference Triton 2.51: with the same flags and the same
requests, the same metric families (names, types, help texts, in the same order) and the same
series (sample names and label sets); values aside, which differ by nature (latencies,
memory; there is no pinned-memory pool here)."""

from __future__ import annotations

import re
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.conftest import Serving
from tests.helpers import MODELS, http_input, read_metrics
from tests.reference import free_ports, reference_available, start_reference

pytestmark = [pytest.mark.reference, pytest.mark.timeout(600)]

MODELS_USED = ("cloud_add", "http_decoupled")
_SAMPLE = re.compile(r"([A-Za-z_:][\w:]*)(?:\{(.*)\})? (\S+)")


def exposition(text: str) -> tuple[list[tuple[str, str, str]], set[tuple[str, frozenset[str]]]]:
    """([(family, type, help)] in order, {(sample name, its labels)})."""
    helps = dict(re.findall(r"^# HELP (\S+) (.*)$", text, re.M))
    families = [
        (n, t, helps.get(n, "")) for n, t in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M)
    ]
    series = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            m = _SAMPLE.fullmatch(line)
            assert m is not None, line
            labels = frozenset(re.findall(r'\w+="(?:[^"\\]|\\.)*"', m.group(2) or ""))
            series.add((m.group(1), labels))
    return families, series


def traffic(http_url: str) -> None:
    with httpclient.InferenceServerClient(http_url, network_timeout=60) as client:
        for i in range(3):
            a = np.array([float(i)], np.float32)
            client.infer("cloud_add", [http_input("A", a), http_input("B", a)])


def both(serving: Serving, tmp_path: Path, *flags: str) -> tuple[str, str]:
    """The metrics text of modelyard and of the reference, each run with ``flags`` on the same
    repository and given the same requests."""
    if not reference_available():
        pytest.skip("reference Triton is not installed")
    repo = tmp_path / "repo"
    for name in MODELS_USED:
        shutil.copytree(MODELS / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    with serving.server(repo, *flags) as server:
        traffic(server.http_url)
        mine = read_metrics(server.metrics_url)
    ref = start_reference(repo, *flags)
    try:
        traffic(ref.http_url)
        theirs = read_metrics(ref.metrics_url)
    finally:
        ref.stop()
    return mine, theirs


def test_summaries_and_cpu_gauges_match_triton(serving: Serving, tmp_path: Path) -> None:
    flags = ("--metrics-config=summary_latencies=true",
             "--metrics-config=summary_quantiles=0.5:0.05,0.9:0.01,0.99:0.001")  # fmt: skip
    mine, theirs = both(serving, tmp_path, *flags)
    (my_families, my_series), (their_families, their_series) = exposition(mine), exposition(theirs)
    assert my_families == their_families
    assert my_series == their_series
    assert any(name == "nv_inference_queue_summary_us" for name, _, _ in my_families)
    assert ("nv_cpu_utilization", frozenset()) in my_series


def test_without_cpu_gauges_and_latency_counters_as_triton(
    serving: Serving, tmp_path: Path
) -> None:
    flags = ("--allow-cpu-metrics=false", "--metrics-config=counter_latencies=false")
    mine, theirs = both(serving, tmp_path, *flags)
    (my_families, my_series), (their_families, their_series) = exposition(mine), exposition(theirs)
    assert my_families == their_families
    assert my_series == their_series
    assert not any(name.startswith("nv_cpu_") for name, _, _ in my_families)


def test_no_metrics_port_as_triton(serving: Serving, tmp_path: Path) -> None:
    if not reference_available():
        pytest.skip("reference Triton is not installed")
    repo = tmp_path / "repo"
    shutil.copytree(MODELS / "cloud_add", repo / "cloud_add")
    (mine,) = free_ports(1)
    with serving.server(repo, "--allow-metrics=false", "--metrics-port", str(mine),
                        endpoints=("http", "grpc")) as server:  # fmt: skip
        traffic(server.http_url)
        assert not _listening(mine)
    ref = start_reference(repo, "--allow-metrics=false", metrics=False)
    try:
        traffic(ref.http_url)
        assert not _listening(ref.metrics_port)
    finally:
        ref.stop()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        return True
    except OSError:
        return False
