"""SUM = A + B, DIFF = A - B, SEEN = what the request carried besides its tensors."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "B").as_numpy()
            params = json.loads(request.parameters() or "{}")
            seen = {
                "correlation_id": request.correlation_id(),
                "flags": request.flags(),
                "timeout": request.timeout(),
                "parameters": params,
            }
            outputs = [
                pb_utils.Tensor("SUM", a + b),
                pb_utils.Tensor("DIFF", a - b),
                pb_utils.Tensor("SEEN", np.array([json.dumps(seen).encode()], dtype=np.object_)),
            ]
            echo = {k: v for k, v in params.items() if k.startswith("echo_")}
            responses.append(pb_utils.InferenceResponse(outputs, parameters=echo or None))
        return responses
