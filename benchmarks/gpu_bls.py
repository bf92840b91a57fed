"""A BLS hop that passes a 64 MB GPU tensor: in-process vs process mode, against a host-copy
baseline. Needs an NVIDIA GPU and torch with CUDA (``scripts/gpu_check.sh`` runs it).

A caller model (KIND_GPU, GPU 0) keeps a 64 MB float32 tensor on its GPU and, per request,
sends it to a callee (KIND_GPU, GPU 0) that hands it back as a GPU tensor; the caller then
reads one element on the GPU. Request kinds, sent interleaved:

- ``device``: the caller passes ``Tensor.from_dlpack(gpu_tensor)`` to the BLS request, the
  callee (``FORCE_CPU_ONLY_INPUT_TENSORS: "no"``) returns ``Tensor.from_dlpack`` of what it
  got on its device: what a Triton model does to pass a device tensor through BLS. In
  process mode the tensor travels as a host copy; in-process, as the same device memory;
- ``host``: the baseline a model writes when BLS cannot take device tensors: ``.cpu()`` into
  a numpy ``Tensor``, and the callee copies it up to its GPU and back down;
- ``none``: no BLS call (the request's fixed cost).

A hop is p50(kind) - p50(none). Each execution mode gets its own server. The table says how
long a hop takes and what it moves per second (64 MB / hop time).

    python benchmarks/gpu_bls.py --requests 30
    python benchmarks/gpu_bls.py --modes in-process --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http as httpclient

from modelyard.testing import start_server

MODES = {"process": (), "in-process": ("--backend-config", "python,execution-mode=in-process")}
KINDS = {"none": 0, "device": 1, "host": 2}
ELEMENTS = 16 << 20  # float32: 64 MB

CALLER = """
import numpy as np
import torch

import triton_python_backend_utils as pb_utils

ELEMENTS = 16 << 20  # float32: 64 MB


class TritonPythonModel:
    def initialize(self, args):
        self.device = torch.device(f"cuda:{args['model_instance_device_id']}")
        self.x = torch.arange(ELEMENTS, dtype=torch.float32, device=self.device)

    def execute(self, requests):
        return [self._one(r) for r in requests]

    def _one(self, request):
        kind = int(pb_utils.get_input_tensor_by_name(request, "KIND").as_numpy()[0])
        if kind == 0:
            value = float(self.x[ELEMENTS - 1])
        else:
            if kind == 1:
                sent = pb_utils.Tensor.from_dlpack("IN", self.x)
            else:
                sent = pb_utils.Tensor("IN", self.x.cpu().numpy())
            call = pb_utils.InferenceRequest(
                model_name="gpu_bench_callee",
                inputs=[sent, pb_utils.Tensor("KIND", np.array([kind], np.int32))],
                requested_output_names=["OUT"],
            )
            response = call.exec()
            if response.has_error():
                return pb_utils.InferenceResponse(error=response.error())
            out = pb_utils.get_output_tensor_by_name(response, "OUT")
            if out.is_cpu():
                y = torch.from_numpy(out.as_numpy()).to(self.device)
            else:
                y = torch.from_dlpack(out)
            value = float(y[ELEMENTS - 1])
        return pb_utils.InferenceResponse([pb_utils.Tensor("LAST", np.array([value], np.float32))])
"""

CALLEE = """
import torch

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.device = torch.device(f"cuda:{args['model_instance_device_id']}")

    def execute(self, requests):
        responses = []
        for request in requests:
            t = pb_utils.get_input_tensor_by_name(request, "IN")
            kind = int(pb_utils.get_input_tensor_by_name(request, "KIND").as_numpy()[0])
            if t.is_cpu():
                x = torch.from_numpy(t.as_numpy()).to(self.device)
            else:
                x = torch.from_dlpack(t)
            if kind == 1:
                out = pb_utils.Tensor.from_dlpack("OUT", x)
            else:
                out = pb_utils.Tensor("OUT", x.cpu().numpy())
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""

CALLER_CONFIG = """
backend: "python"
max_batch_size: 0
input [{ name: "KIND", data_type: TYPE_INT32, dims: [1] }]
output [{ name: "LAST", data_type: TYPE_FP32, dims: [1] }]
instance_group [{ kind: KIND_GPU, gpus: [0] }]
"""

CALLEE_CONFIG = """
backend: "python"
max_batch_size: 0
input [
  { name: "IN", data_type: TYPE_FP32, dims: [-1] },
  { name: "KIND", data_type: TYPE_INT32, dims: [1] }
]
output [{ name: "OUT", data_type: TYPE_FP32, dims: [-1] }]
instance_group [{ kind: KIND_GPU, gpus: [0] }]
parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value: { string_value: "no" } }
"""


def write_repository(root: Path) -> Path:
    for name, config, code in (
        ("gpu_bench_caller", CALLER_CONFIG, CALLER),
        ("gpu_bench_callee", CALLEE_CONFIG, CALLEE),
    ):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(textwrap.dedent(config).lstrip())
        (root / name / "1" / "model.py").write_text(textwrap.dedent(code).lstrip())
    return root


def _request(kind: int) -> list[httpclient.InferInput]:
    t = httpclient.InferInput("KIND", [1], "INT32")
    t.set_data_from_numpy(np.array([kind], dtype=np.int32))
    return [t]


def measure(url: str, requests: int, warmup: int) -> dict[str, list[float]]:
    """Seconds per request of each kind, the kinds interleaved."""
    client = httpclient.InferenceServerClient(url, network_timeout=300.0)
    times: dict[str, list[float]] = {k: [] for k in KINDS}
    try:
        for i in range(warmup + requests):
            for kind, code in KINDS.items():
                t0 = time.perf_counter()
                last = client.infer("gpu_bench_caller", _request(code)).as_numpy("LAST")[0]
                elapsed = time.perf_counter() - t0
                if last != ELEMENTS - 1:
                    raise RuntimeError(f"{kind}: the caller read {last}, not {ELEMENTS - 1}")
                if i >= warmup:
                    times[kind].append(elapsed)
    finally:
        client.close()
    return times


def run_mode(mode: str, repo: Path, requests: int, warmup: int) -> dict[str, Any]:
    server = start_server(repo, *MODES[mode], timeout=300.0, expect=("http",))
    try:
        times = measure(server.http_url, requests, warmup)
    finally:
        server.stop()
    p50 = {k: statistics.median(v) for k, v in times.items()}
    hops = {k: p50[k] - p50["none"] for k in ("device", "host")}
    return {
        "mode": mode,
        "requests": requests,
        "p50_ms": {k: round(v * 1e3, 3) for k, v in p50.items()},
        "hop_ms": {k: round(v * 1e3, 3) for k, v in hops.items()},
        "hop_gb_per_s": {k: _rate(v) for k, v in hops.items()},
    }


def _rate(seconds: float) -> float | None:
    return round(ELEMENTS * 4 / seconds / 1e9, 2) if seconds > 0 else None


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| mode | no-BLS p50 (ms) | device-tensor hop (ms) | host-copy hop (ms) | device / host | "
        "device hop GB/s |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        dev, host = r["hop_ms"]["device"], r["hop_ms"]["host"]
        ratio = f"{dev / host:.2f}" if host > 0 else "-"
        lines.append(
            f"| {r['mode']} | {r['p50_ms']['none']:.2f} | {dev:.2f} | {host:.2f} | {ratio} | "
            f"{r['hop_gb_per_s']['device']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=30, help="timed requests of each kind")
    parser.add_argument("--warmup", type=int, default=3, help="untimed requests of each kind")
    parser.add_argument("--modes", default="process,in-process", help="comma-separated")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"--modes: unknown {', '.join(unknown)} (choose from {', '.join(MODES)})")
    results = []
    with tempfile.TemporaryDirectory(prefix="gpu-bls-") as tmp:
        repo = write_repository(Path(tmp))
        for mode in modes:
            print(f"{mode}: starting", file=sys.stderr, flush=True)
            results.append(run_mode(mode, repo, args.requests, args.warmup))
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
