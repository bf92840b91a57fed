"""Protobuf wire-format shortcuts for the two messages that carry tensor bytes.

protobuf (upb) copies a ``bytes`` field every time it is read, appended or serialized, and
for large tensors those copies cost several times a plain memcpy. So tensor payloads never
enter a protobuf object here:

* a ``ModelInferRequest`` is split on the wire: each ``raw_input_contents`` entry (field 7)
  becomes a zero-copy ``memoryview`` of the received buffer, and only the small remainder is
  parsed by protobuf;
* a ``ModelInferResponse`` is serialized as its small protobuf "header" (everything but
  ``raw_output_contents``) followed by hand-encoded field-6 entries, so each output's bytes
  are copied once, into the outgoing message. Protobuf accepts fields in any order, so the
  result is an ordinary message for every client.

The header's parts that repeat from one response to the next (model name and version, each
output's name, datatype and shape) are serialized by protobuf once and then reused: building
those messages anew cost more than the rest of a small request's encoding.
"""

from __future__ import annotations

import functools
from typing import Any

from tritonclient.grpc import service_pb2

Buffer = bytes | bytearray | memoryview

# Requests below this size are parsed by protobuf alone: a copy of a few KiB costs less
# than walking the wire format in Python (measured crossover: ~64 KiB).
SCAN_THRESHOLD = 64 * 1024

_RAW_INPUT_KEY = (7 << 3) | 2  # ModelInferRequest.raw_input_contents, length-delimited
_ID_TAG = bytes([(3 << 3) | 2])  # ModelInferResponse.id
_OUTPUT_TAG = bytes([(5 << 3) | 2])  # ModelInferResponse.outputs
_RAW_OUTPUT_TAG = bytes([(6 << 3) | 2])  # ModelInferResponse.raw_output_contents
_ERROR_MESSAGE_TAG = bytes([(1 << 3) | 2])  # ModelStreamInferResponse.error_message
_INFER_RESPONSE_TAG = bytes([(2 << 3) | 2])  # ModelStreamInferResponse.infer_response
_SMALL_VARINTS = [bytes([n]) for n in range(0x80)]


def varint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL_VARINTS[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise ValueError("truncated varint in ModelInferRequest")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise ValueError("malformed varint in ModelInferRequest")


class WireInferRequest:
    """A received ModelInferRequest: the protobuf message without its raw tensor bytes,
    plus those bytes (``raw``), in order. ``msg.raw_input_contents`` must not be used.

    ``error`` is set (and ``msg`` empty) when the bytes were not a valid ModelInferRequest:
    the handler answers INVALID_ARGUMENT with it.
    """

    __slots__ = ("error", "msg", "raw")

    def __init__(self, msg: Any, raw: list[Buffer], error: str = "") -> None:
        self.msg = msg
        self.raw = raw
        self.error = error


def unparsable(error: Exception) -> str:
    """The message for a request body that does not parse (Triton's words, then protobuf's
    or the wire scan's, which name the message type)."""
    return f"Unable to parse request: {error}"


def parse_infer_request(data: bytes) -> WireInferRequest:
    """gRPC request deserializer for ModelInfer / ModelStreamInfer; never raises (a
    malformed message comes back with ``error`` set)."""
    try:
        return _parse_infer_request(data)
    except Exception as e:  # DecodeError, or ValueError from the wire scan below
        error = unparsable(e)
        return WireInferRequest(service_pb2.ModelInferRequest(), [], error)


def _parse_infer_request(data: bytes) -> WireInferRequest:
    if len(data) < SCAN_THRESHOLD:
        msg = service_pb2.ModelInferRequest.FromString(data)
        return WireInferRequest(msg, list(msg.raw_input_contents))
    view = memoryview(data)
    end = len(data)
    pos = 0
    raw: list[Buffer] = []
    keep: list[tuple[int, int]] = []  # spans of every other field, merged when adjacent
    while pos < end:
        start = pos
        key, pos = _read_varint(data, pos, end)
        wire_type = key & 7
        if wire_type == 2:
            length, pos = _read_varint(data, pos, end)
            stop = pos + length
            if stop > end:
                raise ValueError("truncated field in ModelInferRequest")
            if key == _RAW_INPUT_KEY:
                raw.append(view[pos:stop])
                pos = stop
                continue
            pos = stop
        elif wire_type == 0:
            _, pos = _read_varint(data, pos, end)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire_type} in ModelInferRequest")
        if pos > end:
            raise ValueError("truncated field in ModelInferRequest")
        if keep and keep[-1][1] == start:
            keep[-1] = (keep[-1][0], pos)
        else:
            keep.append((start, pos))
    if len(keep) == 1 and keep[0] == (0, end):
        header = data
    else:
        header = b"".join(view[s:e] for s, e in keep)
    return WireInferRequest(service_pb2.ModelInferRequest.FromString(header), raw)


# -- response header parts -------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def response_names(model_name: str, model_version: str) -> bytes:
    """ModelInferResponse fields 1 and 2 (model name and version) on the wire."""
    msg = service_pb2.ModelInferResponse(model_name=model_name, model_version=model_version)
    return msg.SerializeToString()  # type: ignore[no-any-return]


def response_id(request_id: str) -> bytes:
    """ModelInferResponse field 3 (the request id) on the wire; "" for no id."""
    if not request_id:
        return b""
    text = request_id.encode("utf-8")
    return _ID_TAG + varint(len(text)) + text


@functools.lru_cache(maxsize=4096)
def output_entry(name: str, datatype: str, shape: tuple[int, ...]) -> bytes:
    """One ModelInferResponse.outputs entry (field 5) on the wire."""
    tensor = service_pb2.ModelInferResponse.InferOutputTensor(
        name=name, datatype=datatype, shape=shape
    )
    body: bytes = tensor.SerializeToString()
    return _OUTPUT_TAG + varint(len(body)) + body


class EncodedResponse:
    """A ModelInferResponse ready to send: ``head`` (the serialized ModelInferResponse with
    no ``raw_output_contents``) and the raw bytes of each output, in the order of its
    ``outputs``.

    In a stream, ``error_message`` is the ModelStreamInferResponse error text.
    """

    __slots__ = ("error_message", "head", "raw")

    def __init__(self, head: bytes, raw: list[Buffer] | None = None, error_message: str = ""):
        self.head = head
        self.raw: list[Buffer] = raw if raw is not None else []
        self.error_message = error_message

    def _parts(self) -> tuple[list[Buffer], int]:
        head = self.head
        parts: list[Buffer] = [head]
        size = len(head)
        for r in self.raw:
            n = r.nbytes if isinstance(r, memoryview) else len(r)
            prefix = _RAW_OUTPUT_TAG + varint(n)
            parts.append(prefix)
            parts.append(r)
            size += len(prefix) + n
        return parts, size

    def serialize(self) -> bytes:
        """Wire bytes of the ModelInferResponse (the ModelInfer response serializer)."""
        if not self.raw:
            return self.head
        parts, _ = self._parts()
        return b"".join(parts)

    def serialize_stream(self) -> bytes:
        """Wire bytes of a ModelStreamInferResponse wrapping this response."""
        parts, size = self._parts()
        out: list[Buffer] = []
        if self.error_message:
            text = self.error_message.encode("utf-8")
            out += [_ERROR_MESSAGE_TAG, varint(len(text)), text]
        out += [_INFER_RESPONSE_TAG, varint(size)]
        out += parts
        return b"".join(out)

    def to_message(self) -> Any:
        """The equivalent protobuf ModelInferResponse (tests and tools; copies the data)."""
        return service_pb2.ModelInferResponse.FromString(self.serialize())

    def to_stream_message(self) -> Any:
        return service_pb2.ModelStreamInferResponse.FromString(self.serialize_stream())
