"""Run the signal pipeline (examples/model_repository/signal_pipeline) over HTTP and gRPC.

signal_pipeline is a Python BLS model: it calls the Python preprocessing model
signal_features and the ONNX model signal_classifier, smoothing noisy signals in a loop
until the classifier is confident. Start a server on the example repository first:

    modelyard serve --model-repository examples/model_repository

then run

    python examples/pipeline_client.py [--http-url localhost:8000] [--grpc-url localhost:8001]

Exit status 0 when both protocols returned the expected labels.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

# name -> (signal, expected label, expected rounds)
SIGNALS = {
    "quiet": (np.zeros(16, np.float32), "low", 1),
    "loud": (np.ones(16, np.float32), "high", 1),
    "noisy": (np.tile(np.array([1, -1], np.float32), 8), "low", 2),  # smoothed once
    "wild": (0.5 + np.tile(np.array([2, -2], np.float32), 8), "mid", 1),
    "ambiguous": (np.full(16, 0.5, np.float32), "undecided", 4),
}


def run(protocol: str, url: str, signal: np.ndarray) -> tuple[str, np.ndarray, int]:
    mod = httpclient if protocol == "http" else grpcclient
    client = mod.InferenceServerClient(url)
    try:
        tensor = mod.InferInput("SIGNAL", list(signal.shape), "FP32")
        tensor.set_data_from_numpy(signal)
        result = client.infer("signal_pipeline", [tensor])
        label = result.as_numpy("LABEL")[0]
        return label.decode(), result.as_numpy("SCORES"), int(result.as_numpy("STEPS")[0])
    finally:
        client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--http-url", default="localhost:8000")
    parser.add_argument("--grpc-url", default="localhost:8001")
    args = parser.parse_args()
    ok = True
    for protocol, url in (("http", args.http_url), ("grpc", args.grpc_url)):
        for name, (signal, label, steps) in SIGNALS.items():
            got_label, scores, got_steps = run(protocol, url, signal)
            good = (got_label, got_steps) == (label, steps)
            ok &= good
            print(f"{protocol:4} {name:9} -> {got_label:9} after {got_steps} round(s), "
                  f"scores {[round(float(s), 3) for s in scores]} {'ok' if good else 'WRONG'}")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
