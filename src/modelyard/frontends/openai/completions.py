"""``POST /v1/completions`` and ``POST /v1/chat/completions``: one JSON answer, or with
``stream: true`` server-sent events (a chunk per model response, then the finish reason,
the usage when ``stream_options.include_usage`` asks for it, and ``data: [DONE]``)."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

import orjson

from modelyard.frontends.http.request_response import JSON_HEADERS, Request, Response
from modelyard.frontends.openai.catalog import GENERATE, Catalog
from modelyard.frontends.openai.errors import OpenAIError, bad_request
from modelyard.frontends.openai.fields import read_object
from modelyard.frontends.openai.generation import Generation, collect
from modelyard.frontends.openai.requests import (
    GenerationRequest,
    chat_request,
    completion_request,
)
from modelyard.frontends.openai.templates import RenderError

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer

SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]  # fmt: skip
DONE = b"data: [DONE]\n\n"


async def handle_completion(
    core: InferenceServer,
    catalog: Catalog,
    request: Request,
    chat: bool,
    default_max_tokens: int,
    max_input_size: int,
) -> Response | None:
    """The JSON response, or None when the events were sent here."""
    doc = await read_object(request, max_input_size)
    gen_request = chat_request(doc) if chat else completion_request(doc)
    model = catalog.find(gen_request.model, GENERATE)
    if chat:
        template = catalog.template(model)
        try:
            gen_request.prompt = template.render(
                gen_request.messages,
                gen_request.add_generation_prompt,
                gen_request.template_kwargs,
            )
        except RenderError as e:
            raise bad_request(str(e), "messages") from None
    max_tokens = gen_request.max_tokens or default_max_tokens
    # A client that goes away cancels this task; closing the generation then cancels the
    # core request (and its BLS calls).
    request.cancel_on_disconnect()
    generation = Generation(core, model, gen_request, max_tokens)
    try:
        await generation.start()
        shape = _Shape(gen_request)
        if gen_request.stream:
            await _stream(request, generation, shape)
            return None
        text = await collect(generation)
        return Response(orjson.dumps(shape.whole(text, generation)), 200, JSON_HEADERS)
    finally:
        await generation.close()


class _Shape:
    """The response objects of one request (completion or chat), as OpenAI writes them."""

    def __init__(self, request: GenerationRequest):
        self.chat = request.chat
        self.include_usage = request.include_usage
        self.id = f"{'chatcmpl' if request.chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.head: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion" if request.chat else "text_completion",
            "created": int(time.time()),
            "model": request.model,
            "system_fingerprint": None,
        }

    def whole(self, text: str, generation: Generation) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        choice["logprobs"] = None
        choice["finish_reason"] = generation.finish_reason
        return {**self.head, "choices": [choice], "usage": generation.usage()}

    def chunk(self, delta: dict[str, Any] | str, finish: str | None) -> bytes:
        choice: dict[str, Any] = {"index": 0}
        if self.chat:
            choice["delta"] = delta
        else:
            choice["text"] = delta
        choice["logprobs"] = None
        choice["finish_reason"] = finish
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return _event({**self.head, "object": obj, "choices": [choice]})

    def text_chunk(self, text: str) -> bytes:
        return self.chunk({"content": text} if self.chat else text, None)

    def usage_chunk(self, usage: dict[str, int] | None) -> bytes:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return _event({**self.head, "object": obj, "choices": [], "usage": usage})


def _event(doc: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(doc) + b"\n\n"


async def _stream(request: Request, generation: Generation, shape: _Shape) -> None:
    """The events. An error after they started is one ``data: {"error": ...}`` event (the
    OpenAI clients raise it), then ``[DONE]``."""
    send = request.send
    request.started = True
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})

    async def write(data: bytes) -> None:
        await send({"type": "http.response.body", "body": data, "more_body": True})

    try:
        if shape.chat:
            await write(shape.chunk({"role": "assistant", "content": ""}, None))
        async for text in generation.deltas():
            await write(shape.text_chunk(text))
        await write(shape.chunk({} if shape.chat else "", generation.finish_reason))
        if shape.include_usage:
            await write(shape.usage_chunk(generation.usage()))
    except OpenAIError as e:
        await write(b"data: " + e.body() + b"\n\n")
    await send({"type": "http.response.body", "body": DONE})
