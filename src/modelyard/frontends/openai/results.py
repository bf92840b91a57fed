"""What a model's responses say, read for the OpenAI API: the text (``text_output``),
token counts (``num_input_tokens`` / ``num_output_tokens`` outputs or response parameters),
a ``finish_reason`` (response parameter or BYTES output), an embedding; and ``StopMatcher``,
which ends a text at the client's ``stop`` strings when the model did not."""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Any

import numpy as np

from modelyard.tensor_bytes import array_from_raw
from modelyard.types import InferResponse

FINISH_REASONS = ("stop", "length", "content_filter", "tool_calls")


def output(response: InferResponse, name: str) -> np.ndarray[Any, Any] | None:
    """Output ``name`` as an array, or None when the response has none."""
    for tensor in response.outputs:
        if tensor.name == name:
            if tensor.data is not None:
                return tensor.data
            raw = tensor.raw if tensor.raw is not None else b""
            return array_from_raw(tensor.datatype, tensor.shape, raw)
    return None


def token_count(response: InferResponse, name: str) -> int | None:
    array = output(response, name)
    if array is not None and array.size and array.dtype.kind in "iu":
        return int(array.reshape(-1)[0])
    value = response.parameters.get(name)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def _finish(response: InferResponse) -> str | None:
    value: Any = response.parameters.get("finish_reason")
    if value is None:
        array = output(response, "finish_reason")
        if array is not None and array.size:
            value = array.reshape(-1)[0]
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str) and value:
        return value
    return None


@dataclass
class Piece:
    """One model response, read: its text, what it says of tokens and of finishing."""

    text: str
    final: bool
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None


class TextReader:
    """Reads a stream of responses' ``text_output`` as UTF-8, a character split between
    two responses (token by token) kept whole."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def read(self, response: InferResponse) -> Piece:
        array = output(response, "text_output")
        data = b""
        if array is not None and array.size:
            data = b"".join(
                v if isinstance(v, bytes) else str(v).encode("utf-8") for v in array.reshape(-1)
            )
        text = self._decoder.decode(data, final=response.final)
        return Piece(
            text,
            response.final,
            token_count(response, "num_input_tokens"),
            token_count(response, "num_output_tokens"),
            _finish(response),
        )


def embedding_of(response: InferResponse) -> list[float]:
    array = output(response, "embedding")
    if array is None:
        return []
    return [float(v) for v in np.asarray(array, dtype=np.float64).reshape(-1)]


class StopMatcher:
    """Holds back text that may be the start of a stop string; ``feed`` returns what may be
    sent and whether a stop string was found (the text ends before it)."""

    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self._keep = max((len(s) for s in self.stops), default=1) - 1
        self._held = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        if not self.stops:
            return text
        if self.stopped:
            return ""
        buffer = self._held + text
        cut = min((i for s in self.stops if (i := buffer.find(s)) >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._held = ""
            return buffer[:cut]
        split = max(len(buffer) - self._keep, 0)
        self._held = buffer[split:]
        return buffer[:split]

    def flush(self) -> str:
        """What is still held once the text has ended."""
        held, self._held = self._held, ""
        return "" if self.stopped else held
