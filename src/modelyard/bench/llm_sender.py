"""LLM mode's transport: each request one HTTP POST whose answer is read as server-sent events
as they arrive, and each token-carrying event timed.

``send(i)`` returns a :class:`Streamed`: when each token-carrying event came and how many
tokens it carried. A worker's :class:`TokenSamples` turns the requests measured in a step into
genai-perf's per-request and per-response samples (time to first token, inter-token latency,
output length, token throughput per user).
"""

from __future__ import annotations

import asyncio
import time
from array import array
from dataclasses import dataclass, field

import aiohttp

from modelyard.bench.llm_wire import (
    EventError,
    Piece,
    error_message,
    read_generate_event,
    read_openai_event,
)
from modelyard.bench.senders import RequestFailed, SenderSpec
from modelyard.bench.wire import Sequence


@dataclass(frozen=True)
class LlmSpec(SenderSpec):
    """A SenderSpec whose ``http_requests`` are LLM requests (one per prompt) to ``endpoint``."""

    endpoint: str = "generate_stream"


@dataclass
class Streamed:
    responses: int  # events that carried tokens
    end_ns: int  # the stream's end
    times_ns: list[int]  # arrival of each token-carrying event
    tokens: list[int]  # tokens each of them carried
    output_tokens: int  # the server's count when it reported one, else the sum of ``tokens``


@dataclass
class TokenSamples:
    """One worker's LLM samples of a step (arrays, pickled back to the parent)."""

    ttft_ns: array[int] = field(default_factory=lambda: array("q"))
    itl_ns: array[int] = field(default_factory=lambda: array("q"))
    output_tokens: array[int] = field(default_factory=lambda: array("q"))
    # tokens after the first over the first-to-last token span, per request with two or more
    per_user: array[float] = field(default_factory=lambda: array("d"))
    without_tokens: int = 0  # requests that completed with no token at all

    def add(self, start_ns: int, s: Streamed) -> None:
        self.output_tokens.append(s.output_tokens)
        if not s.times_ns:
            self.without_tokens += 1
            return
        self.ttft_ns.append(s.times_ns[0] - start_ns)
        span_ns = s.times_ns[-1] - s.times_ns[0]
        if s.output_tokens > 1 and span_ns > 0:
            self.per_user.append((s.output_tokens - 1) * 1e9 / span_ns)
        for k in range(1, len(s.times_ns)):
            # genai-perf: the gap before a response over the tokens that response carries
            self.itl_ns.append((s.times_ns[k] - s.times_ns[k - 1]) // max(1, s.tokens[k]))


class TokenSender:
    def __init__(self, spec: LlmSpec, connections: int) -> None:
        self._requests = spec.http_requests
        self._timeout = spec.timeout_s
        self._openai = spec.endpoint.startswith("openai-")
        self._chat = spec.endpoint == "openai-chat"
        self._session = aiohttp.ClientSession(
            base_url=f"http://{spec.url}",
            connector=aiohttp.TCPConnector(limit=connections),  # 0: no limit (request rates)
            timeout=aiohttp.ClientTimeout(total=spec.timeout_s),
        )

    async def send(self, index: int, sequence: Sequence | None = None) -> Streamed:
        r = self._requests[index]
        try:
            async with self._session.post(r.path, data=r.body, headers=r.headers) as response:
                if response.status != 200:
                    body = await response.read()
                    raise RequestFailed(f"HTTP {response.status}: {error_message(body)}")
                return await self._read(response.content)
        except asyncio.TimeoutError:
            raise RequestFailed(f"no complete answer in {self._timeout:g} s") from None
        except aiohttp.ClientError as exc:
            raise RequestFailed(f"{type(exc).__name__}: {exc}") from None
        except ValueError as exc:  # aiohttp: an event line past its line limit
            raise RequestFailed(f"unreadable stream: {exc}") from None

    def _piece(self, data: bytes) -> Piece:
        try:
            if self._openai:
                return read_openai_event(data, self._chat)
            return read_generate_event(data)
        except EventError as exc:
            raise RequestFailed(str(exc)) from None

    async def _read(self, content: aiohttp.StreamReader) -> Streamed:
        times: list[int] = []
        tokens: list[int] = []
        reported: int | None = None
        done = 0  # when 'data: [DONE]' came; the body is read to its end all the same, so
        # the connection goes back to the pool
        async for line in content:
            if done or not line.startswith(b"data:"):
                continue  # blank lines between events, comments, other fields
            now = time.monotonic_ns()
            piece = self._piece(line[5:].strip())
            if piece.done:
                done = now
                continue
            if piece.usage_tokens is not None:
                reported = piece.usage_tokens
            if piece.tokens > 0:
                times.append(now)
                tokens.append(piece.tokens)
        end = done or time.monotonic_ns()
        if self._openai and not done:
            raise RequestFailed("the stream ended without 'data: [DONE]'")
        total = sum(tokens) if reported is None else reported
        return Streamed(len(times), end, times, tokens, total)

    async def close(self) -> None:
        await self._session.close()
