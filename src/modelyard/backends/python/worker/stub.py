"""The worker process: imports one model.py and runs its TritonPythonModel.

Started by the server as ``python -m modelyard.backends.python.worker FD SHM_PREFIX``
(``__main__.py``). The main thread runs auto_complete_config / initialize / execute / finalize in order, one at a time, as
Triton's stub does; frames are read by whichever thread waits (baton.py).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import queue
import socket
import sys
import threading
from typing import Any

from modelyard.backends.python.protocol import framing, tensor_pool
from modelyard.backends.python.protocol.error_text import batch_error, format_exception
from modelyard.backends.python.protocol.messages import ErrorCode
from modelyard.backends.python.protocol.release_flags import is_iterative
from modelyard.backends.python.worker.baton import ReadBaton
from modelyard.backends.python.worker.bls_client import PARENTS
from modelyard.backends.python.worker.readiness import StubReadiness
from modelyard.backends.python.worker.region_maps import ClientRegions, RegionError
from modelyard.backends.python.worker.runtime import Failure, StubRuntime

log = logging.getLogger("modelyard.stub")


class Stub:
    def __init__(self, sock: socket.socket, shm_prefix: str):
        self.chan = framing.BlockingChannel(sock)
        self.baton = ReadBaton(self.chan, sock.fileno(), self._dispatch)
        self.pool = tensor_pool.ShmPool(shm_prefix, enabled=True)
        self.mapper = tensor_pool.ShmMapper(self._released)
        self.regions = ClientRegions()  # client shm regions the server passes by reference
        self._to_free: list[str] = []
        self._free_lock = threading.Lock()
        self.work: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self.model: Any = None
        self.spec: dict[str, Any] = {}
        self.pb: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.runtime: Any = None
        self.phase = "starting"  # initialize -> ready -> finalize; BLS only when ready
        self.executing = False  # the main thread is inside a sync execute
        self.main_ident = threading.get_ident()
        self.readiness = StubReadiness(self)

    # -- channel ---------------------------------------------------------------------------

    def _released(self, name: str) -> None:
        with self._free_lock:
            self._to_free.append(name)

    def send(self, *message: Any) -> None:
        if self._to_free:
            with self._free_lock:
                names, self._to_free = self._to_free, []
            if names:
                self.chan.send((framing.FREE, names))
        self.chan.send(message)

    def reader(self) -> None:
        """The reader thread: reads when no other thread does and something must be read."""
        self.baton.run_reader()

    def _next_work(self) -> tuple[Any, ...] | None:
        """The main thread's next command, read by itself from the channel when none is queued."""
        work = self.work
        try:
            return work.get_nowait()
        except queue.Empty:
            pass
        self.baton.idle()
        self.baton.wait_for(lambda: not work.empty())
        try:
            return work.get(timeout=5.0)  # at the end of the stream None is queued
        except queue.Empty:
            return None

    def _dispatch(self, msg: tuple[Any, ...] | None) -> bool:
        """Handle one message from the server, on whichever thread read it; False at the end
        of the stream."""
        if msg is None:
            self.work.put(None)
            return False
        kind = msg[0]
        if kind == framing.FREE:
            self.pool.release(msg[1])
        elif kind == framing.FORGET_REGIONS:
            self.regions.forget(msg[1])
        elif kind == framing.METRICS:  # answered here: the main thread may be in execute
            from triton_python_backend_utils._metrics import snapshot

            self.send(framing.RESULT, msg[1], True, snapshot())
        elif kind == framing.IS_READY:  # answered off the main thread: execute may be running
            self.readiness.ask(msg[1])
        elif kind in (framing.BLS_RESPONSE, framing.CONTROL_RESULT, framing.CANCEL):
            if self.runtime is not None:
                self.runtime.deliver(msg)
        else:
            self.work.put(msg)
        return True

    def run(self) -> None:
        threading.Thread(target=self.reader, name="modelyard-reader", daemon=True).start()
        self.send(framing.READY)
        while True:
            msg = self._next_work()
            if msg is None:
                break
            self.baton.busy()
            kind, call_id, payload = msg
            try:
                if kind == framing.EXECUTE:
                    result: Any = self.execute(call_id, payload)
                elif kind == framing.AUTOCOMPLETE:
                    result = self.autocomplete(*payload)
                elif kind == framing.INIT:
                    self.initialize(payload)
                    result = hasattr(self.model, "is_ready")  # no IPC at all for models without
                elif kind == framing.FINALIZE:
                    self.finalize()
                    self.send(framing.RESULT, call_id, True, None)
                    break
                else:
                    raise RuntimeError(f"unknown command {kind!r}")
            except Failure as f:
                self.send(framing.RESULT, call_id, False, (f.code, f.message))
                continue
            except BaseException as e:  # the model's code may raise anything
                self.send(framing.RESULT, call_id, False, (ErrorCode.INTERNAL, format_exception(e)))
                continue
            self.send(framing.RESULT, call_id, True, result)
        self.pool.close()

    # -- model lifecycle -------------------------------------------------------------------

    def _setup(self, spec: dict[str, Any]) -> None:
        if self.pb is not None:
            return
        self.spec = spec
        version_dir = os.path.dirname(spec["model_file"])
        for p in (version_dir, spec["model_dir"]):
            if p not in sys.path:
                sys.path.append(p)
        import triton_python_backend_utils as pb


        self.pb = pb
        self.runtime = StubRuntime(self, spec)
        pb.set_runtime(self.runtime)

    def _import_model(self) -> Any:
        spec = self.spec
        path = spec["model_file"]
        if not path.endswith(".py"):
            raise Failure(ErrorCode.INTERNAL, f"Model name must end with '.py', got '{path}'")
        if not os.path.isfile(path):
            raise Failure(ErrorCode.INTERNAL, f"Python model file not found in '{path}'")
        version = os.path.basename(os.path.dirname(path))
        module_name = os.path.splitext(os.path.basename(path))[0]
        # The version folder is a namespace package, so `from . import x` works as in Triton.
        module = importlib.import_module(f"{version}.{module_name}")
        cls = getattr(module, "TritonPythonModel", None)
        if cls is None:
            raise Failure(ErrorCode.INTERNAL, f"Python model '{path}' has no class 'TritonPythonModel'")
        return cls

    def autocomplete(self, spec: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
        self._setup(spec)
        cls = self._import_model()
        fn = getattr(cls, "auto_complete_config", None)
        if fn is None:
            return config
        pb = self.pb
        result = fn(pb.ModelConfig(config))
        if not isinstance(result, pb.ModelConfig):
            raise Failure(
                ErrorCode.INTERNAL,
                f"auto_complete_config function in model '{spec['model_name']}' must return "
                "a valid pb.ModelConfig object.",
            )
        completed: dict[str, Any] = result.as_dict()
        return completed

    def initialize(self, spec: dict[str, Any]) -> None:
        self._setup(spec)
        self.spec = spec
        self.runtime.spec = spec
        outputs = json.loads(spec["config_json"]).get("output", [])
        self.runtime.all_outputs = [o["name"] for o in outputs]
        self.runtime.iterative = is_iterative(spec["config_json"])
        cls = self._import_model()
        self.model = cls()
        if hasattr(self.model, "initialize"):
            args = {
                "model_config": spec["config_json"],
                "model_instance_kind": spec["instance_kind"],
                "model_instance_name": spec["instance_name"],
                "model_instance_device_id": str(spec["device_id"]),
                "model_repository": spec["model_dir"],
                "model_version": str(spec["version"]),
                "model_name": spec["model_name"],
            }
            self.phase = "initialize"
            self._run_maybe_async(self.model.initialize(args))
        self.phase = "ready"

    def finalize(self) -> None:
        self.phase = "finalize"
        if self.model is not None and hasattr(self.model, "finalize"):
            try:
                self._run_maybe_async(self.model.finalize())
            except BaseException as e:
                log.info(
                    "finalize of %s raised: %s", self.spec.get("instance_name"), format_exception(e)
                )
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)

    def event_loop(self) -> asyncio.AbstractEventLoop:
        """The instance's asyncio loop for `async def` methods, running on a daemon thread."""
        if self._loop is None:
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                ready.set()
                loop.run_forever()

            threading.Thread(target=run, name="modelyard-asyncio", daemon=True).start()
            ready.wait(10)
            self._loop = loop
        return self._loop

    def _run_maybe_async(self, result: Any) -> Any:
        if asyncio.iscoroutine(result):
            return asyncio.run_coroutine_threadsafe(result, self.event_loop()).result()
        return result

    # -- execute ---------------------------------------------------------------------------

    def execute(self, call_id: int, items: list[tuple[Any, ...]]) -> Any:
        if self.model is None or not hasattr(self.model, "execute"):
            raise Failure(
                ErrorCode.INTERNAL,
                f"Python model {self.spec.get('model_file')} does not implement `execute` method.",
            )
        try:
            requests = [self.runtime.make_request(item) for item in items]
        except RegionError as e:
            raise Failure(ErrorCode.INTERNAL, str(e)) from None
        self.executing = True
        # BLS calls made from here (and from tasks the coroutine starts) belong to this batch:
        # the server cancels them when the batch's requests are cancelled.
        parents = PARENTS.set(tuple(item[0] for item in items))
        try:
            returned = self.model.execute(requests)
            if asyncio.iscoroutine(returned):
                if self.runtime.iterative:
                    # A request is released (maybe rescheduled) when execute has finished.
                    returned = self._run_maybe_async(returned)
                elif self.spec["decoupled"]:
                    self.runtime.run_in_background(returned, self.event_loop(), requests)
                    returned = None
                else:
                    self._finish_async(call_id, requests, returned)
                    return framing.ASYNC_ACCEPTED
            results = self.runtime.collect_responses(requests, returned)
            return self.runtime.release(requests, results)
        except Failure as f:
            raise Failure(ErrorCode.INTERNAL, self._batch_error(f.message)) from None
        except BaseException as e:
            raise Failure(ErrorCode.INTERNAL, self._batch_error(format_exception(e))) from None
        finally:
            PARENTS.reset(parents)
            self.executing = False

    def _batch_error(self, detail: str) -> str:
        return batch_error(self.spec["instance_name"], detail)

    def _finish_async(self, call_id: int, requests: list[Any], coro: Any) -> None:
        """Run a default-mode `async def execute` without blocking this instance: other
        batches may start while it awaits (Triton serializes them)."""
        fut = asyncio.run_coroutine_threadsafe(coro, self.event_loop())

        def done(f: Any) -> None:
            try:
                results = self.runtime.collect_responses(requests, f.result())
                results = self.runtime.release(requests, results)
            except Failure as e:
                self.send(framing.RESPONSES, call_id, False, (ErrorCode.INTERNAL, self._batch_error(e.message)))
            except BaseException as e:
                self.send(
                    framing.RESPONSES,
                    call_id,
                    False,
                    (ErrorCode.INTERNAL, self._batch_error(format_exception(e))),
                )
            else:
                self.send(framing.RESPONSES, call_id, True, results)

        fut.add_done_callback(done)
