import json

import numpy as np

import triton_python_backend_utils as pb_utils


def stream_request(request):
    """The call to stream_until_cancelled, with this request's parameters."""
    return pb_utils.InferenceRequest(
        model_name="stream_until_cancelled",
        inputs=[pb_utils.Tensor("IN", np.array([0], np.int32))],
        requested_output_names=["OUT"],
        parameters=json.loads(request.parameters()),
    )


def read(responses, n):
    """Read n data responses, cancel, read to the end; the report as a response."""
    data, last = 0, None
    for response in responses:
        last = response
        if response.has_error() or not response.output_tensors():
            continue  # the last response: an error, or a flag-only final
        data += 1
        if data == n:
            responses.cancel()
    report = {"data": data, "error": None, "code": None}
    if last is not None and last.has_error():
        report["error"] = last.error().message()
        report["code"] = int(last.error().code())
    responses.cancel()  # after the end: nothing to cancel, no error
    out = np.array([json.dumps(report).encode()], dtype=np.object_)
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)])


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            responses.append(read(stream_request(request).exec(decoupled=True), n))
        return responses
