"""The worker process: imports one model.py and runs its TritonPythonModel.

Started by the server as ``python -m modelyard.backends.python.worker FD SHM_PREFIX``
(``__main__.py``). The main thread runs auto_complete_config / initialize / execute / finalize in order, one at a time, as
Triton's stub does; frames are read by whichever thread waits (baton.py).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import queue
import socket
import sys
import threading
from typing import Any, cast

from modelyard.backends.python.protocol import framing, inbox, tensor_pool
from modelyard.backends.python.protocol.error_text import (
    batch_error,
    format_exception,
    format_import_error,
)
from modelyard.backends.python.protocol.messages import (
    AsyncExecuted,
    Autocomplete,
    BlsResponse,
    Cancel,
    ControlResult,
    ErrorCode,
    ErrorReply,
    Execute,
    Executed,
    Finalize,
    ForgetRegions,
    Free,
    Init,
    IsReady,
    Metrics,
    ModelSetup,
    Ready,
    RequestItem,
    Response,
    Result,
    ServerMessage,
    WorkerMessage,
    decode_server_message,
)
from modelyard.backends.python.protocol.model_calls import (
    Failure,
    auto_complete,
    initialize_args,
    model_class,
    no_execute_text,
    release_rescheduled,
)
from modelyard.backends.python.worker.baton import ReadBaton
from modelyard.backends.python.worker.bls_client import PARENTS
from modelyard.backends.python.worker.readiness import StubReadiness
from modelyard.backends.python.worker.region_maps import ClientRegions, RegionError
from modelyard.backends.python.worker.runtime import StubRuntime
from modelyard.backends.python.worker.spans import CURRENT, first_traced

log = logging.getLogger("modelyard.stub")

Command = Execute | Init | Autocomplete | Finalize  # what the main thread runs, in order


class Stub:
    def __init__(self, sock: socket.socket, shm_prefix: str, inbox_path: str = ""):
        self.chan = framing.BlockingChannel(sock, decode_server_message)
        self.inbox = _open_inbox(inbox_path)
        self.outbox = inbox.Outbox()
        self.baton = ReadBaton(self.chan, sock.fileno(), self._dispatch, self.inbox)
        self.pool = tensor_pool.ShmPool(shm_prefix, enabled=True)
        self.mapper = tensor_pool.ShmMapper(self.released)
        self.regions = ClientRegions()  # client shm regions the server passes by reference
        self._to_free: list[str] = []
        self._free_lock = threading.Lock()
        self.work: queue.SimpleQueue[Command | None] = queue.SimpleQueue()
        self.model: Any = None
        self.setup: ModelSetup | None = None
        self.pb: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.runtime: StubRuntime | None = None
        self.phase = "starting"  # initialize -> ready -> finalize; BLS only when ready
        self.executing = False  # the main thread is inside a sync execute
        self.main_ident = threading.get_ident()
        self.readiness = StubReadiness(self)

    # -- channel ---------------------------------------------------------------------------

    def released(self, name: str) -> None:
        """A segment of another process's pool is no longer viewed here: a FREE for it rides
        on the next frame to the server (which hands it on to the segment's owner)."""
        with self._free_lock:
            self._to_free.append(name)

    def send(self, message: WorkerMessage) -> None:
        if self._to_free:
            with self._free_lock:
                names, self._to_free = self._to_free, []
            if names:
                self.chan.send(Free(names))
        self.chan.send(message)

    def reply(self, answer: Result | Executed | AsyncExecuted) -> None:
        """Answer a call. An answer holding what the channel cannot encode (a model's string
        no UTF-8 can hold, an int past 64 bits) fails the call instead of the worker."""
        try:
            self.send(answer)
        except framing.ENCODE_ERRORS as e:
            error = (f"the answer cannot be sent to the server: {e}", ErrorCode.INTERNAL)
            if type(answer) is Result:
                self.send(Result(answer.call_id, None, error))
            elif type(answer) is Executed:
                self.send(Executed(answer.call_id, None, (), error))
            else:
                self.send(AsyncExecuted(answer.call_id, None, (), error))

    def close(self) -> None:
        self.pool.close()
        if self.inbox is not None:
            self.inbox.close()

    def reply_direct(
        self, items: list[RequestItem], responses: list[Response | None], cancelled: set[int]
    ) -> tuple[int, ...]:
        """Send each response whose request came from another worker's BLS call straight to
        that worker's inbox (inbox.py); those left in ``responses`` keep only their error. The
        indices of the requests answered so (``Executed.direct``). A request the server
        cancelled (``cancelled``: keys) may have been answered already: its response goes
        through the server, which knows."""
        direct = []
        for i, item in enumerate(items):
            to, response = item.reply_to, responses[i]
            if to is None or response is None or item.key in cancelled:
                continue
            if self.outbox.send(to[0], BlsResponse(to[1], response, True)):
                responses[i] = Response([], None, response.error)
                direct.append(i)
        return tuple(direct)

    def reader(self) -> None:
        """The reader thread: reads when no other thread does and something must be read."""
        self.baton.run_reader()

    def _next_work(self) -> Command | None:
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

    def _dispatch(self, msg: ServerMessage | None) -> bool:
        """Handle one message from the server, on whichever thread read it; False at the end
        of the stream."""
        if msg is None:
            self.work.put(None)
            return False
        # (the frequent kinds are tested first)
        if type(msg) is Execute:
            self.work.put(msg)
        elif type(msg) is Free:
            self.pool.release(msg.segments)
        elif type(msg) is BlsResponse or type(msg) is ControlResult or type(msg) is Cancel:
            if self.runtime is not None:
                self.runtime.deliver(msg)
        elif type(msg) is ForgetRegions:
            self.regions.forget(msg.tokens)
        elif type(msg) is Metrics:  # answered here: the main thread may be in execute
            from triton_python_backend_utils._metrics import snapshot

            self.reply(Result(msg.call_id, snapshot(), None))
        elif type(msg) is IsReady:  # answered off the main thread: execute may be running
            self.readiness.ask(msg.call_id)
        else:
            self.work.put(cast(Command, msg))  # run in order by the main thread
        return True

    def run(self) -> None:
        threading.Thread(target=self.reader, name="modelyard-reader", daemon=True).start()
        self.send(Ready())
        while True:
            msg = self._next_work()
            if msg is None:
                break
            self.baton.busy()
            if type(msg) is Execute:
                self.reply(self.execute(msg.call_id, msg.requests))
                continue
            call_id = msg.call_id
            try:
                match msg:
                    case Init(_, setup):
                        self.initialize(setup)
                        value: Any = hasattr(self.model, "is_ready")  # no IPC for models without
                    case Autocomplete(_, setup, config):
                        value = self.autocomplete(setup, config)
                    case Finalize():
                        self.finalize()
                        self.send(Result(call_id, None, None))
                        break
            except Failure as f:
                self.reply(Result(call_id, None, (f.message, f.code)))
                continue
            except BaseException as e:  # the model's code may raise anything
                self.reply(Result(call_id, None, (format_exception(e), ErrorCode.INTERNAL)))
                continue
            self.reply(Result(call_id, value, None))
        self.pool.close()

    # -- model lifecycle -------------------------------------------------------------------

    def _setup(self, setup: ModelSetup) -> StubRuntime:
        if self.runtime is not None:
            return self.runtime
        self.setup = setup
        version_dir = os.path.dirname(setup.model_file)
        for p in (version_dir, setup.model_dir):
            if p not in sys.path:
                sys.path.append(p)
        import triton_python_backend_utils as pb

        self.pb = pb
        self.runtime = StubRuntime(self, setup)
        pb.set_runtime(self.runtime)
        import c_python_backend_utils

        c_python_backend_utils.set_free_memory(self.pool.free_bytes)
        return self.runtime

    def _import_model(self, setup: ModelSetup) -> Any:
        path = setup.model_file
        if not path.endswith(".py"):
            raise Failure(ErrorCode.INTERNAL, f"Model name must end with '.py', got '{path}'")
        if not os.path.isfile(path):
            raise Failure(ErrorCode.INTERNAL, f"Python model file not found in '{path}'")
        version = os.path.basename(os.path.dirname(path))
        module_name = os.path.splitext(os.path.basename(path))[0]
        # The version folder is a namespace package, so `from . import x` works as in Triton.
        try:
            module = importlib.import_module(f"{version}.{module_name}")
        except BaseException as e:  # a syntax error, a missing module, any module-level raise
            raise Failure(ErrorCode.INTERNAL, format_import_error(e)) from None
        return model_class(module, path)

    def autocomplete(self, setup: ModelSetup, config: dict[str, Any]) -> dict[str, Any]:
        self._setup(setup)
        return auto_complete(self.pb, self._import_model(setup), setup.model_name, config)

    def initialize(self, setup: ModelSetup) -> None:
        runtime = self._setup(setup)
        self.setup = setup
        runtime.adopt(setup)
        cls = self._import_model(setup)
        self.model = cls()
        if hasattr(self.model, "initialize"):
            self.phase = "initialize"
            self._run_maybe_async(self.model.initialize(initialize_args(setup)))
        self.phase = "ready"

    def finalize(self) -> None:
        self.phase = "finalize"
        if self.model is not None and hasattr(self.model, "finalize"):
            try:
                self._run_maybe_async(self.model.finalize())
            except BaseException as e:
                name = self.setup.instance_name if self.setup is not None else ""
                log.info("finalize of %s raised: %s", name, format_exception(e))
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

    def execute(self, call_id: int, items: list[RequestItem]) -> Executed:
        runtime, setup = self.runtime, self.setup
        if runtime is None or setup is None or not hasattr(self.model, "execute"):
            message = no_execute_text(setup.model_file if setup is not None else "None")
            return Executed(call_id, None, (), (message, ErrorCode.INTERNAL))
        try:
            requests = [runtime.make_request(item) for item in items]
        except RegionError as e:
            return Executed(call_id, None, (), (str(e), ErrorCode.INTERNAL))
        self.executing = True
        # BLS calls made from here (and from tasks the coroutine starts) belong to this batch:
        # the server cancels them when the batch's requests are cancelled.
        parents = PARENTS.set(tuple([r._modelyard_key for r in requests]))
        # A traced request's spans and BLS calls hang under its compute span.
        traced = first_traced(items)
        span = CURRENT.set(traced) if traced is not None else None
        try:
            returned = self.model.execute(requests)
            if asyncio.iscoroutine(returned):
                if runtime.iterative:
                    # A request is released (maybe rescheduled) when execute has finished.
                    returned = self._run_maybe_async(returned)
                elif setup.decoupled:
                    runtime.run_in_background(returned, self.event_loop(), requests)
                    returned = None
                else:
                    self._finish_async(runtime, call_id, items, requests, returned)
                    return Executed(call_id, None, (), None)
            cancelled = set(runtime.cancelled)  # (answering forgets them)
            responses = runtime.collect_responses(requests, returned)
            rescheduled = release_rescheduled(self.pb, runtime.iterative, requests)
            direct = self.reply_direct(items, responses, cancelled)
            return Executed(call_id, responses, rescheduled, None, direct)
        except Failure as f:
            return Executed(call_id, None, (), self._batch_error(f.message))
        except BaseException as e:
            return Executed(call_id, None, (), self._batch_error(format_exception(e)))
        finally:
            if span is not None:
                CURRENT.reset(span)
            PARENTS.reset(parents)
            self.executing = False

    def _batch_error(self, detail: str) -> ErrorReply:
        name = self.setup.instance_name if self.setup is not None else ""
        return (batch_error(name, detail), ErrorCode.INTERNAL)

    def _finish_async(
        self,
        runtime: StubRuntime,
        call_id: int,
        items: list[RequestItem],
        requests: list[Any],
        coro: Any,
    ) -> None:
        """Run a default-mode `async def execute` without blocking this instance: other
        batches may start while it awaits (Triton serializes them)."""
        fut = asyncio.run_coroutine_threadsafe(coro, self.event_loop())

        def done(f: Any) -> None:
            cancelled = set(runtime.cancelled)  # (answering forgets them)
            try:
                responses = runtime.collect_responses(requests, f.result())
                rescheduled = release_rescheduled(self.pb, runtime.iterative, requests)
            except Failure as e:
                self.reply(AsyncExecuted(call_id, None, (), self._batch_error(e.message)))
            except BaseException as e:
                error = self._batch_error(format_exception(e))
                self.reply(AsyncExecuted(call_id, None, (), error))
            else:
                direct = self.reply_direct(items, responses, cancelled)
                self.reply(AsyncExecuted(call_id, responses, rescheduled, None, direct))

        fut.add_done_callback(done)


def _open_inbox(path: str) -> inbox.Inbox | None:
    """This worker's inbox (None: replies all come through the server)."""
    if not path:
        return None
    try:
        return inbox.Inbox(path)
    except OSError as e:
        log.warning("no inbox at %s (%s): BLS replies come through the server", path, e)
        return None
