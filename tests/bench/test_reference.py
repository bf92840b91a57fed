"""`modelyard bench` against the reference Triton 2.51 on the example models: the same
command and the same checks as against modelyard (skipped when the reference is absent)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bench.helpers import EXAMPLES, bench, check_records
from tests.conftest import Serving
from tests.reference import ReferenceServer, reference_available, start_reference

pytestmark = [
    pytest.mark.reference,
    pytest.mark.skipif(not reference_available(), reason="reference Triton is not installed"),
]


@pytest.fixture(scope="module")
def triton(serving: Serving) -> Iterator[ReferenceServer]:
    repo = serving.repo(["add_sub", "repeat", "string_upper", "accumulate"], EXAMPLES, copy=True)
    ref = start_reference(repo)
    try:
        yield ref
    finally:
        ref.stop()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sweep_against_triton(triton: ReferenceServer, tmp_path: Path, protocol: str) -> None:
    url = triton.http_url if protocol == "http" else triton.grpc_url
    run = bench(
        tmp_path,
        "add_sub",
        "-i",
        protocol,
        "--url",
        url,
        "--concurrency",
        "1:3:2",
        "--requests",
        "40",
        "--warmup",
        "0.1",
    )
    check_records(run, [1, 3], protocol=protocol)


def test_decoupled_stream_against_triton(triton: ReferenceServer, tmp_path: Path) -> None:
    data = tmp_path / "count.json"
    data.write_text(json.dumps({"data": [{"COUNT": [4]}]}))
    run = bench(
        tmp_path,
        "repeat",
        "-i",
        "grpc",
        "--url",
        triton.grpc_url,
        "--input-data",
        str(data),
        "--requests",
        "20",
        "--warmup",
        "0",
        "--workers",
        "1",
    )
    check_records(run, [1], protocol="grpc", responses_per_request=4)


def test_bytes_and_unknown_model_against_triton(triton: ReferenceServer, tmp_path: Path) -> None:
    run = bench(
        tmp_path,
        "string_upper",
        "--url",
        triton.http_url,
        "--shape",
        "INPUT0:2",
        "--requests",
        "20",
        "--warmup",
        "0",
        "--workers",
        "1",
    )
    check_records(run, [1], protocol="http")
    missing = bench(tmp_path, "no_such_model", "--url", triton.http_url, "--requests", "5")
    assert missing.returncode == 2, str(missing)
    assert "cannot read model 'no_such_model'" in missing.stderr


def test_sequences_against_triton(triton: ReferenceServer, tmp_path: Path) -> None:
    run = bench(
        tmp_path,
        "accumulate",
        "-i",
        "grpc",
        "--url",
        triton.grpc_url,
        "--concurrency",
        "2",
        "--sequence-length",
        "3",
        "--requests",
        "30",
        "--warmup",
        "0",
        "--workers",
        "1",
    )
    check_records(run, [2], protocol="grpc")
    assert run.records[0]["sequences"] > 0
