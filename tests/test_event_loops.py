"""Which event loop modelyard's loops run on: uvloop by default, asyncio's when
MODELYARD_EVENT_LOOP=asyncio; an in-process model's own loop follows the same setting."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from modelyard.backends.python.server.model_loop import ModelLoop
from modelyard.event_loops import VARIABLE, new_event_loop, wants_uvloop


@pytest.mark.parametrize(("setting", "uv"), [(None, True), ("uvloop", True), ("asyncio", False)])
def test_the_setting_chooses_the_loop(
    monkeypatch: pytest.MonkeyPatch, setting: str | None, uv: bool
) -> None:
    if setting is None:
        monkeypatch.delenv(VARIABLE, raising=False)
    else:
        monkeypatch.setenv(VARIABLE, setting)
    assert wants_uvloop() is uv
    loop = new_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop) is uv
    finally:
        loop.close()
    model_loop = ModelLoop("test-model-loop")
    try:
        assert isinstance(model_loop.loop, uvloop.Loop) is uv
        assert asyncio.run(model_loop.run(asyncio.sleep(0, "ran"))) == "ran"
    finally:
        model_loop.close()
