"""The worker side of the pb_utils runtime hook: builds pb_utils requests from frames, turns
the model's responses into frames, and carries logging, BLS and model control to the server.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from modelyard.backends.python.protocol import client_regions, framing, tensor_pool
from modelyard.backends.python.protocol.error_text import control_error_text, format_exception
from modelyard.backends.python.protocol.messages import (
    BlsResponse,
    Cancel,
    ControlResult,
    LoadModel,
    Log,
    ModelSetup,
    OutputDestination,
    PackedTensor,
    QueryModelReady,
    RequestItem,
    Response,
    Send,
    UnloadModel,
)
from modelyard.backends.python.protocol.model_calls import (
    check_bls,
    check_returned,
    gpu_inputs,
    output_names,
    response_parts,
)
from modelyard.backends.python.protocol.release_flags import is_iterative, refuse, rescheduled
from modelyard.backends.python.worker.bls_client import BlsClient
from modelyard.backends.python.worker.spans import WorkerSpan

if TYPE_CHECKING:
    from modelyard.backends.python.worker.stub import Stub

log = logging.getLogger("modelyard.stub")


class StubRuntime:
    def __init__(self, stub: Stub, setup: ModelSetup):
        self.stub = stub
        import triton_python_backend_utils as pb

        self.pb = pb
        self.bls = BlsClient(self)
        self.cancelled: set[int] = set()
        self.adopt(setup)

    def adopt(self, setup: ModelSetup) -> None:
        """Serve the model ``setup`` describes (auto-complete ran with a provisional one)."""
        self.setup = setup
        self.all_outputs = output_names(setup.config_json)
        self.iterative = is_iterative(setup.config_json)
        self.gpu_inputs = gpu_inputs(json.loads(setup.config_json))  # (checked at load)

    # -- requests in, responses out ----------------------------------------------------------

    def make_request(self, item: RequestItem) -> Any:
        pb = self.pb
        setup = self.setup
        key, output_names, dests = item.key, item.output_names, item.destinations
        tensors = []
        for packed in item.inputs:
            name, datatype, shape, data = packed
            if type(data) is list and data[0] == client_regions.INPUT:  # (arrays decode as lists)
                arr = self.stub.regions.input(data, datatype, shape)
                tensors.append(pb.Tensor._from_server(name, arr))
                continue
            # A GPU tensor another model passed stays one for a model that takes GPU inputs
            # (FORCE_CPU_ONLY_INPUT_TENSORS "no"), else becomes a host tensor.
            gpu = tensor_pool.gpu_of(packed) if self.gpu_inputs else None
            if gpu is None:  # (model_tensor's host case, without its call: the usual input)
                _, _, arr = tensor_pool.unpack(packed, self.stub.mapper)
                tensors.append(pb.Tensor._from_server(name, arr))
            else:
                tensors.append(tensor_pool.model_tensor(pb, packed, self.stub.mapper, gpu))
        if output_names is None:
            output_names = self.all_outputs
        sender = pb.InferenceResponseSender(
            lambda resp, fl, _k=key, _n=output_names, _d=dests, _g=item.gpu_outputs: self._send(
                _k, resp, fl, _n, _d, _g
            ),
            setup.decoupled,
            lambda _k=key: _k in self.cancelled,
        )
        request = pb.InferenceRequest._from_server(
            request_id=item.request_id,
            correlation_id=item.correlation_id,
            model_name=setup.model_name,
            model_version=setup.version,
            flags=item.flags,
            inputs=tensors,
            requested_output_names=output_names,
            parameters=item.parameters or None,
            timeout=item.timeout_us,
            response_sender=sender,
            trace_context=(item.trace[0] or None) if item.trace is not None else None,
        )
        request._modelyard_key = key
        request._modelyard_outputs = output_names
        request._modelyard_dests = dests
        request._modelyard_gpu = item.gpu_outputs
        return request

    def pack_response(
        self,
        response: Any,
        output_names: list[str] | None,
        dests: dict[str, OutputDestination] | None = None,
        gpu: bool = False,
    ) -> Response:
        """``gpu``: GPU outputs may stay on the device (a BLS caller's request: they go as
        CUDA IPC references, cuda_ipc.py), else they go as host copies."""
        parts = response_parts(response, output_names)
        if parts.error is not None:
            return Response([], None, parts.error)
        outputs: list[PackedTensor] = []
        for t in parts.outputs:
            dest = dests.get(t.name()) if dests else None
            if dest is not None:  # the client wants it in its region: write it there
                arr = t._host_array()
                written = self.stub.regions.write(dest, arr)
                if written is not None:
                    outputs.append(client_regions.written_output(t.name(), arr, written))
                    continue
            if t._gpu is None:  # (a host output: pack_model_tensor's case, without its call)
                outputs.append(tensor_pool.pack_array(t.name(), t._array, self.stub.pool))
            else:
                outputs.append(tensor_pool.pack_model_tensor(t, self.stub.pool, gpu))
        return Response(outputs, parts.parameters, None)

    def collect_responses(self, requests: list[Any], returned: Any) -> list[Response | None]:
        """Check execute's return value as Triton does (model_calls.py) and pack each
        response."""
        setup = self.setup
        returned = check_returned(self.pb, setup.decoupled, setup.instance_name, requests, returned)
        if returned is None:
            return [None] * len(requests)
        results: list[Response | None] = []
        for req, resp in zip(requests, returned, strict=True):
            if resp is None:
                results.append(None)
                continue
            results.append(
                self.pack_response(
                    resp, req.requested_output_names(), req._modelyard_dests, req._modelyard_gpu
                )
            )
            if self.cancelled:
                self.cancelled.discard(req._modelyard_key)
        return results

    def _send(
        self,
        key: int,
        response: Any,
        flags: int,
        output_names: list[str] | None,
        dests: dict[str, OutputDestination] | None = None,
        gpu: bool = False,
    ) -> None:
        if response is None:
            payload = None
        else:
            payload = self.pack_response(response, output_names, dests, gpu)
        self.stub.send(Send(key, payload, flags))
        if flags & 1 and self.cancelled:
            self.cancelled.discard(key)  # answered: nothing will ask about it again

    def run_in_background(
        self, coro: Coroutine[Any, Any, Any], loop: asyncio.AbstractEventLoop, requests: list[Any]
    ) -> None:
        fut = asyncio.run_coroutine_threadsafe(coro, loop)

        def done(f: Any) -> None:
            exc = f.exception()
            if exc is not None:
                log.error("%s", format_exception(exc))
                return
            indices = rescheduled(requests)
            if indices:  # never for an iterative model: its coroutine is awaited in place
                refuse(self.pb, requests, indices)

        fut.add_done_callback(done)

    # -- pb_utils.Runtime ----------------------------------------------------------------------

    def log(self, level: int, message: str, filename: str, line: int) -> None:
        try:
            self.stub.send(Log(level, message, filename, line))
        except (OSError, *framing.ENCODE_ERRORS):  # the server is gone (e.g. a model thread
            # logging during shutdown), or the line cannot travel: keep it anyway
            from triton_python_backend_utils._runtime import print_log

            print_log(level, message, filename, line)

    def open_span(self, name: str, attributes: dict[str, Any]) -> WorkerSpan:
        """``modelyard.tracing.span`` in a worker (see spans.py)."""
        return WorkerSpan(self.stub, name, attributes)

    def model_dir(self) -> str:
        import os

        return str(os.path.dirname(self.setup.model_file))

    def deliver(self, msg: BlsResponse | ControlResult | Cancel) -> None:
        """A BLS response, control result or cancellation from the server (on the thread that
        read it, see baton.py)."""
        if isinstance(msg, Cancel):
            self.cancelled.update(msg.keys)
            return
        self.bls.deliver(msg)

    def exec(self, request: Any, decoupled: bool) -> Any:
        check_bls(self.pb, self.stub.phase)
        return self.bls.exec(request, decoupled)

    def async_exec(self, request: Any, decoupled: bool) -> Any:
        check_bls(self.pb, self.stub.phase)
        return self.bls.async_exec(request, decoupled)

    def _control(self, op: str, request: LoadModel | UnloadModel | QueryModelReady) -> bool:
        error, ready = self.bls.control(op, request)
        if error:
            text = control_error_text(op, self.setup.instance_name, error)
            raise self.pb.TritonModelException(text)
        return ready

    def load_model(self, name: str, config: str, files: dict[str, bytes] | None) -> None:
        self._control("load", LoadModel(self.bls.next_id(), name, config, files or {}))

    def unload_model(self, name: str, unload_dependents: bool) -> None:
        self._control("unload", UnloadModel(self.bls.next_id(), name, unload_dependents))

    def is_model_ready(self, name: str, version: str) -> bool:
        return self._control("ready", QueryModelReady(self.bls.next_id(), name, version))
