"""`modelyard bench` against a real modelyard server, over HTTP, gRPC and gRPC streams."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bench.helpers import EXAMPLES, TEST_MODELS, BenchRun, bench, check_records, wait_ready
from tests.conftest import Serving
from tests.helpers import make_repo
from tests.serverproc import ServerProcess

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    examples = ["add_sub", "repeat", "string_upper", "scale_batched", "accumulate"]
    repo = make_repo(serving.repo(examples, EXAMPLES), ["py_exec_error"], TEST_MODELS)
    with serving.server(repo) as srv:
        wait_ready(srv.http_url)
        yield srv


def test_http_sweep_writes_json_csv_and_plot(server: ServerProcess, tmp_path: Path) -> None:
    csv_path, png_path = tmp_path / "steps.csv", tmp_path / "steps.png"
    run = bench(
        tmp_path,
        "add_sub",
        "--url",
        server.http_url,
        "--concurrency",
        "1:4:2",
        "--duration",
        "0.5",
        "--warmup",
        "0.1",
        "--csv",
        str(csv_path),
        "--plot",
        str(png_path),
    )
    check_records(run, [1, 3], protocol="http")  # 1:4:2 is 1, 3 as in perf_analyzer
    assert "concurrency" in run.stdout and "p99.9 ms" in run.stdout
    with csv_path.open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["concurrency"]) for r in rows] == [1, 3]
    for row, record in zip(rows, run.records, strict=True):
        assert int(row["requests"]) == record["requests"]
        assert int(row["p99_9_us"]) == record["p99_9_us"]
        assert float(row["throughput"]) == pytest.approx(record["throughput"])
        assert row["request_rate"] == ""  # None is an empty cell
    assert png_path.read_bytes()[:8] == PNG_SIGNATURE


def test_grpc_request_count(server: ServerProcess, tmp_path: Path) -> None:
    run = bench(
        tmp_path,
        "add_sub",
        "-i",
        "grpc",
        "--url",
        server.grpc_url,
        "--concurrency",
        "2",
        "--requests",
        "50",
        "--warmup",
        "0",
        "--workers",
        "1",
    )
    check_records(run, [2], protocol="grpc")
    assert run.records[0]["requests"] == 50
    assert run.records[0]["streaming"] is False


def test_decoupled_model_streams_and_counts_responses(
    server: ServerProcess, tmp_path: Path
) -> None:
    data = tmp_path / "count.json"
    data.write_text(json.dumps({"data": [{"COUNT": [3]}]}))
    run = bench(
        tmp_path,
        "repeat",
        "-i",
        "grpc",
        "--url",
        server.grpc_url,
        "--concurrency",
        "1:2",
        "--requests",
        "30",
        "--warmup",
        "0",
        "--workers",
        "1",
        "--input-data",
        str(data),
    )
    check_records(run, [1, 2], protocol="grpc", responses_per_request=3)
    assert all(r["streaming"] for r in run.records)
    assert "resp/s" in run.stdout


def test_decoupled_model_over_http_is_refused(server: ServerProcess, tmp_path: Path) -> None:
    run = bench(tmp_path, "repeat", "--url", server.http_url, "--requests", "5")
    assert run.returncode == 2, str(run)
    assert "model 'repeat' is decoupled: use --protocol grpc" in run.stderr
    assert run.records == []


def test_streaming_a_plain_model(server: ServerProcess, tmp_path: Path) -> None:
    run = bench(
        tmp_path,
        "add_sub",
        "-i",
        "grpc",
        "--streaming",
        "--url",
        server.grpc_url,
        "--concurrency",
        "2",
        "--requests",
        "40",
        "--warmup",
        "0",
        "--workers",
        "1",
    )
    check_records(run, [2], protocol="grpc")
    assert run.records[0]["streaming"] is True


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bytes_model(server: ServerProcess, tmp_path: Path, protocol: str) -> None:
    url = server.http_url if protocol == "http" else server.grpc_url
    run = bench(
        tmp_path,
        "string_upper",
        "-i",
        protocol,
        "--url",
        url,
        "--shape",
        "INPUT0:3",
        "--string-length",
        "16",
        "--requests",
        "30",
        "--warmup",
        "0",
        "--workers",
        "1",
    )
    check_records(run, [1], protocol=protocol)


def test_variable_dims_need_a_shape(server: ServerProcess, tmp_path: Path) -> None:
    run = bench(tmp_path, "string_upper", "--url", server.http_url, "--requests", "5")
    assert run.returncode == 2, str(run)
    assert (
        "input 'INPUT0' has variable dims [-1]: give its shape with --shape INPUT0:" in run.stderr
    )


def test_input_data_file_with_strings_b64_and_shapes(server: ServerProcess, tmp_path: Path) -> None:
    data = tmp_path / "strings.json"
    data.write_text(
        json.dumps(
            {
                "data": [
                    {"INPUT0": ["hello", "world"]},
                    {"INPUT0": {"content": ["a", "b", "c"], "shape": [3]}},
                    {"INPUT0": {"b64": "AQAAAHgCAAAAeXo="}},  # two elements: "x", "yz"
                ]
            }
        )
    )
    run = bench(
        tmp_path,
        "string_upper",
        "-i",
        "grpc",
        "--url",
        server.grpc_url,
        "--input-data",
        str(data),
        "--requests",
        "30",
        "--warmup",
        "0",
        "--workers",
        "1",
    )
    check_records(run, [1], protocol="grpc")


def test_batched_input_data(server: ServerProcess, tmp_path: Path) -> None:
    data = tmp_path / "rows.json"
    data.write_text(json.dumps({"data": [{"INPUT0": [1, 2, 3, 4]}, {"INPUT0": [5, 6, 7, 8]}]}))
    run = bench(
        tmp_path,
        "scale_batched",
        "--url",
        server.http_url,
        "-b",
        "2",
        "--input-data",
        str(data),
        "--concurrency",
        "2",
        "--requests",
        "30",
        "--warmup",
        "0",
        "--workers",
        "1",
    )
    check_records(run, [2], protocol="http")
    assert run.records[0]["batch_size"] == 2
    assert run.records[0]["infer_per_s"] == pytest.approx(2 * run.records[0]["throughput"])


def test_request_rate_mode(server: ServerProcess, tmp_path: Path) -> None:
    run = bench(
        tmp_path,
        "add_sub",
        "--url",
        server.http_url,
        "--request-rate",
        "100:200:100",
        "--request-distribution",
        "poisson",
        "--requests",
        "20",
        "--warmup",
        "0",
    )
    assert run.returncode == 0, str(run)
    assert [r["request_rate"] for r in run.records] == [100.0, 200.0]
    for r in run.records:
        assert r["mode"] == "request_rate" and r["concurrency"] is None
        assert r["requests"] == 20 and r["errors"] == 0
        assert r["send_rate"] > 0 and r["delayed_requests"] >= 0
    assert "rate/s" in run.stdout


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sequence_model(server: ServerProcess, tmp_path: Path, protocol: str) -> None:
    """Lanes send whole sequences: a request without its sequence's START flag, or a
    correlation id shared by two lanes, would come back as an error."""
    url = server.http_url if protocol == "http" else server.grpc_url
    run = bench(
        tmp_path,
        "accumulate",
        "-i",
        protocol,
        "--url",
        url,
        "--concurrency",
        "3",
        "--sequence-length",
        "4",
        "--requests",
        "40",
        "--warmup",
        "0",
    )
    check_records(run, [3], protocol=protocol)
    (record,) = run.records
    assert record["requests"] == 40
    assert record["sequences"] is not None and 0 < record["sequences"] <= 40


def test_sequence_data_streams(server: ServerProcess, tmp_path: Path) -> None:
    data = tmp_path / "streams.json"
    data.write_text(
        json.dumps({"data": [[{"VALUE": [1]}, {"VALUE": [2]}, {"VALUE": [3]}], [{"VALUE": [9]}]]})
    )
    run = bench(
        tmp_path,
        "accumulate",
        "--url",
        server.http_url,
        "--input-data",
        str(data),
        "--concurrency",
        "2",
        "--requests",
        "30",
        "--warmup",
        "0",
        "--workers",
        "1",
    )
    check_records(run, [2], protocol="http")
    assert run.records[0]["sequences"] > 0


def test_sequence_model_refuses_request_rates(server: ServerProcess, tmp_path: Path) -> None:
    run = bench(
        tmp_path, "accumulate", "--url", server.http_url, "--request-rate", "10", "--requests", "5"
    )
    assert run.returncode == 2, str(run)
    assert "bench drives sequences with --concurrency" in run.stderr


def test_failing_requests_are_counted_and_fail_the_run(
    server: ServerProcess, tmp_path: Path
) -> None:
    run = bench(
        tmp_path,
        "py_exec_error",
        "--url",
        server.http_url,
        "--requests",
        "20",
        "--warmup",
        "0",
        "--workers",
        "1",
    )
    assert run.returncode == 1, str(run)
    (record,) = run.records
    assert record["requests"] == 0 and record["errors"] == 20
    assert record["p50_us"] is None
    assert any("model says no" in s for s in record["error_samples"]), record["error_samples"]
    assert "model says no" in run.stdout  # the table is followed by the error messages


def test_unknown_model(server: ServerProcess, tmp_path: Path) -> None:
    for protocol, url in (("http", server.http_url), ("grpc", server.grpc_url)):
        run = bench(tmp_path, "no_such_model", "-i", protocol, "--url", url, "--requests", "5")
        assert run.returncode == 2, str(run)
        assert f"cannot read model 'no_such_model' from {url} over {protocol}" in run.stderr
        assert "unknown model" in run.stderr
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
        assert run.records == []


def test_plot_without_matplotlib(tmp_path: Path) -> None:
    """Fails at once, in one line, before any load is sent (no server needed)."""
    blocker = tmp_path / "blocker"
    (blocker / "matplotlib").mkdir(parents=True)
    (blocker / "matplotlib" / "__init__.py").write_text("raise ImportError('blocked')\n")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")]),
    }
    run: BenchRun = bench(tmp_path, "add_sub", "--url", "127.0.0.1:1", "--plot", "x.png", env=env)
    assert run.returncode == 2, str(run)
    assert (
        run.stderr.strip()
        == "modelyard bench: error: --plot needs matplotlib: pip install 'modelyard[plot]'"
    )


def test_output_folder_must_exist(tmp_path: Path) -> None:
    """Checked before any load is sent (no server needed)."""
    missing = tmp_path / "missing" / "steps.csv"
    run = bench(tmp_path, "add_sub", "--url", "127.0.0.1:1", "--csv", str(missing))
    assert run.returncode == 2, str(run)
    assert (
        run.stderr.strip() == f"modelyard bench: error: --csv {missing}: no folder {missing.parent}"
    )
