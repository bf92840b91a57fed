"""The three request bodies (completions, chat completions, embeddings) read into values,
checked as OpenAI checks them, and what goes on to the model as sampling parameters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from modelyard.frontends.openai import fields
from modelyard.frontends.openai.errors import bad_request

# Fields that are not sampling parameters (or are handled on their own): everything else the
# client sent (null values dropped) goes to a vLLM-style model's ``sampling_parameters``, as
# Triton's OpenAI frontend builds it.
NOT_SAMPLING = frozenset(
    {
        "model", "stream", "messages", "prompt", "echo", "store", "metadata",
        "response_format", "service_tier", "stream_options", "tools", "tool_choice",
        "parallel_tool_calls", "user", "function_call", "functions", "suffix",
        "max_completion_tokens", "max_tokens", "logprobs", "top_logprobs", "best_of",
        "logit_bias", "chat_template", "chat_template_kwargs", "add_generation_prompt",
    }
)  # fmt: skip


@dataclass
class GenerationRequest:
    """A completion or chat completion, ready to map onto a model."""

    model: str
    chat: bool
    prompt: str = ""  # chat: the rendered conversation (set once the template ran)
    messages: list[dict[str, Any]] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    echo: bool = False
    max_tokens: int | None = None  # None: the server's --default-max-tokens
    stop: list[str] = field(default_factory=list)
    sampling: dict[str, Any] = field(default_factory=dict)  # without max_tokens
    # The chat template's extra arguments (vLLM's chat_template_kwargs) and its override.
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    add_generation_prompt: bool = True


@dataclass
class EmbeddingRequest:
    model: str
    inputs: list[str]
    base64: bool = False


def _common(doc: dict[str, Any], chat: bool) -> GenerationRequest:
    model = fields.get(doc, "model", "string")
    if not model:
        raise bad_request("you must provide a model parameter", "model")
    stream = bool(fields.get(doc, "stream", "boolean"))
    options = fields.get(doc, "stream_options", "object")
    if options is not None and not stream:
        raise bad_request(
            "`stream_options` can only be used when `stream` is True", "stream_options"
        )
    include_usage = bool(options and fields.get(options, "include_usage", "boolean"))
    n = fields.bounded(doc, "n", "integer", 1)
    if n is not None and n > 1:
        raise bad_request(
            f"Received n={n}, but only single choice (n=1) is currently supported", "n"
        )
    fields.bounded(doc, "temperature", "number", 0, 2)
    fields.bounded(doc, "top_p", "number", 0, 1)
    fields.bounded(doc, "presence_penalty", "number", -2, 2)
    fields.bounded(doc, "frequency_penalty", "number", -2, 2)
    fields.get(doc, "seed", "integer")
    if doc.get("logit_bias") is not None:
        raise fields.unsupported("logit_bias", "logit bias")
    if doc.get("tools") or doc.get("tool_choice") is not None:
        raise fields.unsupported("tools", "tool calling")
    request = GenerationRequest(model, chat, stream=stream, include_usage=include_usage)
    request.stop = fields.strings(doc, "stop")
    request.sampling = {k: v for k, v in doc.items() if k not in NOT_SAMPLING and v is not None}
    if request.stop:
        request.sampling["stop"] = request.stop
    return request


def completion_request(doc: dict[str, Any]) -> GenerationRequest:
    """``POST /v1/completions``: one prompt (a string, or an array of one string)."""
    request = _common(doc, chat=False)
    prompt = doc.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if prompt is None:
        raise bad_request(
            "Missing required parameter: 'prompt'.", "prompt", "missing_required_parameter"
        )
    if isinstance(prompt, list):
        if prompt and all(isinstance(p, str) for p in prompt):
            raise bad_request(
                f"only one prompt per request is supported, got {len(prompt)}",
                "prompt",
            )
        raise bad_request("a prompt of token ids is not supported: send text", "prompt")
    if not isinstance(prompt, str):
        raise fields.wrong_type("prompt", "string", prompt)
    request.prompt = prompt
    request.echo = bool(fields.get(doc, "echo", "boolean"))
    request.max_tokens = fields.bounded(doc, "max_tokens", "integer", 1)
    if doc.get("suffix") is not None:
        raise fields.unsupported("suffix", "suffix")
    logprobs = fields.get(doc, "logprobs", "integer")
    if logprobs:
        raise fields.unsupported("logprobs", "logprobs")
    best_of = fields.bounded(doc, "best_of", "integer", 1)
    if best_of is not None and best_of > 1:
        raise fields.unsupported("best_of", "best_of > 1")
    return request


def chat_request(doc: dict[str, Any]) -> GenerationRequest:
    """``POST /v1/chat/completions``: the messages are checked here and rendered later."""
    request = _common(doc, chat=True)
    messages = fields.get(doc, "messages", "array", required=True)
    if not messages:
        raise bad_request(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but "
            "got an empty array instead.",
            "messages",
            "empty_array",
        )
    request.messages = [_message(m, i) for i, m in enumerate(messages)]
    limit = fields.bounded(doc, "max_completion_tokens", "integer", 1)
    request.max_tokens = limit if limit is not None else fields.bounded(
        doc, "max_tokens", "integer", 1
    )  # fmt: skip
    if fields.get(doc, "logprobs", "boolean") or doc.get("top_logprobs") is not None:
        raise fields.unsupported("logprobs", "logprobs")
    kwargs = fields.get(doc, "chat_template_kwargs", "object")
    request.template_kwargs = dict(kwargs or {})
    add = fields.get(doc, "add_generation_prompt", "boolean")
    request.add_generation_prompt = True if add is None else add
    return request


def _message(value: Any, index: int) -> dict[str, Any]:
    """One message with its content as plain text (text parts joined by newlines)."""
    name = f"messages[{index}]"
    if not isinstance(value, dict):
        raise fields.wrong_type(name, "object", value)
    role = fields.get(value, "role", "string")
    if not role:
        raise bad_request(
            f"Missing required parameter: '{name}.role'.",
            f"{name}.role",
            "missing_required_parameter",
        )
    content = value.get("content")
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") == "text"):
                raise bad_request(
                    f"Invalid '{name}.content[{j}]': only text content parts are supported.",
                    f"{name}.content[{j}]",
                )
            text = part.get("text")
            if not isinstance(text, str):
                raise fields.wrong_type(f"{name}.content[{j}].text", "string", text)
            texts.append(text)
        content = "\n".join(texts)
    elif content is None:
        content = ""
    elif not isinstance(content, str):
        raise fields.wrong_type(f"{name}.content", "string", content)
    message = {k: v for k, v in value.items() if k not in ("role", "content")}
    message["role"] = role
    message["content"] = content
    return message


def embedding_request(doc: dict[str, Any]) -> EmbeddingRequest:
    """``POST /v1/embeddings``: ``input`` is a string or an array of strings."""
    model = fields.get(doc, "model", "string")
    if not model:
        raise bad_request("you must provide a model parameter", "model")
    value = doc.get("input")
    if value is None:
        raise bad_request(
            "Missing required parameter: 'input'.", "input", "missing_required_parameter"
        )
    inputs = [value] if isinstance(value, str) else value
    if not isinstance(inputs, list) or not inputs:
        raise bad_request("'input' must be a non-empty string or array of strings", "input")
    if not all(isinstance(v, str) for v in inputs):
        raise bad_request("an input of token ids is not supported: send text", "input")
    if any(not v for v in inputs):
        raise bad_request("'input' cannot contain an empty string", "input")
    form = fields.get(doc, "encoding_format", "string") or "float"
    if form not in ("float", "base64"):
        raise bad_request(
            f"Invalid 'encoding_format': expected 'float' or 'base64', got '{form}'",
            "encoding_format",
        )
    if doc.get("dimensions") is not None:
        raise fields.unsupported("dimensions", "dimensions")
    return EmbeddingRequest(model, inputs, form == "base64")
