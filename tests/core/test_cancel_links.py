"""Cancellation of a request context and of the BLS calls linked to it (pure parts; the
end-to-end behaviour is in tests/backends/python/test_reschedule_cancel.py)."""

from __future__ import annotations

from modelyard.backends.python.server.bls import link_to_parents
from modelyard.errors import ErrorCode
from modelyard.serving.context import RequestContext
from modelyard.types import InferRequest, InferResponse


def _ctx(queued: bool = False, started: bool = False) -> tuple[RequestContext, list[InferResponse]]:
    got: list[InferResponse] = []
    ctx = RequestContext(InferRequest(model_name="m", inputs=[], id="r"), None, got.append)
    ctx.t_queued = 1 if queued else 0
    ctx.t_start = 2 if started else 0
    return ctx, got


def test_a_queued_request_ends_with_cancelled_at_once() -> None:
    ctx, got = _ctx(queued=True)
    ctx.cancel()
    assert ctx.cancelled and ctx.done
    assert [(r.final, r.error.code, r.error.message) for r in got if r.error] == [
        (True, ErrorCode.CANCELLED, "Request was cancelled")
    ]


def test_a_request_staged_in_a_worker_ends_at_once_and_the_worker_is_told() -> None:
    """Staged behind the running batch (scheduling/default.py): not started, but handed over."""
    ctx, got = _ctx(queued=True)
    calls: list[str] = []
    ctx.on_cancel = lambda: calls.append("worker")
    ctx.cancel()
    assert ctx.done and [r.error.code for r in got if r.error] == [ErrorCode.CANCELLED]
    assert calls == ["worker"]  # so its model sees is_cancelled() when it gets there


def test_a_running_request_tells_its_instance_and_answers_nothing() -> None:
    ctx, got = _ctx(queued=True, started=True)
    calls: list[str] = []
    ctx.on_cancel = lambda: calls.append("worker")
    ctx.cancel()
    ctx.cancel()  # once only
    assert calls == ["worker"] and got == [] and not ctx.done


def test_a_call_is_cancelled_once_every_parent_is() -> None:
    a, _ = _ctx(queued=True, started=True)
    b, _ = _ctx(queued=True, started=True)
    child, got = _ctx(queued=True)
    link_to_parents([a, b], child)
    a.cancel()
    assert not child.cancelled
    b.cancel()
    assert child.cancelled and got[0].error is not None


def test_unlinked_calls_outlive_their_parent() -> None:
    parent, _ = _ctx(queued=True, started=True)
    child, _ = _ctx(queued=True, started=True)
    unlink = link_to_parents([parent], child)
    unlink()
    assert not parent.cancel_hooks
    parent.cancel()
    assert not child.cancelled


def test_a_call_linked_to_a_cancelled_parent_is_cancelled_at_once() -> None:
    parent, _ = _ctx(queued=True, started=True)
    parent.cancel()
    child, _ = _ctx(queued=True, started=True)
    link_to_parents([parent], child)
    assert child.cancelled
