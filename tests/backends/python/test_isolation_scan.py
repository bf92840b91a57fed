"""What isolation.py reads from a model's code without running it: whether it may call the
server (a leaf runs inline on a caller's loop) and whether its ``async def execute`` may block
until the server answers (then it runs on a loop of its own, as in Triton's stub)."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelyard.backends.python.server.isolation import ServerCalls, scan

FANOUT = """
import asyncio
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    async def execute(self, requests):
        calls = [pb_utils.InferenceRequest(model_name="m", inputs=[]).async_exec() for _ in requests]
        return await asyncio.gather(*calls)
"""


@pytest.mark.parametrize(
    ("body", "calls", "blocks"),
    [
        ("async def execute(self, requests):\n        return []", False, False),
        ("async def execute(self, requests):\n        return [await r.async_exec() for r in requests]",
         True, False),
        ("async def execute(self, requests):\n        return [r.exec() for r in requests]",
         True, True),
        ("async def execute(self, requests):\n"
         "        s = await requests[0].async_exec(decoupled=True)\n        return [next(s)]",
         True, True),
        ("async def execute(self, requests):\n"
         "        kw = {'decoupled': True}\n        return [await requests[0].async_exec(**kw)]",
         True, True),
        ("async def execute(self, requests):\n        pb_utils.load_model('m')\n        return []",
         True, True),
    ],
    ids=["leaf", "async_exec", "exec", "decoupled", "decoupled-by-dict", "model-control"],
)  # fmt: skip
def test_what_a_model_s_code_names(tmp_path: Path, body: str, calls: bool, blocks: bool) -> None:
    model = tmp_path / "model.py"
    model.write_text(f"import triton_python_backend_utils as pb_utils\n\nclass M:\n    {body}\n")
    assert scan([str(model)]) == ServerCalls(waits=calls, blocks=blocks)


def test_a_fanout_of_async_calls_stays_on_the_server_s_loop(tmp_path: Path) -> None:
    helper, model = tmp_path / "helper.py", tmp_path / "model.py"
    model.write_text(FANOUT)
    helper.write_text("def read(stream):\n    return list(stream)\n")
    assert not scan([str(model), str(helper)]).blocks
    helper.write_text("def call(r):\n    return r.exec(decoupled=True)\n")  # a helper module's
    assert scan([str(model), str(helper)]).blocks


def test_unreadable_code_is_assumed_to_call(tmp_path: Path) -> None:
    broken = tmp_path / "model.py"
    broken.write_text("def execute(:\n")
    assert scan([str(broken)]) == scan([]) == ServerCalls(waits=True, blocks=True)
