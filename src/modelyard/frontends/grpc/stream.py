"""ModelStreamInfer: many requests in flight on one bidirectional stream, as Triton serves it.

* Requests to non-decoupled models get exactly one response each, written in request order;
  decoupled models' responses are written as they are produced.
* Every response carries ``triton_final_response``. A decoupled model's flag-only FINAL is
  sent (as an empty response) only when the request set
  ``triton_enable_empty_final_response``.
* A failed request produces a response with ``error_message`` and the stream stays open,
  unless the client sent the metadata ``triton_grpc_error: true``: then the first error the
  model returns ends the stream with its gRPC status (errors found before inference starts
  still come back as ``error_message``, as in Triton 2.51).
* After the client half-closes, the call ends once every in-flight request has finished.

Bounded: at most ``MAX_IN_FLIGHT`` requests run per stream (further reads wait, so gRPC flow
control pushes back on the client) and at most ``MAX_PENDING`` responses wait to be written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import TYPE_CHECKING, Any

from modelyard.errors import ErrorCode, InternalError, InvalidArgument, ModelyardError
from modelyard.frontends.grpc import extensions, proto_convert
from modelyard.frontends.grpc.proto_convert import Decoded
from modelyard.frontends.grpc.wire import EncodedResponse, WireInferRequest
from modelyard.frontends.header_forward import HeaderForward
from modelyard.tracing.trace import AFTER, Trace
from modelyard.types import ParamValue

if TYPE_CHECKING:
    from modelyard.frontends.grpc.servicer import Core

log = logging.getLogger("modelyard")

MAX_IN_FLIGHT = 1024
MAX_PENDING = 1024

# What the writer receives: a response (with the code of its error, if any, and the trace of
# its request when traced), or None at the end.
_Item = tuple[EncodedResponse, ErrorCode | None, "Trace | None"] | None


def _wants_grpc_error(context: Any) -> bool:
    for key, value in context.invocation_metadata() or ():
        if key == "triton_grpc_error":
            return bool(value == "true")
    return False


async def run_stream(
    core: Core,
    request_iterator: AsyncIterator[WireInferRequest],
    context: Any,
    forward: HeaderForward | None = None,
) -> AsyncIterator[EncodedResponse]:
    """The responses to write, in order. The handler yields them (rather than awaiting
    ``context.write`` for each): grpc.aio's generator path costs about a quarter less CPU per
    message, which is most of a long stream's cost. ``forward``: the call's headers that
    become every request's parameters."""
    session = _Session(core, context)
    if forward is not None:
        try:
            session.forwarded = forward.grpc(context.invocation_metadata())
        except InvalidArgument as e:  # a reserved header: each request fails, as in Triton
            session.forward_error = e
    reader = asyncio.create_task(session.read(request_iterator))
    grpc_error = _wants_grpc_error(context)
    try:
        while True:
            item = await session.out.get()
            if item is None:
                break
            response, code, trace = item
            if code is not None and grpc_error:
                if trace is not None:
                    trace.drop_hold()
                await context.abort(proto_convert.grpc_status(code), response.error_message)
            if trace is None:
                yield response
                continue
            # Triton's events around each write of a traced request's response.
            trace.event("GRPC_SEND_START", 0, AFTER)
            yield response
            trace.event("GRPC_SEND_END", 0, AFTER)
            trace.drop_hold()
        await reader  # re-raise what ended the reader, if anything
    finally:
        reader.cancel()
        session.cancel()
        session.drop_unwritten()


class _Session:
    def __init__(self, core: Core, context: Any = None) -> None:
        self.core = core
        self.context = context  # the call's metadata carries a caller's traceparent
        self.out: asyncio.Queue[_Item] = asyncio.Queue(MAX_PENDING)
        self.tasks: set[asyncio.Task[None]] = set()
        self.slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        # Completion of the last non-decoupled request's write: the next one waits for it.
        self.last_ordered: asyncio.Future[None] | None = None
        self.forwarded: dict[str, ParamValue] | None = None  # the call's forwarded headers
        self.forward_error: InvalidArgument | None = None  # a reserved header among them

    def cancel(self) -> None:
        for task in self.tasks:
            task.cancel()

    def drop_unwritten(self) -> None:
        """The stream ended with responses still queued: their traces may finish."""
        while not self.out.empty():
            item = self.out.get_nowait()
            if item is not None and item[2] is not None:
                item[2].drop_hold()

    async def read(self, request_iterator: AsyncIterator[WireInferRequest]) -> None:
        loop = asyncio.get_running_loop()
        try:
            async for wire in request_iterator:
                await self.slots.acquire()
                msg = wire.msg
                decoupled = False
                decoded: Decoded | None = None
                error: ModelyardError | None = None
                try:
                    if wire.error:  # this message was not a ModelInferRequest
                        raise InvalidArgument(wire.error)
                    # Triton's order: version string, transaction policy, parameters, inputs.
                    version = proto_convert.check_version(msg.model_version)
                    decoupled = self.core.is_decoupled(msg.model_name, version)
                    decoded = proto_convert.decode_infer_request(wire)
                    if self.forward_error is not None:
                        raise self.forward_error
                    if self.forwarded:
                        decoded.request.parameters.update(self.forwarded)
                except ModelyardError as e:
                    error = e
                except Exception as e:
                    log.exception("decoding a streamed inference request failed")
                    error = InternalError(f"{type(e).__name__}: {e}")
                if decoupled:
                    wait, done = None, None
                else:
                    wait, done = self.last_ordered, loop.create_future()
                    self.last_ordered = done
                coro = self._run(msg, decoded, decoupled, error, wait, done)
                if self.core.tracer.on and decoded is not None:
                    coro = self._traced(coro, decoded)
                task = loop.create_task(coro)
                self.tasks.add(task)
                task.add_done_callback(self._finished)
            while self.tasks:
                await asyncio.wait(set(self.tasks))
        except Exception:
            await self.out.put(None)  # wake the writer, which re-raises this
            raise
        await self.out.put(None)

    async def _traced(self, run: Coroutine[Any, Any, None], decoded: Decoded) -> None:
        """A streamed request, traced when the tracer samples it."""
        metadata = self.context.invocation_metadata() if self.context is not None else None
        trace = self.core.tracer.sample(decoded.request.model_name, metadata or ())
        if trace is None:
            await run
            return
        trace.event("GRPC_WAITREAD_START", 0, AFTER)
        trace.event("GRPC_WAITREAD_END", 0, AFTER)
        decoded.request.trace = trace
        try:
            await run  # each response's write holds the trace until it is written
        finally:
            trace.release()

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self.slots.release()
        if not task.cancelled() and task.exception() is not None:
            log.error("streamed inference request failed", exc_info=task.exception())

    async def _emit(
        self, response: EncodedResponse, code: ErrorCode | None = None, trace: Trace | None = None
    ) -> None:
        if trace is not None:
            trace.hold()  # the writer lets it go once the response is written
        await self.out.put((response, code, trace))

    async def _run(
        self,
        msg: Any,
        decoded: Decoded | None,
        decoupled: bool,
        error: ModelyardError | None,
        wait: asyncio.Future[None] | None,
        done: asyncio.Future[None] | None,
    ) -> None:
        try:
            if decoupled:
                await self._run_decoupled(msg, decoded, error)
                return
            item = await self._run_one(msg, decoded, error)
            if wait is not None and not wait.done():
                await wait
            await self._emit(*item, _trace_of(decoded))
        finally:
            if done is not None and not done.done():
                done.set_result(None)

    async def _run_one(
        self, msg: Any, decoded: Decoded | None, error: ModelyardError | None
    ) -> tuple[EncodedResponse, ErrorCode | None]:
        """A non-decoupled request: its single response (or error), encoded."""
        if error is not None or decoded is None:
            return _pre_error(msg, error)
        responses = self.core.infer_stream(decoded.request)
        try:
            async for response in responses:
                _responded(decoded.request.trace)
                if response.error is not None:
                    return _model_error(msg, response.error, True)
                if decoded.classification:
                    extensions.classify_outputs(self.core, response, decoded.classification)
                return proto_convert.encode_infer_response(response, final=True), None
        except ModelyardError as e:
            return _pre_error(msg, e)
        except Exception as e:
            log.exception("streamed inference on '%s' failed", msg.model_name)
            return _pre_error(msg, InternalError(f"{type(e).__name__}: {e}"))
        finally:
            await _close(responses)
        return _pre_error(msg, InternalError("the model sent no response"))

    async def _run_decoupled(
        self, msg: Any, decoded: Decoded | None, error: ModelyardError | None
    ) -> None:
        if error is not None or decoded is None:
            await self._emit(*_pre_error(msg, error))
            return
        empty_final = decoded.empty_final
        classes = decoded.classification
        trace = _trace_of(decoded)
        responses = self.core.infer_stream(decoded.request)
        first = True
        try:
            async for response in responses:
                final = response.final
                if first:
                    first = False
                    _responded(trace)
                if response.error is not None:
                    await self._emit(*_model_error(msg, response.error, final), trace)
                elif proto_convert.is_flag_only_final(response):
                    if empty_final:
                        await self._emit(
                            proto_convert.encode_empty_final(
                                msg.id, msg.model_name, msg.model_version
                            ),
                            None,
                            trace,
                        )
                else:
                    if classes:
                        extensions.classify_outputs(self.core, response, classes)
                    encoded = proto_convert.encode_infer_response(response, final=final)
                    await self._emit(encoded, None, trace)
                if final:
                    break
        except ModelyardError as e:
            await self._emit(*_pre_error(msg, e))
        except Exception as e:
            log.exception("streamed inference on '%s' failed", msg.model_name)
            await self._emit(*_pre_error(msg, InternalError(f"{type(e).__name__}: {e}")))
        finally:
            await _close(responses)


def _trace_of(decoded: Decoded | None) -> Trace | None:
    return None if decoded is None else decoded.request.trace


def _responded(trace: Trace | None) -> None:
    """The first response of a streamed request (Triton stamps only the first)."""
    if trace is not None:
        trace.event("INFER_RESPONSE_COMPLETE", 0, AFTER)


def _pre_error(msg: Any, error: ModelyardError | None) -> tuple[EncodedResponse, None]:
    """An error found before inference started (unknown model, bad input...): it comes back
    with the request id only, and never ends the stream, even in ``triton_grpc_error`` mode
    (as Triton 2.51 does)."""
    if error is None:
        error = InternalError("request could not be decoded")
    return proto_convert.encode_stream_error(error, msg.id), None


def _model_error(msg: Any, error: ModelyardError, final: bool) -> tuple[EncodedResponse, ErrorCode]:
    """An error response from the model: with model name, version as sent, and the final
    flag; in ``triton_grpc_error`` mode it ends the stream with its status."""
    encoded = proto_convert.encode_stream_error(
        error, msg.id, msg.model_name, msg.model_version, final
    )
    return encoded, error.code


async def _close(responses: AsyncIterator[Any]) -> None:
    aclose = getattr(responses, "aclose", None)
    if aclose is not None:
        await aclose()
