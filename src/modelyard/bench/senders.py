"""The transports a worker process sends with: asyncio, one connection pool per process.

They send the requests ``wire`` encoded beforehand and read no output tensors, so a request
costs the client little more than the transport itself (measured: benchmarks/RESULTS.md,
"Client CPU per request of `modelyard bench`").
``send(i)`` returns how many responses request ``i`` received and when the last arrived, or
raises :class:`RequestFailed` with the server's message.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import grpc
import orjson

from modelyard.bench.wire import HttpRequest, Sequence, grpc_sequence_suffix

INFER = "/inference.GRPCInferenceService/ModelInfer"
STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
FINAL = "triton_final_response"
GRPC_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


class RequestFailed(Exception):
    """A request that got an error, or no complete answer in time."""


class Sender(Protocol):
    async def send(self, index: int, sequence: Sequence | None = None) -> tuple[int, int]: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class SequenceSpec:
    """How a sequence model's lanes form sequences (perf_analyzer's flags)."""

    length: int | None  # None: each data stream's length
    variation: float  # fraction: lengths vary by up to this much around ``length``
    id_start: int
    id_end: int | None  # excluded; None: unbounded


@dataclass(frozen=True)
class SenderSpec:
    """Everything a worker needs to send; pickled to the worker process."""

    protocol: str
    url: str
    streaming: bool
    decoupled: bool
    http_requests: tuple[HttpRequest, ...]
    grpc_requests: tuple[bytes, ...]
    # request indices per data stream: sent round-robin, or one stream per sequence
    streams: tuple[tuple[int, ...], ...]
    timeout_s: float
    sequence: SequenceSpec | None = None


def make_sender(spec: SenderSpec, connections: int) -> Sender:
    """Build inside the running event loop: aiohttp and grpc.aio bind to it."""
    if spec.protocol == "http":
        return HttpSender(spec, connections)
    if spec.streaming:
        return GrpcStreamSender(spec)
    return GrpcSender(spec)


class HttpSender:
    def __init__(self, spec: SenderSpec, connections: int) -> None:
        self._requests = spec.http_requests
        self._timeout = spec.timeout_s
        self._session = aiohttp.ClientSession(
            base_url=f"http://{spec.url}",
            connector=aiohttp.TCPConnector(limit=connections),  # 0: no limit (request rates)
            timeout=aiohttp.ClientTimeout(total=spec.timeout_s),
        )

    async def send(self, index: int, sequence: Sequence | None = None) -> tuple[int, int]:
        r = self._requests[index]
        body, headers = (r.body, r.headers) if sequence is None else r.with_sequence(sequence)
        try:
            async with self._session.post(r.path, data=body, headers=headers) as response:
                body = await response.read()
                status = response.status
        except asyncio.TimeoutError:
            raise RequestFailed(f"no response in {self._timeout:g} s") from None
        except aiohttp.ClientError as exc:
            raise RequestFailed(f"{type(exc).__name__}: {exc}") from None
        end = time.monotonic_ns()
        if status != 200:
            raise RequestFailed(f"HTTP {status}: {_http_error(body)}")
        return 1, end

    async def close(self) -> None:
        await self._session.close()


def _http_error(body: bytes) -> str:
    try:
        return str(orjson.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return body[:200].decode(errors="replace")


def _rpc_error(exc: grpc.aio.AioRpcError) -> str:
    return f"{exc.code().name}: {exc.details()}"


class GrpcSender:
    def __init__(self, spec: SenderSpec) -> None:
        self._requests = spec.grpc_requests
        self._timeout = spec.timeout_s
        self._channel = grpc.aio.insecure_channel(spec.url, options=GRPC_OPTIONS)
        # no serializers: the requests are bytes already, and the response is not decoded
        self._infer = self._channel.unary_unary(INFER)

    async def send(self, index: int, sequence: Sequence | None = None) -> tuple[int, int]:
        request = self._requests[index]
        if sequence is not None:
            request += grpc_sequence_suffix(sequence)
        try:
            await self._infer(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise RequestFailed(f"no response in {self._timeout:g} s") from None
            raise RequestFailed(_rpc_error(exc)) from None
        return 1, time.monotonic_ns()

    async def close(self) -> None:
        await self._channel.close()


class GrpcStreamSender:
    """ModelStreamInfer with one request at a time per stream: streams are pooled, so
    responses never need matching to requests, and a stream that saw an error or a timeout
    is dropped rather than reused."""

    def __init__(self, spec: SenderSpec) -> None:
        from tritonclient.grpc import service_pb2  # tritonclient.grpc costs HTTP workers 0.2 s

        self._requests = spec.grpc_requests
        self._timeout = spec.timeout_s
        self._decoupled = spec.decoupled
        self._channel = grpc.aio.insecure_channel(spec.url, options=GRPC_OPTIONS)
        self._open = self._channel.stream_stream(
            STREAM_INFER, response_deserializer=service_pb2.ModelStreamInferResponse.FromString
        )
        self._idle: list[Any] = []

    async def send(self, index: int, sequence: Sequence | None = None) -> tuple[int, int]:
        request = self._requests[index]
        if sequence is not None:
            request += grpc_sequence_suffix(sequence)
        call = self._idle.pop() if self._idle else self._open()
        try:
            result = await asyncio.wait_for(self._exchange(call, request), self._timeout)
        except asyncio.TimeoutError:
            call.cancel()
            raise RequestFailed(f"no final response in {self._timeout:g} s") from None
        except grpc.aio.AioRpcError as exc:
            raise RequestFailed(_rpc_error(exc)) from None
        except RequestFailed:
            call.cancel()  # later responses of the failed request must not reach the next one
            raise
        self._idle.append(call)
        return result

    async def _exchange(self, call: Any, request: bytes) -> tuple[int, int]:
        await call.write(request)
        responses = 0
        last = 0
        while True:
            message = await call.read()
            now = time.monotonic_ns()
            if message is grpc.aio.EOF:
                raise RequestFailed("the server ended the stream before the final response")
            if message.error_message:
                raise RequestFailed(message.error_message)
            reply = message.infer_response
            if FINAL in reply.parameters:
                final = reply.parameters[FINAL].bool_param
            else:  # a server that does not mark responses: one answer unless decoupled
                final = not self._decoupled
            if reply.outputs or not final:
                responses += 1  # the flag-only final response is no answer (perf_analyzer's rule)
                last = now
            if final:
                return responses, last or now

    async def close(self) -> None:
        for call in self._idle:
            call.cancel()
        await self._channel.close()
