"""Content-Encoding for ``/infer``: gzip/deflate request bodies, and response compression
chosen from ``Accept-Encoding`` as Triton chooses it (protocol.md §2.5)."""

from __future__ import annotations

import zlib

from modelyard.errors import InvalidArgument, Unsupported
from modelyard.frontends.http.limits import decompressed_too_large

Body = bytes | bytearray | memoryview


def decompress(body: Body, encoding: str, limit: int) -> bytes:
    """Inflate a gzip or zlib ("deflate") request body (auto-detected, as Triton does).

    The inflated size is checked while inflating: zlib stops after ``limit + 1`` bytes, so a
    small body that would inflate to gigabytes costs at most ``limit`` bytes of memory.
    """
    inflater = zlib.decompressobj(15 | 32)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as e:
        raise InvalidArgument(f"failed to decompress the '{encoding}' request body: {e}") from None
    if len(out) > limit:
        raise InvalidArgument(decompressed_too_large(limit))
    if not inflater.eof:
        raise InvalidArgument(
            f"failed to decompress the '{encoding}' request body: Error -5 while decompressing "
            "data: incomplete or truncated stream"
        )
    return out


class UnsupportedCompression(Unsupported):
    """A request Content-Encoding other than identity, gzip or deflate (HTTP 501)."""


def request_encoding(value: str | None) -> str:
    """'identity', 'gzip' or 'deflate'; raise UnsupportedCompression for anything else."""
    if not value or value == "identity":
        return "identity"
    if value in ("gzip", "deflate"):
        return value
    raise UnsupportedCompression("Unsupported compression type")


def response_encoding(accept_encoding: str | None) -> str:
    """Triton's choice from ``Accept-Encoding``: the highest-weighted of identity, gzip and
    deflate (first listed wins a tie); 'identity' when none applies."""
    if not accept_encoding:
        return "identity"
    chosen, weight = "identity", 0.0
    for item in accept_encoding.split(","):
        coding, _, q = item.strip().partition(";q=")
        coding = coding.strip()
        if not coding:
            continue
        w = 1.0
        if q:
            try:
                w = float(q)
            except ValueError:
                continue
        if coding in ("identity", "gzip", "deflate") and w > weight:
            chosen, weight = coding, w
    return chosen


def compress(parts: list[Body], encoding: str) -> bytes:
    """gzip or zlib-wrapped deflate of the concatenated parts (fast level: latency first)."""
    wbits = 31 if encoding == "gzip" else 15
    c = zlib.compressobj(1, zlib.DEFLATED, wbits)
    chunks = [c.compress(p) for p in parts]
    chunks.append(c.flush())
    return b"".join(chunks)
