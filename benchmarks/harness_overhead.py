"""What ``modelyard.testing`` adds per ``infer`` of the example ``add_sub`` over calling the
model's ``execute`` directly (the issue's bound: 50 µs).

Both sides build their request from the same numpy arrays each call:

- direct: ``model.execute([pb_utils.InferenceRequest(...)])`` on a ``TritonPythonModel``
  made and initialized by hand, as a unit test without the harness does;
- harness: ``handle.infer({"INPUT0": a, "INPUT1": b})`` on ``load_model(add_sub)``.

The two are interleaved in blocks (A B B A ...) for ``--rounds`` rounds of ``--calls``
calls each; each block's time per call is one sample. Printed: the median per call of each
side, and the median of the per-round differences (harness - direct), in µs.

    python benchmarks/harness_overhead.py --rounds 200 --calls 200
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import triton_python_backend_utils as pb_utils
from modelyard.testing import load_model

ADD_SUB = Path(__file__).resolve().parents[1] / "examples" / "model_repository" / "add_sub"


def direct_model(config: dict[str, Any]) -> Any:
    """add_sub's TritonPythonModel, imported from its file and initialized by hand."""
    spec = importlib.util.spec_from_file_location("add_sub_direct", ADD_SUB / "1" / "model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    model.initialize({"model_config": json.dumps(config)})
    return model


def per_call_us(fn: Callable[[], Any], calls: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - t0) / calls / 1000.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200, help="interleaved rounds")
    parser.add_argument("--calls", type=int, default=200, help="calls per block")
    parser.add_argument("--warmup", type=int, default=2000, help="calls of each side first")
    args = parser.parse_args(argv)

    a = np.random.rand(4).astype(np.float32)
    b = np.random.rand(4).astype(np.float32)
    with load_model(ADD_SUB) as handle:
        model = direct_model(handle.config)

        def direct() -> Any:
            request = pb_utils.InferenceRequest(
                model_name="add_sub",
                inputs=[pb_utils.Tensor("INPUT0", a), pb_utils.Tensor("INPUT1", b)],
                requested_output_names=["OUTPUT0", "OUTPUT1"],
            )
            return model.execute([request])

        def harness() -> Any:
            return handle.infer({"INPUT0": a, "INPUT1": b})

        got = harness().output("OUTPUT0")
        want = direct()[0].output_tensors()[0].as_numpy()  # OUTPUT0
        assert np.array_equal(got, want), (got, want)
        per_call_us(direct, args.warmup)
        per_call_us(harness, args.warmup)
        direct_us: list[float] = []
        harness_us: list[float] = []
        for i in range(args.rounds):
            order = (direct, harness) if i % 2 == 0 else (harness, direct)
            for fn in order:
                sample = per_call_us(fn, args.calls)
                (direct_us if fn is direct else harness_us).append(sample)
    diffs = [h - d for h, d in zip(harness_us, direct_us, strict=True)]
    print(f"rounds {args.rounds} x {args.calls} calls, interleaved")
    print(f"direct execute  median {statistics.median(direct_us):8.2f} us/call")
    print(f"harness infer   median {statistics.median(harness_us):8.2f} us/call")
    print(f"overhead        median {statistics.median(diffs):8.2f} us/call (bound: 50 us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
