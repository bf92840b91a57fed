"""Response cache: Triton's ``--cache-config local,size=N`` plus ``response_cache { enable: true }``.

A model whose config enables the cache gets its scheduler wrapped in :class:`CachingScheduler`.
Each request is hashed (model, version, every input's name, datatype, shape and bytes, the
requested outputs and the request's custom parameters); a hit answers at once from an LRU cache
bounded by total tensor bytes, a miss runs the model and stores its successful response.
Statistics follow Triton: a hit counts as a success with ``cache_hit`` (lookup time) and no
inference/execution; a stored miss adds ``cache_miss`` (lookup + insertion time).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from modelyard import tensor_bytes
from modelyard.serving.context import RequestContext
from modelyard.serving.stats import ModelStats
from modelyard.types import InferRequest, InferResponse, ParamValue, Tensor, host_data

log = logging.getLogger("modelyard")

SUPPORTED_CACHES = ("local",)
_OBJECT_OVERHEAD = 64  # bytes charged per cached tensor beyond its payload


def parse_cache_config(items: Sequence[str]) -> int:
    """The local cache's size in bytes from ``--cache-config`` values (0: no cache).

    Accepts Triton's syntax ``<cache>,<key>=<value>``; only the ``local`` cache and its
    ``size`` key exist here. Raises ValueError naming what is wrong.
    """
    size: int | None = None
    for item in items:
        name, sep, setting = item.partition(",")
        key, eq, value = setting.partition("=")
        if not sep or not eq or not name or not key:
            raise ValueError(f"--cache-config expects <cache>,<key>=<value>, got '{item}'")
        if name not in SUPPORTED_CACHES:
            raise ValueError(f"--cache-config: cache '{name}' is not supported (supported: local)")
        if key != "size":
            raise ValueError(
                f"--cache-config: unknown setting '{key}' for the local cache (supported: size)"
            )
        try:
            size = int(value)
        except ValueError:
            raise ValueError(
                f"--cache-config: local cache size must be an integer, got '{value}'"
            ) from None
        if size < 0:
            raise ValueError(f"--cache-config: local cache size must be >= 0, got {size}")
    return size or 0


@dataclass(slots=True)
class _Entry:
    outputs: list[tuple[str, str, tuple[int, ...], np.ndarray[Any, Any]]]
    parameters: dict[str, ParamValue]
    size: int


def _frozen(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """An owned, read-only copy: the response's arrays may view worker or client memory."""
    out = np.array(array, copy=True, order="C")
    out.setflags(write=False)
    return out


def _nbytes(array: np.ndarray[Any, Any]) -> int:
    if array.dtype.kind == "O":
        return (
            sum(len(x) if isinstance(x, (bytes, str)) else 8 for x in array.flat) + 8 * array.size
        )
    return int(array.nbytes)


class ResponseCache:
    """An LRU map from request hash to response, bounded by the bytes it holds."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = capacity_bytes
        self.used = 0
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def key(request: InferRequest, output_names: list[str] | None) -> bytes:
        h = hashlib.blake2b(digest_size=20)
        h.update(f"{request.model_name}\0{request.model_version}\0".encode())
        for t in sorted(request.inputs, key=lambda t: t.name):
            h.update(f"{t.name}\0{t.datatype}\0{t.shape}\0".encode())
            data = host_data(t) if t.device is not None else t.data
            if data is None:
                h.update(bytes(t.raw or b""))
            elif data.dtype.kind == "O":
                h.update(tensor_bytes.serialize_bytes(data))
            else:
                h.update(
                    np.ascontiguousarray(data).reshape(-1).view(np.uint8).data
                )  # any dtype, BF16 too
        h.update(repr(sorted(output_names) if output_names is not None else None).encode())
        if request.parameters:
            h.update(repr(sorted(request.parameters.items())).encode())
        return h.digest()

    def lookup(self, key: bytes) -> _Entry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def insert(self, key: bytes, response: InferResponse) -> bool:
        """Store a response; False when the key is already there (a concurrent miss stored
        it first: Triton then counts neither hit nor miss). Too-large responses are skipped."""
        with self._lock:
            if key in self._entries:
                return False
        outputs = []
        size = 0
        for t in response.outputs:
            if t.data is not None or t.device is not None:
                array = _frozen(host_data(t))
            else:
                array = _frozen(tensor_bytes.array_from_raw(t.datatype, t.shape, t.raw or b""))
            outputs.append((t.name, t.datatype, t.shape, array))
            size += _nbytes(array) + _OBJECT_OVERHEAD
        entry = _Entry(outputs, dict(response.parameters), size)
        with self._lock:
            if key in self._entries:
                return False
            if size > self.capacity:
                log.debug(
                    "response of %d bytes exceeds the response cache (%d bytes)",
                    size,
                    self.capacity,
                )
                return True
            while self.used + size > self.capacity and self._entries:
                _, old = self._entries.popitem(last=False)
                self.used -= old.size
            self._entries[key] = entry
            self.used += size
        return True

    @staticmethod
    def response(entry: _Entry, request: InferRequest) -> InferResponse:
        outputs = [
            Tensor(name, datatype, shape, array) for name, datatype, shape, array in entry.outputs
        ]
        return InferResponse(
            request.model_name, request.model_version, request.id, outputs, dict(entry.parameters)
        )


class CachingScheduler:
    """Wraps a model version's scheduler: hits are answered here, misses pass through and
    their successful responses are stored."""

    def __init__(self, inner: Any, cache: ResponseCache, stats: ModelStats | None) -> None:
        self.inner = inner
        self.cache = cache
        self.stats = stats

    @property
    def pending(self) -> int:
        return int(self.inner.pending)

    async def drain(self, timeout: float) -> bool:
        return bool(await self.inner.drain(timeout))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def submit(self, ctx: RequestContext) -> None:
        t0 = time.monotonic_ns()
        key = self.cache.key(ctx.request, ctx.output_names)
        entry = self.cache.lookup(key)
        t1 = time.monotonic_ns()
        stats = self.stats
        if entry is not None:
            ctx.stats = None  # a hit is recorded here, not as an inference
            ctx.send(self.cache.response(entry, ctx.request))
            if stats is not None:
                _record_hit(stats, ctx.t_received or t0, t0, t1, time.monotonic_ns())
            return
        forward = ctx.on_response
        cache = self.cache

        def on_response(resp: InferResponse) -> None:
            try:
                if resp.final and resp.error is None and not ctx.cancelled:
                    t2 = time.monotonic_ns()
                    if cache.insert(key, resp) and stats is not None:
                        _record_miss(stats, (t1 - t0) + time.monotonic_ns() - t2)
            except Exception:  # a cache fault must never keep the response from the client
                log.exception("response cache: storing a response of '%s' failed", resp.model_name)
            finally:
                forward(resp)

        ctx.on_response = on_response
        self.inner.submit(ctx)


def _record_hit(
    stats: ModelStats, t_received: int, t_lookup: int, t_found: int, t_end: int
) -> None:
    """Triton's UpdateSuccessCacheHit: a success and a cache hit, no inference counted."""
    stats.last_inference_ms = int(time.time() * 1000)
    stats.success.add(t_end - t_received)
    stats.queue.add(max(0, t_lookup - t_received))
    stats.cache_hit.add(t_found - t_lookup)
    if stats.summaries is not None:
        stats.summaries.hit(max(0, t_lookup - t_received), t_found - t_lookup)


def _record_miss(stats: ModelStats, ns: int) -> None:
    """Triton's UpdateSuccessCacheMiss: lookup + insertion time, also added to the request."""
    stats.cache_miss.add(ns)
    stats.success.ns += ns
    if stats.summaries is not None:
        stats.summaries.miss(ns)


def attach(mv: Any, cache: ResponseCache | None) -> None:
    """Wrap ``mv.scheduler`` when the model's config enables the response cache."""
    if not mv.config.response_cache.enable:
        return
    if cache is None:
        log.warning(
            "model '%s' enables response_cache but the server has no cache "
            "(start it with --cache-config local,size=N)",
            mv.name,
        )
        return
    if not isinstance(mv.scheduler, CachingScheduler):
        mv.scheduler = CachingScheduler(mv.scheduler, cache, mv.stats)
    mv.stats.cache_enabled = True  # (Triton's metrics of such a model differ)
