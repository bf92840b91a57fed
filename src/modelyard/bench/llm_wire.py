"""LLM mode on the wire: request bodies encoded once per prompt, and the server-sent events
of a streamed answer read into token counts.

Tokens are counted as genai-perf counts them where the server says how many (the model's
``num_output_tokens`` output on generate_stream, the final ``usage`` of an OpenAI stream);
otherwise each event carrying text is one token. An event without text (a chat stream's
role chunk, a finish-reason chunk, an echoed prompt reported as 0 tokens) is no token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson

from modelyard.bench.wire import HttpRequest

GENERATE_INPUTS = ("text_input",)
DONE = b"[DONE]"


class EventError(Exception):
    """An error the server sent inside the stream (or an event that is not JSON)."""


@dataclass(frozen=True)
class Piece:
    """What one event says: tokens it carries, the stream's end, the output count reported."""

    tokens: int = 0
    done: bool = False
    usage_tokens: int | None = None  # OpenAI: usage.completion_tokens


def generate_stream_request(
    model: str,
    version: str,
    prompt: str,
    max_tokens: int,
    inputs: tuple[str, ...],
    extra: dict[str, Any],
) -> HttpRequest:
    """A generate_stream body after Triton's LLM conventions, filling only the inputs the
    model declares: vLLM's (``sampling_parameters`` holding ``max_tokens``) or TensorRT-LLM's
    (a ``max_tokens`` input); ``stream`` true, the prompt left out of the output, and the
    output token counts asked for."""
    body: dict[str, Any] = {"text_input": prompt}
    declared = set(inputs)
    if "stream" in declared:
        body["stream"] = True
    if "exclude_input_in_output" in declared:
        body["exclude_input_in_output"] = True
    if "sampling_parameters" in declared:
        body["sampling_parameters"] = json.dumps({"max_tokens": max_tokens})
    elif "max_tokens" in declared:
        body["max_tokens"] = max_tokens
    if "return_num_output_tokens" in declared:
        body["return_num_output_tokens"] = True
    # a JSON object goes to a BYTES input as its text, as vLLM's sampling_parameters does
    body.update({k: json.dumps(v) if isinstance(v, dict) else v for k, v in extra.items()})
    path = f"/v2/models/{quote(model, safe='')}"
    if version:
        path += f"/versions/{quote(version, safe='')}"
    return HttpRequest(
        path + "/generate_stream", orjson.dumps(body), {"Content-Type": "application/json"}, {}
    )


def openai_request(
    endpoint: str,
    model: str,
    prompt: str,
    max_tokens: int,
    extra: dict[str, Any],
    api_key: str | None,
) -> HttpRequest:
    """A streamed completion or chat completion asking for the usage chunk at its end."""
    body: dict[str, Any] = {"model": model}
    if endpoint == "openai-chat":
        path = "/v1/chat/completions"
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        path = "/v1/completions"
        body["prompt"] = prompt
    body.update(
        {"max_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True}}
    )
    body.update(extra)
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return HttpRequest(path, orjson.dumps(body), headers, {})


def _count(value: Any) -> int | None:
    """An integer output as generate_stream writes it: a number, or a list of one."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "".join(v for v in value if isinstance(v, str))
    return value if isinstance(value, str) else ""


def _load(data: bytes) -> dict[str, Any]:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise EventError(f"an event is not JSON: {data[:200].decode(errors='replace')}") from None
    if not isinstance(doc, dict):
        raise EventError(f"an event is not a JSON object: {data[:200].decode(errors='replace')}")
    return doc


def read_generate_event(data: bytes) -> Piece:
    doc = _load(data)
    if "error" in doc:
        raise EventError(str(doc["error"]))
    reported = _count(doc.get("num_output_tokens"))
    if reported is not None:
        return Piece(tokens=reported)
    return Piece(tokens=1 if _text(doc.get("text_output")) else 0)


def read_openai_event(data: bytes, chat: bool) -> Piece:
    if data.strip() == DONE:
        return Piece(done=True)
    doc = _load(data)
    error = doc.get("error")
    if error is not None:
        message = error.get("message") if isinstance(error, dict) else None
        raise EventError(str(message or error))
    usage = doc.get("usage")
    usage_tokens = _count(usage.get("completion_tokens")) if isinstance(usage, dict) else None
    choices = doc.get("choices") or []
    text = ""
    if choices and isinstance(choices[0], dict):
        choice = choices[0]
        if chat:
            delta = choice.get("delta")
            text = _text(delta.get("content")) if isinstance(delta, dict) else ""
        else:
            text = _text(choice.get("text"))
    return Piece(tokens=1 if text else 0, usage_tokens=usage_tokens)


def error_message(body: bytes) -> str:
    """The message of an error answer: Triton's ``{"error": "..."}`` or OpenAI's
    ``{"error": {"message": ...}}``."""
    try:
        doc = orjson.loads(body)
        error = doc["error"]
        if isinstance(error, dict):
            return str(error.get("message", error))
        return str(error)
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return body[:200].decode(errors="replace")
