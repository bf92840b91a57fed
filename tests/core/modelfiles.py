"""Small Python models written into temporary repositories for the model-management tests.

Every model is ``OUTPUT0 = INPUT0 + k`` (FP32, any length), so a response tells which
version of the files answered. Options make it slow to initialize or execute, fail in
``initialize``, or record its ``initialize`` calls in the file named by ``$MM_LOG`` (and the
start of each ``execute`` in the file named by ``$MM_EXEC_LOG``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from tests import helpers

MODEL_PY = """\
import os
import time

import triton_python_backend_utils as pb_utils

K = {k!r}
INIT_SLEEP = {init_sleep!r}
EXEC_SLEEP = {exec_sleep!r}
FAIL = {fail!r}


def _log(args, what):
    path = os.environ.get("MM_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{{args['model_name']}} {{what}} {{time.monotonic()}}\\n")


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_name"]
        _log(args, "start")
        time.sleep(INIT_SLEEP)
        _log(args, "end")
        if FAIL:
            raise RuntimeError("broken on purpose")

    def execute(self, requests):
        path = os.environ.get("MM_EXEC_LOG")
        if path:
            with open(path, "a") as f:
                f.write(f"{{self.name}} exec\\n")
        time.sleep(EXEC_SLEEP)
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x + K)]))
        return out
"""


def config(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name, "backend": "python", "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        "instance_group": [{"kind": "KIND_CPU", "count": 1}],
        **extra,
    }  # fmt: skip


def config_json(name: str, **extra: Any) -> str:
    return json.dumps(config(name, **extra))


def model_source(k: float = 0.0, init_sleep: float = 0.0, exec_sleep: float = 0.0,
                 fail: bool = False) -> str:  # fmt: skip
    return MODEL_PY.format(k=float(k), init_sleep=init_sleep, exec_sleep=exec_sleep, fail=fail)


def _replace(path: Path, text: str) -> None:
    """Write atomically, so a poll never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_model(repo: Path, name: str, k: float = 0.0, version: int = 1, **opts: Any) -> Path:
    """``repo/name/config.pbtxt`` and ``repo/name/<version>/model.py``."""
    folder = repo / name
    (folder / str(version)).mkdir(parents=True, exist_ok=True)
    cfg = (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        "instance_group [ { kind: KIND_CPU count: 1 } ]\n"
    )
    if not (folder / "config.pbtxt").exists():
        _replace(folder / "config.pbtxt", cfg)
    _replace(folder / str(version) / "model.py", model_source(k, **opts))
    return folder


def _values(values: list[float] | None) -> dict[str, np.ndarray]:
    return {"INPUT0": np.asarray(values if values is not None else [1.0, 2.0], dtype=np.float32)}


def infer_http(client: Any, name: str, values: list[float] | None = None) -> np.ndarray:
    return helpers.infer_http(client, name, _values(values)).as_numpy("OUTPUT0")  # type: ignore[no-any-return]


def infer_grpc(client: Any, name: str, values: list[float] | None = None) -> np.ndarray:
    result = helpers.infer_grpc(client, name, _values(values), client_timeout=60)
    return result.as_numpy("OUTPUT0")  # type: ignore[no-any-return]


def executions(log: Path, name: str) -> int:
    """How many times ``name`` started ``execute`` (``log``: the server's ``$MM_EXEC_LOG``)."""
    lines = log.read_text().splitlines() if log.exists() else []
    return lines.count(f"{name} exec")
