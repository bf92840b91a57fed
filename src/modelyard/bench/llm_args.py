"""The flags of bench's LLM mode (``--endpoint``): which streaming endpoint, which prompts,
how many tokens. Named after genai-perf's where it has one (``--extra-inputs``)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENDPOINTS = ("generate_stream", "openai-completions", "openai-chat")
OPENAI_PORT = 9000  # Triton's OpenAI frontend's port
DEFAULT_PROMPT = "Once upon a time"
DEFAULT_MAX_TOKENS = 16


class LlmUsageError(Exception):
    """A bad LLM-mode flag; args.py reports it as its own UsageError."""


@dataclass(frozen=True)
class LlmOptions:
    endpoint: str  # one of ENDPOINTS
    prompts: tuple[str, ...]
    max_tokens: int
    extra_inputs: dict[str, Any] = field(default_factory=dict)
    api_key: str | None = None

    @property
    def openai(self) -> bool:
        return self.endpoint.startswith("openai-")


def add_llm_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "LLM mode",
        "stream tokens from a generate-style model and report time to first token, "
        "inter-token latency and token throughput (genai-perf's metrics)",
    )
    g.add_argument(
        "--endpoint",
        choices=ENDPOINTS,
        default=None,
        help="LLM mode over Triton's generate_stream (the HTTP port) or the OpenAI API's "
        "streamed completions or chat completions (--url is then the OpenAI port, "
        f"default localhost:{OPENAI_PORT})",
    )
    g.add_argument(
        "--prompt",
        action="append",
        default=[],
        help=f"a prompt, sent round-robin with the others; repeatable (default '{DEFAULT_PROMPT}')",
    )
    g.add_argument(
        "--prompts-file",
        default=None,
        metavar="FILE",
        help="prompts, one a line: plain text, or JSON objects with a 'text' field (genai-perf's "
        "input file)",
    )
    g.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        metavar="N",
        help=f"tokens asked of each request (default {DEFAULT_MAX_TOKENS})",
    )
    g.add_argument(
        "--extra-inputs",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="another field of every request body (a JSON value, else a string): a model "
        "input for generate_stream, a request field for the OpenAI API; repeatable",
    )
    g.add_argument(
        "--api-key",
        default=None,
        help="OpenAI endpoints: sent as 'Authorization: Bearer KEY' (the server's --openai-api-key)",
    )


def read_prompts(path: str) -> tuple[str, ...]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise LlmUsageError(f"--prompts-file {path}: cannot read it: {exc}") from None
    prompts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                doc = None
            text = doc.get("text") if isinstance(doc, dict) else None
            if not isinstance(text, str):
                raise LlmUsageError(
                    f"--prompts-file {path}: line {number} is a JSON object without a "
                    "string 'text' field"
                )
            prompts.append(text)
        else:
            prompts.append(line)
    if not prompts:
        raise LlmUsageError(f"--prompts-file {path}: no prompt in it")
    return tuple(prompts)


def parse_extra_input(text: str) -> tuple[str, Any]:
    name, sep, raw = text.partition(":")
    if not sep or not name:
        raise LlmUsageError(f"--extra-inputs expects NAME:VALUE, got '{text}'")
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    return name, value


def llm_options(ns: argparse.Namespace) -> LlmOptions | None:
    """The LLM mode's options, or None without --endpoint (the LLM flags are then refused)."""
    if ns.endpoint is None:
        given = [
            flag
            for flag, value in (
                ("--prompt", ns.prompt),
                ("--prompts-file", ns.prompts_file),
                ("--max-tokens", ns.max_tokens is not None),
                ("--extra-inputs", ns.extra_inputs),
                ("--api-key", ns.api_key),
            )
            if value
        ]
        if given:
            raise LlmUsageError(f"{given[0]} needs --endpoint (LLM mode)")
        return None
    if ns.protocol != "http":
        raise LlmUsageError("--endpoint streams over HTTP: leave out --protocol grpc")
    for flag, bad in (
        ("--streaming", ns.streaming),
        ("-b/--batch-size", ns.batch_size != 1),
        ("--shape", ns.shape),
        ("--input-data", ns.input_data),
        ("--string-data", ns.string_data),
    ):
        if bad:
            raise LlmUsageError(f"{flag} does not apply to --endpoint (LLM mode sends prompts)")
    max_tokens = DEFAULT_MAX_TOKENS if ns.max_tokens is None else ns.max_tokens
    if max_tokens < 1:
        raise LlmUsageError(f"--max-tokens must be at least 1, got {max_tokens}")
    if ns.prompt and ns.prompts_file:
        raise LlmUsageError("give --prompt or --prompts-file, not both")
    prompts = tuple(ns.prompt) or (
        read_prompts(ns.prompts_file) if ns.prompts_file else (DEFAULT_PROMPT,)
    )
    if ns.api_key and not ns.endpoint.startswith("openai-"):
        raise LlmUsageError("--api-key is for the OpenAI endpoints")
    return LlmOptions(
        endpoint=ns.endpoint,
        prompts=prompts,
        max_tokens=max_tokens,
        extra_inputs=dict(parse_extra_input(e) for e in ns.extra_inputs),
        api_key=ns.api_key,
    )
