"""Call the add_sub example model over HTTP and over gRPC with tritonclient.

Start a server on examples/model_repository first, for instance

    modelyard serve --model-repository examples/model_repository

then run

    python examples/client.py [--http-url localhost:8000] [--grpc-url localhost:8001]

The same script works unchanged against Triton Inference Server.
Exit status 0 when both protocols returned the right answers.
"""

from __future__ import annotations

import argparse
import queue
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

MODELS = ("add_sub", "bls_add_sub")  # bls_add_sub reaches add_sub through BLS


def call_http(url: str, a: np.ndarray, b: np.ndarray, model: str) -> tuple[np.ndarray, np.ndarray]:
    client = httpclient.InferenceServerClient(url)
    try:
        inputs = [httpclient.InferInput("INPUT0", list(a.shape), "FP32"),
                  httpclient.InferInput("INPUT1", list(b.shape), "FP32")]  # fmt: skip
        inputs[0].set_data_from_numpy(a, binary_data=True)
        inputs[1].set_data_from_numpy(b, binary_data=True)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
                   httpclient.InferRequestedOutput("OUTPUT1", binary_data=True)]  # fmt: skip
        result = client.infer(model, inputs, outputs=outputs)
        return result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    finally:
        client.close()


def call_grpc(url: str, a: np.ndarray, b: np.ndarray, model: str) -> tuple[np.ndarray, np.ndarray]:
    client = grpcclient.InferenceServerClient(url)
    try:
        inputs = [grpcclient.InferInput("INPUT0", list(a.shape), "FP32"),
                  grpcclient.InferInput("INPUT1", list(b.shape), "FP32")]  # fmt: skip
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer(model, inputs)
        return result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    finally:
        client.close()


def stream_repeat(url: str, count: int) -> list[int]:
    """The decoupled `repeat` model over a gRPC stream: one request, `count` responses."""
    responses: queue.Queue[object] = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    try:
        client.start_stream(callback=lambda result, error: responses.put(error or result))
        inp = grpcclient.InferInput("COUNT", [1], "INT32")
        inp.set_data_from_numpy(np.array([count], dtype=np.int32))
        client.async_stream_infer("repeat", [inp])
        got = []
        for _ in range(count):
            item = responses.get(timeout=10)
            if isinstance(item, Exception):
                raise item
            got.append(int(item.as_numpy("OUT")[0]))  # type: ignore[attr-defined]
        client.stop_stream()
        return got
    finally:
        client.close()


def accumulate(url: str, values: list[int], sequence_id: int) -> list[int]:
    """The stateful `accumulate` model: one sequence of requests over HTTP."""
    client = httpclient.InferenceServerClient(url)
    try:
        sums = []
        for i, v in enumerate(values):
            inp = httpclient.InferInput("VALUE", [1, 1], "INT32")
            inp.set_data_from_numpy(np.array([[v]], dtype=np.int32))
            result = client.infer("accumulate", [inp], sequence_id=sequence_id,
                                  sequence_start=i == 0, sequence_end=i == len(values) - 1)  # fmt: skip
            sums.append(int(result.as_numpy("SUM")[0, 0]))
        return sums
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--http-url", default="localhost:8000", help="HTTP endpoint host:port")
    parser.add_argument("--grpc-url", default="localhost:8001", help="gRPC endpoint host:port")
    args = parser.parse_args(argv)

    a = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    b = np.array([0.5, 0.5, 1.0, 1.0], dtype=np.float32)
    ok = True
    for model in MODELS:
        for protocol, call, url in (("HTTP", call_http, args.http_url),
                                    ("gRPC", call_grpc, args.grpc_url)):  # fmt: skip
            total, diff = call(url, a, b, model)
            good = np.array_equal(total, a + b) and np.array_equal(diff, a - b)
            ok = ok and good
            print(f"{model:11} {protocol:4} {url}: {a} + {b} = {total}; {a} - {b} = {diff}"
                  f"  [{'ok' if good else 'WRONG'}]")  # fmt: skip
    # The ensemble runs add_sub, then bls_add_sub on its outputs: (a+b)+(a-b), (a+b)-(a-b).
    for protocol, call, url in (
        ("HTTP", call_http, args.http_url),
        ("gRPC", call_grpc, args.grpc_url),
    ):
        doubled_a, doubled_b = call(url, a, b, "ensemble_add_sub")
        good = np.array_equal(doubled_a, 2 * a) and np.array_equal(doubled_b, 2 * b)
        ok = ok and good
        print(
            f"ensemble_add_sub {protocol:4}: {doubled_a}, {doubled_b}  [{'ok' if good else 'WRONG'}]"
        )
    streamed = stream_repeat(args.grpc_url, 5)
    ok = ok and streamed == [0, 1, 2, 3, 4]
    print(f"repeat      gRPC stream: {streamed}")
    sums = accumulate(args.http_url, [1, 2, 3, 4], sequence_id=42)
    ok = ok and sums == [1, 3, 6, 10]
    print(f"accumulate  HTTP sequence 42: running sums {sums}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
