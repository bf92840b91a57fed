"""Request and waiting helpers shared by the tests: tritonclient inputs and outputs from numpy
arrays, one ``infer`` per protocol, bounded waits for a condition or a log line, and reading
the Prometheus metrics. The server fixture that goes with them is in tests/conftest.py.

Every wait here has a bound, and the bound only guards against hanging: a test decides pass
or fail by what it observes (an event, a count), never by how fast it came.
"""

from __future__ import annotations

import asyncio
import http.client
import inspect
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar, overload

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import np_to_triton_dtype

from tests.serverproc import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests" / "models"  # the test models
EXAMPLES = ROOT / "examples" / "model_repository"  # the examples' models

# The Python backend's execution modes and the server flags that select each.
MODES = ("process", "in-process")
_MODE_ARGS = {"process": (), "in-process": ("--backend-config", "python,execution-mode=in-process")}

WAIT_S = 30.0  # the default bound of every wait (a guard against hanging, not a speed limit)

T = TypeVar("T")


def mode_args(mode: str) -> tuple[str, ...]:
    """The ``serve`` flags that run Python models in ``mode`` (one of MODES)."""
    return _MODE_ARGS[mode]


def make_repo(root: Path, names: Iterable[str], source: Path = MODELS) -> Path:
    """A model repository at ``root`` of symlinks to ``source/<name>`` for each name."""
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        (root / name).symlink_to(source / name)
    return root


# -- clients, inputs, outputs, inference --------------------------------------------------


def client_for(server: ServerProcess, protocol: str) -> Any:
    """A tritonclient client of ``server`` for ``protocol`` ("http" or "grpc")."""
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url)
    assert protocol == "grpc", protocol
    return grpcclient.InferenceServerClient(server.grpc_url)


def _datatype(array: np.ndarray[Any, Any], datatype: str | None) -> str:
    return datatype or np_to_triton_dtype(array.dtype)


def http_input(
    name: str, array: np.ndarray[Any, Any], datatype: str | None = None, binary: bool = True
) -> httpclient.InferInput:
    """A tritonclient.http (and http.aio) input holding ``array``; the datatype follows the
    array's dtype unless given (object arrays are BYTES)."""
    t = httpclient.InferInput(name, list(array.shape), _datatype(array, datatype))
    t.set_data_from_numpy(array, binary_data=binary)
    return t


def grpc_input(
    name: str, array: np.ndarray[Any, Any], datatype: str | None = None
) -> grpcclient.InferInput:
    """A tritonclient.grpc (and grpc.aio) input holding ``array``."""
    t = grpcclient.InferInput(name, list(array.shape), _datatype(array, datatype))
    t.set_data_from_numpy(array)
    return t


def http_inputs(
    arrays: Mapping[str, np.ndarray[Any, Any]], binary: bool = True
) -> list[httpclient.InferInput]:
    return [http_input(name, array, binary=binary) for name, array in arrays.items()]


def grpc_inputs(arrays: Mapping[str, np.ndarray[Any, Any]]) -> list[grpcclient.InferInput]:
    return [grpc_input(name, array) for name, array in arrays.items()]


def inputs(protocol: str | ModuleType, **arrays: np.ndarray[Any, Any]) -> list[Any]:
    """The inputs for ``protocol``: "http", "grpc" (or their ".aio" forms), or the tritonclient
    module itself."""
    name = protocol if isinstance(protocol, str) else protocol.__name__
    return http_inputs(arrays) if "http" in name else grpc_inputs(arrays)


def http_outputs(*names: str, binary: bool = True) -> list[httpclient.InferRequestedOutput]:
    return [httpclient.InferRequestedOutput(n, binary_data=binary) for n in names]


def grpc_outputs(*names: str) -> list[grpcclient.InferRequestedOutput]:
    return [grpcclient.InferRequestedOutput(n) for n in names]


def _request_parts(
    make_inputs: Callable[..., list[Any]],
    make_outputs: Callable[..., list[Any]],
    arrays: Mapping[str, np.ndarray[Any, Any]] | Sequence[Any],
    outputs: Sequence[str] | None,
) -> tuple[list[Any], list[Any] | None]:
    built = make_inputs(arrays) if isinstance(arrays, Mapping) else list(arrays)
    return built, (make_outputs(*outputs) if outputs is not None else None)


def infer_http(
    client: httpclient.InferenceServerClient,
    model: str,
    arrays: Mapping[str, np.ndarray[Any, Any]] | Sequence[Any],
    outputs: Sequence[str] | None = None,
    **kwargs: Any,
) -> httpclient.InferResult:
    """One request over HTTP: ``arrays`` maps input names to arrays (or is a list of ready
    inputs); ``outputs`` names the requested outputs (all when None); the rest goes to
    ``client.infer``."""
    built, requested = _request_parts(http_inputs, http_outputs, arrays, outputs)
    return client.infer(model, built, outputs=requested, **kwargs)


def infer_grpc(
    client: grpcclient.InferenceServerClient,
    model: str,
    arrays: Mapping[str, np.ndarray[Any, Any]] | Sequence[Any],
    outputs: Sequence[str] | None = None,
    client_timeout: float | None = WAIT_S,
    **kwargs: Any,
) -> grpcclient.InferResult:
    """One request over gRPC, bounded by ``client_timeout`` seconds (see :func:`infer_http`)."""
    built, requested = _request_parts(grpc_inputs, grpc_outputs, arrays, outputs)
    return client.infer(model, built, outputs=requested, client_timeout=client_timeout, **kwargs)


def settle(future: asyncio.Future[T]) -> Callable[[T], None]:
    """A callback that gives ``future`` the first value it is called with."""

    def callback(value: T) -> None:
        if not future.done():
            future.set_result(value)

    return callback


# -- waiting --------------------------------------------------------------------------------


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float = WAIT_S,
    interval: float = 0.02,
    what: str | Callable[[], str] | None = None,
) -> T:
    """Call ``predicate`` until it returns something true and return that; fail with a clear
    message when ``timeout`` seconds pass first (``what`` says what was awaited; a callable
    is asked then, to describe the state at that moment)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(timeout, what, predicate, value))
        time.sleep(interval)


@overload
async def wait_until_async(
    predicate: Callable[[], Awaitable[T | None]],
    timeout: float = ...,
    interval: float = ...,
    what: str | Callable[[], str] | None = ...,
) -> T: ...


@overload
async def wait_until_async(
    predicate: Callable[[], T | None],
    timeout: float = ...,
    interval: float = ...,
    what: str | Callable[[], str] | None = ...,
) -> T: ...


async def wait_until_async(
    predicate: Callable[[], Any],
    timeout: float = WAIT_S,
    interval: float = 0.02,
    what: str | Callable[[], str] | None = None,
) -> Any:
    """:func:`wait_until` on the event loop; ``predicate`` may be a coroutine function."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(timeout, what, predicate, value))
        await asyncio.sleep(interval)


def _timed_out(
    timeout: float, what: str | Callable[[], str] | None, predicate: Callable[..., Any], last: Any
) -> str:
    if callable(what):
        what = what()
    if what is None:
        try:
            what = inspect.getsource(predicate).strip()
        except (OSError, TypeError):
            what = repr(predicate)
    return f"timed out after {timeout:g} s waiting for {what} (last value: {last!r})"


def wait_for_log(
    server: ServerProcess, pattern: str | re.Pattern[str], timeout: float = WAIT_S
) -> re.Match[str]:
    """The first match of ``pattern`` (a regular expression, or a plain text when a str) in
    what the server has written, waiting (bounded) for the line that holds it: the thread
    reading the server's output may not have read it yet."""
    regex = pattern if isinstance(pattern, re.Pattern) else re.compile(re.escape(pattern))
    deadline = time.monotonic() + timeout
    while True:
        ended = server.eof.is_set()  # read before the output: then nothing more can come
        match = regex.search(server.output())
        if match:
            return match
        if ended or time.monotonic() > deadline:
            raise AssertionError(
                f"no log line matching {regex.pattern!r} after {timeout:g} s:\n{server.output()}"
            )
        time.sleep(0.02)


def final_output(server: ServerProcess, timeout: float = WAIT_S) -> str:
    """Everything an exited server wrote, once the thread reading its output has read it all."""
    assert server.eof.wait(timeout), f"the server's output did not end:\n{server.output()}"
    return server.output()


# -- metrics --------------------------------------------------------------------------------


def read_metrics(metrics_url: str, timeout: float = 10.0) -> str:
    """The text of ``GET /metrics`` at ``host:port``."""
    host, port = metrics_url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        body = response.read().decode()
        assert response.status == 200, (response.status, body)
        return body
    finally:
        conn.close()


def metric_value(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample ``name`` whose labels include ``labels``, or None."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z_:][\w:]*)(?:\{(.*)\})? (\S+)", line.strip())
        if not match or match.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            return float(match.group(3))
    return None


@dataclass
class Served:
    """A server of a module's fixture and its execution mode, with a bounded HTTP client."""

    server: ServerProcess
    mode: str
    timeout_s: float = WAIT_S

    def http(self) -> httpclient.InferenceServerClient:
        t = self.timeout_s
        return httpclient.InferenceServerClient(
            self.server.http_url, connection_timeout=t, network_timeout=t
        )
