"""Requests to the SageMaker and Vertex AI endpoints, shared by their tests and the
differential test: bodies made by tritonclient's own helpers (``generate_request_body``,
``parse_response_body``: what Triton documents for SageMaker clients), sent raw, since those
endpoints have paths and content types of their own."""

from __future__ import annotations

import http.client
from dataclasses import dataclass
from typing import Any

import numpy as np
import tritonclient.http as httpclient

SAGEMAKER_MIME = "application/vnd.sagemaker-triton.binary+json;json-header-size="
VERTEX_MIME = "application/vnd.vertex-ai-triton.binary+json;json-header-size="
REDIRECT = "X-Vertex-Ai-Triton-Redirect"
A = np.array([1.0, 2.0], np.float32)
B = np.array([3.0, 4.0], np.float32)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")


def call(
    url: str,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    host, port = url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, data)
    finally:
        conn.close()


def add_body(binary: bool) -> tuple[bytes, int | None]:
    """cloud_add's request (A, B; SUM binary when ``binary``, NAME as JSON), and the JSON
    length when it carries binary tensors."""
    inputs = []
    for name, value in (("A", A), ("B", B)):
        tensor = httpclient.InferInput(name, list(value.shape), "FP32")
        tensor.set_data_from_numpy(value, binary_data=binary)
        inputs.append(tensor)
    outputs = [
        httpclient.InferRequestedOutput("SUM", binary_data=binary),
        httpclient.InferRequestedOutput("NAME", binary_data=False),
    ]
    body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs, outputs)
    return body, json_size


def infer(url: str, path: str, mime: str, binary: bool, **headers: str) -> Any:
    """An inference of cloud_add at ``path`` with ``mime``'s binary content type; returns
    (the answer, tritonclient's InferResult of it or None)."""
    body, json_size = add_body(binary)
    sent = dict(headers)
    if json_size is not None:
        sent["Content-Type"] = f"{mime}{json_size}"
    answer = call(url, "POST", path, body, sent)
    if answer.status != 200:
        return answer, None
    length = None
    if answer.content_type.startswith(mime):
        length = int(answer.content_type[len(mime) :])
    elif "inference-header-content-length" in answer.headers:
        length = int(answer.headers["inference-header-content-length"])
    result = httpclient.InferenceServerClient.parse_response_body(answer.body, header_length=length)
    return answer, result


def model_name(result: Any) -> str:
    """The NAME output of cloud_add's response (the model that answered)."""
    (value,) = result.as_numpy("NAME").tolist()
    return value.decode() if isinstance(value, bytes) else str(value)
