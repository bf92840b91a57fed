"""``POST /v2/models/{m}[/versions/{v}]/infer``: the latency hot path.

Order of checks follows Triton's HandleInfer: model and transaction policy first (404 for an
unknown model, 501 for a decoupled one), then body decompression, header length, parsing.
``max_input_size`` (``--http-max-input-size``) bounds the inflated body, the JSON part and a
raw binary body, with Triton's messages. A client that disconnects while its request waits
or runs cancels it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from modelyard.errors import InvalidArgument, Unsupported
from modelyard.frontends.classify import classify, output_labels
from modelyard.frontends.header_forward import HEADER_NAMES_KEY, HeaderForward
from modelyard.frontends.http import compression, infer_body
from modelyard.frontends.http.limits import raw_input_too_large
from modelyard.frontends.http.request_response import (
    JSON_HEADERS,
    Buffer,
    Request,
    Response,
    read_body,
)
from modelyard.tracing.trace import AFTER, AMID, BEFORE
from modelyard.types import InferRequest, InferResponse, config_datatype

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer
    from modelyard.tracing.trace import Trace

# Bodies above this size are (de)compressed in a worker thread (zlib releases the GIL).
_OFFLOAD_BYTES = 1 << 20
# Responses whose binary part is below this are sent as one joined buffer (one body message);
# larger ones are sent part by part from their zero-copy views.
_JOIN_BYTES = 1 << 16

_DECOUPLED = "HTTP end point doesn't support models with decoupled transaction policy"
_OCTET = (b"content-type", b"application/octet-stream")
_HEADER_LENGTH = b"inference-header-content-length"


async def handle_infer(
    core: InferenceServer,
    request: Request,
    model: str,
    version: str,
    max_input_size: int,
    trace: Trace | None = None,
    forward: HeaderForward | None = None,
) -> Response:
    if trace is None and core.tracer.on:  # with tracing off, the one check a request pays
        trace = core.tracer.sample(model, request.scope["headers"])
        if trace is not None:
            trace.event("HTTP_RECV_START", 0, BEFORE)
            try:
                reply = await handle_infer(
                    core, request, model, version, max_input_size, trace, forward
                )
                trace.event("HTTP_SEND_END", 0, AFTER)
                return reply
            finally:
                trace.release()
    if core.is_decoupled(model, version):
        raise Unsupported(_DECOUPLED)
    header_value = encoding_value = accept = None
    for name, value in request.scope["headers"]:
        if name == _HEADER_LENGTH:
            header_value = value
        elif name == b"content-encoding":
            encoding_value = value
        elif name == b"accept-encoding":
            accept = value
    request.cancel_on_disconnect()  # from here on, a client that goes away cancels
    body: Buffer = await read_body(request)
    if encoding_value is not None:
        encoding = compression.request_encoding(encoding_value.decode("latin-1"))
        if encoding != "identity":
            body = await _run(
                compression.decompress, body, encoding, max_input_size, size=len(body)
            )
    header_length = (
        None
        if header_value is None
        else infer_body.header_length_of(header_value.decode("latin-1"), len(body))
    )
    if header_length == 0:
        if len(body) > max_input_size:
            raise InvalidArgument(raw_input_too_large(len(body), max_input_size))
        infer_request, plan = _raw_request(core, model, version, body)
    else:
        infer_request, plan = infer_body.parse_infer_request(
            model, version, memoryview(body), header_length, max_input_size
        )
    if forward is not None:  # --http-header-forward-pattern, after the body's parameters
        scope = request.scope
        forward.http(scope["headers"], scope.get(HEADER_NAMES_KEY), infer_request.parameters)
    if trace is not None:
        trace.event("HTTP_RECV_END", 0, BEFORE)
        infer_request.trace = trace

    response = await core.infer(infer_request)
    if trace is not None:
        trace.event("INFER_RESPONSE_COMPLETE", 0, AMID)
        trace.event("HTTP_SEND_START", 0, AFTER)

    if plan.classification:
        _apply_classification(core, response, plan)
    header, parts, total = infer_body.encode_infer_response(response, plan)
    headers = [_OCTET, (_HEADER_LENGTH, b"%d" % len(header))] if total else JSON_HEADERS
    if accept is not None:
        out_encoding = compression.response_encoding(accept.decode("latin-1"))
        if out_encoding != "identity":
            compressed = await _run(
                compression.compress, [header, *parts], out_encoding, size=len(header) + total
            )
            headers = [*headers, (b"content-encoding", out_encoding.encode())]
            return Response(compressed, 200, headers)
    if not parts:
        return Response(header, 200, headers)
    if total < _JOIN_BYTES:
        return Response(b"".join([header, *parts]), 200, headers)
    return Response([header, *parts], 200, headers)


async def _run(fn: Any, *args: Any, size: int) -> Any:
    if size < _OFFLOAD_BYTES:
        return fn(*args)
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


def _raw_request(
    core: InferenceServer, model: str, version: str, body: Buffer
) -> tuple[InferRequest, infer_body.OutputPlan]:
    cfg = core.model_config(model, version)
    inputs = list(cfg.input)
    first = inputs[0] if inputs else None
    spec = (
        (first.name, config_datatype(first.data_type), tuple(int(d) for d in first.dims))
        if first is not None
        else ("", "", ())
    )
    return infer_body.raw_infer_request(
        model, version, body, spec, int(cfg.max_batch_size), len(inputs)
    )


def _apply_classification(
    core: InferenceServer, response: InferResponse, plan: infer_body.OutputPlan
) -> None:
    cfg = core.model_config(response.model_name, response.model_version)
    batching = int(cfg.max_batch_size) > 0
    for i, tensor in enumerate(response.outputs):
        k = plan.classification.get(tensor.name)
        if not k:
            continue
        labels = output_labels(core, cfg, response.model_name, response.model_version, tensor.name)
        response.outputs[i] = classify(tensor, k, batching, labels)
