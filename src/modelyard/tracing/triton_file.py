"""Triton mode: a finished trace as Triton's JSON records, written to ``--trace-config
triton,file=PATH`` as Triton writes them (src/tracer.cc).

Records of one trace: per request (child requests first, the client's last) the model
record ``{"id", "model_name", "model_version", "request_id"?, "parent_id"?}``, one record
per timestamp ``{"id", "timestamps": [{"name", "ns"}]}`` and, at level TENSORS, one per
input and output tensor ``{"id", "activity", "tensor": {"name", "data", "shape",
"dtype"}}``. With ``log-frequency`` N every N traces go to a file of their own (PATH.0,
PATH.1, ...); with ``count`` the traces go to an indexed file once that many are collected;
otherwise everything goes to PATH, closed (``]``) when the server stops.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import TYPE_CHECKING, Any

from modelyard.tracing.config import LEVEL_TIMESTAMPS
from modelyard.tracing.trace import AFTER, AMID, BEFORE, RequestTrace, Trace

if TYPE_CHECKING:
    from modelyard.tracing.settings import TraceSetting

log = logging.getLogger("modelyard")


def trace_records(trace: Trace) -> list[str]:
    """The JSON records of ``trace``, in Triton's order."""
    out: list[str] = []
    stamps = bool(trace.level & LEVEL_TIMESTAMPS)
    for req in reversed(trace.requests):
        root = req.parent_id == 0
        rid = req.id

        def ts(name: str, ns: int, _id: int = rid, _out: list[str] = out) -> None:
            _out.append(f'{{"id":{_id},"timestamps":[{{"name":"{name}","ns":{ns}}}]}}')

        if stamps and root:
            for name, ns in trace.frontend[BEFORE]:
                ts(name, ns)
        if stamps:
            out.append(_model_record(req))
            events = dict(req.span.events[:2])
            ts("REQUEST_START", events.get("REQUEST_START", req.span.start_ns))
            ts("QUEUE_START", events.get("QUEUE_START", req.span.start_ns))
        if req.inputs is not None:
            out += [_tensor(rid, "TENSOR_QUEUE_INPUT", t) for t in req.inputs]
            out += [_tensor(rid, "TENSOR_BACKEND_OUTPUT", t) for t in req.outputs]
        if not stamps:
            continue
        if root:
            for name, ns in trace.frontend[AMID]:
                ts(name, ns)
        if req.compute is not None:
            for name, ns in req.compute.events:
                ts(name, ns)
        ts("REQUEST_END", req.span.end_ns)
        if root:
            for name, ns in trace.frontend[AFTER]:
                ts(name, ns)
    return out


def _model_record(req: RequestTrace) -> str:
    record: dict[str, Any] = {
        "id": req.id,
        "model_name": req.model,
        "model_version": req.version,
    }
    if req.request_id:
        record["request_id"] = req.request_id
    if req.parent_id:
        record["parent_id"] = req.parent_id
    return json.dumps(record, separators=(",", ":"))


def _tensor(rid: int, activity: str, tensor: tuple[str, str, Any]) -> str:
    name, datatype, data = tensor
    shape = ",".join(str(d) for d in getattr(data, "shape", ()))
    body = {"name": name, "data": tensor_text(datatype, data), "shape": shape, "dtype": datatype}
    return json.dumps({"id": rid, "activity": activity, "tensor": body}, separators=(",", ":"))


def tensor_text(datatype: str, data: Any) -> str:
    """Elements as Triton prints them: numbers as C++ streams do, BYTES quoted, FP16/BF16
    left out (Triton leaves them out too)."""
    if data is None or datatype in ("FP16", "BF16"):
        return ""
    flat = data.reshape(-1)
    if datatype == "BYTES":
        items = [x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x) for x in flat]
        return ",".join(f'"{s}"' for s in items)
    if datatype in ("FP32", "FP64"):
        return ",".join(f"{x:g}" for x in flat.tolist())
    return ",".join(str(int(x)) for x in flat.tolist())


class TraceFile:
    """One trace file name: the main file (``[`` on first write, ``,`` between, ``]`` on
    close) and its indexed siblings."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._index = 0
        self._file: Any = None
        self._lock = threading.Lock()

    def save(self, body: str, indexed: bool) -> None:
        try:
            with self._lock:
                if indexed:
                    path = f"{self.name}.{self._index}"
                    self._index += 1
                    with open(path, "w") as f:
                        f.write("[" + body + "]")
                    return
                if self._file is None:
                    self._file = open(self.name, "w")  # noqa: SIM115 - open until close()
                    self._file.write("[")
                else:
                    self._file.write(",")
                self._file.write(body)
                self._file.flush()
        except OSError as e:
            log.error("failed creating trace file: %s", e)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.write("]")
                self._file.close()
                self._file = None


class TritonWriter:
    """Collects finished traces per setting and writes them as Triton does."""

    def __init__(self) -> None:
        self._files: dict[str, TraceFile] = {}
        self._pending: dict[int, tuple[TraceSetting, list[str]]] = {}
        self._lock = threading.Lock()

    def _file(self, name: str) -> TraceFile:
        f = self._files.get(name)
        if f is None:
            f = self._files[name] = TraceFile(name)
        return f

    def write(self, trace: Trace) -> None:
        setting = trace.setting
        body = ",".join(trace_records(trace))
        with self._lock:
            _, stream = self._pending.setdefault(id(setting), (setting, []))
            stream.append(body)
            setting.collected += 1
            flush = (setting.count == 0 and setting.collected == setting.sample) or (
                setting.log_frequency != 0 and len(stream) >= setting.log_frequency
            )
            if not flush:
                if setting.log_frequency == 0 and setting.count < 0:
                    # Beyond Triton (which keeps them until exit): the main file grows as
                    # traces finish, so memory stays bounded.
                    del self._pending[id(setting)]
                    file = self._file(setting.file)
                else:
                    return
            else:
                del self._pending[id(setting)]
                file = self._file(setting.file)
        file.save(",".join(stream), indexed=flush)

    def close(self) -> None:
        with self._lock:
            pending = list(self._pending.values())
            self._pending.clear()
        for setting, stream in pending:
            if stream:
                self._file(setting.file).save(",".join(stream), setting.log_frequency != 0)
        for f in self._files.values():
            f.close()
