"""The HTTP frontend's resource limits, their defaults and the messages that report them.

``max_input_size`` is Triton's ``--http-max-input-size`` (64 MiB): it caps the JSON part of
a request, each JSON-encoded input, a raw binary body and the inflated size of a compressed
body, with Triton's 400 messages. The others bound what Triton leaves to libevhtp:

* ``max_header_size``: the request line and headers together (431);
* ``max_body_size``: the body as sent, before inflation (413); by default the largest
  message Triton's gRPC endpoint accepts (INT32_MAX);
* ``read_timeout``: the longest pause while a request's head or body is being received, and
  before a new connection's first request (408, then the connection closes);
* ``idle_timeout``: how long a keep-alive connection may wait for its next request;
* ``max_connections``: open connections; one more is answered 503 and closed.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_INPUT_SIZE = 1 << 26  # Triton's HTTP_DEFAULT_MAX_INPUT_SIZE
DEFAULT_MAX_HEADER_SIZE = 64 * 1024
DEFAULT_MAX_BODY_SIZE = 2**31 - 1  # Triton's MAX_GRPC_MESSAGE_SIZE
DEFAULT_READ_TIMEOUT_S = 60.0
DEFAULT_IDLE_TIMEOUT_S = 3630.0  # tritonclient keeps connections open between requests
MAX_DEFAULT_CONNECTIONS = 10_000


def default_max_connections(fd_limit: int) -> int:
    """Half the open-file limit (the rest is for gRPC, workers and files), at most 10,000."""
    if fd_limit <= 0:
        return MAX_DEFAULT_CONNECTIONS
    return max(1, min(fd_limit // 2, MAX_DEFAULT_CONNECTIONS))


@dataclass(frozen=True)
class HttpLimits:
    max_input_size: int = DEFAULT_MAX_INPUT_SIZE
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE
    max_body_size: int = DEFAULT_MAX_BODY_SIZE
    read_timeout: float = DEFAULT_READ_TIMEOUT_S
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT_S
    max_connections: int = MAX_DEFAULT_CONNECTIONS


def _flag(name: str) -> str:
    return f"Use --{name} to increase the limit."


def header_too_large(limit: int) -> str:
    return f"request header fields exceed the maximum allowed size of {limit} bytes. " + _flag(
        "http-max-header-size"
    )


def body_too_large(limit: int, length: int | None = None) -> str:
    size = f"request body of {length} bytes" if length is not None else "request body"
    return f"{size} exceeds the maximum allowed size of {limit} bytes. " + _flag(
        "http-max-body-size"
    )


def read_timed_out(timeout: float) -> str:
    return (
        f"no request data received for {timeout:g} s; closing the connection. "
        "Use --http-read-timeout to change the limit."
    )


def too_many_connections(limit: int) -> str:
    return (
        f"the server has reached its limit of {limit} open HTTP connections; try again later. "
        "Use --http-max-connections to change the limit."
    )


# Triton's --http-max-input-size messages (HEAD: EVBufferToJson, EVBufferToRawInput,
# ParseJsonTritonIO, DecompressBuffer).


def json_too_large(length: int, limit: int) -> str:
    return (
        f"request JSON size of {length} bytes exceeds the maximum allowed input size of "
        f"{limit} bytes. " + _flag("http-max-input-size")
    )


def raw_input_too_large(length: int, limit: int) -> str:
    return (
        f"Raw input has a byte_size ({length} bytes) that exceeds the maximum allowed value of "
        f"{limit} bytes. " + _flag("http-max-input-size")
    )


def json_input_too_large(name: str, byte_size: int, limit: int) -> str:
    return (
        f"JSON input '{name}' has a byte_size ({byte_size} bytes) that exceeds the maximum "
        f"allowed value of {limit} bytes. " + _flag("http-max-input-size")
    )


def decompressed_too_large(limit: int) -> str:
    return f"Decompressed data size exceeds the maximum allowed value of {limit} bytes. " + _flag(
        "http-max-input-size"
    )
