"""``/generate`` and ``/generate_stream`` (Triton's provisional generate extension, §1.4).

Request: a flat JSON object. A key naming a model input becomes that tensor (a scalar or a
1-D array, shaped from model metadata: fixed dims first, the innermost -1 takes the rest);
any other key becomes a request parameter; the optional ``parameters`` object is read the
same way. Response: a flat object whose keys (``id``, ``model_name``, ``model_version``,
response parameters, output tensors) are written in sorted order, as Triton's std::map does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import orjson

from modelyard.errors import InternalError, InvalidArgument, ModelyardError
from modelyard.frontends.http import infer_body, jsondata
from modelyard.frontends.http.errors import error_body, http_status
from modelyard.frontends.http.request_response import JSON_HEADERS, Request, Response, read_body
from modelyard.tensor_bytes import array_from_raw
from modelyard.tracing.trace import AFTER, AMID, BEFORE
from modelyard.types import InferRequest, InferResponse, Tensor

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer
    from modelyard.tracing.trace import Trace

_ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model "
    "that generates various number of responses"
)
_SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8")]


def _tensor_shape(name: str, dims: list[int], count: int) -> tuple[int, ...]:
    shape = list(dims)
    remaining = count
    for d in reversed(shape):
        if d != -1:
            if d == 0 or remaining % d:
                raise InvalidArgument(
                    f"The schema can not convert input '{name}' to tensor with proper shape"
                )
            remaining //= d
    for i in range(len(shape) - 1, -1, -1):
        if shape[i] == -1:
            shape[i] = remaining
            remaining = 1
    if remaining != 1:
        raise InvalidArgument(
            f"The schema can not convert input '{name}' to tensor with proper shape"
        )
    return tuple(shape)


def _convert(
    doc: dict[str, Any], inputs: dict[str, dict[str, Any]], request: InferRequest, top: bool
) -> None:
    for key, value in doc.items():
        if top and key == "parameters":
            if key in inputs:
                raise InvalidArgument(
                    "Keyword 'parameters' for nested schema also given as input tensor name"
                )
            if type(value) is not dict:
                raise InternalError(
                    "Expected JSON object for keyword: 'parameters': attempt to access JSON "
                    "non-object as object"
                )
            try:
                _convert(value, inputs, request, top=False)
            except ModelyardError as e:
                raise type(e)(f"Converting keyword: 'parameters': {e.message}", e.code) from None
            continue
        meta = inputs.get(key)
        if meta is None:
            request.parameters[key] = infer_body.json_param(key, value)
            continue
        datatype = str(meta["datatype"])
        count = len(value) if type(value) is list else 1
        shape = _tensor_shape(key, [int(d) for d in meta["shape"]], count)
        array = jsondata.array_from_json(key, datatype, shape, value)
        request.inputs.append(Tensor(key, datatype, shape, data=array))


def _response_json(response: InferResponse) -> bytes:
    doc: dict[str, Any] = {}
    if response.id:
        doc["id"] = response.id
    doc["model_name"] = response.model_name
    doc["model_version"] = response.model_version
    for key, value in response.parameters.items():
        doc.setdefault(key, value)
    for tensor in response.outputs:
        if tensor.name in doc:
            continue
        array = tensor.data
        if array is None:
            raw = tensor.raw if tensor.raw is not None else b""
            array = array_from_raw(tensor.datatype, tensor.shape, raw)
        doc[tensor.name] = jsondata.scalar_or_list(tensor.name, tensor.datatype, array)
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)


def _is_flag_only(response: InferResponse, decoupled: bool) -> bool:
    return (
        decoupled
        and response.final
        and response.error is None
        and not response.outputs
        and not response.parameters
    )


# Triton 2.51 answers a model's error response on the generate endpoints with 400 whatever
# its code (observed, protocol.md §1.4); errors found before inference keep their status.
_RESPONSE_ERROR_STATUS = 400


def _encode(response: InferResponse) -> tuple[bytes, int]:
    """(JSON body, status) for one response; errors become ``{"error": ...}``."""
    if response.error is not None:
        return error_body(response.error.message), _RESPONSE_ERROR_STATUS
    try:
        return _response_json(response), 200
    except ModelyardError as e:
        return error_body(e.message), http_status(e)


async def handle_generate(
    core: InferenceServer,
    request: Request,
    model: str,
    version: str,
    streaming: bool,
) -> Response | None:
    """The response, or None when an SSE stream was sent here (or its client went away).

    A sampled request is traced as Triton traces it: HTTP_RECV_START/END, then
    INFER_RESPONSE_COMPLETE at each response and HTTP_SEND_START/END around each event
    written (around the whole answer of /generate)."""
    trace = core.tracer.sample(model, request.scope["headers"]) if core.tracer.on else None
    if trace is None:
        return await _generate(core, request, model, version, streaming, None)
    trace.event("HTTP_RECV_START", 0, BEFORE)
    try:
        reply = await _generate(core, request, model, version, streaming, trace)
        if reply is not None:
            trace.event("HTTP_SEND_END", 0, AFTER)
        return reply
    finally:
        trace.release()


async def _generate(
    core: InferenceServer,
    request: Request,
    model: str,
    version: str,
    streaming: bool,
    trace: Trace | None,
) -> Response | None:
    metadata = core.model_metadata(model, version)
    encoding = request.header(b"content-encoding")
    if encoding and encoding != "identity":
        raise InvalidArgument("Unsupported content-encoding, only 'identity' is supported.")
    decoupled = core.is_decoupled(model, version)
    body = await read_body(request)
    doc = infer_body.as_object(infer_body.parse_json(body))
    infer_request = InferRequest(model, [], version)
    if "id" in doc:
        infer_request.id = infer_body.as_str(doc["id"], "id")
    inputs = {str(i["name"]): i for i in metadata.get("inputs", [])}
    _convert(doc, inputs, infer_request, top=True)
    if trace is not None:
        trace.event("HTTP_RECV_END", 0, BEFORE)
        infer_request.trace = trace

    request.cancel_on_disconnect()  # then closing the stream below cancels the request
    stream: AsyncIterator[InferResponse] = core.infer_stream(infer_request)
    try:
        # Errors before the first response (validation) are ordinary JSON errors.
        try:
            first: InferResponse | None = await anext(stream)
        except StopAsyncIteration:
            first = None
        if streaming:
            await _stream(request, stream, first, decoupled, trace)
            return None
        return await _single(stream, first, decoupled, trace)
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


async def _single(
    stream: AsyncIterator[InferResponse],
    first: InferResponse | None,
    decoupled: bool,
    trace: Trace | None,
) -> Response:
    responses: list[InferResponse] = []
    status = 200
    if first is not None:
        if first.error is not None:
            status = _RESPONSE_ERROR_STATUS
        responses.append(first)
        if not first.final:
            async for resp in stream:
                responses.append(resp)
                if resp.final:
                    break
    if trace is not None:
        for _ in responses:
            trace.event("INFER_RESPONSE_COMPLETE", 0, AMID)
        trace.event("HTTP_SEND_START", 0, AFTER)
    real = [r for r in responses if not _is_flag_only(r, decoupled)]
    if len(real) != 1:
        return Response(error_body(_ONE_RESPONSE), status, JSON_HEADERS)
    body, own_status = _encode(real[0])
    if real[0] is first:
        status = own_status
    return Response(body, status, JSON_HEADERS)


async def _stream(
    request: Request,
    stream: AsyncIterator[InferResponse],
    first: InferResponse | None,
    decoupled: bool,
    trace: Trace | None,
) -> None:
    """Server-sent events, one ``data:`` event per response, as chunked body messages.

    A client that disconnects before the stream ends gets this handler cancelled by the
    connection (``Request.cancel_on_disconnect``); the caller's ``aclose()`` then cancels the
    core request.
    """
    status = 200
    if first is not None and first.error is not None:
        status = _RESPONSE_ERROR_STATUS
    send = request.send
    request.started = True
    await send({"type": "http.response.start", "status": status, "headers": _SSE_HEADERS})
    resp = first
    while resp is not None:
        if trace is not None:
            trace.event("INFER_RESPONSE_COMPLETE", 0, AMID)
        if not _is_flag_only(resp, decoupled):
            body, _ = _encode(resp)
            if trace is not None:
                trace.event("HTTP_SEND_START", 0, AFTER)
            await send(
                {
                    "type": "http.response.body",
                    "body": b"data: " + body + b"\n\n",
                    "more_body": True,
                }
            )
            if trace is not None:
                trace.event("HTTP_SEND_END", 0, AFTER)
        if resp.final:
            break
        try:
            resp = await anext(stream)
        except StopAsyncIteration:
            break
    await send({"type": "http.response.body", "body": b""})
