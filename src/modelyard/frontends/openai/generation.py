"""One completion run on the core: the model's responses read as text deltas (the client's
``stop`` strings applied), then the finish reason and token usage. Closing it (the client
went away, or a stop string was found) cancels the core request and its BLS calls."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from modelyard.errors import ModelyardError
from modelyard.frontends.openai.catalog import ServedModel
from modelyard.frontends.openai.errors import from_core
from modelyard.frontends.openai.mapping import generation_inputs
from modelyard.frontends.openai.requests import GenerationRequest
from modelyard.frontends.openai.results import Piece, StopMatcher, TextReader
from modelyard.types import InferResponse

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer


class Generation:
    """``await start()`` (errors before the first response raise ``OpenAIError``), then
    ``async for text in deltas()``, then ``finish_reason`` and ``usage()``; ``close()``
    always."""

    def __init__(
        self,
        core: InferenceServer,
        model: ServedModel,
        request: GenerationRequest,
        max_tokens: int,
    ):
        self.core = core
        self.model = model
        self.request = request
        self.max_tokens = max_tokens
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self._model_finish: str | None = None
        self._stop = StopMatcher(request.stop)
        self._reader = TextReader()
        self._stream: AsyncIterator[InferResponse] | None = None
        self._first: InferResponse | None = None

    async def start(self) -> None:
        infer_request = generation_inputs(self.model, self.request, self.max_tokens)
        stream = self.core.infer_stream(infer_request)
        self._stream = stream
        try:
            self._first = await anext(stream)
        except StopAsyncIteration:
            self._first = None
        except ModelyardError as e:  # refused before it ran: unknown input, bad shape...
            raise from_core(e) from None
        if self._first is not None and self._first.error is not None:
            raise from_core(self._first.error)

    async def deltas(self) -> AsyncIterator[str]:
        """The text, a piece per model response (empty pieces skipped)."""
        if self.request.echo and self.model.echo_input is None:
            yield self.request.prompt  # the model has no echo switch: the frontend echoes
        response = self._first
        stream = self._stream
        assert stream is not None, "start() first"
        while response is not None:
            if response.error is not None:
                raise from_core(response.error)
            text = self._stop.feed(self._take(self._reader.read(response)))
            if text:
                yield text
            if self._stop.stopped:
                await self.close()  # the text is complete: the model need not go on
                return
            if response.final:
                break
            try:
                response = await anext(stream)
            except StopAsyncIteration:
                break
        rest = self._stop.flush()
        if rest:
            yield rest

    def _take(self, piece: Piece) -> str:
        if piece.prompt_tokens is not None and self.prompt_tokens is None:
            self.prompt_tokens = piece.prompt_tokens
        if piece.completion_tokens is not None:
            self.completion_tokens = (self.completion_tokens or 0) + piece.completion_tokens
        if piece.finish_reason is not None:
            self._model_finish = piece.finish_reason
        return piece.text

    @property
    def finish_reason(self) -> str:
        """The stop string's, else the model's, else ``length`` when the model reported as
        many tokens as ``max_tokens`` allowed, else ``stop``."""
        if self._stop.stopped:
            return "stop"
        if self._model_finish is not None:
            return self._model_finish
        if self.completion_tokens is not None and self.completion_tokens >= self.max_tokens:
            return "length"
        return "stop"

    def usage(self) -> dict[str, int] | None:
        """OpenAI's usage object when the model reported both counts."""
        if self.prompt_tokens is None or self.completion_tokens is None:
            return None
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }

    async def close(self) -> None:
        """Cancel the core request if it has not ended (idempotent)."""
        stream, self._stream = self._stream, None
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


async def collect(generation: Generation) -> str:
    """The whole text of a generation."""
    parts = [text async for text in generation.deltas()]
    return "".join(parts)
