"""RequestContext delivery: a failing response sink is logged, never raised into the instance
or scheduler that delivers the response (which would leave other requests hanging)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest

from modelyard.core.response_cache import CachingScheduler, ResponseCache
from modelyard.serving.context import RequestContext
from modelyard.types import InferRequest, InferResponse, Tensor


def _request() -> InferRequest:
    x = np.arange(4, dtype=np.float32)
    return InferRequest("m", [Tensor("IN", "FP32", (4,), x)])


def test_failing_sink_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    def sink(_resp: InferResponse) -> None:
        raise RuntimeError("sink broke")

    ctx = RequestContext(_request(), None, sink)
    with caplog.at_level(logging.ERROR, logger="modelyard"):
        ctx.send(InferResponse("m", "1"))
    assert ctx.done
    assert "delivering a response of 'm' failed" in caplog.text
    assert "sink broke" in caplog.text


class _Inner:
    """A scheduler that answers at once with a response whose raw bytes do not fit its shape,
    so storing it in the cache fails."""

    def submit(self, ctx: RequestContext) -> None:
        bad = Tensor("OUT", "FP32", (4,), None, raw=b"\0" * 3)
        ctx.send(InferResponse("m", "1", outputs=[bad]))


def test_cache_fault_still_delivers_the_response(caplog: pytest.LogCaptureFixture) -> None:
    got: list[Any] = []
    sched = CachingScheduler(_Inner(), ResponseCache(1 << 20), None)
    with caplog.at_level(logging.ERROR, logger="modelyard"):
        sched.submit(RequestContext(_request(), None, got.append))
    assert len(got) == 1 and got[0].outputs[0].name == "OUT"
    assert "response cache: storing a response of 'm' failed" in caplog.text
