"""Requests encoded once, before the load starts: what each protocol puts on the wire.

HTTP uses Triton's binary-tensor extension (a JSON header, then the raw tensors) and asks for
every output in binary, so neither side spends time on JSON numbers. gRPC requests are
serialized ``ModelInferRequest`` messages (tritonclient's generated protobuf classes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import orjson

if TYPE_CHECKING:  # worker processes import this module for HttpRequest alone
    from modelyard.bench.inputs import Request

EMPTY_FINAL = "triton_enable_empty_final_response"
LENGTH_HEADER = "Inference-Header-Content-Length"


# A sequence model's request: (correlation id, first of its sequence, last of its sequence).
Sequence = tuple[int, bool, bool]


@dataclass(frozen=True)
class HttpRequest:
    path: str
    body: bytes
    headers: dict[str, str]
    header: dict[str, Any]  # the JSON header, for requests that add sequence parameters

    def with_sequence(self, sequence: Sequence) -> tuple[bytes, dict[str, str]]:
        """Body and headers of this request sent as one step of a sequence."""
        corrid, start, end = sequence
        parameters = {"sequence_id": corrid, "sequence_start": start, "sequence_end": end}
        head = orjson.dumps({**self.header, "parameters": parameters})
        tensors = self.body[int(self.headers[LENGTH_HEADER]) :]
        return head + tensors, {**self.headers, LENGTH_HEADER: str(len(head))}


def infer_path(model: str, version: str) -> str:
    path = f"/v2/models/{quote(model, safe='')}"
    if version:
        path += f"/versions/{quote(version, safe='')}"
    return path + "/infer"


def http_request(
    model: str, version: str, request: Request, outputs: tuple[str, ...]
) -> HttpRequest:
    header: dict[str, Any] = {
        "inputs": [
            {
                "name": t.name,
                "shape": list(t.shape),
                "datatype": t.datatype,
                "parameters": {"binary_data_size": len(t.data)},
            }
            for t in request
        ],
    }
    if outputs:  # named, so they come back binary (unlisted outputs come back as JSON)
        header["outputs"] = [{"name": n, "parameters": {"binary_data": True}} for n in outputs]
    head = orjson.dumps(header)
    return HttpRequest(
        infer_path(model, version),
        head + b"".join(t.data for t in request),
        {LENGTH_HEADER: str(len(head)), "Content-Type": "application/octet-stream"},
        header,
    )


def grpc_request(model: str, version: str, request: Request, streaming: bool) -> bytes:
    """A serialized ModelInferRequest; on a stream it asks for the flag-only final response,
    so the client knows when a decoupled model has finished answering."""
    from tritonclient.grpc import service_pb2

    msg = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    for t in request:
        msg.inputs.add(name=t.name, datatype=t.datatype, shape=t.shape)
        msg.raw_input_contents.append(t.data)
    if streaming:
        msg.parameters[EMPTY_FINAL].bool_param = True
    return bytes(msg.SerializeToString())


def grpc_sequence_suffix(sequence: Sequence) -> bytes:
    """Bytes that, appended to a serialized request, add its sequence parameters: protobuf
    parses concatenated messages as one merged message, so the encoded tensors are reused."""
    from tritonclient.grpc import service_pb2

    corrid, start, end = sequence
    msg = service_pb2.ModelInferRequest()
    msg.parameters["sequence_id"].int64_param = corrid
    msg.parameters["sequence_start"].bool_param = start
    msg.parameters["sequence_end"].bool_param = end
    return bytes(msg.SerializeToString())
