"""The pure parts of `modelyard bench`: ranges, input data, request encoding, statistics."""

from __future__ import annotations

import argparse
import base64
import json
import random
import re
from pathlib import Path

import numpy as np
import orjson
import pytest
from tritonclient.grpc import service_pb2
from tritonclient.utils import deserialize_bytes_tensor

from modelyard.bench.args import (
    Options,
    UsageError,
    add_parser,
    linear_range,
    options_from,
    parse_shape,
)
from modelyard.bench.inputs import Request, build_streams
from modelyard.bench.load import WorkerResult, sequence_id, sequence_length
from modelyard.bench.model import ModelInfo, SetupError, TensorSpec, parse_model
from modelyard.bench.senders import SequenceSpec
from modelyard.bench.stats import latency_summary, percentile, step_record
from modelyard.bench.wire import (
    EMPTY_FINAL,
    LENGTH_HEADER,
    grpc_request,
    grpc_sequence_suffix,
    http_request,
)


def build_requests(model: ModelInfo, opts: Options) -> list[Request]:
    streams = build_streams(model, opts)
    assert len(streams) == 1
    return streams[0]


def parse(*argv: str) -> Options:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return options_from(parser.parse_args(["bench", *argv]))


# ------------------------------------------------------------------ flags


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4", [4]),
        ("1:4", [1, 2, 3, 4]),
        ("1:16:2", [1, 3, 5, 7, 9, 11, 13, 15]),
        ("2:8:3", [2, 5, 8]),
    ],
)
def test_concurrency_range_is_perf_analyzers(text: str, expected: list[int]) -> None:
    assert linear_range(text, "--concurrency", integer=True) == expected
    assert parse("m", "--concurrency", text).concurrency == tuple(expected)


def test_request_rate_range_takes_fractions() -> None:
    assert linear_range("0.1:0.3:0.1", "--request-rate", integer=False) == pytest.approx(
        [0.1, 0.2, 0.3]
    )
    opts = parse("m", "--request-rate", "50:100:50")
    assert opts.mode == "request_rate" and opts.steps == (50.0, 100.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "START and STEP must be positive"),
        ("1:4:0", "START and STEP must be positive"),
        ("4:1", "END must be at least START"),
        ("1:0:1", "END 0 (perf_analyzer's search up to a latency threshold) is not supported"),
        ("1::2", "expects START[:END[:STEP]]"),
        ("1:2:3:4", "expects START[:END[:STEP]]"),
        ("a:b", "expects integers"),
    ],
)
def test_bad_ranges(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        linear_range(text, "--concurrency", integer=True)


def test_shapes_and_urls() -> None:
    assert parse_shape("IMAGE:3,224,224") == ("IMAGE", (3, 224, 224))
    assert parse_shape("ns:in:2") == ("ns:in", (2,))
    for bad in ("IMAGE", "IMAGE:", "IMAGE:3,x", "IMAGE:-1"):
        with pytest.raises(UsageError, match="--shape expects NAME:D1,D2"):
            parse_shape(bad)
    assert parse("m").url == "localhost:8000"
    assert parse("m", "-i", "grpc").url == "localhost:8001"
    assert parse("m", "--url", "http://h:9").url == "h:9"
    with pytest.raises(UsageError, match="--url expects HOST:PORT"):
        parse("m", "--url", "h")
    with pytest.raises(UsageError, match="--streaming needs --protocol grpc"):
        parse("m", "--streaming")


def test_defaults_follow_the_steps() -> None:
    opts = parse("m", "--requests", "10", "--concurrency", "1:3", "--workers", "2")
    assert opts.duration_s is None and opts.request_count == 10 and opts.workers == 2
    assert parse("m").duration_s == 5.0
    assert parse("m", "--concurrency", "1").workers == 1  # never more workers than lanes


# ------------------------------------------------------------------ model and inputs

ADD_SUB = ModelInfo(
    "add_sub",
    "1",
    (TensorSpec("INPUT0", "FP32", (4,)), TensorSpec("INPUT1", "FP32", (4,))),
    ("OUTPUT0", "OUTPUT1"),
    max_batch_size=0,
    decoupled=False,
    sequence=False,
)
BATCHED = ModelInfo("b", "1", (TensorSpec("X", "INT32", (2,)),), ("Y",), 8, False, False)
STRINGS = ModelInfo("s", "1", (TensorSpec("S", "BYTES", (-1,)),), ("T",), 0, False, False)


def test_parse_model_from_http_and_grpc_json() -> None:
    http_meta = {
        "name": "b",
        "versions": ["1"],
        "inputs": [{"name": "X", "datatype": "INT32", "shape": [-1, 2]}],
        "outputs": [{"name": "Y", "datatype": "INT32", "shape": [-1, 2]}],
    }
    http_config = {"max_batch_size": 8, "model_transaction_policy": {"decoupled": False}}
    assert parse_model(http_meta, http_config) == BATCHED
    grpc_meta = {**http_meta, "inputs": [{"name": "X", "datatype": "INT32", "shape": ["-1", "2"]}]}
    grpc_config = {
        "max_batch_size": 8,
        "sequence_batching": {},
        "input": [{"name": "X", "optional": True}],
    }
    info = parse_model(grpc_meta, grpc_config)
    assert info.inputs == (TensorSpec("X", "INT32", (2,), optional=True),) and info.sequence
    assert parse_model(http_meta, {"model_transaction_policy": {"decoupled": True}}).decoupled


def test_random_and_zero_inputs() -> None:
    (request,) = build_requests(ADD_SUB, parse("add_sub"))
    assert [(t.name, t.datatype, t.shape, len(t.data)) for t in request] == [
        ("INPUT0", "FP32", (4,), 16),
        ("INPUT1", "FP32", (4,), 16),
    ]
    (zeros,) = build_requests(BATCHED, parse("b", "-b", "3", "--input-data", "zero"))
    assert zeros[0].shape == (3, 2) and zeros[0].data == bytes(24)
    (strings,) = build_requests(STRINGS, parse("s", "--shape", "S:2", "--string-length", "5"))
    items = deserialize_bytes_tensor(strings[0].data)
    assert strings[0].shape == (2,) and [len(s) for s in items] == [5, 5]
    (fixed,) = build_requests(STRINGS, parse("s", "--shape", "S:2", "--string-data", "hi"))
    assert list(deserialize_bytes_tensor(fixed[0].data)) == [b"hi", b"hi"]


def test_input_data_json_batches_consecutive_entries(tmp_path: Path) -> None:
    data = tmp_path / "d.json"
    data.write_text(
        json.dumps({"data": [{"X": [1, 2]}, {"X": {"content": [3, 4]}}, {"X": [[5, 6]]}]})
    )
    requests = build_requests(BATCHED, parse("b", "-b", "2", "--input-data", str(data)))
    values = [np.frombuffer(r[0].data, np.int32).tolist() for r in requests]
    assert values == [[1, 2, 3, 4], [3, 4, 5, 6], [5, 6, 1, 2]]  # request k: entries k, k+1
    assert all(r[0].shape == (2, 2) for r in requests)


def test_input_data_json_strings(tmp_path: Path) -> None:
    raw = b"\x01\x00\x00\x00x\x02\x00\x00\x00yz"
    data = tmp_path / "s.json"
    data.write_text(
        json.dumps(
            {
                "data": [
                    {"S": ["a", "bc", "d"]},
                    {"S": {"content": ["e"], "shape": [1]}},
                    {"S": {"b64": base64.b64encode(raw).decode()}},
                    {"S": {"content": {"b64": base64.b64encode(raw).decode()}, "shape": [2]}},
                ]
            }
        )
    )
    requests = build_requests(STRINGS, parse("s", "--input-data", str(data)))
    assert [r[0].shape for r in requests] == [(3,), (1,), (2,), (2,)]
    assert list(deserialize_bytes_tensor(requests[0][0].data)) == [b"a", b"bc", b"d"]
    assert requests[2][0].data == raw


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"rows": []}, 'expected {"data"'),
        ({"data": [{"INPUT0": [1, 2, 3, 4]}]}, r"input\(s\) \['INPUT1'\] missing"),
        (
            {"data": [{"INPUT0": [1] * 4, "INPUT1": [1] * 4, "EXTRA": [1]}]},
            r"unknown input\(s\) \['EXTRA'\]",
        ),
        ({"data": [{"INPUT0": [1, 2, 3], "INPUT1": [1] * 4}]}, r"3 values do not fill shape \[4\]"),
        (
            {"data": [{"INPUT0": {"b64": "AAAAAA=="}, "INPUT1": [1] * 4}]},
            r"1 values do not fill shape \[4\]",
        ),
        ({"data": [{"INPUT0": ["x"] * 4, "INPUT1": [1] * 4}]}, "not FP32 values"),
        ({"data": [[{"INPUT0": [1] * 4}]]}, "sequence models"),
    ],
)
def test_bad_input_data(tmp_path: Path, doc: object, message: str) -> None:
    data = tmp_path / "bad.json"
    data.write_text(json.dumps(doc))
    with pytest.raises(SetupError, match=message):
        build_requests(ADD_SUB, parse("add_sub", "--input-data", str(data)))


def test_input_data_folder(tmp_path: Path) -> None:
    (tmp_path / "INPUT0").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    (tmp_path / "INPUT1").write_bytes(np.ones(4, dtype=np.float32).tobytes())
    (request,) = build_requests(ADD_SUB, parse("add_sub", "--input-data", str(tmp_path)))
    assert np.frombuffer(request[0].data, np.float32).tolist() == [0, 1, 2, 3]
    (tmp_path / "INPUT1").write_bytes(b"123")
    with pytest.raises(SetupError, match="3 bytes do not fill shape"):
        build_requests(ADD_SUB, parse("add_sub", "--input-data", str(tmp_path)))


def test_batch_size_is_checked_against_the_model() -> None:
    with pytest.raises(SetupError, match="does not support batching"):
        build_requests(ADD_SUB, parse("add_sub", "-b", "2"))
    with pytest.raises(SetupError, match="over the max_batch_size 8"):
        build_requests(BATCHED, parse("b", "-b", "9"))
    with pytest.raises(SetupError, match=r"--shape X:3 does not fit the model's dims \[2\]"):
        build_requests(BATCHED, parse("b", "--shape", "X:3"))


# ------------------------------------------------------------------ wire


def test_http_request_uses_binary_tensors() -> None:
    (request,) = build_requests(ADD_SUB, parse("add_sub"))
    encoded = http_request("add_sub", "2", request, ADD_SUB.outputs)
    assert encoded.path == "/v2/models/add_sub/versions/2/infer"
    size = int(encoded.headers["Inference-Header-Content-Length"])
    header = orjson.loads(encoded.body[:size])
    assert header["inputs"][0] == {
        "name": "INPUT0",
        "shape": [4],
        "datatype": "FP32",
        "parameters": {"binary_data_size": 16},
    }
    assert [o["parameters"]["binary_data"] for o in header["outputs"]] == [True, True]
    assert encoded.body[size:] == request[0].data + request[1].data


def test_grpc_request_asks_for_the_final_flag_on_streams() -> None:
    (request,) = build_requests(ADD_SUB, parse("add_sub"))
    for streaming in (False, True):
        msg = service_pb2.ModelInferRequest.FromString(
            grpc_request("add_sub", "", request, streaming)
        )
        assert msg.model_name == "add_sub" and [t.name for t in msg.inputs] == ["INPUT0", "INPUT1"]
        assert list(msg.raw_input_contents) == [t.data for t in request]
        assert (EMPTY_FINAL in msg.parameters) == streaming


# ------------------------------------------------------------------ statistics


def test_percentile_is_perf_analyzers_rank() -> None:
    ordered = np.arange(1, 11, dtype=np.int64)  # 1..10
    # rank round(q/100 * (n-1)): p50 -> index 5 (4.5 rounds up), p90 -> 8, p99 -> 9
    assert [percentile(ordered, q) for q in (50, 90, 99, 99.9)] == [6, 9, 10, 10]
    assert percentile(np.array([7], np.int64), 99.9) == 7


def test_workers_latencies_are_merged_not_averaged() -> None:
    fast = np.full(99, 1_000_000, np.int64)  # 99 requests of 1 ms in one worker
    slow = np.array([100_000_000], np.int64)  # one of 100 ms in the other
    results = [
        WorkerResult(latencies_ns=fast.tobytes(), requests=99, responses=99, cpu_s=0.01),
        WorkerResult(
            latencies_ns=slow.tobytes(),
            requests=1,
            responses=1,
            errors=1,
            error_samples={"boom": 1},
        ),
    ]
    record = step_record({"concurrency": 2}, results, 2.0, 4, None)
    merged = latency_summary(np.concatenate([fast, slow]))
    assert {k: record[k] for k in merged} == merged
    assert record["p50_us"] == record["p99_us"] == 1000 and record["max_us"] == 100_000
    assert record["requests"] == 100 and record["errors"] == 1
    assert record["throughput"] == 50.0 and record["infer_per_s"] == 200.0
    assert record["error_samples"] == ["1x boom"]
    assert record["client_cpu_us_per_request"] == round(0.01 / 101 * 1e6)
    empty = step_record({"concurrency": 1}, [WorkerResult()], 1.0, 1, None)
    assert empty["requests"] == 0 and empty["p50_us"] is None and empty["throughput"] == 0


# ------------------------------------------------------------------ sequences

SEQUENCE = ModelInfo("acc", "1", (TensorSpec("VALUE", "INT32", (1,)),), ("SUM",), 4, False, True)


def test_data_streams_of_a_sequence_model(tmp_path: Path) -> None:
    data = tmp_path / "streams.json"
    data.write_text(json.dumps({"data": [[{"VALUE": [1]}, {"VALUE": [2]}], [{"VALUE": [5]}]]}))
    streams = build_streams(SEQUENCE, parse("acc", "--input-data", str(data)))
    values = [[int(np.frombuffer(r[0].data, np.int32)[0]) for r in s] for s in streams]
    assert values == [[1, 2], [5]]
    assert streams[0][0][0].shape == (1, 1)  # batch dim of 1
    with pytest.raises(SetupError, match="each request carries -b 1"):
        build_streams(SEQUENCE, parse("acc", "-b", "2"))
    data.write_text(json.dumps({"data": [[{"VALUE": [1]}], []]}))
    with pytest.raises(SetupError, match=r"data\[1\] is an empty data stream"):
        build_streams(SEQUENCE, parse("acc", "--input-data", str(data)))


def test_sequence_ids_never_collide_between_lanes() -> None:
    unbounded = SequenceSpec(20, 0.2, 1, None)
    assert [sequence_id(unbounded, 3, lane, 0) for lane in range(3)] == [1, 2, 3]
    assert [sequence_id(unbounded, 3, 1, j) for j in range(3)] == [2, 5, 8]
    bounded = SequenceSpec(20, 0.2, 10, 17)  # 7 ids, 3 lanes: 6 usable, residues kept
    for lane in range(3):
        ids = [sequence_id(bounded, 3, lane, j) for j in range(10)]
        assert all(10 <= i < 17 and (i - 10) % 3 == lane for i in ids), ids


def test_sequence_lengths() -> None:
    rng = random.Random(1)
    lengths = [sequence_length(SequenceSpec(20, 0.2, 1, None), 3, rng) for _ in range(200)]
    assert min(lengths) >= 16 and max(lengths) <= 24 and len(set(lengths)) > 3
    assert sequence_length(SequenceSpec(None, 0.2, 1, None), 3, rng) == 3  # a data stream's length
    assert sequence_length(SequenceSpec(1, 0.9, 1, None), 3, rng) >= 1


def test_sequence_parameters_on_the_wire() -> None:
    (request,) = build_requests(ADD_SUB, parse("add_sub"))
    body, headers = http_request("add_sub", "", request, ()).with_sequence((7, True, False))
    size = int(headers[LENGTH_HEADER])
    assert orjson.loads(body[:size])["parameters"] == {
        "sequence_id": 7,
        "sequence_start": True,
        "sequence_end": False,
    }
    assert body[size:] == request[0].data + request[1].data
    raw = grpc_request("add_sub", "", request, True) + grpc_sequence_suffix((7, False, True))
    msg = service_pb2.ModelInferRequest.FromString(raw)
    assert msg.parameters["sequence_id"].int64_param == 7
    assert not msg.parameters["sequence_start"].bool_param
    assert msg.parameters["sequence_end"].bool_param
    assert msg.parameters[EMPTY_FINAL].bool_param and len(msg.inputs) == 2


def test_sequence_flags() -> None:
    with pytest.raises(UsageError, match="--sequence-id-range expects START"):
        parse("m", "--sequence-id-range", "5:5")
    assert parse("m", "--sequence-id-range", "5:9").sequence_ids == (5, 9)
    assert parse("m").sequence_ids == (1, None)
