"""Python models for the health, restart, readiness and shutdown tests, written into temporary
repositories (the tests create and remove files in a model's folder to steer it).

Every model takes ``IN`` (FP32, one value) and answers ``OUT``.
"""

from __future__ import annotations

from pathlib import Path

CONFIG = """\
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: {count} }} ]
{extra}
"""

_COMMON = """\
import asyncio
import os
import threading
import time

import triton_python_backend_utils as pb_utils


def _wait_while(path, limit=60.0):
    deadline = time.monotonic() + limit
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)


def _echo(requests, scale=1.0):
    out = []
    for r in requests:
        x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
        out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x * scale)]))
    return out
"""

# initialize fails while <model dir>/broken exists and waits while <model dir>/hold exists;
# a request with IN < 0 kills the worker (exit code 3); OUT = 2 * IN, from state initialize set.
FLAKY = (
    _COMMON
    + """

class TritonPythonModel:
    def initialize(self, args):
        here = args["model_repository"]
        _wait_while(os.path.join(here, "hold"))
        if os.path.exists(os.path.join(here, "broken")):
            raise RuntimeError("initialize refused: 'broken' is present")
        self.scale = 2.0

    def execute(self, requests):
        for r in requests:
            if pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()[0] < 0:
                os._exit(3)
        return _echo(requests, self.scale)
"""
)

# Every request kills the worker (exit code 7).
CRASHY = (
    _COMMON
    + """

class TritonPythonModel:
    def execute(self, requests):
        os._exit(7)
"""
)

STEADY = (
    _COMMON
    + """

class TritonPythonModel:
    def execute(self, requests):
        return _echo(requests)
"""
)

# execute appends a line to <model dir>/started, then waits while <model dir>/hold exists
# (bounded); a request with IN < 0 hangs for good; finalize hangs for good when
# <model dir>/hang_finalize exists.
GATED = (
    _COMMON
    + """

class TritonPythonModel:
    def initialize(self, args):
        self.here = args["model_repository"]

    def execute(self, requests):
        with open(os.path.join(self.here, "started"), "a") as f:
            f.write("batch\\n")
        for r in requests:
            if pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()[0] < 0:
                threading.Event().wait()
        _wait_while(os.path.join(self.here, "hold"))
        return _echo(requests)

    def finalize(self):
        if os.path.exists(os.path.join(self.here, "hang_finalize")):
            threading.Event().wait()
"""
)

# is_ready() does what <model dir>/mode says: true, false, raise, nonbool, or block (until
# <model dir>/release exists); each call appends a line to <model dir>/calls.
_IS_READY_BODY = """
        with open(os.path.join(self.here, "calls"), "a") as f:
            f.write("call\\n")
        with open(os.path.join(self.here, "mode")) as f:
            mode = f.read().strip()
        if mode == "raise":
            raise ValueError("not today")
        if mode == "nonbool":
            return 1
        if mode == "block":
            deadline = time.monotonic() + 60
            while not os.path.exists(os.path.join(self.here, "release")):
                if time.monotonic() > deadline:
                    break
                {sleep}
        return mode != "false"
"""

IS_READY = (
    _COMMON
    + """

class TritonPythonModel:
    def initialize(self, args):
        self.here = args["model_repository"]

    def execute(self, requests):
        return _echo(requests)

    def is_ready(self):"""
    + _IS_READY_BODY.format(sleep="time.sleep(0.02)")
)

IS_READY_ASYNC = (
    _COMMON
    + """

class TritonPythonModel:
    def initialize(self, args):
        self.here = args["model_repository"]

    def execute(self, requests):
        return _echo(requests)

    async def is_ready(self):"""
    + _IS_READY_BODY.format(sleep="await asyncio.sleep(0.02)")
)


def write_model(root: Path, name: str, source: str, *, count: int = 1,
                max_batch_size: int = 0, extra: str = "") -> Path:  # fmt: skip
    """``root/name`` with config.pbtxt and 1/model.py; returns the model's folder."""
    folder = root / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(
        CONFIG.format(name=name, count=count, max_batch_size=max_batch_size, extra=extra)
    )
    (folder / "1" / "model.py").write_text(source)
    return folder
